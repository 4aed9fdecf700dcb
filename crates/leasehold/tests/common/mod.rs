#![allow(dead_code)]

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use leasehold::{Client, MutexGuard};
use leasehold_testkit::RedisServer;

mod topology;
// Not every test file runs on both topologies.
#[allow(unused_imports)]
pub(crate) use topology::{on_both_topologies, Servers, Topology};

pub(crate) fn client(server: &RedisServer) -> Client {
    Client::open(&server.url()).unwrap()
}

/// A client that gives up on a silent server quickly.
pub(crate) fn impatient(url: &str) -> Client {
    Client::builder(url)
        .command_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// A client whose locks use `lease` and, if `watchdog`, renew it.
pub(crate) fn client_with(server: &RedisServer, lease: Duration, watchdog: bool) -> Client {
    Client::builder(server.url())
        .lease(lease)
        .watchdog(watchdog)
        .build()
        .unwrap()
}

/// Takes the lock "job" with a client of its own.
pub(crate) async fn hold(server: &RedisServer, lease: Duration, watchdog: bool) -> MutexGuard {
    client_with(server, lease, watchdog)
        .mutex("job")
        .unwrap()
        .acquire()
        .await
        .unwrap()
}

/// Releases what a `try_acquire` that must succeed took.
pub(crate) async fn take_and_release(taken: leasehold::Result<Option<MutexGuard>>) {
    let guard = taken.unwrap().expect("the lock was free");
    guard.release().await.unwrap();
}

/// How many EVALSHA calls the server has seen since its stats were reset.
pub(crate) async fn evalsha_calls(server: &RedisServer) -> u64 {
    let stats: String = cmd(server, &["INFO", "commandstats"]).await;
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

pub(crate) async fn raw(server: &RedisServer) -> leasehold::redis::aio::MultiplexedConnection {
    leasehold::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

pub(crate) async fn cmd<T: leasehold::redis::FromRedisValue>(
    server: &RedisServer,
    args: &[&str],
) -> T {
    let mut conn = raw(server).await;
    let mut cmd = leasehold::redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(&mut conn).await.unwrap()
}

/// Polls `fut` `polls` times, letting the runtime drive I/O in between, then
/// drops it unless it finished.
pub(crate) async fn poll_then_drop<F: Future>(fut: F, polls: usize) -> Option<F::Output> {
    let mut fut = pin!(fut);
    for _ in 0..polls {
        if let Poll::Ready(out) = futures_util::poll!(fut.as_mut()) {
            return Some(out);
        }
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
    None
}

/// Waits (bounded) until `check` holds: for states reached through Redis
/// that no local signal announces.
pub(crate) async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..1000 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("gave up waiting for {what}");
}

/// A Redis Sentinel that watches no master, on a free loopback port: what a
/// client meets when its URL names a Sentinel instead of a data node.
/// Killed, and its directory removed, when dropped.
pub(crate) struct Sentinel {
    port: u16,
    child: std::process::Child,
    dir: std::path::PathBuf,
}

impl Sentinel {
    /// Starts one and waits until it answers PING; panics with its log if
    /// it does not within 10 s.
    pub(crate) fn start() -> Sentinel {
        let port = leasehold_testkit::free_port();
        let dir =
            std::env::temp_dir().join(format!("leasehold-sentinel-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A Sentinel needs a configuration file it can rewrite.
        let config = dir.join("sentinel.conf");
        std::fs::write(&config, "").unwrap();
        let log = dir.join("sentinel.log");
        let child = std::process::Command::new(leasehold_testkit::redis_server_path().unwrap())
            .arg(&config)
            .arg("--sentinel")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(&log)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let sentinel = Sentinel { port, child, dir };
        for _ in 0..500 {
            // Logged once its listener is bound: the port is its own.
            let ready = std::fs::read_to_string(&log).is_ok_and(|l| l.contains("Sentinel ID is"));
            if ready && sentinel.answers_ping() {
                return sentinel;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "the sentinel on port {port} did not answer PING within 10 s; its log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    fn answers_ping(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        let mut reply = [0u8; 5];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG"
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`, as error messages name it.
    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
