//! The lock family behind Redis Sentinel (`redis+sentinel://`): every
//! primitive on the master the sentinels name, and waiters, holders,
//! watchers and fences across a failover by command and across a master
//! killed.

mod common;

use std::time::Duration;

use leasehold::{Client, ErrorKind};
use leasehold_testkit::{RedisServer, Sentinels};

/// Long enough for any step that should succeed; a hang fails the test.
const LONG: Duration = Duration::from_secs(30);

fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&["EXISTS", key]).unwrap() == "1"
}

/// Runs a blocking step of the test kit (a failover, a kill) on this
/// worker thread while the other keeps the client's tasks going.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Waits (bounded) until some client waits in the queue of `name`.
async fn queued(client: &Client, name: &str) {
    let mutex = client.mutex(name).unwrap();
    tokio::time::timeout(LONG, async {
        while mutex.inspect().await.unwrap().waiting_clients == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a waiter queues");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_works_through_the_sentinels() {
    let group = Sentinels::start(1, 3);
    let client = Client::open(&group.url()).unwrap();
    let master = group.master();

    let guard = client.mutex("m").unwrap().acquire().await.unwrap();
    assert!(
        exists(master, "leasehold:{m}"),
        "the mutex is on the master"
    );
    assert!(client.mutex("m").unwrap().inspect().await.unwrap().held);
    assert!(client
        .mutex("m")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    guard.extend(Duration::from_secs(20)).await.unwrap();
    guard.release().await.unwrap();
    assert!(!exists(master, "leasehold:{m}"));

    let fair = client.fair_mutex("f").unwrap().acquire().await.unwrap();
    fair.release().await.unwrap();

    let reentrant = client.reentrant_mutex("r").unwrap();
    let outer = reentrant.acquire().await.unwrap();
    let inner = reentrant.try_acquire().await.unwrap().expect("a reentry");
    assert_eq!(inner.fence(), outer.fence());
    inner.release().await.unwrap();
    outer.release().await.unwrap();

    let rw = client.rw_lock("rw").unwrap();
    let read = rw.read().acquire().await.unwrap();
    read.release().await.unwrap();
    let write = rw.write().acquire().await.unwrap();
    write.release().await.unwrap();

    let semaphore = client.semaphore("s", 2).unwrap();
    let permits = semaphore.acquire_many(2).await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 0);
    permits.release().await.unwrap();

    // A waiter is woken by the release's notification on the master.
    let holder = client.mutex("w").unwrap().acquire().await.unwrap();
    let other = Client::open(&group.url()).unwrap();
    let waiter = tokio::spawn(async move {
        other
            .mutex("w")
            .unwrap()
            .acquire_timeout(LONG)
            .await
            .map(|g| g.fence())
    });
    queued(&client, "w").await;
    let fence = holder.fence();
    holder.release().await.unwrap();
    assert!(waiter.await.unwrap().unwrap() > fence);
}

/// A holder and a waiter ride out a failover by command, then a master
/// killed: the waiter's wait goes on, the release reaches the new master,
/// and fences only grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_and_holders_follow_failovers() {
    let mut group = Sentinels::start(2, 3);
    let url = group.url();
    let holder_client = Client::open(&url).unwrap();
    let waiter_client = Client::open(&url).unwrap();
    let holder = holder_client.mutex("job").unwrap().acquire().await.unwrap();
    let first_fence = holder.fence();
    let waiter = tokio::spawn(async move {
        let mutex = waiter_client.mutex("job").unwrap();
        let guard = mutex.acquire_timeout(LONG).await?;
        Ok::<_, leasehold::Error>((waiter_client, guard))
    });
    queued(&holder_client, "job").await;

    let old = group.master_addr();
    blocking(|| group.failover());
    let new = group.master_addr();
    assert_ne!(old, new);
    assert!(
        !waiter.is_finished(),
        "the wait went on across the failover"
    );
    holder.release().await.unwrap();
    let (waiter_client, guard) = waiter.await.unwrap().unwrap();
    assert!(guard.fence() > first_fence, "fences grow across a failover");
    assert!(
        exists(group.master(), "leasehold:{job}"),
        "the waiter holds the lock on the new master"
    );

    // Now the master dies: the next holder's release and a new waiter
    // reach the master that replaces it.
    let second_fence = guard.fence();
    let next = Client::open(&url).unwrap();
    let waiting = tokio::spawn(async move {
        let guard = next.mutex("job").unwrap().acquire_timeout(LONG).await?;
        Ok::<_, leasehold::Error>((next, guard))
    });
    queued(&waiter_client, "job").await;
    blocking(|| group.kill_master());
    assert_ne!(group.master_addr(), new);
    guard.release().await.unwrap();
    let (_next, third) = waiting.await.unwrap().unwrap();
    assert!(
        third.fence() > second_fence,
        "fences grow across a master killed"
    );
    assert!(
        waiter_client
            .mutex("job")
            .unwrap()
            .inspect()
            .await
            .unwrap()
            .held
    );
    assert!(exists(group.master(), "leasehold:{job}"));
    third.release().await.unwrap();
}

/// A watcher that is no waiter follows a failover by command: it sees the
/// lease that survived it on the new master, and hears its release there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_follows_a_sentinel_failover() {
    let mut group = Sentinels::start(1, 3);
    let url = group.url();
    let holder = Client::open(&url).unwrap();
    let watcher = common::impatient(&url);
    let guard = holder.mutex("job").unwrap().acquire().await.unwrap();
    let mut watch = watcher.mutex("job").unwrap().watch().unwrap();
    assert_eq!(watch.holders().await.unwrap().len(), 1);
    let old = group.master_addr();
    blocking(|| group.failover());
    assert_ne!(group.master_addr(), old);
    let seen = common::holders_after_failover(&mut watch, LONG).await;
    assert_eq!(seen.len(), 1, "the lease survived the failover");
    assert_eq!(seen[0].fence, Some(guard.fence()));
    let fence = guard.fence();
    guard.release().await.unwrap();
    let event = tokio::time::timeout(LONG, watch.next())
        .await
        .expect("the watch heard nothing")
        .unwrap();
    assert_eq!(event.ended, leasehold::LeaseEnd::Released);
    assert_eq!(event.fence, fence);
    watch.close().await.unwrap();
}

/// With the restart grace on, the master that replaces one this client
/// used grants nothing until the grace has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_holds_back_a_new_master() {
    let mut group = Sentinels::start(1, 3);
    let grace = Duration::from_secs(4);
    let client = Client::builder(group.url())
        .restart_grace(grace)
        .build()
        .unwrap();
    let mutex = client.mutex("job").unwrap();
    // The servers are younger than the grace at first: a wait rides it out.
    let guard = mutex.acquire_timeout(LONG).await.unwrap();
    let fence = guard.fence();
    guard.release().await.unwrap();

    blocking(|| group.failover());
    assert!(
        mutex.try_acquire().await.unwrap().is_none(),
        "a new master grants nothing within the grace"
    );
    let guard = mutex.acquire_timeout(LONG).await.unwrap();
    assert!(guard.fence() > fence);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_sentinel_url_that_names_no_master_is_refused() {
    for url in [
        "redis+sentinel://127.0.0.1:1",
        "redis+sentinel://127.0.0.1:1/",
        "redis+sentinel:///mymaster",
        "redis+sentinel://127.0.0.1:1/mymaster/zero",
    ] {
        let err = Client::open(url).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{url}: {err:?}");
        assert!(err.to_string().contains("redis+sentinel://"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_name_the_sentinels_do_not_watch_is_a_config_error() {
    let group = Sentinels::start(0, 1);
    let url = group.url();
    let (sentinels, _) = url.rsplit_once('/').unwrap();
    let client = Client::open(&format!("{sentinels}/nosuchmaster")).unwrap();
    let err = client
        .mutex("job")
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err:?}");
    assert!(
        err.to_string()
            .contains("watch no master named \"nosuchmaster\""),
        "{err}"
    );
}

/// `with_replica_ack`: with the replica up, a grant is on it when the
/// acquisition returns; with it stopped, the grant is undone, the error
/// says how many acknowledged, and nothing stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_ack_holds_only_what_the_replicas_acknowledged() {
    let mut group = Sentinels::start(1, 1);
    let client = Client::open(&group.url()).unwrap();
    let ack = Duration::from_millis(300);
    let mutex = client
        .mutex("job")
        .unwrap()
        .with_replica_ack(1, ack)
        .unwrap();
    let guard = mutex.acquire().await.unwrap();
    let replica = group.replicas()[0];
    assert!(
        exists(replica, "leasehold:{job}"),
        "acknowledged by the replica"
    );
    guard.extend(Duration::from_secs(20)).await.unwrap();

    blocking(|| group.stop_replica(0));
    let err = guard.extend(Duration::from_secs(20)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReplicasMissing, "{err:?}");
    assert!(err.is_replicas_missing() && err.is_retryable());
    assert!(err.to_string().contains("stays extended"), "{err}");
    guard.release().await.unwrap();

    let err = mutex.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReplicasMissing, "{err:?}");
    assert!(
        err.to_string().contains(
            "lock \"job\" was taken on the master, but only 0 of the 1 replica asked for \
             acknowledged it within 300ms, so it was released and is not held"
        ),
        "{err}"
    );
    assert!(
        !exists(group.master(), "leasehold:{job}"),
        "nothing is held"
    );

    // A wait tries again within its bound, and ends on the same error.
    let err = mutex
        .acquire_timeout(Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(err.is_replicas_missing(), "{err:?}");
    assert!(
        !exists(group.master(), "leasehold:{job}"),
        "nothing is held"
    );
    assert!(!mutex.inspect().await.unwrap().held);

    // With the acknowledgement off, the lock is taken as before.
    let off = Client::builder(group.url())
        .replica_ack(leasehold::ReplicaAck::Off)
        .build()
        .unwrap();
    let guard = off.mutex("job").unwrap().try_acquire().await.unwrap();
    assert!(guard.is_some());
}

#[test]
fn a_replica_timeout_out_of_range_is_refused() {
    let client = Client::open("redis://127.0.0.1:1").unwrap();
    for timeout in [Duration::ZERO, Duration::from_secs(61)] {
        let err = client
            .mutex("job")
            .unwrap()
            .with_replica_ack(1, timeout)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err:?}");
    }
}

/// The data nodes ask for one password, the sentinel for another: the
/// URL's userinfo is the data nodes', and the sentinel's goes in
/// `sentinel_password` (as a parameter, percent-encoded, or from the
/// builder). Without it, or with a wrong one, the client is told that the
/// sentinels refused it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_and_data_nodes_take_credentials_of_their_own() {
    let group = Sentinels::start(1, 1);
    let sentinel = &group.sentinels()[0];
    let name = group.master_name();
    // The replica follows with the password, the sentinel watches with
    // it, then both data nodes ask for it.
    for server in group.replicas() {
        assert_eq!(
            server
                .command(&["CONFIG", "SET", "masterauth", "data pw"])
                .unwrap(),
            "OK"
        );
    }
    assert_eq!(
        sentinel
            .command(&["SENTINEL", "SET", name, "auth-pass", "data pw"])
            .unwrap(),
        "OK"
    );
    for server in group.servers() {
        assert_eq!(
            server
                .command(&["CONFIG", "SET", "requirepass", "data pw"])
                .unwrap(),
            "OK"
        );
    }
    assert_eq!(
        sentinel
            .command(&["ACL", "SETUSER", "default", "resetpass", ">s@cret pw"])
            .unwrap(),
        "OK"
    );
    let hosts = format!("127.0.0.1:{}", sentinel.port());
    let data = "redis+sentinel://:data%20pw@";

    let by_url = Client::open(&format!(
        "{data}{hosts}/{name}?sentinel_password=s%40cret%20pw"
    ))
    .unwrap();
    let guard = by_url.mutex("job").unwrap().acquire().await.unwrap();
    guard.release().await.unwrap();

    let by_builder = Client::builder(format!("{data}{hosts}/{name}"))
        .sentinel_username("default")
        .sentinel_password("s@cret pw")
        .build()
        .unwrap();
    let guard = by_builder.mutex("job").unwrap().acquire().await.unwrap();
    guard.release().await.unwrap();

    for url in [
        format!("{data}{hosts}/{name}"),
        format!("{data}{hosts}/{name}?sentinel_password=wrong"),
    ] {
        let client = Client::builder(url.as_str())
            .connect_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let err = client
            .mutex("job")
            .unwrap()
            .try_acquire()
            .await
            .unwrap_err();
        assert!(err.is_auth(), "{url}: {err:?}");
    }
    // The sentinel's password is not the data nodes'.
    let swapped = Client::builder(format!(
        "redis+sentinel://:s%40cret%20pw@{hosts}/{name}?sentinel_password=data%20pw"
    ))
    .connect_timeout(Duration::from_secs(2))
    .build()
    .unwrap();
    let err = swapped
        .mutex("job")
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert!(err.is_auth(), "{err:?}");
}

#[test]
fn sentinel_credentials_that_cannot_be_used_are_refused() {
    for url in [
        "redis+sentinel://127.0.0.1:1/mymaster?sentinel_passwd=x",
        "redis+sentinel://127.0.0.1:1/mymaster?sentinel_password=%zz",
        "redis+sentinel://127.0.0.1:1/mymaster?sentinel_username=me",
    ] {
        let err = Client::open(url).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{url}: {err:?}");
        assert!(err.to_string().contains("sentinel"), "{err}");
    }
    let err = Client::builder("redis://127.0.0.1:1")
        .sentinel_password("pw")
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err:?}");
    assert!(err.to_string().contains("names no sentinels"), "{err}");
}

/// A sentinel process started by hand: the test kit's sentinels listen on
/// plain TCP alone. Killed on drop.
struct TlsSentinel(std::process::Child, std::path::PathBuf);

impl Drop for TlsSentinel {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// `rediss+sentinel://`: a sentinel that listens on TLS alone names a
/// master that listens on TLS (and talks TLS to it); the client reaches
/// both with TLS, trusting the test CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_the_sentinels_and_the_master() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let (cert, key, ca) = (
        format!("{fixtures}/server.pem"),
        format!("{fixtures}/server-key.pem"),
        format!("{fixtures}/ca.pem"),
    );
    let tls = |port: &str| {
        [
            "--tls-port".to_owned(),
            port.to_owned(),
            "--tls-cert-file".to_owned(),
            cert.clone(),
            "--tls-key-file".to_owned(),
            key.clone(),
            "--tls-ca-cert-file".to_owned(),
            ca.clone(),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ]
    };
    let master_tls = leasehold_testkit::free_port().to_string();
    let args = tls(&master_tls);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _master = match RedisServer::try_start_with_args(&args) {
        Ok(server) => server,
        Err(e) if e.is_tls_unsupported() => {
            eprintln!(
                "skipped: this redis-server has no TLS support (it was built without \
                 BUILD_TLS=yes), so there is no rediss+sentinel:// group to test against"
            );
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let dir = std::env::temp_dir().join(format!(
        "leasehold-tls-sentinel-{}-{master_tls}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port 0\ndir {}\ntls-replication yes\n\
             sentinel monitor mymaster 127.0.0.1 {master_tls} 1\n",
            dir.display()
        ),
    )
    .unwrap();
    let sentinel_tls = leasehold_testkit::free_port().to_string();
    let child = std::process::Command::new(leasehold_testkit::redis_server_path().unwrap())
        .arg(&conf)
        .arg("--sentinel")
        .args(tls(&sentinel_tls))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _sentinel = TlsSentinel(child, dir);

    let url = format!("rediss+sentinel://127.0.0.1:{sentinel_tls}/mymaster");
    let client = Client::builder(url.as_str())
        .tls_root_certificate(std::fs::read(&ca).unwrap())
        .build()
        .unwrap();
    // The sentinel starts, finds the master: the wait rides it out.
    let guard = client
        .mutex("job")
        .unwrap()
        .acquire_timeout(LONG)
        .await
        .unwrap();
    let info = client.mutex("job").unwrap().inspect().await.unwrap();
    assert!(info.held);
    assert_eq!(info.server, format!("127.0.0.1:{master_tls}"), "{info:?}");
    guard.release().await.unwrap();

    // Plain TCP to a sentinel that speaks TLS alone gets no answer.
    let plain = Client::builder(format!(
        "redis+sentinel://127.0.0.1:{sentinel_tls}/mymaster"
    ))
    .connect_timeout(Duration::from_secs(2))
    .build()
    .unwrap();
    let err = plain.mutex("job").unwrap().try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err:?}");
    assert!(
        err.to_string()
            .contains(&format!("no sentinel at 127.0.0.1:{sentinel_tls} answered")),
        "{err}"
    );
}
