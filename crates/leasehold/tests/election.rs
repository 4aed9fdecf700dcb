//! Leader election against a real server: failover when the leader's
//! client goes away, what `leader()` trusts, and what observers see. The
//! tests that need no proxy in front of the server run on one server and on
//! a Redis Cluster (`name::single`, `name::cluster`).

mod common;

use std::time::Duration;

use leasehold::{ErrorKind, Leader, LossReason};
use leasehold_testkit::{FaultProxy, RedisServer};
use tokio::sync::watch;

use common::{client, cmd, eventually, impatient, Servers};

/// A bound on waits that must end, so that a broken election fails the
/// test instead of hanging it; never reached on a working one.
const BOUND: Duration = Duration::from_secs(60);

common::on_both_topologies!(
    a_record_left_behind_is_not_trusted_and_expires,
    a_resigned_leader_that_campaigns_again_waits_behind_the_line,
    a_leader_that_reaches_its_max_term_gives_way_to_the_next: multi_thread,
    an_observer_sees_each_leader_in_turn: multi_thread,
);

/// The next state an observer reports.
async fn next(observer: &mut watch::Receiver<Option<Leader>>) -> Option<Leader> {
    tokio::time::timeout(BOUND, observer.changed())
        .await
        .expect("the observer reported no change")
        .expect("the observer's task ended");
    observer.borrow_and_update().clone()
}

fn value(leader: &Option<Leader>) -> Option<&str> {
    leader.as_ref().map(|leader| leader.value.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_when_the_leaders_client_goes_away() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let lease = Duration::from_millis(600);
    let watcher = client(&server).election("scheduler").unwrap();
    let mut observer = watcher.observe().await.unwrap();
    assert_eq!(*observer.borrow_and_update(), None);
    assert_eq!(watcher.leader().await.unwrap(), None);

    // A talks to Redis through the proxy, so that it can vanish.
    let a = impatient(&proxy.url())
        .election("scheduler")
        .unwrap()
        .with_lease(lease)
        .unwrap();
    let leader_a = a.campaign("host-a").await.unwrap();
    assert_eq!(leader_a.value(), "host-a");
    let seen_a = next(&mut observer).await;
    assert_eq!(value(&seen_a), Some("host-a"));
    assert_eq!(seen_a.as_ref().map(|l| l.fence), Some(leader_a.fence()));

    let b = client(&server)
        .election("scheduler")
        .unwrap()
        .with_lease(lease)
        .unwrap();
    let standby = tokio::spawn(async move { b.campaign("host-b").await });
    let lock = client(&server).fair_mutex("scheduler").unwrap();
    eventually("B to wait in line", || async {
        lock.inspect().await.unwrap().waiting_clients == 1
    })
    .await;
    assert!(!standby.is_finished(), "B won while A still led");
    assert_eq!(value(&watcher.leader().await.unwrap()), Some("host-a"));

    // A's client goes away: nothing it sends reaches Redis any more, so its
    // lease runs out and B, first in line, takes over.
    proxy.blackhole(true);
    tokio::time::timeout(BOUND, leader_a.lost())
        .await
        .expect("A never noticed it lost the lead");
    assert!(leader_a.is_lost());
    let leader_b = tokio::time::timeout(BOUND, standby)
        .await
        .expect("B never took over")
        .unwrap()
        .unwrap();
    assert!(leader_b.fence() > leader_a.fence());

    // The observer reports B, after at most a `None` for the moment between.
    let mut seen = next(&mut observer).await;
    if seen.is_none() {
        seen = next(&mut observer).await;
    }
    assert_eq!(value(&seen), Some("host-b"));
    assert_eq!(seen.as_ref().map(|l| l.fence), Some(leader_b.fence()));
    assert_eq!(watcher.leader().await.unwrap(), seen);

    leader_b.resign().await.unwrap();
    assert_eq!(next(&mut observer).await, None);
    assert_eq!(watcher.leader().await.unwrap(), None);
    drop(leader_a);
    proxy.heal();
}

async fn a_record_left_behind_is_not_trusted_and_expires(servers: Servers) {
    let client = servers.client();
    let election = client.election("jobs").unwrap();
    let leadership = election.campaign("10.0.0.7:9000").await.unwrap();
    let fence = leadership.fence();
    let now = election.leader().await.unwrap().unwrap();
    assert_eq!((now.value.as_str(), now.fence), ("10.0.0.7:9000", fence));
    leadership.resign().await.unwrap();

    // The record stays until its TTL, but the lock no longer holds its token.
    let record: Option<String> = servers.cmd(&["GET", "leasehold:{jobs}:leader"]).await;
    assert!(record.is_some_and(|r| r.starts_with(&format!("{fence} "))));
    assert_eq!(election.leader().await.unwrap(), None);

    // A lock taken by someone else (not through the election) is not a leader.
    let guard = client.fair_mutex("jobs").unwrap().acquire().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
    guard.release().await.unwrap();

    // Every key the election wrote expires.
    let keys = servers.keys("*").await;
    assert!(!keys.is_empty());
    for (key, master) in keys {
        let ttl: i64 = cmd(master, &["PTTL", &key]).await;
        assert!(ttl > 0, "{key} has no TTL ({ttl})");
    }
}

async fn a_resigned_leader_that_campaigns_again_waits_behind_the_line(servers: Servers) {
    let first = servers.client().election("line").unwrap();
    let second = servers.client().election("line").unwrap();
    let leadership = first.campaign("first").await.unwrap();
    let waiting = tokio::spawn(async move { second.campaign("second").await });
    let lock = servers.client().fair_mutex("line").unwrap();
    eventually("the second candidate to wait in line", || async {
        lock.inspect().await.unwrap().waiting_clients == 1
    })
    .await;
    leadership.resign().await.unwrap();
    let again = tokio::spawn({
        let first = first.clone();
        async move { first.campaign("first again").await }
    });
    let second = waiting.await.unwrap().unwrap();
    assert_eq!(
        value(&first.leader().await.unwrap()),
        Some("second"),
        "the candidate that waited longest leads"
    );
    second.resign().await.unwrap();
    let again = again.await.unwrap().unwrap();
    assert!(again.fence() > 0);
    again.resign().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_refused_before_redis() {
    let client = leasehold::Client::open(&leasehold_testkit::unreachable_url()).unwrap();
    let err = client.election("").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    client.election("a{b}").unwrap();
    let election = client.election("ok").unwrap();
    let err = election
        .campaign("x".repeat(leasehold::MAX_LEADER_VALUE_LEN + 1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let err = election.clone().with_lease(Duration::ZERO).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let err = election.with_max_term(Duration::ZERO).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_notice_a_dead_leader_that_announced_nothing() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let watcher = client(&server).election("solo").unwrap();
    let mut observer = watcher.observe().await.unwrap();
    let leadership = impatient(&proxy.url())
        .election("solo")
        .unwrap()
        .with_lease(Duration::from_millis(400))
        .unwrap()
        .campaign("only")
        .await
        .unwrap();
    assert_eq!(value(&next(&mut observer).await), Some("only"));
    // Nobody is left to announce anything: the observer finds out when the
    // lease can have run out.
    proxy.blackhole(true);
    assert_eq!(next(&mut observer).await, None);
    assert!(leadership.is_lost());
    drop(leadership);
    proxy.heal();
}

async fn a_leader_that_reaches_its_max_term_gives_way_to_the_next(servers: Servers) {
    let lease = Duration::from_millis(400);
    let term = Duration::from_millis(900);
    let first = servers
        .client()
        .election("term")
        .unwrap()
        .with_lease(lease)
        .unwrap()
        .with_max_term(term)
        .unwrap();
    let second = servers
        .client()
        .election("term")
        .unwrap()
        .with_lease(lease)
        .unwrap();
    // Taken before the campaign's request leaves, so a bound on the time
    // since it holds however slowly the machine runs.
    let before = std::time::Instant::now();
    let leadership = first.campaign("stuck").await.unwrap();
    let waiting = tokio::spawn(async move { second.campaign("next").await });

    // The first leader's client stays up and renews past its first lease,
    // yet its term ends at the cap (less the drift allowance).
    tokio::time::timeout(BOUND, leadership.lost())
        .await
        .expect("a leader past its max term was never told it lost");
    assert!(
        before.elapsed() >= term - Duration::from_millis(20),
        "the term ended after {:?}, before its cap of {term:?}",
        before.elapsed()
    );
    assert_eq!(leadership.loss_reason(), Some(LossReason::MaxHoldReached));
    let next = tokio::time::timeout(BOUND, waiting)
        .await
        .expect("the next candidate never led")
        .unwrap()
        .unwrap();
    assert!(next.fence() > leadership.fence());
    assert_eq!(value(&first.leader().await.unwrap()), Some("next"));
    let err = leadership.resign().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotHeld);
    next.resign().await.unwrap();
}

/// An observer hears each win and each resignation, on whichever server
/// keeps the election.
async fn an_observer_sees_each_leader_in_turn(servers: Servers) {
    let watcher = servers.client().election("rota").unwrap();
    let mut observer = watcher.observe().await.unwrap();
    assert_eq!(*observer.borrow_and_update(), None);
    let first = servers.client().election("rota").unwrap();
    let leadership = first.campaign("first").await.unwrap();
    let seen = next(&mut observer).await;
    assert_eq!(value(&seen), Some("first"));
    assert_eq!(seen.map(|l| l.fence), Some(leadership.fence()));

    let second = servers.client().election("rota").unwrap();
    let standby = tokio::spawn(async move { second.campaign("second").await });
    let lock = servers.client().fair_mutex("rota").unwrap();
    eventually("the second candidate to wait in line", || async {
        lock.inspect().await.unwrap().waiting_clients == 1
    })
    .await;
    leadership.resign().await.unwrap();
    let successor = standby.await.unwrap().unwrap();
    // At most a `None` for the moment between.
    let mut seen = next(&mut observer).await;
    if seen.is_none() {
        seen = next(&mut observer).await;
    }
    assert_eq!(value(&seen), Some("second"));
    assert_eq!(seen.map(|l| l.fence), Some(successor.fence()));
    successor.resign().await.unwrap();
    assert_eq!(next(&mut observer).await, None);
}
