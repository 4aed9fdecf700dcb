//! How long a lease is held: hold-at-least (run-once jobs) and max hold (a
//! cap on renewal); on one server and on a Redis Cluster (`name::single`,
//! `name::cluster`), but for the renewal through a faulty proxy.

mod common;

use std::time::Duration;

use common::{client, cmd, eventually, Servers};
use leasehold::{ErrorKind, LossReason};
use leasehold_testkit::RedisServer;
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(30);
const HOLD: Duration = Duration::from_secs(3);

common::on_both_topologies!(
    a_release_within_the_hold_keeps_the_lock_until_it_ends,
    a_release_after_the_hold_frees_the_lock_at_once,
    a_dropped_guard_keeps_the_hold,
    a_fair_release_within_the_hold_hands_nothing_over: multi_thread,
    the_watchdog_stops_at_the_max_hold,
    an_extend_stops_at_the_max_hold,
    inspect_shows_a_kept_lock_as_kept,
);

/// A lock released within its hold-at-least is shown as kept, by every
/// kind; a lock whose holder still holds it is not.
async fn inspect_shows_a_kept_lock_as_kept(servers: Servers) {
    let client = servers.client();
    let mutex = client.mutex("m").unwrap().with_hold_at_least(HOLD).unwrap();
    let rw = client
        .rw_lock("rw")
        .unwrap()
        .with_hold_at_least(HOLD)
        .unwrap();
    let sem = client
        .semaphore("s", 2)
        .unwrap()
        .with_hold_at_least(HOLD)
        .unwrap();
    let reentrant = client
        .reentrant_mutex("r")
        .unwrap()
        .with_hold_at_least(HOLD)
        .unwrap();
    let guards = [
        mutex.acquire().await.unwrap(),
        rw.read().acquire().await.unwrap(),
        sem.acquire().await.unwrap(),
        reentrant.acquire().await.unwrap(),
    ];
    for name in ["m", "rw", "s", "r"] {
        let info = client.mutex(name).unwrap().inspect().await.unwrap();
        assert!(!info.holders[0].kept, "{name}: {info:?}");
    }
    for guard in guards {
        guard.release().await.unwrap();
    }
    for name in ["m", "rw", "s", "r"] {
        let info = client.mutex(name).unwrap().inspect().await.unwrap();
        assert!(info.held, "{name}: {info:?}");
        let holder = &info.holders[0];
        assert!(holder.kept, "{name}: {info:?}");
        assert!(holder
            .describe()
            .ends_with("released and kept until its hold-at-least is over"));
        // The mark is not part of the holder's name.
        assert!(!holder.client_name.contains("kept"), "{name}: {holder:?}");
    }
}

/// Two hosts whose cron fires half a second apart: the first runs the job
/// and releases at once, the second finds the lock busy, and the lock is
/// free again once the hold has passed.
async fn a_release_within_the_hold_keeps_the_lock_until_it_ends(servers: Servers) {
    let first = servers
        .client()
        .mutex("nightly")
        .unwrap()
        .with_hold_at_least(HOLD)
        .unwrap();
    let second = servers
        .client()
        .mutex("nightly")
        .unwrap()
        .with_hold_at_least(HOLD)
        .unwrap();

    let before = Instant::now();
    let guard = first
        .try_acquire()
        .await
        .unwrap()
        .expect("the lock was free");
    // The job is quick; the release keeps the lock and says it held.
    guard.release().await.unwrap();
    let info = first.inspect().await.unwrap();
    assert!(info.held, "the release within the hold freed the lock");
    let left = info.remaining.expect("the kept lock has no expiry");
    assert!(left <= HOLD + HOLD / 50, "kept for {left:?}, past the hold");

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        second.try_acquire().await.unwrap().is_none(),
        "the second host ran the job too"
    );

    eventually("the hold to end", || async {
        !second.inspect().await.unwrap().held
    })
    .await;
    assert!(before.elapsed() >= HOLD, "the lock ended before its hold");
    let guard = second
        .try_acquire()
        .await
        .unwrap()
        .expect("free after the hold");
    guard.release().await.unwrap();
}

async fn a_release_after_the_hold_frees_the_lock_at_once(servers: Servers) {
    let mutex = servers
        .client()
        .mutex("job")
        .unwrap()
        .with_hold_at_least(Duration::from_millis(200))
        .unwrap();
    let guard = mutex.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.release().await.unwrap();
    assert!(!mutex.inspect().await.unwrap().held);
}

/// A dropped guard keeps the hold as its release does.
async fn a_dropped_guard_keeps_the_hold(servers: Servers) {
    let c = servers.client();
    let mutex = c.mutex("job").unwrap().with_hold_at_least(HOLD).unwrap();
    drop(mutex.acquire().await.unwrap());
    c.flush().await;
    let info = mutex.inspect().await.unwrap();
    assert!(
        info.held,
        "the dropped guard freed the lock within its hold"
    );
    assert!(info.remaining.is_some_and(|left| left <= HOLD + HOLD / 50));
}

/// A fair lock released within its hold is not handed to the waiter: the
/// waiter takes it when the hold ends.
async fn a_fair_release_within_the_hold_hands_nothing_over(servers: Servers) {
    let hold = Duration::from_secs(2);
    let holder = servers
        .client()
        .fair_mutex("job")
        .unwrap()
        .with_hold_at_least(hold)
        .unwrap();
    let before = Instant::now();
    let guard = holder.acquire().await.unwrap();
    let waiter = servers.client().fair_mutex("job").unwrap();
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire_timeout(LONG).await.unwrap();
        let taken = Instant::now();
        guard.release().await.unwrap();
        taken
    });
    eventually("the waiter to queue", || async {
        servers.cmd::<u64>(&["ZCARD", "leasehold:{job}:q"]).await == 1
    })
    .await;
    guard.release().await.unwrap();
    let info = holder.inspect().await.unwrap();
    assert!(info.held);
    assert_eq!(info.waiting_clients, 1, "the release handed the lock over");
    let taken = waiting.await.unwrap();
    assert!(
        taken.duration_since(before) >= hold,
        "the waiter got the lock before the hold ended"
    );
}

#[tokio::test]
async fn holds_and_caps_out_of_range_are_refused() {
    let server = RedisServer::start();
    let c = client(&server);
    let err = c
        .mutex("job")
        .unwrap()
        .with_hold_at_least(Duration::from_secs(25 * 3600))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err:?}");
    assert!(err.to_string().contains("24h"), "{err}");
    for cap in [Duration::ZERO, Duration::from_secs(25 * 3600)] {
        let err = c.fair_mutex("job").unwrap().with_max_hold(cap).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err:?}");
    }
    // A hold longer than the cap would keep the lock past it, in either order.
    let err = c
        .mutex("job")
        .unwrap()
        .with_max_hold(Duration::from_secs(5))
        .unwrap()
        .with_hold_at_least(Duration::from_secs(6))
        .unwrap_err();
    assert!(err.to_string().contains("max hold"), "{err}");
    let err = c
        .fair_mutex("job")
        .unwrap()
        .with_hold_at_least(Duration::from_secs(6))
        .unwrap()
        .with_max_hold(Duration::from_secs(5))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err:?}");
    // Zero turns the hold off.
    let mutex = c
        .mutex("job")
        .unwrap()
        .with_hold_at_least(Duration::ZERO)
        .unwrap();
    mutex.acquire().await.unwrap().release().await.unwrap();
    assert!(!mutex.inspect().await.unwrap().held);
}

/// A lock's settings are one value on every kind, through `Lock`: set at
/// once, checked as the setters check them, and left as they were when one
/// is refused; a zero hold turns the hold off.
#[tokio::test]
async fn settings_are_one_value_on_every_kind() {
    use leasehold::Lock;
    let server = RedisServer::start();
    let c = client(&server);
    let kinds: Vec<Box<dyn Lock>> = vec![
        Box::new(c.mutex("a").unwrap()),
        Box::new(c.fair_mutex("b").unwrap()),
        Box::new(c.reentrant_mutex("c").unwrap()),
        Box::new(c.rw_lock("d").unwrap().read()),
        Box::new(c.rw_lock("e").unwrap().write()),
        Box::new(c.semaphore("f", 2).unwrap()),
    ];
    for mut lock in kinds {
        let before = lock.settings();
        let mut wanted = before;
        wanted.lease = Duration::from_secs(7);
        wanted.watchdog = false;
        wanted.max_hold = Some(Duration::from_secs(5));
        wanted.hold_at_least = Some(Duration::from_secs(6));
        let err = lock.set_settings(wanted).unwrap_err();
        assert!(err.to_string().contains("max hold"), "{err}");
        assert_eq!(lock.settings(), before, "{}: unchanged", lock.name());
        wanted.hold_at_least = Some(Duration::ZERO);
        lock.set_settings(wanted).unwrap();
        let now = lock.settings();
        assert_eq!(now.lease, Duration::from_secs(7));
        assert!(!now.watchdog);
        assert_eq!(now.max_hold, Some(Duration::from_secs(5)));
        assert_eq!(now.hold_at_least, None, "{}: zero is off", lock.name());
        let guard = lock.acquire().await.unwrap();
        assert!(
            guard.valid_for() <= Duration::from_secs(5),
            "{}",
            lock.name()
        );
        guard.release().await.unwrap();
    }
}

/// The watchdog stops at the max hold: the lease ends, `lost()` fires, and
/// the loss names the cap.
async fn the_watchdog_stops_at_the_max_hold(servers: Servers) {
    let c = servers.client_with(Duration::from_millis(300), true);
    let mutex = c
        .mutex("job")
        .unwrap()
        .with_max_hold(Duration::from_secs(1))
        .unwrap();
    let guard = mutex.acquire().await.unwrap();
    tokio::time::timeout(LONG, guard.lost())
        .await
        .expect("the lease outlived its max hold");
    assert!(guard.is_lost());
    assert_eq!(guard.loss_reason(), Some(LossReason::MaxHoldReached));
    let err = guard.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotHeld, "{err:?}");
    assert!(err.to_string().contains("max hold of 1s"), "{err}");
    // The lock ends in Redis too, and goes to the next.
    let next = servers.client().mutex("job").unwrap();
    let guard = next.acquire_timeout(LONG).await.unwrap();
    guard.release().await.unwrap();
}

/// An extend stops at the max hold too.
async fn an_extend_stops_at_the_max_hold(servers: Servers) {
    let c = servers.client_with(Duration::from_millis(500), false);
    let mutex = c
        .fair_mutex("job")
        .unwrap()
        .with_max_hold(Duration::from_secs(1))
        .unwrap();
    let guard = mutex.acquire().await.unwrap();
    guard.extend(Duration::from_secs(60)).await.unwrap();
    assert!(guard.valid_for() <= Duration::from_secs(1));
    let left = mutex.inspect().await.unwrap().remaining.unwrap();
    assert!(left <= Duration::from_secs(1), "extended to {left:?}");
    tokio::time::timeout(LONG, guard.lost()).await.unwrap();
    let err = guard.release().await.unwrap_err();
    assert!(err.to_string().contains("max hold"), "{err}");
}

/// A renewal that has to reconnect first is cut at the max hold from when
/// it is sent, not from when it came due: neither the guard nor Redis keeps
/// the lease past the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_after_a_reconnect_stops_at_the_max_hold() {
    let server = RedisServer::start();
    let proxy = leasehold_testkit::FaultProxy::start(server.addr());
    let max = Duration::from_secs(5);
    let c = leasehold::Client::builder(proxy.url())
        .lease(Duration::from_secs(2))
        .command_timeout(Duration::from_millis(800))
        .build()
        .unwrap();
    let mutex = c.mutex("job").unwrap().with_max_hold(max).unwrap();
    let guard = mutex.acquire().await.unwrap();
    // The cap counts from when the acquire was sent, before this.
    let cap = Instant::now() + max;
    let mut broke = false;
    while !guard.is_lost() {
        let now = Instant::now();
        assert!(
            now + guard.valid_for() <= cap,
            "the guard claims {:?} past its max hold",
            (now + guard.valid_for()) - cap
        );
        if !broke && cap.saturating_duration_since(now) < Duration::from_millis(2600) {
            // The next renewal meets a dead connection, and its retry must
            // connect again, slowly, before it is sent.
            broke = true;
            proxy.set_latency(Duration::from_millis(150));
            proxy.reset();
        }
        let pttl: i64 = cmd(&server, &["PTTL", "leasehold:{job}"]).await;
        if pttl > 0 {
            let expires = Instant::now() + Duration::from_millis(pttl as u64);
            assert!(
                expires <= cap + Duration::from_secs(1),
                "redis keeps the lock {:?} past the max hold",
                expires - cap
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            Instant::now() < cap + LONG,
            "the lease outlived its max hold"
        );
    }
}
