//! Credentials in the URL, and the watchdog's batching, against real servers.

mod common;

use std::time::Duration;

use common::{client_with, cmd, impatient};
use leasehold::{Client, ErrorKind};
use leasehold_testkit::RedisServer;

const LONG: Duration = Duration::from_secs(30);

#[tokio::test]
async fn password_and_acl_user_in_the_url() {
    let server = RedisServer::start_with_args(&["--requirepass", "s3cret"]);
    let port = server.port();
    let with_password = Client::open(&format!("redis://:s3cret@127.0.0.1:{port}")).unwrap();
    let guard = with_password.mutex("job").unwrap().acquire().await.unwrap();
    guard.release().await.unwrap();

    let admin = format!("redis://:s3cret@127.0.0.1:{port}");
    let mut conn = leasehold::redis::Client::open(admin)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = leasehold::redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "locker",
            "on",
            ">pw",
            "~leasehold:*",
            "&leasehold:*",
            "+@all",
        ])
        .query_async(&mut conn)
        .await
        .unwrap();
    let user = Client::open(&format!("redis://locker:pw@127.0.0.1:{port}")).unwrap();
    let guard = user.mutex("job").unwrap().acquire().await.unwrap();
    guard.release().await.unwrap();

    let wrong = Client::open(&format!("redis://locker:nope@127.0.0.1:{port}")).unwrap();
    let err = wrong.mutex("job").unwrap().try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err:?}");
    assert!(err.to_string().contains("credentials"), "{err}");
    assert!(
        !err.to_string().contains("nope"),
        "the message leaks the password: {err}"
    );
}

/// A wrong or missing password is its own kind, not "cannot reach", and
/// is not retried: a wait ends on it at once instead of riding it out.
#[tokio::test]
async fn refused_credentials_are_auth_errors_that_end_a_wait() {
    let server = RedisServer::start_with_args(&["--requirepass", "s3cret"]);
    let port = server.port();
    for (url, says) in [
        (format!("redis://:wrong@127.0.0.1:{port}"), "credentials"),
        (format!("redis://127.0.0.1:{port}"), "requires a password"),
    ] {
        let mutex = Client::open(&url).unwrap().mutex("job").unwrap();
        let err = mutex.try_acquire().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Auth, "{url}: {err:?}");
        assert!(err.is_auth() && !err.is_retryable(), "{url}: {err:?}");
        assert!(err.to_string().contains(says), "{url}: {err}");
        assert!(!err.to_string().contains("cannot reach"), "{err}");
        // Waits, bounded or not, end on it rather than retrying it.
        let err = mutex.acquire_timeout(LONG).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Auth, "{url}: {err:?}");
        let err = tokio::time::timeout(LONG, mutex.acquire())
            .await
            .expect("the wait retried refused credentials")
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Auth, "{url}: {err:?}");
    }
}

/// A database number the server does not have is a configuration error
/// that says what to fix, and ends a wait too.
#[tokio::test]
async fn a_database_out_of_range_is_a_config_error() {
    let server = RedisServer::start();
    let mutex = Client::open(&format!("{}/99", server.url()))
        .unwrap()
        .mutex("job")
        .unwrap();
    let err = mutex.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err:?}");
    assert!(err.is_config() && !err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("database number"), "{err}");
    let err = tokio::time::timeout(LONG, mutex.acquire())
        .await
        .expect("the wait retried a refused database")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err:?}");
}

#[tokio::test]
async fn the_watchdog_renews_many_leases_in_shared_round_trips() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(3);
    let client = client_with(&server, lease, true);
    let mut guards = Vec::new();
    for i in 0..50 {
        let mutex = client.mutex(&format!("job-{i}")).unwrap();
        guards.push(mutex.acquire().await.unwrap());
    }
    let _: () = cmd(&server, &["CONFIG", "RESETSTAT"]).await;
    // Past the lease, so every guard lives only if it was renewed.
    tokio::time::sleep(lease + lease / 6).await;
    let renewals = common::evalsha_calls(&server).await;
    // Every lease was renewed several times, in rounds that cover them all.
    assert!(guards.iter().all(|g| !g.is_lost()));
    assert!(renewals >= 1, "no renewal was sent");
    assert!(
        renewals < 50,
        "{renewals} renew scripts for 50 leases over ~3 renewal intervals: not batched"
    );
    for guard in guards {
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn tls_with_rediss_urls() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let tls_port = leasehold_testkit::free_port().to_string();
    let cert = format!("{fixtures}/server.pem");
    let key = format!("{fixtures}/server-key.pem");
    let ca = std::fs::read(format!("{fixtures}/ca.pem")).unwrap();
    let started = RedisServer::try_start_with_args(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-auth-clients",
        "no",
    ]);
    let _server = match started {
        Ok(server) => server,
        Err(e) if e.is_tls_unsupported() => {
            eprintln!(
                "skipped: this redis-server has no TLS support (it was built without \
                 BUILD_TLS=yes), so there is no rediss:// server to test against"
            );
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let url = format!("rediss://127.0.0.1:{tls_port}");

    let verified = Client::builder(url.as_str())
        .tls_root_certificate(ca)
        .build()
        .unwrap();
    let guard = verified.mutex("job").unwrap().acquire().await.unwrap();
    assert!(guard.fence() > 0);
    guard.release().await.unwrap();

    let insecure = Client::open(&format!("{url}/#insecure")).unwrap();
    let guard = insecure.mutex("job").unwrap().acquire().await.unwrap();
    guard.release().await.unwrap();

    // The public roots do not know the test CA: refused, without a panic,
    // as a setting to fix.
    let untrusted = impatient(&url);
    let err = untrusted
        .mutex("job")
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert!(err.is_config(), "{err:?}");
    assert!(err.to_string().contains("TLS handshake"), "{err}");

    // A plain client on the TLS port is reset: a setting to fix, said so.
    let plain = impatient(&format!("redis://127.0.0.1:{tls_port}"));
    let err = plain.mutex("job").unwrap().try_acquire().await.unwrap_err();
    assert!(err.is_config(), "{err:?}");
    assert!(!err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("rediss://"), "{err}");
    // So does a wait: it ends at once instead of retrying (a wait that
    // retried would end as a timeout, not a setting to fix).
    let err = plain
        .mutex("job")
        .unwrap()
        .acquire_timeout(Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(err.is_config(), "{err:?}");
}

#[tokio::test]
async fn a_tls_client_on_a_plain_port_is_told_to_use_redis_urls() {
    let server = RedisServer::start();
    let url = server.url().replacen("redis://", "rediss://", 1);
    let client = impatient(&format!("{url}/#insecure"));
    let err = client
        .mutex("job")
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert!(err.is_config(), "{err:?}");
    assert!(!err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("redis:// URL"), "{err}");
}

#[test]
fn flush_lets_background_releases_finish_before_the_runtime_stops() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = client_with(&server, Duration::from_secs(60), true);
        let guard = client.mutex("job").unwrap().acquire().await.unwrap();
        drop(guard);
        client.flush().await;
    });
    drop(runtime);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let info = common::client(&server)
            .mutex("job")
            .unwrap()
            .inspect()
            .await
            .unwrap();
        assert!(!info.held, "the dropped guard's release was cut off");
    });
}

#[test]
fn a_client_moved_to_a_new_runtime_still_renews() {
    let server = RedisServer::start();
    let client = client_with(&server, Duration::from_secs(2), true);
    let first = tokio::runtime::Runtime::new().unwrap();
    first.block_on(async {
        let guard = client.mutex("a").unwrap().acquire().await.unwrap();
        guard.release().await.unwrap();
    });
    drop(first);
    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        let mut guard = None;
        // The connection made on the first runtime died with it; the next
        // attempts reconnect.
        for _ in 0..20 {
            match client.mutex("b").unwrap().acquire().await {
                Ok(g) => {
                    guard = Some(g);
                    break;
                }
                Err(e) => assert!(e.is_connection(), "{e:?}"),
            }
        }
        let guard = guard.expect("never reconnected");
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(
            !guard.is_lost(),
            "nothing renewed the lease on the new runtime"
        );
        guard.release().await.unwrap();
    });
}

#[tokio::test]
async fn one_bad_key_does_not_sink_the_renewal_of_the_others() {
    let server = RedisServer::start();
    let client = client_with(&server, Duration::from_secs(2), true);
    let healthy = client.mutex("healthy").unwrap().acquire().await.unwrap();
    let replaced = client.mutex("replaced").unwrap().acquire().await.unwrap();
    let _: i64 = cmd(&server, &["DEL", "leasehold:{replaced}"]).await;
    let _: i64 = cmd(&server, &["HSET", "leasehold:{replaced}", "f", "v"]).await;
    tokio::time::timeout(Duration::from_secs(30), replaced.lost())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        !healthy.is_lost(),
        "a broken neighbour sank a healthy renewal"
    );
    healthy.release().await.unwrap();
}

#[tokio::test]
async fn refused_renewals_back_off_and_the_lease_is_lost_at_its_deadline() {
    let server = RedisServer::start();
    let client = client_with(&server, Duration::from_secs(3), true);
    let guard = client.mutex("job").unwrap().acquire().await.unwrap();
    // Every write is refused from now on: NOREPLICAS.
    let _: () = cmd(&server, &["CONFIG", "SET", "min-replicas-to-write", "1"]).await;
    let _: () = cmd(&server, &["CONFIG", "RESETSTAT"]).await;
    tokio::time::timeout(Duration::from_secs(30), guard.lost())
        .await
        .unwrap();
    let tries = common::evalsha_calls(&server).await;
    assert!(tries >= 1, "no renewal was tried");
    assert!(
        tries < 40,
        "{tries} renewal tries in one lease: not backing off"
    );
    let err = guard.extend(Duration::from_secs(5)).await.unwrap_err();
    assert!(err.is_not_held(), "{err:?}");
}

/// Redis 7 gives a new ACL user no channels. Its waiters cannot subscribe,
/// so they wake on their timers alone: without a stream of reconnects, and
/// without waiting on a confirmation that will never come.
#[tokio::test]
async fn a_user_without_channel_access_waits_on_timers_alone() {
    let server = RedisServer::start();
    let _: () = cmd(
        &server,
        &[
            "ACL",
            "SETUSER",
            "locker",
            "on",
            ">pw",
            "~leasehold:*",
            "resetchannels",
            "+@all",
        ],
    )
    .await;
    let url = format!("redis://locker:pw@127.0.0.1:{}", server.port());
    // A long command timeout, so that waiting on a confirmation would show.
    let user = Client::builder(url)
        .command_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mutex = user.mutex("job").unwrap();
    let held = common::hold(&server, Duration::from_millis(1500), false).await;
    let _: () = cmd(&server, &["CONFIG", "RESETSTAT"]).await;

    let started = std::time::Instant::now();
    let err = mutex
        .acquire_timeout(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a 300 ms wait took {:?}",
        started.elapsed()
    );
    // The holder's fixed lease runs out and the waiter's timer catches it,
    // without first waiting out a command timeout for a confirmation.
    let guard = mutex
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(guard.fence() > held.fence());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a lease of 1.5 s was caught after {:?}",
        started.elapsed()
    );

    let stats: String = cmd(&server, &["INFO", "stats"]).await;
    let connections: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .map(|n| n.trim().parse().unwrap())
        .unwrap();
    // The user's command connection, its subscriber connection, and the one
    // that asks: a subscriber that reconnects on refusal makes more.
    assert!(connections <= 4, "{connections} connections in two waits");
    guard.release().await.unwrap();
}
