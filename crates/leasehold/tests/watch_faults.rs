//! `LockWatch` under the edges of its use: a consumer slower than the
//! watch's heartbeat, and a watched release under maxmemory.

mod common;

use std::time::Duration;

use common::{client, cmd};
use leasehold::{LeaseEnd, LockWatch};
use leasehold_testkit::RedisServer;

/// Far beyond any event's expected time.
const PATIENCE: Duration = Duration::from_secs(20);

async fn next(watch: &mut LockWatch) -> leasehold::LockEvent {
    tokio::time::timeout(PATIENCE, watch.next())
        .await
        .expect("the watch heard nothing")
        .unwrap()
}

/// A consumer that takes longer than the watch's heartbeat (10 s) between
/// two calls (it handles the previous event, or just started watching and
/// does something else first) must still be told that a lease it saw was
/// released, not that the server lost it: nothing was lost, the holder
/// released it normally. (The watch's background looks keep its
/// registration, and so the record of the release, alive meanwhile.)
#[tokio::test]
async fn a_release_after_a_pause_longer_than_the_heartbeat_is_still_a_release() {
    let server = RedisServer::start();
    let holder = client(&server);
    let watcher = client(&server);
    // The default lease (with its watchdog) outlives the pause by far.
    let guard = holder.mutex("m").unwrap().acquire().await.unwrap();
    let fence = guard.fence();
    let mut watch = watcher.mutex("m").unwrap().watch().unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    // The consumer is busy for a while: 11 s, past the 10 s heartbeat.
    tokio::time::sleep(Duration::from_secs(11)).await;
    guard.release().await.unwrap();
    let event = next(&mut watch).await;
    assert_eq!(event.fence, fence);
    assert_eq!(
        event.ended,
        LeaseEnd::Released,
        "a normal release reported as {:?}",
        event.ended
    );
}

/// A release runs under maxmemory (the library says so: "a release runs
/// under maxmemory too, as its EVAL does (a DEL is not refused then)").
/// A watched Mutex's release records its end (a ZADD, which the OOM check
/// refuses) before it deletes the key: as a script run (EVALSHA: Redis
/// 6.2, or any server without functions), where the OOM check applies
/// until the script's first write, that record must not fail the release.
/// With functions (Redis 7, Valkey) the release goes as FCALL, whose
/// function is flagged allow-oom.
#[tokio::test]
async fn a_watched_release_under_maxmemory_still_releases() {
    watched_release_under_maxmemory(RedisServer::start()).await;
}

/// As above on a Redis 7 whose FCALL is disabled (an ACL or a
/// rename-command can do that): the client sends its scripts as EVALSHA,
/// and the watched release must work under maxmemory there too.
#[tokio::test]
async fn a_watched_release_under_maxmemory_still_releases_as_a_script_run() {
    let Some(server) = without_fcall() else {
        return;
    };
    watched_release_under_maxmemory(server).await;
}

async fn watched_release_under_maxmemory(server: RedisServer) {
    let holder = client(&server);
    let watcher = client(&server);
    let guard = holder.mutex("m").unwrap().acquire().await.unwrap();
    let mut watch = watcher.mutex("m").unwrap().watch().unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    release_under_maxmemory(&server, guard).await;
    drop(watch);
}

/// The same release with nobody watching (the control for the tests
/// above): it works under maxmemory, as FCALL (Redis 7) or as a script
/// run (Redis 6.2).
#[tokio::test]
async fn an_unwatched_waited_release_under_maxmemory_releases() {
    unwatched_release_under_maxmemory(RedisServer::start()).await;
}

/// The control as a script run on Redis 7 (FCALL disabled; needs a server
/// that knows FCALL, so not Redis 6.2).
#[tokio::test]
async fn an_unwatched_waited_release_under_maxmemory_releases_as_a_script_run() {
    let Some(server) = without_fcall() else {
        return;
    };
    unwatched_release_under_maxmemory(server).await;
}

async fn unwatched_release_under_maxmemory(server: RedisServer) {
    let holder = client(&server);
    let guard = holder.mutex("m").unwrap().acquire().await.unwrap();
    // Marked as a waiter (or a watcher) would mark it, with nobody
    // watching: the release reads the queue, as it did before watches.
    let value: String = cmd(&server, &["GET", "leasehold:{m}"]).await;
    let marked = format!("{value}\u{1f}w");
    let _: () = cmd(&server, &["SET", "leasehold:{m}", &marked, "XX", "KEEPTTL"]).await;
    release_under_maxmemory(&server, guard).await;
}

/// A Redis 7 whose FCALL is renamed away, so that the client sends its
/// scripts as EVALSHA; `None` (the test skips, saying so) before Redis 7,
/// where every script is a script run already.
fn without_fcall() -> Option<RedisServer> {
    if !leasehold_testkit::server_version().unwrap().at_least(7, 0) {
        eprintln!("skipped: the server has no FCALL to disable (before Redis 7 every script is a script run, as the test above checks)");
        return None;
    }
    Some(RedisServer::start_with_args(&[
        "--rename-command",
        "FCALL",
        "",
    ]))
}

/// Releases `guard` while every write the OOM check covers is refused, and
/// checks that the release worked and the lock key is gone.
async fn release_under_maxmemory(server: &RedisServer, guard: leasehold::LeaseGuard) {
    let _: () = cmd(server, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]).await;
    let _: () = cmd(server, &["CONFIG", "SET", "maxmemory", "1"]).await;
    let released = guard.release().await;
    let _: () = cmd(server, &["CONFIG", "SET", "maxmemory", "0"]).await;
    let left: Option<String> = cmd(server, &["GET", "leasehold:{m}"]).await;
    assert!(
        released.is_ok() && left.is_none(),
        "release under maxmemory: {released:?}, the lock key holds {left:?}"
    );
}
