//! Owners follow the task: a handle of a reentrant kind shared by several
//! tasks (cloned, or behind an `Arc`) never lets two of them hold at once,
//! and an owner shared across tasks is one the code names.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold::Owner;
use leasehold_testkit::RedisServer;

use common::client;

/// A config of two halves that a writer sets one after the other: a
/// reader that sees them differ read a half-written config.
#[derive(Default)]
struct Config {
    first: AtomicU64,
    second: AtomicU64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_sharing_one_rw_lock_handle_exclude_each_other() {
    let server = RedisServer::start();
    let client = client(&server);
    // One handle in application state, cloned into every task.
    let lock = client.rw_lock("config").unwrap();
    let config = Arc::new(Config::default());
    let torn = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let writes = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for writer in 0..2u64 {
        let (lock, config, writes) = (lock.clone(), Arc::clone(&config), Arc::clone(&writes));
        tasks.push(tokio::spawn(async move {
            for round in 0..15u64 {
                let guard = lock.write().acquire().await.unwrap();
                let value = writer * 1000 + round + 1;
                config.first.store(value, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                config.second.store(value, Ordering::SeqCst);
                writes.fetch_add(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        }));
    }
    for _ in 0..4 {
        let (lock, config) = (lock.clone(), Arc::clone(&config));
        let (torn, reads) = (Arc::clone(&torn), Arc::clone(&reads));
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                let guard = lock.read().acquire().await.unwrap();
                let first = config.first.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                if config.second.load(Ordering::SeqCst) != first {
                    torn.fetch_add(1, Ordering::SeqCst);
                }
                reads.fetch_add(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(writes.load(Ordering::SeqCst), 30);
    assert_eq!(reads.load(Ordering::SeqCst), 80);
    assert_eq!(
        torn.load(Ordering::SeqCst),
        0,
        "a reader saw a half-written config"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_sharing_one_reentrant_handle_never_hold_together() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = Arc::new(client.reentrant_mutex("ledger").unwrap());
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let fences = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for task in 0..2 {
        // One through a clone, one through the `Arc`: both share the handle.
        let lock = if task == 0 {
            Arc::new((*lock).clone())
        } else {
            Arc::clone(&lock)
        };
        let (inside, overlaps, fences) = (
            Arc::clone(&inside),
            Arc::clone(&overlaps),
            Arc::clone(&fences),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                let outer = lock.acquire().await.unwrap();
                // Reentry within the task still works, and never waits.
                let inner = lock.try_acquire().await.unwrap().expect("a reentry");
                assert_eq!(inner.fence(), outer.fence());
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                fences.lock().unwrap().push(outer.fence());
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.store(false, Ordering::SeqCst);
                inner.release().await.unwrap();
                outer.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two tasks held the lock at once"
    );
    let mut fences = fences.lock().unwrap().clone();
    let taken = fences.len();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), taken, "two holds shared a fence");
}

#[tokio::test]
async fn another_task_of_the_same_handle_is_another_owner() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.reentrant_mutex("owners").unwrap();
    let held = lock.acquire().await.unwrap();
    let here = lock.owner();
    let other = lock.clone();
    let (there, busy) = tokio::spawn(async move {
        let owner = other.owner();
        (owner, other.try_acquire().await.unwrap().is_none())
    })
    .await
    .unwrap();
    assert_ne!(here, there);
    assert!(busy, "another task took a lock its handle's holder holds");
    // Within the task the owner stays the same.
    assert_eq!(lock.owner(), here);
    held.release().await.unwrap();
}

#[tokio::test]
async fn an_owner_named_by_the_code_is_shared_across_tasks() {
    let server = RedisServer::start();
    let client = client(&server);
    let job = Owner::from_id("job-42").unwrap();
    let lock = client
        .reentrant_mutex("shared")
        .unwrap()
        .with_owner(job.clone());
    let held = lock.acquire().await.unwrap();
    let other = lock.clone();
    let joined = tokio::spawn(async move {
        assert_eq!(other.owner(), Owner::from_id("job-42").unwrap());
        other.try_acquire().await.unwrap()
    })
    .await
    .unwrap()
    .expect("the named owner takes its own lock again from another task");
    assert_eq!(joined.fence(), held.fence());
    joined.release().await.unwrap();
    held.release().await.unwrap();
    let rw = client.rw_lock("shared-rw").unwrap().with_owner(job);
    let write = rw.write().acquire().await.unwrap();
    let side = rw.clone();
    let read = tokio::spawn(async move { side.read().try_acquire().await.unwrap() })
        .await
        .unwrap()
        .expect("the named owner downgrades from another task");
    write.release().await.unwrap();
    read.release().await.unwrap();
}

/// A `Mutex` or `FairMutex` holder that acquires the lock again, through
/// the same handle or a clone, in the same task, is refused at once with a
/// clear error instead of waiting for itself; another task of the handle,
/// or another handle, still waits its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_holders_own_second_attempt_is_refused_at_once() {
    let server = RedisServer::start();
    let client = client(&server);
    for fair in [false, true] {
        let (lock, clone): (Box<dyn leasehold::Lock>, Box<dyn leasehold::Lock>) = if fair {
            let lock = client.fair_mutex("job").unwrap();
            (Box::new(lock.clone()), Box::new(lock))
        } else {
            let lock = client.mutex("job").unwrap();
            (Box::new(lock.clone()), Box::new(lock))
        };
        let guard = lock.acquire().await.unwrap();
        // Bounded, so that the old behaviour (a wait for itself) fails the
        // test instead of hanging it.
        let again = tokio::time::timeout(Duration::from_secs(20), clone.acquire())
            .await
            .expect("the holder waited for itself");
        let err = again.expect_err("the holder's second acquire was granted");
        assert!(err.is_conflict(), "fair {fair}: {err}");
        assert!(
            err.to_string().contains("already held by this caller"),
            "{err}"
        );
        let tried = tokio::time::timeout(Duration::from_secs(20), clone.try_acquire())
            .await
            .expect("the holder's try waited");
        assert!(tried.err().is_some_and(|e| e.is_conflict()), "fair {fair}");
        let other_handle: Box<dyn leasehold::Lock> = if fair {
            Box::new(client.fair_mutex("job").unwrap())
        } else {
            Box::new(client.mutex("job").unwrap())
        };
        assert!(other_handle.try_acquire().await.unwrap().is_none());
        let other_task = tokio::spawn(async move { clone.try_acquire().await });
        assert!(other_task.await.unwrap().unwrap().is_none());
        guard.release().await.unwrap();
        let guard = lock.acquire().await.expect("free again after the release");
        guard.release().await.unwrap();
    }
}

/// "Do I hold this?" on every primitive: true for the task that took it
/// while its guard lives, false for another task of the handle, another
/// handle, and after the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_says_whether_its_caller_holds_it() {
    let server = RedisServer::start();
    let client = client(&server);

    let mutex = client.mutex("m").unwrap();
    assert!(!mutex.is_held_by_current_owner());
    let guard = mutex.acquire().await.unwrap();
    assert!(mutex.is_held_by_current_owner());
    assert!(mutex.clone().is_held_by_current_owner());
    assert!(!client.mutex("m").unwrap().is_held_by_current_owner());
    let other = mutex.clone();
    assert!(
        !tokio::spawn(async move { other.is_held_by_current_owner() })
            .await
            .unwrap()
    );
    guard.release().await.unwrap();
    assert!(!mutex.is_held_by_current_owner());

    let fair = client.fair_mutex("f").unwrap();
    let guard = fair.acquire().await.unwrap();
    assert!(fair.is_held_by_current_owner());
    guard.release().await.unwrap();
    assert!(!fair.is_held_by_current_owner());

    let reentrant = client.reentrant_mutex("r").unwrap();
    let outer = reentrant.acquire().await.unwrap();
    let inner = reentrant.acquire().await.unwrap();
    assert!(reentrant.is_held_by_current_owner());
    assert_eq!(reentrant.hold_count().await.unwrap(), 2);
    inner.release().await.unwrap();
    assert!(reentrant.is_held_by_current_owner());
    outer.release().await.unwrap();
    assert!(!reentrant.is_held_by_current_owner());

    let rw = client.rw_lock("rw").unwrap();
    let read = rw.read().acquire().await.unwrap();
    assert!(rw.is_held_by_current_owner());
    assert!(rw.read().is_held_by_current_owner());
    assert!(!rw.write().is_held_by_current_owner());
    assert_eq!(rw.read().hold_count().await.unwrap(), 1);
    assert_eq!(rw.write().hold_count().await.unwrap(), 0);
    read.release().await.unwrap();
    let w1 = rw.write().acquire().await.unwrap();
    let w2 = rw.write().acquire().await.unwrap();
    assert!(rw.write().is_held_by_current_owner());
    assert_eq!(rw.write().hold_count().await.unwrap(), 2);
    let other = rw.clone();
    assert!(
        !tokio::spawn(async move { other.write().is_held_by_current_owner() })
            .await
            .unwrap()
    );
    w2.release().await.unwrap();
    w1.release().await.unwrap();
    assert!(!rw.is_held_by_current_owner());
    assert_eq!(rw.write().hold_count().await.unwrap(), 0);

    let sem = client.semaphore("s", 2).unwrap();
    let permit = sem.acquire().await.unwrap();
    assert!(sem.is_held_by_current_owner());
    permit.release().await.unwrap();
    assert!(!sem.is_held_by_current_owner());
}

/// A lease known lost does not count as held, and its holder may acquire
/// again (the lock is free).
#[tokio::test]
async fn a_lost_lease_is_not_held_and_may_be_taken_again() {
    let server = RedisServer::start();
    let client = client(&server);
    let mutex = client
        .mutex("job")
        .unwrap()
        .with_lease(Duration::from_millis(200))
        .unwrap()
        .with_watchdog(false);
    let guard = mutex.acquire().await.unwrap();
    guard.lost().await;
    assert!(!mutex.is_held_by_current_owner());
    let again = mutex
        .acquire()
        .await
        .expect("the lost lease's holder may take it again");
    again.release().await.unwrap();
}
