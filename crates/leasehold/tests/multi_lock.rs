//! `MultiLock`: several locks taken all or none, in the order of their keys,
//! on real servers (one node, and a three-master cluster).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{client, client_with, eventually, poll_then_drop};
use leasehold::{Client, ErrorKind, Lock, LossReason, MultiLock, MAX_WAIT};
use leasehold_testkit::{unreachable_url, RedisCluster, RedisServer};

/// Long enough for any step that should succeed; a hang fails the test.
const LONG: Duration = Duration::from_secs(60);

fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&["EXISTS", key]).unwrap() == "1"
}

fn key(name: &str) -> String {
    format!("leasehold:{{{name}}}")
}

fn mutexes(client: &Client, names: &[&str]) -> MultiLock {
    let locks = names
        .iter()
        .map(|name| Box::new(client.mutex(name).unwrap()) as Box<dyn Lock>)
        .collect();
    MultiLock::new(locks).unwrap()
}

/// Every one of `names` is free, or held only by a guard we got back: a
/// client of its own takes them all well before the lease of anything left
/// behind could run out.
async fn assert_free_soon(server: &RedisServer, names: &[&str]) {
    let other = client(server);
    let guard = mutexes(&other, names)
        .acquire_timeout(LONG / 3)
        .await
        .expect("something was left held");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_busy_lock_leaves_nothing_held() {
    let server = RedisServer::start();
    let holder = client(&server);
    let held = holder.mutex("b").unwrap().acquire().await.unwrap();
    let client = client(&server);
    let multi = mutexes(&client, &["c", "b", "a"]);

    assert!(multi.try_acquire().await.unwrap().is_none());
    // "a" comes before "b": it was taken, and released before the call returned.
    assert!(!exists(&server, &key("a")));
    assert!(!exists(&server, &key("c")));

    let err = multi
        .acquire_timeout(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.to_string().contains("\"b\""), "{err}");
    assert!(!exists(&server, &key("a")));
    assert!(!exists(&server, &key("c")));

    held.release().await.unwrap();
    let guard = multi
        .try_acquire()
        .await
        .unwrap()
        .expect("all three are free");
    for name in ["a", "b", "c"] {
        assert!(exists(&server, &key(name)), "{name} is not held");
    }
    guard.release().await.unwrap();
    for name in ["a", "b", "c"] {
        assert!(!exists(&server, &key(name)), "{name} is still held");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_on_a_later_lock_leaves_nothing_held() {
    let server = RedisServer::start();
    let client = client(&server);
    // "b" is a semaphore: a mutex on its name is refused.
    let permit = client.semaphore("b", 2).unwrap().acquire().await.unwrap();
    let multi = mutexes(&client, &["a", "b"]);
    for attempt in 0..2 {
        let err = match attempt {
            0 => multi.try_acquire().await.unwrap_err(),
            _ => multi.acquire().await.unwrap_err(),
        };
        assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
        client.flush().await;
        assert!(!exists(&server, &key("a")));
    }
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_taken_while_waiting_for_a_later_one_are_held() {
    let server = RedisServer::start();
    let holder = client(&server);
    let held = holder.mutex("b").unwrap().acquire().await.unwrap();
    let waiter = client(&server);
    let waiting = tokio::spawn({
        let multi = mutexes(&waiter, &["b", "a"]);
        async move { multi.acquire_timeout(LONG).await }
    });
    eventually("the waiter to hold a", || async {
        exists(&server, &key("a"))
    })
    .await;
    let queue = format!("{}:q", key("b"));
    eventually("the waiter to queue for b", || async {
        exists(&server, &queue)
    })
    .await;
    held.release().await.unwrap();
    let guard = waiting.await.unwrap().unwrap();
    assert_eq!(guard.guards()[0].name(), "b");
    assert_eq!(guard.guards()[1].name(), "a");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_come_in_the_order_the_locks_were_given() {
    let server = RedisServer::start();
    let client = client(&server);
    // Fences of "a" move ahead of those of "z".
    for _ in 0..3 {
        let guard = client.mutex("a").unwrap().acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    let multi = MultiLock::builder()
        .lock(client.mutex("z").unwrap())
        .lock(client.mutex("a").unwrap())
        .build()
        .unwrap();
    let names: Vec<&str> = multi.locks().iter().map(|lock| lock.name()).collect();
    assert_eq!(names, ["z", "a"]);
    let taken: Vec<&str> = multi.locks_in_order().map(|lock| lock.name()).collect();
    assert_eq!(taken, ["a", "z"]);

    let guard = multi.acquire().await.unwrap();
    let fences = guard.fences();
    assert_eq!(fences.len(), 2);
    for (i, name) in ["z", "a"].into_iter().enumerate() {
        assert_eq!(guard.guards()[i].name(), name);
        let last = client.mutex(name).unwrap().inspect().await.unwrap();
        assert_eq!(last.last_fence, Some(fences[i]), "{name}");
    }
    guard.release().await.unwrap();

    let again = multi.acquire().await.unwrap();
    for (before, after) in fences.iter().zip(again.fences()) {
        assert!(after > *before);
    }
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_kind_of_lock_goes() {
    let server = RedisServer::start();
    let client = client(&server);
    let config = client.rw_lock("config").unwrap();
    let multi = MultiLock::builder()
        .lock(client.mutex("ledger").unwrap())
        .lock(config.write())
        .lock(client.semaphore("exports", 2).unwrap())
        .lock(client.fair_mutex("turns").unwrap())
        .lock(client.reentrant_mutex("nested").unwrap())
        .build()
        .unwrap();
    let guard = multi.acquire().await.unwrap();
    assert_eq!(guard.guards().len(), 5);
    // A reader waits for the writer the multi-lock holds.
    assert!(client
        .rw_lock("config")
        .unwrap()
        .read()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        client
            .semaphore("exports", 2)
            .unwrap()
            .available()
            .await
            .unwrap(),
        1
    );
    guard.release().await.unwrap();
    let reader = config.read().try_acquire().await.unwrap().expect("free");
    reader.release().await.unwrap();
}

#[tokio::test]
async fn refused_sets_are_refused_before_anything_is_sent() {
    // Nothing listens here: an error that reached Redis would be a connection error.
    let client = Client::open(&unreachable_url()).unwrap();
    let err = MultiLock::new(Vec::new()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);

    let err = MultiLock::builder()
        .lock(client.mutex("a").unwrap())
        .lock(client.mutex("b").unwrap())
        .lock(client.mutex("a").unwrap())
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("\"a\""), "{err}");

    let rw = client.rw_lock("config").unwrap();
    let err = MultiLock::builder()
        .lock(rw.read())
        .lock(rw.write())
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);

    // The same name under another prefix is another lock.
    let other = Client::builder(unreachable_url())
        .prefix("other")
        .build()
        .unwrap();
    MultiLock::builder()
        .lock(client.mutex("a").unwrap())
        .lock(other.mutex("a").unwrap())
        .build()
        .unwrap();

    let multi = mutexes(&client, &["a", "b"]);
    let err = multi
        .acquire_timeout(MAX_WAIT + Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_never_deadlock() {
    const ROUNDS: usize = 40;
    let server = RedisServer::start();
    let inside = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = [["x", "y"], ["y", "x"], ["x", "y"], ["y", "x"]]
        .into_iter()
        .map(|names| {
            let client = client(&server);
            let inside = Arc::clone(&inside);
            tokio::spawn(async move {
                let multi = mutexes(&client, &names);
                for _ in 0..ROUNDS {
                    // A deadlock would hold both waits to their bound.
                    let guard = multi.acquire_timeout(LONG / 2).await.unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    tokio::task::yield_now().await;
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
}

/// The same two waits, each taking its locks in the order given, do
/// deadlock: what the test above would catch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_the_same_locks_by_hand_in_opposite_orders_deadlocks() {
    let server = RedisServer::start();
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let waits: Vec<_> = [["x", "y"], ["y", "x"]]
        .into_iter()
        .map(|[first, second]| {
            let client = client(&server);
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                let held = client.mutex(first).unwrap().acquire().await.unwrap();
                barrier.wait().await;
                let other = client
                    .mutex(second)
                    .unwrap()
                    .acquire_timeout(Duration::from_secs(1))
                    .await;
                held.release().await.unwrap();
                other.map(drop)
            })
        })
        .collect();
    for wait in waits {
        let err = wait.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_makes_the_guard_lost_and_names_its_lock() {
    let server = RedisServer::start();
    let client = client_with(&server, Duration::from_millis(600), true);
    let multi = mutexes(&client, &["a", "b"]);
    let guard = multi.acquire().await.unwrap();
    assert!(!guard.is_lost());
    assert!(guard.loss_reason().is_none());
    assert!(guard.valid_for() > Duration::ZERO);

    let admin = common::client(&server);
    assert!(admin.mutex("b").unwrap().force_release().await.unwrap());
    // The next renewal finds "b" gone.
    tokio::time::timeout(LONG, guard.lost())
        .await
        .expect("the loss was never noticed");
    assert!(guard.is_lost());
    assert_eq!(guard.valid_for(), Duration::ZERO);
    let loss = guard.loss_reason().expect("a reason");
    assert_eq!((loss.index, loss.name.as_str()), (1, "b"));
    assert_eq!(loss.reason, LossReason::TokenGone);
    assert!(loss.to_string().contains("\"b\""), "{loss}");
    assert!(!guard.guards()[0].is_lost());

    let err = guard.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotHeld, "{err}");
    // "a" was released all the same.
    assert!(!exists(&server, &key("a")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_guard_releases_every_lock() {
    let server = RedisServer::start();
    let client = client_with(&server, LONG, true);
    let guard = mutexes(&client, &["a", "b"]).acquire().await.unwrap();
    drop(guard);
    client.flush().await;
    assert!(!exists(&server, &key("a")));
    assert!(!exists(&server, &key("b")));

    let guards = mutexes(&client, &["a", "b"])
        .acquire()
        .await
        .unwrap()
        .into_guards();
    assert_eq!(guards.len(), 2);
    drop(guards);
    assert_free_soon(&server, &["a", "b"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_take_at_any_point_leaves_nothing_held() {
    let server = RedisServer::start();
    let client = client_with(&server, LONG, true);
    let multi = mutexes(&client, &["b", "a"]);
    for polls in 0..32 {
        if let Some(result) = poll_then_drop(multi.acquire(), polls).await {
            drop(result.unwrap());
        }
        assert_free_soon(&server, &["a", "b"]).await;
    }
    for micros in [0u64, 50, 100, 200, 400, 800, 1600, 3200] {
        let attempt = tokio::time::timeout(Duration::from_micros(micros), multi.try_acquire());
        if let Ok(result) = attempt.await {
            drop(result.unwrap());
        }
        assert_free_soon(&server, &["a", "b"]).await;
        let attempt =
            tokio::time::timeout(Duration::from_micros(micros), multi.acquire_timeout(LONG));
        if let Ok(result) = attempt.await {
            drop(result.unwrap());
        }
        assert_free_soon(&server, &["a", "b"]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_take_that_waits_for_a_later_lock_leaves_nothing_held() {
    let server = RedisServer::start();
    let holder = client_with(&server, LONG, true);
    let client = client_with(&server, LONG, true);
    let multi = mutexes(&client, &["a", "b"]);
    for polls in 0..32 {
        let held = holder.mutex("b").unwrap().acquire().await.unwrap();
        // The holder lets go while the take is somewhere in its wait for "b".
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_micros(300)).await;
            held.release().await.unwrap();
        });
        if let Some(result) = poll_then_drop(multi.acquire(), polls).await {
            drop(result.unwrap());
        }
        release.await.unwrap();
        assert_free_soon(&server, &["a", "b"]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_release_still_releases_every_lock() {
    let server = RedisServer::start();
    let client = client_with(&server, LONG, true);
    let multi = mutexes(&client, &["a", "b"]);
    for polls in 0..8 {
        let guard = multi.acquire().await.unwrap();
        if let Some(result) = poll_then_drop(guard.release(), polls).await {
            result.unwrap();
        }
        assert_free_soon(&server, &["a", "b"]).await;
    }
}

/// A lock name whose keys live on `shard`'s master.
fn name_on(cluster: &RedisCluster, shard: usize, stem: &str) -> String {
    let master = cluster.master(shard).port();
    (0..10_000)
        .map(|i| format!("{stem}-{i}"))
        .find(|name| cluster.master_for_key(&key(name)).port() == master)
        .expect("some name lands on every shard")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_every_shard_of_a_cluster_are_taken_together() {
    let cluster = RedisCluster::start(3, 0);
    // A short lease: a loss is noticed at the next renewal.
    let client = Client::builder(cluster.urls()[0].clone())
        .lease(Duration::from_millis(900))
        .build()
        .unwrap();
    let names: Vec<String> = (0..3)
        .map(|shard| name_on(&cluster, shard, "acct"))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let on = |i: usize| cluster.master(i);
    let multi = mutexes(&client, &names);

    let guard = multi.acquire().await.unwrap();
    for (shard, name) in names.iter().enumerate() {
        assert!(exists(on(shard), &key(name)), "{name} is held on its shard");
        let info = client.mutex(name).unwrap().inspect().await.unwrap();
        assert_eq!(info.last_fence, Some(guard.fences()[shard]));
    }
    guard.release().await.unwrap();
    for (shard, name) in names.iter().enumerate() {
        assert!(!exists(on(shard), &key(name)), "{name} is still held");
    }

    // All or none across shards: the last one busy leaves the others free.
    let other = Client::open(&cluster.urls()[1]).unwrap();
    let last = names.iter().max().copied().unwrap_or_default();
    let held = other.mutex(last).unwrap().acquire().await.unwrap();
    assert!(multi.try_acquire().await.unwrap().is_none());
    for (shard, name) in names.iter().enumerate() {
        assert_eq!(exists(on(shard), &key(name)), *name == last, "{name}");
    }

    // A lease lost on one shard makes the whole guard lost.
    held.release().await.unwrap();
    let guard = multi.acquire().await.unwrap();
    let victim = names[1];
    assert!(other.mutex(victim).unwrap().force_release().await.unwrap());
    tokio::time::timeout(LONG, guard.lost())
        .await
        .expect("the loss was never noticed");
    assert_eq!(
        guard.loss_reason().map(|loss| loss.name),
        Some(victim.to_owned())
    );
    assert!(guard.release().await.unwrap_err().is_not_held());
    client.flush().await;
    for (shard, name) in names.iter().enumerate() {
        assert!(!exists(on(shard), &key(name)), "{name} is still held");
    }
}
