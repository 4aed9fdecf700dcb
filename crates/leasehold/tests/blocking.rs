//! The blocking faces against real servers, from plain threads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use leasehold::blocking::Client;
use leasehold::{ErrorKind, LossReason, Owner};
use leasehold_testkit::{unreachable_url, RedisServer};

/// Long enough for any step that should succeed; a hang fails the test.
const LONG: Duration = Duration::from_secs(30);

fn client(server: &RedisServer) -> Client {
    Client::open(&server.url()).unwrap()
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&["EXISTS", key]).unwrap() == "1"
}

/// A counter whose increment is a read, a pause and a write: two holders
/// at once lose updates.
#[derive(Default)]
struct Unprotected(AtomicU64);

impl Unprotected {
    fn increment(&self) {
        let seen = self.0.load(Ordering::SeqCst);
        thread::yield_now();
        self.0.store(seen + 1, Ordering::SeqCst);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[test]
fn acquire_release_and_inspect() {
    let server = RedisServer::start();
    let client = client(&server);
    let mutex = client.mutex("job").unwrap();
    let guard = mutex.acquire().unwrap();
    assert_eq!(guard.name(), "job");
    assert!(guard.fence() > 0);
    assert_eq!(guard.token().len(), 32);
    assert!(!guard.is_lost());
    assert!(guard.valid_for() > Duration::ZERO);
    assert!(exists(&server, "leasehold:{job}"));
    let info = mutex.inspect().unwrap();
    assert!(info.held);
    // The holder's own second attempt is refused, not a wait for itself.
    assert!(mutex.try_acquire().unwrap_err().is_conflict());
    assert!(client
        .mutex("job")
        .unwrap()
        .try_acquire()
        .unwrap()
        .is_none());
    guard.extend(Duration::from_secs(60)).unwrap();
    guard.release().unwrap();
    assert!(!exists(&server, "leasehold:{job}"));

    let again = mutex.try_acquire().unwrap().expect("the lock is free");
    let detached = again.detach();
    assert!(exists(&server, "leasehold:{job}"));
    mutex.release_token(&detached.token).unwrap();
    assert!(!mutex.force_release().unwrap());
}

#[test]
fn threads_sharing_a_mutex_take_turns() {
    let server = RedisServer::start();
    let client = client(&server);
    let mutex = client.mutex("counter").unwrap();
    let counter = Unprotected::default();
    let fences = std::sync::Mutex::new(Vec::new());
    let (threads, rounds) = (4, 20);
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..rounds {
                    let guard = mutex.acquire_timeout(LONG).unwrap();
                    counter.increment();
                    fences.lock().unwrap().push(guard.fence());
                    guard.release().unwrap();
                }
            });
        }
    });
    assert_eq!(counter.get(), threads * rounds);
    let mut fences = fences.into_inner().unwrap();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(
        fences.len() as u64,
        threads * rounds,
        "every grant has a fence of its own"
    );
}

#[test]
fn every_primitive_blocks_the_same_way() {
    let server = RedisServer::start();
    let client = client(&server);

    let fair = client.fair_mutex("fair").unwrap();
    let turn = fair.acquire().unwrap();
    assert!(fair.try_acquire().unwrap_err().is_conflict());
    assert!(client
        .fair_mutex("fair")
        .unwrap()
        .try_acquire()
        .unwrap()
        .is_none());
    turn.release().unwrap();

    let rw = client.rw_lock("catalog").unwrap();
    let view = rw.read().acquire().unwrap();
    let other = rw.clone();
    thread::scope(|s| {
        s.spawn(|| {
            // Another thread reads alongside, and cannot write.
            let also = other.read().try_acquire().unwrap().expect("readers share");
            also.release().unwrap();
            assert!(other.write().try_acquire().unwrap().is_none());
        });
    });
    view.release().unwrap();
    let edit = rw.write().acquire().unwrap();
    // A read under this thread's write is a downgrade; a write under a
    // read is refused.
    let read = rw.read().try_acquire().unwrap().expect("a downgrade");
    edit.release().unwrap();
    let err = rw.write().try_acquire().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    read.release().unwrap();
    assert!(!rw.inspect().unwrap().held);

    let slots = client.semaphore("slots", 3).unwrap();
    let two = slots.acquire_many(2).unwrap();
    assert_eq!(two.permits(), 2);
    assert_eq!(slots.available().unwrap(), 1);
    let one = slots.acquire().unwrap();
    assert!(slots.try_acquire().unwrap().is_none());
    assert!(slots.try_acquire_many(3).unwrap().is_none());
    two.release().unwrap();
    one.release().unwrap();
    assert_eq!(slots.available().unwrap(), 3);
    let err = client.semaphore("slots", 4).unwrap().acquire().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");

    // Settings pass through, and bad ones are refused before anything is sent.
    let mutex = client
        .mutex("settings")
        .unwrap()
        .with_lease(Duration::from_secs(5))
        .unwrap()
        .with_watchdog(false);
    let guard = mutex.acquire().unwrap();
    assert!(guard.valid_for() <= Duration::from_secs(5));
    guard.release().unwrap();
    let err = mutex.with_lease(Duration::ZERO).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

#[test]
fn a_wait_that_runs_out_is_a_timeout() {
    let server = RedisServer::start();
    let holder = client(&server).mutex("job").unwrap().acquire().unwrap();
    let waiter = client(&server).mutex("job").unwrap();
    let err = waiter
        .acquire_timeout(Duration::from_millis(200))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.is_timeout());
    holder.release().unwrap();
    waiter.acquire_timeout(LONG).unwrap().release().unwrap();
}

#[test]
fn a_lost_lease_wakes_the_thread_that_waits_for_it() {
    let server = RedisServer::start();
    let client = Client::from_builder(
        leasehold::Client::builder(server.url()).lease(Duration::from_millis(600)),
    )
    .unwrap();
    let mutex = client.mutex("job").unwrap();
    let guard = mutex.acquire().unwrap();
    assert!(!guard.lost_timeout(Duration::from_millis(50)).unwrap());
    thread::scope(|s| {
        let watcher = s.spawn(|| {
            guard.wait_lost().unwrap();
            guard.loss_reason()
        });
        // An admin takes the lock away; the next renewal finds it gone.
        assert!(mutex.force_release().unwrap());
        assert_eq!(watcher.join().unwrap(), Some(LossReason::TokenGone));
    });
    assert!(guard.is_lost());
    assert!(guard.lost_timeout(Duration::ZERO).unwrap());
    assert_eq!(guard.valid_for(), Duration::ZERO);
    let err = guard.release().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotHeld, "{err}");
}

#[test]
fn a_dropped_guard_is_released_in_the_background() {
    let server = RedisServer::start();
    let client = client(&server);
    let mutex = client.mutex("job").unwrap();
    drop(mutex.acquire().unwrap());
    // Another client's wait ends when the background release lands.
    let other = Client::open(&server.url()).unwrap();
    other
        .mutex("job")
        .unwrap()
        .acquire_timeout(LONG)
        .unwrap()
        .release()
        .unwrap();
    client.flush().unwrap();
}

#[test]
fn threads_sharing_a_reentrant_handle_exclude_each_other() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.reentrant_mutex("config").unwrap();

    let outer = lock.acquire().unwrap();
    let inner = lock.acquire().unwrap();
    assert_eq!(inner.fence(), outer.fence(), "a reentry");
    assert_eq!(lock.hold_count().unwrap(), 2);
    let main_owner = lock.owner();
    let shared = lock.clone();
    thread::scope(|s| {
        s.spawn(|| {
            assert_ne!(shared.owner(), main_owner, "each thread is an owner");
            assert!(shared.try_acquire().unwrap().is_none());
            assert_eq!(shared.hold_count().unwrap(), 0);
            // Another owner may not release this thread's levels.
            let err = shared.release_token(inner.token()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::NotHeld, "{err}");
        });
    });
    inner.release().unwrap();
    outer.release().unwrap();

    // Nested holds on many threads through one handle: never two owners.
    let counter = Unprotected::default();
    let (threads, rounds) = (3, 10);
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..rounds {
                    let outer = lock.acquire_timeout(LONG).unwrap();
                    let inner = lock.try_acquire().unwrap().expect("a reentry");
                    counter.increment();
                    inner.release().unwrap();
                    outer.release().unwrap();
                }
            });
        }
    });
    assert_eq!(counter.get(), threads * rounds);
    assert!(!lock.inspect().unwrap().held);
}

#[test]
fn a_named_owner_is_shared_by_threads() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client
        .reentrant_mutex("job")
        .unwrap()
        .with_owner(Owner::from_id("job-7").unwrap());
    let first = lock.acquire().unwrap();
    let shared = lock.clone();
    let second = thread::spawn(move || shared.try_acquire().unwrap())
        .join()
        .unwrap()
        .expect("the same owner nests");
    assert_eq!(lock.hold_count().unwrap(), 2);
    second.release().unwrap();
    first.release().unwrap();

    // Read-write holds follow the thread too.
    let rw = client.rw_lock("table").unwrap();
    let writing = rw.write().acquire().unwrap();
    let other = rw.clone();
    let refused = thread::spawn(move || other.read().try_acquire().unwrap().is_none())
        .join()
        .unwrap();
    assert!(
        refused,
        "another thread may not read under this thread's write"
    );
    writing.release().unwrap();
}

#[tokio::test]
async fn blocking_calls_inside_an_async_runtime_are_refused() {
    // Nothing listens here: a call that reached the network would fail otherwise.
    let client = Client::open(&unreachable_url()).unwrap();
    let mutex = client.mutex("job").unwrap();
    for err in [
        mutex.acquire().map(drop).unwrap_err(),
        mutex.try_acquire().map(drop).unwrap_err(),
        mutex.inspect().map(drop).unwrap_err(),
        client.flush().unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains("async runtime"), "{err}");
    }
    // spawn_blocking is inside the runtime's context too.
    let refused = tokio::task::spawn_blocking(move || mutex.try_acquire().map(drop))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::InvalidInput);
    // Dropping the last client here neither blocks nor panics.
    drop(client);
}

#[tokio::test]
async fn guards_dropped_inside_an_async_runtime_are_released() {
    let server = RedisServer::start();
    let url = server.url();
    let (client, guard) = thread::spawn(move || {
        let client = Client::open(&url).unwrap();
        let guard = client.mutex("job").unwrap().acquire().unwrap();
        (client, guard)
    })
    .join()
    .unwrap();
    assert!(!guard.is_lost());
    let err = guard.extend(Duration::from_secs(5)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    drop(guard);
    drop(client);
    let other = leasehold::Client::open(&server.url()).unwrap();
    let taken = other.mutex("job").unwrap().acquire_timeout(LONG).await;
    taken.unwrap().release().await.unwrap();
}

#[test]
fn with_lock_returns_the_output_only_when_the_lease_held() {
    let server = RedisServer::start();
    let client = Client::from_builder(
        leasehold::Client::builder(server.url()).lease(Duration::from_millis(600)),
    )
    .unwrap();
    let mutex = client.mutex("job").unwrap();
    let fence = mutex.with_lock(|guard| guard.fence()).unwrap();
    assert!(fence > 0);
    assert!(
        !exists(&server, "leasehold:{job}"),
        "released after the work"
    );
    let fenced = mutex
        .with_lock_timeout(LONG, |guard| guard.fence())
        .unwrap();
    assert!(fenced > fence);

    // The lease is taken away while the work runs: the work ends, but its
    // output is not returned.
    let err = mutex
        .with_lock(|guard| {
            assert!(mutex.force_release().unwrap());
            guard.wait_lost().unwrap();
            "written without the lock"
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotHeld, "{err}");

    // A wait that runs out never runs the work.
    let held = mutex.acquire().unwrap();
    let other = Client::open(&server.url()).unwrap().mutex("job").unwrap();
    let err = other
        .with_lock_timeout(Duration::from_millis(100), |_| {
            panic!("the work ran without the lock")
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    held.release().unwrap();
}

#[test]
fn any_kind_behind_one_trait() {
    use leasehold::blocking::Lock;

    let server = RedisServer::start();
    let client = client(&server);
    let locks: Vec<Box<dyn Lock>> = vec![
        Box::new(client.mutex("a").unwrap()),
        Box::new(client.fair_mutex("b").unwrap()),
        Box::new(client.reentrant_mutex("c").unwrap()),
        Box::new(client.rw_lock("d").unwrap().write()),
        Box::new(client.semaphore("e", 1).unwrap()),
    ];
    for lock in &locks {
        let guard = lock.acquire().unwrap();
        assert_eq!(guard.name(), lock.name());
        let other = Client::open(&server.url()).unwrap();
        let taken = match lock.name() {
            "a" => other.mutex("a").unwrap().try_acquire(),
            "b" => other.fair_mutex("b").unwrap().try_acquire(),
            "c" => other.reentrant_mutex("c").unwrap().try_acquire(),
            "d" => other.rw_lock("d").unwrap().read().try_acquire(),
            _ => other.semaphore("e", 1).unwrap().try_acquire(),
        };
        assert!(taken.unwrap().is_none(), "{} was taken twice", lock.name());
        guard.release().unwrap();
        lock.acquire_timeout(LONG).unwrap().release().unwrap();
        lock.try_acquire()
            .unwrap()
            .expect("free")
            .release()
            .unwrap();
    }
}

#[test]
fn settings_behind_one_trait() {
    use leasehold::blocking::Lock;

    let server = RedisServer::start();
    let client = client(&server);
    let mut locks: Vec<Box<dyn Lock>> = vec![
        Box::new(client.mutex("a").unwrap()),
        Box::new(client.fair_mutex("b").unwrap()),
        Box::new(client.reentrant_mutex("c").unwrap()),
        Box::new(client.rw_lock("d").unwrap().read()),
        Box::new(client.rw_lock("e").unwrap().write()),
        Box::new(client.semaphore("f", 1).unwrap()),
    ];
    for lock in &mut locks {
        assert_eq!(lock.key(), format!("leasehold:{{{}}}", lock.name()));
        let mut wanted = lock.settings();
        wanted.lease = Duration::from_secs(5);
        wanted.watchdog = false;
        lock.set_settings(wanted).unwrap();
        assert_eq!(lock.settings(), wanted, "{}", lock.name());

        let mut refused = wanted;
        refused.lease = Duration::ZERO;
        let err = lock.set_settings(refused).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert_eq!(lock.settings(), wanted, "{} changed", lock.name());

        // The lease set is the one granted: fixed, without the watchdog.
        let guard = lock.acquire().unwrap();
        assert!(
            guard.valid_for() <= Duration::from_secs(5),
            "{}",
            lock.name()
        );
        guard.release().unwrap();
    }
}

#[test]
fn an_election_from_plain_threads() {
    let server = RedisServer::start();
    let first = client(&server).election("scheduler").unwrap();
    let second = client(&server).election("scheduler").unwrap();
    assert_eq!(first.leader().unwrap(), None);
    let mut watch = second.observe().unwrap();
    assert_eq!(watch.current(), None);

    let leading = first.campaign("host-a").unwrap();
    assert_eq!(leading.value(), "host-a");
    assert_eq!(leading.name(), "scheduler");
    assert!(!leading.is_lost());
    let seen = watch.changed_timeout(LONG).unwrap().expect("a change");
    assert_eq!(seen.as_ref().map(|l| l.value.as_str()), Some("host-a"));
    assert_eq!(seen.map(|l| l.fence), Some(leading.fence()));

    let err = second
        .campaign_timeout(Duration::from_millis(100), "host-b")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");

    thread::scope(|s| {
        let next = s.spawn(|| second.campaign_timeout(LONG, "host-b").unwrap());
        // The candidate queues; the leader resigns and hands over.
        thread::sleep(Duration::from_millis(100));
        let fence = leading.fence();
        leading.resign().unwrap();
        let next = next.join().unwrap();
        assert!(next.fence() > fence);
        let leader = first.leader().unwrap().expect("a leader");
        assert_eq!(leader.value, "host-b");
        // Dropped, the leadership is given up in the background.
        drop(next);
    });
    let deadline = std::time::Instant::now() + LONG;
    while first.leader().unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "nobody resigned");
        thread::sleep(Duration::from_millis(20));
    }
}

/// A blocking `Mutex`'s holder is the calling thread: its own second
/// attempt is refused at once, another thread's waits its turn, and "do I
/// hold this?" answers for the calling thread.
#[test]
fn a_blocking_mutex_knows_its_holder_thread() {
    let server = RedisServer::start();
    let client = client(&server);
    let mutex = client.mutex("job").unwrap();
    let guard = mutex.acquire().unwrap();
    assert!(mutex.is_held_by_current_owner());
    let err = mutex.acquire_timeout(Duration::from_secs(20)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    let other = mutex.clone();
    let (held_there, tried) =
        thread::spawn(move || (other.is_held_by_current_owner(), other.try_acquire()))
            .join()
            .unwrap();
    assert!(!held_there);
    assert!(tried.unwrap().is_none());
    guard.release().unwrap();
    assert!(!mutex.is_held_by_current_owner());
}

/// The blocking semaphore's admin calls and the line of waiters, as the
/// async ones.
#[test]
fn blocking_semaphore_admin_calls_and_the_line() {
    let server = RedisServer::start();
    let client = client(&server);
    let sem = client.semaphore("s", 3).unwrap();
    let one = sem.acquire().unwrap();
    assert!(sem.is_held_by_current_owner());
    let left = sem.permit_lease_left(one.token()).unwrap();
    assert!(left.is_some_and(|left| left > Duration::ZERO));
    let drained = sem.drain().unwrap().expect("two were free");
    assert!(sem.drain().unwrap().is_none());
    let tokens = [one.detach().token, drained.detach().token];
    let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
    assert_eq!(sem.release_tokens(&tokens).unwrap(), 2);
    assert!(sem.waiters().unwrap().is_empty());
    assert!(sem.delete().unwrap());
    assert!(!sem.delete().unwrap());

    let fair = client.fair_mutex("fair").unwrap();
    let held = fair.acquire().unwrap();
    assert_eq!(fair.queue_position().unwrap(), None);
    let other = client.fair_mutex("fair").unwrap();
    let waiter = thread::spawn(move || other.acquire_timeout(Duration::from_secs(30)));
    while fair.waiters().unwrap().is_empty() {
        thread::sleep(Duration::from_millis(20));
    }
    // The waiting thread is of this client: its place is the client's.
    assert_eq!(fair.queue_position().unwrap(), Some(1));
    held.release().unwrap();
    waiter.join().unwrap().unwrap().release().unwrap();
    assert_eq!(fair.queue_position().unwrap(), None);
}

/// A blocking Redlock's mutex: threads take turns over three masters, each
/// grant with a fence of its own, and a release frees it on every master.
#[test]
fn threads_take_turns_on_a_blocking_redlock() {
    let masters = leasehold_testkit::Masters::start(3);
    let redlock = leasehold::blocking::Redlock::open(&masters.urls().join(",")).unwrap();
    assert_eq!(redlock.quorum(), 2);
    let mutex = redlock.mutex("counter").unwrap();
    let counter = Unprotected::default();
    let fences = std::sync::Mutex::new(Vec::new());
    let (threads, rounds) = (3, 5);
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..rounds {
                    let guard = mutex.acquire_timeout(LONG).unwrap();
                    assert_eq!(guard.servers(), 3);
                    counter.increment();
                    fences.lock().unwrap().push(guard.fence());
                    guard.release().unwrap();
                }
            });
        }
    });
    assert_eq!(counter.get(), threads * rounds);
    let mut fences = fences.into_inner().unwrap();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len() as u64, threads * rounds);
    redlock.flush().unwrap();
    for server in masters.servers() {
        assert!(!exists(server, "leasehold:{counter}"));
    }
    // A Redlock's blocking client makes mutexes alone.
    let err = redlock.client().fair_mutex("queue").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
}

/// The blocking fair reentrant mutex: a thread nests, and another thread
/// (another owner) waits in line and takes it once the last level is
/// released, with a larger fence.
#[test]
fn a_fair_reentrant_handle_nests_per_thread() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.reentrant_mutex("line").unwrap().fair();
    assert!(lock.is_fair());
    let outer = lock.acquire().unwrap();
    let inner = lock.acquire().unwrap();
    assert_eq!(inner.fence(), outer.fence());
    assert_eq!(lock.hold_count().unwrap(), 2);
    let fence = outer.fence();
    let shared = lock.clone();
    let waiter = thread::spawn(move || shared.acquire_timeout(Duration::from_secs(30)).unwrap());
    while lock.waiters().unwrap().is_empty() {
        thread::sleep(Duration::from_millis(10));
    }
    inner.release().unwrap();
    assert_eq!(
        lock.waiters().unwrap().len(),
        1,
        "still held by the outer level"
    );
    outer.release().unwrap();
    let next = waiter.join().unwrap();
    assert!(next.fence() > fence);
    next.release().unwrap();
}
