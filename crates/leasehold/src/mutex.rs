//! The mutex: one holder at a time, fenced.

use std::time::Duration;

use crate::core::LockCore;
use crate::error::Result;
use crate::face::{face_calls, face_settings};
use crate::guard::MutexGuard;
use crate::holder::LockInfo;
use crate::lock::face_lock;
use crate::observe::{self, Op};

/// A lock with one holder at a time across every process that uses the same
/// Redis and key prefix. Made by [`Client::mutex`](crate::Client::mutex); cheap to clone.
///
/// Each acquisition gets a fresh random token and a fence: a number larger
/// than every fence handed out before for this lock. Pass the fence to the
/// resources you write, and have them refuse smaller ones: that keeps them
/// safe even when a holder stalls past its lease.
///
/// The mutex is not reentrant: a holder that acquires it again through the
/// same handle (or a clone) in the same task gets an immediate
/// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict), never a wait for
/// itself (see [`is_held_by_current_owner`](Mutex::is_held_by_current_owner)
/// for who counts as the holder).
///
/// ```no_run
/// # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
/// let mutex = client.mutex("cache:user:42")?;
/// if let Some(guard) = mutex.try_acquire().await? {
///     // rebuild the cache entry, then:
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Mutex {
    pub(crate) core: LockCore,
}

face_settings!(Mutex);
face_lock!(Mutex);

impl Mutex {
    pub(crate) fn new(core: LockCore) -> Self {
        Mutex { core }
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
    /// handle of the same lock (another `client.mutex(name)`) is another
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

    /// As [`release_token`](Self::release_token), and on how many servers
    /// the lock was held at `token`: for a [`Redlock`](crate::Redlock)'s
    /// mutex, the masters that still held it (the release goes to all of
    /// them in parallel, and succeeds when a majority held it); 1 for a
    /// lock on one deployment.
    ///
    /// # Errors
    ///
    /// As [`release_token`](Self::release_token); on a Redlock,
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when fewer than a
    /// majority held it (it is released on those that did), and
    /// [`ErrorKind::Quorum`](crate::ErrorKind::Quorum) when too many did
    /// not answer to tell.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not release the lock.
    pub async fn release_token_counted(&self, token: &str) -> Result<usize> {
        observe::traced(
            self.core.span(Op::ReleaseToken),
            self.core.release_token_counted(token),
        )
        .await
    }

    /// Releases the lock that `token` holds within a hold-at-least of
    /// `keep` from now: the lock stays held, marked as kept
    /// ([`Holder::kept`](crate::Holder::kept)), and is no longer renewed,
    /// until `keep` has passed; nobody is woken early. For a lease taken by
    /// another process (`leasehold acquire --hold-at-least`, then `leasehold
    /// release --hold-until`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the token does
    /// not hold the lock; [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
    /// for a keep out of range (10 ms to 24 h).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not release the lock.
    pub async fn release_token_keeping(&self, token: &str, keep: Duration) -> Result<()> {
        observe::traced(
            self.core.span(Op::ReleaseToken),
            self.core.release_token_keeping(token, keep),
        )
        .await
    }

    /// What each server the lock is kept on holds of it, in order: every
    /// master of a [`Redlock`](crate::Redlock) (where
    /// [`inspect`](Self::inspect) gives the majority's view), or the one
    /// deployment's server.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn inspect_masters(&self) -> Vec<MasterInfo> {
        self.core
            .inspect_servers()
            .await
            .into_iter()
            .map(|(address, info)| MasterInfo { address, info })
            .collect()
    }
}

face_calls! {
    Mutex -> MutexGuard {
        /// One attempt: the guard if the lock was free, `None` if someone else holds it.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when Redis is
        /// out of reach, slow, or answered so late that the lease had almost run
        /// out (it is then given back); [`ErrorKind::Auth`](crate::ErrorKind::Auth)
        /// when Redis refuses the credentials, [`ErrorKind::Config`](crate::ErrorKind::Config)
        /// when it refuses the connection's settings (database number, TLS);
        /// [`ErrorKind::Server`](crate::ErrorKind::Server) for an unexpected reply;
        /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the caller
        /// holds this lock already (see
        /// [`is_held_by_current_owner`](Self::is_held_by_current_owner)): waiting
        /// would be a wait for itself.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: if the future is dropped after the request may have
        /// reached Redis, the token it sent is released in the background, so the
        /// lock is never left held by nobody.
        try_acquire;

        /// Waits as long as it takes for the lock.
        ///
        /// Waiting does not poll. A waiter that finds the lock busy joins the
        /// lock's waiter queue in Redis; a release wakes the first live waiter
        /// alone, which then tries again. A free lock still goes to whoever asks
        /// first, so a holder that releases and asks again at once often wins;
        /// to keep waits bounded, a waiter that has waited more than a few
        /// milliseconds asks to be handed the lock at the next release instead
        /// (the starvation mode of Go's `sync.Mutex`). Use
        /// [`FairMutex`](crate::FairMutex) for strict first come, first served.
        /// A waiter also wakes when the holder's lease can have run out.
        /// Tasks of one client that wait for the same lock queue in FIFO order,
        /// and only the first of them talks to Redis.
        ///
        /// Passing faults do not end the wait: when Redis does not answer, the
        /// connection fails or the server is not ready, the waiter keeps its
        /// place, backs off and tries again on a new connection.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Server`](crate::ErrorKind::Server) for an unexpected
        /// reply or a refused script. Connection faults are ridden out; refused
        /// credentials ([`ErrorKind::Auth`](crate::ErrorKind::Auth)) and settings
        /// ([`ErrorKind::Config`](crate::ErrorKind::Config)) end the wait at once,
        /// since waiting cannot mend them.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: dropping the future at any point leaves nothing held; a
        /// request that may have taken the lock is undone, and the waiter leaves
        /// the queue, in the background.
        acquire;

        /// Waits at most `wait` for the lock.
        ///
        /// An attempt that is in flight when `wait` runs out is seen through, so
        /// against a slow Redis the call can end up to one command timeout late.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when the lock is
        /// still held after `wait`; [`ErrorKind::Connection`](crate::ErrorKind::Connection)
        /// when Redis did not answer at all during the whole wait (the last fault
        /// is reported); [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
        /// for a wait over a day; otherwise as [`acquire`](Mutex::acquire).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe, as [`acquire`](Mutex::acquire).
        acquire_timeout;

        /// Releases the lock if `token` holds it: for a lease taken by another
        /// process, such as `leasehold acquire` in a shell script.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the token does
        /// not hold the lock (it expired, or it was released or removed).
        ///
        /// # Cancel safety
        ///
        /// Dropping the future may or may not release the lock.
        release_token;

        /// Sets the remaining lease of `token` to `lease` if it still holds the lock.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the token does
        /// not hold the lock; [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
        /// for a lease out of range.
        ///
        /// # Cancel safety
        ///
        /// Dropping the future may or may not extend the lease.
        extend_token;

        /// Removes the lock whoever holds it, and wakes its first waiter: an
        /// admin action for a lock whose holder is known to be gone. Returns
        /// whether a lock was removed. The fence counter is kept, so fences
        /// never go back.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the name's
        /// key is no lock (a key leasehold did not write, such as a list: it is
        /// left as it is); [`ErrorKind::Connection`](crate::ErrorKind::Connection)
        /// or [`ErrorKind::Server`](crate::ErrorKind::Server).
        ///
        /// # Cancel safety
        ///
        /// Dropping the future may or may not remove the lock.
        force_release;

        /// The lock's state as Redis sees it now.
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

/// What one server holds of a lock, as [`Mutex::inspect_masters`] reads
/// it: a master of a [`Redlock`](crate::Redlock), or the one deployment
/// of a [`Client`](crate::Client).
#[derive(Debug)]
#[non_exhaustive]
pub struct MasterInfo {
    /// The server, as `host:port`.
    pub address: String,
    /// Its state of the lock, or why it could not be read.
    pub info: Result<LockInfo>,
}
