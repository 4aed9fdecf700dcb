//! Redlock's late round-one requests (grants that arrive after the
//! acquire decided, or after the release): no master is left holding a
//! lock nobody holds, with real masters and a fault proxy.

mod common;

use std::time::Duration;

use common::cmd;
use leasehold::{Redlock, RedlockMutex};
use leasehold_testkit::{FaultProxy, Masters, RedisServer};

/// Far longer than the test: a lock still there at the end was left behind.
const LEASE: Duration = Duration::from_secs(60);
const NO_HANG: Duration = Duration::from_secs(60);

async fn held_on(server: &RedisServer, name: &str) -> Option<String> {
    cmd::<Option<String>>(server, &["GET", &format!("leasehold:{{{name}}}")]).await
}

/// Three masters, the third behind a fault proxy, and a Redlock mutex
/// "job" over them with a 400 ms command timeout, connected to every master
/// once (a lock taken and released everywhere, which reads every master's
/// clock).
async fn third_behind_a_proxy() -> (Masters, FaultProxy, Redlock, RedlockMutex) {
    let (masters, proxy, redlock, mutex) = third_behind_a_proxy_unread().await;
    let warm = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap();
    warm.release_counted().await.unwrap();
    redlock.flush().await;
    (masters, proxy, redlock, mutex)
}

/// As [`third_behind_a_proxy`], connected to every master by a release of
/// a token nobody holds, which reads no master's clock (and loads the
/// library of scripts where the server has functions).
async fn third_behind_a_proxy_unread() -> (Masters, FaultProxy, Redlock, RedlockMutex) {
    let masters = Masters::start(3);
    let proxy = FaultProxy::start(masters.servers()[2].addr());
    let urls = vec![
        masters.urls()[0].clone(),
        masters.urls()[1].clone(),
        proxy.url(),
    ];
    let redlock = Redlock::builder(urls)
        .lease(LEASE)
        .watchdog(false)
        .command_timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let mutex = redlock.mutex("job").unwrap();
    let released = tokio::time::timeout(NO_HANG, mutex.release_token("nobody"))
        .await
        .unwrap();
    assert!(
        released.as_ref().is_err_and(|e| e.is_not_held()),
        "{released:?}"
    );
    (masters, proxy, redlock, mutex)
}

/// The third master is cut off (its bytes held, as in a partition) while
/// a lock is taken on the other two and released again; the round-one
/// request to the third is delivered only when the partition heals, after
/// the release, after `flush` returned and after every retry gave up. The
/// third master then grants the lock to a token nobody holds any more: the
/// grant must be let go at once (the request that got it releases it), or
/// the next acquirer could only get the other two for a whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_one_request_delivered_after_the_release_leaves_no_lock_behind() {
    let (masters, proxy, redlock, mutex) = third_behind_a_proxy().await;

    let before = common::script_calls(&masters.servers()[2]).await;
    proxy.blackhole(true);
    let guard = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap();
    let token = guard.token().to_owned();
    guard.release().await.unwrap();
    redlock.flush().await;
    // Past every retry the client makes (a few command timeouts).
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.heal();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let left = held_on(&masters.servers()[2], "job").await;
    let after = common::script_calls(&masters.servers()[2]).await;
    // The held requests did reach the third master once the partition
    // healed (a SLOWLOG showed the round-one script, then a release).
    assert!(after > before, "nothing reached the third master");
    assert!(
        !left.as_deref().is_some_and(|v| v.starts_with(&token)),
        "the third master holds the released token's lock: {left:?}, ttl {} ms",
        cmd::<i64>(&masters.servers()[2], &["PTTL", "leasehold:{job}"]).await
    );
}

/// As above, but the lock is held longer than the command timeout before
/// it is released: the round-one request's connection is given up by
/// then, and no new connection to the third master can be made while the
/// partition lasts, so the release and its retries never leave the client
/// there. The round-one bytes held in the network are delivered when it
/// heals, after every retry gave up: the third master must refuse them as
/// too late by its own clock (the client read that clock in the warm-up's
/// replies), or it would hold the released token's lock for a whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_one_request_delivered_after_a_release_that_never_got_through() {
    let (masters, proxy, redlock, mutex) = third_behind_a_proxy().await;
    held_past_a_release_that_never_got_through(&masters, &proxy, &redlock, &mutex).await;
}

/// As above, for a client that has not read the third master's clock yet
/// (its first round one there is the one held, as for a new CLI process):
/// the request's limit is then on this host's clock, with room for the
/// master's to run a second ahead, and the third master refuses it when it
/// arrives seconds later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_round_one_delivered_after_a_release_that_never_got_through() {
    let (masters, proxy, redlock, mutex) = third_behind_a_proxy_unread().await;
    held_past_a_release_that_never_got_through(&masters, &proxy, &redlock, &mutex).await;
}

/// The third master cut off while `mutex` is taken, held past the command
/// timeout (its connection given up), released, and past every retry:
/// then the cut heals, the held round one reaches the third master, and
/// must take nothing there.
async fn held_past_a_release_that_never_got_through(
    masters: &Masters,
    proxy: &FaultProxy,
    redlock: &Redlock,
    mutex: &RedlockMutex,
) {
    proxy.blackhole(true);
    let guard = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap();
    let token = guard.token().to_owned();
    // The round-one request's connection times out and is replaced.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let connections = proxy.connections();
    guard.release().await.unwrap();
    redlock.flush().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = common::script_calls(&masters.servers()[2]).await;
    proxy.heal();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = common::script_calls(&masters.servers()[2]).await;
    assert!(
        after > before,
        "the held round one never reached the third master"
    );
    let left = held_on(&masters.servers()[2], "job").await;
    assert!(
        !left.as_deref().is_some_and(|v| v.starts_with(&token)),
        "the third master holds the released token's lock: {left:?}, ttl {} ms \
         ({connections} connections before the release, {} after)",
        cmd::<i64>(&masters.servers()[2], &["PTTL", "leasehold:{job}"]).await,
        proxy.connections()
    );
}
