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
