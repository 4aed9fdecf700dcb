//! Redlock's late round-one requests (grants that arrive after the
//! acquire decided, or after the release): no master is left holding a
//! lock nobody holds, with real masters and a fault proxy.

mod common;

use std::time::Duration;

use common::{cmd, held_on};
use leasehold::{Redlock, RedlockMutex};
use leasehold_testkit::{FaultProxy, Masters, RedisServer};

/// Far longer than the test: a lock still there at the end was left behind.
const LEASE: Duration = Duration::from_secs(60);
const NO_HANG: Duration = Duration::from_secs(60);

/// Three masters, the third behind a fault proxy, and a Redlock mutex
/// "job" over them with a 400 ms command timeout, connected to every master
/// once (a lock taken and released everywhere).
/// `mutex`'s lock, taken within `NO_HANG`.
async fn taken(mutex: &RedlockMutex) -> leasehold::LeaseGuard {
    tokio::time::timeout(NO_HANG, mutex.acquire())
        .await
        .unwrap()
        .unwrap()
}

/// A Redlock over `urls` that gives a connection up after 1 s without an
/// answer, with no watchdog.
fn given_up_after_a_second(urls: Vec<String>) -> Redlock {
    Redlock::builder(urls)
        .lease(LEASE)
        .watchdog(false)
        .command_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// Takes and releases each lock once (connected, the scripts loaded, every
/// master's clock read), then waits for what its redlocks left running.
async fn warmed(mutexes: &[&RedlockMutex], redlocks: &[&Redlock]) {
    for mutex in mutexes {
        let warm = taken(mutex).await;
        warm.release_counted().await.unwrap();
    }
    for redlock in redlocks {
        redlock.flush().await;
    }
}

/// The third master's fence counter of "job", as GET gives it ("" for
/// none): its digits, then the tokens released there without being held
/// (" x<token>" each).
async fn job_counter(third: &RedisServer) -> String {
    common::fence_counter(third, "job")
        .await
        .unwrap_or_default()
}

/// A counter's digits, as a number (0 for none).
fn digits_of(counter: &str) -> u64 {
    common::counter_digits(counter).unwrap_or(0)
}

async fn third_behind_a_proxy() -> (Masters, FaultProxy, Redlock, RedlockMutex) {
    third_behind_a_proxy_after(true).await
}

/// As [`third_behind_a_proxy`]; without `taken`, another client took and
/// released the lock, and this one only connected to every master (an
/// inspect): none ran a round one of this client.
async fn third_behind_a_proxy_after(taken: bool) -> (Masters, FaultProxy, Redlock, RedlockMutex) {
    let (masters, proxy, urls) = common::third_master_behind_a_proxy();
    let redlock = Redlock::builder(urls.clone())
        .lease(LEASE)
        .watchdog(false)
        .command_timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let mutex = redlock.mutex("job").unwrap();
    if taken {
        let warm = self::taken(&mutex).await;
        warm.release_counted().await.unwrap();
    } else {
        // Another client took it (the masters know the scripts); this one
        // only looks.
        let other = Redlock::builder(urls.clone()).lease(LEASE).build().unwrap();
        let warm = tokio::time::timeout(NO_HANG, other.mutex("job").unwrap().acquire())
            .await
            .unwrap()
            .unwrap();
        warm.release_counted().await.unwrap();
        other.flush().await;
        let info = tokio::time::timeout(NO_HANG, mutex.inspect())
            .await
            .unwrap()
            .unwrap();
        assert!(info.holders.is_empty(), "{info:?}");
    }
    redlock.flush().await;
    (masters, proxy, redlock, mutex)
}

/// The third master is cut off (its bytes held, as in a partition) while
/// a lock is taken on the other two and released again; the round-one
/// request to the third is delivered only when the partition heals, after
/// the release, after `flush` returned and after every retry gave up. The
/// third master then grants the lock to a token nobody holds any more: the
/// grant must be let go at once (the request that got it releases it), or
/// the next acquirer could only get the other two for a whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_one_request_delivered_after_the_release_leaves_no_lock_behind() {
    held_through_a_cut(third_behind_a_proxy().await, Duration::ZERO).await;
}

/// As above, but the lock is held longer than the command timeout before
/// it is released: the round-one request's connection is given up by
/// then, and no new connection to the third master can be made while the
/// partition lasts, so the release and its retries never leave the client
/// there. The round-one bytes held in the network are delivered when it
/// heals, after every retry gave up: the third master must refuse them as
/// too late by its own clock (the client read that clock in the warm-up's
/// replies), or it would hold the released token's lock for a whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_one_request_delivered_after_a_release_that_never_got_through() {
    held_through_a_cut(third_behind_a_proxy().await, HELD_PAST_THE_TIMEOUT).await;
}

/// As above, with the client's first round one on every master: it only
/// connected to them before. The third master's clock is read when the
/// connection is made, so that its first round one carries a limit too
/// (a command-line run takes the lock once).
///
/// Where the server has no functions (Redis 6.2), a client's first round
/// one there is a function call the server refuses, sent again as a script
/// only once refused: the request held is that call, which takes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_round_one_delivered_after_a_release_that_never_got_through() {
    let setup = third_behind_a_proxy_after(false).await;
    if !common::has_functions(&setup.0.servers()[2]).await {
        return;
    }
    held_through_a_cut(setup, HELD_PAST_THE_TIMEOUT).await;
}

/// Longer than the 400 ms command timeout: the round one's connection is
/// given up before the release, which then never gets through.
const HELD_PAST_THE_TIMEOUT: Duration = Duration::from_secs(2);

/// The third master cut off (its bytes held) while "job" is taken on the
/// other two, held for `hold`, released, and past every retry the client
/// makes (a few command timeouts); then the cut heals and the held requests
/// reach the third master, which must not be left holding the released
/// token's lock.
async fn held_through_a_cut(
    (masters, proxy, redlock, mutex): (Masters, FaultProxy, Redlock, RedlockMutex),
    hold: Duration,
) {
    let before = common::script_calls(&masters.servers()[2]).await;
    proxy.blackhole(true);
    let guard = taken(&mutex).await;
    let token = guard.token().to_owned();
    tokio::time::sleep(hold).await;
    let connections = proxy.connections();
    guard.release().await.unwrap();
    redlock.flush().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.heal();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let left = held_on(&masters.servers()[2], "job").await;
    let after = common::script_calls(&masters.servers()[2]).await;
    assert!(
        after > before,
        "the round one never reached the third master"
    );
    assert!(
        !left.as_deref().is_some_and(|v| v.starts_with(&token)),
        "the third master holds the released token's lock: {left:?}, ttl {} ms \
         ({connections} connections before the release, {} after)",
        cmd::<i64>(&masters.servers()[2], &["PTTL", "leasehold:{job}"]).await,
        proxy.connections()
    );
}

/// What a round one held on a connection given up for another command's
/// timeout did once its bytes were delivered, after its hold's release ran
/// on a new connection: whether it took the third master's lock for the
/// released token (its fence reached that master's counter), and what the
/// third master holds once the client flushed.
///
/// With a 1 s command timeout (the limit is half of it after sending): a
/// request of lock "other" is held on the third master's connection at
/// 0 ms, round one of "job" at 800 ms; "other" times out at 1000 ms and the
/// connection is given up; "job" is released at 1100 ms on a new one (it
/// finds nothing there), and the held bytes are delivered at about 1120
/// ms, before the limit of "job"'s round one (about 1300 ms).
async fn a_round_one_overtaken_by_its_release() -> (bool, Option<String>) {
    let (masters, proxy, urls) = common::third_master_behind_a_proxy();
    let redlock = given_up_after_a_second(urls);
    let job = redlock.mutex("job").unwrap();
    let other = redlock.mutex("other").unwrap();
    warmed(&[&job, &other], &[&redlock]).await;
    let third = &masters.servers()[2];

    proxy.hold_existing();
    let started = tokio::time::Instant::now();
    let other_guard = taken(&other).await;
    tokio::time::sleep_until(started + Duration::from_millis(800)).await;
    let guard = taken(&job).await;
    let (token, fence) = (guard.token().to_owned(), guard.fence());
    tokio::time::sleep_until(started + Duration::from_millis(1100)).await;
    guard.release().await.unwrap();
    let calls = common::script_calls(third).await;
    proxy.heal();
    // Long enough for the delivered request to run, not for its own
    // command timeout to end.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        common::script_calls(third).await >= calls + 2,
        "the held round ones of \"other\" and \"job\" did not both reach the third master"
    );
    let took = digits_of(&job_counter(third).await) >= fence
        || held_on(third, "job")
            .await
            .is_some_and(|value| value.starts_with(&token));
    other_guard.release().await.unwrap();
    redlock.flush().await;
    let left = held_on(third, "job")
        .await
        .filter(|value| value.starts_with(&token));
    (took, left)
}

/// A round one held on a connection that the client gave up for another
/// command's timeout (not its own) can be overtaken by its hold's release,
/// sent on a new connection within the round one's limit. Whatever the
/// held request did once delivered (it takes nothing, below; where
/// another client's lease came and went on that master in between, it
/// would take the lock), nothing is left once the client flushed: the
/// round one's own outcome, a command timeout after it was sent at most,
/// releases it there once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_one_overtaken_by_its_release_is_let_go_by_its_own_outcome() {
    let (_, left) = a_round_one_overtaken_by_its_release().await;
    assert_eq!(
        left, None,
        "the third master holds the released token's lock"
    );
}

/// As above: the held request takes nothing at all. The release that
/// found no token named it in the third master's counter, and the round
/// one, delivered after it, finds its token named there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_one_overtaken_by_its_release_takes_nothing() {
    let (took, _) = a_round_one_overtaken_by_its_release().await;
    assert!(!took, "the held round one took the lock after its release");
}

/// As [`a_round_one_overtaken_by_its_release`], with a second client on
/// the same host (its connection to the third master held by the same
/// partition) whose try of "job" failed before: busy on the other two
/// (a third client, not cut off, held it there for a while), its round
/// one held on the third. That round one's own command timeout ends just
/// after the first client's release marked the third master's counter,
/// and its release, sent on a new connection, finds no token there
/// either. Whether the first client's round one, delivered once the
/// partition heals and within its limit, took the third master's lock
/// (its fence reached the counter there).
///
/// Schedule (1 s command timeout): "other" of the first client held at
/// 0 ms; "job" held by the third client from 50 ms to 400 ms, tried by the
/// second at 180 ms (busy, its round one held on the third master); "job"
/// taken by the first at 800 ms (its round one held on the third); the
/// first client's connection given up at 1000 ms, its release of "job" at
/// 1100 ms; the second's round one times out at 1180 ms, and its release
/// follows; the partition heals once that release is seen on the third
/// master, before the first's round one's limit (about 1300 ms).
async fn a_round_one_overtaken_by_its_release_and_another_clients() -> bool {
    let (masters, proxy, urls) = common::third_master_behind_a_proxy();
    let (a, b, h) = (
        given_up_after_a_second(urls.clone()),
        given_up_after_a_second(urls),
        given_up_after_a_second(masters.urls()),
    );
    let (job, other) = (a.mutex("job").unwrap(), a.mutex("other").unwrap());
    let (b_job, h_job) = (b.mutex("job").unwrap(), h.mutex("job").unwrap());
    warmed(&[&job, &other, &b_job, &h_job], &[&a, &b, &h]).await;
    let third = &masters.servers()[2];

    proxy.hold_existing();
    let started = tokio::time::Instant::now();
    let other_guard = taken(&other).await;
    tokio::time::sleep_until(started + Duration::from_millis(50)).await;
    let h_guard = taken(&h_job).await;
    tokio::time::sleep_until(started + Duration::from_millis(180)).await;
    let tried = tokio::time::timeout(NO_HANG, b_job.try_acquire())
        .await
        .unwrap()
        .unwrap();
    assert!(tried.is_none(), "the second client got \"job\"");
    tokio::time::sleep_until(started + Duration::from_millis(400)).await;
    h_guard.release().await.unwrap();
    tokio::time::sleep_until(started + Duration::from_millis(800)).await;
    let guard = taken(&job).await;
    let (token, fence) = (guard.token().to_owned(), guard.fence());
    tokio::time::sleep_until(started + Duration::from_millis(1100)).await;
    guard.release().await.unwrap();
    let mark = format!(" x{token}");
    assert!(
        job_counter(third).await.ends_with(&mark),
        "the release did not mark the third master's counter"
    );
    // The second client's release of its try, on a new connection.
    let deadline = started + Duration::from_millis(1290);
    loop {
        let value = job_counter(third).await;
        if value.contains(" x") && !value.ends_with(&mark) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second client's release never reached the third master: {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let calls = common::script_calls(third).await;
    proxy.heal();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        common::script_calls(third).await >= calls + 3,
        "the held requests did not all reach the third master"
    );
    let took = digits_of(&job_counter(third).await) >= fence;
    other_guard.release().await.unwrap();
    for redlock in [&a, &b, &h] {
        redlock.flush().await;
    }
    took
}

/// The first client's round one, overtaken by its release, takes nothing
/// even when another client's release that found no token reached the
/// third master in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_one_overtaken_by_its_release_takes_nothing_after_another_clients_release() {
    let took = a_round_one_overtaken_by_its_release_and_another_clients().await;
    assert!(!took, "the held round one took the lock after its release");
}
