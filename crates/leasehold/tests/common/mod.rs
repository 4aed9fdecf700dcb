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

/// What `watch` sees once it reaches the master that took over after a
/// failover: its looks may fail until then (on the demoted master, or while
/// the client finds the new one), for at most `within`.
pub(crate) async fn holders_after_failover(
    watch: &mut leasehold::LockWatch,
    within: Duration,
) -> Vec<leasehold::Holder> {
    tokio::time::timeout(within, async {
        loop {
            if let Ok(holders) = watch.holders().await {
                break holders;
            }
        }
    })
    .await
    .expect("the watch never reached the new master")
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

/// How many calls of `command` (as INFO commandstats names it) the server
/// has seen since its stats were reset.
pub(crate) async fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let stats: String = cmd(server, &["INFO", "commandstats"]).await;
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// How many scripts the server has run since its stats were reset: EVALSHA
/// and FCALL (the acquire and release scripts are functions where the
/// server has them).
pub(crate) async fn script_calls(server: &RedisServer) -> u64 {
    command_calls(server, "evalsha").await + command_calls(server, "fcall").await
}

/// Whether the server has Redis Functions (Redis 7, Valkey).
pub(crate) async fn has_functions(server: &RedisServer) -> bool {
    let mut conn = raw(server).await;
    leasehold::redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async::<leasehold::redis::Value>(&mut conn)
        .await
        .is_ok()
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

/// Three independent masters, the third reached through a fault proxy,
/// and the URLs a Redlock over them is given (the proxy's for the third).
pub(crate) fn third_master_behind_a_proxy() -> (
    leasehold_testkit::Masters,
    leasehold_testkit::FaultProxy,
    Vec<String>,
) {
    let masters = leasehold_testkit::Masters::start(3);
    let proxy = leasehold_testkit::FaultProxy::start(masters.servers()[2].addr());
    let urls = vec![
        masters.urls()[0].clone(),
        masters.urls()[1].clone(),
        proxy.url(),
    ];
    (masters, proxy, urls)
}

/// The value of lock `name`'s key on `server` (the default prefix), if any.
pub(crate) async fn held_on(server: &RedisServer, name: &str) -> Option<String> {
    cmd::<Option<String>>(server, &["GET", &format!("leasehold:{{{name}}}")]).await
}

/// Lock `name`'s fence counter on `server` (the default prefix), as GET
/// gives it, if any.
pub(crate) async fn fence_counter(server: &RedisServer, name: &str) -> Option<String> {
    cmd::<Option<String>>(server, &["GET", &format!("leasehold:{{{name}}}:fence")]).await
}

/// A fence counter's leading digits as a number, `None` when it has none:
/// a Redlock master's counter may name, after them, the tokens released
/// there without being held (" x<token>").
pub(crate) fn counter_digits(value: &str) -> Option<u64> {
    let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}
