//! The mutex against real redis-servers started by the test kit: most
//! tests run on one server and on a Redis Cluster (`name::single`,
//! `name::cluster`); those that pause, stop or count the commands of one
//! server run on one server alone.

mod common;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use common::{client_with, cmd, eventually, hold, raw, Servers};
use leasehold::{Client, ErrorKind, LossReason};
use leasehold_testkit::RedisServer;

const LONG: Duration = Duration::from_secs(60);
/// The key of the lock "job".
const JOB: &str = "leasehold:{job}";

common::on_both_topologies!(
    mutual_exclusion_keeps_every_update_and_fences_grow_in_order: multi_thread,
    try_acquire_reports_busy_then_succeeds_after_release,
    a_waiter_wakes_on_release_not_on_expiry,
    a_waiter_takes_the_lock_when_a_vanished_holder_expires,
    acquire_timeout_gives_up_with_a_timeout_error,
    the_watchdog_keeps_a_short_lease_alive,
    a_fixed_lease_is_reported_lost_when_it_runs_out,
    a_deleted_key_makes_lost_fire,
    extend_moves_the_lease,
    a_dropped_guard_is_released_in_the_background,
    fences_keep_growing_when_redis_loses_the_counter,
    operations_survive_a_script_flush,
    inspect_and_force_release,
    tokens_release_and_extend_detached_leases,
    keys_written_by_hand_give_errors_or_waits_never_panics,
    lost_wakes_at_a_deadline_moved_earlier: multi_thread,
    the_fence_counter_expires_and_fences_still_grow,
    a_lost_lease_says_why,
);

async fn mutual_exclusion_keeps_every_update_and_fences_grow_in_order(servers: Servers) {
    let fences = Arc::new(StdMutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mutex = servers.client().mutex("counter").unwrap();
        let mut conn = raw(servers.server_for("counter")).await;
        let fences = Arc::clone(&fences);
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                let guard = mutex.acquire().await.unwrap();
                fences.lock().unwrap().push(guard.fence());
                let n: Option<u64> = leasehold::redis::cmd("GET")
                    .arg("counter")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _: () = leasehold::redis::cmd("SET")
                    .arg("counter")
                    .arg(n.unwrap_or(0) + 1)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let counter: u64 = servers.cmd(&["GET", "counter"]).await;
    assert_eq!(
        counter, 160,
        "an update was lost: the lock let two holders in"
    );
    let fences = fences.lock().unwrap();
    assert_eq!(fences.len(), 160);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences must grow in acquisition order: {fences:?}"
    );
}

async fn try_acquire_reports_busy_then_succeeds_after_release(servers: Servers) {
    let a = servers.client().mutex("job").unwrap();
    let b = servers.client().mutex("job").unwrap();
    let held = a.try_acquire().await.unwrap().unwrap();
    assert!(b.try_acquire().await.unwrap().is_none());
    let first = held.fence();
    held.release().await.unwrap();
    let second = b.try_acquire().await.unwrap().unwrap();
    assert!(second.fence() > first);
    second.release().await.unwrap();
}

async fn a_waiter_wakes_on_release_not_on_expiry(servers: Servers) {
    let holder = servers.client_with(LONG, true);
    let waiter = servers.client();
    let held = holder.mutex("job").unwrap().acquire().await.unwrap();
    let mutex = waiter.mutex("job").unwrap();
    // The wait bound is half the holder's lease: only a release can end it in time.
    let waiting = tokio::spawn(async move { mutex.acquire_timeout(LONG / 2).await });
    let inspector = holder.mutex("job").unwrap();
    eventually("the waiter to subscribe", || async {
        inspector.inspect().await.unwrap().waiting_clients == 1
    })
    .await;
    let first = held.fence();
    held.release().await.unwrap();
    let guard = waiting.await.unwrap().unwrap();
    assert!(guard.fence() > first);
    guard.release().await.unwrap();
}

async fn a_waiter_takes_the_lock_when_a_vanished_holder_expires(servers: Servers) {
    let holder = servers.client_with(Duration::from_millis(300), false);
    let gone = holder
        .mutex("job")
        .unwrap()
        .acquire()
        .await
        .unwrap()
        .detach();
    let waiter = servers.client();
    let guard = waiter
        .mutex("job")
        .unwrap()
        .acquire_timeout(LONG / 2)
        .await
        .unwrap();
    assert!(guard.fence() > gone.fence);
    guard.release().await.unwrap();
}

async fn acquire_timeout_gives_up_with_a_timeout_error(servers: Servers) {
    let holder = servers.client_with(LONG, true);
    let _held = holder.mutex("job").unwrap().acquire().await.unwrap();
    let err = servers
        .client()
        .mutex("job")
        .unwrap()
        .acquire_timeout(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.is_retryable());
    assert!(err.to_string().contains("still held"), "{err}");
    let zero = servers
        .client()
        .mutex("job")
        .unwrap()
        .acquire_timeout(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(zero.is_timeout());
}

async fn the_watchdog_keeps_a_short_lease_alive(servers: Servers) {
    // Long enough that a scheduling stall on a busy machine cannot lose it,
    // and slept through twice, so it lives only if it was renewed.
    let lease = Duration::from_secs(2);
    let guard = servers.hold(lease, true).await;
    tokio::time::sleep(lease * 2).await;
    assert!(!guard.is_lost());
    let other = servers.client();
    assert!(other
        .mutex("job")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    let pttl: i64 = servers.cmd(&["PTTL", JOB]).await;
    assert!(pttl > 0 && pttl <= 2000, "pttl {pttl}");
    guard.release().await.unwrap();
}

async fn a_fixed_lease_is_reported_lost_when_it_runs_out(servers: Servers) {
    let guard = servers.hold(Duration::from_millis(200), false).await;
    tokio::time::timeout(LONG, guard.lost()).await.unwrap();
    assert!(guard.is_lost());
    assert_eq!(guard.valid_for(), Duration::ZERO);
    assert!(guard.release().await.unwrap_err().is_not_held());
}

async fn a_deleted_key_makes_lost_fire(servers: Servers) {
    let guard = servers.hold(Duration::from_millis(900), true).await;
    assert!(!guard.is_lost());
    let _: i64 = servers.cmd(&["DEL", JOB]).await;
    tokio::time::timeout(LONG, guard.lost()).await.unwrap();
    assert!(guard.is_lost());
    let err = guard.extend(Duration::from_secs(5)).await.unwrap_err();
    assert!(err.is_not_held(), "{err}");
    let err = guard.release().await.unwrap_err();
    assert!(err.is_not_held(), "{err}");
    assert!(err.to_string().contains("was lost"), "{err}");
}

#[tokio::test]
async fn a_stopped_server_makes_lost_fire() {
    let mut server = RedisServer::start();
    let client = Client::builder(server.url())
        .lease(Duration::from_millis(900))
        .command_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let guard = client.mutex("job").unwrap().acquire().await.unwrap();
    server.stop();
    tokio::time::timeout(LONG, guard.lost()).await.unwrap();
    assert!(guard.is_lost());
    let err = guard.release().await.unwrap_err();
    assert!(err.is_connection() || err.is_not_held(), "{err}");
}

async fn extend_moves_the_lease(servers: Servers) {
    let guard = servers.hold(Duration::from_secs(5), false).await;
    guard.extend(LONG).await.unwrap();
    let pttl: i64 = servers.cmd(&["PTTL", JOB]).await;
    assert!(pttl > 50_000, "pttl {pttl}");
    assert!(guard.valid_for() > Duration::from_secs(50));
    guard.release().await.unwrap();
}

/// A renewal comes due while an extend of the same lease waits on a paused
/// server. The watchdog must leave that lease to the extend and go to sleep:
/// spinning on it would starve this single-threaded runtime, so the extend's
/// reply would be read only after the deadline had passed.
#[tokio::test]
async fn an_extend_in_flight_leaves_the_watchdog_idle() {
    let server = RedisServer::start();
    // Renewed every 667 ms; the deadline is at least 1.3 s away at any time.
    let guard = hold(&server, Duration::from_secs(2), true).await;
    let _: () = cmd(&server, &["CLIENT", "PAUSE", "1000", "ALL"]).await;
    guard.extend(Duration::from_secs(2)).await.unwrap();
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
}

async fn a_dropped_guard_is_released_in_the_background(servers: Servers) {
    let holder = servers.client_with(LONG, true);
    let guard = holder.mutex("job").unwrap().acquire().await.unwrap();
    let first = guard.fence();
    drop(guard);
    let next = servers
        .client()
        .mutex("job")
        .unwrap()
        .acquire_timeout(LONG / 2)
        .await
        .unwrap();
    assert!(next.fence() > first);
    next.release().await.unwrap();
}

async fn fences_keep_growing_when_redis_loses_the_counter(servers: Servers) {
    let client = servers.client();
    let mutex = client.mutex("job").unwrap();
    let first = mutex.acquire().await.unwrap();
    let fence = first.fence();
    first.release().await.unwrap();
    let _: i64 = servers.cmd(&["DEL", "leasehold:{job}:fence"]).await;
    let second = mutex.acquire().await.unwrap();
    assert!(second.fence() > fence, "{} <= {fence}", second.fence());
    second.release().await.unwrap();
}

async fn operations_survive_a_script_flush(servers: Servers) {
    let client = servers.client_with(Duration::from_secs(2), true);
    let mutex = client.mutex("job").unwrap();
    let guard = mutex.acquire().await.unwrap();
    let _: () = cmd(servers.server_for(JOB), &["SCRIPT", "FLUSH"]).await;
    // The watchdog's pipelined renewals meet NOSCRIPT first; the lease
    // outlives this sleep only if they recovered.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!guard.is_lost());
    let _: () = cmd(servers.server_for(JOB), &["SCRIPT", "FLUSH"]).await;
    guard.extend(Duration::from_secs(5)).await.unwrap();
    let _: () = cmd(servers.server_for(JOB), &["SCRIPT", "FLUSH"]).await;
    assert!(mutex.inspect().await.unwrap().held);
    let _: () = cmd(servers.server_for(JOB), &["SCRIPT", "FLUSH"]).await;
    guard.release().await.unwrap();
    let _: () = cmd(servers.server_for(JOB), &["SCRIPT", "FLUSH"]).await;
    let again = mutex.try_acquire().await.unwrap().unwrap();
    let _: () = cmd(servers.server_for(JOB), &["SCRIPT", "FLUSH"]).await;
    assert!(mutex.force_release().await.unwrap());
    drop(again);
}

async fn inspect_and_force_release(servers: Servers) {
    let client = servers.client_with(LONG, true);
    let mutex = client.mutex("job").unwrap();
    let free = mutex.inspect().await.unwrap();
    assert!(!free.held);
    assert_eq!(free.last_fence, None);
    assert_eq!(free.remaining, None);
    assert_eq!(free.server, servers.addr_for(JOB), "{free:?}");

    let guard = mutex.acquire().await.unwrap();
    let info = mutex.inspect().await.unwrap();
    assert!(info.held);
    assert_eq!(info.last_fence, Some(guard.fence()));
    assert!(info.remaining.unwrap() > Duration::from_secs(30));
    assert_eq!(info.server, servers.addr_for(JOB), "{info:?}");

    // A waiter with a bound below the lease: only force-release can let it in.
    let waiter = servers.client_with(LONG, true).mutex("job").unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire_timeout(LONG / 2).await });
    eventually("the waiter to subscribe", || async {
        mutex.inspect().await.unwrap().waiting_clients == 1
    })
    .await;
    assert!(mutex.force_release().await.unwrap());
    let next = waiting.await.unwrap().unwrap();
    assert!(next.fence() > guard.fence());
    // The watchdog would notice at its next renewal, a third of the lease
    // away; extend asks Redis now.
    assert!(guard.extend(LONG).await.unwrap_err().is_not_held());
    assert!(guard.is_lost());
    tokio::time::timeout(LONG, guard.lost()).await.unwrap();
    next.release().await.unwrap();
    assert!(!mutex.force_release().await.unwrap());
}

async fn tokens_release_and_extend_detached_leases(servers: Servers) {
    let client = servers.client_with(Duration::from_secs(5), false);
    let mutex = client.mutex("job").unwrap();
    let lease = mutex.acquire().await.unwrap().detach();
    assert_eq!(lease.token.len(), 32);
    mutex.extend_token(&lease.token, LONG).await.unwrap();
    let pttl: i64 = servers.cmd(&["PTTL", JOB]).await;
    assert!(pttl > 50_000);
    assert!(mutex
        .release_token("not-the-token")
        .await
        .unwrap_err()
        .is_not_held());
    mutex.release_token(&lease.token).await.unwrap();
    assert!(mutex
        .release_token(&lease.token)
        .await
        .unwrap_err()
        .is_not_held());
    assert!(mutex
        .extend_token(&lease.token, LONG)
        .await
        .unwrap_err()
        .is_not_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_one_client_queue_locally_so_only_the_head_talks_to_redis() {
    const TASKS: u64 = 20;
    let server = RedisServer::start();
    let _: () = cmd(&server, &["CONFIG", "RESETSTAT"]).await;
    let held = hold(&server, LONG, true).await;
    let client = client_with(&server, LONG, true);
    let mutex = client.mutex("job").unwrap();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let mutex = mutex.clone();
        tasks.push(tokio::spawn(async move {
            let guard = mutex.acquire_timeout(LONG / 2).await.unwrap();
            guard.release().await.unwrap();
        }));
    }
    // Asked without scripts, so that the count below is the lock's alone.
    eventually("the head of the queue to subscribe", || async {
        let channels: Vec<String> =
            cmd(&server, &["PUBSUB", "CHANNELS", "leasehold:{job}:ch:*"]).await;
        let queued: u64 = cmd(&server, &["ZCARD", "leasehold:{job}:q"]).await;
        channels.len() == 1 && queued == 1
    })
    .await;
    held.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    // One acquire and one release per task and for the holder; two tries
    // that meet NOSCRIPT (or a missing function) on this fresh server; the
    // first head's two failed
    // tries; and at most two failed tries for each task that got its turn
    // while the task before it still held the lock. That is 4 per task and
    // 6 more. Tasks that each polled Redis, or all woke on every release,
    // needed 261 to 274 when this was measured with the queue turned off.
    let scripts = common::script_calls(&server).await;
    assert!(
        scripts <= 4 * TASKS + 6,
        "{scripts} scripts for {TASKS} queued tasks"
    );
}

/// Where the server has Redis Functions, acquire and release are one
/// library's functions: loaded on first use, and again after a FUNCTION
/// FLUSH. Where it has none, they are scripts.
#[tokio::test]
async fn the_fast_paths_are_functions_where_the_server_has_them() {
    let server = RedisServer::start();
    let functions = common::has_functions(&server).await;
    let client = client_with(&server, LONG, false);
    let mutex = client.mutex("job").unwrap();
    // Another handle: the holder's own second attempt is refused at once.
    let other = client.mutex("job").unwrap();
    for round in 0..3 {
        let guard = mutex.acquire().await.unwrap();
        assert!(other.try_acquire().await.unwrap().is_none());
        guard.release().await.unwrap();
        let guard = mutex.try_acquire().await.unwrap().expect("free");
        guard.release().await.unwrap();
        if functions && round == 0 {
            let _: () = cmd(&server, &["FUNCTION", "FLUSH"]).await;
        }
    }
    let fcalls = common::command_calls(&server, "fcall").await;
    if functions {
        let libraries: Vec<leasehold::redis::Value> =
            cmd(&server, &["FUNCTION", "LIST", "LIBRARYNAME", "leasehold_*"]).await;
        assert_eq!(libraries.len(), 1, "{libraries:?}");
        // 15 acquires, tries and releases; the first call after each load.
        // A release nobody waited for is a DELIFEQ (or DELEX) where the
        // server has one.
        let deletes = common::command_calls(&server, "delifeq").await
            + common::command_calls(&server, "delex").await;
        assert!(
            fcalls + deletes >= 15,
            "{fcalls} FCALLs, {deletes} DELIFEQs"
        );
    } else {
        assert_eq!(fcalls, 0);
        assert!(common::command_calls(&server, "evalsha").await >= 15);
    }
}

async fn keys_written_by_hand_give_errors_or_waits_never_panics(servers: Servers) {
    let mutex = servers.client().mutex("job").unwrap();

    // A TTL far beyond any lease: the waiter still gives up on time.
    let _: () = servers
        .cmd(&["SET", JOB, "x", "PX", "9000000000000000"])
        .await;
    let err = mutex
        .acquire_timeout(Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(mutex.try_acquire().await.unwrap().is_none());
    assert!(mutex.inspect().await.unwrap().held);

    // A lock key of another type is refused at once, naming the type (a
    // wait would never end); a release against it is a server error that
    // names the operation, and leaves the key alone.
    let _: i64 = servers.cmd(&["DEL", JOB]).await;
    let _: i64 = servers.cmd(&["HSET", JOB, "f", "v"]).await;
    let err = mutex.try_acquire().await.unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    assert!(err.to_string().contains("in use as a hash"), "{err}");
    let err = mutex
        .acquire_timeout(Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    let err = mutex.release_token("t").await.unwrap_err();
    assert!(err.is_server(), "{err:?}");
    assert!(err.to_string().contains("release"), "{err}");
    let kept: String = servers.cmd(&["HGET", JOB, "f"]).await;
    assert_eq!(kept, "v");
    let _: i64 = servers.cmd(&["DEL", JOB]).await;

    // A fence counter leasehold did not write counts as lost: fences start
    // again from the server clock, and the lock keeps working.
    for garbage in ["not a number", "inf", "-inf", "nan", "1e300", "-5"] {
        let _: () = servers
            .cmd(&["SET", "leasehold:{job}:fence", garbage])
            .await;
        let guard = mutex.try_acquire().await.unwrap().unwrap();
        let fence = guard.fence();
        assert!(fence > 1_000_000_000_000_000, "{garbage}: {fence}");
        guard.release().await.unwrap();
        let next = mutex.try_acquire().await.unwrap().unwrap();
        assert!(next.fence() > fence, "{garbage}");
        next.release().await.unwrap();
    }
}

/// `lost()` awaited before an extend that shortens the lease wakes at the
/// new deadline, not the old one.
async fn lost_wakes_at_a_deadline_moved_earlier(servers: Servers) {
    let guard = Arc::new(servers.hold(LONG, false).await);
    let watching = {
        let guard = Arc::clone(&guard);
        tokio::spawn(async move { guard.lost().await })
    };
    // Let the watcher park on the old, 30 s deadline.
    tokio::time::sleep(Duration::from_millis(50)).await;
    guard.extend(Duration::from_millis(200)).await.unwrap();
    tokio::time::timeout(LONG / 3, watching)
        .await
        .expect("lost() slept towards the old deadline")
        .unwrap();
    assert!(guard.is_lost());
}

/// The fence counter expires after its retention (a week by default), so
/// per-entity lock names do not pile up in Redis; fences keep growing when
/// it is gone.
async fn the_fence_counter_expires_and_fences_still_grow(servers: Servers) {
    let mutex = servers.client().mutex("job").unwrap();
    let first = mutex.try_acquire().await.unwrap().unwrap();
    let ttl: i64 = servers.cmd(&["PTTL", "leasehold:{job}:fence"]).await;
    let week = i64::try_from(leasehold::DEFAULT_FENCE_RETENTION.as_millis()).unwrap();
    assert!(
        ttl > week - 60_000 && ttl <= week,
        "fence counter ttl {ttl}"
    );
    let fence = first.fence();
    first.release().await.unwrap();
    // As if the retention had run out.
    let _: i64 = servers.cmd(&["DEL", "leasehold:{job}:fence"]).await;
    let next = mutex.try_acquire().await.unwrap().unwrap();
    assert!(next.fence() > fence);
    next.release().await.unwrap();
    // Nothing leasehold leaves behind lives forever.
    for (key, master) in servers.keys("leasehold:*").await {
        let ttl: i64 = cmd(master, &["PTTL", &key]).await;
        assert!(ttl > 0, "{key} has no expiry");
    }
    let err = Client::builder(servers.url())
        .fence_retention(Duration::from_secs(60))
        .build()
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err:?}");
}

/// Waiting clients cost Redis about the same per acquisition whether two
/// or sixteen of them wait: a release wakes one waiter, not all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_calls_per_acquisition_stay_flat_as_waiters_grow() {
    async fn calls_per_acquisition(clients: usize) -> f64 {
        const ROUNDS: usize = 6;
        let server = RedisServer::start();
        let mut warm = Vec::new();
        for _ in 0..clients {
            let client = client_with(&server, LONG, false);
            let mutex = client.mutex("job").unwrap();
            common::take_and_release(mutex.try_acquire().await).await;
            warm.push(mutex);
        }
        let _: () = cmd(&server, &["CONFIG", "RESETSTAT"]).await;
        let mut tasks = Vec::new();
        for mutex in warm {
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = mutex.acquire_timeout(LONG).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    guard.release().await.unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let stats: String = cmd(&server, &["INFO", "commandstats"]).await;
        let calls: u64 = stats
            .lines()
            .filter(|l| !l.starts_with("cmdstat_info:") && !l.starts_with("cmdstat_config:"))
            .filter_map(|l| l.split("calls=").nth(1))
            .filter_map(|rest| rest.split(',').next())
            .map(|n| n.parse::<u64>().unwrap())
            .sum();
        calls as f64 / (clients * ROUNDS) as f64
    }
    let two = calls_per_acquisition(2).await;
    let sixteen = calls_per_acquisition(16).await;
    // Waking every waiter made this grow with the waiters (35 calls per
    // acquisition with 8 clients); one wake per release keeps it flat.
    assert!(
        sixteen <= two * 1.6 + 2.0,
        "{two:.1} calls per acquisition with 2 waiting clients, {sixteen:.1} with 16"
    );
    assert!(sixteen < 30.0, "{sixteen:.1} calls per acquisition with 16");
}

/// A lost guard says why: the token gone from Redis, or a deadline passed
/// with nothing to renew it.
async fn a_lost_lease_says_why(servers: Servers) {
    let renewed = servers
        .client_with(Duration::from_millis(300), true)
        .mutex("taken")
        .unwrap();
    let guard = renewed.acquire().await.unwrap();
    assert_eq!(guard.loss_reason(), None);
    assert!(renewed.force_release().await.unwrap());
    tokio::time::timeout(LONG, guard.lost())
        .await
        .expect("the watchdog never saw the token gone");
    assert_eq!(guard.loss_reason(), Some(LossReason::TokenGone));
    assert!(guard.loss_reason().unwrap().to_string().contains("token"));

    let fixed = servers
        .client_with(Duration::from_millis(200), false)
        .mutex("fixed")
        .unwrap();
    let guard = fixed.acquire().await.unwrap();
    tokio::time::timeout(LONG, guard.lost())
        .await
        .expect("a fixed lease never ran out");
    assert_eq!(guard.loss_reason(), Some(LossReason::DeadlinePassed));
}

/// A release that leaves the lock free and wakes a waiter to try marks the
/// lock for the queue: a newcomer that takes it first (before the woken
/// waiter, who may never come) writes a value marked as waited for, so its
/// release wakes the queue at once instead of leaving the waiters to their
/// timers (up to a second).
#[tokio::test]
async fn a_newcomer_taking_a_lock_left_free_for_a_waiter_wakes_the_queue() {
    let server = RedisServer::start();
    let client = client_with(&server, LONG, false);
    let mutex = client.mutex("job").unwrap();
    // A waiter written by hand, woken to try ('m'), that never comes.
    let time: Vec<String> = cmd(&server, &["TIME"]).await;
    let now_us = time[0].parse::<u64>().unwrap() * 1_000_000 + time[1].parse::<u64>().unwrap();
    let _: u64 = cmd(
        &server,
        &["ZADD", "leasehold:{job}:q", &now_us.to_string(), "stray"],
    )
    .await;
    let _: u64 = cmd(&server, &["PEXPIRE", "leasehold:{job}:q", "60000"]).await;
    let _: () = cmd(
        &server,
        &[
            "SET",
            "leasehold:{job}:w:stray",
            "3000 m 1 strayclient",
            "PX",
            "60000",
        ],
    )
    .await;
    let mut pubsub = leasehold::redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub
        .subscribe("leasehold:{job}:ch:strayclient")
        .await
        .unwrap();
    let mut messages = pubsub.into_on_message();

    // A holder whose value a waiter's attempt marked.
    let held = mutex.try_acquire().await.unwrap().expect("free");
    let value: String = cmd(&server, &["GET", JOB]).await;
    let _: () = cmd(
        &server,
        &["SET", JOB, &format!("{value}\u{1f}w"), "KEEPTTL"],
    )
    .await;
    held.release().await.unwrap();
    assert_eq!(next_wake(&mut messages).await.as_deref(), Some("stray"));

    // The newcomer takes the free lock before the woken waiter tries.
    let newcomer = mutex.try_acquire().await.unwrap().expect("free");
    let value: String = cmd(&server, &["GET", JOB]).await;
    assert!(value.ends_with("\u{1f}w"), "{value:?}");
    newcomer.release().await.unwrap();
    assert_eq!(
        next_wake(&mut messages).await.as_deref(),
        Some("stray"),
        "the queue was not woken"
    );
    // Once nobody waits, a release leaves no mark: the lock after it is
    // taken unmarked.
    let _: u64 = cmd(&server, &["DEL", "leasehold:{job}:q"]).await;
    mutex
        .try_acquire()
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
    let alone = mutex.try_acquire().await.unwrap().expect("free");
    let value: String = cmd(&server, &["GET", JOB]).await;
    assert!(!value.contains('\u{1f}'), "{value:?}");
    alone.release().await.unwrap();
}

/// The next message on `messages` (bounded), as text.
async fn next_wake(
    messages: &mut (impl futures_util::Stream<Item = leasehold::redis::Msg> + Unpin),
) -> Option<String> {
    use futures_util::StreamExt;
    match tokio::time::timeout(Duration::from_secs(10), messages.next()).await {
        Ok(Some(message)) => Some(message.get_payload::<String>().unwrap()),
        _ => None,
    }
}

/// Where the server has a compare-and-delete (Valkey 9's DELIFEQ, Redis
/// 8.4's DELEX), a release that nobody waited for is that one command, not
/// a script; elsewhere it is a bare script that does the same (one key and
/// the value), not the release script. A lock a waiter marked is released
/// by the release script either way, which wakes the waiter.
#[tokio::test]
async fn a_release_nobody_waited_for_compares_and_deletes_where_the_server_can() {
    let server = RedisServer::start();
    let has = |name: &'static str| {
        let server = &server;
        async move {
            let info: Vec<leasehold::redis::Value> = cmd(server, &["COMMAND", "INFO", name]).await;
            !matches!(info.first(), None | Some(leasehold::redis::Value::Nil))
        }
    };
    let compare_and_delete = has("delifeq").await || has("delex").await;
    let client = client_with(&server, LONG, false);
    let mutex = client.mutex("job").unwrap();
    // A first round loads the scripts it runs.
    mutex
        .try_acquire()
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
    let _: () = cmd(&server, &["CONFIG", "RESETSTAT"]).await;
    // Every command in the log, with its arguments.
    let _: () = cmd(&server, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]).await;
    let _: () = cmd(&server, &["SLOWLOG", "RESET"]).await;
    const ROUNDS: u64 = 5;
    for _ in 0..ROUNDS {
        let guard = mutex.try_acquire().await.unwrap().expect("free");
        guard.release().await.unwrap();
        let exists: u64 = cmd(&server, &["EXISTS", JOB]).await;
        assert_eq!(exists, 0);
    }
    let scripts = common::script_calls(&server).await;
    let deletes = common::command_calls(&server, "delifeq").await
        + common::command_calls(&server, "delex").await;
    if compare_and_delete {
        assert_eq!(
            (scripts, deletes),
            (ROUNDS, ROUNDS),
            "the tries are scripts, the releases not"
        );
    } else {
        assert_eq!((scripts, deletes), (2 * ROUNDS, 0));
        // The tries send two keys; the releases one (the lock) and its value.
        let log: Vec<Vec<leasehold::redis::Value>> =
            cmd(&server, &["SLOWLOG", "GET", "1000"]).await;
        let mut keys_sent = Vec::new();
        for entry in &log {
            let Some(leasehold::redis::Value::Array(args)) = entry.get(3) else {
                continue;
            };
            let text = |i: usize| match args.get(i) {
                Some(leasehold::redis::Value::BulkString(b)) => {
                    String::from_utf8_lossy(b).into_owned()
                }
                _ => String::new(),
            };
            let command = text(0).to_ascii_uppercase();
            if command == "FCALL" || command == "EVALSHA" {
                keys_sent.push((text(2), args.len() - 3));
            }
        }
        keys_sent.sort();
        let mut expected = vec![("1".to_owned(), 2); ROUNDS as usize];
        expected.extend(vec![("2".to_owned(), 6); ROUNDS as usize]);
        assert_eq!(
            keys_sent, expected,
            "(keys, keys and arguments) of each script call: {log:?}"
        );
    }
    let _: () = cmd(
        &server,
        &["CONFIG", "SET", "slowlog-log-slower-than", "10000"],
    )
    .await;

    // Waited for: the compare fails on the marked value, and the script
    // releases and wakes the waiter.
    let held = mutex.try_acquire().await.unwrap().expect("free");
    let waiter = client_with(&server, LONG, false).mutex("job").unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire_timeout(LONG).await });
    eventually("the waiter to queue", || async {
        cmd::<u64>(&server, &["ZCARD", "leasehold:{job}:q"]).await == 1
    })
    .await;
    held.release().await.unwrap();
    let guard = waiting.await.unwrap().unwrap();
    assert!(guard.fence() > 0);
    guard.release().await.unwrap();
    // Lost leases are reported as before: the compare finds another value.
    let gone = mutex.try_acquire().await.unwrap().expect("free");
    let _: u64 = cmd(&server, &["DEL", JOB]).await;
    let other = client_with(&server, LONG, false)
        .mutex("job")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    assert!(gone.release().await.unwrap_err().is_not_held());
    other.release().await.unwrap();
}
