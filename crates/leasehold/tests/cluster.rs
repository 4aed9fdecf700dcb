//! The lock family on a real Redis Cluster of three masters: names on every
//! shard, seeds that are down, a slot migrating under a held lock, and
//! failovers of a shard's master while a lock is held and waited for.

mod common;

use std::time::Duration;

use leasehold::{Client, Owner};
use leasehold_testkit::{key_slot, unreachable_url, RedisCluster, RedisServer};

/// Long enough for any step that should succeed; a hang fails the test.
const LONG: Duration = Duration::from_secs(30);

/// A lock name whose keys live on `shard`'s master.
fn name_on(cluster: &RedisCluster, shard: usize, stem: &str) -> String {
    let master = cluster.master(shard).port();
    (0..10_000)
        .map(|i| format!("{stem}-{i}"))
        .find(|name| {
            cluster
                .master_for_key(&format!("leasehold:{{{name}}}"))
                .port()
                == master
        })
        .expect("some name lands on every shard")
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&["EXISTS", key]).unwrap() == "1"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_works_on_every_shard() {
    let cluster = RedisCluster::start(3, 0);
    // One seed: the client finds the cluster and its slot map through it.
    let client = Client::open(&cluster.urls()[0]).unwrap();
    for shard in 0..3 {
        let master = cluster.master(shard);
        let name = name_on(&cluster, shard, "m");
        let key = format!("leasehold:{{{name}}}");
        let guard = client.mutex(&name).unwrap().acquire().await.unwrap();
        assert!(
            exists(master, &key),
            "the mutex of {name} is on its slot's master"
        );
        let info = client.mutex(&name).unwrap().inspect().await.unwrap();
        assert!(info.held);
        assert_eq!(info.server, format!("127.0.0.1:{}", master.port()));
        guard.release().await.unwrap();
        assert!(!exists(master, &key));

        let name = name_on(&cluster, shard, "f");
        let fair = client.fair_mutex(&name).unwrap().acquire().await.unwrap();
        fair.release().await.unwrap();

        let name = name_on(&cluster, shard, "r");
        let reentrant = client.reentrant_mutex(&name).unwrap();
        let outer = reentrant.acquire().await.unwrap();
        let inner = reentrant.try_acquire().await.unwrap().expect("a reentry");
        assert_eq!(inner.fence(), outer.fence());
        inner.release().await.unwrap();
        outer.release().await.unwrap();

        let name = name_on(&cluster, shard, "rw");
        let rw = client
            .rw_lock(&name)
            .unwrap()
            .with_owner(Owner::from_id("o").unwrap());
        let write = rw.write().acquire().await.unwrap();
        let read = rw.read().acquire().await.unwrap();
        write.release().await.unwrap();
        read.release().await.unwrap();

        let name = name_on(&cluster, shard, "s");
        let semaphore = client.semaphore(&name, 3).unwrap();
        let permits = semaphore.acquire_many(2).await.unwrap();
        assert_eq!(semaphore.available().await.unwrap(), 1);
        permits.release().await.unwrap();

        let name = name_on(&cluster, shard, "e");
        let election = client.election(&name).unwrap();
        let leadership = election.campaign("me").await.unwrap();
        let leader = election.leader().await.unwrap().expect("a leader");
        assert_eq!(leader.value, "me");
        leadership.resign().await.unwrap();
    }
    client.flush().await;
    every_key_has_a_ttl(&cluster);
}

/// Every key leasehold left on any master runs out by itself (a semaphore's
/// count and a fence counter included).
fn every_key_has_a_ttl(cluster: &RedisCluster) {
    for master in cluster.masters() {
        let keys = master.command(&["KEYS", "leasehold:*"]).unwrap();
        for key in keys.lines().filter(|key| !key.is_empty()) {
            let ttl: i64 = master.command(&["PTTL", key]).unwrap().parse().unwrap();
            assert!(ttl > 0, "{key} on {} has no expiry ({ttl})", master.port());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_every_shard_is_woken_by_the_release() {
    let cluster = RedisCluster::start(3, 0);
    let holder = Client::open(&cluster.urls()[1]).unwrap();
    let waiter = Client::open(&cluster.urls()[2]).unwrap();
    for shard in 0..3 {
        let name = name_on(&cluster, shard, "w");
        let held = holder.mutex(&name).unwrap().acquire().await.unwrap();
        let waiting = tokio::spawn({
            let lock = waiter.mutex(&name).unwrap();
            async move { lock.acquire_timeout(LONG).await }
        });
        // The waiter has queued in Redis before the release.
        let master = cluster.master(shard);
        let queue = format!("leasehold:{{{name}}}:q");
        common::eventually("the waiter to queue", || async { exists(master, &queue) }).await;
        let fence = held.fence();
        held.release().await.unwrap();
        let taken = waiting.await.unwrap().unwrap();
        assert!(taken.fence() > fence);
        taken.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_that_is_down_is_skipped() {
    let cluster = RedisCluster::start(3, 0);
    let seeds = [unreachable_url(), cluster.urls()[1].clone()];
    let client = Client::builder("")
        .seeds(seeds)
        .command_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    for shard in 0..3 {
        let name = name_on(&cluster, shard, "seed");
        let guard = client.mutex(&name).unwrap().acquire().await.unwrap();
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_whose_slot_migrates_is_renewed_released_and_handed_on() {
    let cluster = RedisCluster::start(3, 0);
    let client = Client::builder(cluster.urls()[0].clone())
        .lease(Duration::from_secs(2))
        .build()
        .unwrap();
    let other = Client::open(&cluster.urls()[1]).unwrap();
    let name = name_on(&cluster, 0, "moving");
    let key = format!("leasehold:{{{name}}}");
    let held = client.mutex(&name).unwrap().acquire().await.unwrap();
    let waiting = tokio::spawn({
        let lock = other.mutex(&name).unwrap();
        async move { lock.acquire_timeout(LONG).await }
    });
    let migration = cluster.begin_migration(key_slot(&key), 1);
    assert!(migration.move_keys() > 0, "the lock's keys moved");
    // Renewed while the slot is half-moved: the source sends it on (ASK).
    held.extend(Duration::from_secs(2)).await.unwrap();
    // Past two leases: the watchdog kept it through the move.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!held.is_lost(), "{:?}", held.loss_reason());
    migration.finish();
    assert!(exists(cluster.master(1), &key));
    let fence = held.fence();
    held.release().await.unwrap();
    let taken = waiting.await.unwrap().unwrap();
    assert!(taken.fence() > fence);
    taken.release().await.unwrap();
    client.flush().await;
    every_key_has_a_ttl(&cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_failover_is_invisible_to_holders_and_waiters() {
    let mut cluster = RedisCluster::start(3, 1);
    let client = Client::builder("")
        .seeds(cluster.urls())
        .lease(Duration::from_secs(3))
        .build()
        .unwrap();
    let other = Client::builder("").seeds(cluster.urls()).build().unwrap();
    let name = name_on(&cluster, 0, "failover");
    let held = client.mutex(&name).unwrap().acquire().await.unwrap();
    let waiting = tokio::spawn({
        let lock = other.mutex(&name).unwrap();
        async move { lock.acquire_timeout(LONG).await }
    });
    cluster.failover(0);
    // Past a lease: the watchdog renewed it on the new master.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(!held.is_lost(), "{:?}", held.loss_reason());
    held.extend(Duration::from_secs(3)).await.unwrap();
    let fence = held.fence();
    held.release().await.unwrap();
    let taken = waiting.await.unwrap().unwrap();
    assert!(taken.fence() > fence);
    taken.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_ride_out_a_master_killed_during_contention() {
    let mut cluster = RedisCluster::start(3, 1);
    let clients: Vec<Client> = (0..3)
        .map(|_| {
            Client::builder("")
                .seeds(cluster.urls())
                .lease(Duration::from_secs(2))
                .command_timeout(Duration::from_millis(500))
                .build()
                .unwrap()
        })
        .collect();
    let name = name_on(&cluster, 2, "killed");
    let held = clients[0].mutex(&name).unwrap().acquire().await.unwrap();
    let waiters: Vec<_> = clients[1..]
        .iter()
        .map(|client| {
            let lock = client.mutex(&name).unwrap();
            tokio::spawn(async move {
                let guard = lock.acquire_timeout(LONG).await?;
                let fence = guard.fence();
                guard.release().await.map(|()| fence)
            })
        })
        .collect();
    cluster.kill_master(2);
    // The holder either kept its lease through the promotion or learns it
    // lost it; the waiters get the lock from the new master either way.
    let _ = held.release().await;
    let mut fences = Vec::new();
    for waiter in waiters {
        fences.push(
            waiter
                .await
                .unwrap()
                .expect("the wait rode out the failover"),
        );
    }
    assert_ne!(fences[0], fences[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_stay_on_the_lock_shard_and_survive_a_dropped_subscription() {
    let cluster = RedisCluster::start(3, 0);
    let holder = Client::open(&cluster.urls()[0]).unwrap();
    let waiter = Client::open(&cluster.urls()[0]).unwrap();
    let name = name_on(&cluster, 1, "notified");
    let queue = format!("leasehold:{{{name}}}:q");
    let master = cluster.master(1);
    for server in cluster.masters() {
        assert_eq!(server.command(&["CONFIG", "RESETSTAT"]).unwrap(), "OK");
    }
    for round in 0..2 {
        let held = holder.mutex(&name).unwrap().acquire().await.unwrap();
        let waiting = tokio::spawn({
            let lock = waiter.mutex(&name).unwrap();
            async move { lock.acquire_timeout(LONG).await }
        });
        common::eventually("the waiter to queue", || async { exists(master, &queue) }).await;
        if round == 1 {
            // The waiter's shard subscription goes away: it still gets in.
            master
                .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
                .unwrap();
        }
        held.release().await.unwrap();
        waiting.await.unwrap().unwrap().release().await.unwrap();
    }
    if !leasehold_testkit::server_version().unwrap().at_least(7, 0) {
        // No sharded pub/sub before Redis 7: classic PUBLISH it is.
        return;
    }
    let stats = master.command(&["INFO", "commandstats"]).unwrap();
    assert!(stats.contains("cmdstat_spublish:"), "{stats}");
    for server in cluster.masters() {
        let stats = server.command(&["INFO", "commandstats"]).unwrap();
        assert!(
            !stats.contains("cmdstat_publish:"),
            "a broadcast PUBLISH on {}: {stats}",
            server.port()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_holds_a_promoted_master_back_until_it_has_passed() {
    let mut cluster = RedisCluster::start(3, 1);
    let grace = Duration::from_secs(2);
    let graced = Client::builder("")
        .seeds(cluster.urls())
        .restart_grace(grace)
        .build()
        .unwrap();
    let plain = Client::builder("").seeds(cluster.urls()).build().unwrap();
    let name = name_on(&cluster, 0, "promoted");
    let lock = graced.mutex(&name).unwrap();
    // Once the fresh servers are past their restart grace, the lock is free.
    common::eventually("the cluster to be older than the grace", || async {
        match lock.try_acquire().await {
            Ok(Some(guard)) => guard.release().await.is_ok(),
            _ => false,
        }
    })
    .await;
    cluster.failover(0);
    // The promoted replica is another master of the slot: nothing from it
    // until the grace has passed, for the client that saw the change.
    assert!(
        lock.try_acquire().await.unwrap().is_none(),
        "a new master granted a lock within the grace"
    );
    let taken = plain.mutex(&name).unwrap().try_acquire().await.unwrap();
    taken
        .expect("without a grace the new master grants at once")
        .release()
        .await
        .unwrap();
    let guard = lock
        .acquire_timeout(LONG)
        .await
        .expect("granted once the grace has passed");
    guard.release().await.unwrap();
}

/// A failover moves every slot of a shard at once: the grace is counted
/// from when the client first saw the promoted master, not again for each
/// slot of that shard the client comes back to later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failover_costs_one_grace_whatever_the_slots() {
    let mut cluster = RedisCluster::start(3, 1);
    let grace = Duration::from_secs(2);
    let graced = Client::builder("")
        .seeds(cluster.urls())
        .restart_grace(grace)
        .build()
        .unwrap();
    let first = name_on(&cluster, 0, "promoted");
    let slot = key_slot(format!("leasehold:{{{first}}}"));
    let second = (0..1_000)
        .map(|i| name_on(&cluster, 0, &format!("sibling-{i}")))
        .find(|name| key_slot(format!("leasehold:{{{name}}}")) != slot)
        .expect("a second slot on the shard");
    let (one, two) = (
        graced.mutex(&first).unwrap(),
        graced.mutex(&second).unwrap(),
    );
    // Both slots are seen served by the first master.
    common::eventually("the cluster to be older than the grace", || async {
        for lock in [&one, &two] {
            let Ok(Some(guard)) = lock.try_acquire().await else {
                return false;
            };
            if guard.release().await.is_err() {
                return false;
            }
        }
        true
    })
    .await;
    cluster.failover(0);
    assert!(
        one.try_acquire().await.unwrap().is_none(),
        "a new master granted a lock within the grace"
    );
    one.acquire_timeout(LONG)
        .await
        .expect("granted once the grace has passed")
        .release()
        .await
        .unwrap();
    // The second slot changed master at the same failover: its grace ran
    // from the same moment, and is over.
    two.try_acquire()
        .await
        .unwrap()
        .expect("the second slot of the shard waited a second grace")
        .release()
        .await
        .unwrap();
}

/// Two lock names whose keys share one hash slot, on `shard`.
fn two_names_in_one_slot(cluster: &RedisCluster, shard: usize) -> (String, String) {
    let first = name_on(cluster, shard, "pair");
    let slot = key_slot(format!("leasehold:{{{first}}}"));
    let second = (0..1_000_000)
        .map(|i| format!("other-{i}"))
        .find(|name| key_slot(format!("leasehold:{{{name}}}")) == slot)
        .expect("a second name in the slot");
    (first, second)
}

/// Two leases of one client in one slot share a renew script. While the
/// slot migrates with one lock's key moved and the other's not, the source
/// answers that script TRYAGAIN (some keys here, some gone): the watchdog
/// renews each alone (one on the source, one through ASK), and both hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_leases_in_a_half_migrated_slot_are_both_kept() {
    let cluster = RedisCluster::start(3, 0);
    let client = Client::builder(cluster.urls()[0].clone())
        .lease(Duration::from_secs(1))
        .build()
        .unwrap();
    let (a, b) = two_names_in_one_slot(&cluster, 0);
    let key_a = format!("leasehold:{{{a}}}");
    let held_a = client.mutex(&a).unwrap().acquire().await.unwrap();
    let held_b = client.mutex(&b).unwrap().acquire().await.unwrap();
    let migration = cluster.begin_migration(key_slot(&key_a), 1);
    assert!(migration.move_key(&key_a), "a's lock key moved");
    // Each alone can be renewed: a through ASK, b on the source.
    held_a.extend(Duration::from_secs(1)).await.unwrap();
    held_b.extend(Duration::from_secs(1)).await.unwrap();
    // Past two leases: the watchdog should have kept both.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (lost_a, lost_b) = (held_a.loss_reason(), held_b.loss_reason());
    migration.finish();
    assert!(
        lost_a.is_none() && lost_b.is_none(),
        "leases lost while the slot was half-migrated: a {lost_a:?}, b {lost_b:?}"
    );
}

/// A fresh client that reaches a cluster whose lock slot answers TRYAGAIN
/// (a migration in progress) has reached Redis: its wait is not cut short
/// by the connect timeout, and ends with the lock once the move is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_client_that_meets_tryagain_waits_on() {
    let cluster = RedisCluster::start(3, 0);
    let holder = Client::open(&cluster.urls()[0]).unwrap();
    let name = name_on(&cluster, 0, "moving");
    let key = format!("leasehold:{{{name}}}");
    let held = holder.mutex(&name).unwrap().acquire().await.unwrap();
    held.release().await.unwrap();
    // The fence key stays on the source; the lock key is gone.
    let migration = cluster.begin_migration(key_slot(&key), 1);
    let fresh = Client::builder(cluster.urls()[0].clone())
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let lock = fresh.mutex(&name).unwrap();
    let waiting = tokio::spawn(async move { lock.acquire_timeout(LONG).await });
    tokio::time::sleep(Duration::from_secs(3)).await;
    migration.finish();
    match waiting.await.unwrap() {
        Ok(guard) => guard.release().await.unwrap(),
        Err(err) => panic!("the wait ended within its bound: {err}"),
    }
}

/// With a restart grace, a slot that moved to another (long-running)
/// master by a resharding is not held back: the keys moved with it and
/// nothing can have been lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_does_not_hold_back_a_slot_that_only_migrated() {
    let cluster = RedisCluster::start(3, 0);
    let grace = Duration::from_secs(5);
    let graced = Client::builder(cluster.urls()[0].clone())
        .restart_grace(grace)
        .build()
        .unwrap();
    let name = name_on(&cluster, 0, "resharded");
    let key = format!("leasehold:{{{name}}}");
    let lock = graced.mutex(&name).unwrap();
    common::eventually("the cluster to be older than the grace", || async {
        match lock.try_acquire().await {
            Ok(Some(guard)) => guard.release().await.is_ok(),
            _ => false,
        }
    })
    .await;
    cluster.migrate_slot(key_slot(&key), 1);
    let got = lock.try_acquire().await.unwrap();
    assert!(
        got.is_some(),
        "a lock on a slot that only migrated was held back by the grace"
    );
}

/// The first seed is a replica: the cluster is still found, and every
/// shard serves locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_as_the_first_seed_finds_the_cluster() {
    let cluster = RedisCluster::start(3, 1);
    let replica = cluster.replicas()[0].url();
    let client = Client::open(&replica).unwrap();
    for shard in 0..3 {
        let name = name_on(&cluster, shard, "via-replica");
        let guard = client
            .mutex(&name)
            .unwrap()
            .acquire_timeout(LONG)
            .await
            .unwrap();
        guard.release().await.unwrap();
    }
}
