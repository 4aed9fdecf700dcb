//! Cancellation at every await point, refused input, and Redis out of reach.

mod common;

use std::time::Duration;

use common::{client, client_with, impatient, poll_then_drop};
use leasehold::{Client, ErrorKind, MAX_LEASE, MAX_NAME_LEN, MAX_WAIT};
use leasehold_testkit::{unreachable_url, RedisServer};

const LONG: Duration = Duration::from_secs(60);

/// The lock is free, or held only by a guard we got back, and no token of a
/// dropped request stays behind: another client gets it well before the
/// 60 s lease of anything left behind could expire.
async fn assert_free_soon(server: &RedisServer) {
    let other = client(server);
    let guard = other
        .mutex("job")
        .unwrap()
        .acquire_timeout(LONG / 3)
        .await
        .expect("a dropped acquire left the lock held");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_acquire_on_a_free_lock_at_any_point_leaves_nothing_held() {
    let server = RedisServer::start();
    let client = client_with(&server, LONG, true);
    let mutex = client.mutex("job").unwrap();
    for polls in 0..24 {
        if let Some(result) = poll_then_drop(mutex.acquire(), polls).await {
            drop(result.unwrap());
        }
        assert_free_soon(&server).await;
    }
    for micros in [0u64, 50, 100, 200, 400, 800, 1600, 3200] {
        let attempt = tokio::time::timeout(Duration::from_micros(micros), mutex.try_acquire());
        if let Ok(result) = attempt.await {
            drop(result.unwrap());
        }
        assert_free_soon(&server).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_waiting_acquire_at_any_point_leaves_nothing_held() {
    let server = RedisServer::start();
    let holder = client_with(&server, LONG, true);
    let waiter = client_with(&server, LONG, true);
    for polls in 0..24 {
        let held = holder.mutex("job").unwrap().acquire().await.unwrap();
        let mutex = waiter.mutex("job").unwrap();
        // The holder lets go while the waiter is somewhere in its loop.
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_micros(300)).await;
            held.release().await.unwrap();
        });
        if let Some(result) = poll_then_drop(mutex.acquire(), polls).await {
            drop(result.unwrap());
        }
        release.await.unwrap();
        assert_free_soon(&server).await;
    }
}

#[tokio::test]
async fn every_refused_input_is_refused_before_anything_is_sent() {
    // Nothing listens here: an error that reached Redis would be a connection error.
    let client = Client::open(&unreachable_url()).unwrap();
    let invalid = |r: leasehold::Result<_>| match r {
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            assert!(!e.to_string().is_empty());
        }
        Ok(_) => panic!("accepted"),
    };
    invalid(client.mutex("").map(drop));
    invalid(client.mutex(&"n".repeat(MAX_NAME_LEN + 1)).map(drop));
    let mutex = client.mutex("ok").unwrap();
    invalid(mutex.clone().with_lease(Duration::ZERO).map(drop));
    invalid(
        mutex
            .clone()
            .with_lease(MAX_LEASE + Duration::from_secs(1))
            .map(drop),
    );
    invalid(
        mutex
            .acquire_timeout(MAX_WAIT + Duration::from_secs(1))
            .await
            .map(drop),
    );
    invalid(mutex.release_token("").await);
    // A space would end the token inside the scripts.
    invalid(mutex.release_token("a b").await);
    invalid(mutex.extend_token("a b", Duration::from_secs(1)).await);
    invalid(mutex.extend_token("t", Duration::ZERO).await);
    invalid(
        Client::builder("redis://127.0.0.1:1")
            .lease(Duration::ZERO)
            .build()
            .map(drop),
    );
    invalid(
        Client::builder("redis://127.0.0.1:1")
            .prefix("")
            .build()
            .map(drop),
    );
    invalid(
        Client::builder("redis://127.0.0.1:1")
            .prefix("a{")
            .build()
            .map(drop),
    );
    invalid(
        Client::builder("redis://127.0.0.1:1")
            .command_timeout(Duration::ZERO)
            .build()
            .map(drop),
    );
    invalid(Client::open("not a url").map(drop));

    let err = client.mutex("").unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    let err = client.mutex(&"n".repeat(MAX_NAME_LEN + 1)).unwrap_err();
    assert!(err.to_string().contains("at most 1024 bytes"), "{err}");
    // Braces are part of any UTF-8 name.
    client.mutex("a{b}").unwrap();
}

#[tokio::test]
async fn redis_out_of_reach_is_a_connection_error() {
    let client = impatient(&unreachable_url());
    let mutex = client.mutex("job").unwrap();
    let err = mutex.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err:?}");
    assert!(err.is_retryable());
    assert!(err.to_string().contains("redis"), "{err}");
    // A wait rides out the outage and, when Redis never answered during the
    // whole wait, ends with the last connection error (not a busy timeout).
    let err = mutex
        .acquire_timeout(Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    // A wait without a bound goes on trying.
    let waiting = tokio::time::timeout(Duration::from_secs(1), mutex.acquire()).await;
    assert!(
        waiting.is_err(),
        "acquire() ended during an outage: {waiting:?}"
    );
    assert!(mutex.inspect().await.unwrap_err().is_connection());
}

/// Holds a 30 s lease, sends `extend(1 s)` while Redis is paused and drops
/// it before the reply (Redis applies it once the pause ends), then waits
/// past the shorter lease. Returns the guard and whether Redis still has
/// the lock.
async fn after_a_dropped_shortening_extend(
    server: &RedisServer,
    watchdog: bool,
) -> (leasehold::MutexGuard, bool) {
    let guard = common::hold(server, Duration::from_secs(30), watchdog).await;
    // Loads the script first: a NOSCRIPT reply would stop the dropped one.
    guard.extend(Duration::from_secs(30)).await.unwrap();
    let _: () = common::cmd(server, &["CLIENT", "PAUSE", "300", "ALL"]).await;
    let dropped = poll_then_drop(guard.extend(Duration::from_secs(1)), 20).await;
    assert!(
        dropped.is_none(),
        "the extend finished during the pause: {dropped:?}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let exists: bool = common::cmd(server, &["EXISTS", "leasehold:{job}"]).await;
    (guard, exists)
}

/// A dropped extend that shortens a fixed lease must bring the reported
/// loss forward: Redis lets the lock go after 1 s, and a guard still
/// claiming its old 30 s would let two holders overlap.
#[tokio::test]
async fn a_dropped_extend_that_shortens_a_fixed_lease_is_trusted_no_longer() {
    let server = RedisServer::start();
    let (guard, exists) = after_a_dropped_shortening_extend(&server, false).await;
    assert!(!exists, "the shortened lease is still in Redis");
    assert!(guard.is_lost(), "valid for {:?} more", guard.valid_for());
}

/// With the watchdog on, the renewal that follows restores the old length:
/// whatever happens, the guard never claims a lock Redis does not hold.
#[tokio::test]
async fn a_dropped_extend_that_shortens_a_renewed_lease_is_renewed_back() {
    let server = RedisServer::start();
    let (guard, exists) = after_a_dropped_shortening_extend(&server, true).await;
    assert!(
        exists || guard.is_lost(),
        "the guard claims a lock Redis let go"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_server_that_comes_back_is_used_again() {
    let mut server = RedisServer::start();
    let client = impatient(&server.url());
    let mutex = client.mutex("job").unwrap();
    common::take_and_release(mutex.try_acquire().await).await;
    server.stop();
    assert!(mutex.try_acquire().await.unwrap_err().is_connection());
    server.restart();
    let mut reconnected = None;
    for _ in 0..100 {
        match mutex.try_acquire().await {
            Ok(Some(guard)) => {
                reconnected = Some(guard);
                break;
            }
            // An attempt cut off by the timeout may hold the lock until its
            // background release lands.
            Ok(None) => {}
            Err(e) => assert!(e.is_connection(), "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    reconnected
        .expect("the client never reconnected")
        .release()
        .await
        .unwrap();
}
