//! The edges of a reentrant hold (one lease for all its levels), and
//! release by token through the faces that check the owner.

mod common;

use std::time::Duration;

use common::{client, client_with};
use leasehold::Owner;
use leasehold_testkit::RedisServer;

/// A hold released before its hold-at-least is kept with no level. A reentry
/// by the same owner meanwhile takes it again, and its release is the last
/// level's: the lock is free once the hold-at-least is over, not held by
/// nobody for a whole lease.
#[tokio::test]
async fn a_reentry_into_a_kept_hold_leaves_no_lock_held_by_nobody() {
    let server = RedisServer::start();
    let c = client_with(&server, Duration::from_secs(20), true);
    let lock = c
        .reentrant_mutex("x")
        .unwrap()
        .with_hold_at_least(Duration::from_millis(300))
        .unwrap();
    lock.acquire().await.unwrap().release().await.unwrap();
    // Kept for 300 ms: the same owner takes it again meanwhile.
    let again = lock.acquire().await.unwrap();
    again.release().await.unwrap();
    // Every guard is released and the hold-at-least is long over.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let other = c.reentrant_mutex("x").unwrap();
    let got = other.try_acquire().await.unwrap();
    let info = lock.inspect().await.unwrap();
    assert!(
        got.is_some(),
        "no guard lives, yet the lock is held: {info:?}"
    );
}

/// Two clients share an owner id: the second client's level has a lease of
/// its own for the hold, bounded by the hold's max hold counted from its
/// first level, not from the reentry.
#[tokio::test]
async fn a_shared_owner_in_another_client_does_not_renew_a_hold_past_its_max_hold() {
    let server = RedisServer::start();
    let owner = Owner::from_id("job-7").unwrap();
    let lease = Duration::from_millis(300);
    let cap = Duration::from_millis(1000);
    let a = client_with(&server, lease, true)
        .reentrant_mutex("cfg")
        .unwrap()
        .with_owner(owner.clone())
        .with_max_hold(cap)
        .unwrap();
    let b = client_with(&server, lease, true)
        .reentrant_mutex("cfg")
        .unwrap()
        .with_owner(owner)
        .with_max_hold(cap)
        .unwrap();
    let first = a.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let second = b.acquire().await.unwrap();
    first.release().await.unwrap();
    // Past the max hold counted from the first level (1 s), before the
    // one counted from the reentry (1.6 s).
    tokio::time::sleep(Duration::from_millis(650)).await;
    let stranger = client(&server).reentrant_mutex("cfg").unwrap();
    let got = stranger.try_acquire().await.unwrap();
    let info = stranger.inspect().await.unwrap();
    assert!(
        second.is_lost(),
        "1.25 s into a hold capped at 1 s, the second level's guard still claims it: {info:?}"
    );
    assert!(got.is_some(), "the hold outlived its max hold: {info:?}");
}

/// A reentry is applied in Redis before an extend that shortens the hold,
/// but its reply is read after the extend's (the acquiring task was not
/// polled meanwhile): the guards keep the shortened lease Redis has, and
/// never claim the hold after another owner took it.
#[tokio::test]
async fn a_reentry_reply_read_after_a_shortening_extend_does_not_outlive_it() {
    let server = RedisServer::start();
    let c = client_with(&server, Duration::from_secs(10), false);
    let lock = c.reentrant_mutex("x").unwrap();
    let first = lock.acquire().await.unwrap();
    let reentry = lock.acquire();
    let mut reentry = std::pin::pin!(reentry);
    // Sent, not read.
    assert!(futures_util::poll!(reentry.as_mut()).is_pending());
    tokio::time::sleep(Duration::from_millis(50)).await;
    first.extend(Duration::from_millis(100)).await.unwrap();
    let second = reentry.await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stranger = client(&server).reentrant_mutex("x").unwrap();
    let theirs = stranger.try_acquire().await.unwrap();
    assert!(
        theirs.is_none() || (first.is_lost() && second.is_lost()),
        "another owner holds the lock, yet our guards claim it for {:?} more",
        second.valid_for()
    );
}

/// The outer level is released (hold-at-least 2 s) while a reentry that
/// Redis counted is cancelled: the cancelled level's release in the
/// background is the last, and keeps the hold until its hold-at-least is
/// over, as Redis recorded it with the hold.
#[tokio::test]
async fn a_cancelled_reentry_does_not_cut_the_holds_hold_at_least_short() {
    let server = RedisServer::start();
    let c = client_with(&server, Duration::from_secs(10), true);
    let lock = c
        .reentrant_mutex("x")
        .unwrap()
        .with_hold_at_least(Duration::from_secs(2))
        .unwrap();
    let first = lock.acquire().await.unwrap();
    {
        let reentry = lock.acquire();
        let mut reentry = std::pin::pin!(reentry);
        assert!(futures_util::poll!(reentry.as_mut()).is_pending());
        // Counted in Redis; its answer is never read.
        tokio::time::sleep(Duration::from_millis(50)).await;
        first.release().await.unwrap();
    }
    c.flush().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stranger = client(&server).reentrant_mutex("x").unwrap();
    let theirs = stranger.try_acquire().await.unwrap();
    assert!(
        theirs.is_none(),
        "taken by another owner 0.2 s into a hold-at-least of 2 s"
    );
}

/// `RwLock::release_token` releases no lock of another kind: a Mutex's token
/// is refused as a conflict, and the mutex stays held.
#[tokio::test]
async fn an_rw_lock_handle_does_not_release_a_mutex_by_token() {
    let server = RedisServer::start();
    let c = client(&server);
    let held = c.mutex("n").unwrap().acquire().await.unwrap();
    let token = held.token().to_owned();
    let rw = c.rw_lock("n").unwrap();
    let outcome = rw.release_token(&token).await;
    let still = !held.is_lost() && c.mutex("n").unwrap().inspect().await.unwrap().held;
    assert!(
        outcome.as_ref().is_err_and(leasehold::Error::is_conflict) && still,
        "RwLock::release_token released another kind's lease: {outcome:?}, still held: {still}"
    );
}

/// The same through a ReentrantMutex handle on a FairMutex.
#[tokio::test]
async fn a_reentrant_handle_does_not_release_a_fair_mutex_by_token() {
    let server = RedisServer::start();
    let c = client(&server);
    let held = c.fair_mutex("n").unwrap().acquire().await.unwrap();
    let token = held.token().to_owned();
    let re = c.reentrant_mutex("n").unwrap();
    let outcome = re.release_token(&token).await;
    let still = c.mutex("n").unwrap().inspect().await.unwrap().held;
    assert!(
        outcome.as_ref().is_err_and(leasehold::Error::is_conflict) && still,
        "ReentrantMutex::release_token released another kind's lease: {outcome:?}, still held: {still}"
    );
}
