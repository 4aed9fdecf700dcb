//! `leasehold watch --until-free`: a shell waits until locks others hold
//! are free, and learns how each lease ended, against a real redis-server.

use std::io::{BufRead, BufReader};
use std::time::Duration;

mod common;

use common::{leasehold, spawn, stderr, stdout, Lines};
use leasehold_testkit::RedisServer;
use serde_json::Value;

fn acquire(url: &str, name: &str, lease: &str) -> (String, u64) {
    let out = leasehold(url, &["acquire", name, "--lease", lease, "--no-wait"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let mut parts = text.split_whitespace();
    let token = parts.next().unwrap().to_owned();
    let fence = parts.next().unwrap().parse().unwrap();
    (token, fence)
}

/// Waits (bounded) until some watcher is registered on `name`.
fn watched(server: &RedisServer, name: &str) {
    let key = format!("leasehold:{{{name}}}:watch");
    for _ in 0..1500 {
        if server.command(&["EXISTS", &key]).unwrap().trim() == "1" {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nobody came to watch {name}");
}

/// No watcher is registered on `name` any more: the watch left nothing.
fn assert_unwatched(server: &RedisServer, name: &str) {
    let key = format!("leasehold:{{{name}}}:watch");
    assert_eq!(server.command(&["EXISTS", &key]).unwrap().trim(), "0");
}

#[test]
fn until_free_reports_the_release_and_exits_once_every_lock_is_free() {
    let server = RedisServer::start();
    let url = server.url();
    let (token, fence) = acquire(&url, "job", "1m");
    let mut watch = spawn(&url, &["--json", "watch", "--until-free", "job", "idle"]);
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    // A free lock is done at once.
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["name"], "idle");
    assert_eq!(first["free"], true);
    watched(&server, "job");
    let out = leasehold(&url, &["release", "job", &token]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ended: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(ended["name"], "job");
    assert_eq!(ended["ended"], "released");
    assert_eq!(ended["fence"], fence);
    assert!(ended["holder"]["pid"].is_u64(), "{ended}");
    let free: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(
        (free["name"].as_str(), free["free"].as_bool()),
        (Some("job"), Some(true))
    );
    assert!(watch.wait().unwrap().success());
    // The watcher left nothing behind.
    assert_unwatched(&server, "job");
}

#[test]
fn until_free_reports_an_expiry() {
    let server = RedisServer::start();
    let url = server.url();
    let (_, fence) = acquire(&url, "job", "3s");
    let watch = spawn(&url, &["watch", "--until-free", "job"]);
    watched(&server, "job");
    // The watch's first look registers it and reads the lock at once: if
    // the lock is still there now, that look saw the lease.
    let seen = server
        .command(&["EXISTS", "leasehold:{job}"])
        .unwrap()
        .trim()
        == "1";
    let out = watch.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    if seen {
        assert!(
            text.contains(&format!("lease with fence {fence} expired")),
            "{text}"
        );
    }
    assert!(text.trim_end().ends_with("\"job\": free"), "{text}");
}

#[test]
fn until_free_gives_up_after_its_wait_with_75() {
    let server = RedisServer::start();
    let url = server.url();
    acquire(&url, "job", "1m");
    let out = leasehold(&url, &["watch", "--until-free", "--wait", "300ms", "job"]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(stderr(&out).contains("\"job\""), "{}", stderr(&out));
    let out = leasehold(&url, &["watch", "--wait", "1s", "job"]);
    assert_eq!(out.status.code(), Some(2), "--wait needs --until-free");
}

#[test]
fn until_free_ended_by_ctrl_c_exits_130_and_unregisters() {
    let server = RedisServer::start();
    let url = server.url();
    acquire(&url, "job", "1m");
    let watch = spawn(&url, &["watch", "--until-free", "job"]);
    watched(&server, "job");
    let pid = libc::pid_t::try_from(watch.id()).unwrap();
    // SAFETY: kill(2) on the child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let out = watch.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert_unwatched(&server, "job");
}

/// A key at the lock's name that holds no lock is an error (exit 65) that
/// names what the key holds, not a lock reported free.
#[test]
fn until_free_refuses_a_key_that_holds_no_lock() {
    let server = RedisServer::start();
    let url = server.url();
    server
        .command(&["RPUSH", "leasehold:{job}", "not a lock"])
        .unwrap();
    let out = leasehold(&url, &["watch", "--until-free", "job"]);
    assert_eq!(out.status.code(), Some(65), "{}", stderr(&out));
    assert!(stderr(&out).contains("a Redis list"), "{}", stderr(&out));
    assert!(!stdout(&out).contains("free"), "{}", stdout(&out));
}

/// Redis killed (SIGKILL) and started again with its data, inside the
/// wait: the watch says Redis is not answering, goes on, and reports the
/// release that comes after the restart.
#[test]
fn until_free_rides_out_a_restart() {
    let mut server =
        RedisServer::start_with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let url = server.url();
    let (token, fence) = acquire(&url, "job", "1m");
    let mut watch = spawn(
        &url,
        &["--json", "watch", "--until-free", "--wait", "2m", "job"],
    );
    let mut out = Lines::of(watch.stdout.take().unwrap());
    let mut err = Lines::of(watch.stderr.take().unwrap());
    watched(&server, "job");
    server.stop();
    let outage = err.until("about the outage", |line| line.contains("not answering"));
    assert!(outage.contains("retrying"), "{outage}");
    assert!(outage.contains(&server.port().to_string()), "{outage}");
    server.restart();
    let out_after = leasehold(&url, &["release", "job", &token]);
    assert!(out_after.status.success(), "{}", stderr(&out_after));
    let ended: Value = serde_json::from_str(&out.until("with the end", |_| true)).unwrap();
    assert_eq!(ended["ended"], "released", "{ended}");
    assert_eq!(ended["fence"], fence, "{ended}");
    let free: Value = serde_json::from_str(&out.until("when free", |_| true)).unwrap();
    assert_eq!(free["free"], true, "{free}");
    let status = watch.wait().unwrap();
    let said = err.rest();
    assert!(status.success(), "{said:#?}");
    assert!(
        said.iter().any(|line| line.contains("answers again")),
        "{said:#?}"
    );
}

/// The live view off a terminal rides out a restart as well: it says
/// Redis is not answering, and shows the lock as Redis has it after.
#[test]
fn watch_rides_out_a_restart() {
    let mut server = RedisServer::start();
    let url = server.url();
    let mut watch = spawn(&url, &["watch", "job"]);
    let mut out = Lines::of(watch.stdout.take().unwrap());
    let mut err = Lines::of(watch.stderr.take().unwrap());
    let first = out.until("about the lock", |_| true);
    assert!(first.contains(": free"), "{first}");
    server.stop();
    let outage = err.until("about the outage", |line| line.contains("not answering"));
    assert!(outage.contains("retrying"), "{outage}");
    server.restart();
    let (_, fence) = acquire(&url, "job", "1m");
    let held = out.until("with the lock held", |line| line.contains(": held"));
    assert!(held.contains(&format!("last fence {fence}")), "{held}");
    common::interrupt(&watch);
    let status = watch.wait().unwrap();
    let said = err.rest();
    assert_eq!(status.code(), Some(0), "{said:#?}");
    assert!(
        said.iter().any(|line| line.contains("answers again")),
        "{said:#?}"
    );
}

/// A URL where no Redis ever answers ends the watch after the connect
/// timeout, with the reason, as a wait does.
#[test]
fn a_watch_that_never_reaches_redis_ends_after_the_connect_timeout() {
    let url = leasehold_testkit::unreachable_url();
    for args in [
        &["--connect-timeout", "1s", "watch", "--until-free", "job"][..],
        &["--connect-timeout", "1s", "watch", "job"],
    ] {
        let out = leasehold(&url, args);
        assert_eq!(out.status.code(), Some(69), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("without reaching redis once"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // A wait shorter than the connect timeout ends with the fault too, as
    // a lock's wait does, not as a lock still held.
    let out = leasehold(&url, &["watch", "--until-free", "--wait", "500ms", "job"]);
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    let said = stderr(&out);
    let last = said.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("leasehold: no answer from redis within 0.5s: cannot reach redis at"),
        "{said}"
    );
}
