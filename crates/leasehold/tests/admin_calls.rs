//! The calls for looking at a lock's line and running a semaphore: a fair
//! waiter's place in line, the waiter queue, and a semaphore's delete,
//! drain, permit leases and releases of several permits at once.

mod common;

use std::time::Duration;

use common::{client, cmd, eventually};
use leasehold::{HoldMode, Owner};
use leasehold_testkit::RedisServer;

const LONG: Duration = Duration::from_secs(30);

/// Each client waiting for a fair lock knows its place in line, and the
/// line moves up as the lock is handed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_know_their_place_in_line() {
    let server = RedisServer::start();
    let holder = client(&server).fair_mutex("job").unwrap();
    let held = holder.acquire().await.unwrap();
    assert_eq!(holder.queue_position().await.unwrap(), None);
    let mut locks = Vec::new();
    let mut waiting = Vec::new();
    for n in 1..=3u64 {
        let lock = client(&server).fair_mutex("job").unwrap();
        let task = lock.clone();
        waiting.push(tokio::spawn(
            async move { task.acquire_timeout(LONG).await },
        ));
        eventually("the waiter to queue", || async {
            cmd::<u64>(&server, &["ZCARD", "leasehold:{job}:q"]).await == n
        })
        .await;
        locks.push(lock);
    }
    for (i, lock) in locks.iter().enumerate() {
        assert_eq!(lock.queue_position().await.unwrap(), Some(i + 1));
    }
    let line = holder.waiters().await.unwrap();
    assert_eq!(
        line.iter().map(|w| w.position).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(line
        .iter()
        .all(|w| !w.this_client && w.wants == HoldMode::Exclusive));
    assert!(line.windows(2).all(|w| w[0].queued_at <= w[1].queued_at));
    held.release().await.unwrap();
    let first = waiting.remove(0).await.unwrap().unwrap();
    assert_eq!(locks[0].queue_position().await.unwrap(), None);
    assert_eq!(locks[1].queue_position().await.unwrap(), Some(1));
    assert_eq!(locks[2].queue_position().await.unwrap(), Some(2));
    first.release().await.unwrap();
    for task in waiting {
        task.await.unwrap().unwrap().release().await.unwrap();
    }
    assert!(holder.waiters().await.unwrap().is_empty());
}

/// A semaphore's waiters show what they ask for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_waiters_show_the_permits_they_want() {
    let server = RedisServer::start();
    let sem = client(&server).semaphore("s", 3).unwrap();
    let held = sem.acquire_many(3).await.unwrap();
    let other = sem.clone();
    let waiting = tokio::spawn(async move { other.acquire_many_timeout(2, LONG).await });
    eventually("the waiter to queue", || async {
        sem.waiters().await.unwrap().len() == 1
    })
    .await;
    let line = sem.waiters().await.unwrap();
    assert_eq!(line[0].wants, HoldMode::Permits);
    assert_eq!(line[0].permits, 2);
    assert!(line[0].this_client);
    held.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
}

/// Deleting a semaphore removes its count and its permit leases: a holder
/// learns its lease is gone, and the next handle makes it anew with its
/// own count. Another kind of lock is left as it is.
#[tokio::test]
async fn a_deleted_semaphore_starts_anew() {
    let server = RedisServer::start();
    let three = client(&server).semaphore("s", 3).unwrap();
    let held = three.acquire().await.unwrap();
    let old_fence = held.fence();
    assert!(three.delete().await.unwrap());
    assert!(!three.delete().await.unwrap());
    assert!(!cmd::<bool>(&server, &["EXISTS", "leasehold:{s}"]).await);
    assert!(held.release().await.unwrap_err().is_not_held());
    let five = client(&server).semaphore("s", 5).unwrap();
    let taken = five.acquire_many(5).await.unwrap();
    assert!(taken.fence() > old_fence);
    assert_eq!(five.inspect().await.unwrap().permits, Some(5));
    taken.release().await.unwrap();
    let mutex = client(&server).mutex("m").unwrap();
    let guard = mutex.acquire().await.unwrap();
    let as_semaphore = client(&server).semaphore("m", 2).unwrap();
    assert!(as_semaphore.delete().await.unwrap_err().is_conflict());
    guard.release().await.unwrap();
}

/// Drain takes every free permit in one lease, and nothing when none is
/// free.
#[tokio::test]
async fn drain_takes_every_free_permit() {
    let server = RedisServer::start();
    let sem = client(&server).semaphore("s", 5).unwrap();
    let one = sem.acquire().await.unwrap();
    let drained = sem.drain().await.unwrap().expect("four were free");
    assert_eq!(sem.available().await.unwrap(), 0);
    assert!(sem.drain().await.unwrap().is_none());
    drained.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 4);
    one.release().await.unwrap();
}

/// The lease left on a permit, by its token; none for a released permit
/// or a stranger's token.
#[tokio::test]
async fn the_lease_left_on_a_permit_is_read_by_token() {
    let server = RedisServer::start();
    let sem = client(&server)
        .semaphore("s", 2)
        .unwrap()
        .with_lease(Duration::from_secs(20))
        .unwrap()
        .with_watchdog(false);
    let permit = sem.acquire().await.unwrap();
    let left = sem
        .permit_lease_left(permit.token())
        .await
        .unwrap()
        .expect("the permit is held");
    assert!(left > Duration::from_secs(10) && left <= Duration::from_secs(20));
    let token = permit.token().to_owned();
    permit.release().await.unwrap();
    assert_eq!(sem.permit_lease_left(&token).await.unwrap(), None);
    assert_eq!(sem.permit_lease_left(&"0".repeat(32)).await.unwrap(), None);
    assert!(sem
        .permit_lease_left("")
        .await
        .unwrap_err()
        .is_invalid_input());
}

/// Several permit leases, of any holders, released in one call; tokens
/// that hold nothing are skipped.
#[tokio::test]
async fn several_permits_are_released_at_once() {
    let server = RedisServer::start();
    let sem = client(&server).semaphore("s", 4).unwrap();
    let mut tokens = Vec::new();
    for _ in 0..3 {
        tokens.push(sem.acquire().await.unwrap().detach().token);
    }
    assert_eq!(sem.available().await.unwrap(), 1);
    let stranger = "0".repeat(32);
    let mut all: Vec<&str> = tokens.iter().map(String::as_str).collect();
    all.push(&stranger);
    assert_eq!(sem.release_tokens(&all).await.unwrap(), 3);
    assert_eq!(sem.available().await.unwrap(), 4);
    assert!(sem
        .release_tokens(&["bad token"])
        .await
        .unwrap_err()
        .is_invalid_input());
}

/// A named owner's write hold count is the same from every handle that
/// names it.
#[tokio::test]
async fn rw_hold_counts_follow_the_owner() {
    let server = RedisServer::start();
    let owner = Owner::from_id("job-7").unwrap();
    let rw = client(&server)
        .rw_lock("rw")
        .unwrap()
        .with_owner(owner.clone());
    let outer = rw.write().acquire().await.unwrap();
    let inner = rw.write().acquire().await.unwrap();
    let elsewhere = client(&server).rw_lock("rw").unwrap().with_owner(owner);
    assert_eq!(elsewhere.write().hold_count().await.unwrap(), 2);
    assert_eq!(
        client(&server)
            .rw_lock("rw")
            .unwrap()
            .write()
            .hold_count()
            .await
            .unwrap(),
        0
    );
    inner.release().await.unwrap();
    outer.release().await.unwrap();
    assert_eq!(elsewhere.write().hold_count().await.unwrap(), 0);
}
