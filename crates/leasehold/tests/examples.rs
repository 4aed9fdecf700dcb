//! Every example in `examples/` runs to success against a fresh server.

use std::path::PathBuf;
use std::process::Command;

use leasehold_testkit::RedisServer;

/// Cargo builds the examples next to the test binaries' `deps` folder.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "example {name} is not built at {}: `cargo test` builds examples unless a single test target is picked; run `cargo build --examples` first",
        path.display()
    );
    path
}

fn run(name: &str) -> String {
    let server = RedisServer::start();
    let out = Command::new(example(name))
        .env("LEASEHOLD_URL", server.url())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn cache_rebuild_rebuilds_once() {
    let out = run("cache_rebuild");
    assert!(out.contains("rebuilt 1 time(s)"), "{out}");
}

#[test]
fn fenced_writes_refuse_the_stale_holder() {
    let out = run("fenced_writes");
    assert!(out.contains("A's stale write accepted: false"), "{out}");
    assert!(out.contains("the record holds: \"written by B\""), "{out}");
}

#[test]
fn run_once_draws_once_across_five_processes() {
    let out = run("run_once");
    assert!(out.contains("the draw was made 1 time(s)"), "{out}");
    assert!(out.contains("host-5: already drawn tonight"), "{out}");
    assert_eq!(out.matches("drew the numbers").count(), 1, "{out}");
}

#[test]
fn leader_election_fails_over_to_the_standby() {
    let out = run("leader_election");
    assert!(out.contains("host-a leads"), "{out}");
    assert!(out.contains("host-a was killed"), "{out}");
    assert!(out.contains("host-b took over"), "{out}");
}

#[test]
fn prometheus_exports_the_lock_metrics() {
    let out = run("prometheus");
    for line in [
        "leasehold_acquisitions_total{primitive=\"mutex\"} 1",
        "leasehold_acquisitions_total{primitive=\"fair_mutex\"} 1",
        "leasehold_acquire_timeouts_total{primitive=\"fair_mutex\"} 1",
        "leasehold_held_leases{primitive=\"mutex\"} 0",
    ] {
        assert!(out.contains(line), "{line} is not in:\n{out}");
    }
    assert!(out.contains("leasehold_renewals_total"), "{out}");
}

#[test]
fn blocking_threads_lose_no_update_and_see_a_lost_lease() {
    let out = run("blocking");
    assert!(
        out.contains("4 threads added 25 each: the counter reads 100"),
        "{out}"
    );
    assert!(
        out.contains("the holder stopped writing: lease lost"),
        "{out}"
    );
    assert!(out.contains("release says:"), "{out}");
}

#[test]
fn redlock_takes_turns_with_growing_fences() {
    let masters = leasehold_testkit::Masters::start(3);
    let out = Command::new(example("redlock"))
        .env("LEASEHOLD_REDLOCK", masters.urls().join(","))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "redlock failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("held on 2 of them"), "{stdout}");
    assert!(stdout.contains("6 entries, every fence larger"), "{stdout}");
    assert!(stdout.contains("finds it busy: true"), "{stdout}");
}
