//! Work done under a lock in one call, for every primitive: acquire, race
//! the work against the loss of the lease, release, and say whether the
//! lease held to the end.

use std::future::Future;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::fair_mutex::FairMutex;
use crate::guard::{LeaseGuard, MutexGuard};
use crate::mutex::Mutex;
use crate::reentrant_mutex::ReentrantMutex;
use crate::rw_lock::{ReadLock, WriteLock};
use crate::semaphore::Semaphore;

impl Mutex {
    /// Waits for the lock, runs `work` with the guard, releases, and returns
    /// what `work` returned, but only if the lease held from the
    /// acquisition to the release.
    ///
    /// If the lease is lost while `work` runs, `work` is dropped at its next
    /// await point (it is not run to the end without protection) and the
    /// call returns the loss. Pass [`MutexGuard::fence`] to every resource
    /// `work` writes: a fenced resource is what keeps the lines `work` had
    /// already sent safe.
    ///
    /// ```no_run
    /// # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
    /// let mutex = client.mutex("ledger:eu")?;
    /// let total = mutex
    ///     .with_lock(async |guard| {
    ///         // write, passing guard.fence() along
    ///         guard.fence() % 7
    ///     })
    ///     .await?;
    /// # let _ = total;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the lease was
    /// lost before the release: `work` was cut short, or it finished but may
    /// have overlapped with another holder; its output is dropped either
    /// way. [`ErrorKind::Connection`](crate::ErrorKind::Connection) when the
    /// release got no answer, so whether the lease held is unknown (the
    /// output is dropped too). Otherwise as [`acquire`](Mutex::acquire).
    /// Use [`acquire`](Mutex::acquire) and [`MutexGuard::release`] yourself
    /// to keep the output of work whose lease was lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops `work` where it stands and the
    /// guard, which is released in the background (a wait that is dropped
    /// leaves nothing held, as [`acquire`](Mutex::acquire)).
    pub async fn with_lock<T>(&self, work: impl AsyncFnOnce(&MutexGuard) -> T) -> Result<T> {
        locked(self.acquire().await?, work).await
    }

    /// As [`with_lock`](Mutex::with_lock), waiting at most `wait` for the lock.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when the lock is
    /// still held by another after `wait`, and `work` never ran; otherwise
    /// as [`with_lock`](Mutex::with_lock) and
    /// [`acquire_timeout`](Mutex::acquire_timeout).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`with_lock`](Mutex::with_lock).
    pub async fn with_lock_timeout<T>(
        &self,
        wait: Duration,
        work: impl AsyncFnOnce(&MutexGuard) -> T,
    ) -> Result<T> {
        locked(self.acquire_timeout(wait).await?, work).await
    }

    /// Waits for the lock and runs `work` under it, as
    /// [`with_lock`](Mutex::with_lock), for work that needs no guard.
    ///
    /// ```no_run
    /// # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
    /// client.mutex("reports:nightly")?.run_locked(write_report()).await?;
    /// # Ok(()) }
    /// # async fn write_report() {}
    /// ```
    ///
    /// # Errors
    ///
    /// As [`with_lock`](Mutex::with_lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`with_lock`](Mutex::with_lock).
    pub async fn run_locked<T>(&self, work: impl Future<Output = T>) -> Result<T> {
        locked(self.acquire().await?, async |_: &MutexGuard| work.await).await
    }
}

/// `with_lock`, `with_lock_timeout` and `run_locked` for a face whose
/// `acquire` and `acquire_timeout` hand out a [`LeaseGuard`], with docs that
/// say what it waits for.
macro_rules! with_lock_on {
    ($face:ty, $waits:literal, $releases:literal) => {
        impl $face {
            #[doc = concat!("Waits ", $waits, ", runs `work` with the guard, releases ", $releases, ", and returns what `work` returned if the lease held to the end, as [`Mutex::with_lock`](crate::Mutex::with_lock): a loss stops `work` at its next await point and is returned as the error.")]
            ///
            /// # Errors
            ///
            /// As [`Mutex::with_lock`](crate::Mutex::with_lock), and as this
            /// face's `acquire`.
            ///
            /// # Cancel safety
            ///
            /// Cancel safe, as [`Mutex::with_lock`](crate::Mutex::with_lock).
            pub async fn with_lock<T>(&self, work: impl AsyncFnOnce(&LeaseGuard) -> T) -> Result<T> {
                locked(self.acquire().await?, work).await
            }

            #[doc = concat!("As `with_lock`, waiting ", $waits, " at most `wait`.")]
            ///
            /// # Errors
            ///
            /// As [`Mutex::with_lock_timeout`](crate::Mutex::with_lock_timeout),
            /// and as this face's `acquire_timeout`.
            ///
            /// # Cancel safety
            ///
            /// Cancel safe, as [`Mutex::with_lock`](crate::Mutex::with_lock).
            pub async fn with_lock_timeout<T>(
                &self,
                wait: Duration,
                work: impl AsyncFnOnce(&LeaseGuard) -> T,
            ) -> Result<T> {
                locked(self.acquire_timeout(wait).await?, work).await
            }

            #[doc = concat!("Waits ", $waits, " and runs `work` under it, as [`Mutex::run_locked`](crate::Mutex::run_locked), for work that needs no guard.")]
            ///
            /// # Errors
            ///
            /// As [`Mutex::with_lock`](crate::Mutex::with_lock).
            ///
            /// # Cancel safety
            ///
            /// Cancel safe, as [`Mutex::with_lock`](crate::Mutex::with_lock).
            pub async fn run_locked<T>(&self, work: impl Future<Output = T>) -> Result<T> {
                locked(self.acquire().await?, async |_: &LeaseGuard| work.await).await
            }
        }
    };
}

with_lock_on!(
    FairMutex,
    "in line for the lock",
    "(handing the lock to the next in line)"
);
with_lock_on!(
    ReentrantMutex,
    "for the lock (at once if this owner holds it)",
    "one level"
);
with_lock_on!(ReadLock, "for a read share of the lock", "the share");
with_lock_on!(
    WriteLock,
    "for the write lock (behind readers and writers that came first)",
    "it"
);
with_lock_on!(Semaphore, "in line for one permit", "the permit");

/// Runs `work` while `guard` holds its lease, then releases it.
pub(crate) async fn locked<T>(
    guard: LeaseGuard,
    work: impl AsyncFnOnce(&LeaseGuard) -> T,
) -> Result<T> {
    let output = {
        let work = work(&guard);
        tokio::select! {
            // A loss that comes with the output still ends in the loss.
            biased;
            () = guard.lost() => None,
            output = work => Some(output),
        }
    };
    let name = guard.name().to_owned();
    let fence = guard.fence();
    // A lost lease makes the release report the loss with its reason.
    guard.release().await?;
    output.ok_or_else(|| {
        Error::not_held(format!(
            "lease on lock {name:?} (fence {fence}) was lost while the work ran: the work was \
             stopped"
        ))
    })
}
