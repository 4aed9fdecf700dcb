//! Watching a lock without waiting for it (`LockWatch`): the end of each
//! lease, released, force-released or expired, reaches a watcher that is
//! no waiter, on one server and on a Redis Cluster.

mod common;

use std::time::Duration;

use common::{cmd, command_calls, eventually, Servers};
use leasehold::{LeaseEnd, LeaseGuard, LockEvent, LockWatch, WATCH_EVENTS_KEPT};
use leasehold_testkit::RedisServer;

/// Far beyond any event's expected time: only a watch that never hears
/// runs into it.
const PATIENCE: Duration = Duration::from_secs(20);

common::on_both_topologies!(
    a_release_reaches_a_watcher_of_every_kind,
    a_fair_hand_off_names_the_next_holder: multi_thread,
    readers_that_share_a_fence_end_one_by_one,
    an_expiry_is_reported_after_the_lease,
    a_force_release_is_told_apart,
    a_lease_between_two_looks_is_not_lost_silently,
    a_dropped_watch_leaves_nothing_behind,
    only_a_watched_release_publishes,
    a_key_that_holds_no_lock_is_refused,
    a_busy_lock_costs_a_watcher_a_look_per_gap_not_per_release: multi_thread,
    a_watch_nobody_reads_keeps_the_newest_ends: multi_thread,
);

/// Releases `guard`, and checks that `watch` hears its lease end as
/// released, with its fence.
async fn released_and_heard(watch: &mut LockWatch, guard: LeaseGuard) {
    let fence = guard.fence();
    guard.release().await.unwrap();
    let event = next(watch).await;
    assert_eq!((event.ended, event.fence), (LeaseEnd::Released, fence));
}

async fn next(watch: &mut LockWatch) -> LockEvent {
    tokio::time::timeout(PATIENCE, watch.next())
        .await
        .expect("the watch heard nothing")
        .unwrap()
}

/// Scripts' PUBLISH and SPUBLISH calls on every master so far.
async fn publishes(servers: &Servers) -> u64 {
    let mut calls = 0;
    for master in servers.masters() {
        calls += command_calls(master, "publish").await + command_calls(master, "spublish").await;
    }
    calls
}

async fn a_release_reaches_a_watcher_of_every_kind(servers: Servers) {
    let holder = servers.client();
    let watcher = servers.client();

    let mutex = holder.mutex("m").unwrap();
    let mut watch = watcher.mutex("m").unwrap().watch().unwrap();
    let guard = mutex.acquire().await.unwrap();
    let seen = watch.holders().await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].fence, Some(guard.fence()));
    let fence = guard.fence();
    let before = publishes(&servers).await;
    guard.release().await.unwrap();
    let event = next(&mut watch).await;
    assert_eq!(event.ended, LeaseEnd::Released);
    assert_eq!(event.fence, fence);
    assert!(event.holder.is_some());
    assert!(event.taken_by.is_none());
    // Heard from the release's message, not found by a later look.
    assert_eq!(publishes(&servers).await, before + 1);

    let fair = holder.fair_mutex("f").unwrap();
    let mut watch = watcher.fair_mutex("f").unwrap().watch().unwrap();
    let guard = fair.acquire().await.unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    released_and_heard(&mut watch, guard).await;

    let reentrant = holder.reentrant_mutex("r").unwrap();
    let mut watch = watcher.reentrant_mutex("r").unwrap().watch().unwrap();
    let outer = reentrant.acquire().await.unwrap();
    let inner = reentrant.acquire().await.unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    inner.release().await.unwrap();
    // One level left: the lease goes on, nothing ends.
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    released_and_heard(&mut watch, outer).await;

    let rw = holder.rw_lock("rw").unwrap();
    let mut watch = watcher.rw_lock("rw").unwrap().watch().unwrap();
    let writing = rw.write().acquire().await.unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    released_and_heard(&mut watch, writing).await;
    let reading = rw.read().acquire().await.unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    released_and_heard(&mut watch, reading).await;

    let sem = holder.semaphore("s", 2).unwrap();
    let mut watch = watcher.semaphore("s", 2).unwrap().watch().unwrap();
    let one = sem.acquire().await.unwrap();
    let two = sem.acquire().await.unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 2);
    released_and_heard(&mut watch, two).await;
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    one.release().await.unwrap();
}

/// Readers that hold together share one fence; each one's end is its own
/// event all the same.
async fn readers_that_share_a_fence_end_one_by_one(servers: Servers) {
    let first = servers.client().rw_lock("rw").unwrap();
    let second = servers.client().rw_lock("rw").unwrap();
    let mut watch = servers.client().rw_lock("rw").unwrap().watch().unwrap();
    let one = first.read().acquire().await.unwrap();
    let two = second.read().acquire().await.unwrap();
    assert_eq!(one.fence(), two.fence());
    assert_eq!(watch.holders().await.unwrap().len(), 2);
    released_and_heard(&mut watch, one).await;
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    released_and_heard(&mut watch, two).await;
    assert!(watch.holders().await.unwrap().is_empty());
}

/// A fair lock handed to its waiter: the event names the lease that took
/// it, with its fence.
async fn a_fair_hand_off_names_the_next_holder(servers: Servers) {
    let first = servers.client().fair_mutex("f").unwrap();
    let second = servers.client().fair_mutex("f").unwrap();
    let mut watch = servers.client().fair_mutex("f").unwrap().watch().unwrap();
    let held = first.acquire().await.unwrap();
    let waiting = tokio::spawn(async move { second.acquire_timeout(PATIENCE).await });
    eventually("the waiter to queue", || async {
        servers.cmd::<u64>(&["ZCARD", "leasehold:{f}:q"]).await == 1
    })
    .await;
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    let fence = held.fence();
    held.release().await.unwrap();
    let event = next(&mut watch).await;
    let next_holder = waiting.await.unwrap().unwrap();
    assert_eq!((event.ended, event.fence), (LeaseEnd::Released, fence));
    let taken_by = event.taken_by.expect("the waiter it was handed to");
    assert_eq!(taken_by.fence, Some(next_holder.fence()));
    next_holder.release().await.unwrap();
}

/// A holder that died (no watchdog, a short lease): its lease's end is
/// reported as an expiry, after the lease and within a bounded time.
async fn an_expiry_is_reported_after_the_lease(servers: Servers) {
    const LEASE: Duration = Duration::from_millis(300);
    let crashed = servers.client_with(LEASE, false);
    let taken = tokio::time::Instant::now();
    let gone = crashed
        .mutex("m")
        .unwrap()
        .acquire()
        .await
        .unwrap()
        .detach();
    let mut watch = servers.client().mutex("m").unwrap().watch().unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    let event = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("no expiry reported within 10 s of a 300 ms lease")
        .unwrap();
    assert!(
        taken.elapsed() >= LEASE,
        "reported before the lease ran out"
    );
    assert_eq!((event.ended, event.fence), (LeaseEnd::Expired, gone.fence));

    // The same for a permit of a semaphore.
    let gone = crashed
        .semaphore("s", 3)
        .unwrap()
        .acquire()
        .await
        .unwrap()
        .detach();
    let mut watch = servers.client().semaphore("s", 3).unwrap().watch().unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    let event = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("no expiry reported within 10 s of a 300 ms lease")
        .unwrap();
    assert_eq!((event.ended, event.fence), (LeaseEnd::Expired, gone.fence));
}

async fn a_force_release_is_told_apart(servers: Servers) {
    let holder = servers.client();
    let admin = servers.client();
    let guard = holder.mutex("m").unwrap().acquire().await.unwrap();
    let mut watch = admin.mutex("m").unwrap().watch().unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    assert!(admin.mutex("m").unwrap().force_release().await.unwrap());
    let event = next(&mut watch).await;
    assert_eq!(
        (event.ended, event.fence),
        (LeaseEnd::ForceReleased, guard.fence())
    );
    let _ = guard.release().await;

    let sem = holder.semaphore("s", 2).unwrap();
    let one = sem.acquire().await.unwrap();
    let two = sem.acquire().await.unwrap();
    let mut watch = admin.semaphore("s", 2).unwrap().watch().unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 2);
    assert!(admin
        .semaphore("s", 2)
        .unwrap()
        .force_release()
        .await
        .unwrap());
    let mut ended = [next(&mut watch).await, next(&mut watch).await];
    ended.sort_by_key(|e| e.fence);
    assert_eq!(ended[0].fence, one.fence());
    assert_eq!(ended[1].fence, two.fence());
    assert!(ended.iter().all(|e| e.ended == LeaseEnd::ForceReleased));
    let _ = one.release().await;
    let _ = two.release().await;
}

/// A watch that starts on a free lock waits for the next holder; a lease
/// taken and let go between two looks is reported all the same (released
/// where its release was recorded, missed where it could not be).
async fn a_lease_between_two_looks_is_not_lost_silently(servers: Servers) {
    let holder = servers.client();
    let mut watch = servers.client().mutex("m").unwrap().watch().unwrap();
    assert!(watch.holders().await.unwrap().is_empty());
    let guard = holder.mutex("m").unwrap().acquire().await.unwrap();
    let fence = guard.fence();
    guard.release().await.unwrap();
    let event = next(&mut watch).await;
    assert_eq!((event.ended, event.fence), (LeaseEnd::Missed, fence));
    assert!(event.holder.is_none());

    // A semaphore's release is recorded even when no look saw the lease.
    let mut watch = servers.client().semaphore("s", 1).unwrap().watch().unwrap();
    assert!(watch.holders().await.unwrap().is_empty());
    let guard = holder.semaphore("s", 1).unwrap().acquire().await.unwrap();
    released_and_heard(&mut watch, guard).await;
}

async fn a_dropped_watch_leaves_nothing_behind(servers: Servers) {
    let guard = servers
        .client()
        .mutex("m")
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let watcher = servers.client();
    let mut watch = watcher.mutex("m").unwrap().watch().unwrap();
    let mut other = watcher.mutex("m").unwrap().watch().unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    assert_eq!(other.holders().await.unwrap().len(), 1);
    assert!(
        servers
            .cmd::<bool>(&["EXISTS", "leasehold:{m}:watch"])
            .await
    );
    let value: String = servers.cmd(&["GET", "leasehold:{m}"]).await;
    assert!(value.ends_with("\u{1f}w"), "the watch marks the holder");
    // One of two watchers goes: the other still watches.
    drop(other);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        servers
            .cmd::<bool>(&["EXISTS", "leasehold:{m}:watch"])
            .await
    );
    // A watch dropped in the middle of its wait.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), watch.next())
            .await
            .is_err()
    );
    drop(watch);
    eventually("the watch key to go", || async {
        !servers
            .cmd::<bool>(&["EXISTS", "leasehold:{m}:watch"])
            .await
    })
    .await;
    let value: String = servers.cmd(&["GET", "leasehold:{m}"]).await;
    assert!(!value.contains('\u{1f}'), "the mark stayed: {value:?}");
    // Nobody listens on the watch channel any more (it lingers a few
    // seconds after its last listener).
    eventually("the watch channel to be left", || async {
        let key = "leasehold:{m}:ch:watch";
        let server = servers.server_for(key);
        let (classic, sharded) = subscribers(server, key).await;
        classic + sharded == 0
    })
    .await;
    guard.release().await.unwrap();
}

/// Subscribers of `channel` on `server`: classic and sharded.
async fn subscribers(server: &RedisServer, channel: &str) -> (u64, u64) {
    let classic: Vec<leasehold::redis::Value> = cmd(server, &["PUBSUB", "NUMSUB", channel]).await;
    let count = |reply: &[leasehold::redis::Value]| match reply.get(1) {
        Some(leasehold::redis::Value::Int(n)) => u64::try_from(*n).unwrap(),
        _ => 0,
    };
    // Redis before 7 has no sharded pub/sub.
    let mut conn = common::raw(server).await;
    let sharded: leasehold::redis::RedisResult<Vec<leasehold::redis::Value>> =
        leasehold::redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(channel)
            .query_async(&mut conn)
            .await;
    let sharded = sharded.map_or(0, |reply| count(&reply));
    (count(&classic), sharded)
}

/// The release of a lock nobody watches publishes nothing; a watched one
/// publishes once; once the watch is gone, nothing again.
async fn only_a_watched_release_publishes(servers: Servers) {
    let mutex = servers.client().mutex("m").unwrap();
    let sem = servers.client().semaphore("s", 1).unwrap();
    let before = publishes(&servers).await;
    mutex.acquire().await.unwrap().release().await.unwrap();
    sem.acquire().await.unwrap().release().await.unwrap();
    assert_eq!(publishes(&servers).await, before);

    let guard = mutex.acquire().await.unwrap();
    let mut watch = servers.client().mutex("m").unwrap().watch().unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    guard.release().await.unwrap();
    assert_eq!(next(&mut watch).await.ended, LeaseEnd::Released);
    assert_eq!(publishes(&servers).await, before + 1);
    drop(watch);
    eventually("the watch key to go", || async {
        !servers
            .cmd::<bool>(&["EXISTS", "leasehold:{m}:watch"])
            .await
    })
    .await;
    assert!(
        !servers
            .cmd::<bool>(&["EXISTS", "leasehold:{m}:watch:ends"])
            .await
    );
    mutex.acquire().await.unwrap().release().await.unwrap();
    assert_eq!(publishes(&servers).await, before + 1);
}

/// A server restart without persistence loses the lease: the watch says
/// it could not look while the server was down, then reports the lease
/// as gone before it could run out, and hears the next release.
#[tokio::test]
async fn a_watch_across_a_restart_reports_the_loss_and_the_next_release() {
    let mut server = RedisServer::start();
    let holder = leasehold::Client::builder(server.url())
        .restart_grace(Duration::ZERO)
        .build()
        .unwrap();
    let watcher = leasehold::Client::builder(server.url())
        .command_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let guard = holder.mutex("m").unwrap().acquire().await.unwrap();
    let fence = guard.fence();
    let mut watch = watcher.mutex("m").unwrap().watch().unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    server.stop();
    let mut could_not_look = 0;
    let event = tokio::time::timeout(PATIENCE, async {
        loop {
            match watch.next().await {
                Ok(event) => break event,
                Err(error) => {
                    assert!(error.is_connection(), "{error}");
                    could_not_look += 1;
                    if could_not_look == 1 {
                        server.restart();
                    }
                }
            }
        }
    })
    .await
    .expect("no event after the restart");
    assert!(
        could_not_look >= 1,
        "the watch never said it could not look"
    );
    assert_eq!((event.ended, event.fence), (LeaseEnd::Vanished, fence));
    drop(guard);

    let guard = holder.mutex("m").unwrap().acquire().await.unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    released_and_heard(&mut watch, guard).await;
}

/// A failover of the lock's shard moves its watch channel to the new
/// master: the watch listens there, and hears the next release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_follows_a_cluster_failover() {
    let mut cluster = leasehold_testkit::RedisCluster::start(3, 1);
    let url = cluster.urls().join(",");
    let holder = leasehold::Client::open(&url).unwrap();
    let watcher = common::impatient(&url);
    let guard = holder.mutex("m").unwrap().acquire().await.unwrap();
    let mut watch = watcher.mutex("m").unwrap().watch().unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    let shard = cluster.shard_of_slot(leasehold_testkit::key_slot("leasehold:{m}"));
    cluster.failover(shard);
    let seen = common::holders_after_failover(&mut watch, PATIENCE).await;
    assert_eq!(seen.len(), 1, "the lease survived the failover");
    // It listens on the new master (where the cluster has sharded pub/sub:
    // before Redis 7 a PUBLISH reaches every node).
    let channel = "leasehold:{m}:ch:watch";
    let sharded = {
        let mut conn = common::raw(cluster.master_for_key(channel)).await;
        let reply: leasehold::redis::RedisResult<Vec<leasehold::redis::Value>> =
            leasehold::redis::cmd("PUBSUB")
                .arg("SHARDNUMSUB")
                .arg(channel)
                .query_async(&mut conn)
                .await;
        reply.is_ok()
    };
    for _ in 0..if sharded { 500 } else { 0 } {
        let (_, sharded) = subscribers(cluster.master_for_key(channel), channel).await;
        if sharded == 1 {
            break;
        }
        let _ = watch.holders().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if sharded {
        let (_, listening) = subscribers(cluster.master_for_key(channel), channel).await;
        assert_eq!(listening, 1, "the watch does not listen on the new master");
    }
    released_and_heard(&mut watch, guard).await;
}

/// A key at the lock's name that no lock wrote (a list) is refused, where a
/// watch would otherwise report a lock that nobody holds, and wait forever
/// for it to be taken.
async fn a_key_that_holds_no_lock_is_refused(servers: Servers) {
    let _: i64 = servers.cmd(&["RPUSH", "leasehold:{m}", "not a lock"]).await;
    let mut watch = servers.client().mutex("m").unwrap().watch().unwrap();
    let error = watch.holders().await.unwrap_err();
    assert_eq!(error.kind(), leasehold::ErrorKind::Conflict, "{error}");
    assert!(error.to_string().contains("a Redis list"), "{error}");
    let error = tokio::time::timeout(PATIENCE, watch.next())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(error.kind(), leasehold::ErrorKind::Conflict, "{error}");
    watch.close().await.unwrap();
}

/// Script runs on every master so far: (EVALSHA, FCALL).
async fn script_calls(servers: &Servers) -> (u64, u64) {
    let (mut evalsha, mut fcall) = (0, 0);
    for master in servers.masters() {
        evalsha += command_calls(master, "evalsha").await;
        fcall += command_calls(master, "fcall").await;
    }
    (evalsha, fcall)
}

/// A lock released hundreds of times a second: the watcher hears of every
/// lease's end, and looks at most once per 10 ms (plus its timers), not
/// once per release.
async fn a_busy_lock_costs_a_watcher_a_look_per_gap_not_per_release(servers: Servers) {
    const CYCLES: usize = 300;
    let lock = servers.client().rw_lock("busy").unwrap();
    let mut watch = servers.client().rw_lock("busy").unwrap().watch().unwrap();
    assert!(watch.holders().await.unwrap().is_empty());
    let (evalsha_before, _) = script_calls(&servers).await;
    let consumer = tokio::spawn(async move {
        let mut ended = std::collections::HashSet::new();
        while let Ok(Ok(event)) = tokio::time::timeout(Duration::from_secs(3), watch.next()).await {
            assert_eq!(event.ended, LeaseEnd::Released, "{event:?}");
            ended.insert(event.fence);
        }
        (watch, ended)
    });
    let started = std::time::Instant::now();
    let mut fences = std::collections::HashSet::new();
    for _ in 0..CYCLES {
        let guard = lock.read().acquire().await.unwrap();
        fences.insert(guard.fence());
        guard.release().await.unwrap();
    }
    let elapsed = started.elapsed();
    let (watch, ended) = consumer.await.unwrap();
    assert_eq!(
        fences.len(),
        CYCLES,
        "each read phase has a fence of its own"
    );
    assert_eq!(ended, fences, "every lease's end was heard");
    let (evalsha, fcall) = script_calls(&servers).await;
    // Where the server has functions the lock's own scripts are FCALLs,
    // and every EVALSHA is a look (before Redis 7 they cannot be told
    // apart, and the count says nothing).
    if fcall > 0 {
        let looks = evalsha - evalsha_before;
        let ms = u64::try_from(elapsed.as_millis()).unwrap();
        // One per 10 ms while releases come, the timers' (one a second
        // while free) and the 3 s of quiet the consumer waits at the end.
        let bound = ms / 10 + ms / 1000 + 10;
        assert!(
            looks <= bound,
            "{looks} looks for {CYCLES} releases in {ms} ms (at most {bound})"
        );
    }
    watch.close().await.unwrap();
}

/// A watch nobody reads keeps looking in the background, and keeps the
/// newest `WATCH_EVENTS_KEPT` ends: the older ones are dropped, and
/// counted.
async fn a_watch_nobody_reads_keeps_the_newest_ends(servers: Servers) {
    let c = servers.client();
    let sem = c.semaphore("s", 1).unwrap();
    let mut watch = sem.watch().unwrap();
    // The first look: registered, and looking in the background from now.
    assert!(watch.holders().await.unwrap().is_empty());
    let cycles = WATCH_EVENTS_KEPT + 100;
    let mut last = 0;
    for _ in 0..cycles {
        let permit = sem.acquire().await.unwrap();
        last = permit.fence();
        permit.release().await.unwrap();
    }
    // A look that reads the last ends.
    assert!(watch.holders().await.unwrap().is_empty());
    let mut kept = Vec::new();
    while let Some(event) = watch.try_next().await {
        kept.push(event);
    }
    assert_eq!(kept.len(), WATCH_EVENTS_KEPT, "kept");
    assert_eq!(kept.last().map(|e| e.fence), Some(last), "the newest end");
    let dropped = watch.dropped().await;
    assert_eq!(
        usize::try_from(dropped).unwrap() + kept.len(),
        cycles,
        "every end kept or counted"
    );
    watch.close().await.unwrap();
}
