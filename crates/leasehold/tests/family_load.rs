//! Many tasks of one client waiting on the shared kinds at once: each has a
//! place of its own in Redis's queue, and every one gets in.

mod common;

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::client;
use leasehold_testkit::RedisServer;

/// 50 tasks of one client (and 10 of another) on one semaphore, asking for
/// 1 to 3 permits: every one gets in before the test's time bound, and the permits in use
/// never exceed the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_tasks_of_one_client_all_get_permits() {
    let server = RedisServer::start();
    let a = client(&server);
    let b = client(&server);
    let in_use = Arc::new(AtomicU32::new(0));
    let done = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for i in 0..60u32 {
        let c = if i < 50 { a.clone() } else { b.clone() };
        let in_use = Arc::clone(&in_use);
        let done = Arc::clone(&done);
        tasks.push(tokio::spawn(async move {
            let sem = c.semaphore("s", 3).unwrap();
            let n = 1 + i % 3;
            for _ in 0..3 {
                let g = sem
                    .acquire_many_timeout(n, Duration::from_secs(60))
                    .await
                    .unwrap_or_else(|e| panic!("task {i} ({n} permits): {e}"));
                let now = in_use.fetch_add(n, Ordering::SeqCst) + n;
                assert!(now <= 3, "{now} permits in use");
                tokio::time::sleep(Duration::from_millis(5)).await;
                in_use.fetch_sub(n, Ordering::SeqCst);
                g.release().await.unwrap();
            }
            done.fetch_add(1, Ordering::SeqCst);
        }));
    }
    let all = futures_util::future::join_all(tasks);
    match tokio::time::timeout(Duration::from_secs(90), all).await {
        Ok(results) => {
            for r in results {
                r.unwrap();
            }
        }
        Err(_) => panic!(
            "only {} of 60 tasks finished in 90 s",
            done.load(Ordering::SeqCst)
        ),
    }
}

/// Readers and writers of two clients, many tasks each, on one rw-lock:
/// never a writer with anyone else, everyone gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_readers_and_writers_of_two_clients_all_get_in() {
    let server = RedisServer::start();
    let a = client(&server);
    let b = client(&server);
    // >0: readers; -1: a writer.
    let state = Arc::new(AtomicI64::new(0));
    let done = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for i in 0..40u32 {
        let c = if i % 2 == 0 { a.clone() } else { b.clone() };
        let state = Arc::clone(&state);
        let done = Arc::clone(&done);
        tasks.push(tokio::spawn(async move {
            let rw = c.rw_lock("rw").unwrap();
            for round in 0..3 {
                let write = (i + round) % 4 == 0;
                if write {
                    let g = rw
                        .write()
                        .acquire_timeout(Duration::from_secs(60))
                        .await
                        .unwrap_or_else(|e| panic!("writer {i}: {e}"));
                    let was = state.swap(-1, Ordering::SeqCst);
                    assert_eq!(was, 0, "writer {i} admitted with {was}");
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    state.store(0, Ordering::SeqCst);
                    g.release().await.unwrap();
                } else {
                    let g = rw
                        .read()
                        .acquire_timeout(Duration::from_secs(60))
                        .await
                        .unwrap_or_else(|e| panic!("reader {i}: {e}"));
                    let was = state.fetch_add(1, Ordering::SeqCst);
                    assert!(was >= 0, "reader {i} admitted with a writer");
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    state.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.unwrap();
                }
            }
            done.fetch_add(1, Ordering::SeqCst);
        }));
    }
    let all = futures_util::future::join_all(tasks);
    match tokio::time::timeout(Duration::from_secs(90), all).await {
        Ok(results) => {
            for r in results {
                r.unwrap();
            }
        }
        Err(_) => panic!(
            "only {} of 40 tasks finished in 90 s",
            done.load(Ordering::SeqCst)
        ),
    }
}

/// 30 tasks of one client on one reentrant mutex (each its own owner):
/// one at a time, all get in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_on_one_reentrant_mutex_all_get_in() {
    let server = RedisServer::start();
    let a = client(&server);
    let inside = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for i in 0..30u32 {
        let c = a.clone();
        let inside = Arc::clone(&inside);
        tasks.push(tokio::spawn(async move {
            let lock = c.reentrant_mutex("re").unwrap();
            for _ in 0..2 {
                let g = lock
                    .acquire_timeout(Duration::from_secs(60))
                    .await
                    .unwrap_or_else(|e| panic!("task {i}: {e}"));
                let g2 = lock.acquire().await.unwrap();
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                g.release().await.unwrap();
                g2.release().await.unwrap();
            }
        }));
    }
    let all = futures_util::future::join_all(tasks);
    let results = tokio::time::timeout(Duration::from_secs(90), all)
        .await
        .expect("tasks hung");
    for r in results {
        r.unwrap();
    }
}
