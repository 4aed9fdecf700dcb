//! The fair reentrant mutex (`ReentrantMutex::fair`): nesting per owner as
//! a `ReentrantMutex` has it, and new holds served in arrival order across
//! owners, on one server and on a Redis Cluster.

mod common;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use common::{cmd, eventually, Servers};

const LONG: Duration = Duration::from_secs(30);
const JOB: &str = "leasehold:{job}";

common::on_both_topologies!(
    an_owner_nests_and_each_release_undoes_one_level,
    owners_are_served_in_arrival_order: multi_thread,
    a_try_does_not_pass_a_waiter,
    a_hold_lost_while_nested_is_lost_for_every_level: multi_thread,
);

async fn queued(servers: &Servers) -> u64 {
    servers.cmd(&["ZCARD", "leasehold:{job}:q"]).await
}

/// The same owner takes the lock again without waiting: every level shares
/// the hold's fence, each release undoes one, and the lock is free once the
/// last is gone.
async fn an_owner_nests_and_each_release_undoes_one_level(servers: Servers) {
    let lock = servers.client().reentrant_mutex("job").unwrap().fair();
    assert!(lock.is_fair());
    let outer = lock.acquire().await.unwrap();
    let middle = lock.acquire().await.unwrap();
    let inner = lock
        .try_acquire()
        .await
        .unwrap()
        .expect("a reentry never waits");
    assert_eq!(middle.fence(), outer.fence());
    assert_eq!(inner.fence(), outer.fence());
    assert_eq!(lock.hold_count().await.unwrap(), 3);
    let other = servers.client().reentrant_mutex("job").unwrap().fair();
    middle.release().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    assert!(other.try_acquire().await.unwrap().is_none());
    inner.release().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    assert!(other.try_acquire().await.unwrap().is_none());
    let fence = outer.fence();
    outer.release().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    let next = other.try_acquire().await.unwrap().expect("free");
    assert!(next.fence() > fence);
    next.release().await.unwrap();
}

/// Owners that arrive one after another while the lock is held (nested)
/// take it in that order, each once the one before released its last
/// level, with growing fences; each nests on its turn.
async fn owners_are_served_in_arrival_order(servers: Servers) {
    const WAITERS: u64 = 5;
    let holder = servers.client_with(LONG, true);
    let lock = holder.reentrant_mutex("job").unwrap().fair();
    let outer = lock.acquire().await.unwrap();
    let inner = lock.acquire().await.unwrap();
    let order = Arc::new(StdMutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let lock = servers
            .client_with(LONG, true)
            .reentrant_mutex("job")
            .unwrap()
            .fair();
        let order = Arc::clone(&order);
        tasks.push(tokio::spawn(async move {
            let first = lock.acquire_timeout(LONG).await.unwrap();
            let again = lock.acquire().await.unwrap();
            assert_eq!(again.fence(), first.fence());
            order.lock().unwrap().push((i, first.fence()));
            again.release().await.unwrap();
            first.release().await.unwrap();
        }));
        eventually("the waiter to queue", || async {
            queued(&servers).await == i + 1
        })
        .await;
    }
    inner.release().await.unwrap();
    // Still held by the outer level: nobody has moved.
    assert_eq!(queued(&servers).await, WAITERS);
    outer.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let arrivals: Vec<u64> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(arrivals, (0..WAITERS).collect::<Vec<_>>());
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1), "{order:?}");
    assert_eq!(queued(&servers).await, 0);
    let records = servers.keys("leasehold:{job}:w:*").await;
    assert!(records.is_empty(), "{records:?}");
}

/// A free lock with a live waiter in its queue goes to that waiter: a
/// newcomer's try finds it busy, where a `ReentrantMutex` without fairness
/// takes it.
async fn a_try_does_not_pass_a_waiter(servers: Servers) {
    let server = servers.server_for(JOB);
    let time: Vec<String> = cmd(server, &["TIME"]).await;
    let now_us = time[0].parse::<u64>().unwrap() * 1_000_000 + time[1].parse::<u64>().unwrap();
    // A waiter queued by hand, with a live heartbeat.
    let _: u64 = cmd(
        server,
        &["ZADD", "leasehold:{job}:q", &now_us.to_string(), "early"],
    )
    .await;
    let _: () = cmd(
        server,
        &[
            "SET",
            "leasehold:{job}:w:early",
            "0 x 1 someclient",
            "PX",
            "20000",
        ],
    )
    .await;
    let client = servers.client();
    let fair = client.reentrant_mutex("job").unwrap().fair();
    assert!(fair.try_acquire().await.unwrap().is_none());
    let barging = client.reentrant_mutex("job").unwrap();
    let guard = barging
        .try_acquire()
        .await
        .unwrap()
        .expect("a handle without fairness takes a free lock");
    guard.release().await.unwrap();
}

/// A hold removed while nested (a force-release) is lost for every level:
/// each guard says so, its releases report the loss, and the next owner
/// in line holds the lock untouched by them.
async fn a_hold_lost_while_nested_is_lost_for_every_level(servers: Servers) {
    let lease = Duration::from_millis(600);
    let lock = servers
        .client_with(lease, true)
        .reentrant_mutex("job")
        .unwrap()
        .fair();
    let outer = lock.acquire().await.unwrap();
    let inner = lock.acquire().await.unwrap();
    let next = servers
        .client_with(LONG, true)
        .reentrant_mutex("job")
        .unwrap()
        .fair();
    let waiting = tokio::spawn(async move { next.acquire_timeout(LONG).await });
    eventually("the waiter to queue", || async {
        queued(&servers).await == 1
    })
    .await;
    let admin = servers.client().reentrant_mutex("job").unwrap();
    assert!(admin.force_release().await.unwrap());
    let theirs = waiting.await.unwrap().expect("the next owner takes it");
    tokio::time::timeout(LONG, inner.lost())
        .await
        .expect("the renewal found the hold gone");
    assert!(outer.is_lost());
    assert!(inner.release().await.unwrap_err().is_not_held());
    assert!(outer.release().await.unwrap_err().is_not_held());
    assert!(!theirs.is_lost());
    let info = admin.inspect().await.unwrap();
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert_eq!(info.holders[0].fence, Some(theirs.fence()));
    theirs.release().await.unwrap();
}
