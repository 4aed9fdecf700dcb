//! The semaphore: at most N permits held at once, each a lease of its own.

use std::time::Duration;

use crate::core::{lock_settings, LockCore};
use crate::engine::ops;
use crate::error::{Error, Result};
use crate::guard::LeaseGuard;
use crate::holder::LockInfo;
use crate::observe::{self, Op};

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 10_000;

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

lock_settings!(Semaphore);

impl Semaphore {
    /// A semaphore of `total` permits over `core` (of that kind).
    pub(crate) fn new(core: LockCore, total: u32) -> Self {
        Semaphore { core, total }
    }

    /// The permit count this handle expects the semaphore to have.
    #[must_use]
    pub fn permits(&self) -> u32 {
        self.total
    }

    /// One attempt at one permit: see [`try_acquire_many`](Self::try_acquire_many).
    ///
    /// # Errors
    ///
    /// As [`try_acquire_many`](Self::try_acquire_many).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`try_acquire_many`](Self::try_acquire_many).
    pub async fn try_acquire(&self) -> Result<Option<LeaseGuard>> {
        self.try_acquire_many(1).await
    }

    /// Waits as long as it takes for one permit.
    ///
    /// # Errors
    ///
    /// As [`acquire_many`](Self::acquire_many).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire_many`](Self::acquire_many).
    pub async fn acquire(&self) -> Result<LeaseGuard> {
        self.acquire_many(1).await
    }

    /// Waits at most `wait` for one permit.
    ///
    /// # Errors
    ///
    /// As [`acquire_many_timeout`](Self::acquire_many_timeout).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire_many`](Self::acquire_many).
    pub async fn acquire_timeout(&self, wait: Duration) -> Result<LeaseGuard> {
        self.acquire_many_timeout(1, wait).await
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
        self.asking(n)?.acquire(None).await
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
        self.asking(n)?.acquire(Some(wait)).await
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
        ops::set_permits(self.core.engine(), &self.core.keys, permits).await
    }

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
    pub async fn release_token(&self, token: &str) -> Result<()> {
        observe::traced(
            self.core.span(Op::ReleaseToken),
            self.core.release_token(token),
        )
        .await
    }

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
    pub async fn force_release(&self) -> Result<bool> {
        observe::traced(self.core.span(Op::ForceRelease), self.core.force_release()).await
    }

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
    pub async fn inspect(&self) -> Result<LockInfo> {
        observe::traced(self.core.span(Op::Inspect), self.core.inspect()).await
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
