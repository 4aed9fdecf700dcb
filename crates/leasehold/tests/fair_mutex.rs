//! The fair mutex: FIFO across clients, hand-off by the release, and
//! waiters that die or give up; on one server and on a Redis Cluster
//! (`name::single`, `name::cluster`), but for the test that partitions one
//! server's clients.

mod common;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use common::{cmd, eventually, Servers};
use leasehold::Client;
use leasehold_testkit::{FaultProxy, RedisServer};

const LONG: Duration = Duration::from_secs(30);
/// The key of the lock "job"; its other keys share its slot.
const JOB: &str = "leasehold:{job}";

common::on_both_topologies!(
    acquisition_order_is_arrival_order_across_clients: multi_thread,
    a_try_does_not_barge_in,
    a_dead_waiter_leaves_the_queue_after_its_heartbeat,
    a_hand_off_to_a_dead_waiter_is_recovered: multi_thread,
    a_cancelled_waiter_leaves_the_queue_at_once: multi_thread,
    a_lock_handed_to_a_cancelled_waiter_goes_on_to_the_next: multi_thread,
    release_by_token_hands_the_lock_on,
    a_hand_off_is_remembered_in_the_locks_slot: multi_thread,
    a_drained_queue_leaves_no_waiter_record: multi_thread,
);

async fn queued(servers: &Servers) -> u64 {
    servers.cmd(&["ZCARD", "leasehold:{job}:q"]).await
}

/// Writes a waiter into the queue by hand, as a process that died after
/// queueing would leave it: its heartbeat runs out `ms_left` from now.
async fn dead_waiter(servers: &Servers, token: &str, ms_left: u64) {
    let server = servers.server_for(JOB);
    let time: Vec<String> = cmd(server, &["TIME"]).await;
    let now_us = time[0].parse::<u64>().unwrap() * 1_000_000 + time[1].parse::<u64>().unwrap();
    let _: u64 = cmd(
        server,
        &["ZADD", "leasehold:{job}:q", &now_us.to_string(), token],
    )
    .await;
    let _: u64 = cmd(server, &["PEXPIRE", "leasehold:{job}:q", "60000"]).await;
    let key = format!("leasehold:{{job}}:w:{token}");
    let _: () = cmd(
        server,
        &[
            "SET",
            &key,
            "3000 f 1 deadclient",
            "PX",
            &ms_left.to_string(),
        ],
    )
    .await;
}

/// Clients that arrive one after another get the lock in that order, each
/// from the release of the one before (the hand-off), with growing fences.
async fn acquisition_order_is_arrival_order_across_clients(servers: Servers) {
    const WAITERS: usize = 6;
    let holder = servers.client_with(LONG, true);
    let held = holder.fair_mutex("job").unwrap().acquire().await.unwrap();
    let order = Arc::new(StdMutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let client = servers.client_with(LONG, true);
        let lock = client.fair_mutex("job").unwrap();
        let order = Arc::clone(&order);
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire_timeout(LONG).await.unwrap();
            order.lock().unwrap().push((i, guard.fence()));
            guard.release().await.unwrap();
        }));
        eventually("the waiter to queue", || async {
            queued(&servers).await == i as u64 + 1
        })
        .await;
    }
    held.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let arrivals: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(arrivals, (0..WAITERS).collect::<Vec<_>>());
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1), "{order:?}");
    assert_eq!(queued(&servers).await, 0);
}

/// A newcomer's try never jumps the queue, even when it asks at the moment
/// the lock is handed on.
async fn a_try_does_not_barge_in(servers: Servers) {
    let holder = servers.client_with(LONG, true);
    let lock = holder.fair_mutex("job").unwrap();
    let held = lock.acquire().await.unwrap();
    let waiter = servers.client_with(LONG, true).fair_mutex("job").unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire_timeout(LONG).await });
    eventually("the waiter to queue", || async {
        queued(&servers).await == 1
    })
    .await;
    let newcomer = servers.client_with(LONG, true).fair_mutex("job").unwrap();
    held.release().await.unwrap();
    assert!(newcomer.try_acquire().await.unwrap().is_none());
    let guard = waiting.await.unwrap().unwrap();
    assert!(newcomer.try_acquire().await.unwrap().is_none());
    guard.release().await.unwrap();
    common::take_and_release(newcomer.try_acquire().await).await;
}

/// A waiter whose heartbeat ran out (its process died) is passed over.
async fn a_dead_waiter_leaves_the_queue_after_its_heartbeat(servers: Servers) {
    let client = servers.client_with(LONG, true);
    let lock = client.fair_mutex("job").unwrap();
    dead_waiter(&servers, "dead", 300).await;
    // Still within its heartbeat: the lock is promised to it.
    assert!(lock.try_acquire().await.unwrap().is_none());
    let guard = lock.acquire_timeout(Duration::from_secs(10)).await.unwrap();
    assert_eq!(queued(&servers).await, 0);
    guard.release().await.unwrap();
}

/// A lock handed to a waiter that died comes back after the hand-off lease
/// and goes to the next live waiter.
async fn a_hand_off_to_a_dead_waiter_is_recovered(servers: Servers) {
    let holder = servers.client_with(LONG, true);
    let held = holder.fair_mutex("job").unwrap().acquire().await.unwrap();
    // It died just after its last heartbeat: the record is still fresh.
    dead_waiter(&servers, "dead", 3000).await;
    let waiter = servers.client_with(LONG, true).fair_mutex("job").unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire_timeout(LONG).await });
    eventually("the waiter to queue", || async {
        queued(&servers).await == 2
    })
    .await;
    held.release().await.unwrap();
    let holder_now: String = servers.cmd(&["GET", JOB]).await;
    assert_eq!(
        holder_now.split(' ').next(),
        Some("dead"),
        "the release did not hand over to the head"
    );
    let guard = waiting.await.unwrap().unwrap();
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
}

/// A waiter that is cancelled leaves the queue at once, so that a release
/// does not hand the lock to nobody.
async fn a_cancelled_waiter_leaves_the_queue_at_once(servers: Servers) {
    let holder = servers.client_with(LONG, true);
    let lock = holder.fair_mutex("job").unwrap();
    let held = lock.acquire().await.unwrap();
    let client = servers.client_with(LONG, true);
    let waiter = client.fair_mutex("job").unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    eventually("the waiter to queue", || async {
        queued(&servers).await == 1
    })
    .await;
    waiting.abort();
    eventually("the cancelled waiter to leave", || async {
        queued(&servers).await == 0
    })
    .await;
    held.release().await.unwrap();
    let free: bool = servers.cmd(&["EXISTS", JOB]).await;
    assert!(!free, "the lock was handed to a cancelled waiter");
}

/// A waiter cancelled after the lock was handed to it releases it, which
/// hands it on to the next.
async fn a_lock_handed_to_a_cancelled_waiter_goes_on_to_the_next(servers: Servers) {
    let holder = servers.client_with(LONG, true);
    let held = holder.fair_mutex("job").unwrap().acquire().await.unwrap();
    // The first waiter's client cannot hear its hand-off: its process is
    // stopped, as far as the lock can tell.
    let first = servers.client_with(LONG, true).fair_mutex("job").unwrap();
    let first_wait = tokio::spawn(async move { first.acquire().await });
    eventually("the first waiter to queue", || async {
        queued(&servers).await == 1
    })
    .await;
    let second = servers.client_with(LONG, true).fair_mutex("job").unwrap();
    let second_wait = tokio::spawn(async move { second.acquire_timeout(LONG).await });
    eventually("the second waiter to queue", || async {
        queued(&servers).await == 2
    })
    .await;
    held.release().await.unwrap();
    // The hand-off to the first may or may not have been heard: cancel it.
    first_wait.abort();
    let _ = first_wait.await;
    let guard = second_wait.await.unwrap().unwrap();
    guard.release().await.unwrap();
}

/// Fair and plain mutexes of one name share one lock, and a plain release
/// of a fair lock hands it on.
async fn release_by_token_hands_the_lock_on(servers: Servers) {
    let client = servers.client();
    let lock = client.fair_mutex("job").unwrap();
    let lease = lock.acquire().await.unwrap().detach();
    let waiter = servers.client_with(LONG, true).fair_mutex("job").unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire_timeout(LONG).await });
    eventually("the waiter to queue", || async {
        queued(&servers).await == 1
    })
    .await;
    client
        .mutex("job")
        .unwrap()
        .release_token(&lease.token)
        .await
        .unwrap();
    let guard = waiting.await.unwrap().unwrap();
    assert!(guard.fence() > lease.fence);
    guard.release().await.unwrap();
}

/// A FairMutex hand-off message that sat undelivered (here: a partition of
/// the waiter's connections) while the handed lease ran out and another
/// client took the lock must not make the waiter a second holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_hand_off_message_is_not_a_grant() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let lease = Duration::from_secs(2);
    let direct = |lease| {
        Client::builder(server.url())
            .lease(lease)
            .watchdog(false)
            .build()
            .unwrap()
    };
    let holder = direct(lease)
        .fair_mutex("job")
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let t_client = Client::builder(proxy.url())
        .lease(lease)
        .watchdog(false)
        .command_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let t_lock = t_client.fair_mutex("job").unwrap();
    let waiter = tokio::spawn(async move { t_lock.acquire().await });
    let queued = || async { cmd::<u64>(&server, &["ZCARD", "leasehold:{job}:q"]).await };
    eventually("T to queue", || async { queued().await == 1 }).await;
    tokio::time::sleep(Duration::from_millis(300)).await; // T subscribed, listening
    proxy.blackhole(true);
    holder.release().await.unwrap(); // hands the lock to T; the message is held
                                     // The handed lease (2 s) runs out; U takes the free lock.
    tokio::time::sleep(lease + Duration::from_millis(300)).await;
    let u = direct(Duration::from_secs(10))
        .fair_mutex("job")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("the handed lease ran out: the lock is free");
    proxy.heal();
    let got = tokio::time::timeout(Duration::from_secs(3), waiter).await;
    if let Ok(joined) = got {
        let t = joined.unwrap().unwrap();
        let redis_holder: Option<String> = cmd(&server, &["GET", "leasehold:{job}"]).await;
        panic!(
            "DOUBLE GRANT: T holds (lost={}, valid_for={:?}, fence {}) while U holds \
             (lost={}, valid_for={:?}, fence {}); redis says holder={:?}, T={}, U={}",
            t.is_lost(),
            t.valid_for(),
            t.fence(),
            u.is_lost(),
            u.valid_for(),
            u.fence(),
            redis_holder,
            t.token(),
            u.token()
        );
    }
}

/// A waiter of a client of its own (lease `LONG`, no watchdog) queues for
/// "job"; `held` is released, and the waiter's guard returned.
async fn handed_to_a_waiter(
    server: &RedisServer,
    held: leasehold::LeaseGuard,
) -> leasehold::LeaseGuard {
    let waiting = queued_waiter(server, server.url()).await;
    held.release().await.unwrap();
    waiting.await.unwrap().unwrap()
}

/// A waiter of a client of its own at `url` (lease `LONG`, no watchdog),
/// once it is queued for "job" on `server`; returns its task.
async fn queued_waiter(
    server: &RedisServer,
    url: String,
) -> tokio::task::JoinHandle<leasehold::Result<leasehold::LeaseGuard>> {
    let lock = fixed_lease_client(url, LONG).fair_mutex("job").unwrap();
    let waiting = tokio::spawn(async move { lock.acquire().await });
    eventually("the waiter to queue", || async {
        cmd::<u64>(server, &["ZCARD", "leasehold:{job}:q"]).await == 1
    })
    .await;
    waiting
}

/// A client whose locks use `lease` without the watchdog, at `url`.
fn fixed_lease_client(url: String, lease: Duration) -> Client {
    Client::builder(url)
        .lease(lease)
        .watchdog(false)
        .command_timeout(Duration::from_millis(300))
        .build()
        .unwrap()
}

/// A waiter of a client that then dies (its network goes silent), queued
/// behind `held`'s holder; returns its task.
async fn waiter_that_dies(
    server: &RedisServer,
    proxy: &FaultProxy,
) -> tokio::task::JoinHandle<leasehold::Result<leasehold::LeaseGuard>> {
    let waiting = queued_waiter(server, proxy.url()).await;
    proxy.blackhole(true);
    waiting
}

/// An admin's force-release frees a fair lock: it is not handed to the
/// first waiter, which may be dead, and a newcomer gets it once that
/// waiter's heartbeat has run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_frees_a_fair_lock_instead_of_handing_it_on() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let direct = fixed_lease_client(server.url(), LONG);
    let held = direct.fair_mutex("job").unwrap().acquire().await.unwrap();
    let dead = waiter_that_dies(&server, &proxy).await;
    let admin = direct.fair_mutex("job").unwrap();
    assert!(admin.force_release().await.unwrap());
    let info = admin.inspect().await.unwrap();
    assert!(!info.held, "force-release handed the lock on: {info:?}");
    let guard = admin
        .acquire_timeout(Duration::from_secs(15))
        .await
        .expect("the dead waiter kept the lock from a newcomer");
    assert!(guard.fence() > held.fence());
    guard.release().await.unwrap();
    assert!(held.release().await.unwrap_err().is_not_held());
    dead.abort();
}

/// A lock handed to a waiter that died costs at most its heartbeat, also
/// when the lease is long and the watchdog is off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_to_a_dead_waiter_costs_at_most_its_heartbeat_without_the_watchdog() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let direct = fixed_lease_client(server.url(), LONG);
    let held = direct.fair_mutex("job").unwrap().acquire().await.unwrap();
    let dead = waiter_that_dies(&server, &proxy).await;
    held.release().await.unwrap();
    let pttl: i64 = cmd(&server, &["PTTL", JOB]).await;
    assert!(
        (0..=3000).contains(&pttl),
        "the dead waiter was handed {pttl} ms of lease"
    );
    let guard = direct
        .fair_mutex("job")
        .unwrap()
        .acquire_timeout(Duration::from_secs(15))
        .await
        .expect("the dead waiter kept the lock from a newcomer");
    guard.release().await.unwrap();
    dead.abort();
}

/// A live waiter handed the lock without the watchdog holds it for its
/// whole lease, though the release hands it over with a short one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_without_the_watchdog_gives_the_whole_lease() {
    let server = RedisServer::start();
    let holder = fixed_lease_client(server.url(), LONG);
    let held = holder.fair_mutex("job").unwrap().acquire().await.unwrap();
    let guard = handed_to_a_waiter(&server, held).await;
    assert!(guard.valid_for() > Duration::from_secs(20), "{guard:?}");
    let pttl: i64 = cmd(&server, &["PTTL", JOB]).await;
    assert!(pttl > 20_000, "the lock was left with {pttl} ms");
    guard.release().await.unwrap();
}

/// A holder's fence is its value's acquisition time, also when the fence
/// counter runs ahead of the server's clock (it is then the counter's next
/// value, not the clock's): a waiter handed the lock without the watchdog
/// learns its fence from the value when it makes its lease whole, and gets
/// the hand-off's fence, not an older one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_ahead_of_the_clock_is_the_value_s_time_and_the_hand_off_s() {
    let server = RedisServer::start();
    // Far ahead of the clock (µs), below 2^53, marked WAITING as a release
    // that woke a waiter leaves it.
    let ahead: u64 = 9_000_000_000_000_000;
    let _: () = cmd(
        &server,
        &["SET", "leasehold:{job}:fence", &format!("{ahead}w")],
    )
    .await;
    let holder = fixed_lease_client(server.url(), LONG);
    let held = holder.fair_mutex("job").unwrap().acquire().await.unwrap();
    assert_eq!(held.fence(), ahead + 1);
    let value: String = cmd(&server, &["GET", JOB]).await;
    let time = value.split(' ').nth(1).unwrap();
    assert_eq!(time, (ahead + 1).to_string(), "{value:?}");
    // The counter's mark made the value say that waiters may be queued.
    assert!(value.ends_with("\u{1f}w"), "{value:?}");

    let guard = handed_to_a_waiter(&server, held).await;
    assert_eq!(guard.fence(), ahead + 2);
    let value: String = cmd(&server, &["GET", JOB]).await;
    assert_eq!(value.split(' ').nth(1).unwrap(), (ahead + 2).to_string());
    let counter: String = cmd(&server, &["GET", "leasehold:{job}:fence"]).await;
    assert_eq!(counter, (ahead + 2).to_string());
    assert!(guard.valid_for() > Duration::from_secs(20), "{guard:?}");
    guard.release().await.unwrap();
}

/// A waiter handed the lock that lets the hand-off run out (it was held
/// up) keeps its place at the front: its next attempt takes the lock still
/// (or goes back to the front of the queue), instead of being left out of
/// the queue, or put at its back, while those behind it pass it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_hand_off_ran_out_keeps_its_place() {
    let server = RedisServer::start();
    let held = common::client_with(&server, LONG, false)
        .fair_mutex("job")
        .unwrap()
        .acquire()
        .await
        .unwrap();
    // The first waiter runs on a runtime of its own, which the test holds
    // up; its lease, and so the hand-off's, is short.
    let first = common::client_with(&server, Duration::from_millis(300), false);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.handle().clone();
    let first_waiting = std::thread::spawn(move || -> leasehold::Result<u64> {
        runtime.block_on(async move {
            let lock = first.fair_mutex("job").unwrap();
            let guard = lock.acquire_timeout(LONG).await?;
            let fence = guard.fence();
            guard.release().await?;
            leasehold::Result::Ok(fence)
        })
    });
    let server_ref = &server;
    eventually("the first waiter to queue", || async {
        cmd::<u64>(server_ref, &["ZCARD", "leasehold:{job}:q"]).await == 1
    })
    .await;
    let second = common::client_with(&server, LONG, false)
        .fair_mutex("job")
        .unwrap();
    let second_waiting = tokio::spawn(async move {
        let guard = second.acquire_timeout(LONG).await?;
        let fence = guard.fence();
        guard.release().await?;
        leasehold::Result::<u64>::Ok(fence)
    });
    eventually("the second waiter to queue", || async {
        cmd::<u64>(server_ref, &["ZCARD", "leasehold:{job}:q"]).await == 2
    })
    .await;
    let (blocked_tx, blocked_rx) = std::sync::mpsc::channel::<()>();
    let (unblock_tx, unblock_rx) = std::sync::mpsc::channel::<()>();
    handle.spawn(async move {
        blocked_tx.send(()).unwrap();
        // Holds the first waiter's runtime up.
        let _ = unblock_rx.recv();
    });
    blocked_rx.recv().unwrap();
    held.release().await.unwrap();
    // Handed to the first waiter, which cannot take it: the hand-off runs
    // out, and nobody is told.
    eventually("the hand-off to run out", || async {
        cmd::<u64>(server_ref, &["EXISTS", JOB]).await == 0
    })
    .await;
    unblock_tx.send(()).unwrap();
    let first_fence = tokio::task::spawn_blocking(move || first_waiting.join().unwrap())
        .await
        .unwrap()
        .unwrap();
    let second_fence = second_waiting.await.unwrap().unwrap();
    assert!(
        first_fence < second_fence,
        "the second waiter passed the first: {first_fence} > {second_fence}"
    );
    assert_eq!(queued_on(&server).await, 0);
}

async fn queued_on(server: &RedisServer) -> u64 {
    cmd(server, &["ZCARD", "leasehold:{job}:q"]).await
}

/// A release that hands the lock on is remembered by its token, for a short
/// while, on the server of the lock's slot (a release sent again after a
/// lost reply reads it there).
async fn a_hand_off_is_remembered_in_the_locks_slot(servers: Servers) {
    let held = servers
        .client_with(LONG, true)
        .fair_mutex("job")
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let token = held.token().to_owned();
    let waiter = servers.client_with(LONG, true).fair_mutex("job").unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire_timeout(LONG).await });
    eventually("the waiter to queue", || async {
        queued(&servers).await == 1
    })
    .await;
    held.release().await.unwrap();
    let records = servers.keys("leasehold:{job}:r:*").await;
    assert_eq!(records.len(), 1, "{records:?}");
    let (key, server) = &records[0];
    assert_eq!(key, &format!("leasehold:{{job}}:r:{token}"));
    assert_eq!(server.addr(), servers.server_for(JOB).addr());
    let ttl: i64 = cmd(server, &["PTTL", key]).await;
    assert!(ttl > 0, "{ttl}");
    waiting.await.unwrap().unwrap().release().await.unwrap();
}

/// Waiters that take the lock in turn, each from the release before, leave
/// no waiter record behind them once the last one released it: the queue
/// is gone for `inspect` and for a scan of the keys alike.
async fn a_drained_queue_leaves_no_waiter_record(servers: Servers) {
    const WAITERS: u64 = 12;
    let holder = servers.client_with(LONG, true);
    let lock = holder.fair_mutex("job").unwrap();
    let held = lock.acquire().await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let waiter = servers.client_with(LONG, true).fair_mutex("job").unwrap();
        tasks.push(tokio::spawn(async move {
            waiter
                .acquire_timeout(LONG)
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
        }));
        eventually("the waiter to queue", || async {
            queued(&servers).await == i + 1
        })
        .await;
    }
    held.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    let records = servers.keys("leasehold:{job}:w:*").await;
    assert!(records.is_empty(), "{records:?}");
    let info = lock.inspect().await.unwrap();
    assert_eq!(info.waiting_clients, 0, "{info:?}");
    assert!(!info.held, "{info:?}");
}
