//! `with_lock` and `run_locked`: work under a lock, cut short when the lease
//! is lost.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold::ErrorKind;
use leasehold_testkit::RedisServer;

use common::{client, client_with, take_and_release};

#[tokio::test]
async fn with_lock_returns_the_output_and_releases() {
    let server = RedisServer::start();
    let mutex = client(&server).mutex("job").unwrap();
    let other = client(&server).mutex("job").unwrap();
    let (fence, busy) = mutex
        .with_lock(async |guard| {
            let busy = other.try_acquire().await.unwrap().is_none();
            (guard.fence(), busy)
        })
        .await
        .unwrap();
    assert!(fence > 0);
    assert!(busy, "the lock was free while the work ran");
    take_and_release(other.try_acquire().await).await;

    let fair = client(&server).fair_mutex("fair").unwrap();
    let out = fair.run_locked(async { 41 + 1 }).await.unwrap();
    assert_eq!(out, 42);
    let out = fair
        .with_lock_timeout(Duration::from_secs(5), async |guard| {
            guard.name().to_owned()
        })
        .await
        .unwrap();
    assert_eq!(out, "fair");
    take_and_release(fair.try_acquire().await).await;
}

#[tokio::test]
async fn a_lost_lease_stops_the_work_and_is_reported() {
    let server = RedisServer::start();
    let mutex = client_with(&server, Duration::from_millis(300), true)
        .mutex("job")
        .unwrap();
    let admin = client(&server).mutex("job").unwrap();
    let finished = Arc::new(AtomicBool::new(false));
    let err = mutex
        .with_lock(async |_guard| {
            // The lock is removed under the work; the watchdog finds out.
            assert!(admin.force_release().await.unwrap());
            // Far past the watchdog's next renewal, which finds the loss:
            // only a cut stops the work before this.
            tokio::time::sleep(Duration::from_secs(10)).await;
            finished.store(true, Ordering::SeqCst);
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotHeld, "{err}");
    assert!(err.to_string().contains("lost"), "{err}");
    assert!(!finished.load(Ordering::SeqCst), "the work ran to its end");
    take_and_release(admin.try_acquire().await).await;
}

#[tokio::test]
async fn a_wait_that_runs_out_never_runs_the_work() {
    let server = RedisServer::start();
    let holder = client(&server).fair_mutex("job").unwrap();
    let guard = holder.acquire().await.unwrap();
    let ran = AtomicBool::new(false);
    let err = client(&server)
        .fair_mutex("job")
        .unwrap()
        .with_lock_timeout(Duration::from_millis(50), async |_| {
            ran.store(true, Ordering::SeqCst);
        })
        .await
        .unwrap_err();
    assert!(err.is_timeout());
    assert!(!ran.load(Ordering::SeqCst));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn the_work_can_run_on_a_spawned_task() {
    let server = RedisServer::start();
    let mutex = client(&server).mutex("job").unwrap();
    let task = tokio::spawn({
        let mutex = mutex.clone();
        async move {
            mutex
                .with_lock(async |guard| {
                    tokio::task::yield_now().await;
                    guard.fence()
                })
                .await
        }
    });
    assert!(task.await.unwrap().unwrap() > 0);
    take_and_release(mutex.try_acquire().await).await;
}

#[tokio::test]
async fn every_primitive_runs_work_under_its_lock() {
    let server = RedisServer::start();
    let c = client(&server);

    // Reentrant: the owner's nested call does not wait for itself.
    let config = c.reentrant_mutex("config").unwrap();
    let (outer, inner) = config
        .with_lock(async |outer| {
            let inner = config.with_lock(async |inner| inner.fence()).await.unwrap();
            (outer.fence(), inner)
        })
        .await
        .unwrap();
    assert_eq!(outer, inner, "a nested level reports the hold's fence");
    assert_eq!(config.hold_count().await.unwrap(), 0);

    // Read shares together, a writer alone.
    let catalog = c.rw_lock("catalog").unwrap();
    let other = client(&server).rw_lock("catalog").unwrap();
    let readers_together = catalog
        .read()
        .run_locked(async { other.read().try_acquire().await.unwrap() })
        .await
        .unwrap();
    take_and_release(Ok(readers_together)).await;
    let writer_alone = catalog
        .write()
        .with_lock_timeout(Duration::from_secs(5), async |_| {
            other.read().try_acquire().await.unwrap().is_none()
        })
        .await
        .unwrap();
    assert!(writer_alone, "a reader got in beside the writer");

    // A semaphore's permit is given back when the work is done.
    let slots = c.semaphore("slots", 2).unwrap();
    let in_use = slots
        .with_lock(async |permit| (permit.permits(), slots.available().await.unwrap()))
        .await
        .unwrap();
    assert_eq!(in_use, (1, 1));
    assert_eq!(slots.available().await.unwrap(), 2);
}
