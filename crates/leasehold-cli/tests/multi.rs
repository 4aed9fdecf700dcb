//! `leasehold run NAME NAME … -- CMD`: several locks, all or none, against a
//! real redis-server.

use std::process::Child;
use std::time::Duration;

use leasehold_testkit::{unreachable_url, RedisServer};
use serde_json::Value;

mod common;

use common::{leasehold, spawn, stderr, stdout};

const USAGE: i32 = 2;
const BUSY: i32 = 75;
const LOST: i32 = 76;

/// Waits (bounded) for a condition that no signal announces.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..1500 {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("gave up waiting for {what}");
}

fn inspect(url: &str, name: &str) -> Value {
    let out = leasehold(url, &["inspect", name, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_name_gets_its_fence_in_the_order_given() {
    let server = RedisServer::start();
    let url = server.url();
    // Given against the order they are taken in.
    let out = leasehold(
        &url,
        &[
            "run",
            "zeta",
            "alpha",
            "--",
            "sh",
            "-c",
            "echo $LEASEHOLD_FENCE_1 $LEASEHOLD_FENCE_2; \
             echo $LEASEHOLD_FENCE $LEASEHOLD_NAME $LEASEHOLD_NAME_1 $LEASEHOLD_NAME_2",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 2, "{text}");
    let zeta = inspect(&url, "zeta");
    let alpha = inspect(&url, "alpha");
    assert_eq!(lines[0][0], zeta["last_fence"].to_string(), "{text}");
    assert_eq!(lines[0][1], alpha["last_fence"].to_string(), "{text}");
    assert_eq!(lines[1], [lines[0][0], "zeta", "zeta", "alpha"], "{text}");
    assert_eq!(zeta["held"], false);
    assert_eq!(alpha["held"], false);
}

#[test]
fn one_name_sets_the_numbered_variables_too() {
    let server = RedisServer::start();
    let out = leasehold(
        &server.url(),
        &[
            "run",
            "job",
            "--",
            "sh",
            "-c",
            "echo $LEASEHOLD_FENCE $LEASEHOLD_FENCE_1 $LEASEHOLD_NAME_1 ${LEASEHOLD_FENCE_2-unset}",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let words: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(words.len(), 4, "{text}");
    assert_eq!(words[0], words[1]);
    assert_eq!(&words[2..], ["job", "unset"]);
}

#[test]
fn json_lists_every_name_and_fence() {
    let server = RedisServer::start();
    let url = server.url();
    let out = leasehold(&url, &["--json", "run", "b", "a", "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lock: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(lock["name"], "b");
    assert_eq!(lock["names"], serde_json::json!(["b", "a"]));
    assert_eq!(lock["fence"], lock["fences"][0]);
    assert_eq!(lock["fences"][0], inspect(&url, "b")["last_fence"]);
    assert_eq!(lock["fences"][1], inspect(&url, "a")["last_fence"]);
    assert_eq!(lock["lease_held"], true);
}

#[test]
fn a_busy_name_exits_75_and_leaves_the_others_free() {
    let server = RedisServer::start();
    let url = server.url();
    let out = leasehold(&url, &["acquire", "b", "--lease", "60s"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let token = stdout(&out).split_whitespace().next().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let touch = format!("touch '{}'", ran.display());
    for wait in [&["--no-wait"][..], &["--wait", "300ms"][..]] {
        // "a" is taken first, then given back when "b" is busy.
        let mut args = vec!["run", "a", "b", "c"];
        args.extend_from_slice(wait);
        args.extend_from_slice(&["--", "sh", "-c", &touch]);
        let out = leasehold(&url, &args);
        assert_eq!(out.status.code(), Some(BUSY), "{}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("leasehold: lock \"b\" "), "{err}");
        assert!(err.contains("held by pid"), "{err}");
        assert!(!ran.exists(), "the command ran without every lock");
        for name in ["a", "c"] {
            assert_eq!(inspect(&url, name)["held"], false, "{name} is held");
        }
    }
    let out = leasehold(
        &url,
        &["--json", "run", "a", "b", "--no-wait", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(BUSY));
    let failure: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(failure["error"], "busy");
    assert!(leasehold(&url, &["release", "b", &token]).status.success());
}

#[test]
fn a_lease_lost_on_any_name_ends_the_run_with_76() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let script = format!("touch '{}'; sleep 60", ready.display());
    let runner = spawn(
        &url,
        &[
            "run", "a", "b", "--lease", "600ms", "--", "sh", "-c", &script,
        ],
    );
    eventually("the command to start", || ready.exists());
    assert!(leasehold(&url, &["force-release", "b"]).status.success());
    let out = runner.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(LOST), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("lease on \"b\" lost"), "{err}");
    assert_eq!(inspect(&url, "a")["held"], false);
}

#[test]
fn runs_naming_the_same_locks_in_opposite_orders_never_deadlock() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("counter");
    std::fs::write(&file, "0\n").unwrap();
    let script = format!(
        "n=$(cat '{0}'); sleep 0.02; echo $((n + 1)) > '{0}'",
        file.display()
    );
    // A deadlock would hold the waits to their bound: exit 75.
    let runners: Vec<Child> = (0..12)
        .map(|i| {
            let names = if i % 2 == 0 { ["x", "y"] } else { ["y", "x"] };
            spawn(
                &url,
                &[
                    "run", names[0], names[1], "--wait", "2m", "--", "sh", "-c", &script,
                ],
            )
        })
        .collect();
    for runner in runners {
        let out = runner.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let count = std::fs::read_to_string(&file).unwrap();
    assert_eq!(count.trim(), "12", "an update was lost");
}

#[test]
fn kind_flags_apply_to_every_name() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let script = format!("touch '{}'; sleep 60", ready.display());
    let mut reader = spawn(
        &url,
        &["run", "cfg", "data", "--read", "--", "sh", "-c", &script],
    );
    eventually("the reader to start", || ready.exists());
    for name in ["cfg", "data"] {
        assert_eq!(inspect(&url, name)["held"], true, "{name}");
    }
    // Another reader of both gets in; a writer of either does not.
    let out = leasehold(
        &url,
        &["run", "data", "cfg", "--read", "--no-wait", "--", "true"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = leasehold(&url, &["run", "data", "--write", "--no-wait", "--", "true"]);
    assert_eq!(out.status.code(), Some(BUSY), "{}", stderr(&out));
    reader.kill().unwrap();
    reader.wait().unwrap();
}

#[test]
fn a_name_given_twice_is_a_usage_error() {
    let out = leasehold(&unreachable_url(), &["run", "a", "b", "a", "--", "true"]);
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("\"a\" is given twice"), "{err}");
    let out = leasehold(&unreachable_url(), &["run", "a", "", "--", "true"]);
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
}

#[test]
fn the_help_tells_of_several_names() {
    let out = leasehold(&unreachable_url(), &["run", "--help"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let help = stdout(&out);
    assert!(help.contains("<NAME>..."), "{help}");
    assert!(help.contains("LEASEHOLD_FENCE_1"), "{help}");
    assert!(help.contains("all or none"), "{help}");
}
