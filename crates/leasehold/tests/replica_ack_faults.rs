//! Replica acknowledgement under faults: what a grant counts as
//! acknowledged must be the grant's own write, whatever connection made
//! it, and however many grants a client asks for at once.

use std::time::Duration;

use leasehold::{Client, ErrorKind, ReplicaAck};
use leasehold_testkit::{FaultProxy, RedisServer, Sentinels};

/// Long enough for any step that should succeed; a hang fails the test.
const LONG: Duration = Duration::from_secs(30);

/// Whether `server` has `key` (KEYS: a read a paused replica answers).
fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&["KEYS", key]).unwrap().contains(key)
}

/// A master and a replica of it, the replica listed online.
fn replicated() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
    wait_online(&master);
    (master, replica)
}

/// A master whose replica is `latency` away each way.
fn replicated_far(latency: Duration) -> (RedisServer, FaultProxy, RedisServer) {
    let master = RedisServer::start();
    let link = FaultProxy::start(master.addr());
    let port = link.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
    wait_online(&master);
    link.set_latency(latency);
    (master, link, replica)
}

/// Waits until `master` lists a replica online.
fn wait_online(master: &RedisServer) {
    let deadline = std::time::Instant::now() + LONG;
    while !master
        .command(&["INFO", "replication"])
        .unwrap()
        .contains("state=online")
    {
        assert!(std::time::Instant::now() < deadline, "no replica online");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The replica stops applying its master's writes for `ms`, connected and
/// listed online all the while.
fn stall(replica: &RedisServer, ms: u64) {
    let reply = replica
        .command(&["CLIENT", "PAUSE", &ms.to_string(), "WRITE"])
        .unwrap();
    assert_eq!(reply, "OK");
}

/// Which kind of lock a case takes.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Mutex,
    Semaphore,
    Reentrant,
    Read,
}

/// A guard of any kind, held until dropped.
type Guard = Box<dyn std::any::Any + Send>;

/// Takes `name` of `kind` within `wait`.
async fn take(client: &Client, kind: Kind, name: &str, wait: Duration) -> leasehold::Result<Guard> {
    fn boxed<G: Send + 'static>(guard: G) -> Guard {
        Box::new(guard)
    }
    match kind {
        Kind::Mutex => client.mutex(name)?.acquire_timeout(wait).await.map(boxed),
        Kind::Semaphore => client
            .semaphore(name, 2)?
            .acquire_timeout(wait)
            .await
            .map(boxed),
        Kind::Reentrant => client
            .reentrant_mutex(name)?
            .acquire_timeout(wait)
            .await
            .map(boxed),
        Kind::Read => client
            .rw_lock(name)?
            .read()
            .acquire_timeout(wait)
            .await
            .map(boxed),
    }
}

/// The connection that carried a grant and its WAIT is cut before the
/// answer: the wait tries again, under the same token, on a new
/// connection, and finds the lock already its own. Where a WAIT counts the
/// connection's own writes alone (Valkey; Redis 7.0 counts every write
/// made before the connection's last command), a script that finds the
/// grant and writes nothing is followed by a WAIT that asks the replicas
/// for nothing, and the grant would count as acknowledged by a replica
/// that never had it. It must not be returned before the replica has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_found_again_after_a_cut_is_acknowledged_by_the_replica() {
    let (master, replica) = replicated();
    let proxy = FaultProxy::start(master.addr());
    for (i, kind) in [Kind::Mutex, Kind::Semaphore, Kind::Reentrant, Kind::Read]
        .into_iter()
        .enumerate()
    {
        let client = Client::builder(proxy.url()).build().unwrap();
        let name = format!("cut-{i}");
        let key = format!("leasehold:{{{name}}}");
        // Paused far longer than the steps below take before the answer.
        stall(&replica, 3_000);
        let taking = {
            let (client, name) = (client.clone(), name.clone());
            tokio::spawn(async move {
                let taken = take(&client, kind, &name, LONG).await;
                (taken, client)
            })
        };
        // The script has run, and its WAIT holds the connection: cut it.
        tokio::time::timeout(LONG, async {
            while !exists(&master, &key) {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await
        .expect("the grant is made on the master");
        proxy.reset();
        let (taken, client) = tokio::time::timeout(LONG, taking)
            .await
            .expect("the wait ends")
            .unwrap();
        let guard = taken.unwrap_or_else(|e| panic!("{kind:?}: {e:?}"));
        assert!(
            exists(&replica, &key),
            "{kind:?}: a grant was returned that the replica does not have"
        );
        drop(guard);
        client.flush().await;
        assert_eq!(replica.command(&["CLIENT", "UNPAUSE"]).unwrap(), "OK");
    }
}

/// A failover while a grant's WAIT is out: the old master, made a
/// replica, cuts the WAIT short (UNBLOCKED) and the request is sent again
/// to the new master, which has the grant already. An attempt that finds
/// its own token there holds the lock: it must not report the lock busy
/// and leave it held by nobody until its lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_cut_short_by_a_failover_is_not_left_held_by_nobody() {
    let mut group = Sentinels::start(1, 1);
    let replica = group.replicas()[0].port();
    // More replicas than there are: the WAIT stays out until the failover.
    let client = Client::builder(group.url())
        .replica_ack(ReplicaAck::AtLeast {
            replicas: 2,
            timeout: Duration::from_secs(10),
        })
        .build()
        .unwrap();
    let mutex = client.mutex("job").unwrap();
    let trying = {
        let mutex = mutex.clone();
        tokio::spawn(async move { mutex.try_acquire().await })
    };
    tokio::time::timeout(LONG, async {
        while !exists(group.replicas()[0], "leasehold:{job}") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the replica has the grant");
    tokio::task::block_in_place(|| group.failover());
    assert_eq!(group.master().port(), replica, "the replica took over");
    let tried = tokio::time::timeout(LONG, trying)
        .await
        .expect("the try ends")
        .unwrap();
    match tried {
        Ok(Some(guard)) => guard.release().await.unwrap(),
        Ok(None) => {}
        Err(e) => assert_eq!(e.kind(), ErrorKind::ReplicasMissing, "{e:?}"),
    }
    client.flush().await;
    let info = mutex.inspect().await.unwrap();
    assert!(!info.held, "left held by nobody: {info:?}");
}

/// Extends of several held leases while the replica acknowledges nothing:
/// each is refused for want of acknowledgement (the lease stays extended
/// on the master), but none may cost its lease. An extend keeps the
/// watchdog off its lease while it is out, so one that waits behind the
/// WAITs of the others must not hold its lease's renewal back that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extends_while_the_replica_stalls_lose_no_lease() {
    let (master, replica) = replicated();
    let lease = Duration::from_secs(3);
    let client = Client::builder(master.url()).lease(lease).build().unwrap();
    let mut guards = Vec::new();
    for i in 0..4 {
        let mutex = client.mutex(&format!("extended-{i}")).unwrap();
        let guard = mutex.acquire().await.unwrap();
        guard.extend(lease).await.unwrap();
        guards.push(guard);
    }
    stall(&replica, 10_000);
    let extends: Vec<_> = guards
        .into_iter()
        .map(|guard| {
            tokio::spawn(async move {
                let extended = guard.extend(lease).await;
                (extended, guard)
            })
        })
        .collect();
    for extend in extends {
        let (extended, guard) = extend.await.unwrap();
        let err = extended.expect_err("no replica acknowledges the extend");
        assert_eq!(err.kind(), ErrorKind::ReplicasMissing, "{err:?}");
        assert!(
            err.to_string()
                .contains("the lease stays extended on the master"),
            "{err}"
        );
        assert!(!guard.is_lost(), "{:?}", guard.loss_reason());
        guard.release().await.unwrap();
    }
    assert_eq!(replica.command(&["CLIENT", "UNPAUSE"]).unwrap(), "OK");
}

/// An acquisition dropped at any point around its acknowledgement (the
/// connect and its reading of the replicas, the wait for the turn, the
/// script and its WAIT) leaves nothing held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_dropped_around_its_acknowledgement_leaves_nothing_held() {
    let (master, _link, _replica) = replicated_far(Duration::from_millis(10));
    let observer = Client::builder(master.url()).build().unwrap();
    for kind in [Kind::Mutex, Kind::Semaphore, Kind::Reentrant] {
        for budget_ms in (0..60).step_by(3) {
            let client = Client::builder(master.url()).build().unwrap();
            let name = format!("dropped-{kind:?}-{budget_ms}");
            // Another task of the client holds the turn for a while.
            let other = {
                let client = client.clone();
                let name = format!("{name}-other");
                tokio::spawn(async move { take(&client, kind, &name, LONG).await })
            };
            let budget = Duration::from_millis(budget_ms);
            let taken = tokio::time::timeout(budget, take(&client, kind, &name, LONG)).await;
            let aborted = {
                let (client, name) = (client.clone(), format!("{name}-aborted"));
                tokio::spawn(async move { take(&client, kind, &name, LONG).await })
            };
            tokio::time::sleep(budget).await;
            aborted.abort();
            // Done before the abort, it hands its guard over: dropped here.
            drop(aborted.await);
            drop(taken);
            drop(other.await.unwrap().unwrap());
            client.flush().await;
            for name in [
                name.clone(),
                format!("{name}-aborted"),
                format!("{name}-other"),
            ] {
                let info = match kind {
                    Kind::Semaphore => observer.semaphore(&name, 2).unwrap().inspect().await,
                    Kind::Reentrant => observer.reentrant_mutex(&name).unwrap().inspect().await,
                    _ => observer.mutex(&name).unwrap().inspect().await,
                }
                .unwrap();
                assert!(!info.held, "{kind:?} {name} after {budget_ms} ms: {info:?}");
                assert_eq!(info.waiting_clients, 0, "{kind:?} {name}: {info:?}");
            }
        }
    }
}

/// Many grants asked at once through one client, with the replica's link
/// to its master slow: each waits for its acknowledgement, none for the
/// acknowledgements of those before it, so every one is sent and granted
/// (and the replica has each when it is returned).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_grants_are_all_sent_and_acknowledged() {
    let (master, _link, replica) = replicated_far(Duration::from_millis(20));
    let client = Client::builder(master.url()).build().unwrap();
    // Connected, and the replicas read, before the burst.
    client
        .mutex("warm")
        .unwrap()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let tries: Vec<_> = (0..60)
        .map(|i| {
            let mutex = client.mutex(&format!("burst-{i}")).unwrap();
            tokio::spawn(async move { mutex.try_acquire().await })
        })
        .collect();
    let mut guards = Vec::new();
    for (i, tried) in tries.into_iter().enumerate() {
        let tried = tokio::time::timeout(LONG, tried)
            .await
            .expect("the try ends")
            .unwrap();
        let guard = tried
            .unwrap_or_else(|e| panic!("burst-{i}: {e}"))
            .unwrap_or_else(|| panic!("burst-{i}: a free lock was not granted"));
        guards.push(guard);
    }
    for i in 0..60 {
        let key = format!("leasehold:{{burst-{i}}}");
        assert!(exists(&replica, &key), "{key} is not on the replica");
    }
    for guard in guards {
        guard.release().await.unwrap();
    }
}

/// A guard dropped while another lock's grant waits for a stalled
/// replica: the guard's lease was answered long before, so nothing of its
/// token is in that batch, and its release in the background must not
/// wait for the batch's WAIT (up to the replica timeout) to let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_is_released_without_waiting_for_other_grants_acknowledgement() {
    let (master, replica) = replicated();
    let client = Client::builder(master.url())
        .replica_ack(ReplicaAck::Connected {
            timeout: Duration::from_secs(10),
        })
        .build()
        .unwrap();
    let guard = client.mutex("held").unwrap().acquire().await.unwrap();
    stall(&replica, 15_000);
    let other = {
        let client = client.clone();
        tokio::spawn(async move { client.mutex("other").unwrap().try_acquire().await })
    };
    // The other grant is made, and its WAIT is out.
    tokio::time::timeout(LONG, async {
        while !exists(&master, "leasehold:{other}") {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the other grant is made on the master");
    drop(guard);
    let dropped = std::time::Instant::now();
    while exists(&master, "leasehold:{held}") {
        assert!(
            dropped.elapsed() < Duration::from_secs(2),
            "a dropped guard's lock stays held behind another grant's WAIT"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(replica.command(&["CLIENT", "UNPAUSE"]).unwrap(), "OK");
    let _ = tokio::time::timeout(LONG, other).await;
    client.flush().await;
}
