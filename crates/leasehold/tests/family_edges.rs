//! The lock family at its edges: waiters woken together, waiters that give
//! up at the head of a queue, permit counts changed under waiters, hashes
//! written by hand, levels released out of order, hold-at-least and max
//! hold on the hash kinds, and acquisitions dropped at every await point.
//! The tests of hold-at-least, max hold, force-release and inspect on the
//! hash kinds run on one server and on a Redis Cluster (`name::single`,
//! `name::cluster`).
//!
//! Some steps drive the scripts directly with waiters of the test's own
//! (a token, a client id whose channel the test listens on), so that the
//! order of attempts is the test's, not the scheduler's.

mod common;

use std::time::Duration;

use common::{client, client_with, cmd, eventually, poll_then_drop, raw, Servers};
use futures_util::StreamExt;
use leasehold::redis::{self, aio::MultiplexedConnection, Value};
use leasehold_testkit::RedisServer;

const LONG: Duration = Duration::from_secs(30);

common::on_both_topologies!(
    hold_at_least_keeps_hash_leases_after_release,
    max_hold_caps_every_hash_kind,
    force_release_frees_and_wakes_every_hash_kind: multi_thread,
    inspect_reports_the_time_left_on_the_leases,
);

const LIB: &str = concat!(
    include_str!("../src/scripts/lib.lua"),
    include_str!("../src/scripts/family.lua")
);
const FAMILY_ACQUIRE: &str = include_str!("../src/scripts/family_acquire.lua");
const RELEASE: &str = include_str!("../src/scripts/release.lua");

fn keys(name: &str) -> [String; 5] {
    let lock = format!("leasehold:{{{name}}}");
    [
        lock.clone(),
        format!("{lock}:fence"),
        format!("{lock}:q"),
        format!("{lock}:w:"),
        format!("{lock}:r:"),
    ]
}

/// A waiter of the test's own: `token` listens on `client`'s channel.
struct Fake<'a> {
    name: &'a str,
    token: &'a str,
    client: &'a str,
    kind: &'a str,
    mode: &'a str,
    want: u32,
    total: u32,
}

impl Fake<'_> {
    /// One attempt of the acquire script; it queues when busy. Returns the
    /// reply's code: 1 granted, 0 busy.
    async fn attempt(&self, conn: &mut MultiplexedConnection, known: bool) -> i64 {
        let script = redis::Script::new(&format!("{LIB}{FAMILY_ACQUIRE}"));
        let reply: Value = script
            .key(&keys(self.name)[..4])
            .arg(self.token)
            .arg(30_000)
            .arg(604_800_000u64)
            .arg("1")
            // A heartbeat that outlives the test: these waiters never die.
            .arg(60_000)
            .arg(self.client)
            .arg(if known { "1" } else { "0" })
            .arg("1 test-host fake")
            .arg(self.mode)
            .arg(self.kind)
            .arg(format!("owner-{}", self.token))
            .arg(self.want)
            .arg(self.total)
            .invoke_async(conn)
            .await
            .unwrap();
        match reply {
            Value::Array(items) => match items.first() {
                Some(Value::Int(code)) => *code,
                other => panic!("reply {other:?}"),
            },
            other => panic!("reply {other:?}"),
        }
    }

    /// The waiter gives up: the release script with `queued`.
    async fn leave(&self, conn: &mut MultiplexedConnection) -> i64 {
        let script = redis::Script::new(&format!("{LIB}{RELEASE}"));
        script
            .key(&keys(self.name)[..])
            .arg(self.token)
            .arg("1")
            .arg(604_800_000u64)
            .arg(format!("leasehold:{{{}}}:ch:", self.name))
            .arg("0")
            // No owner, no kind, nothing remembered, a first attempt.
            .arg("")
            .arg("")
            .arg("0")
            .arg("")
            .invoke_async(conn)
            .await
            .unwrap()
    }
}

/// Listens on the channels of `clients` for lock `name`.
async fn listen(server: &RedisServer, name: &str, clients: &[&str]) -> redis::aio::PubSub {
    let mut pubsub = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    for c in clients {
        pubsub
            .subscribe(format!("leasehold:{{{name}}}:ch:{c}"))
            .await
            .unwrap();
    }
    pubsub
}

/// The tokens woken on `pubsub`, until all of `expected` were (bounded).
async fn woken(pubsub: &mut redis::aio::PubSub, expected: &[&str]) -> Vec<String> {
    let mut seen = Vec::new();
    let mut stream = pubsub.on_message();
    while !expected.iter().all(|t| seen.iter().any(|s| s == t)) {
        match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
            Ok(Some(msg)) => seen.push(msg.get_payload::<String>().unwrap()),
            _ => break,
        }
    }
    seen
}

/// A release that frees permits for two waiters wakes both; the second to
/// come back must not be refused for the first, which still fits after it.
#[tokio::test]
async fn two_semaphore_waiters_woken_together_both_get_in() {
    let server = RedisServer::start();
    let sem = client(&server).semaphore("s", 2).unwrap();
    let all = sem.acquire_many(2).await.unwrap();
    let mut conn = raw(&server).await;
    let a = Fake {
        name: "s",
        token: "a",
        client: "ca",
        kind: "semaphore",
        mode: "s",
        want: 1,
        total: 2,
    };
    let b = Fake {
        token: "b",
        client: "cb",
        ..a
    };
    assert_eq!(a.attempt(&mut conn, false).await, 0);
    assert_eq!(b.attempt(&mut conn, false).await, 0);
    let mut pubsub = listen(&server, "s", &["ca", "cb"]).await;
    all.release().await.unwrap();
    let seen = woken(&mut pubsub, &["a", "b"]).await;
    assert!(seen.contains(&"a".to_owned()) && seen.contains(&"b".to_owned()));
    // The second waiter answers first.
    assert_eq!(
        b.attempt(&mut conn, true).await,
        1,
        "a woken waiter that fits was refused"
    );
    assert_eq!(a.attempt(&mut conn, true).await, 1);
    assert_eq!(sem.available().await.unwrap(), 0);
    assert_eq!(cmd::<u64>(&server, &["ZCARD", "leasehold:{s}:q"]).await, 0);
}

/// Order still holds among queued waiters: one that fits may not pass one
/// before it that does not.
#[tokio::test]
async fn a_queued_semaphore_waiter_does_not_pass_a_bigger_one() {
    let server = RedisServer::start();
    let sem = client(&server).semaphore("s", 2).unwrap();
    let one = sem.acquire().await.unwrap();
    let mut conn = raw(&server).await;
    let big = Fake {
        name: "s",
        token: "big",
        client: "c1",
        kind: "semaphore",
        mode: "s",
        want: 2,
        total: 2,
    };
    let small = Fake {
        token: "small",
        client: "c2",
        want: 1,
        ..big
    };
    assert_eq!(big.attempt(&mut conn, false).await, 0);
    assert_eq!(small.attempt(&mut conn, false).await, 0);
    assert_eq!(small.attempt(&mut conn, true).await, 0);
    one.release().await.unwrap();
    assert_eq!(small.attempt(&mut conn, true).await, 0);
    assert_eq!(big.attempt(&mut conn, true).await, 1);
}

/// A writer that gives up at the head of the queue while the lock is free
/// (it was woken, and never came back) wakes every reader behind it.
#[tokio::test]
async fn a_writer_leaving_the_head_of_a_free_rw_lock_wakes_all_readers_behind_it() {
    let server = RedisServer::start();
    let lock = client(&server).rw_lock("c").unwrap();
    let reading = lock.read().acquire().await.unwrap();
    let mut conn = raw(&server).await;
    let writer = Fake {
        name: "c",
        token: "w",
        client: "cw",
        kind: "rwlock",
        mode: "w",
        want: 1,
        total: 0,
    };
    let r1 = Fake {
        token: "r1",
        client: "c1",
        mode: "r",
        ..writer
    };
    let r2 = Fake {
        token: "r2",
        client: "c2",
        mode: "r",
        ..writer
    };
    assert_eq!(writer.attempt(&mut conn, false).await, 0);
    assert_eq!(r1.attempt(&mut conn, false).await, 0);
    assert_eq!(r2.attempt(&mut conn, false).await, 0);
    let mut pubsub = listen(&server, "c", &["cw", "c1", "c2"]).await;
    reading.release().await.unwrap();
    assert_eq!(woken(&mut pubsub, &["w"]).await, ["w"]);
    assert!(!cmd::<bool>(&server, &["EXISTS", "leasehold:{c}"]).await);
    assert_eq!(writer.leave(&mut conn).await, 0);
    let seen = woken(&mut pubsub, &["r1", "r2"]).await;
    assert!(
        seen.contains(&"r1".to_owned()) && seen.contains(&"r2".to_owned()),
        "woken: {seen:?}"
    );
}

/// A forced release of a free rw-lock whose head writer died wakes every
/// reader behind it.
#[tokio::test]
async fn force_release_of_a_free_rw_lock_wakes_all_readers_at_the_front() {
    let server = RedisServer::start();
    let lock = client(&server).rw_lock("c").unwrap();
    let reading = lock.read().acquire().await.unwrap();
    let mut conn = raw(&server).await;
    let writer = Fake {
        name: "c",
        token: "w",
        client: "cw",
        kind: "rwlock",
        mode: "w",
        want: 1,
        total: 0,
    };
    assert_eq!(writer.attempt(&mut conn, false).await, 0);
    reading.release().await.unwrap();
    // The writer was woken, and the lock is free; readers queue behind it.
    let r1 = Fake {
        token: "r1",
        client: "c1",
        mode: "r",
        ..writer
    };
    let r2 = Fake {
        token: "r2",
        client: "c2",
        mode: "r",
        ..writer
    };
    assert_eq!(r1.attempt(&mut conn, false).await, 0);
    assert_eq!(r2.attempt(&mut conn, false).await, 0);
    let mut pubsub = listen(&server, "c", &["c1", "c2"]).await;
    // The writer dies: its heartbeat key is gone.
    let _: i64 = cmd(&server, &["DEL", "leasehold:{c}:w:w"]).await;
    assert!(!lock.force_release().await.unwrap());
    let seen = woken(&mut pubsub, &["r1", "r2"]).await;
    assert!(
        seen.contains(&"r1".to_owned()) && seen.contains(&"r2".to_owned()),
        "woken: {seen:?}"
    );
}

/// The same when the writer at the head leaves while readers hold the lock.
#[tokio::test]
async fn a_writer_leaving_the_head_of_a_read_rw_lock_wakes_all_readers_behind_it() {
    let server = RedisServer::start();
    let lock = client(&server).rw_lock("c").unwrap();
    let reading = lock.read().acquire().await.unwrap();
    let mut conn = raw(&server).await;
    let writer = Fake {
        name: "c",
        token: "w",
        client: "cw",
        kind: "rwlock",
        mode: "w",
        want: 1,
        total: 0,
    };
    let r1 = Fake {
        token: "r1",
        client: "c1",
        mode: "r",
        ..writer
    };
    let r2 = Fake {
        token: "r2",
        client: "c2",
        mode: "r",
        ..writer
    };
    assert_eq!(writer.attempt(&mut conn, false).await, 0);
    assert_eq!(r1.attempt(&mut conn, false).await, 0);
    assert_eq!(r2.attempt(&mut conn, false).await, 0);
    let mut pubsub = listen(&server, "c", &["c1", "c2"]).await;
    writer.leave(&mut conn).await;
    let seen = woken(&mut pubsub, &["r1", "r2"]).await;
    assert!(
        seen.contains(&"r1".to_owned()) && seen.contains(&"r2".to_owned()),
        "woken: {seen:?}"
    );
    assert_eq!(r2.attempt(&mut conn, true).await, 1);
    assert_eq!(r1.attempt(&mut conn, true).await, 1);
    reading.release().await.unwrap();
}

/// A waiter that gives up at the head of an rw queue, through the API:
/// the readers behind it get the lock without a writer ever holding it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_times_out_at_the_head_lets_the_readers_behind_it_in() {
    let server = RedisServer::start();
    let reading = client(&server)
        .rw_lock("c")
        .unwrap()
        .read()
        .acquire()
        .await
        .unwrap();
    let writer = client(&server).rw_lock("c").unwrap();
    let giving_up =
        tokio::spawn(async move { writer.write().acquire_timeout(Duration::from_secs(2)).await });
    eventually("the writer to queue", || async {
        cmd::<u64>(&server, &["ZCARD", "leasehold:{c}:q"]).await == 1
    })
    .await;
    let mut readers = Vec::new();
    for _ in 0..2 {
        let r = client(&server).rw_lock("c").unwrap();
        readers.push(tokio::spawn(
            async move { r.read().acquire_timeout(LONG).await },
        ));
    }
    eventually("the readers to queue", || async {
        cmd::<u64>(&server, &["ZCARD", "leasehold:{c}:q"]).await == 3
    })
    .await;
    let err = giving_up.await.unwrap().unwrap_err();
    assert!(err.is_timeout(), "{err}");
    for r in readers {
        let got = r.await.unwrap().unwrap();
        assert_eq!(got.fence(), reading.fence());
        got.release().await.unwrap();
    }
    reading.release().await.unwrap();
}

/// Lowering the count below what is held lets nobody in until enough is
/// released; a waiter queued with the old count keeps its place under the
/// new count and takes the first permit that fits; a newcomer with the old
/// count is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowered_permits_hold_back_newcomers_and_keep_queued_waiters() {
    let server = RedisServer::start();
    let three = client(&server).semaphore("s", 3).unwrap();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(three.acquire().await.unwrap());
    }
    let old = client(&server).semaphore("s", 3).unwrap();
    let waiting = tokio::spawn(async move { old.acquire_timeout(LONG).await });
    eventually("the waiter to queue", || async {
        cmd::<u64>(&server, &["ZCARD", "leasehold:{s}:q"]).await == 1
    })
    .await;
    let one = client(&server).semaphore("s", 1).unwrap();
    one.set_permits(1).await.unwrap();
    held.pop().unwrap().release().await.unwrap();
    // Two leases of one permit each are held under a count of one.
    assert_eq!(one.available().await.unwrap(), 0);
    assert!(one.try_acquire().await.unwrap().is_none());
    let late = client(&server).semaphore("s", 3).unwrap();
    assert!(late.try_acquire().await.unwrap_err().is_conflict());
    held.pop().unwrap().release().await.unwrap();
    assert!(one.try_acquire().await.unwrap().is_none());
    held.pop().unwrap().release().await.unwrap();
    let got = waiting
        .await
        .unwrap()
        .expect("the queued waiter took the freed permit");
    assert!(one.try_acquire().await.unwrap().is_none());
    got.release().await.unwrap();
    let got = one
        .try_acquire()
        .await
        .unwrap()
        .expect("the permit was free");
    got.release().await.unwrap();
}

/// Raising the count lets a new handle with it in at once; a handle with
/// the old count is refused.
#[tokio::test]
async fn raised_permits_let_a_new_handle_in_at_once() {
    let server = RedisServer::start();
    let one = client(&server).semaphore("s", 1).unwrap();
    let held = one.acquire().await.unwrap();
    let two = client(&server).semaphore("s", 2).unwrap();
    assert!(two.try_acquire().await.unwrap_err().is_conflict());
    two.set_permits(2).await.unwrap();
    let second = two.try_acquire().await.unwrap().expect("a second permit");
    assert!(one.try_acquire().await.unwrap_err().is_conflict());
    assert!(held.release().await.is_ok());
    second.release().await.unwrap();
}

/// Raising the count under load admits the waiters queued with the old
/// count as soon as their permits fit, in their turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raised_permits_admit_the_queued_waiters() {
    let server = RedisServer::start();
    let held = client(&server)
        .semaphore("s", 2)
        .unwrap()
        .acquire_many(2)
        .await
        .unwrap();
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let sem = client(&server).semaphore("s", 2).unwrap();
        waiting.push(tokio::spawn(async move { sem.acquire_timeout(LONG).await }));
    }
    eventually("both waiters to queue", || async {
        cmd::<u64>(&server, &["ZCARD", "leasehold:{s}:q"]).await == 2
    })
    .await;
    let four = client(&server).semaphore("s", 4).unwrap();
    four.set_permits(4).await.unwrap();
    let mut guards = Vec::new();
    for waiter in waiting {
        guards.push(
            waiter
                .await
                .unwrap()
                .expect("a queued waiter was refused after the raise"),
        );
    }
    assert_eq!(four.available().await.unwrap(), 0);
    for guard in guards {
        guard.release().await.unwrap();
    }
    held.release().await.unwrap();
    assert_eq!(four.available().await.unwrap(), 4);
}

/// Hashes written by hand: an unreadable lease is pruned, a hash without a
/// kind is another kind of lock, and a count that is not a number is a
/// clear error.
#[tokio::test]
async fn hand_written_hashes_get_clear_answers() {
    let server = RedisServer::start();
    let client = client(&server);
    let _: i64 = cmd(
        &server,
        &[
            "HSET",
            "leasehold:{a}",
            "kind",
            "rwlock",
            "h:x",
            "not a lease",
        ],
    )
    .await;
    let w = client
        .rw_lock("a")
        .unwrap()
        .write()
        .try_acquire()
        .await
        .unwrap()
        .expect("an unreadable lease holds nothing");
    w.release().await.unwrap();

    let _: i64 = cmd(&server, &["HSET", "leasehold:{b}", "foo", "bar"]).await;
    let err = client
        .reentrant_mutex("b")
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let err = client
        .mutex("b")
        .unwrap()
        .release_token("x")
        .await
        .unwrap_err();
    assert!(err.is_server(), "{err}");

    let _: i64 = cmd(
        &server,
        &[
            "HSET",
            "leasehold:{c}",
            "kind",
            "semaphore",
            "permits",
            "many",
        ],
    )
    .await;
    let err = client
        .semaphore("c", 2)
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert!(!err.to_string().contains("unexpected reply"), "{err}");
}

/// Permit counts written by hand that add up past `u32::MAX` are read
/// without a panic: the semaphore counts as full.
#[tokio::test]
async fn hand_written_permit_counts_do_not_overflow() {
    let server = RedisServer::start();
    let time: Vec<String> = cmd(&server, &["TIME"]).await;
    let secs: u64 = time[0].parse().unwrap();
    let expiry = ((secs + 60) * 1000).to_string();
    let lease = format!("{expiry} s - 4294967295 1 1700000000000000 1 host by-hand");
    let _: i64 = cmd(
        &server,
        &[
            "HSET",
            "leasehold:{s}",
            "kind",
            "semaphore",
            "permits",
            "2",
            "h:a",
            &lease,
            "h:b",
            &lease,
        ],
    )
    .await;
    let sem = client(&server).semaphore("s", 2).unwrap();
    assert_eq!(sem.available().await.unwrap(), 0);
    let info = sem.inspect().await.unwrap();
    assert_eq!(info.holders.len(), 2);
    assert!(sem.try_acquire().await.unwrap().is_none());
}

/// Levels of a reentrant mutex are released in any order: the lock stays
/// the owner's until the last one goes, and a late release of a level
/// already released says so.
#[tokio::test]
async fn reentrant_levels_released_out_of_order() {
    let server = RedisServer::start();
    let c = client(&server);
    let lock = c.reentrant_mutex("r").unwrap();
    let other = c.reentrant_mutex("r").unwrap();
    let outer = lock.acquire().await.unwrap();
    let middle = lock.acquire().await.unwrap();
    let inner = lock.acquire().await.unwrap();
    let token = outer.token().to_owned();
    outer.release().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    assert!(other.try_acquire().await.unwrap().is_none());
    assert!(lock.release_token(&token).await.unwrap_err().is_not_held());
    let again = lock.acquire().await.unwrap();
    assert_eq!(again.fence(), middle.fence());
    middle.release().await.unwrap();
    again.release().await.unwrap();
    assert!(other.try_acquire().await.unwrap().is_none());
    let fence = inner.fence();
    inner.release().await.unwrap();
    let theirs = other.try_acquire().await.unwrap().expect("free at zero");
    assert!(theirs.fence() > fence);
    theirs.release().await.unwrap();
}

/// A hold-at-least keeps a released read, write or permit lease; the
/// watchdog is gone, and it runs out by itself.
async fn hold_at_least_keeps_hash_leases_after_release(servers: Servers) {
    let c = servers.client();
    let hold = Duration::from_secs(60);
    let rw = c.rw_lock("rw").unwrap().with_hold_at_least(hold).unwrap();
    rw.read().acquire().await.unwrap().release().await.unwrap();
    let info = rw.inspect().await.unwrap();
    assert_eq!(info.holders.len(), 1);
    assert!(info.holders[0].remaining.unwrap() > Duration::from_secs(50));
    assert!(c
        .rw_lock("rw")
        .unwrap()
        .write()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    // Another reader still joins.
    let r = c.rw_lock("rw").unwrap().read().try_acquire().await.unwrap();
    r.expect("a reader joins a held read lock")
        .release()
        .await
        .unwrap();

    let sem = c
        .semaphore("s", 1)
        .unwrap()
        .with_hold_at_least(hold)
        .unwrap();
    sem.acquire().await.unwrap().release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 0);

    let short = servers
        .client_with(Duration::from_secs(5), true)
        .reentrant_mutex("x")
        .unwrap()
        .with_hold_at_least(Duration::from_millis(300))
        .unwrap();
    short.acquire().await.unwrap().release().await.unwrap();
    // No level is held, but the hold is kept until its hold-at-least ends.
    assert_eq!(short.hold_count().await.unwrap(), 0);
    let kept = short.inspect().await.unwrap();
    assert!(kept.held, "{kept:?}");
    assert_eq!(kept.holders[0].levels, 0, "{kept:?}");
    let other = c.reentrant_mutex("x").unwrap();
    let got = other.acquire_timeout(LONG).await.unwrap();
    got.release().await.unwrap();
}

/// The max hold stops renewal of a hash lease too: the lease is lost, and
/// another user gets in.
async fn max_hold_caps_every_hash_kind(servers: Servers) {
    let c = servers.client_with(Duration::from_millis(300), true);
    let cap = Duration::from_millis(900);
    let sem = c.semaphore("s", 1).unwrap().with_max_hold(cap).unwrap();
    let rw = c.rw_lock("rw").unwrap().with_max_hold(cap).unwrap();
    let re = c.reentrant_mutex("re").unwrap().with_max_hold(cap).unwrap();
    let guards = [
        sem.acquire().await.unwrap(),
        rw.write().acquire().await.unwrap(),
        re.acquire().await.unwrap(),
    ];
    for g in &guards {
        tokio::time::timeout(LONG, g.lost())
            .await
            .expect("lost at the cap");
    }
    let other = servers.client();
    let theirs = [
        other.semaphore("s", 1).unwrap().acquire_timeout(LONG).await,
        other
            .rw_lock("rw")
            .unwrap()
            .read()
            .acquire_timeout(LONG)
            .await,
        other
            .reentrant_mutex("re")
            .unwrap()
            .acquire_timeout(LONG)
            .await,
    ];
    for got in theirs {
        got.unwrap().release().await.unwrap();
    }
    for g in guards {
        assert!(g.release().await.unwrap_err().is_not_held());
    }
}

/// A forced release takes every lease of a hash kind, wakes the waiters,
/// and leaves the semaphore's count.
async fn force_release_frees_and_wakes_every_hash_kind(servers: Servers) {
    let c = servers.client();
    let sem = c.semaphore("s", 2).unwrap();
    let held = sem.acquire_many(2).await.unwrap();
    let waiter = servers.client().semaphore("s", 2).unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire_many_timeout(2, LONG).await });
    eventually("the waiter to queue", || async {
        servers.cmd::<u64>(&["ZCARD", "leasehold:{s}:q"]).await == 1
    })
    .await;
    assert!(sem.force_release().await.unwrap());
    let got = waiting.await.unwrap().unwrap();
    assert!(got.fence() > held.fence());
    assert!(held.release().await.unwrap_err().is_not_held());
    assert_eq!(sem.inspect().await.unwrap().permits, Some(2));
    got.release().await.unwrap();
    assert!(!sem.force_release().await.unwrap());

    let rw = c.rw_lock("rw").unwrap();
    let readers = [
        rw.read().acquire().await.unwrap(),
        c.rw_lock("rw").unwrap().read().acquire().await.unwrap(),
    ];
    assert!(rw.force_release().await.unwrap());
    assert!(!servers.cmd::<bool>(&["EXISTS", "leasehold:{rw}"]).await);
    for r in readers {
        assert!(r.release().await.unwrap_err().is_not_held());
    }
}

/// Dropping an acquisition of any hash kind at any point leaves nothing
/// held and nobody queued: another owner gets the lock, and the queue
/// empties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_waiting_hash_acquire_at_any_point_leaves_nothing_behind() {
    let server = RedisServer::start();
    let holder = client_with(&server, LONG, true);
    let waiter = client_with(&server, LONG, true);
    let probe = client(&server);
    for kind in ["reentrant", "read", "write", "semaphore"] {
        for polls in 0..16 {
            let held = match kind {
                "reentrant" => holder.reentrant_mutex("k").unwrap().acquire().await,
                "read" | "write" => holder.rw_lock("k").unwrap().write().acquire().await,
                _ => holder.semaphore("k", 1).unwrap().acquire().await,
            }
            .unwrap();
            let release = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(300)).await;
                held.release().await.unwrap();
            });
            let result = match kind {
                "reentrant" => {
                    let lock = waiter.reentrant_mutex("k").unwrap();
                    poll_then_drop(lock.acquire(), polls).await
                }
                "read" => {
                    let lock = waiter.rw_lock("k").unwrap();
                    poll_then_drop(lock.read().acquire(), polls).await
                }
                "write" => {
                    let lock = waiter.rw_lock("k").unwrap();
                    poll_then_drop(lock.write().acquire(), polls).await
                }
                _ => {
                    let sem = waiter.semaphore("k", 1).unwrap();
                    poll_then_drop(sem.acquire(), polls).await
                }
            };
            if let Some(result) = result {
                drop(result.unwrap());
            }
            release.await.unwrap();
            waiter.flush().await;
            let got = match kind {
                "reentrant" => {
                    probe
                        .reentrant_mutex("k")
                        .unwrap()
                        .acquire_timeout(LONG)
                        .await
                }
                "read" | "write" => {
                    probe
                        .rw_lock("k")
                        .unwrap()
                        .write()
                        .acquire_timeout(LONG)
                        .await
                }
                _ => probe.semaphore("k", 1).unwrap().acquire_timeout(LONG).await,
            }
            .unwrap_or_else(|e| panic!("{kind} after {polls} polls: {e}"));
            got.release().await.unwrap();
            eventually("the queue to empty", || async {
                cmd::<u64>(&server, &["ZCARD", "leasehold:{k}:q"]).await == 0
            })
            .await;
        }
        let _: i64 = cmd(&server, &["DEL", "leasehold:{k}"]).await;
    }
}

/// What `inspect` says is left is the longest lease's time, for every hash
/// kind: not the semaphore count's retention, nor a lease already over.
async fn inspect_reports_the_time_left_on_the_leases(servers: Servers) {
    let c = servers.client_with(LONG, true);
    let sem = c.semaphore("s", 2).unwrap();
    let permit = sem.acquire().await.unwrap();
    let info = sem.inspect().await.unwrap();
    let left = info.remaining.expect("held");
    assert!(left <= LONG && left > Duration::ZERO, "{left:?}");
    permit.release().await.unwrap();
    let info = sem.inspect().await.unwrap();
    assert!(!info.held);
    assert_eq!(info.remaining, None);
    assert_eq!(info.permits, Some(2));

    let rw = c.rw_lock("rw").unwrap();
    let r = rw.read().acquire().await.unwrap();
    let left = rw.inspect().await.unwrap().remaining.expect("held");
    assert!(left <= LONG && left > Duration::ZERO, "{left:?}");
    r.release().await.unwrap();
}

/// Many clients at once: readers never overlap a writer, writers never
/// overlap each other, and a semaphore never has more permits out than it
/// has, whatever order wakes and attempts come in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_holders_keep_the_rules() {
    use std::sync::atomic::{AtomicI64, Ordering::SeqCst};
    use std::sync::Arc;

    let server = RedisServer::start();
    let readers = Arc::new(AtomicI64::new(0));
    let writers = Arc::new(AtomicI64::new(0));
    let out = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for worker in 0..8usize {
        let c = client(&server);
        let (readers, writers, out) = (readers.clone(), writers.clone(), out.clone());
        tasks.push(tokio::spawn(async move {
            let lock = c.rw_lock("rw").unwrap();
            let sem = c.semaphore("s", 3).unwrap();
            for round in 0..15usize {
                if worker < 2 {
                    let w = lock.write().acquire_timeout(LONG).await.unwrap();
                    assert_eq!(writers.fetch_add(1, SeqCst), 0, "two writers");
                    assert_eq!(readers.load(SeqCst), 0, "a writer among readers");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    writers.fetch_sub(1, SeqCst);
                    w.release().await.unwrap();
                } else {
                    let r = lock.read().acquire_timeout(LONG).await.unwrap();
                    readers.fetch_add(1, SeqCst);
                    assert_eq!(writers.load(SeqCst), 0, "a reader beside a writer");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    readers.fetch_sub(1, SeqCst);
                    r.release().await.unwrap();
                }
                let n = 1 + u32::try_from((worker + round) % 3).unwrap();
                let p = sem.acquire_many_timeout(n, LONG).await.unwrap();
                let now = out.fetch_add(i64::from(n), SeqCst) + i64::from(n);
                assert!(now <= 3, "{now} permits out of 3");
                tokio::time::sleep(Duration::from_millis(1)).await;
                out.fetch_sub(i64::from(n), SeqCst);
                p.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(cmd::<u64>(&server, &["ZCARD", "leasehold:{rw}:q"]).await, 0);
    assert_eq!(cmd::<u64>(&server, &["ZCARD", "leasehold:{s}:q"]).await, 0);
}

/// Dropping an acquisition of a free lock of any hash kind at any point,
/// or a try cut off by a timeout, leaves nothing held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_hash_acquire_of_a_free_lock_at_any_point_leaves_nothing_held() {
    let server = RedisServer::start();
    let c = client_with(&server, LONG, true);
    let probe = client(&server);
    for kind in ["reentrant", "read", "write", "semaphore"] {
        let take = |polls: Option<usize>, micros: u64| {
            let c = c.clone();
            async move {
                let fut = async {
                    match (kind, polls.is_some()) {
                        ("reentrant", true) => c.reentrant_mutex("k")?.acquire().await.map(Some),
                        ("reentrant", false) => c.reentrant_mutex("k")?.try_acquire().await,
                        ("read", true) => c.rw_lock("k")?.read().acquire().await.map(Some),
                        ("read", false) => c.rw_lock("k")?.read().try_acquire().await,
                        ("write", true) => c.rw_lock("k")?.write().acquire().await.map(Some),
                        ("write", false) => c.rw_lock("k")?.write().try_acquire().await,
                        (_, true) => c.semaphore("k", 1)?.acquire().await.map(Some),
                        (_, false) => c.semaphore("k", 1)?.try_acquire().await,
                    }
                };
                match polls {
                    Some(polls) => poll_then_drop(fut, polls).await,
                    None => tokio::time::timeout(Duration::from_micros(micros), fut)
                        .await
                        .ok(),
                }
            }
        };
        let attempts = (0..24)
            .map(|p| (Some(p), 0))
            .chain([0u64, 50, 100, 200, 400, 800, 1600, 3200].map(|m| (None, m)));
        for (polls, micros) in attempts {
            if let Some(result) = take(polls, micros).await {
                drop(result.unwrap());
            }
            c.flush().await;
            let got = match kind {
                "reentrant" => {
                    probe
                        .reentrant_mutex("k")
                        .unwrap()
                        .acquire_timeout(LONG / 3)
                        .await
                }
                "read" | "write" => {
                    probe
                        .rw_lock("k")
                        .unwrap()
                        .write()
                        .acquire_timeout(LONG / 3)
                        .await
                }
                _ => {
                    probe
                        .semaphore("k", 1)
                        .unwrap()
                        .acquire_timeout(LONG / 3)
                        .await
                }
            }
            .unwrap_or_else(|e| panic!("{kind} after {polls:?} polls / {micros} µs: {e}"));
            got.release().await.unwrap();
        }
        let _: i64 = cmd(&server, &["DEL", "leasehold:{k}"]).await;
    }
}

/// A reader that joins other readers reports their fence. When the fence
/// counter is gone while they hold (a restart without persistence, its
/// retention run out) that is unknown: the reader takes a new fence, past
/// every earlier one, instead of 0, which every fenced resource that saw a
/// write would refuse.
#[tokio::test]
async fn a_reader_after_a_lost_fence_counter_gets_a_fence_past_every_write() {
    let server = RedisServer::start();
    let client = client(&server);
    let rw = client.rw_lock("catalog").unwrap();
    let write = rw.write().acquire().await.unwrap();
    let written = write.fence();
    write.release().await.unwrap();
    let read = rw.read().acquire().await.unwrap();
    let phase = read.fence();
    assert!(phase > written, "the first reader takes a new fence");
    assert_eq!(
        server
            .command(&["DEL", "leasehold:{catalog}:fence"])
            .unwrap(),
        "1"
    );
    let joined = rw.read().acquire().await.unwrap();
    let after_loss = joined.fence();
    assert!(
        after_loss > phase,
        "reader fence {after_loss} after the lost counter's {phase}"
    );
    let third = rw.read().acquire().await.unwrap();
    assert_eq!(
        third.fence(),
        after_loss,
        "readers together share one fence"
    );
    third.release().await.unwrap();
    joined.release().await.unwrap();
    read.release().await.unwrap();
    let write = rw.write().acquire().await.unwrap();
    assert!(write.fence() > after_loss);
    write.release().await.unwrap();
}

/// A lease shortened by `extend` takes the key's expiry with it: once the
/// last lease of a rw-lock or reentrant mutex runs out, nothing is left to
/// refuse a lock of another kind.
#[tokio::test]
async fn a_shortened_lease_leaves_no_lock_behind() {
    let server = RedisServer::start();
    let c = client_with(&server, LONG, false);
    let rw = c.rw_lock("rw").unwrap().read().acquire().await.unwrap();
    let re = c.reentrant_mutex("re").unwrap().acquire().await.unwrap();
    for (guard, key) in [(&rw, "leasehold:{rw}"), (&re, "leasehold:{re}")] {
        guard.extend(Duration::from_millis(50)).await.unwrap();
        let pttl: i64 = cmd(&server, &["PTTL", key]).await;
        assert!(pttl <= 50, "{key} outlives its only lease: {pttl} ms");
    }
    for (guard, name) in [(rw, "rw"), (re, "re")] {
        tokio::time::timeout(LONG, guard.lost()).await.unwrap();
        let mutex = c.mutex(name).unwrap();
        eventually("the lease to run out", || async {
            !mutex.inspect().await.unwrap().held
        })
        .await;
        let taken = mutex.try_acquire().await.unwrap();
        taken.expect("a lock nobody holds").release().await.unwrap();
        assert!(guard.release().await.unwrap_err().is_not_held());
    }
}

/// Writes a hash lock of `kind` whose one lease ran out long ago, with a key
/// that lives on: what a lock left behind looks like.
async fn leave_dead_lock(server: &RedisServer, name: &str, kind: &str, mode: &str) {
    let key = format!("leasehold:{{{name}}}");
    let entry = format!("1 {mode} owner-x 1 5 1 1 test-host gone");
    let _: i64 = cmd(server, &["HSET", &key, "kind", kind, "h:dead", &entry]).await;
    let _: bool = cmd(server, &["PEXPIRE", &key, "60000"]).await;
}

/// A rw-lock or reentrant mutex with no live lease is no lock: every kind
/// takes its name. A semaphore's count outlives its leases on purpose, so a
/// semaphore nobody holds is still a semaphore.
#[tokio::test]
async fn a_hash_lock_with_no_live_lease_refuses_no_kind() {
    let server = RedisServer::start();
    let c = client(&server);
    for (kind, mode) in [("rwlock", "r"), ("reentrant", "x")] {
        for taker in ["mutex", "fair", "reentrant", "write", "semaphore"] {
            let name = format!("{kind}-{taker}");
            leave_dead_lock(&server, &name, kind, mode).await;
            let taken = match taker {
                "mutex" => c.mutex(&name).unwrap().try_acquire().await,
                "fair" => c.fair_mutex(&name).unwrap().try_acquire().await,
                "reentrant" => c.reentrant_mutex(&name).unwrap().try_acquire().await,
                "write" => c.rw_lock(&name).unwrap().write().try_acquire().await,
                _ => c.semaphore(&name, 2).unwrap().try_acquire().await,
            };
            let guard = taken
                .unwrap_or_else(|e| panic!("{taker} on a dead {kind}: {e}"))
                .unwrap_or_else(|| panic!("{taker} on a dead {kind}: busy"));
            guard.release().await.unwrap();
        }
    }
    let sem = c.semaphore("sem", 2).unwrap();
    sem.acquire().await.unwrap().release().await.unwrap();
    let err = c.mutex("sem").unwrap().try_acquire().await.unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert_eq!(sem.available().await.unwrap(), 2);
}

/// An attempt that finds only dead leases, and waits behind a queued writer,
/// removes them and the key with them: the lock does not outlive its leases.
#[tokio::test]
async fn a_busy_attempt_that_prunes_the_last_lease_removes_the_lock() {
    let server = RedisServer::start();
    leave_dead_lock(&server, "t", "rwlock", "r").await;
    let now_us = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros())
    .to_string();
    let _: i64 = cmd(&server, &["ZADD", "leasehold:{t}:q", &now_us, "w"]).await;
    let _: () = cmd(
        &server,
        &[
            "SET",
            "leasehold:{t}:w:w",
            "0 w 1 cw 1 test-host fake",
            "PX",
            "60000",
        ],
    )
    .await;
    let reader = client(&server).rw_lock("t").unwrap();
    assert!(reader.read().try_acquire().await.unwrap().is_none());
    assert!(!cmd::<bool>(&server, &["EXISTS", "leasehold:{t}"]).await);
    assert_eq!(reader.inspect().await.unwrap().kind, None);
}

/// Force-release removes locks only: a key leasehold did not write (a list,
/// a hash without a kind) is refused, and left as it was.
#[tokio::test]
async fn force_release_refuses_a_key_that_is_no_lock() {
    let server = RedisServer::start();
    let c = client(&server);
    let _: i64 = cmd(&server, &["RPUSH", "leasehold:{list}", "a", "b"]).await;
    let _: i64 = cmd(&server, &["HSET", "leasehold:{hash}", "foo", "bar"]).await;
    for (name, found) in [("list", "list"), ("hash", "hash")] {
        for err in [
            c.mutex(name).unwrap().force_release().await.unwrap_err(),
            c.reentrant_mutex(name)
                .unwrap()
                .force_release()
                .await
                .unwrap_err(),
        ] {
            assert!(err.is_conflict(), "{err}");
            assert!(err.to_string().contains(found), "{err}");
            assert!(!err.to_string().contains("  "), "{err}");
        }
        let key = format!("leasehold:{{{name}}}");
        assert!(cmd::<bool>(&server, &["EXISTS", &key]).await, "{name}");
    }
    let _: () = cmd(&server, &["SET", "leasehold:{plain}", "by-hand"]).await;
    assert!(c.mutex("plain").unwrap().force_release().await.unwrap());
}

/// A release by a token that neither holds the lock nor waits for it
/// changes nothing, and wakes nobody.
#[tokio::test]
async fn a_strangers_release_wakes_nobody() {
    let server = RedisServer::start();
    let sem = client(&server).semaphore("s", 1).unwrap();
    let held = sem.acquire().await.unwrap();
    let mut conn = raw(&server).await;
    let waiter = Fake {
        name: "s",
        token: "w",
        client: "cw",
        kind: "semaphore",
        mode: "s",
        want: 1,
        total: 1,
    };
    assert_eq!(waiter.attempt(&mut conn, false).await, 0);
    // Woken, and not back yet.
    held.release().await.unwrap();
    let _: () = cmd(&server, &["CONFIG", "RESETSTAT"]).await;
    let pttl: i64 = cmd(&server, &["PTTL", "leasehold:{s}"]).await;
    let err = sem.release_token("stranger").await.unwrap_err();
    assert!(err.is_not_held(), "{err}");
    let stats: String = cmd(&server, &["INFO", "commandstats"]).await;
    assert!(!stats.contains("cmdstat_publish"), "{stats}");
    let after: i64 = cmd(&server, &["PTTL", "leasehold:{s}"]).await;
    assert!(after <= pttl, "{after} > {pttl}");
    assert_eq!(waiter.attempt(&mut conn, true).await, 1);
}

/// Sets a semaphore key's expiry to `ms` from now, and its record of it
/// (`x`, on the server's clock) to match, as if that much were left.
async fn semaphore_expiry_left(server: &RedisServer, key: &str, ms: u64) {
    let (secs, micros): (u64, u64) = cmd(server, &["TIME"]).await;
    let now_ms = secs * 1000 + micros / 1000;
    let _: i64 = cmd(server, &["PEXPIRE", key, &ms.to_string()]).await;
    let _: i64 = cmd(server, &["HSET", key, "x", &(now_ms + ms).to_string()]).await;
}

/// A semaphore's count outlives its leases by the fence retention. Its
/// key's expiry is set again only once it covers less than 63/64 of that
/// from now, or less than a lease (the hash records when it runs out):
/// not on every acquisition and release, and never left short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_s_expiry_is_set_again_only_when_it_runs_short() {
    const WEEK_MS: i64 = 7 * 24 * 3600 * 1000;
    const MINUTE_MS: i64 = 60_000;
    let server = RedisServer::start();
    let key = "leasehold:{s}";
    let sem = client(&server).semaphore("s", 2).unwrap();
    let cycle = || async {
        sem.acquire().await.unwrap().release().await.unwrap();
        cmd::<i64>(&server, &["PTTL", key]).await
    };
    let first = cycle().await;
    assert!(first > WEEK_MS - MINUTE_MS, "{first} ms");
    let x: Option<String> = cmd(&server, &["HGET", key, "x"]).await;
    assert!(x.is_some(), "the hash does not record its expiry");

    // Less than 63/64 of the retention left: set again.
    semaphore_expiry_left(&server, key, 500_000_000).await;
    let after = cycle().await;
    assert!(after > WEEK_MS - MINUTE_MS, "left short: {after} ms");
    // More than that left: left as it is.
    semaphore_expiry_left(&server, key, 600_000_000).await;
    let after = cycle().await;
    assert!(after <= 600_000_000, "set again: {after} ms");
    assert!(after > 600_000_000 - MINUTE_MS, "{after} ms");
    // No record: set again, and recorded.
    let _: i64 = cmd(&server, &["HDEL", key, "x"]).await;
    let after = cycle().await;
    assert!(after > WEEK_MS - MINUTE_MS, "{after} ms");
    let x: Option<String> = cmd(&server, &["HGET", key, "x"]).await;
    assert!(x.is_some(), "the hash does not record its expiry");

    // A lease past the key's expiry sets it again, however much of the
    // retention is left: the key never runs out before a lease.
    let day = Duration::from_secs(24 * 3600);
    let long = leasehold::Client::builder(server.url())
        .lease(day)
        .fence_retention(day)
        .watchdog(false)
        .build()
        .unwrap()
        .semaphore("s", 2)
        .unwrap();
    let day_ms = i64::try_from(day.as_millis()).unwrap();
    semaphore_expiry_left(&server, key, u64::try_from(day_ms - MINUTE_MS).unwrap()).await;
    let permit = long.acquire().await.unwrap();
    let pttl: i64 = cmd(&server, &["PTTL", key]).await;
    assert!(
        pttl > day_ms - MINUTE_MS / 2,
        "the key runs out before the lease: {pttl} ms"
    );
    permit.release().await.unwrap();
}

/// A semaphore waiter far back in a long queue counts every waiter ahead
/// of it: it goes first when they all still fit after it, and waits when
/// they would not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_far_back_in_a_long_queue_counts_every_waiter_ahead() {
    let server = RedisServer::start();
    let sem = client(&server).semaphore("long", 100).unwrap();
    let held = sem.acquire_many(100).await.unwrap();
    let mut conn = raw(&server).await;
    let tokens: Vec<String> = (0..70).map(|i| format!("w{i:02}")).collect();
    let clients: Vec<String> = (0..70).map(|i| format!("c{i:02}")).collect();
    // Each wants one permit, but the last 33.
    let fake = |i: usize| Fake {
        name: "long",
        token: &tokens[i],
        client: &clients[i],
        kind: "semaphore",
        mode: "s",
        want: if i == 69 { 33 } else { 1 },
        total: 100,
    };
    for i in 0..70 {
        assert_eq!(fake(i).attempt(&mut conn, false).await, 0, "waiter {i}");
    }
    held.release().await.unwrap();
    // The 66 ahead of it and it fit in the 100 free permits.
    assert_eq!(fake(66).attempt(&mut conn, true).await, 1, "waiter 66");
    // 99 free, 68 of them for the waiters ahead: 31 left, not 33.
    assert_eq!(fake(69).attempt(&mut conn, true).await, 0, "waiter 69");
    assert_eq!(fake(0).attempt(&mut conn, true).await, 1, "waiter 0");
}
