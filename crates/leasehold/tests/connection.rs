//! Credentials in the URL, servers the URL should not name (a replica, a
//! Sentinel, another cluster node), servers not ready yet, and the
//! watchdog's batching, against real servers.

mod common;

use std::time::Duration;

use common::{client_with, cmd, eventually, impatient, raw};
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
            // Redis 6.2 gives a new user every channel: start from none.
            "resetchannels",
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

/// A user that may not call or load functions takes and hands on locks
/// with scripts, as on a server that has no functions.
#[tokio::test]
async fn a_user_refused_functions_takes_locks_with_scripts() {
    let server = RedisServer::start();
    if !common::has_functions(&server).await {
        // No functions at all: every other test runs on scripts alone.
        return;
    }
    let _: () = cmd(
        &server,
        &[
            "ACL",
            "SETUSER",
            "scripter",
            "on",
            ">pw",
            "~leasehold:*",
            "resetchannels",
            "&leasehold:*",
            "+@all",
            "-fcall",
            "-function",
        ],
    )
    .await;
    let url = format!("redis://scripter:pw@127.0.0.1:{}", server.port());
    let holder = Client::builder(&url).lease(LONG).build().unwrap();
    let waiter = Client::builder(&url).lease(LONG).build().unwrap();
    let mutex = holder.fair_mutex("job").unwrap();
    let guard = mutex.acquire().await.unwrap();
    let waiting = tokio::spawn({
        let mutex = waiter.fair_mutex("job").unwrap();
        async move { mutex.acquire_timeout(LONG).await.map(|g| g.fence()) }
    });
    eventually("the waiter to queue", || async {
        let queued: u64 = cmd(&server, &["ZCARD", "leasehold:{job}:q"]).await;
        queued == 1
    })
    .await;
    let fence = guard.fence();
    guard.release().await.unwrap();
    let handed = waiting.await.unwrap().unwrap();
    assert!(handed > fence, "{handed} <= {fence}");
    assert_eq!(common::command_calls(&server, "fcall").await, 0);
    assert!(common::command_calls(&server, "evalsha").await >= 3);
}

/// A wrong or missing password is its own kind, not "cannot reach", and
/// is not retried: a wait ends on it at once instead of riding it out.
#[tokio::test]
async fn refused_credentials_are_auth_errors_that_end_a_wait() {
    let server = RedisServer::start_with_args(&["--requirepass", "s3cret"]);
    let port = server.port();
    let said = "Password authentication failed";
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
        // What Redis said, in its words: no dump of the client's pipeline
        // or the names of its error kinds.
        let source = std::error::Error::source(&err).unwrap().to_string();
        assert!(
            source == "NOAUTH Authentication required." || source == said,
            "{url}: {source}"
        );
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

/// A URL that names a replica is a setting to fix, said so: writes go to
/// the master. A wait ends on it rather than retrying it.
#[tokio::test]
async fn a_replica_url_is_a_config_error_that_points_at_the_master() {
    // No wait for more replicas before the first sync.
    let master = RedisServer::start_with_args(&["--repl-diskless-sync-delay", "0"]);
    let replica =
        RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    // Until its first sync a replica may answer LOADING, which passes.
    let synced = &replica;
    eventually("the replica's first sync", move || async move {
        synced
            .command(&["INFO", "replication"])
            .unwrap()
            .contains("master_link_status:up")
    })
    .await;
    let mutex = Client::open(&replica.url()).unwrap().mutex("job").unwrap();
    let err = mutex.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err:?}");
    assert!(err.is_config() && !err.is_retryable(), "{err:?}");
    let expected = format!(
        "redis at {} is a read-only replica and refused acquire: point the URL at its master",
        replica.addr()
    );
    assert!(err.to_string().starts_with(&expected), "{err}");
    let err = tokio::time::timeout(LONG, mutex.acquire())
        .await
        .expect("the wait retried a replica's refusal")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err:?}");
}

/// A URL that names a Sentinel is found out on connect (its INFO says so),
/// before any lock command is sent.
#[tokio::test]
async fn a_sentinel_url_is_a_config_error() {
    let sentinels = leasehold_testkit::Sentinels::start(0, 1);
    let sentinel = &sentinels.sentinels()[0];
    let mutex = Client::open(&sentinel.url()).unwrap().mutex("job").unwrap();
    let err = mutex.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err:?}");
    assert!(!err.is_retryable(), "{err:?}");
    let expected = format!(
        "redis at {} is a Sentinel, not a data node: point the URL at the master it watches",
        sentinel.addr()
    );
    assert!(err.to_string().starts_with(&expected), "{err}");
    let err = tokio::time::timeout(LONG, mutex.acquire())
        .await
        .expect("the wait retried a Sentinel")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err:?}");
}

/// Two cluster nodes, one holding every slot. A node that serves no slot
/// is not ready while alone (it passes); once it has met the other, a
/// client that knows only it learns the slot map and is served. A slot
/// moving away answers TRYAGAIN while the lock's keys are on both sides (it
/// passes), and ASK once they have all left, which is followed.
#[tokio::test]
async fn a_cluster_not_ready_passes_and_redirects_are_followed() {
    let serving = RedisServer::start_cluster_node();
    let empty = RedisServer::start_cluster_node();
    assert_eq!(empty.command(&["CLUSTER", "RESET", "HARD"]).unwrap(), "OK");
    let on_empty = impatient(&empty.url());
    let err = on_empty
        .mutex("job")
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err:?}");
    assert!(err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("serves hash slot"), "{err}");

    let port = empty.port().to_string();
    let bus = empty
        .cluster_bus_port()
        .expect("a cluster node has a bus port")
        .to_string();
    assert_eq!(
        serving
            .command(&["CLUSTER", "MEET", "127.0.0.1", &port, &bus])
            .unwrap(),
        "OK"
    );
    // Its slot map names the other node, with every slot, once it has met
    // it, before its own state turns ok: all a client needs of a seed.
    let joined = &empty;
    let serving_port = serving.port().to_string();
    let serving_port = &serving_port;
    eventually("the empty node to learn the slots", move || async move {
        let nodes = joined.command(&["CLUSTER", "NODES"]).unwrap();
        nodes
            .lines()
            .any(|node| node.contains(&format!(":{serving_port}@")) && node.ends_with(" 0-16383"))
    })
    .await;
    let mutex = on_empty.mutex("job").unwrap();
    let guard = tokio::time::timeout(LONG, mutex.acquire())
        .await
        .expect("the wait learnt where the slot is")
        .unwrap();
    assert_eq!(
        serving.command(&["EXISTS", "leasehold:{job}"]).unwrap(),
        "1",
        "the lock lives on the node that serves its slot"
    );
    guard.release().await.unwrap();

    eventually("the empty node's cluster to be ok", move || async move {
        joined
            .command(&["CLUSTER", "INFO"])
            .unwrap()
            .contains("cluster_state:ok")
    })
    .await;
    let empty_id = empty.command(&["CLUSTER", "MYID"]).unwrap();
    let serving_id = serving.command(&["CLUSTER", "MYID"]).unwrap();
    let on_serving = impatient(&serving.url());
    let migrate = |name: &str| {
        let slot = serving.command(&["CLUSTER", "KEYSLOT", name]).unwrap();
        let reply = empty
            .command(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &serving_id])
            .unwrap();
        assert_eq!(reply, "OK");
        let reply = serving
            .command(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &empty_id])
            .unwrap();
        assert_eq!(reply, "OK");
        slot
    };
    // The fence counter stays behind, the lock's other keys are not there.
    assert_eq!(
        serving
            .command(&["SET", "leasehold:{half}:fence", "7"])
            .unwrap(),
        "OK"
    );
    migrate("half");
    let err = on_serving
        .mutex("half")
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err:?}");
    assert!(err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("(TRYAGAIN)"), "{err}");

    // A held lock whose keys have moved while its slot still migrates: a
    // renewal (one key) follows the source's ASK to the target; taking the
    // lock (several keys, some not there yet) is TRYAGAIN until the move
    // is done, which a wait rides out.
    let held = on_serving
        .mutex("gone")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("the lock is free");
    let slot = migrate("gone");
    let empty_port = empty.port().to_string();
    for key in ["leasehold:{gone}", "leasehold:{gone}:fence"] {
        let reply = serving
            .command(&["MIGRATE", "127.0.0.1", &empty_port, key, "0", "5000"])
            .unwrap();
        assert_eq!(reply, "OK");
    }
    held.extend(Duration::from_secs(20))
        .await
        .expect("the renewal followed ASK to where the key is now");
    let waiting = tokio::spawn({
        let mutex = on_serving.mutex("gone").unwrap();
        async move { mutex.acquire_timeout(LONG).await }
    });
    for node in [&serving, &empty] {
        let reply = node
            .command(&["CLUSTER", "SETSLOT", &slot, "NODE", &empty_id])
            .unwrap();
        assert_eq!(reply, "OK");
    }
    let pttl: i64 = empty
        .command(&["PTTL", "leasehold:{gone}"])
        .unwrap()
        .parse()
        .unwrap();
    // The client's lease is 30 s: at most 20 s left is the extend's doing.
    assert!(
        (10_000..=20_000).contains(&pttl),
        "the extend reached the target: {pttl}"
    );
    held.release().await.expect("released where the slot went");
    let taken = waiting
        .await
        .unwrap()
        .expect("the waiter rode out the move");
    assert!(taken.fence() > 0);
    taken.release().await.unwrap();
    assert_eq!(empty.command(&["EXISTS", "leasehold:{gone}"]).unwrap(), "0");
}

/// A server not ready yet passes: a replica cut off from its master
/// (MASTERDOWN), and a server busy with a long script (BUSY).
#[tokio::test]
async fn servers_not_ready_yet_are_transient() {
    // Made a replica once started: a replica without its master answers
    // even PING with MASTERDOWN.
    let cut_off = RedisServer::start();
    let nowhere = leasehold_testkit::free_port().to_string();
    for setting in [
        &["CONFIG", "SET", "replica-serve-stale-data", "no"][..],
        &["REPLICAOF", "127.0.0.1", &nowhere],
    ] {
        assert_eq!(cut_off.command(setting).unwrap(), "OK");
    }
    let err = impatient(&cut_off.url())
        .mutex("job")
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err:?}");
    assert!(err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("(MASTERDOWN)"), "{err}");

    // Redis 7 renamed lua-time-limit to busy-reply-threshold.
    let threshold = if leasehold_testkit::server_version().unwrap().at_least(7, 0) {
        "--busy-reply-threshold"
    } else {
        "--lua-time-limit"
    };
    let busy = RedisServer::start_with_args(&[threshold, "50"]);
    let mut looping = raw(&busy).await;
    let script = tokio::spawn(async move {
        leasehold::redis::cmd("EVAL")
            .arg("while true do end")
            .arg(0)
            .query_async::<leasehold::redis::Value>(&mut looping)
            .await
    });
    let server = &busy;
    eventually("the script to keep the server busy", move || async move {
        server
            .command(&["PING"])
            .unwrap()
            .starts_with("(error) BUSY")
    })
    .await;
    let err = impatient(&busy.url())
        .mutex("job")
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err:?}");
    assert!(err.is_retryable(), "{err:?}");
    assert!(
        err.to_string().contains("is busy running a script"),
        "{err}"
    );
    assert_eq!(busy.command(&["SCRIPT", "KILL"]).unwrap(), "OK");
    let killed = script.await.unwrap();
    assert!(killed.is_err(), "{killed:?}");
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

/// A client that never reached Redis gives up a wait after its connect
/// timeout, saying why; one that had reached it rides out an outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_address_ends_a_wait_but_an_outage_does_not() {
    for url in [
        leasehold_testkit::unreachable_url(),
        "redis://nosuchhost.invalid:6379".to_owned(),
    ] {
        let client = Client::builder(url.clone())
            .command_timeout(Duration::from_millis(300))
            .connect_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        let err = tokio::time::timeout(LONG, client.mutex("job").unwrap().acquire())
            .await
            .expect("a wait on a wrong address ended")
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Connection, "{url}: {err:?}");
        assert!(
            err.to_string().contains("without reaching redis once"),
            "{url}: {err}"
        );
    }

    let mut server = RedisServer::start();
    let client = Client::builder(server.url())
        .command_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let mutex = client.mutex("job").unwrap();
    mutex
        .try_acquire()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    server.stop();
    let waiting = tokio::spawn(async move { mutex.acquire_timeout(LONG).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.restart();
    let guard = waiting
        .await
        .unwrap()
        .expect("a client that had reached redis rides out the outage");
    guard.release().await.unwrap();
}

/// A port where something else than Redis listens: every connection is
/// read from once and answered with `reply`, then closed (`close`) or
/// kept open. Returns its URL without the scheme (`127.0.0.1:PORT`).
fn not_redis(reply: &'static [u8], close: bool) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let _ = stream.write_all(reply);
                if !close {
                    // Held open until the client goes away.
                    while matches!(stream.read(&mut request), Ok(n) if n > 0) {}
                }
            });
        }
    });
    addr.to_string()
}

const HTTP_400: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 11\r\nConnection: \
      close\r\n\r\nBad Request";

/// A port that answers HTTP, or bytes of no protocol at all, is named not
/// a Redis server, as a setting to fix: a wait ends on it at once, with no
/// retry until the connect timeout.
#[tokio::test]
async fn a_port_that_is_not_redis_is_named_so() {
    let cases = [
        (not_redis(HTTP_400, true), "redis", Some("HTTP")),
        (not_redis(HTTP_400, false), "redis", Some("HTTP")),
        (not_redis(b"\x00\x01garbage\xff\xfe", false), "redis", None),
        (not_redis(b"\x00\x01garbage\xff\xfe", true), "redis", None),
        // TLS asked of a web server's plain port.
        (not_redis(HTTP_400, true), "rediss", Some("HTTP")),
    ];
    for (addr, scheme, answered) in cases {
        let client = Client::builder(format!("{scheme}://{addr}/#insecure"))
            .connect_timeout(LONG)
            .build()
            .unwrap();
        let mutex = client.mutex("job").unwrap();
        let err = mutex.try_acquire().await.unwrap_err();
        assert_eq!(
            err.kind(),
            ErrorKind::Config,
            "{scheme} {answered:?}: {err:?}"
        );
        assert!(!err.is_transient(), "{err:?}");
        let said = err.to_string();
        assert!(
            said.contains(&format!("{addr} is not a Redis server")),
            "{said}"
        );
        match answered {
            Some(protocol) => assert!(said.contains(&format!("answered {protocol}")), "{said}"),
            None => assert!(said.contains("not the Redis protocol"), "{said}"),
        }
        assert!(!said.contains("TLS on this port"), "{said}");
        // A wait does not retry it until the connect timeout: a retried
        // fault would end as a Connection error after the 30 s.
        let err = mutex.acquire_timeout(LONG * 2).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err:?}");
    }
}
