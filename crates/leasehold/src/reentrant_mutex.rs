//! The reentrant mutex: one owner at a time, who may take it again.

use std::fmt;
use std::time::Duration;

use crate::client::Client;
use crate::engine::Kind;
use crate::error::Result;
use crate::guard::LeaseGuard;
use crate::keys::{validate_lease, validate_wait, LockKeys};
use crate::mutex::{Core, LockInfo};
use crate::owner::Owner;

/// A lock with one owner at a time, who may acquire it again while holding
/// it: each acquisition returns a guard (a level), each release undoes one,
/// and the lock is free when the last level is released. Made by
/// [`Client::reentrant_mutex`]; cheap to clone, and clones share the owner.
///
/// The owner is an explicit [`Owner`], not a thread: every handle the
/// client makes has a fresh owner, and [`with_owner`](Self::with_owner)
/// shares one. Another owner waits (woken as [`Mutex`](crate::Mutex)
/// waiters are: a free lock goes to whoever asks first), or finds it busy.
/// A reentry never waits, not even behind waiters of its own client.
///
/// Every level is a lease of its own with its own token, renewed by the
/// watchdog while its guard lives; the first level's fence is the fence of
/// every level. If the owner's process dies, every level runs out with its
/// lease.
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
    core: Core,
    owner: Owner,
}

impl fmt::Debug for ReentrantMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.debug("ReentrantMutex", f)
    }
}

impl ReentrantMutex {
    pub(crate) fn new(client: Client, keys: LockKeys, owner: Owner) -> Self {
        let mut core = Core::new(client, keys, Kind::Reentrant);
        core.owner = Some(owner.clone());
        ReentrantMutex { core, owner }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.core.keys.name
    }

    /// The owner whose acquisitions this handle makes.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// This lock acquired on behalf of `owner`.
    pub fn with_owner(mut self, owner: Owner) -> Self {
        self.core.owner = Some(owner.clone());
        self.owner = owner;
        self
    }

    /// This lock with another lease length, as [`Mutex::with_lease`](crate::Mutex::with_lease).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a zero
    /// lease, one under 10 ms, or one over 24 h.
    pub fn with_lease(mut self, lease: Duration) -> Result<Self> {
        validate_lease(lease)?;
        self.core.lease = lease;
        Ok(self)
    }

    /// This lock with the watchdog on or off, as [`Mutex::with_watchdog`](crate::Mutex::with_watchdog).
    pub fn with_watchdog(mut self, on: bool) -> Self {
        self.core.watchdog = on;
        self
    }

    /// This lock with a hold-at-least, as [`Mutex::with_hold_at_least`](crate::Mutex::with_hold_at_least):
    /// a level released before `hold` has passed is kept until then.
    ///
    /// # Errors
    ///
    /// As [`Mutex::with_hold_at_least`](crate::Mutex::with_hold_at_least).
    pub fn with_hold_at_least(mut self, hold: Duration) -> Result<Self> {
        self.core.set_hold_at_least(hold)?;
        Ok(self)
    }

    /// This lock with a cap on renewal, as [`Mutex::with_max_hold`](crate::Mutex::with_max_hold).
    ///
    /// # Errors
    ///
    /// As [`Mutex::with_max_hold`](crate::Mutex::with_max_hold).
    pub fn with_max_hold(mut self, max: Duration) -> Result<Self> {
        self.core.set_max_hold(max)?;
        Ok(self)
    }

    /// One attempt: a guard if the lock was free or already this owner's,
    /// `None` if another owner holds it.
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
    pub async fn try_acquire(&self) -> Result<Option<LeaseGuard>> {
        self.core.try_acquire().await
    }

    /// Waits as long as it takes for the lock; a reentry is granted at once.
    /// Waiting works as [`Mutex::acquire`](crate::Mutex::acquire).
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire); connection faults are ridden out.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves nothing held.
    pub async fn acquire(&self) -> Result<LeaseGuard> {
        self.core.acquire(None).await
    }

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
    pub async fn acquire_timeout(&self, wait: Duration) -> Result<LeaseGuard> {
        validate_wait(wait)?;
        self.core.acquire(Some(wait)).await
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
        let info = self.core.inspect().await?;
        let mine = self.owner().id();
        Ok(info
            .holders
            .iter()
            .filter(|h| h.owner.as_deref() == Some(mine))
            .count())
    }

    /// Releases one level taken by another process (see
    /// [`Mutex::release_token`](crate::Mutex::release_token)).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the token holds
    /// no level.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not release the level.
    pub async fn release_token(&self, token: &str) -> Result<()> {
        self.core.release_token(token).await
    }

    /// Removes every level of whoever holds the lock, and wakes its waiters:
    /// an admin action. The fence counter is kept.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
    /// [`ErrorKind::Server`](crate::ErrorKind::Server).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not remove the lock.
    pub async fn force_release(&self) -> Result<bool> {
        self.core.force_release().await
    }

    /// The lock's state as Redis sees it now: one holder per level.
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
        self.core.inspect().await
    }
}
