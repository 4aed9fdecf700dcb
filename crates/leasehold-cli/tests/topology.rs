//! The `leasehold` binary on one server and on a Redis Cluster: `inspect`
//! and `watch` name the server that keeps each lock, and `demo --cluster`
//! runs on a private cluster that it starts and stops.

use std::process::{Command, Output, Stdio};

use leasehold_testkit::{RedisCluster, RedisServer};
use serde_json::Value;

mod common;

use common::{leasehold, spawn, stderr, stdout, Lines, BIN};

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

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // A zombie has exited; only its parent's reaping is left.
        Ok(stat) => !stat.contains(") Z "),
        Err(_) => false,
    }
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

/// `leasehold demo ARGS`, with no `--url`: it brings its own servers.
fn demo(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("demo")
        .args(args)
        .env_remove("LEASEHOLD_URL")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The pids of the demo's cluster, from the line that announces it.
fn cluster_pids(stderr: &str) -> Vec<u32> {
    let (_, rest) = stderr
        .split_once("(redis-server pids ")
        .unwrap_or_else(|| panic!("no cluster announced in: {stderr}"));
    let pids = rest.split(')').next().unwrap();
    pids.split(", ").map(|pid| pid.parse().unwrap()).collect()
}

#[test]
fn demo_on_a_private_cluster_loses_no_update_and_leaves_nothing_running() {
    let out = demo(&[
        "--cluster",
        "--seconds",
        "1",
        "--workers",
        "3",
        "--fair",
        "--json",
    ]);
    let summary: Value = serde_json::from_str(&succeeded(out.clone())).unwrap();
    let pids = cluster_pids(&stderr(&out));
    assert_eq!(pids.len(), 3, "{}", stderr(&out));
    for pid in pids {
        assert!(!alive(pid), "node {pid} left running");
    }
    assert_eq!(summary["cluster"], true, "{summary}");
    assert_eq!(summary["fair"], true, "{summary}");
    let acquisitions = summary["acquisitions"].as_u64().unwrap();
    assert!(acquisitions > 0, "{summary}");
    assert_eq!(summary["counter"], acquisitions, "{summary}");
    assert_eq!(summary["lost_updates"], 0, "{summary}");
    assert_eq!(summary["worker_acquisitions"].as_array().unwrap().len(), 3);
    let nodes = summary["cluster_nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3, "{summary}");
    assert!(nodes.contains(&summary["server"]), "{summary}");

    let out = demo(&["--cluster", "--seconds", "1", "--workers", "2"]);
    let text = succeeded(out.clone());
    for pid in cluster_pids(&stderr(&out)) {
        assert!(!alive(pid), "node {pid} left running");
    }
    assert!(
        text.contains("the master of the lock's hash slot"),
        "{text}"
    );
    assert!(
        text.contains("cluster       3 masters: 127.0.0.1:"),
        "{text}"
    );
    assert!(text.contains("no update lost"), "{text}");
}

#[test]
fn demo_names_its_one_server() {
    let out = demo(&["--seconds", "1", "--workers", "2", "--json"]);
    let summary: Value = serde_json::from_str(&succeeded(out)).unwrap();
    assert_eq!(summary["cluster"], false, "{summary}");
    assert_eq!(summary["cluster_nodes"], serde_json::json!([]), "{summary}");
    assert!(
        summary["server"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:"),
        "{summary}"
    );
}

/// Waits (bounded) until the demo has announced its cluster on stderr, and
/// returns the nodes' pids; the rest of stderr is left unread.
fn announced_pids(demo: &mut std::process::Child) -> Vec<u32> {
    use std::io::{BufRead, BufReader};
    let mut line = String::new();
    BufReader::new(demo.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    cluster_pids(&line)
}

fn spawn_demo(args: &[&str]) -> std::process::Child {
    Command::new(BIN)
        .arg("demo")
        .args(args)
        .env_remove("LEASEHOLD_URL")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn send(pid: u32, signal: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    let sent = unsafe { libc::kill(i32::try_from(pid).unwrap(), signal) };
    assert_eq!(sent, 0, "{}", std::io::Error::last_os_error());
}

/// A signal to the demo stops the cluster with it: SIGINT after the
/// summary, SIGKILL through the nodes' parent-death signal.
#[test]
fn a_demo_stopped_by_a_signal_takes_its_cluster_with_it() {
    let mut demo = spawn_demo(&["--cluster", "--seconds", "600", "--json"]);
    let pids = announced_pids(&mut demo);
    send(demo.id(), libc::SIGINT);
    let out = demo.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(128 + libc::SIGINT),
        "{}",
        stderr(&out)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["interrupted"], true, "{summary}");
    assert_eq!(summary["lost_updates"], 0, "{summary}");
    for pid in pids {
        assert!(!alive(pid), "node {pid} left running");
    }

    let mut demo = spawn_demo(&["--cluster", "--seconds", "600"]);
    let pids = announced_pids(&mut demo);
    // A node works in its directory, which a killed demo cannot remove.
    let dirs: Vec<_> = pids
        .iter()
        .map(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap())
        .collect();
    demo.kill().unwrap();
    demo.wait().unwrap();
    for pid in pids {
        let mut waited = 0;
        while alive(pid) && waited < 500 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            waited += 1;
        }
        assert!(!alive(pid), "node {pid} outlived the killed demo");
    }
    for dir in dirs {
        assert!(dir.starts_with(std::env::temp_dir()), "{}", dir.display());
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The token and fence `acquire` printed, with a replica's acknowledgement:
/// the lock is on the replica that a failover promotes.
fn acquire_replicated(url: &str, name: &str) -> (String, u64) {
    let text = succeeded(leasehold(
        url,
        &[
            "acquire",
            name,
            "--lease",
            "2m",
            "--replicas",
            "1",
            "--no-wait",
        ],
    ));
    let mut words = text.split_whitespace();
    let token = words.next().unwrap().to_owned();
    (token, words.next().unwrap().parse().unwrap())
}

/// Waits (bounded) until some watcher is registered on `name` at `server`.
fn watched_on(server: &RedisServer, name: &str) {
    let key = format!("leasehold:{{{name}}}:watch");
    for _ in 0..1500 {
        if server.command(&["EXISTS", &key]).unwrap().trim() == "1" {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("nobody came to watch {name}");
}

/// The master of a lock's shard killed (SIGKILL) while `watch` and `watch
/// --until-free` look at the lock: both go on through the failover, on
/// the promoted replica, and see the release that comes after it.
#[test]
fn watch_rides_out_the_kill_of_the_locks_master() {
    let mut cluster = RedisCluster::start(3, 1);
    let url = cluster.urls().join(",");
    let name = name_on(&cluster, 1);
    let (token, fence) = acquire_replicated(&url, &name);
    let mut until_free = spawn(
        &url,
        &["--json", "watch", "--until-free", "--wait", "5m", &name],
    );
    let mut ends = Lines::of(until_free.stdout.take().unwrap());
    let until_free_err = Lines::of(until_free.stderr.take().unwrap());
    let mut live = spawn(&url, &["watch", &name]);
    let mut view = Lines::of(live.stdout.take().unwrap());
    let live_err = Lines::of(live.stderr.take().unwrap());
    let held = view.until("about the lock", |_| true);
    assert!(held.contains(": held"), "{held}");
    watched_on(cluster.master(1), &name);

    cluster.kill_master(1);
    assert!(
        until_free.try_wait().unwrap().is_none(),
        "watch --until-free ended in the failover: {:#?}",
        until_free_err.rest()
    );
    assert!(
        live.try_wait().unwrap().is_none(),
        "watch ended in the failover: {:#?}",
        live_err.rest()
    );
    succeeded(leasehold(&url, &["release", &name, &token]));

    let ended: Value = serde_json::from_str(&ends.until("with the end", |_| true)).unwrap();
    assert_eq!(
        (ended["ended"].as_str(), ended["fence"].as_u64()),
        (Some("released"), Some(fence)),
        "{ended}"
    );
    let free: Value = serde_json::from_str(&ends.until("when free", |_| true)).unwrap();
    assert_eq!(free["free"], true, "{free}");
    let status = until_free.wait().unwrap();
    assert!(status.success(), "{:#?}", until_free_err.rest());

    let promoted = addr(cluster.master(1));
    let free = view.until("with the lock free", |line| line.contains(": free"));
    assert!(free.contains(&promoted), "on the promoted master: {free}");
    common::interrupt(&live);
    let status = live.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{:#?}", live_err.rest());
}
