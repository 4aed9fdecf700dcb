//! The `leasehold` binary against a master watched by sentinels:
//! `redis+sentinel://` URLs and `--replicas`.

use leasehold_testkit::Sentinels;

mod common;

use common::{leasehold, stderr};

#[test]
fn replicas_acknowledge_or_the_grant_is_undone_with_74() {
    let mut group = Sentinels::start(1, 1);
    let url = group.url();
    let out = leasehold(&url, &["run", "job", "--replicas", "1", "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = leasehold(&url, &["acquire", "job", "--replicas", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let token = printed.split_whitespace().next().unwrap().to_owned();
    let extend = ["extend", "job", &token, "--lease", "20s", "--replicas", "1"];
    let out = leasehold(&url, &extend);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = leasehold(&url, &["release", "job", &token]);
    assert!(out.status.success(), "{}", stderr(&out));

    group.stop_replica(0);
    let out = leasehold(
        &url,
        &[
            "acquire",
            "job",
            "--no-wait",
            "--replicas",
            "1",
            "--replica-timeout",
            "200ms",
        ],
    );
    assert_eq!(out.status.code(), Some(74), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("only 0 of the 1 replica asked for acknowledged it within 200ms"),
        "{}",
        stderr(&out)
    );
    let out = leasehold(
        &url,
        &[
            "run",
            "job",
            "--wait",
            "1s",
            "--replicas",
            "1",
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(74), "{}", stderr(&out));
    let out = leasehold(&url, &["inspect", "job", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["held"], false, "nothing is left held: {info}");
}
