//! The reentrant mutex: one owner at a time, who may take it again.

use crate::core::LockCore;
use crate::error::Result;
use crate::face::{face_calls, face_settings};
use crate::guard::LeaseGuard;
use crate::lock::face_lock;

/// A lock with one owner at a time, who may acquire it again while holding
/// it: each acquisition returns a guard (a level), each release undoes one,
/// and the lock is free when the last level is released. Made by
/// [`Client::reentrant_mutex`](crate::Client::reentrant_mutex); cheap to clone.
///
/// **The owner follows the task**, as Redisson's follows the thread: each
/// tokio task that acquires through a handle (outside a task, each thread)
/// is an owner of its own. So a handle kept in application state and
/// cloned into tasks, or shared behind an `Arc`, never lets two tasks hold
/// the lock at once; nested acquisitions within one task are reentries.
/// Futures polled concurrently in one task (`join!`, `select!`) are one
/// owner: they nest. To share a hold across tasks (or processes), name the
/// owner: [`with_owner`](Self::with_owner) with an [`Owner`](crate::Owner) makes every
/// task that uses the handle that owner. Another owner waits (woken as [`Mutex`](crate::Mutex)
/// waiters are: a free lock goes to whoever asks first), or finds it busy;
/// with [`fair`](Self::fair), owners are served in the order they arrived,
/// as Redisson's fair lock serves them. A reentry never waits, not even
/// behind waiters of its own client.
///
/// All levels of an owner's hold share **one lease**: one entry in Redis
/// with the level count, the fence handed out on the first level, and one
/// expiry. A reentry refreshes the lease to the full lease length from
/// then, as Redisson's does (never shortening it, and never past the max
/// hold counted from the first level). Every guard of the hold reports the
/// same lease: [`lost`](LeaseGuard::lost), [`is_lost`](LeaseGuard::is_lost)
/// and [`valid_for`](LeaseGuard::valid_for) agree, and
/// [`extend`](LeaseGuard::extend) on any of them extends the one lease. The
/// watchdog renews it once per round while any level's guard lives; the
/// settings of the first level (lease, watchdog, hold-at-least, max hold)
/// are the hold's. A level taken while the hold is known lost shares that
/// loss: release every level, then take the lock anew.
///
/// Each level also runs out by itself in Redis: the renewals and extends
/// of the client that holds it keep it, and nothing else does. So a level
/// nobody holds any more (a guard detached, a release that never got
/// through, an abandoned acquire that Redis applied late) leaves the hold
/// within one lease, even while its owner keeps taking the lock, instead
/// of keeping the hold, and its fence, alive forever. Several clients may
/// share an owner: each renews its own levels, and one that shortens the
/// lease shortens only its own.
///
/// Each guard has a token of its own ([`LeaseGuard::token`]) that releases
/// its level alone, however the levels are released: in any order, by
/// [`release`](LeaseGuard::release), by a drop (in the background), or by
/// [`release_token`](Self::release_token). The last release frees the lock
/// and wakes the next waiter. If the owner's process dies, the hold runs out
/// with its lease.
///
/// ```no_run
/// # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
/// let lock = client.reentrant_mutex("config:write")?;
/// let outer = lock.acquire().await?;
/// let inner = lock.acquire().await?; // same owner: no wait
/// assert_eq!(inner.fence(), outer.fence());
/// inner.release().await?;
/// outer.release().await?; // the lock is free now
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReentrantMutex {
    pub(crate) core: LockCore,
}

face_settings!(ReentrantMutex);
face_lock!(ReentrantMutex);

impl ReentrantMutex {
    pub(crate) fn new(core: LockCore) -> Self {
        ReentrantMutex { core }
    }

    /// Whether this handle's owner ([`owner`](Self::owner): the current task's,
    /// or the one named with [`with_owner`](Self::with_owner)) holds this lock
    /// in this process now: a guard it took through this handle (or a clone of
    /// it) is alive, not released, and its lease is not known lost.
    /// [`hold_count`](Self::hold_count) asks Redis, across processes.
    ///
    /// It is answered from this process's own leases, without a round trip:
    /// a lease removed behind the holder's back (a force-release, a Redis
    /// that lost it) counts as held until a renewal, or the lease's local
    /// deadline, tells. A guard moved to another task still counts for the
    /// one that acquired it.
    #[must_use]
    pub fn is_held_by_current_owner(&self) -> bool {
        self.core.held_by_current_owner(|_| true)
    }

    /// This lock served in arrival order across owners, as Redisson's fair
    /// lock (`getFairLock`) is: a new hold goes to the first live waiter in
    /// the lock's queue in Redis, and to a newcomer (a
    /// [`try_acquire`](Self::try_acquire) included) only when nobody waits.
    /// Each waiting task keeps its own place; a release wakes the first
    /// waiter alone, which then takes the lock (a waiter that died is passed
    /// over once its heartbeat, 3 s, runs out). Nesting is as without it: the
    /// owner's reentry never waits, each release undoes one level, and every
    /// level of a hold shares its lease and fence.
    ///
    /// Fairness is a property of the attempts: a handle without it on the
    /// same name (a `ReentrantMutex`, or an older leasehold) takes a free
    /// lock without waiting its turn, while still excluding every other
    /// owner.
    #[must_use]
    pub fn fair(mut self) -> Self {
        self.core.make_fair();
        self
    }

    /// Whether this handle waits its turn (see [`fair`](Self::fair)).
    #[must_use]
    pub fn is_fair(&self) -> bool {
        self.core.is_fair()
    }

    /// How many levels this handle's owner holds now, as Redis sees it.
    ///
    /// # Errors
    ///
    /// As [`inspect`](Self::inspect).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn hold_count(&self) -> Result<usize> {
        let info = self.inspect().await?;
        let owner = self.owner();
        let mine = owner.id();
        Ok(info
            .holders
            .iter()
            .filter(|h| h.owner.as_deref() == Some(mine))
            .fold(0, |n: usize, h| {
                n.saturating_add(usize::try_from(h.levels).unwrap_or(usize::MAX))
            }))
    }
}

face_calls! {
    ReentrantMutex -> LeaseGuard {
        /// The owner whose acquisitions this handle makes now: the owner named
        /// with [`with_owner`](Self::with_owner), else the current task's.
        owner;

        /// This lock acquired on behalf of `owner`, whichever task acquires:
        /// every task and clone that uses the handle shares `owner`'s holds.
        with_owner;

        /// One attempt: a guard if the lock was free or already this owner's,
        /// `None` if another owner holds it (or, with [`fair`](Self::fair),
        /// another waits for it first).
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the name is
        /// in use by another kind of lock; otherwise as
        /// [`Mutex::try_acquire`](crate::Mutex::try_acquire).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: a request that may have taken a level is undone in the
        /// background.
        try_acquire;

        /// Waits as long as it takes for the lock; a reentry is granted at once.
        /// Waiting works as [`Mutex::acquire`](crate::Mutex::acquire), except that
        /// each waiting task keeps its own place in the lock's queue in Redis.
        ///
        /// # Errors
        ///
        /// As [`try_acquire`](Self::try_acquire); connection faults are ridden out.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: dropping the future leaves nothing held.
        acquire;

        /// Waits at most `wait` for the lock.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when another owner
        /// still holds it after `wait`; otherwise as [`acquire`](Self::acquire).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe, as [`acquire`](Self::acquire).
        acquire_timeout;

        /// Releases the level that `token` holds, taken by this handle's owner
        /// in another process or task (see [`LeaseGuard::detach`]): the hold
        /// loses one level, and the lock is free once the last is gone.
        ///
        /// As Redisson refuses an unlock by a thread that does not hold the
        /// lock, a handle of another owner cannot release the level, even with
        /// its token; [`Mutex::release_token`](crate::Mutex::release_token)
        /// releases by token alone, and [`force_release`](Self::force_release)
        /// whoever holds it.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the token holds
        /// no level, or holds one of another owner's hold;
        /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the name
        /// holds another kind of lock;
        /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
        /// token that no lease could have.
        ///
        /// # Cancel safety
        ///
        /// Dropping the future may or may not release the level.
        release_token;

        /// Removes the hold of whoever holds the lock, every level of it, and
        /// wakes its waiters: an admin action. The fence counter is kept.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the name's
        /// key is no lock (a key leasehold did not write: it is left as it is);
        /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
        /// [`ErrorKind::Server`](crate::ErrorKind::Server).
        ///
        /// # Cancel safety
        ///
        /// Dropping the future may or may not remove the lock.
        force_release;

        /// The lock's state as Redis sees it now: the one hold, with its owner
        /// and its [`levels`](crate::Holder::levels).
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
        /// [`ErrorKind::Server`](crate::ErrorKind::Server).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: it only reads.
        inspect;

        /// The lock's live waiters in line, head first, as Redis sees them
        /// now: who waits, since when, for what. A waiter whose heartbeat ran
        /// out (it died) is left out. For a `Mutex` or `FairMutex` there is one
        /// waiter per waiting client (its other tasks wait behind it locally);
        /// for the other kinds one per waiting task.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
        /// [`ErrorKind::Server`](crate::ErrorKind::Server).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: it only reads.
        waiters;
    }
}
