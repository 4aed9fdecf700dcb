//! Replica acknowledgement by default: on a master with replicas every
//! grant waits (WAIT, behind the script) for the replicas the master has
//! connected, and is undone when they do not acknowledge it; a master
//! without replicas is sent no WAIT. Behind Sentinel and on a Redis
//! Cluster with replicas, and on one server.

mod common;

use std::time::Duration;

use leasehold::{Client, ErrorKind, LossReason, ReplicaAck};
use leasehold_testkit::{RedisCluster, RedisServer, Sentinels};

/// Long enough for any step that should succeed; a hang fails the test.
const LONG: Duration = Duration::from_secs(30);

/// Whether `server` has `key`: on a cluster replica too, which would
/// redirect a read of the key (KEYS names no key).
fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&["KEYS", key]).unwrap().contains(key)
}

/// The replica stops applying its master's writes for `ms` (it stays
/// connected and listed online): as a replica cut off or lagging far
/// behind, it acknowledges nothing.
fn stall(replica: &RedisServer, ms: u64) {
    assert_eq!(
        replica
            .command(&["CLIENT", "PAUSE", &ms.to_string(), "WRITE"])
            .unwrap(),
        "OK"
    );
}

fn resume(replica: &RedisServer) {
    assert_eq!(replica.command(&["CLIENT", "UNPAUSE"]).unwrap(), "OK");
}

/// `host:port` as the master lists a replica it has connected.
fn listed(replica: &RedisServer) -> String {
    format!("127.0.0.1:{}", replica.port())
}

/// How many WAITs `server` has run.
fn waits(server: &RedisServer) -> u64 {
    let stats = server.command(&["INFO", "commandstats"]).unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// A client with the library's defaults but a short connect timeout (the
/// bound of a wait without one that cannot be made safe).
fn client(url: &str) -> Client {
    Client::builder(url)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_sentinel_a_grant_waits_for_the_replica_by_default() {
    let group = Sentinels::start(1, 1);
    let client = client(&group.url());
    let replica = group.replicas()[0];

    let guard = client.mutex("job").unwrap().acquire().await.unwrap();
    assert!(
        exists(replica, "leasehold:{job}"),
        "the replica has the grant when it is returned"
    );
    assert!(waits(group.master()) >= 1, "a WAIT went with the grant");
    guard.release().await.unwrap();

    // A replica that acknowledges nothing: every grant is undone.
    stall(replica, 20_000);
    let mutex = client.mutex("stalled").unwrap();
    let err = mutex.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReplicasMissing, "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("only 0 of its 1 replica (")
            && text.contains(&listed(replica))
            && text.contains("it was released and is not held"),
        "{text}"
    );
    assert!(!exists(group.master(), "leasehold:{stalled}"));
    let info = mutex.inspect().await.unwrap();
    assert!(!info.held);
    let replicas = info.replicas.expect("one master stands behind the lock");
    assert_eq!(replicas.online, [listed(replica)]);
    assert_eq!(replicas.last_shortfall, Some((0, 1)));

    // A wait without a bound does not wait forever for a lock it cannot
    // make safe: it gives up after the connect timeout, saying why.
    let err = tokio::time::timeout(LONG, mutex.acquire())
        .await
        .expect("the wait gives up")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReplicasMissing, "{err:?}");
    assert!(!exists(group.master(), "leasehold:{stalled}"));

    // Turned off, the lock is granted by the master alone.
    let off = Client::builder(group.url())
        .replica_ack(ReplicaAck::Off)
        .build()
        .unwrap();
    let guard = off.mutex("stalled").unwrap().try_acquire().await.unwrap();
    guard
        .expect("granted without the replica")
        .release()
        .await
        .unwrap();

    resume(replica);
    let guard = mutex.acquire().await.unwrap();
    assert!(exists(replica, "leasehold:{stalled}"));
    assert_eq!(
        mutex
            .inspect()
            .await
            .unwrap()
            .replicas
            .unwrap()
            .last_shortfall,
        None,
        "the shortfall is forgotten once an acknowledgement is had"
    );
    guard.release().await.unwrap();
}

/// The master's replicas cut off from it (it refuses their PSYNC): the
/// master no longer lists them, but the sentinels could still promote
/// them, so a grant they cannot have is not made.
fn cut_off(master: &RedisServer, on: bool) {
    let acl = if on {
        ["-psync", "-sync"]
    } else {
        ["+psync", "+sync"]
    };
    let reply = master
        .command(&["ACL", "SETUSER", "default", acl[0], acl[1]])
        .unwrap();
    assert_eq!(reply, "OK");
    if on {
        master
            .command(&["CLIENT", "KILL", "TYPE", "replica"])
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_that_could_still_take_over_is_waited_for() {
    let group = Sentinels::start(1, 1);
    let client = client(&group.url());
    let replica = group.replicas()[0];
    let mutex = client.mutex("job").unwrap();
    mutex.acquire().await.unwrap().release().await.unwrap();
    let status = mutex.inspect().await.unwrap().replicas.unwrap();
    assert_eq!(status.promotable, [listed(replica)], "{status:?}");

    cut_off(group.master(), true);
    tokio::time::timeout(LONG, async {
        while group
            .master()
            .command(&["INFO", "replication"])
            .unwrap()
            .contains("slave0:")
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the master drops its replica");
    let err = mutex.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReplicasMissing, "{err:?}");
    assert!(
        err.to_string().contains(&format!(
            "{} (not in sync with the master for",
            listed(replica)
        )) && err
            .to_string()
            .contains("waited for while the sentinels could still promote it"),
        "{err}"
    );
    assert!(!exists(group.master(), "leasehold:{job}"));

    cut_off(group.master(), false);
    let guard = mutex.acquire_timeout(LONG).await.unwrap();
    assert!(exists(replica, "leasehold:{job}"));
    guard.release().await.unwrap();
}

/// The same on a cluster: the master knows its replica through the
/// cluster's bus when their replication link is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_replica_cut_off_is_waited_for() {
    let cluster = RedisCluster::start(3, 1);
    let client = client(&cluster.urls().join(","));
    let key = "leasehold:{job}";
    let master = cluster.master_for_key(key);
    let replica = cluster.replicas_of(cluster.shard_of_slot(leasehold_testkit::key_slot("job")))[0];
    let mutex = client.mutex("job").unwrap();
    mutex.acquire().await.unwrap().release().await.unwrap();
    let status = mutex.inspect().await.unwrap().replicas.unwrap();
    assert_eq!(status.promotable, [listed(replica)], "{status:?}");

    cut_off(master, true);
    tokio::time::timeout(LONG, async {
        while master
            .command(&["INFO", "replication"])
            .unwrap()
            .contains("slave0:")
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the master drops its replica");
    let err = mutex.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReplicasMissing, "{err:?}");
    assert!(
        err.to_string()
            .contains("cluster-replica-validity-factor 0 lets it be promoted"),
        "the test kit's factor 0: {err}"
    );
    assert!(!exists(master, key));
    cut_off(master, false);
}

/// A cluster replica whose replication is cut (its master refuses its
/// PSYNC) while the cluster's bus stays up is never marked failed, but
/// Redis refuses to promote it once it has been cut off for longer than
/// `cluster-node-timeout` × (`cluster-replica-validity-factor` + 1) +
/// `repl-ping-replica-period` (here 1 s × 2 + 1 s, and a second for Redis's
/// rounding): grants wait for it until then, and go on without it after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_replica_cut_off_too_long_to_be_promoted_is_no_longer_waited_for() {
    let cluster = RedisCluster::builder(3, 1)
        .node_timeout(Duration::from_millis(1_000))
        .args(&[
            "--cluster-replica-validity-factor",
            "1",
            "--repl-ping-replica-period",
            "1",
        ])
        .start();
    let client = client(&cluster.urls().join(","));
    let key = "leasehold:{job}";
    let master = cluster.master_for_key(key);
    let replica = cluster.replicas_of(cluster.shard_of_slot(leasehold_testkit::key_slot("job")))[0];
    let mutex = client.mutex("job").unwrap();
    mutex.acquire().await.unwrap().release().await.unwrap();

    cut_off(master, true);
    tokio::time::timeout(LONG, async {
        while !replica
            .command(&["INFO", "replication"])
            .unwrap()
            .contains("master_link_status:down")
            || master
                .command(&["INFO", "replication"])
                .unwrap()
                .contains("slave0:")
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the replication link is down");
    let err = mutex.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReplicasMissing, "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&listed(replica))
            && text.contains("waited for while it could still be promoted"),
        "{text}"
    );
    assert!(!exists(master, key));

    // Grants resume once it can no longer be promoted.
    let guard = mutex
        .acquire_timeout(LONG)
        .await
        .expect("granted once the replica cannot be promoted");
    assert!(exists(master, key));
    assert!(!exists(replica, key), "the replica is cut off");
    let status = mutex.inspect().await.unwrap().replicas.unwrap();
    assert!(status.promotable.is_empty(), "{status:?}");
    assert_eq!(status.cut_off.len(), 1, "{status:?}");
    let cut = &status.cut_off[0];
    assert_eq!(cut.address, listed(replica));
    assert!(!cut.waited_for, "{status:?}");
    assert_eq!(cut.promotable_for, Some(Duration::ZERO), "{status:?}");
    assert_eq!(cut.validity_factor, Some(1), "{status:?}");
    // All the while the cluster's bus was up: it is not marked failed.
    let nodes = master.command(&["CLUSTER", "NODES"]).unwrap();
    let line = nodes
        .lines()
        .find(|line| line.contains(&format!(":{}@", replica.port())))
        .expect("the master knows its replica");
    assert!(!line.contains("fail"), "{line}");
    guard.release().await.unwrap();
    cut_off(master, false);
}

/// A replica stopped for good (a crash) leaves the master's list at once,
/// but could still be promoted until the sentinels find it down: grants
/// wait for it until then, and go on without it after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_the_sentinels_find_down_is_no_longer_waited_for() {
    let mut group = Sentinels::start(1, 1);
    let client = client(&group.url());
    client
        .mutex("a")
        .unwrap()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    tokio::task::block_in_place(|| group.stop_replica(0));
    let guard = client.mutex("a").unwrap().acquire_timeout(LONG).await;
    guard
        .expect("granted once the replica is down")
        .release()
        .await
        .unwrap();
}

/// A release that hands a fair lock over does not wait for the replicas:
/// the waiter it is handed to has them acknowledge it before it counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_counts_once_the_replica_has_it() {
    let group = Sentinels::start(1, 1);
    let holder = client(&group.url());
    let waiter = client(&group.url());
    let replica = group.replicas()[0];
    let held = holder.fair_mutex("fair").unwrap().acquire().await.unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .fair_mutex("fair")
            .unwrap()
            .acquire_timeout(Duration::from_secs(3))
            .await
    });
    let mutex = holder.fair_mutex("fair").unwrap();
    tokio::time::timeout(LONG, async {
        while mutex.inspect().await.unwrap().waiting_clients == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the waiter queues");
    stall(replica, 20_000);
    held.release().await.unwrap();
    let err = waiting.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReplicasMissing, "{err:?}");
    resume(replica);
    assert!(!mutex.inspect().await.unwrap().held, "nothing stays held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_with_replicas_a_grant_waits_for_the_shard_s_replica() {
    let cluster = RedisCluster::start(3, 1);
    let client = client(&cluster.urls().join(","));
    let key = "leasehold:{job}";
    let shard = cluster.shard_of_slot(leasehold_testkit::key_slot("job"));
    let replica = cluster.replicas_of(shard)[0];

    let guard = client.mutex("job").unwrap().acquire().await.unwrap();
    assert!(exists(replica, key), "the shard's replica has the grant");
    guard.release().await.unwrap();

    stall(replica, 20_000);
    let err = client
        .mutex("job")
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReplicasMissing, "{err:?}");
    assert!(err.to_string().contains(&listed(replica)), "{err}");
    assert!(!exists(cluster.master_for_key(key), key));
    resume(replica);
}

/// One server without replicas pays nothing: no WAIT is sent.
#[tokio::test]
async fn a_master_without_replicas_is_sent_no_wait() {
    let server = RedisServer::start();
    let client = client(&server.url());
    for kind in 0..3 {
        let guard = match kind {
            0 => client.mutex("m").unwrap().acquire().await.unwrap(),
            1 => client.fair_mutex("f").unwrap().acquire().await.unwrap(),
            _ => client.semaphore("s", 2).unwrap().acquire().await.unwrap(),
        };
        guard.extend(Duration::from_secs(10)).await.unwrap();
        guard.release().await.unwrap();
    }
    assert_eq!(waits(&server), 0);
    let info = client.mutex("m").unwrap().inspect().await.unwrap();
    assert_eq!(info.replicas.unwrap().online, Vec::<String>::new());
}

/// Asked for explicitly, replicas a master does not have fail every grant.
#[tokio::test]
async fn replicas_asked_for_that_are_not_there_fail_the_grant() {
    let server = RedisServer::start();
    let client = Client::builder(server.url())
        .replica_ack(ReplicaAck::AtLeast {
            replicas: 1,
            timeout: Duration::from_millis(50),
        })
        .build()
        .unwrap();
    let err = client.mutex("m").unwrap().try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReplicasMissing, "{err:?}");
    assert!(
        err.to_string()
            .contains("only 0 of the 1 replica asked for"),
        "{err}"
    );
    // A lock's own setting wins over the client's.
    let guard = client
        .mutex("m")
        .unwrap()
        .with_replica_ack(0, Duration::from_secs(1))
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    guard
        .expect("granted with no acknowledgement")
        .release()
        .await
        .unwrap();
}

#[test]
fn a_replica_timeout_out_of_range_is_refused_by_the_builder() {
    for timeout in [Duration::ZERO, Duration::from_secs(61)] {
        let err = Client::builder("redis://127.0.0.1:1")
            .replica_ack(ReplicaAck::Connected { timeout })
            .build()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err:?}");
    }
}

/// A lease whose server restarted without it says so: the master changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_to_a_restart_says_the_master_changed() {
    let mut server = RedisServer::start();
    let client = Client::builder(server.url())
        .lease(Duration::from_millis(1500))
        .build()
        .unwrap();
    let guard = client.mutex("job").unwrap().acquire().await.unwrap();
    tokio::task::block_in_place(|| server.restart());
    tokio::time::timeout(LONG, guard.lost())
        .await
        .expect("the loss is noticed");
    assert_eq!(guard.loss_reason(), Some(LossReason::MasterChanged));
    let err = guard.release().await.unwrap_err();
    assert!(err.to_string().contains("the master changed"), "{err}");

    // A release that finds the token gone after a restart says so too.
    let fixed = Client::builder(server.url())
        .watchdog(false)
        .build()
        .unwrap();
    let guard = fixed.mutex("job").unwrap().acquire().await.unwrap();
    tokio::task::block_in_place(|| server.restart());
    // The client's connection to the old process is gone: heal it first, so
    // that the release's one attempt reaches the new one.
    let other = fixed.mutex("other").unwrap();
    tokio::time::timeout(LONG, async {
        while other.inspect().await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the client reaches the restarted server");
    let err = guard.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotHeld, "{err:?}");
    assert!(err.to_string().contains("the master changed"), "{err}");
}

/// A replica that acknowledges nothing holds back grants, not the leases
/// already held: their renewals do not queue behind the WAITs of other
/// locks' acquisitions on the same client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_replica_costs_held_leases_nothing() {
    let group = Sentinels::start(1, 1);
    let client = Client::builder(group.url())
        .lease(Duration::from_secs(3))
        .build()
        .unwrap();
    let held = client.mutex("held").unwrap().acquire().await.unwrap();
    stall(group.replicas()[0], 20_000);
    let tries: Vec<_> = (0..6)
        .map(|i| {
            let mutex = client.mutex(&format!("other-{i}")).unwrap();
            tokio::spawn(async move { mutex.acquire_timeout(Duration::from_secs(8)).await })
        })
        .collect();
    for tried in tries {
        let err = tried.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ReplicasMissing, "{err:?}");
    }
    assert!(!held.is_lost(), "{:?}", held.loss_reason());
    resume(group.replicas()[0]);
    held.release().await.unwrap();
}

/// A cluster replica cut off long enough to be no longer waited for comes
/// back in sync and is cut off again between two of the client's readings
/// of its master: both readings find it missing, but its data is fresh
/// again and Redis could promote it, so a grant waits for it anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_replica_back_and_cut_off_again_unseen_is_waited_for_again() {
    let cluster = RedisCluster::builder(3, 1)
        .node_timeout(Duration::from_millis(1_000))
        .args(&[
            "--cluster-replica-validity-factor",
            "1",
            "--repl-ping-replica-period",
            "1",
        ])
        .start();
    let client = client(&cluster.urls().join(","));
    let key = "leasehold:{job}";
    let master = cluster.master_for_key(key);
    let replica = cluster.replicas_of(cluster.shard_of_slot(leasehold_testkit::key_slot("job")))[0];
    let mutex = client.mutex("job").unwrap();
    mutex.acquire().await.unwrap().release().await.unwrap();
    let link_down = || async {
        tokio::time::timeout(LONG, async {
            while !replica
                .command(&["INFO", "replication"])
                .unwrap()
                .contains("master_link_status:down")
                || master
                    .command(&["INFO", "replication"])
                    .unwrap()
                    .contains("slave0:")
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the replication link is down");
    };
    cut_off(master, true);
    link_down().await;
    assert!(mutex.try_acquire().await.is_err());
    // Past the span: no longer waited for.
    mutex
        .acquire_timeout(LONG)
        .await
        .expect("granted once the replica cannot be promoted")
        .release()
        .await
        .unwrap();
    let read = std::time::Instant::now();

    // Back in sync and cut off again, with no grant (and no reading) between.
    cut_off(master, false);
    tokio::time::timeout(LONG, async {
        while !master
            .command(&["INFO", "replication"])
            .unwrap()
            .contains("state=online")
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the replica is back in sync");
    cut_off(master, true);
    link_down().await;
    // The next grant reads the master again (its last reading is due).
    tokio::time::sleep(Duration::from_millis(5_500).saturating_sub(read.elapsed())).await;
    let err = mutex
        .try_acquire()
        .await
        .expect_err("a replica Redis could promote again is waited for");
    assert_eq!(err.kind(), ErrorKind::ReplicasMissing, "{err:?}");
    assert!(!exists(master, key));
    cut_off(master, false);
}
