//! The fair mutex: one holder at a time, fenced, first come first served.

use crate::core::LockCore;
use crate::error::Result;
use crate::face::{face_calls, face_settings};
use crate::guard::MutexGuard;
use crate::lock::face_lock;

/// A lock with one holder at a time that is granted in the order the
/// waiters arrived at Redis, across every process. Made by
/// [`Client::fair_mutex`](crate::Client::fair_mutex); cheap to clone.
///
/// A waiter that finds the lock busy joins the lock's queue in Redis. A
/// release hands the lock straight to the first live waiter — the release
/// script makes it the holder, with its fence, and tells it so — so the new
/// holder starts without another round trip and nobody can barge in. A
/// waiter that dies leaves the queue when its heartbeat (3 s) runs out; a
/// lock handed to a waiter that died meanwhile comes back after the
/// hand-off lease, at most those 3 s whatever the lock's lease, and goes to
/// the next (a live waiter makes its lease whole at once: the watchdog
/// renews it, or, with the watchdog off, its next attempt sets it).
/// [`force_release`](FairMutex::force_release) leaves the lock free and
/// wakes the first waiter to try: it hands the lock to nobody blind.
///
/// Not reentrant: the holder's own second attempt (the same task through
/// this handle or a clone) fails at once with
/// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict); see
/// [`is_held_by_current_owner`](FairMutex::is_held_by_current_owner).
///
/// Use it when waits must be bounded and even, for example many workers
/// taking turns on one resource. A [`Mutex`](crate::Mutex) is cheaper when
/// the lock is rarely contended. Guards, fences, the watchdog, losing a
/// lease and cancel safety are those of the `Mutex`: see [`MutexGuard`].
///
/// ```no_run
/// # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
/// let lock = client.fair_mutex("ledger:eu")?;
/// let guard = lock.acquire().await?; // in turn
/// // write, passing guard.fence() along
/// guard.release().await?; // hands the lock to the next in line
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairMutex {
    pub(crate) core: LockCore,
}

face_settings!(FairMutex);
face_lock!(FairMutex);

impl FairMutex {
    pub(crate) fn new(core: LockCore) -> Self {
        FairMutex { core }
    }

    /// Whether the caller (the current tokio task, or the calling thread
    /// outside a task) holds this lock in this process now: a guard it took
    /// through this handle (or a clone of it) is alive, not released, and its
    /// lease is not known lost.
    ///
    /// This is the holder that an [`acquire`](Self::acquire) or
    /// [`try_acquire`](Self::try_acquire) of its own would wait for: such an
    /// attempt fails at once with
    /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) instead. Another
    /// handle of the same lock (another `client.fair_mutex(name)`) is another
    /// holder, even in the same task.
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

    /// This client's place in the lock's line, from 1 at the head (the next
    /// release hands the lock to the head), or `None` when it does not wait
    /// for this lock. The tasks of one client that wait for one
    /// `FairMutex` wait behind one another locally, and the first of them
    /// holds the client's one place in Redis: this is that place.
    ///
    /// # Errors
    ///
    /// As [`waiters`](Self::waiters).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn queue_position(&self) -> Result<Option<usize>> {
        let waiters = self.core.waiters().await?;
        Ok(waiters.iter().find(|w| w.this_client).map(|w| w.position))
    }
}

face_calls! {
    FairMutex -> MutexGuard {
        /// One attempt: the guard if the lock is free and nobody waits for it,
        /// `None` otherwise (a try never jumps the queue).
        ///
        /// # Errors
        ///
        /// As [`Mutex::try_acquire`](crate::Mutex::try_acquire).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe, as [`Mutex::try_acquire`](crate::Mutex::try_acquire).
        try_acquire;

        /// Waits in line as long as it takes for the lock.
        ///
        /// Passing faults do not end the wait and do not cost the waiter its
        /// place, as long as its heartbeat is refreshed in time.
        ///
        /// # Errors
        ///
        /// As [`Mutex::acquire`](crate::Mutex::acquire).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: dropping the future leaves the queue in the background,
        /// and a lock handed over meanwhile is released, which hands it on to the
        /// next waiter.
        acquire;

        /// Waits in line at most `wait` for the lock.
        ///
        /// # Errors
        ///
        /// As [`Mutex::acquire_timeout`](crate::Mutex::acquire_timeout).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe, as [`acquire`](FairMutex::acquire).
        acquire_timeout;

        /// Releases the lock if `token` holds it, handing it to the next waiter.
        ///
        /// # Errors
        ///
        /// As [`Mutex::release_token`](crate::Mutex::release_token).
        ///
        /// # Cancel safety
        ///
        /// Dropping the future may or may not release the lock.
        release_token;

        /// Sets the remaining lease of `token` to `lease` if it still holds the lock.
        ///
        /// # Errors
        ///
        /// As [`Mutex::extend_token`](crate::Mutex::extend_token).
        ///
        /// # Cancel safety
        ///
        /// Dropping the future may or may not extend the lease.
        extend_token;

        /// Removes the lock whoever holds it, leaves it free and wakes the
        /// first live waiter to try (it is not handed the lock: it may have
        /// died within its heartbeat): an admin action. Returns whether a lock
        /// was removed.
        ///
        /// # Errors
        ///
        /// As [`Mutex::force_release`](crate::Mutex::force_release).
        ///
        /// # Cancel safety
        ///
        /// Dropping the future may or may not remove the lock.
        force_release;

        /// The lock's state as Redis sees it now, with the number of clients in line.
        ///
        /// # Errors
        ///
        /// As [`Mutex::inspect`](crate::Mutex::inspect).
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
