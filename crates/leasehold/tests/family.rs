//! ReentrantMutex, RwLock and Semaphore: the behaviour their users rely on,
//! against real servers: most tests run on one server and on a Redis
//! Cluster (`name::single`, `name::cluster`).

mod common;

use std::time::Duration;

use common::{client, client_with, cmd, eventually, poll_then_drop, Servers};
use leasehold::{ErrorKind, HoldMode, Owner};
use leasehold_testkit::RedisServer;

const LONG: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(100);

common::on_both_topologies!(
    a_reentrant_mutex_counts_levels_and_frees_at_zero,
    a_reentry_does_not_wait_behind_a_local_waiter: multi_thread,
    a_reentrant_lock_held_at_several_levels_expires,
    extending_one_level_extends_the_hold,
    a_reentrant_lock_is_not_released_by_another_owners_handle,
    readers_share_and_a_writer_excludes,
    a_reader_is_never_behind_a_write_its_counter_missed,
    a_waiting_writer_blocks_later_readers_and_its_release_wakes_them_all: multi_thread,
    upgrade_is_refused_and_downgrade_works,
    a_semaphore_holds_at_most_its_permits,
    a_big_request_is_served_in_turn: multi_thread,
    permits_of_a_crashed_client_come_back_after_their_lease,
    a_permit_count_mismatch_is_reported_and_can_be_changed,
    a_name_is_one_kind_of_lock,
    inspect_and_errors_name_the_holder,
    the_watchdog_renews_every_kind,
    owners_can_be_shared_by_id,
);

async fn a_reentrant_mutex_counts_levels_and_frees_at_zero(servers: Servers) {
    let client = servers.client();
    let lock = client.reentrant_mutex("cfg").unwrap();
    let other = client.reentrant_mutex("cfg").unwrap();
    let outer = lock.acquire().await.unwrap();
    let inner = lock.clone().acquire().await.unwrap();
    let third = lock.try_acquire().await.unwrap().unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 3);
    assert_eq!(inner.fence(), outer.fence());
    assert_eq!(third.fence(), outer.fence());
    assert!(other.try_acquire().await.unwrap().is_none());
    let err = other.acquire_timeout(SHORT).await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    inner.release().await.unwrap();
    third.release().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    assert!(other.try_acquire().await.unwrap().is_none());
    let first_fence = outer.fence();
    outer.release().await.unwrap();
    let theirs = other.try_acquire().await.unwrap().unwrap();
    assert!(theirs.fence() > first_fence);
    theirs.release().await.unwrap();
    assert!(!servers.cmd::<bool>(&["EXISTS", "leasehold:{cfg}"]).await);
}

/// A reentry never waits, not even behind a waiter of its own client that
/// waits for this very owner.
async fn a_reentry_does_not_wait_behind_a_local_waiter(servers: Servers) {
    let client = servers.client();
    let mine = client.reentrant_mutex("cfg").unwrap();
    let theirs = client.reentrant_mutex("cfg").unwrap();
    let outer = mine.acquire().await.unwrap();
    let waiting = tokio::spawn(async move { theirs.acquire_timeout(LONG).await });
    eventually("the other owner to queue", || async {
        servers.cmd::<u64>(&["ZCARD", "leasehold:{cfg}:q"]).await == 1
    })
    .await;
    let inner = tokio::time::timeout(Duration::from_secs(10), mine.acquire())
        .await
        .expect("the reentry waited behind the other owner")
        .unwrap();
    inner.release().await.unwrap();
    outer.release().await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    got.release().await.unwrap();
}

/// The hold runs out with its one lease when the owner stops renewing: the
/// lock is another owner's then, and every guard of the hold reports it lost.
async fn a_reentrant_lock_held_at_several_levels_expires(servers: Servers) {
    let holder = servers.client_with(Duration::from_millis(300), false);
    let lock = holder.reentrant_mutex("cfg").unwrap();
    let a = lock.acquire().await.unwrap();
    let b = lock.acquire().await.unwrap();
    let c = lock.acquire().await.unwrap();
    let other = servers.client().reentrant_mutex("cfg").unwrap();
    let got = other
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(got.fence() > a.fence());
    for guard in [&a, &b, &c] {
        assert!(guard.is_lost(), "{guard:?}");
        assert!(guard.valid_for().is_zero());
        tokio::time::timeout(SHORT, guard.lost()).await.unwrap();
    }
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    for guard in [b, a, c] {
        assert!(guard.release().await.unwrap_err().is_not_held());
    }
    assert_eq!(other.hold_count().await.unwrap(), 1);
    got.release().await.unwrap();
}

/// One lease for every level of a hold: a reentry refreshes it to the full
/// lease, so a level taken later keeps the earlier ones held too, and each
/// release undoes one level.
#[tokio::test]
async fn the_levels_of_a_hold_share_one_lease() {
    let server = RedisServer::start();
    // Margins of over a second either way, for a slow machine.
    let lease = Duration::from_millis(3000);
    let lock = client_with(&server, lease, false)
        .reentrant_mutex("cfg")
        .unwrap();
    let other = client(&server).reentrant_mutex("cfg").unwrap();
    let outer = lock.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let inner = lock.acquire().await.unwrap();
    // Past the end of the lease the outer level was granted with.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert!(!outer.is_lost() && !inner.is_lost());
    let (a, b) = (outer.valid_for(), inner.valid_for());
    assert!(a.abs_diff(b) < Duration::from_millis(50), "{a:?} {b:?}");
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    outer.release().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    assert!(other.try_acquire().await.unwrap().is_none());
    inner.release().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    other
        .try_acquire()
        .await
        .unwrap()
        .expect("free once the last level is released")
        .release()
        .await
        .unwrap();
}

/// `extend` on any guard of a hold extends the one lease all of them share.
async fn extending_one_level_extends_the_hold(servers: Servers) {
    let lock = servers
        .client_with(Duration::from_millis(1500), false)
        .reentrant_mutex("cfg")
        .unwrap();
    let outer = lock.acquire().await.unwrap();
    let inner = lock.acquire().await.unwrap();
    inner.extend(LONG).await.unwrap();
    assert!(outer.valid_for() > LONG / 2, "{:?}", outer.valid_for());
    let info = lock.inspect().await.unwrap();
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert!(info.remaining.unwrap() > LONG / 2);
    inner.release().await.unwrap();
    outer.release().await.unwrap();
}

/// The watchdog renews a hold once per round however deep it is: a hold of
/// three levels is renewed as often as one of one level, in the same rounds.
#[tokio::test]
async fn the_watchdog_renews_a_hold_once_however_deep() {
    let server = RedisServer::start();
    let client = client_with(&server, Duration::from_millis(600), true);
    let deep = client.reentrant_mutex("deep").unwrap();
    let flat = client.reentrant_mutex("flat").unwrap();
    let levels = [
        deep.acquire().await.unwrap(),
        deep.acquire().await.unwrap(),
        deep.acquire().await.unwrap(),
    ];
    let one = flat.acquire().await.unwrap();
    let _: () = cmd(&server, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]).await;
    let _: () = cmd(&server, &["CONFIG", "SET", "slowlog-max-len", "100000"]).await;
    let _: () = cmd(&server, &["SLOWLOG", "RESET"]).await;
    let keys = ["leasehold:{deep}", "leasehold:{flat}"];
    eventually("four renewals", || async {
        renewals_naming(&server, &keys).await.1 >= 4
    })
    .await;
    let (deep_renewals, flat_renewals) = renewals_naming(&server, &keys).await;
    assert!(
        deep_renewals.abs_diff(flat_renewals) <= 1,
        "a hold of three levels renewed {deep_renewals} times, one of one level {flat_renewals}"
    );
    for guard in levels {
        assert!(!guard.is_lost());
        guard.release().await.unwrap();
    }
    one.release().await.unwrap();
}

/// How often the scripts the server logged named each of two keys.
async fn renewals_naming(server: &RedisServer, keys: &[&str; 2]) -> (usize, usize) {
    use leasehold::redis::Value;
    let log: Value = cmd(server, &["SLOWLOG", "GET", "-1"]).await;
    let mut counts = (0, 0);
    let Value::Array(entries) = log else {
        panic!("{log:?}")
    };
    for entry in entries {
        let Value::Array(fields) = entry else {
            continue;
        };
        let Some(Value::Array(args)) = fields.get(3) else {
            continue;
        };
        let text = |v: &Value| match v {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::SimpleString(s) => s.clone(),
            _ => String::new(),
        };
        if args.first().map(text).as_deref() != Some("EVALSHA") {
            continue;
        }
        for arg in args.iter().map(text) {
            counts.0 += usize::from(arg == keys[0]);
            counts.1 += usize::from(arg == keys[1]);
        }
    }
    counts
}

/// Dropping a reentry at any point, or a level's guard, leaves the hold one
/// level less deep once the background release is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_reentry_at_any_point_leaves_the_depth_as_it_was() {
    let server = RedisServer::start();
    let c = client_with(&server, LONG, true);
    let lock = c.reentrant_mutex("cfg").unwrap();
    let outer = lock.acquire().await.unwrap();
    for polls in 0..16 {
        if let Some(got) = poll_then_drop(lock.acquire(), polls).await {
            drop(got.unwrap());
        }
        c.flush().await;
        assert_eq!(lock.hold_count().await.unwrap(), 1, "after {polls} polls");
    }
    for micros in [0u64, 50, 100, 200, 400, 800, 1600, 3200] {
        let cut = tokio::time::timeout(Duration::from_micros(micros), lock.try_acquire()).await;
        if let Ok(got) = cut {
            drop(got.unwrap());
        }
        c.flush().await;
        assert_eq!(lock.hold_count().await.unwrap(), 1, "after {micros} µs");
    }
    let inner = lock.acquire().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    drop(inner);
    c.flush().await;
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    assert!(!outer.is_lost());
    outer.release().await.unwrap();
    assert!(!cmd::<bool>(&server, &["EXISTS", "leasehold:{cfg}"]).await);
}

/// As Redisson's unlock by a thread that does not hold the lock: a handle of
/// another owner cannot release a level of this owner's hold, not even with
/// its token. The owner's own handles can.
async fn a_reentrant_lock_is_not_released_by_another_owners_handle(servers: Servers) {
    let client = servers.client();
    let mine = client.reentrant_mutex("cfg").unwrap();
    let theirs = client.reentrant_mutex("cfg").unwrap();
    let guard = mine.acquire().await.unwrap();
    let token = guard.token().to_owned();
    let err = theirs.release_token(&token).await.unwrap_err();
    assert!(err.is_not_held(), "{err}");
    assert!(err.to_string().contains("another owner"), "{err}");
    assert_eq!(mine.hold_count().await.unwrap(), 1);
    assert!(theirs.try_acquire().await.unwrap().is_none());
    let same = client
        .reentrant_mutex("cfg")
        .unwrap()
        .with_owner(mine.owner().clone());
    same.release_token(&token).await.unwrap();
    assert_eq!(mine.hold_count().await.unwrap(), 0);
    assert!(guard.release().await.unwrap_err().is_not_held());
}

async fn readers_share_and_a_writer_excludes(servers: Servers) {
    let client = servers.client();
    let one = client.rw_lock("cat").unwrap();
    let two = client.rw_lock("cat").unwrap();
    let writer = client.rw_lock("cat").unwrap();
    let r1 = one.read().acquire().await.unwrap();
    let r2 = two.read().try_acquire().await.unwrap().unwrap();
    assert!(writer.write().try_acquire().await.unwrap().is_none());
    let info = one.inspect().await.unwrap();
    assert_eq!(info.kind.as_deref(), Some("rwlock"));
    assert_eq!(info.holders.len(), 2);
    assert!(info.holders.iter().all(|h| h.mode == HoldMode::Read));
    r1.release().await.unwrap();
    assert!(writer.write().try_acquire().await.unwrap().is_none());
    r2.release().await.unwrap();
    let w = writer.write().try_acquire().await.unwrap().unwrap();
    assert!(one.read().try_acquire().await.unwrap().is_none());
    // Fences grow, write to read; readers that hold together share one.
    let fence = w.fence();
    w.release().await.unwrap();
    let r = one.read().acquire().await.unwrap();
    assert!(r.fence() > fence);
    let joined = two.read().acquire().await.unwrap();
    assert_eq!(joined.fence(), r.fence());
    r.release().await.unwrap();
    joined.release().await.unwrap();
    let w = writer.write().acquire().await.unwrap();
    assert!(w.fence() > fence);
    w.release().await.unwrap();
}

async fn a_reader_is_never_behind_a_write_its_counter_missed(servers: Servers) {
    let client = servers.client();
    let lock = client.rw_lock("rolled").unwrap();
    let w = lock.write().acquire().await.unwrap();
    let written = w.fence();
    w.release().await.unwrap();
    // A failover to a replica that missed the write leaves the counter at
    // an older write's fence.
    let fence_key = "leasehold:{rolled}:fence";
    let older = (written - 1_000_000).to_string();
    let _: () = servers.cmd(&["SET", fence_key, &older]).await;
    let r = lock.read().acquire().await.unwrap();
    assert!(
        r.fence() > written,
        "a reader reported {} after a write with {written}",
        r.fence()
    );
    r.release().await.unwrap();
}

async fn a_waiting_writer_blocks_later_readers_and_its_release_wakes_them_all(servers: Servers) {
    let reader = servers.client().rw_lock("cat").unwrap();
    let held = reader.read().acquire().await.unwrap();
    let writer = servers.client().rw_lock("cat").unwrap();
    let writing = tokio::spawn(async move { writer.write().acquire_timeout(LONG).await });
    eventually("the writer to queue", || async {
        servers.cmd::<u64>(&["ZCARD", "leasehold:{cat}:q"]).await == 1
    })
    .await;
    // A later reader queues behind the writer.
    let late = servers.client().rw_lock("cat").unwrap();
    assert!(late.read().try_acquire().await.unwrap().is_none());
    let mut later = Vec::new();
    for _ in 0..3 {
        let r = servers.client().rw_lock("cat").unwrap();
        later.push(tokio::spawn(
            async move { r.read().acquire_timeout(LONG).await },
        ));
    }
    eventually("the readers to queue", || async {
        servers.cmd::<u64>(&["ZCARD", "leasehold:{cat}:q"]).await == 4
    })
    .await;
    held.release().await.unwrap();
    let w = writing.await.unwrap().unwrap();
    // The writer holds alone.
    let info = late.inspect().await.unwrap();
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].mode, HoldMode::Write);
    w.release().await.unwrap();
    let mut guards = Vec::new();
    for r in later {
        guards.push(r.await.unwrap().unwrap());
    }
    assert_eq!(late.inspect().await.unwrap().holders.len(), 3);
    for g in guards {
        g.release().await.unwrap();
    }
}

/// Readers of one client that wait together are admitted together at a
/// writer's release, before a writer of another client that came after
/// them: each waiting task holds its own place in the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_of_one_client_are_admitted_together_before_a_later_writer() {
    let server = RedisServer::start();
    let first = client(&server).rw_lock("cat").unwrap();
    let w0 = first.write().acquire().await.unwrap();
    let readers = client(&server);
    let mut reading = Vec::new();
    for _ in 0..3 {
        let r = readers.rw_lock("cat").unwrap();
        reading.push(tokio::spawn(
            async move { r.read().acquire_timeout(LONG).await },
        ));
    }
    eventually("every reader to queue", || async {
        cmd::<u64>(&server, &["ZCARD", "leasehold:{cat}:q"]).await == 3
    })
    .await;
    let later = client(&server).rw_lock("cat").unwrap();
    let writing = tokio::spawn(async move { later.write().acquire_timeout(LONG).await });
    eventually("the later writer to queue", || async {
        cmd::<u64>(&server, &["ZCARD", "leasehold:{cat}:q"]).await == 4
    })
    .await;
    let w0_fence = w0.fence();
    w0.release().await.unwrap();
    let mut guards = Vec::new();
    for r in reading {
        let guard = tokio::time::timeout(Duration::from_secs(10), r)
            .await
            .expect("a reader was not admitted with the others")
            .unwrap()
            .unwrap();
        guards.push(guard);
    }
    let info = first.inspect().await.unwrap();
    assert_eq!(info.holders.len(), 3);
    assert!(info.holders.iter().all(|h| h.mode == HoldMode::Read));
    assert!(!writing.is_finished());
    for g in guards {
        g.release().await.unwrap();
    }
    let w2 = writing.await.unwrap().unwrap();
    assert!(w2.fence() > w0_fence);
    w2.release().await.unwrap();
}

async fn upgrade_is_refused_and_downgrade_works(servers: Servers) {
    let client = servers.client();
    let lock = client.rw_lock("cat").unwrap();
    let r = lock.read().acquire().await.unwrap();
    let err = lock.write().acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(err.to_string().contains("upgrad"), "{err}");
    r.release().await.unwrap();

    let w = lock.write().acquire().await.unwrap();
    let w2 = lock.write().acquire().await.unwrap(); // reentrant write
    assert_eq!(w2.fence(), w.fence());
    let r = lock.read().acquire().await.unwrap(); // downgrade step one
    w2.release().await.unwrap();
    w.release().await.unwrap();
    // Only the read share is left: another reader joins, a writer waits.
    let other = client.rw_lock("cat").unwrap();
    other
        .read()
        .try_acquire()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(other.write().try_acquire().await.unwrap().is_none());
    r.release().await.unwrap();
    other
        .write()
        .try_acquire()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// A read lease is released by its owner's handles alone; a bogus token
/// releases nothing.
#[tokio::test]
async fn a_read_lock_of_one_owner_is_not_released_by_another_owner() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.rw_lock("cat").unwrap();
    let r = lock.read().acquire().await.unwrap();
    let token = r.token().to_owned();
    let stranger = client.rw_lock("cat").unwrap();
    assert_ne!(stranger.owner(), lock.owner());
    let err = stranger.release_token("not-a-token").await.unwrap_err();
    assert!(err.is_not_held(), "{err}");
    // Another owner's handle, even with the right token, changes nothing.
    let err = stranger.release_token(&token).await.unwrap_err();
    assert!(err.is_not_held(), "{err}");
    assert!(err.to_string().contains("another owner"), "{err}");
    assert_eq!(lock.inspect().await.unwrap().holders.len(), 1);
    assert!(!r.is_lost());
    // A handle of the same owner, as another process sharing the owner id
    // would have, releases it.
    let same = client
        .rw_lock("cat")
        .unwrap()
        .with_owner(lock.owner().clone());
    same.release_token(&token).await.unwrap();
    assert!(r.release().await.unwrap_err().is_not_held());
}

/// A reader that stops renewing frees its share when its own lease ends,
/// while other readers hold on.
#[tokio::test]
async fn an_expired_reader_does_not_block_a_writer_beyond_its_lease() {
    let server = RedisServer::start();
    let dying = client_with(&server, Duration::from_millis(400), false)
        .rw_lock("cat")
        .unwrap();
    let dead_reader = dying.read().acquire().await.unwrap().detach();
    let live = client(&server).rw_lock("cat").unwrap();
    let live_reader = live.read().acquire().await.unwrap();
    let writer = client(&server).rw_lock("cat").unwrap();
    assert!(writer.write().try_acquire().await.unwrap().is_none());
    live_reader.release().await.unwrap();
    let w = writer
        .write()
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(dying.release_token(&dead_reader.token).await.is_err());
    w.release().await.unwrap();
}

async fn a_semaphore_holds_at_most_its_permits(servers: Servers) {
    let sem = servers.client().semaphore("slots", 3).unwrap();
    let a = sem.acquire().await.unwrap();
    let b = sem.acquire_many(2).await.unwrap();
    assert_eq!(b.permits(), 2);
    assert_eq!(sem.available().await.unwrap(), 0);
    assert!(sem.try_acquire().await.unwrap().is_none());
    assert!(b.fence() > a.fence());
    b.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
    assert!(sem.try_acquire_many(3).await.unwrap().is_none());
    let err = sem.try_acquire_many(4).await.unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    a.release().await.unwrap();
    sem.try_acquire_many(3)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    // The count stays with the semaphore, with a TTL.
    let ttl: i64 = servers.cmd(&["PTTL", "leasehold:{slots}"]).await;
    assert!(ttl > 0, "{ttl}");
}

/// A request for many permits is not starved by a stream of requests for one.
async fn a_big_request_is_served_in_turn(servers: Servers) {
    let sem = servers.client().semaphore("slots", 2).unwrap();
    let held = sem.acquire().await.unwrap();
    let big = servers.client().semaphore("slots", 2).unwrap();
    let waiting = tokio::spawn(async move { big.acquire_many_timeout(2, LONG).await });
    eventually("the big request to queue", || async {
        servers.cmd::<u64>(&["ZCARD", "leasehold:{slots}:q"]).await == 1
    })
    .await;
    // One permit is free, but a newcomer may not pass the waiter.
    let small = servers.client().semaphore("slots", 2).unwrap();
    assert!(small.try_acquire().await.unwrap().is_none());
    held.release().await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    assert_eq!(got.permits(), 2);
    got.release().await.unwrap();
}

/// Waiters of one client keep their turn against a big request of another
/// client that came after them: a release that frees permits for them all
/// lets them all in, and the big request waits for its own turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_one_client_keep_their_turn_before_a_later_big_request() {
    let server = RedisServer::start();
    let sem = client(&server).semaphore("slots", 2).unwrap();
    let all = sem.acquire_many(2).await.unwrap();
    let small = client(&server);
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let s = small.semaphore("slots", 2).unwrap();
        waiting.push(tokio::spawn(async move { s.acquire_timeout(LONG).await }));
    }
    eventually("every small request to queue", || async {
        cmd::<u64>(&server, &["ZCARD", "leasehold:{slots}:q"]).await == 2
    })
    .await;
    let big = client(&server).semaphore("slots", 2).unwrap();
    let asking = tokio::spawn(async move { big.acquire_many_timeout(2, LONG).await });
    eventually("the big request to queue", || async {
        cmd::<u64>(&server, &["ZCARD", "leasehold:{slots}:q"]).await == 3
    })
    .await;
    all.release().await.unwrap();
    let mut guards = Vec::new();
    for w in waiting {
        let guard = tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .expect("a small request lost its turn to the big one")
            .unwrap()
            .unwrap();
        guards.push(guard);
    }
    assert_eq!(sem.available().await.unwrap(), 0);
    assert!(!asking.is_finished());
    for g in guards {
        g.release().await.unwrap();
    }
    let got = asking.await.unwrap().unwrap();
    assert_eq!(got.permits(), 2);
    got.release().await.unwrap();
}

async fn permits_of_a_crashed_client_come_back_after_their_lease(servers: Servers) {
    let crashed = servers
        .client_with(Duration::from_millis(300), false)
        .semaphore("slots", 1)
        .unwrap();
    let gone = crashed.acquire().await.unwrap().detach();
    let sem = servers.client().semaphore("slots", 1).unwrap();
    assert!(sem.try_acquire().await.unwrap().is_none());
    let got = sem.acquire_timeout(Duration::from_secs(10)).await.unwrap();
    assert!(got.fence() > gone.fence);
    // A stranger's release is refused; the lease holds on.
    assert!(sem
        .release_token("stranger")
        .await
        .unwrap_err()
        .is_not_held());
    assert_eq!(sem.available().await.unwrap(), 0);
    got.release().await.unwrap();
}

async fn a_permit_count_mismatch_is_reported_and_can_be_changed(servers: Servers) {
    let client = servers.client();
    let three = client.semaphore("slots", 3).unwrap();
    three
        .try_acquire()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    let five = client.semaphore("slots", 5).unwrap();
    let err = five.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(err.to_string().contains("has 3 permits, not 5"), "{err}");
    five.set_permits(5).await.unwrap();
    five.try_acquire()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(three.try_acquire().await.unwrap_err().is_conflict());
}

async fn a_name_is_one_kind_of_lock(servers: Servers) {
    let client = servers.client();
    let mutex = client.mutex("x").unwrap();
    let held = mutex.acquire().await.unwrap();
    let err = client
        .rw_lock("x")
        .unwrap()
        .write()
        .acquire()
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert!(
        err.to_string()
            .contains("is in use as a mutex, not a read-write lock"),
        "{err}"
    );
    held.release().await.unwrap();
    let sem = client.semaphore("x", 2).unwrap().acquire().await.unwrap();
    for err in [
        mutex.try_acquire().await.unwrap_err(),
        client.fair_mutex("x").unwrap().acquire().await.unwrap_err(),
        client
            .reentrant_mutex("x")
            .unwrap()
            .acquire()
            .await
            .unwrap_err(),
        client
            .rw_lock("x")
            .unwrap()
            .read()
            .try_acquire()
            .await
            .unwrap_err(),
    ] {
        assert!(err.is_conflict(), "{err}");
        assert!(
            err.to_string().contains("in use as a semaphore, not a"),
            "{err}"
        );
    }
    let err = client.reentrant_mutex("x").unwrap().try_acquire().await;
    let err = err.unwrap_err().to_string();
    assert!(err.contains("not a reentrant mutex"), "{err}");
    let reading = client.rw_lock("y").unwrap().read().acquire().await.unwrap();
    let asked = client.semaphore("y", 3).unwrap().try_acquire().await;
    let asked = asked.unwrap_err().to_string();
    assert!(
        asked.contains("in use as a read-write lock, not a semaphore of 3 permits"),
        "{asked}"
    );
    reading.release().await.unwrap();
    // Nothing was overwritten.
    assert_eq!(
        client.semaphore("x", 2).unwrap().available().await.unwrap(),
        1
    );
    sem.release().await.unwrap();
}

async fn inspect_and_errors_name_the_holder(servers: Servers) {
    let holder = leasehold::Client::builder(servers.url())
        .name("nightly-report")
        .build()
        .unwrap();
    let held = holder.mutex("job").unwrap().acquire().await.unwrap();
    let other = servers.client().mutex("job").unwrap();
    let info = other.inspect().await.unwrap();
    assert_eq!(info.holders.len(), 1);
    let who = &info.holders[0];
    assert_eq!(who.client_name, "nightly-report");
    assert_eq!(who.pid, Some(std::process::id()));
    assert!(who.acquired_at.is_some());
    // How long it has been held, by Redis's clock alone.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = other.inspect().await.unwrap();
    let held_for = later.holders[0].held_for(later.read_at.unwrap()).unwrap();
    assert!(held_for >= Duration::from_millis(300), "{held_for:?}");
    assert!(held_for < Duration::from_secs(30), "{held_for:?}");
    let err = other.acquire_timeout(SHORT).await.unwrap_err();
    assert!(err.is_timeout());
    let text = err.to_string();
    assert!(text.contains("nightly-report"), "{text}");
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    held.release().await.unwrap();

    let sem = holder.semaphore("slots", 1).unwrap();
    let permit = sem.acquire().await.unwrap();
    let err = servers
        .client()
        .semaphore("slots", 1)
        .unwrap()
        .acquire_timeout(SHORT)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("nightly-report"), "{err}");
    let info = sem.inspect().await.unwrap();
    assert_eq!(info.permits, Some(1));
    assert_eq!(info.holders[0].client_name, "nightly-report");
    assert_eq!(info.holders[0].fence, Some(permit.fence()));
    permit.release().await.unwrap();
}

async fn the_watchdog_renews_every_kind(servers: Servers) {
    let client = servers.client_with(Duration::from_millis(600), true);
    let r = client.rw_lock("a").unwrap().read().acquire().await.unwrap();
    let s = client.semaphore("b", 2).unwrap().acquire().await.unwrap();
    let m = client
        .reentrant_mutex("c")
        .unwrap()
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    for g in [&r, &s, &m] {
        assert!(!g.is_lost(), "{g:?}");
    }
    r.release().await.unwrap();
    s.release().await.unwrap();
    m.release().await.unwrap();
}

async fn owners_can_be_shared_by_id(servers: Servers) {
    let owner = Owner::from_id("job-42").unwrap();
    let a = servers
        .client()
        .reentrant_mutex("cfg")
        .unwrap()
        .with_owner(owner.clone());
    let b = servers
        .client()
        .reentrant_mutex("cfg")
        .unwrap()
        .with_owner(owner);
    let one = a.acquire().await.unwrap();
    let two = b.try_acquire().await.unwrap().unwrap();
    assert_eq!(b.hold_count().await.unwrap(), 2);
    one.release().await.unwrap();
    two.release().await.unwrap();
}
