//! The blocking guard: a held lease, for synchronous code.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::runtime::{outside_async, Shared};
use crate::engine::loss::LossReason;
use crate::error::Result;
use crate::guard::DetachedLease;

/// A held lease on a blocking [`Mutex`](super::Mutex) or
/// [`FairMutex`](super::FairMutex).
pub type MutexGuard = LeaseGuard;

/// A held lease on any blocking lock: the blocking face of
/// [`crate::LeaseGuard`], with the same fence, token, renewal and loss.
///
/// The watchdog renews the lease on the blocking runtime's thread while the
/// guard lives, whatever the calling thread does meanwhile. A lost lease is
/// seen with [`is_lost`](Self::is_lost) (a flag to check between steps of
/// the work), [`wait_lost`](Self::wait_lost) (blocks until it is lost: for
/// a thread that watches) or [`lost_timeout`](Self::lost_timeout).
///
/// Release it with [`release`](Self::release) to learn whether the lease
/// held to the end. Dropped without it, it is released in the background
/// on the blocking runtime, which finishes that before it stops.
#[must_use = "dropping the guard releases the lock at once"]
#[clippy::has_significant_drop]
pub struct LeaseGuard {
    /// `None` only once released, detached or dropped.
    guard: Option<crate::LeaseGuard>,
    shared: Arc<Shared>,
}

impl LeaseGuard {
    pub(crate) fn new(guard: crate::LeaseGuard, shared: Arc<Shared>) -> Self {
        LeaseGuard {
            guard: Some(guard),
            shared,
        }
    }

    /// Semaphore permits this lease holds (1 for the other locks).
    #[must_use]
    pub fn permits(&self) -> u32 {
        self.guard.as_ref().map_or(0, crate::LeaseGuard::permits)
    }

    /// The lock's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.guard.as_ref().map_or("", crate::LeaseGuard::name)
    }

    /// How many servers the lease is taken on: see
    /// [`crate::LeaseGuard::servers`].
    #[must_use]
    pub fn servers(&self) -> usize {
        self.guard.as_ref().map_or(0, crate::LeaseGuard::servers)
    }

    /// The fence of this acquisition: see [`crate::LeaseGuard::fence`].
    #[must_use]
    pub fn fence(&self) -> u64 {
        self.guard.as_ref().map_or(0, crate::LeaseGuard::fence)
    }

    /// The random token that identifies this acquisition in Redis.
    #[must_use]
    pub fn token(&self) -> &str {
        self.guard.as_ref().map_or("", crate::LeaseGuard::token)
    }

    /// The lease was lost: the work done under it from here on is not
    /// protected. Once true, stays true. It does not block.
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.guard.as_ref().is_none_or(crate::LeaseGuard::is_lost)
    }

    /// Why the lease was lost, once it is; `None` while it is held.
    #[must_use]
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.guard.as_ref().and_then(crate::LeaseGuard::loss_reason)
    }

    /// Time left before the lease runs out by the local clock, if no
    /// renewal comes; zero once lost.
    #[must_use]
    pub fn valid_for(&self) -> Duration {
        self.guard
            .as_ref()
            .map_or(Duration::ZERO, crate::LeaseGuard::valid_for)
    }

    /// Blocks the calling thread until the lease is lost (at once if it
    /// already is); [`loss_reason`](Self::loss_reason) then says why. For a
    /// thread that watches the lease while others work: share the guard
    /// with it (`std::thread::scope`, or an `Arc`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime (see the [module docs](super)).
    pub fn wait_lost(&self) -> Result<()> {
        match &self.guard {
            Some(guard) => self.shared.block_on(guard.lost()),
            None => Ok(()),
        }
    }

    /// Blocks the calling thread until the lease is lost or `wait` has
    /// passed, whichever comes first: whether it was lost.
    ///
    /// # Errors
    ///
    /// As [`wait_lost`](Self::wait_lost).
    pub fn lost_timeout(&self, wait: Duration) -> Result<bool> {
        match &self.guard {
            Some(guard) => {
                // The timer is made inside the runtime's context.
                let lost = self
                    .shared
                    .block_on(async { tokio::time::timeout(wait, guard.lost()).await })?;
                Ok(lost.is_ok())
            }
            None => Ok(true),
        }
    }

    /// Sets the lease to `lease` from now, blocking for the round trip; the
    /// watchdog, if on, renews with this length from then on.
    ///
    /// # Errors
    ///
    /// As [`crate::LeaseGuard::extend`];
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when called
    /// inside an async runtime.
    pub fn extend(&self, lease: Duration) -> Result<()> {
        match &self.guard {
            Some(guard) => self.shared.block_on(guard.extend(lease))?,
            None => Ok(()),
        }
    }

    /// Releases this lease, blocking until Redis answers (a release that
    /// cannot reach Redis is tried again for a few command timeouts, never
    /// past the lease), and wakes the waiters the lock can serve now.
    ///
    /// # Errors
    ///
    /// As [`crate::LeaseGuard::release`]:
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the lease was
    /// lost before the release,
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when no answer
    /// came (the release goes on in the background).
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime: the guard is then dropped, which
    /// releases it in the background.
    pub fn release(mut self) -> Result<()> {
        outside_async()?;
        match self.guard.take() {
            Some(guard) => self.shared.block_on(guard.release())?,
            None => Ok(()),
        }
    }

    /// As [`release`](Self::release), and on how many servers the lease
    /// was held when it was released: see
    /// [`crate::LeaseGuard::release_counted`].
    ///
    /// # Errors
    ///
    /// As [`release`](Self::release).
    pub fn release_counted(mut self) -> Result<usize> {
        outside_async()?;
        match self.guard.take() {
            Some(guard) => self.shared.block_on(guard.release_counted())?,
            None => Ok(0),
        }
    }

    /// Gives up the guard without releasing: see
    /// [`crate::LeaseGuard::detach`]. It does not block.
    pub fn detach(mut self) -> DetachedLease {
        let detached = DetachedLease {
            name: self.name().to_owned(),
            token: self.token().to_owned(),
            fence: self.fence(),
            valid_for: self.valid_for(),
        };
        if let Some(guard) = self.guard.take() {
            let _ = guard.detach();
        }
        detached
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            // The async guard releases in the background on the runtime it
            // finds, which must be the blocking one.
            let _context = self.shared.runtime.handle().enter();
            drop(guard);
        }
    }
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("name", &self.name())
            .field("fence", &self.fence())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}
