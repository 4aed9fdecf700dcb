//! The edges of a reentrant hold (one lease for all its levels), and
//! release by token through the faces that check the owner.

mod common;

use std::time::Duration;

use common::{client, client_with, eventually};
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
    eventually("the reentry to count in Redis", || async {
        lock.hold_count().await.unwrap() == 2
    })
    .await;
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
        eventually("the reentry to count in Redis", || async {
            lock.hold_count().await.unwrap() == 2
        })
        .await;
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

/// A first level that Redis granted but whose acquire was dropped keeps
/// nothing: its hold-at-least never began, as for a mutex.
#[tokio::test]
async fn a_cancelled_first_level_keeps_nothing_for_its_hold_at_least() {
    let server = RedisServer::start();
    let c = client_with(&server, Duration::from_secs(10), true);
    let lock = c
        .reentrant_mutex("x")
        .unwrap()
        .with_hold_at_least(Duration::from_secs(5))
        .unwrap();
    let stranger = client(&server).reentrant_mutex("x").unwrap();
    // Dropped after Redis granted it, before its answer was read: polled
    // until Redis shows it held, and no further.
    let mut cut_after_grant = false;
    for _ in 0..20 {
        let acquire = lock.acquire();
        let mut acquire = std::pin::pin!(acquire);
        let mut granted = None;
        for _ in 0..1000 {
            if let std::task::Poll::Ready(out) = futures_util::poll!(acquire.as_mut()) {
                granted = Some(out.unwrap());
                break;
            }
            if stranger.inspect().await.unwrap().held {
                cut_after_grant = true;
                break;
            }
        }
        if cut_after_grant {
            break;
        }
        // Answered before it could be dropped: let it go, and try again
        // (a release of a level that got its answer keeps it).
        let token = granted
            .expect("neither granted nor answered")
            .token()
            .to_owned();
        c.mutex("x").unwrap().release_token(&token).await.unwrap();
    }
    assert!(cut_after_grant, "never dropped between grant and answer");
    c.flush().await;
    let theirs = stranger.try_acquire().await.unwrap();
    assert!(theirs.is_some(), "kept for a hold nobody got");
}

/// The owner taking a hold it released within its hold-at-least starts a
/// hold of its own: kept for its own hold-at-least after its release, and
/// capped by its own max hold.
#[tokio::test]
async fn taking_a_kept_hold_again_starts_a_new_hold() {
    let server = RedisServer::start();
    let c = client_with(&server, Duration::from_secs(10), true);
    let hold = Duration::from_secs(2);
    let lock = c
        .reentrant_mutex("x")
        .unwrap()
        .with_hold_at_least(hold)
        .unwrap()
        .with_max_hold(hold)
        .unwrap();
    let first = lock.acquire().await.unwrap();
    let first_fence = first.fence();
    first.release().await.unwrap();
    // Near the end of the first hold's hold-at-least and max hold.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let again = lock.acquire().await.unwrap();
    assert!(again.fence() > first_fence, "a new hold has a new fence");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Past the first hold's max hold, well within the new one's.
    assert!(!again.is_lost(), "capped by the first hold's max hold");
    again.release().await.unwrap();
    // Past the first hold's hold-at-least, within the new one's.
    let stranger = client(&server).reentrant_mutex("x").unwrap();
    assert!(
        stranger.try_acquire().await.unwrap().is_none(),
        "the new hold was not kept for its own hold-at-least"
    );
}

/// A release of a hold's last level within its hold-at-least, sent again
/// (its answer was lost), keeps the hold again and reports success.
#[tokio::test]
async fn a_kept_release_sent_again_keeps_the_hold_again() {
    let server = RedisServer::start();
    let c = client_with(&server, Duration::from_secs(10), true);
    let lock = c
        .reentrant_mutex("x")
        .unwrap()
        .with_hold_at_least(Duration::from_secs(5))
        .unwrap();
    let guard = lock.acquire().await.unwrap();
    let token = guard.token().to_owned();
    guard.release().await.unwrap();
    lock.release_token(&token).await.unwrap();
    let stranger = client(&server).reentrant_mutex("x").unwrap();
    assert!(stranger.try_acquire().await.unwrap().is_none());
}

/// Release by token through an owner-checked face refuses a key that is no
/// lock at all, and leaves it as it is.
#[tokio::test]
async fn release_token_refuses_a_key_that_is_no_lock() {
    let server = RedisServer::start();
    let c = client(&server);
    let _: i64 = common::cmd(&server, &["RPUSH", "leasehold:{n}", "a"]).await;
    for err in [
        c.reentrant_mutex("n")
            .unwrap()
            .release_token("t")
            .await
            .unwrap_err(),
        c.rw_lock("n")
            .unwrap()
            .release_token("t")
            .await
            .unwrap_err(),
    ] {
        assert!(err.is_conflict(), "{err}");
        assert!(err.to_string().contains("list"), "{err}");
    }
    let len: i64 = common::cmd(&server, &["LLEN", "leasehold:{n}"]).await;
    assert_eq!(len, 1);
}

/// A level nobody holds any more (detached here; in the field, one whose
/// release never got through, or an abandoned attempt that Redis applied
/// late) runs out with its own lease, even while its owner keeps taking
/// and releasing the lock: the hold does not live on through it, and the
/// owner's later acquisitions get new fences.
#[tokio::test]
async fn a_level_nobody_holds_runs_out_while_its_owner_goes_on() {
    let server = RedisServer::start();
    let c = client_with(&server, Duration::from_millis(600), true);
    let lock = c.reentrant_mutex("x").unwrap();
    let outer = lock.acquire().await.unwrap();
    let first_fence = outer.fence();
    let _orphan = lock.acquire().await.unwrap().detach();
    outer.release().await.unwrap();
    // The owner goes on taking the lock, never leaving it free for a lease.
    let mut fences = Vec::new();
    for _ in 0..12 {
        let again = lock.acquire().await.unwrap();
        fences.push(again.fence());
        tokio::time::sleep(Duration::from_millis(100)).await;
        again.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        fences.iter().any(|&f| f > first_fence),
        "every acquisition went into the hold of the detached level: {fences:?}"
    );
    // And once the owner lets go, another owner gets in.
    let stranger = client(&server).reentrant_mutex("x").unwrap();
    let theirs = stranger
        .acquire_timeout(Duration::from_secs(5))
        .await
        .unwrap();
    theirs.release().await.unwrap();
}

/// One client shortens a hold that a level of another client (with the
/// same owner) holds too: the hold lasts as long as the other's level, so
/// the other client's guard never claims a lease Redis no longer has.
#[tokio::test]
async fn a_shortening_extend_by_one_client_leaves_the_others_level() {
    let server = RedisServer::start();
    let owner = Owner::from_id("job-8").unwrap();
    let lease = Duration::from_secs(10);
    let a = client_with(&server, lease, false)
        .reentrant_mutex("cfg")
        .unwrap()
        .with_owner(owner.clone());
    let b = client_with(&server, lease, false)
        .reentrant_mutex("cfg")
        .unwrap()
        .with_owner(owner);
    let first = a.acquire().await.unwrap();
    let second = b.acquire().await.unwrap();
    first.extend(Duration::from_millis(200)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!second.is_lost());
    let stranger = client(&server).reentrant_mutex("cfg").unwrap();
    assert!(
        stranger.try_acquire().await.unwrap().is_none(),
        "another owner took the lock while {:?} of the second level's lease was left",
        second.valid_for()
    );
    second.release().await.unwrap();
}
