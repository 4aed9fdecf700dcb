//! What the lease engine does when things break: restarts, pauses, slow and
//! frozen connections, and releases that race renewals. Every fault is made
//! for real, with the test kit's servers and fault proxy.

mod common;

use std::future::Future;
use std::time::Duration;

use common::{client_with, cmd, eventually, impatient, poll_then_drop};
use leasehold::Client;
use leasehold_testkit::{FaultProxy, RedisServer};

const LONG: Duration = Duration::from_secs(30);

/// Waits until a waiter for lock "job" listens for its release, which it
/// does once it has found the lock busy.
async fn waiter_listens(server: &RedisServer) {
    eventually("the waiter to listen", || async {
        let channels: Vec<String> =
            cmd(server, &["PUBSUB", "CHANNELS", "leasehold:{job}:ch*"]).await;
        !channels.is_empty()
    })
    .await;
}

/// Waits until a waiter for lock "job" is in its queue.
async fn queued(server: &RedisServer) {
    eventually("the waiter to queue", || async {
        cmd::<u64>(server, &["ZCARD", "leasehold:{job}:q"]).await > 0
    })
    .await;
}

async fn held_in_redis(server: &RedisServer, name: &str) -> bool {
    cmd::<bool>(server, &["EXISTS", &format!("leasehold:{{{name}}}")]).await
}

/// A Redis restart that is over in moments must not end a wait: the waiter
/// keeps trying on a new connection and takes the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_rides_out_a_quick_restart() {
    let mut server = RedisServer::start();
    let holder = client_with(&server, LONG, false);
    let _held = holder.mutex("job").unwrap().acquire().await.unwrap();
    let waiter = impatient(&server.url());
    let mutex = waiter.mutex("job").unwrap();
    let waiting = tokio::spawn(async move { mutex.acquire_timeout(LONG).await });
    waiter_listens(&server).await;
    // Without persistence the restart forgets the lock: the waiter gets it.
    server.stop();
    server.restart();
    let guard = waiting
        .await
        .unwrap()
        .expect("the wait ended on the restart");
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
}

/// `CLIENT PAUSE` longer than the command timeout: every attempt of the
/// waiter times out meanwhile, and the wait still ends with the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_rides_out_a_pause_longer_than_the_command_timeout() {
    let server = RedisServer::start();
    let holder = client_with(&server, Duration::from_millis(600), false);
    let held = holder.mutex("job").unwrap().acquire().await.unwrap();
    let waiter = impatient(&server.url()); // 500 ms command timeout
    let mutex = waiter.mutex("job").unwrap();
    let waiting = tokio::spawn(async move { mutex.acquire_timeout(LONG).await });
    waiter_listens(&server).await;
    let _: () = cmd(&server, &["CLIENT", "PAUSE", "1500", "ALL"]).await;
    let guard = waiting.await.unwrap().expect("the wait ended on the pause");
    assert!(guard.fence() > held.fence());
    guard.release().await.unwrap();
}

/// A pause that starts while one task of a client waits: a second task of
/// that client that asks meanwhile rides it out too, for every hash kind,
/// instead of ending at once on the first unanswered attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_waiter_of_one_client_rides_out_a_pause() {
    let server = RedisServer::start();
    let holder = client_with(&server, Duration::from_millis(600), false);
    let waiters = impatient(&server.url()); // 500 ms command timeout
    let held = holder
        .semaphore("job", 2)
        .unwrap()
        .acquire_many(2)
        .await
        .unwrap();
    let first = waiters.semaphore("job", 2).unwrap();
    let second = first.clone();
    let first = tokio::spawn(async move { first.acquire_timeout(LONG).await });
    waiter_listens(&server).await;
    let _: () = cmd(&server, &["CLIENT", "PAUSE", "1500", "ALL"]).await;
    let got = second.acquire_timeout(LONG).await;
    let got = got.expect("the second waiter ended on the pause");
    got.release().await.unwrap();
    first.await.unwrap().unwrap().release().await.unwrap();
    drop(held);

    let held = holder
        .reentrant_mutex("cfg")
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let first = waiters.reentrant_mutex("cfg").unwrap();
    let first = tokio::spawn(async move { first.acquire_timeout(LONG).await });
    eventually("the first waiter to queue", || async {
        cmd::<u64>(&server, &["ZCARD", "leasehold:{cfg}:q"]).await == 1
    })
    .await;
    let _: () = cmd(&server, &["CLIENT", "PAUSE", "1500", "ALL"]).await;
    let second = waiters.reentrant_mutex("cfg").unwrap();
    let second = tokio::spawn(async move { second.acquire_timeout(LONG).await });
    first.await.unwrap().unwrap().release().await.unwrap();
    let got = second.await.unwrap();
    got.expect("the second waiter ended on the pause")
        .release()
        .await
        .unwrap();
    drop(held);
}

/// A grant whose reply arrives after the lease ran out is never handed out:
/// it is given back, and the lock is not left held by nobody.
#[tokio::test]
async fn a_late_grant_is_given_back_not_handed_out() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let client = Client::builder(proxy.url())
        .lease(Duration::from_millis(300))
        .command_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let mutex = client.mutex("job").unwrap();
    // Warm the connection and the script cache first.
    common::take_and_release(mutex.try_acquire().await).await;
    proxy.set_reply_latency(Duration::from_millis(600));
    let err = mutex.try_acquire().await.unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    assert!(err.to_string().contains("late"), "{err}");
    let err = mutex
        .acquire_timeout(Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(err.is_timeout() || err.is_connection(), "{err:?}");
    proxy.heal();
    client.flush().await;
    eventually("the late grants to be given back", || async {
        !held_in_redis(&server, "job").await
    })
    .await;
    let again = mutex.try_acquire().await.unwrap();
    assert!(again.is_some(), "the lock was left held");
}

/// A command connection that goes silent (no FIN, no RST) is replaced after
/// one timeout: a lease renewed over it survives, and the next operation
/// works at once on a new connection.
#[tokio::test]
async fn a_half_open_connection_is_replaced() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let client = Client::builder(proxy.url())
        .lease(Duration::from_secs(3))
        .command_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let guard = client.mutex("job").unwrap().acquire().await.unwrap();
    proxy.freeze_existing();
    // Past two renewal times and past the whole lease: the first renewal on
    // the frozen connection times out, the next one uses a new connection.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(
        !guard.is_lost(),
        "the lease was lost on a frozen connection"
    );
    let other = client.mutex("other").unwrap();
    common::take_and_release(other.try_acquire().await).await;
    assert!(proxy.connections() >= 2, "no new connection was made");
    guard.release().await.unwrap();
}

/// A slow Redis is reported as slow, not as out of reach.
#[tokio::test]
async fn a_paused_redis_is_reported_as_not_answering() {
    let server = RedisServer::start();
    let client = impatient(&server.url());
    let mutex = client.mutex("job").unwrap();
    common::take_and_release(mutex.try_acquire().await).await;
    let _: () = cmd(&server, &["CLIENT", "PAUSE", "1500", "ALL"]).await;
    let err = mutex.try_acquire().await.unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("did not answer"), "{message}");
    assert!(!message.contains("cannot reach"), "{message}");
}

/// A release that races a renewal whose script was flushed (so both are
/// sent again, in either order) must not report a loss for a lease that
/// held to the end.
#[tokio::test]
async fn a_release_never_loses_to_a_late_renewal() {
    let server = RedisServer::start();
    let client = client_with(&server, Duration::from_millis(900), true);
    let mutex = client.mutex("job").unwrap();
    for round in 0..20u64 {
        let guard = mutex.acquire().await.unwrap();
        // Just before the first renewal, at 300 ms: the renewal is sent
        // during the pause, and meets NOSCRIPT when it ends, as the release
        // sent after it does.
        tokio::time::sleep(Duration::from_millis(270 + round % 20)).await;
        let _: () = cmd(&server, &["SCRIPT", "FLUSH"]).await;
        let _: () = cmd(&server, &["CLIENT", "PAUSE", "150", "WRITE"]).await;
        tokio::time::sleep(Duration::from_millis(60)).await;
        guard
            .release()
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
    }
}

/// After a restart without persistence the release learns the lock was
/// gone, or, when its first attempt went down with the old connection and
/// so may have been applied, that the outcome is unknown (never success);
/// with Redis gone for good it says the outcome is unknown.
#[tokio::test]
async fn a_release_knows_its_outcome() {
    let mut server = RedisServer::start();
    let client = client_with(&server, LONG, true);
    let mutex = client.mutex("job").unwrap();

    let guard = mutex.acquire().await.unwrap();
    server.stop();
    server.restart();
    let err = guard.release().await.unwrap_err();
    assert!(err.is_not_held() || err.is_outcome_unknown(), "{err:?}");

    let guard = mutex.acquire().await.unwrap();
    server.stop();
    let err = guard.release().await.unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    assert!(err.to_string().contains("unknown"), "{err}");
}

/// With a restart grace, a server that has just started grants nothing
/// until the grace has passed since it started.
#[tokio::test]
async fn no_grant_within_the_restart_grace() {
    let server = RedisServer::start();
    let client = Client::builder(server.url())
        .restart_grace(Duration::from_secs(2))
        .build()
        .unwrap();
    let mutex = client.mutex("job").unwrap();
    let uptime: String = cmd(&server, &["INFO", "server"]).await;
    let young = uptime
        .lines()
        .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
        .and_then(|s| s.trim().parse::<u64>().ok())
        .is_some_and(|s| s == 0);
    if young {
        assert!(mutex.try_acquire().await.unwrap().is_none());
        let err = mutex
            .acquire_timeout(Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(err.is_timeout(), "{err:?}");
        assert!(err.to_string().contains("restart grace"), "{err}");
    }
    let guard = mutex
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap();
    let uptime: String = cmd(&server, &["INFO", "server"]).await;
    let seconds = uptime
        .lines()
        .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap();
    assert!(seconds >= 2, "granted at uptime {seconds}s");
    guard.release().await.unwrap();
}

/// A cluster-mode server refuses a script that touches several slots: the
/// watchdog's batches must keep to one slot each.
#[tokio::test]
async fn renewals_keep_to_one_slot_on_a_cluster_node() {
    let server = RedisServer::start_cluster_node();
    let client = client_with(&server, Duration::from_millis(600), true);
    let mut guards = Vec::new();
    for i in 0..20 {
        let mutex = client.mutex(&format!("job-{i}")).unwrap();
        guards.push(mutex.acquire().await.unwrap());
    }
    // Several renewal rounds.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for guard in &guards {
        assert!(!guard.is_lost(), "{} was lost", guard.name());
        assert!(held_in_redis(&server, guard.name()).await);
    }
    for guard in guards {
        guard.release().await.unwrap();
    }
}

/// Dropping a release future must finish the release in the background,
/// also while the release waits for a renewal in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_release_waiting_for_renewal_still_releases() {
    let server = RedisServer::start();
    let client = Client::builder(server.url())
        .lease(Duration::from_secs(3))
        .watchdog(true)
        .build()
        .unwrap();
    let guard = client.mutex("job").unwrap().acquire().await.unwrap();
    let token = guard.token().to_owned();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The renewal due at ~1 s is held up by the pause.
    let _: () = cmd(&server, &["CLIENT", "PAUSE", "1500", "WRITE"]).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let out = poll_then_drop(guard.release(), 20).await;
    assert!(out.is_none(), "release should be waiting");
    // The pause ends at ~2 s; give the background release plenty of time.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    client.flush().await;
    let pttl: i64 = cmd(&server, &["PTTL", "leasehold:{job}"]).await;
    let holder: Option<String> = cmd(&server, &["GET", "leasehold:{job}"]).await;
    assert_eq!(
        holder, None,
        "the dropped release was never finished: token {token} still holds, pttl {pttl} ms"
    );
}

/// Callers that queue behind a connect to a silent server do not each
/// make a connect of their own: every one of them is bounded by one command
/// timeout, and the server is not flooded with connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_queued_behind_a_connect_share_its_bound() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    proxy.blackhole(true);
    let client = Client::builder(proxy.url())
        .command_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let lock = client.mutex(&format!("l{i}")).unwrap();
        tasks.push(tokio::spawn(async move { lock.try_acquire().await }));
    }
    for task in tasks {
        let err = task.await.unwrap().unwrap_err();
        assert!(err.is_connection(), "{err:?}");
    }
    // Queued one after another, each caller used to make a connect of its
    // own once the one before it gave up.
    assert!(
        proxy.connections() <= 2,
        "{} connections for 8 callers",
        proxy.connections()
    );
}

/// Runs `release` with its first reply lost: once `applied` holds, the
/// connection it went out on goes dead, and the retry goes over a new one.
async fn with_first_reply_lost<T, F, Fut>(
    proxy: &FaultProxy,
    release: impl Future<Output = T> + Send + 'static,
    applied: F,
) -> T
where
    T: Send + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    proxy.set_reply_latency(Duration::from_secs(10));
    let releasing = tokio::spawn(release);
    eventually("the first release to be applied", applied).await;
    proxy.freeze_existing();
    proxy.set_reply_latency(Duration::ZERO);
    releasing.await.unwrap()
}

/// Scripts (and the compare-and-delete commands) the server has run.
async fn release_calls(server: &RedisServer) -> u64 {
    common::script_calls(server).await
        + common::command_calls(server, "delifeq").await
        + common::command_calls(server, "delex").await
}

/// A release whose reply is lost after Redis applied it (a compare-and-delete:
/// nobody waited for the lock) is sent again; the retry finds its own
/// success and answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sent_again_after_a_lost_reply_answers_released() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let client = impatient(&proxy.url()); // 500 ms command timeout
    let mutex = client.mutex("job").unwrap();
    // Loads the release scripts: the faulty attempt must run them, not ask for them.
    mutex.acquire().await.unwrap().release().await.unwrap();
    let guard = mutex.acquire().await.unwrap();
    let released = with_first_reply_lost(&proxy, guard.release(), || async {
        !held_in_redis(&server, "job").await
    })
    .await;
    released.expect("the retry found the first attempt's release");
    assert!(!held_in_redis(&server, "job").await);
}

/// A release that handed a fair lock to its waiter, whose reply is lost, is
/// sent again: it answers released, and leaves the waiter's lock alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_sent_again_answers_released_and_keeps_the_new_holder() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let client = impatient(&proxy.url());
    let fair = client.fair_mutex("job").unwrap();
    fair.acquire().await.unwrap().release().await.unwrap();
    // Taken by a hand-off, the lock's value is marked: its release is the
    // release script from the first attempt on.
    let first = common::client(&server).fair_mutex("job").unwrap();
    let first = first.acquire().await.unwrap();
    let taking = tokio::spawn(async move { fair.acquire_timeout(LONG).await });
    queued(&server).await;
    first.release().await.unwrap();
    let guard = taking.await.unwrap().unwrap();
    let other = common::client(&server).fair_mutex("job").unwrap();
    let waiting = tokio::spawn(async move { other.acquire_timeout(LONG).await });
    queued(&server).await;
    let released =
        with_first_reply_lost(&proxy, guard.release(), || async { waiting.is_finished() }).await;
    released.expect("the retry found the first attempt's hand-off");
    let handed = waiting
        .await
        .unwrap()
        .expect("the waiter was handed the lock");
    assert!(!handed.is_lost());
    let value = common::held_on(&server, "job")
        .await
        .expect("held by the waiter");
    assert!(value.starts_with(handed.token()), "{value}");
    handed.release().await.unwrap();
}

/// A reentrant level's release whose reply is lost is sent again: it
/// answers released, and undoes that one level only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_release_sent_again_undoes_one_level() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let client = impatient(&proxy.url());
    let lock = client.reentrant_mutex("job").unwrap();
    lock.acquire().await.unwrap().release().await.unwrap();
    let outer = lock.acquire().await.unwrap();
    let inner = lock.acquire().await.unwrap();
    let levels = || async {
        let fields: Vec<String> = cmd(&server, &["HKEYS", "leasehold:{job}"]).await;
        fields.iter().filter(|f| f.starts_with("l:")).count()
    };
    assert_eq!(levels().await, 2);
    let released =
        with_first_reply_lost(&proxy, inner.release(), || async { levels().await == 1 }).await;
    released.expect("the retry found the first attempt's release");
    assert_eq!(levels().await, 1);
    assert!(!outer.is_lost());
    outer.release().await.unwrap();
    assert!(!held_in_redis(&server, "job").await);
}

/// A compare-and-delete release whose reply is lost, after which another
/// client takes the lock: the retry releases nothing of theirs, and reports
/// no loss (the compare-and-delete left no record, and the fence counter
/// moved on with the new holder: the outcome is not known).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sent_again_after_another_took_the_lock_leaves_theirs() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let client = impatient(&proxy.url());
    let mutex = client.mutex("job").unwrap();
    mutex.acquire().await.unwrap().release().await.unwrap();
    let guard = mutex.acquire().await.unwrap();
    let other = common::client(&server).mutex("job").unwrap();
    let taken = std::sync::Arc::new(tokio::sync::Mutex::new(None));
    let released = with_first_reply_lost(&proxy, guard.release(), || {
        let (other, taken) = (other.clone(), std::sync::Arc::clone(&taken));
        async move {
            let mut taken = taken.lock().await;
            if taken.is_none() {
                *taken = other.try_acquire().await.unwrap();
            }
            taken.is_some()
        }
    })
    .await;
    let theirs = taken
        .lock()
        .await
        .take()
        .expect("the other client holds it");
    if let Err(err) = released {
        assert_eq!(err.kind(), leasehold::ErrorKind::OutcomeUnknown, "{err}");
    }
    assert!(!theirs.is_lost());
    let value = common::held_on(&server, "job").await.expect("still held");
    assert!(value.starts_with(theirs.token()), "{value}");
    theirs.release().await.unwrap();
}

/// A lock removed by a force-release before its holder's compare-and-delete
/// release, whose reply is lost: the retry must not take the removal for
/// its own release (nothing says the lease held to the end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sent_again_after_a_force_release_does_not_answer_released() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let client = impatient(&proxy.url());
    let mutex = client.mutex("job").unwrap();
    mutex.acquire().await.unwrap().release().await.unwrap();
    let guard = mutex.acquire().await.unwrap();
    let admin = common::client(&server).mutex("job").unwrap();
    assert!(admin.force_release().await.unwrap());
    let before = release_calls(&server).await;
    let released = with_first_reply_lost(&proxy, guard.release(), || async {
        release_calls(&server).await > before
    })
    .await;
    let err = released.expect_err("the lock was removed by force, not by this release");
    assert!(err.is_not_held() || err.is_outcome_unknown(), "{err:?}");
}

/// An extend whose reply is lost after Redis applied it is sent again and
/// reports the outcome: extended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_sent_again_after_a_lost_reply_reports_the_extension() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let client = Client::builder(proxy.url())
        .command_timeout(Duration::from_millis(500))
        .lease(Duration::from_secs(10))
        .watchdog(false)
        .build()
        .unwrap();
    let guard = client.mutex("job").unwrap().acquire().await.unwrap();
    // Loads the renewal script: the faulty attempt must run it.
    guard.extend(Duration::from_secs(10)).await.unwrap();
    proxy.set_reply_latency(Duration::from_secs(10));
    let fault = async {
        eventually("the first extend to be applied", || async {
            cmd::<i64>(&server, &["PTTL", "leasehold:{job}"]).await > 20_000
        })
        .await;
        proxy.freeze_existing();
        proxy.set_reply_latency(Duration::ZERO);
    };
    let (extended, ()) = tokio::join!(guard.extend(Duration::from_secs(60)), fault);
    extended.expect("the extend was applied");
    assert!(!guard.is_lost());
    assert!(guard.valid_for() > Duration::from_secs(20));
    guard.release().await.unwrap();
}
