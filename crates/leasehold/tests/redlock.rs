//! Redlock over real independent masters: a minority down, a majority
//! down, a slow master, a master paused or cut off mid-hold, fences when
//! the majority moves, and an extend that misses the majority.

mod common;

use std::time::Duration;

use common::{cmd, held_on};
use leasehold::{ErrorKind, LossReason, Redlock};
use leasehold_testkit::{FaultProxy, Masters, RedisServer};

const LEASE: Duration = Duration::from_secs(10);
/// A bound on things that must not hang; never a measure of speed.
const NO_HANG: Duration = Duration::from_secs(60);

fn redlock(urls: &[String]) -> Redlock {
    Redlock::builder(urls.iter().cloned())
        .lease(LEASE)
        .build()
        .unwrap()
}

/// A master's fence counter: its digits (a release that finds no token
/// names it after them, " x<token>").
async fn counter(server: &RedisServer, name: &str) -> Option<u64> {
    let value = common::fence_counter(server, name).await?;
    Some(common::counter_digits(&value).expect("a counter with digits"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_excludes_and_fences_grow() {
    let masters = Masters::start(3);
    let redlock = redlock(&masters.urls());
    let mutex = redlock.mutex("job").unwrap();
    let first = mutex.acquire().await.unwrap();
    assert_eq!(first.servers(), 3);
    // A majority stores the fence before the lock is reported held; the
    // round that writes it to the others is not waited for.
    let mut stored = 0;
    for server in masters.servers() {
        if counter(server, "job").await.unwrap_or(0) >= first.fence() {
            stored += 1;
        }
    }
    assert!(stored >= 2, "the fence on {stored} of 3 masters");
    // A master slower than the per-node deadline (a first connection on a
    // loaded machine) grants late, and gets the fence then.
    common::eventually("every master to hold the lock, fenced", || async {
        for server in masters.servers() {
            let holds = held_on(server, "job")
                .await
                .is_some_and(|value| value.starts_with(first.token()));
            if !holds || counter(server, "job").await.unwrap_or(0) < first.fence() {
                return false;
            }
        }
        true
    })
    .await;
    // Another handle is another holder (this one's own second try is
    // refused outright: see an_own_second_acquire_is_refused_at_once).
    let other = redlock.mutex("job").unwrap();
    assert!(other.try_acquire().await.unwrap().is_none());
    let fence = first.fence();
    assert_eq!(first.release_counted().await.unwrap(), 3);
    for server in masters.servers() {
        assert_eq!(held_on(server, "job").await, None);
    }
    let second = mutex.try_acquire().await.unwrap().unwrap();
    assert!(second.fence() > fence);
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_down_still_locks() {
    let mut masters = Masters::start(3);
    masters.server(2).stop();
    let redlock = redlock(&masters.urls());
    let mutex = redlock.mutex("job").unwrap();
    let guard = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap();
    for server in &masters.servers()[..2] {
        assert!(held_on(server, "job").await.is_some());
    }
    assert_eq!(guard.release_counted().await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_down_fails_naming_the_quorum() {
    let mut masters = Masters::start(3);
    masters.server(1).stop();
    masters.server(2).stop();
    let redlock = redlock(&masters.urls());
    let mutex = redlock.mutex("job").unwrap();
    // A wait with no bound must still end: waiting cannot bring masters back.
    let error = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .expect("an acquire with a majority down must end")
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Quorum, "{error}");
    assert!(error.is_retryable());
    let message = error.to_string();
    assert!(message.contains("quorum not reached"), "{message}");
    assert!(message.contains("of 3 masters did not answer"), "{message}");
    // Nothing is left held on the master that was up (a grant that came
    // after the try gave up is released by the request that got it).
    redlock.flush().await;
    common::eventually("the master that was up to be free", || async {
        held_on(&masters.servers()[0], "job").await.is_none()
    })
    .await;
    let error = mutex.try_acquire().await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Quorum, "{error}");
}

/// A master slower than the lease itself would make an acquire that waits
/// for every master outlast the wait given; the majority answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_master_does_not_hold_up_the_acquire() {
    let (masters, slow, urls) = common::third_master_behind_a_proxy();
    slow.set_latency(Duration::from_secs(120));
    let redlock = redlock(&urls);
    let mutex = redlock.mutex("job").unwrap();
    let guard = mutex
        .acquire_timeout(Duration::from_secs(30))
        .await
        .unwrap();
    let fence = guard.fence();
    for server in &masters.servers()[..2] {
        assert!(counter(server, "job").await.unwrap() >= fence);
    }
    assert!(guard.release_counted().await.unwrap() >= 2);
    slow.heal();
}

/// A paused master, and one cut off by the network, each leave a majority
/// that keeps renewing: the lease holds. A majority gone loses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_or_cut_off_master_mid_hold_keeps_the_lease() {
    let masters = Masters::start(3);
    let cut = FaultProxy::start(masters.servers()[1].addr());
    let urls = vec![
        masters.urls()[0].clone(),
        cut.url(),
        masters.urls()[2].clone(),
    ];
    let redlock = Redlock::builder(urls)
        .lease(Duration::from_secs(3))
        .build()
        .unwrap();
    let mutex = redlock.mutex("job").unwrap();
    let guard = mutex.acquire().await.unwrap();
    // Renewal rounds (a third of the lease each) with master 2 paused for
    // less than what its lease has left (a CLIENT PAUSE that ends by itself:
    // a paused server takes no command, UNPAUSE included), then with
    // master 1 cut off.
    let _: () = cmd(&masters.servers()[2], &["CLIENT", "PAUSE", "1500", "ALL"]).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(guard.loss_reason(), None);
    cut.blackhole(true);
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(guard.loss_reason(), None);
    assert!(!guard.valid_for().is_zero());
    let left: i64 = cmd(&masters.servers()[0], &["PTTL", "leasehold:{job}"]).await;
    assert!(left > 0);
    // Now a majority stops answering: the lease is lost, and says why.
    let _: () = cmd(&masters.servers()[2], &["CLIENT", "PAUSE", "5000", "ALL"]).await;
    tokio::time::timeout(NO_HANG, guard.lost()).await.unwrap();
    assert!(matches!(
        guard.loss_reason(),
        Some(LossReason::QuorumLost | LossReason::DeadlinePassed)
    ));
    cut.heal();
    assert_eq!(
        guard.release().await.unwrap_err().kind(),
        ErrorKind::NotHeld
    );
}

/// Counters 100, 5, 5 (scaled up past the clock): a holder on {A, B} and a
/// later one on {B, C} — the second must get the larger fence, also when
/// C lost its counter and A is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_never_go_back_when_the_majority_moves() {
    let mut masters = Masters::start(3);
    let far_ahead = "5000000000000000";
    let _: () = cmd(
        &masters.servers()[0],
        &["SET", "leasehold:{job}:fence", far_ahead],
    )
    .await;
    masters.server(2).stop();
    let redlock = redlock(&masters.urls());
    let mutex = redlock.mutex("job").unwrap();
    let first = mutex.acquire().await.unwrap();
    let fence = first.fence();
    assert!(fence > 5_000_000_000_000_000);
    assert_eq!(first.release_counted().await.unwrap(), 2);
    // C comes back empty (no persistence), and its counter is gone; A goes.
    masters.server(2).restart();
    let _: () = cmd(&masters.servers()[2], &["DEL", "leasehold:{job}:fence"]).await;
    masters.server(0).stop();
    let second = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap();
    assert!(
        second.fence() > fence,
        "fence went back: {} after {fence}",
        second.fence()
    );
    // Round two wrote it to C too: a later majority {A, C} sees it there.
    assert!(counter(&masters.servers()[2], "job").await.unwrap() >= second.fence());
    let fence = second.fence();
    second.release().await.unwrap();
    masters.server(0).restart();
    let _: () = cmd(&masters.servers()[1], &["DEL", "leasehold:{job}:fence"]).await;
    masters.server(1).stop();
    let third = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap();
    assert!(third.fence() > fence);
    third.release().await.unwrap();
}

/// rslock unlocks every master when an extend fails; here the lease stays
/// as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_that_misses_the_majority_leaves_the_lease() {
    let masters = Masters::start(3);
    let proxies: Vec<FaultProxy> = masters
        .servers()
        .iter()
        .map(|server| FaultProxy::start(server.addr()))
        .collect();
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let redlock = Redlock::builder(urls)
        .lease(Duration::from_secs(20))
        .watchdog(false)
        .command_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let guard = redlock.mutex("job").unwrap().acquire().await.unwrap();
    // A majority holds it; a master may have missed the first round.
    let mut holders = Vec::new();
    for (i, server) in masters.servers().iter().enumerate() {
        if held_on(server, "job")
            .await
            .is_some_and(|value| value.starts_with(guard.token()))
        {
            holders.push(i);
        }
    }
    assert!(holders.len() >= 2);
    proxies[1].blackhole(true);
    proxies[2].blackhole(true);
    let error = guard.extend(Duration::from_secs(40)).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Quorum, "{error}");
    assert!(error.to_string().contains("left as it was"), "{error}");
    assert_eq!(guard.loss_reason(), None);
    assert!(!guard.valid_for().is_zero());
    for proxy in &proxies {
        proxy.heal();
    }
    for &i in &holders {
        let value = held_on(&masters.servers()[i], "job").await.unwrap();
        assert!(value.starts_with(guard.token()));
    }
    assert!(guard.release_counted().await.unwrap() >= holders.len());
}

/// A dropped acquire leaves nothing held on any master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquire_leaves_nothing_held() {
    let masters = Masters::start(3);
    let redlock = redlock(&masters.urls());
    let mutex = redlock.mutex("job").unwrap();
    // Connections first, so that the requests below reach the masters.
    mutex.acquire().await.unwrap().release().await.unwrap();
    for polls in [1, 2, 3, 5, 8, 13] {
        drop(common::poll_then_drop(mutex.acquire(), polls).await);
        redlock.flush().await;
        common::eventually("every master to be free", || async {
            for server in masters.servers() {
                if held_on(server, "job").await.is_some() {
                    return false;
                }
            }
            true
        })
        .await;
    }
}

#[tokio::test]
async fn fewer_than_three_masters_or_a_master_twice_are_refused() {
    let two = Redlock::open("redis://127.0.0.1:1,redis://127.0.0.1:2").unwrap_err();
    assert_eq!(two.kind(), ErrorKind::InvalidInput);
    assert!(two.to_string().contains("at least 3"), "{two}");
    let twice =
        Redlock::open("redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:1").unwrap_err();
    assert_eq!(twice.kind(), ErrorKind::InvalidInput);
    assert!(twice.to_string().contains("twice"), "{twice}");
}

/// The settings a Redlock shares with a client are checked once, as a
/// client's: each refused with the client's error.
#[tokio::test]
async fn a_redlock_refuses_what_a_client_refuses_and_says_the_same() {
    let urls = [
        "redis://127.0.0.1:1",
        "redis://127.0.0.1:2",
        "redis://127.0.0.1:3",
    ];
    type Both = (
        fn(leasehold::ClientBuilder) -> leasehold::ClientBuilder,
        fn(leasehold::RedlockBuilder) -> leasehold::RedlockBuilder,
    );
    let cases: [(&str, Both); 4] = [
        (
            "a zero command timeout",
            (
                |b| b.command_timeout(Duration::ZERO),
                |b| b.command_timeout(Duration::ZERO),
            ),
        ),
        (
            "a braced prefix",
            (|b| b.prefix("a{b}"), |b| b.prefix("a{b}")),
        ),
        (
            "a lease under 10 ms",
            (
                |b| b.lease(Duration::from_millis(1)),
                |b| b.lease(Duration::from_millis(1)),
            ),
        ),
        (
            "a fence retention under 24 h",
            (
                |b| b.fence_retention(Duration::from_secs(60)),
                |b| b.fence_retention(Duration::from_secs(60)),
            ),
        ),
    ];
    for (what, (client, redlock)) in cases {
        let by_client = client(leasehold::Client::builder(urls[0]))
            .build()
            .unwrap_err();
        let by_redlock = redlock(Redlock::builder(urls)).build().unwrap_err();
        assert_eq!(
            by_redlock.kind(),
            ErrorKind::InvalidInput,
            "{what}: {by_redlock}"
        );
        assert_eq!(by_redlock.to_string(), by_client.to_string(), "{what}");
    }
}

/// A grant whose answers came so late that less than the validity floor is
/// left of its lease is never reported held: masters that answer after
/// 180 ms of a 200 ms lease leave at most 200 − 180 − drift, under the
/// floor of a tenth of the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_with_too_little_validity_left_is_not_reported() {
    let masters = Masters::start(3);
    let proxies: Vec<FaultProxy> = masters
        .servers()
        .iter()
        .map(|server| FaultProxy::start(server.addr()))
        .collect();
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let redlock = Redlock::builder(urls)
        .lease(Duration::from_millis(200))
        .node_timeout(Duration::from_secs(2))
        .watchdog(false)
        .build()
        .unwrap();
    let mutex = redlock.mutex("job").unwrap();
    // Connections first, then the slow answers.
    drop(mutex.try_acquire().await.unwrap());
    redlock.flush().await;
    for proxy in &proxies {
        proxy.set_reply_latency(Duration::from_millis(180));
    }
    for _ in 0..3 {
        let taken = mutex.try_acquire().await.unwrap();
        assert!(
            taken.is_none(),
            "held with {:?} left",
            taken.map(|g| g.valid_for())
        );
    }
    for proxy in &proxies {
        proxy.heal();
    }
}

/// Three masters, the third behind a proxy that delays its replies by
/// `late` (its requests arrive at once), and the fence counters of the
/// first two far ahead of every clock: the fence comes from them, and the
/// third master's round-one grant, which stores a smaller value there,
/// arrives after the acquisition returned.
fn late_third(late: std::time::Duration) -> (Masters, FaultProxy, Redlock) {
    let (masters, slow, urls) = common::third_master_behind_a_proxy();
    slow.set_reply_latency(late);
    let redlock = redlock(&urls);
    (masters, slow, redlock)
}

const FAR_AHEAD: &str = "5000000000000000";

async fn plant_far_ahead(masters: &Masters) {
    for server in &masters.servers()[..2] {
        let _: () = cmd(server, &["SET", "leasehold:{job}:fence", FAR_AHEAD]).await;
    }
}

/// A grant that arrives after the majority decided, while the hold is
/// live, gets the fence written to its master too (docs/SAFETY.md, step 2).
/// (Replies 300 ms late: the client's first request to a master runs
/// after up to three round trips that find and load the scripts, which
/// must stay within its limit, half the command timeout of 2 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_grant_gets_the_fence() {
    let (masters, slow, redlock) = late_third(Duration::from_millis(300));
    plant_far_ahead(&masters).await;
    let mutex = redlock.mutex("job").unwrap();
    let guard = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap();
    let fence = guard.fence();
    assert!(fence > 5_000_000_000_000_000);
    common::eventually("the late master's counter to reach the fence", || async {
        counter(&masters.servers()[2], "job").await.unwrap_or(0) >= fence
    })
    .await;
    let value = held_on(&masters.servers()[2], "job").await.unwrap();
    assert!(value.starts_with(guard.token()));
    slow.heal();
    assert_eq!(guard.release_counted().await.unwrap(), 3);
}

/// `flush` waits for requests that outlived the acquisition: once it
/// returns, the late grant has the fence and is kept for the detached
/// lease (what `leasehold acquire --redlock` relies on before it exits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_sees_a_late_grant_fenced() {
    let (masters, slow, redlock) = late_third(Duration::from_millis(300));
    plant_far_ahead(&masters).await;
    let mutex = redlock.mutex("job").unwrap();
    let guard = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap();
    let (fence, token) = (guard.fence(), guard.token().to_owned());
    redlock.flush().await;
    let lease = guard.detach();
    assert!(counter(&masters.servers()[2], "job").await.unwrap() >= fence);
    let value = held_on(&masters.servers()[2], "job").await.unwrap();
    assert!(value.starts_with(&token));
    assert_eq!(lease.token, token);
    slow.heal();
    assert_eq!(mutex.release_token_counted(&token).await.unwrap(), 3);
}

/// Masters that grant after the majority decided the fence keep a larger
/// one of their own (here, counters planted far ahead): `inspect` reports
/// the holder's fence, the one its acquisition returned, and
/// `inspect_masters` each master's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reports_the_holders_fence_not_a_late_masters() {
    let masters = Masters::start(5);
    let mut urls = masters.urls()[..3].to_vec();
    let mut slow = Vec::new();
    for server in &masters.servers()[3..] {
        let _: () = cmd(server, &["SET", "leasehold:{job}:fence", FAR_AHEAD]).await;
        let proxy = FaultProxy::start(server.addr());
        proxy.set_reply_latency(Duration::from_millis(300));
        urls.push(proxy.url());
        slow.push(proxy);
    }
    let redlock = redlock(&urls);
    let mutex = redlock.mutex("job").unwrap();
    let guard = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap();
    redlock.flush().await;
    let info = mutex.inspect().await.unwrap();
    assert!(info.held);
    assert_eq!(info.last_fence, Some(guard.fence()), "{info:?}");
    let late = mutex
        .inspect_masters()
        .await
        .into_iter()
        .filter_map(|master| master.info.ok())
        .filter(|info| info.last_fence > Some(guard.fence()))
        .count();
    assert!(late <= 2, "only the slow masters count their own");
    for proxy in &slow {
        proxy.set_reply_latency(Duration::ZERO);
    }
    guard.release().await.unwrap();
    // Free: the largest counter any master has.
    let info = mutex.inspect().await.unwrap();
    assert!(!info.held);
    assert!(info.last_fence > FAR_AHEAD.parse().ok(), "{info:?}");
}

/// A grant that arrives after the hold was released releases itself, and
/// `flush` waits for that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_after_the_release_is_released_before_flush_returns() {
    let (masters, slow, redlock) = late_third(Duration::from_millis(300));
    let mutex = redlock.mutex("job").unwrap();
    let guard = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap();
    assert!(guard.release_counted().await.unwrap() >= 2);
    redlock.flush().await;
    for server in masters.servers() {
        assert_eq!(held_on(server, "job").await, None);
    }
    slow.heal();
}

/// A holder's own second acquisition, through the same handle or a clone
/// in the same task, is refused at once as a `Mutex`'s is; another task,
/// or another handle, is another holder and waits as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_own_second_acquire_is_refused_at_once() {
    let masters = Masters::start(3);
    let redlock = redlock(&masters.urls());
    let mutex = redlock.mutex("job").unwrap();
    assert!(!mutex.is_held_by_current_owner());
    let guard = mutex.acquire().await.unwrap();
    assert!(mutex.is_held_by_current_owner());
    let clone = mutex.clone();
    for error in [
        tokio::time::timeout(NO_HANG, mutex.acquire())
            .await
            .unwrap()
            .unwrap_err(),
        tokio::time::timeout(NO_HANG, clone.acquire_timeout(Duration::from_secs(30)))
            .await
            .unwrap()
            .unwrap_err(),
        tokio::time::timeout(NO_HANG, mutex.try_acquire())
            .await
            .unwrap()
            .unwrap_err(),
    ] {
        assert_eq!(error.kind(), ErrorKind::Conflict, "{error}");
        assert!(
            error.to_string().contains("already held by this caller"),
            "{error}"
        );
        assert!(error.to_string().contains(&guard.fence().to_string()));
    }
    // Another task is another holder: it finds the lock busy.
    let other = mutex.clone();
    let busy = tokio::spawn(async move { other.try_acquire().await.map(|g| g.is_none()) })
        .await
        .unwrap()
        .unwrap();
    assert!(busy);
    // Another handle too.
    assert!(redlock
        .mutex("job")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    guard.release().await.unwrap();
    assert!(!mutex.is_held_by_current_owner());
    let again = mutex.try_acquire().await.unwrap().unwrap();
    again.release().await.unwrap();
}

/// A release that a master fails with a connection reset is tried again
/// in the background while the lease may be live there: the caller hears
/// on how many masters it was held at once, and after a flush the master
/// is free, long before its lease would have run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_reset_on_one_master_is_tried_again() {
    let (masters, proxy, urls) = common::third_master_behind_a_proxy();
    let redlock = Redlock::builder(urls)
        .lease(Duration::from_secs(60))
        .watchdog(false)
        .build()
        .unwrap();
    let mutex = redlock.mutex("job").unwrap();
    let guard = loop {
        let guard = mutex.acquire().await.unwrap();
        // All three, so that the third has something to release.
        if guard.release_counted().await.is_ok_and(|n| n == 3) {
            break mutex.acquire().await.unwrap();
        }
    };
    common::eventually("the third master to hold the lock", || async {
        held_on(&masters.servers()[2], "job")
            .await
            .is_some_and(|value| value.starts_with(guard.token()))
    })
    .await;
    proxy.reset();
    assert_eq!(guard.release_counted().await.unwrap(), 2);
    redlock.flush().await;
    for server in masters.servers() {
        assert_eq!(held_on(server, "job").await, None);
    }
}

/// Counters as a master may hold them: one that is not a counter at all
/// (a list: a lost counter), one marked by a single-node release (a
/// trailing 'w'), one missing. Every master's counter ends up a plain
/// number at least the fence; then marked counters far ahead set the next
/// fence, one past their digits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marked_foreign_and_missing_counters_are_read_as_numbers() {
    let masters = Masters::start(3);
    let servers = masters.servers();
    let redlock = redlock(&masters.urls());
    // Connected, with the scripts loaded: the try below is quick enough
    // for its proposed fence to be taken as it stands.
    let warm = redlock.mutex("warm").unwrap();
    warm.acquire().await.unwrap().release().await.unwrap();
    let key = "leasehold:{job}:fence";
    let _: i64 = cmd(&servers[0], &["RPUSH", key, "not a counter"]).await;
    let _: () = cmd(&servers[1], &["SET", key, "1000w"]).await;
    let mutex = redlock.mutex("job").unwrap();
    let first = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap();
    common::eventually("every master's counter to reach the fence", || async {
        for server in servers {
            let kind: String = cmd(server, &["TYPE", key]).await;
            if kind != "string" || counter(server, "job").await.unwrap_or(0) < first.fence() {
                return false;
            }
        }
        true
    })
    .await;
    first.release().await.unwrap();
    // On two of the three masters, so that every majority meets one.
    for server in &servers[1..] {
        let _: () = cmd(server, &["SET", key, &format!("{FAR_AHEAD}w")]).await;
    }
    let second = mutex.acquire().await.unwrap();
    assert_eq!(second.fence(), FAR_AHEAD.parse::<u64>().unwrap() + 1);
    second.release().await.unwrap();
}

/// Masters that all answer later than the default per-node deadline (a
/// loaded host, or a majority farther away than a hundredth of the lease)
/// still grant: each try that a majority missed waits twice as long next
/// time, up to a quarter of the lease, where before every try missed and
/// the acquire ended in a `Quorum` error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masters_slower_than_the_default_deadline_still_grant() {
    let masters = Masters::start(3);
    let slow: Vec<FaultProxy> = masters.servers()[1..]
        .iter()
        .map(|server| FaultProxy::start(server.addr()))
        .collect();
    let mut urls = vec![masters.urls()[0].clone()];
    urls.extend(slow.iter().map(|proxy| proxy.url()));
    // A 1 s lease: the default per-node deadline is 10 ms.
    let redlock = Redlock::builder(urls.iter().cloned())
        .lease(Duration::from_secs(1))
        .build()
        .unwrap();
    let mutex = redlock.mutex("job").unwrap();
    // Connected first, so that only the replies' latency is in the way.
    mutex.acquire().await.unwrap().release().await.unwrap();
    for proxy in &slow {
        proxy.set_reply_latency(Duration::from_millis(40));
    }
    let guard = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap();
    assert!(guard.servers() >= 2);
    assert!(guard.valid_for() > Duration::from_millis(500));
    for proxy in &slow {
        proxy.heal();
    }
    guard.release().await.unwrap();
    redlock.flush().await;
}

/// One try of a free lock whose grants come later than the default
/// per-node deadline (a loaded host) is not answered "held elsewhere"
/// because one master holds a stray lease: the master that missed the
/// deadline could make a majority with the one that granted, so the try
/// is made again with a wider deadline, within the command timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_try_that_a_slow_master_kept_from_telling_tries_again() {
    let masters = Masters::start(3);
    let slow = FaultProxy::start(masters.servers()[1].addr());
    let urls = [
        masters.urls()[0].clone(),
        slow.url(),
        masters.urls()[2].clone(),
    ];
    // A 1 s lease: the default per-node deadline is 50 ms.
    let redlock = Redlock::builder(urls.iter().cloned())
        .lease(Duration::from_secs(1))
        .build()
        .unwrap();
    let mutex = redlock.mutex("job").unwrap();
    // Connected first, so that only the replies' latency is in the way.
    mutex.acquire().await.unwrap().release().await.unwrap();
    let _: () = cmd(
        &masters.servers()[2],
        &["SET", "leasehold:{job}", "stray 0 x", "PX", "60000"],
    )
    .await;
    slow.set_reply_latency(Duration::from_millis(80));
    let guard = tokio::time::timeout(NO_HANG, mutex.try_acquire())
        .await
        .unwrap()
        .unwrap()
        .expect("a free majority: the lock is held");
    assert!(guard.servers() >= 2);
    slow.heal();
    guard.release().await.unwrap();
    redlock.flush().await;
}

/// A release dropped while it waits for the watchdog's renewal (two of
/// three masters cut off mid-renewal, which holds the hold's turn) still
/// releases, in the background, as `LeaseGuard::release` promises, and a
/// flush waits for it; nothing is left held until the end of the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_dropped_while_a_renewal_runs_still_releases() {
    const LONG: Duration = Duration::from_secs(6);
    let masters = Masters::start(3);
    let cut: Vec<FaultProxy> = masters.servers()[1..]
        .iter()
        .map(|server| FaultProxy::start(server.addr()))
        .collect();
    let mut urls = vec![masters.urls()[0].clone()];
    urls.extend(cut.iter().map(|proxy| proxy.url()));
    // The renewal at a third of the lease waits for the cut-off masters
    // until the deadline of the lease.
    let redlock = Redlock::builder(urls)
        .lease(LONG)
        .command_timeout(LONG)
        .build()
        .unwrap();
    let mutex = redlock.mutex("job").unwrap();
    let guard = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap();
    let token = guard.token().to_owned();
    for proxy in &cut {
        proxy.blackhole(true);
    }
    // The renewal reached the first master: its time left went back up.
    tokio::time::sleep(LONG / 4).await;
    common::eventually(
        "the watchdog's renewal to reach the first master",
        || async {
            cmd::<i64>(&masters.servers()[0], &["PTTL", "leasehold:{job}"]).await
                > i64::try_from((LONG * 7 / 8).as_millis()).unwrap()
        },
    )
    .await;
    // Dropped while it waits for the renewal to end.
    let dropped = tokio::time::timeout(Duration::from_millis(200), guard.release()).await;
    for proxy in &cut {
        proxy.heal();
    }
    redlock.flush().await;
    for server in masters.servers() {
        let left = held_on(server, "job").await;
        assert!(
            !left.as_deref().is_some_and(|v| v.starts_with(&token)),
            "{server:?} still holds the released lock: {left:?} (release {})",
            if dropped.is_err() { "dropped" } else { "done" }
        );
    }
}

/// Two of three masters stall for longer than half the command timeout
/// (`CLIENT PAUSE`, as under a slow script of another client, or a fork)
/// but answer well within the per-node deadline: their round-one requests run past their limits and
/// are refused as too late. The refusals read their clocks again, so the
/// acquire tries once more and gets the lock, as a slow grant got it
/// before requests had limits; it must not end in a `Quorum` error that
/// says the masters did not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masters_that_stall_past_the_limit_are_asked_again() {
    let masters = Masters::start(3);
    let redlock = Redlock::builder(masters.urls())
        .lease(LEASE)
        .command_timeout(Duration::from_secs(1))
        .node_timeout(Duration::from_millis(950))
        .build()
        .unwrap();
    let mutex = redlock.mutex("job").unwrap();
    // Every master's clock read once.
    mutex.acquire().await.unwrap().release().await.unwrap();
    redlock.flush().await;
    // Every command sent to them meanwhile waits, and runs once it ends.
    for server in &masters.servers()[1..] {
        let _: () = cmd(server, &["CLIENT", "PAUSE", "800"]).await;
    }
    let guard = tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap();
    assert!(guard.servers() >= 2);
    guard.release().await.unwrap();
    redlock.flush().await;
}

/// Round one of a Redlock (`redlock_acquire.lua` after the shared
/// functions, as the library builds it) for `token` on `server`, run as a
/// held request would run once delivered: `proposal` is the fence it
/// proposes (µs), or empty for none. Its reply's first number: 1 held, 0
/// busy, 2 too late.
async fn round_one(server: &RedisServer, token: &str, proposal: &str) -> i64 {
    const SCRIPT: &str = concat!(
        include_str!("../src/scripts/lib.lua"),
        include_str!("../src/scripts/redlock_acquire.lua")
    );
    let reply: Vec<i64> = cmd(
        server,
        &[
            "EVAL",
            SCRIPT,
            "2",
            "leasehold:{job}",
            "leasehold:{job}:fence",
            token,
            "60000",
            "604800000",
            "test",
            proposal,
            "100000000",
            "",
        ],
    )
    .await;
    reply[0]
}

/// A release that finds no token on a master names the token in that
/// master's counter, after its digits; a round one of that token that
/// comes afterwards (as one held in the network does) takes nothing,
/// whether its proposed fence stands or the counter is read; a round one
/// of another token takes the lock, and fences keep growing past the
/// digits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_one_after_its_token_s_release_takes_nothing() {
    let masters = Masters::start(3);
    let servers = masters.servers();
    let redlock = redlock(&masters.urls());
    let mutex = redlock.mutex("job").unwrap();
    let first = mutex.acquire().await.unwrap();
    let fence = first.fence();
    first.release().await.unwrap();
    redlock.flush().await;
    let key = "leasehold:{job}:fence";
    // Each master's own counter (one that was left out of the majority
    // may have none: it counts as 0).
    let mut digits = Vec::new();
    for server in servers {
        digits.push(counter(server, "job").await.unwrap_or(0));
    }
    let gone = "0123456789abcdef0123456789abcdef";
    let err = mutex.release_token(gone).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotHeld, "{err}");
    // Named last, after the digits (and after the first hold's token, on
    // a master left out of its majority: its release found nothing there).
    let mut marked = Vec::new();
    for (server, digits) in servers.iter().zip(&digits) {
        let value: String = cmd(server, &["GET", key]).await;
        assert!(
            value.starts_with(&format!("{digits} x")) && value.ends_with(&format!(" x{gone}")),
            "{value:?}"
        );
        marked.push(value);
    }
    let ahead = (fence + 1_000_000).to_string();
    // The proposed fence taken as it stands, and the counter read.
    assert_eq!(round_one(&servers[0], gone, &ahead).await, 2);
    assert_eq!(round_one(&servers[1], gone, "").await, 2);
    for (server, marked) in servers[..2].iter().zip(&marked) {
        assert_eq!(held_on(server, "job").await, None);
        let value: String = cmd(server, &["GET", key]).await;
        assert_eq!(&value, marked, "the counter changed");
    }
    // Another token: the lock, with a fence past the digits.
    assert_eq!(
        round_one(&servers[2], "fedcba9876543210fedcba9876543210", "").await,
        1
    );
    assert!(counter(&servers[2], "job").await.unwrap() > fence);
    let _: () = cmd(&servers[2], &["DEL", "leasehold:{job}"]).await;
    let next = mutex.acquire().await.unwrap();
    assert!(next.fence() > fence);
    next.release().await.unwrap();
}

/// Other releases that find no token on a master (another client's try
/// that failed there, a hold that master was no part of) may come between
/// a token's release and its round one held in the network: the counter
/// keeps the last few tokens named, so that the round one still takes
/// nothing; the digits stay as they were, and the oldest name goes once
/// there are more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_one_after_its_token_s_release_takes_nothing_after_other_releases() {
    let masters = Masters::start(3);
    let servers = masters.servers();
    let redlock = redlock(&masters.urls());
    let mutex = redlock.mutex("job").unwrap();
    let digits = 1_000_000_u64;
    let key = "leasehold:{job}:fence";
    let _: () = cmd(&servers[0], &["SET", key, &digits.to_string()]).await;
    let gone = "0123456789abcdef0123456789abcdef";
    let others: Vec<String> = (0..8).map(|i| format!("{i:032x}")).collect();
    for token in std::iter::once(gone).chain(others[..7].iter().map(String::as_str)) {
        let err = mutex.release_token(token).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotHeld, "{err}");
    }
    assert_eq!(counter(&servers[0], "job").await, Some(digits));
    assert_eq!(round_one(&servers[0], gone, "").await, 2);
    assert_eq!(held_on(&servers[0], "job").await, None);
    // One more: the oldest name, `gone`'s, is dropped.
    let err = mutex.release_token(&others[7]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotHeld, "{err}");
    assert_eq!(round_one(&servers[0], &others[0], "").await, 2);
    assert_eq!(round_one(&servers[0], gone, "").await, 1);
}

/// A master's counter named by a Redlock release (" x<token>" after its
/// digits) is read as its digits by a single-server lock of the same name
/// on that server too, as a Redlock reads a single-server release's
/// trailing 'w': its next fence is one past them, not the clock's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_lock_reads_a_named_counter_s_digits() {
    let masters = Masters::start(3);
    let servers = masters.servers();
    let redlock = redlock(&masters.urls());
    let mutex = redlock.mutex("job").unwrap();
    let key = "leasehold:{job}:fence";
    let _: () = cmd(&servers[0], &["SET", key, FAR_AHEAD]).await;
    let gone = "0123456789abcdef0123456789abcdef";
    let err = mutex.release_token(gone).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotHeld, "{err}");
    let value: String = cmd(&servers[0], &["GET", key]).await;
    assert_eq!(value, format!("{FAR_AHEAD} x{gone}"));
    let client = leasehold::Client::open(&servers[0].url()).unwrap();
    let guard = client.mutex("job").unwrap().acquire().await.unwrap();
    assert_eq!(guard.fence(), FAR_AHEAD.parse::<u64>().unwrap() + 1);
    guard.release().await.unwrap();
}

/// A Redlock's mutex is the `Mutex` of one deployment, and what has no
/// meaning on independent masters is refused, not ignored: the other kinds
/// of lock, replica acknowledgement, a watch. It has no waiter queue, and
/// a hold-at-least by token keeps the lock on every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_mutex_is_a_mutex_and_refuses_what_needs_one_deployment() {
    let masters = Masters::start(3);
    let redlock = redlock(&masters.urls());
    let client = redlock.client();
    for err in [
        client.fair_mutex("q").map(drop).unwrap_err(),
        client.reentrant_mutex("q").map(drop).unwrap_err(),
        client.rw_lock("q").map(drop).unwrap_err(),
        client.semaphore("q", 2).map(drop).unwrap_err(),
        client.election("q").map(drop).unwrap_err(),
        redlock
            .mutex("q")
            .unwrap()
            .with_replica_ack(1, Duration::from_millis(100))
            .map(drop)
            .unwrap_err(),
        redlock.mutex("q").unwrap().watch().map(drop).unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    }
    let mutex: leasehold::Mutex = redlock.mutex("kept").unwrap();
    let guard = mutex.acquire().await.unwrap();
    assert!(mutex.waiters().await.unwrap().is_empty());
    // A master may grant after the majority did.
    common::eventually("every master to hold the lock", || async {
        for server in masters.servers() {
            if held_on(server, "kept").await.is_none() {
                return false;
            }
        }
        true
    })
    .await;
    let token = guard.detach().token;
    mutex
        .release_token_keeping(&token, Duration::from_secs(30))
        .await
        .unwrap();
    for server in masters.servers() {
        assert!(
            held_on(server, "kept").await.is_some(),
            "kept on every master"
        );
    }
    let info = mutex.inspect().await.unwrap();
    assert!(info.held, "{info:?}");
    assert!(info.holders.iter().all(|holder| holder.kept), "{info:?}");
    assert!(mutex.try_acquire().await.unwrap().is_none());
    assert!(mutex.force_release().await.unwrap());
}
