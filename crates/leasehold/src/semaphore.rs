//! The semaphore: at most N permits held at once, each a lease of its own.

use std::time::Duration;

use crate::core::LockCore;
use crate::engine::ops;
use crate::error::{Error, Result};
use crate::face::{face_calls, face_settings};
use crate::guard::LeaseGuard;
use crate::lock::face_lock;
use crate::observe::{self, Op};

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 10_000;

/// The longest lifetime of a semaphore's count accepted by
/// [`Semaphore::try_set_permits_for`]: 365 days.
pub const MAX_PERMIT_LIFETIME: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// At most a fixed number of permits held at once, across every process.
/// Made by [`Client::semaphore`](crate::Client::semaphore); cheap to clone.
///
/// - **Every acquisition is a lease** with its own token and fence, renewed
///   by the watchdog while its guard lives: the permits of a process that
///   dies come back when their lease runs out (Redisson's
///   `RPermitExpirableSemaphore`, renewed, so a slow holder does not lose
///   them).
/// - **First come, first served.** Waiters are served in arrival order
///   (every waiting task has its own place, whichever client it belongs
///   to), so a request for many permits is not starved by a stream of
///   requests for one; a release wakes the waiters at the front whose
///   permits fit.
/// - **The permit count is stored with the semaphore.** The first user sets
///   it; a handle with another count is refused with
///   [`ErrorKind::Conflict`](crate::ErrorKind::Conflict), never silently
///   used. [`set_permits`](Semaphore::set_permits) changes it for everyone.
///   The count outlives the last lease by the client's fence retention.
///
/// ```no_run
/// # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
/// let slots = client.semaphore("exports", 4)?;
/// let permit = slots.acquire().await?; // one of 4
/// // run one export
/// permit.release().await?;
/// let big = slots.acquire_many(3).await?; // three at once, in turn
/// big.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    pub(crate) core: LockCore,
    total: u32,
}

face_settings!(Semaphore);
face_lock!(Semaphore);

impl Semaphore {
    /// A semaphore of `total` permits over `core` (of that kind).
    pub(crate) fn new(core: LockCore, total: u32) -> Self {
        Semaphore { core, total }
    }

    /// Whether the caller (the current tokio task, or the calling thread
    /// outside a task) holds this lock in this process now: a guard it took
    /// through this handle (or a clone of it) is alive, not released, and its
    /// lease is not known lost. True when it holds any permits of this
    /// semaphore.
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

    /// The permit count this handle expects the semaphore to have.
    #[must_use]
    pub fn permits(&self) -> u32 {
        self.total
    }

    /// One attempt at `n` permits, held by one lease: a guard if they were
    /// free and nobody waits before this request, else `None`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for zero
    /// permits or more than the semaphore has;
    /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the semaphore
    /// has another permit count than this handle, or the name is in use by
    /// another kind of lock; otherwise as [`Mutex::try_acquire`](crate::Mutex::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a request that may have taken permits is undone in the
    /// background.
    pub async fn try_acquire_many(&self, n: u32) -> Result<Option<LeaseGuard>> {
        self.asking(n)?.try_acquire().await
    }

    /// Waits as long as it takes for `n` permits, in turn with the other
    /// waiters. Waiting does not poll: a release wakes the waiters at the
    /// front of the queue whose permits fit.
    ///
    /// # Errors
    ///
    /// As [`try_acquire_many`](Self::try_acquire_many); connection faults
    /// are ridden out.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves nothing held and takes the
    /// waiter out of the queue, in the background.
    pub async fn acquire_many(&self, n: u32) -> Result<LeaseGuard> {
        self.asking(n)?.acquire().await
    }

    /// Waits at most `wait` for `n` permits.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when the permits are
    /// still taken after `wait`; otherwise as [`acquire_many`](Self::acquire_many).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire_many`](Self::acquire_many).
    pub async fn acquire_many_timeout(&self, n: u32, wait: Duration) -> Result<LeaseGuard> {
        self.asking(n)?.acquire_timeout(wait).await
    }

    fn asking(&self, n: u32) -> Result<LockCore> {
        if n == 0 || n > self.total {
            return Err(Error::invalid(format!(
                "asked for {n} permits of semaphore {:?}, which has {}: ask for 1 to {}",
                self.core.keys.name, self.total, self.total
            )));
        }
        let mut core = self.core.clone();
        core.permits = n;
        Ok(core)
    }

    /// Permits free now, as Redis sees it (the whole count when nobody
    /// has used the semaphore yet).
    ///
    /// # Errors
    ///
    /// As [`inspect`](Self::inspect).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn available(&self) -> Result<u32> {
        observe::traced(self.core.span(Op::Available), self.count_available()).await
    }

    async fn count_available(&self) -> Result<u32> {
        let info = self.core.inspect().await?;
        let total = info.permits.unwrap_or(self.total);
        // Records written by hand can add up past u32::MAX.
        let used = info
            .holders
            .iter()
            .fold(0u32, |used, h| used.saturating_add(h.permits));
        Ok(total.saturating_sub(used))
    }

    /// Sets the semaphore's permit count for every user (an admin action)
    /// and wakes the waiters that now fit. Leases held beyond a lowered
    /// count run on until they are released. Waiters already in the queue
    /// keep their place and take the new count: raised, the waiters that
    /// now fit acquire at once; lowered, they wait until enough is
    /// released (a waiter that asks for more permits than the new count is
    /// refused with [`ErrorKind::Conflict`](crate::ErrorKind::Conflict)).
    /// New attempts through handles with the old count are refused; make
    /// new handles with the new count.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for zero
    /// or more than [`MAX_PERMITS`]; [`ErrorKind::Conflict`](crate::ErrorKind::Conflict)
    /// when the name is in use by another kind of lock; connection and
    /// server errors as elsewhere.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not change the count.
    pub async fn set_permits(&self, permits: u32) -> Result<()> {
        observe::traced(self.core.span(Op::SetPermits), self.store_permits(permits)).await
    }

    async fn store_permits(&self, permits: u32) -> Result<()> {
        validate_permits(permits)?;
        ops::set_permits(self.core.engine(), &self.core.keys, permits, None).await?;
        Ok(())
    }

    /// Sets the semaphore's permit count only if none is set yet (as
    /// Redisson's `trySetPermits`): no semaphore of this name, or one whose
    /// count's lifetime ended. Whether it was set. A count that is set, by
    /// [`set_permits`](Self::set_permits), by an earlier call or by the
    /// first acquisition through a handle, is left as it is. The count
    /// set here keeps no lifetime; see
    /// [`try_set_permits_for`](Self::try_set_permits_for).
    ///
    /// # Errors
    ///
    /// As [`set_permits`](Self::set_permits).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not set the count.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        observe::traced(
            self.core.span(Op::SetPermits),
            self.try_store_permits(permits, None),
        )
        .await
    }

    /// As [`try_set_permits`](Self::try_set_permits), and the count goes
    /// once `lifetime` has passed on the server's clock (as Redisson's
    /// `trySetPermits(permits, timeToLive)`), or with the last permit lease
    /// held then, when one runs longer. **Permits held when the lifetime
    /// ends are not taken back**: their leases run on (renewed as usual)
    /// until they are released, and count against whatever count is set
    /// next. After the end, the next acquisition sets the count again, to
    /// its handle's, and `try_set_permits` finds none set; a semaphore
    /// nobody holds is gone from Redis at the end, and one with leases
    /// still shows the old count in [`inspect`](Self::inspect) until it is
    /// set again. A count set with [`set_permits`](Self::set_permits)
    /// drops the lifetime.
    ///
    /// # Errors
    ///
    /// As [`set_permits`](Self::set_permits), and
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// lifetime under a millisecond or over [`MAX_PERMIT_LIFETIME`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not set the count.
    pub async fn try_set_permits_for(&self, permits: u32, lifetime: Duration) -> Result<bool> {
        observe::traced(
            self.core.span(Op::SetPermits),
            self.try_store_permits(permits, Some(lifetime)),
        )
        .await
    }

    async fn try_store_permits(&self, permits: u32, lifetime: Option<Duration>) -> Result<bool> {
        validate_permits(permits)?;
        if let Some(lifetime) = lifetime {
            if lifetime < Duration::from_millis(1) || lifetime > MAX_PERMIT_LIFETIME {
                return Err(Error::invalid(format!(
                    "a semaphore count's lifetime of {lifetime:?}: give 1 ms to \
                     {MAX_PERMIT_LIFETIME:?}"
                )));
            }
        }
        ops::set_permits(self.core.engine(), &self.core.keys, permits, Some(lifetime)).await
    }

    /// Takes every permit that is free now, in one lease, as one attempt
    /// that passes no waiter: a guard of as many permits as were free, or
    /// `None` when none were (or waiters come first). The guard's permits
    /// go back together at its release. The permits free are read first,
    /// then taken: should another process take one in between, it tries
    /// again with what is left (a few times at most).
    ///
    /// # Errors
    ///
    /// As [`available`](Self::available) and
    /// [`try_acquire_many`](Self::try_acquire_many).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`try_acquire_many`](Self::try_acquire_many).
    pub async fn drain(&self) -> Result<Option<LeaseGuard>> {
        for _ in 0..3 {
            let free = self.available().await?.min(self.total);
            if free == 0 {
                return Ok(None);
            }
            if let Some(guard) = self.try_acquire_many(free).await? {
                return Ok(Some(guard));
            }
        }
        Ok(None)
    }

    /// Deletes the semaphore (an admin action): its permit count and every
    /// permit lease, whoever holds it. Holders learn that their lease is
    /// lost at their next renewal, and their release says the lease was
    /// not held. Waiters are woken, and the next acquisition makes the
    /// semaphore anew with its handle's count. The fence counter stays, so
    /// fences keep growing. Whether there was a semaphore.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the name is
    /// in use by another kind of lock (it is left as it is);
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
    /// [`ErrorKind::Server`](crate::ErrorKind::Server).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not delete the semaphore.
    pub async fn delete(&self) -> Result<bool> {
        crate::engine::admin::delete_semaphore(self.core.engine(), &self.core.keys, self.total)
            .await
    }

    /// The time left on the permit lease that `token` holds (a guard's
    /// [`token`](LeaseGuard::token), say one of another process), by the
    /// Redis server's clock; `None` when the token holds no permits (it was
    /// released, ran out, or is a stranger's).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// token no lease could have; [`ErrorKind::Connection`](crate::ErrorKind::Connection)
    /// or [`ErrorKind::Server`](crate::ErrorKind::Server).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn permit_lease_left(&self, token: &str) -> Result<Option<Duration>> {
        crate::keys::validate_token(token)?;
        crate::engine::admin::permit_left(self.core.engine(), &self.core.keys, token).await
    }

    /// Releases the permit leases of several tokens at once (taken by this
    /// or another process; see [`release_token`](Self::release_token)):
    /// the requests go out together, each is applied on its own, and every
    /// token is tried whatever became of the others. Returns how many
    /// released permits; a token that held none is skipped and not
    /// counted.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// token no lease could have (then nothing is sent); the first
    /// connection or server error otherwise, after every token was tried.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not release each of the permits.
    pub async fn release_tokens(&self, tokens: &[&str]) -> Result<usize> {
        for token in tokens {
            crate::keys::validate_token(token)?;
        }
        let releases = tokens.iter().map(|token| self.core.release_token(token));
        let mut released = 0;
        let mut failed = None;
        for result in futures_util::future::join_all(releases).await {
            match result {
                Ok(()) => released += 1,
                Err(error) if error.is_not_held() => {}
                Err(error) => {
                    failed.get_or_insert(error);
                }
            }
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(released),
        }
    }
}

face_calls! {
    Semaphore -> LeaseGuard {
        /// One attempt at one permit: see [`try_acquire_many`](Self::try_acquire_many).
        ///
        /// # Errors
        ///
        /// As [`try_acquire_many`](Self::try_acquire_many).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe, as [`try_acquire_many`](Self::try_acquire_many).
        try_acquire;

        /// Waits as long as it takes for one permit.
        ///
        /// # Errors
        ///
        /// As [`acquire_many`](Self::acquire_many).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe, as [`acquire_many`](Self::acquire_many).
        acquire;

        /// Waits at most `wait` for one permit.
        ///
        /// # Errors
        ///
        /// As [`acquire_many_timeout`](Self::acquire_many_timeout).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe, as [`acquire_many`](Self::acquire_many).
        acquire_timeout;

        /// Releases a permit lease taken by another process (see
        /// [`Mutex::release_token`](crate::Mutex::release_token)).
        ///
        /// # Errors
        ///
        /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the token holds
        /// no permits: it ran out, was released, or is a stranger's.
        ///
        /// # Cancel safety
        ///
        /// Dropping the future may or may not release the permits.
        release_token;

        /// Takes back every permit, whoever holds it, and wakes the waiters: an
        /// admin action. The permit count and the fence counter are kept.
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
        /// Dropping the future may or may not remove the permits.
        force_release;

        /// The semaphore's state as Redis sees it now: its permit count and
        /// every permit lease.
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

pub(crate) fn validate_permits(permits: u32) -> Result<()> {
    if permits == 0 || permits > MAX_PERMITS {
        return Err(Error::invalid(format!(
            "a semaphore of {permits} permits: give 1 to {MAX_PERMITS}"
        )));
    }
    Ok(())
}
