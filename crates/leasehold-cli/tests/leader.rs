//! `leasehold leader` against a real redis-server.

use std::process::{Command, Output};

use leasehold_testkit::RedisServer;

fn leader(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("--url")
        .arg(url)
        .arg("leader")
        .args(args)
        .env_remove("LEASEHOLD_URL")
        .env_remove("REDIS_URL")
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn prints_the_current_leader() {
    let server = RedisServer::start();
    let url = server.url();
    let out = leader(&url, &["scheduler"]);
    assert_eq!(stdout(&out), "");
    assert!(String::from_utf8_lossy(&out.stderr).contains("nobody leads"));
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&leader(&url, &["scheduler", "--json"]))).unwrap();
    assert_eq!(json["leader"], serde_json::Value::Null);

    let client = leasehold::Client::open(&url).unwrap();
    let leadership = client
        .election("scheduler")
        .unwrap()
        .campaign("host a:8080")
        .await
        .unwrap();
    let fence = leadership.fence();
    assert_eq!(
        stdout(&leader(&url, &["scheduler"])),
        format!("{fence} host a:8080\n")
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&leader(&url, &["scheduler", "--json"]))).unwrap();
    assert_eq!(json["name"], "scheduler");
    assert_eq!(json["leader"]["value"], "host a:8080");
    assert_eq!(json["leader"]["fence"], fence);

    leadership.resign().await.unwrap();
    assert_eq!(stdout(&leader(&url, &["scheduler"])), "");
}

#[test]
fn a_bad_name_is_a_usage_error() {
    let out = leader("redis://127.0.0.1:1", &[""]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
