//! The `leasehold` binary on one server and on a Redis Cluster: `inspect`
//! and `watch` name the server that keeps each lock.

use std::process::{Command, Output, Stdio};

use leasehold_testkit::{RedisCluster, RedisServer};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

fn leasehold(url: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("LEASEHOLD_URL")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn succeeded(out: Output) -> String {
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

/// `host:port`, as a server is named.
fn addr(server: &RedisServer) -> String {
    format!("127.0.0.1:{}", server.port())
}

fn inspect_json(url: &str, name: &str) -> Value {
    serde_json::from_str(&succeeded(leasehold(url, &["inspect", name, "--json"]))).unwrap()
}

fn watch_once_json(url: &str, names: &[&str]) -> Vec<Value> {
    let mut args = vec!["watch", "--once", "--json"];
    args.extend(names);
    succeeded(leasehold(url, &args))
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn inspect_and_watch_name_the_one_server() {
    let server = RedisServer::start();
    let url = server.url();
    succeeded(leasehold(&url, &["acquire", "job", "--lease", "1m"]));
    for name in ["job", "free"] {
        assert_eq!(inspect_json(&url, name)["server"], addr(&server));
    }
    let text = succeeded(leasehold(&url, &["inspect", "job"]));
    let line = format!("server:          {}\n", addr(&server));
    assert!(text.contains(&line), "{text}");

    for lock in watch_once_json(&url, &["job", "free"]) {
        assert_eq!(lock["server"], addr(&server), "{lock}");
    }
    let table = succeeded(leasehold(&url, &["watch", "--once", "job"]));
    let mut rows = table.lines();
    assert!(rows.next().unwrap().ends_with("  server"), "{table}");
    let row = rows.next().unwrap();
    assert!(
        row.starts_with("job ") && row.ends_with(&addr(&server)),
        "{table}"
    );
}

/// A lock name whose keys live on `shard`'s master.
fn name_on(cluster: &RedisCluster, shard: usize) -> String {
    let master = cluster.master(shard).port();
    (0..10_000)
        .map(|i| format!("job-{i}"))
        .find(|name| {
            cluster
                .master_for_key(&format!("leasehold:{{{name}}}"))
                .port()
                == master
        })
        .expect("some name lands on every shard")
}

#[test]
fn inspect_and_watch_name_the_master_of_each_lock_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    // One node as the URL: the locks of the others are found through it.
    let url = cluster.urls()[0].clone();
    let names: Vec<String> = (0..3).map(|shard| name_on(&cluster, shard)).collect();
    for name in &names[1..] {
        succeeded(leasehold(&url, &["acquire", name, "--lease", "1m"]));
    }
    let mut seen = Vec::new();
    for (shard, name) in names.iter().enumerate() {
        let info = inspect_json(&url, name);
        assert_eq!(info["server"], addr(cluster.master(shard)), "{info}");
        assert_eq!(info["held"], shard > 0, "{info}");
        seen.push(info["server"].clone());
        let text = succeeded(leasehold(&url, &["inspect", name]));
        let line = format!("server:          {}\n", addr(cluster.master(shard)));
        assert!(text.contains(&line), "{text}");
    }
    seen.dedup();
    assert_eq!(
        seen.len(),
        3,
        "names on three shards, three masters: {seen:?}"
    );

    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let locks = watch_once_json(&url, &names);
    assert_eq!(locks.len(), 3);
    for (shard, lock) in locks.iter().enumerate() {
        assert_eq!(lock["name"], names[shard]);
        assert_eq!(lock["server"], addr(cluster.master(shard)), "{lock}");
    }
    let table = succeeded(leasehold(&url, &["watch", "--once", names[0], names[2]]));
    let rows: Vec<&str> = table.lines().skip(1).collect();
    assert!(rows[0].ends_with(&addr(cluster.master(0))), "{table}");
    assert!(rows[1].ends_with(&addr(cluster.master(2))), "{table}");
}
