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
