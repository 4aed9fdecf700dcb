//! `--redlock URL,URL,…`: the commands on independent masters.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::Masters;

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// `leasehold --redlock URLS ARGS…`, with the environment's URLs removed.
fn command(urls: &[String], args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("--redlock")
        .arg(urls.join(","))
        .args(args)
        .env_remove("LEASEHOLD_URL")
        .env_remove("REDIS_URL")
        .env_remove("LEASEHOLD_REDLOCK")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn leasehold(urls: &[String], args: &[&str]) -> Output {
    command(urls, args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn inspect(urls: &[String], name: &str) -> serde_json::Value {
    let out = leasehold(urls, &["inspect", name, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("gave up waiting for {what}");
}

#[test]
fn acquire_inspect_extend_release_on_every_master() {
    let masters = Masters::start(3);
    let urls = masters.urls();
    let out = leasehold(&urls, &["acquire", "job", "--lease", "30s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    let mut words = printed.split_whitespace();
    let (token, fence) = (words.next().unwrap().to_owned(), words.next().unwrap());
    let fence: u64 = fence.parse().unwrap();
    let info = inspect(&urls, "job");
    assert_eq!(info["held"], true);
    // The largest counter of any master: a master that granted after the
    // majority counted its own clock.
    assert!(info["last_fence"].as_u64().unwrap() >= fence, "{info}");
    let per_master = info["masters"].as_array().unwrap();
    assert_eq!(per_master.len(), 3);
    // A majority at least (a master that answers after it is not waited for).
    assert!(
        per_master.iter().filter(|m| m["held"] == true).count() >= 2,
        "{info}"
    );
    // A second taker finds it busy.
    let busy = leasehold(&urls, &["acquire", "job", "--no-wait"]);
    assert_eq!(busy.status.code(), Some(75), "{}", text(&busy.stderr));
    let out = leasehold(&urls, &["extend", "job", &token, "--lease", "60s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = leasehold(&urls, &["release", "job", &token, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let released: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(released["held_on"].as_u64().unwrap() >= 2, "{released}");
    assert_eq!(inspect(&urls, "job")["held"], false);
    // The human view names every master.
    let out = leasehold(&urls, &["inspect", "job"]);
    let shown = text(&out.stdout);
    for url in &urls {
        let address = url.trim_start_matches("redis://");
        assert!(shown.contains(address), "{shown}");
    }
}

#[test]
fn the_masters_come_from_the_environment_too() {
    let masters = Masters::start(3);
    let out = Command::new(BIN)
        .args(["acquire", "job", "--json"])
        .env_remove("LEASEHOLD_URL")
        .env_remove("REDIS_URL")
        .env("LEASEHOLD_REDLOCK", masters.urls().join(","))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let taken: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let token = taken["token"].as_str().unwrap();
    let holding = masters
        .servers()
        .iter()
        .filter(|server| {
            server
                .command(&["GET", "leasehold:{job}"])
                .unwrap()
                .starts_with(token)
        })
        .count();
    // A majority at least: a master that answers after the majority may
    // not be waited for.
    assert!(holding >= 2, "held on {holding} of 3");
}

#[test]
fn other_kinds_and_replicas_are_refused() {
    let masters = Masters::start(3);
    let urls = masters.urls();
    for extra in [&["--fair"][..], &["--semaphore", "2"], &["--replicas", "1"]] {
        let mut args = vec!["acquire", "job"];
        args.extend_from_slice(extra);
        let out = leasehold(&urls, &args);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("--redlock"),
            "{}",
            text(&out.stderr)
        );
    }
    // The demo brings its own server.
    let out = leasehold(&urls, &["demo", "--seconds", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no --redlock"),
        "{}",
        text(&out.stderr)
    );
    let out = leasehold(&urls[..2], &["acquire", "job"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("at least 3"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_majority_down_exits_unavailable_naming_the_quorum() {
    let mut masters = Masters::start(3);
    masters.server(0).stop();
    masters.server(1).stop();
    let out = leasehold(&masters.urls(), &["acquire", "job"]);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("quorum not reached"),
        "{}",
        text(&out.stderr)
    );
}

fn alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

fn written(path: &Path) -> String {
    eventually("the command to write", || {
        std::fs::read_to_string(path).is_ok_and(|s| s.ends_with('\n'))
    });
    std::fs::read_to_string(path).unwrap().trim().to_owned()
}

fn run(urls: &[String], dir: &Path, tag: &str) -> (Child, u32, u64) {
    let file = dir.join(tag);
    let script = format!(
        "echo \"$$ $LEASEHOLD_FENCE\" > '{}'; exec sleep 60",
        file.display()
    );
    let runner = command(
        urls,
        &["run", "job", "--lease", "2s", "--", "sh", "-c", &script],
    )
    .spawn()
    .unwrap();
    let line = written(&file);
    let (pid, fence) = line.split_once(' ').unwrap();
    (runner, pid.parse().unwrap(), fence.parse().unwrap())
}

/// A runner killed with SIGKILL takes its command with it; the lock is
/// then free once its lease runs out, and the next holder's fence is larger.
#[test]
fn run_under_kill_9() {
    let masters = Masters::start(3);
    let urls = masters.urls();
    let dir = tempfile::tempdir().unwrap();
    let (mut runner, pid, fence) = run(&urls, dir.path(), "first");
    assert!(alive(pid));
    assert_eq!(inspect(&urls, "job")["held"], true);
    runner.kill().unwrap();
    runner.wait().unwrap();
    eventually("the orphaned command to die", || !alive(pid));
    eventually("the lease to run out", || {
        inspect(&urls, "job")["held"] == false
    });
    let (mut next, next_pid, next_fence) = run(&urls, dir.path(), "second");
    assert!(next_fence > fence, "{next_fence} after {fence}");
    next.kill().unwrap();
    next.wait().unwrap();
    eventually("the second command to die", || !alive(next_pid));
}

/// Five masters, the last two behind proxies that hold their replies back
/// past the per-node deadline, with fence counters far ahead of every
/// clock: those two grant after the majority decided the fence, and keep
/// their own, larger ones. `inspect` shows the fence the holder was given,
/// and says which masters count another and why.
#[test]
fn inspect_shows_the_holders_own_fence() {
    let masters = Masters::start(5);
    let slow: Vec<leasehold_testkit::FaultProxy> = masters.servers()[3..]
        .iter()
        .map(|server| {
            server
                .command(&["SET", "leasehold:{job}:fence", "5000000000000000"])
                .unwrap();
            let proxy = leasehold_testkit::FaultProxy::start(server.addr());
            proxy.set_reply_latency(Duration::from_millis(300));
            proxy
        })
        .collect();
    let mut urls = masters.urls()[..3].to_vec();
    urls.extend(slow.iter().map(|proxy| proxy.url()));
    let out = leasehold(&urls, &["acquire", "job", "--lease", "30s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    let fence: u64 = printed.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(
        fence < 5_000_000_000_000_000,
        "the fast majority's: {fence}"
    );

    let info = inspect(&urls, "job");
    assert_eq!(info["held"], true, "{info}");
    assert_eq!(info["last_fence"], fence, "{info}");
    assert_eq!(info["holders"][0]["fence"], fence, "{info}");
    let out = leasehold(&urls, &["inspect", "job"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains(&format!("last fence:      {fence}\n")),
        "{shown}"
    );
    assert!(shown.contains(&format!(", fence {fence}\n")), "{shown}");
    let own: Vec<&str> = shown
        .lines()
        .filter(|line| line.contains("granted after the majority"))
        .collect();
    for line in &own {
        assert!(line.contains("5000000000000001"), "{shown}");
    }
    assert!(
        !own.is_empty() && own.len() <= 2,
        "the late masters are named: {shown}"
    );
}
