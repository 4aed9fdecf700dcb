//! What every kind of lock can do, as one trait: for code that takes "a
//! lock" without caring which kind (a command-line tool, a test harness, a
//! generic helper).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::error::Result;
use crate::guard::LeaseGuard;
use crate::holder::LockInfo;
use crate::observe::{self, Op};

/// The future a [`Lock`] method returns: boxed, so that `dyn Lock` works.
pub type LockFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// The calls every kind of lock answers: [`Mutex`](crate::Mutex),
/// [`FairMutex`](crate::FairMutex), [`ReentrantMutex`](crate::ReentrantMutex),
/// each side of an [`RwLock`](crate::RwLock) ([`ReadLock`](crate::ReadLock),
/// [`WriteLock`](crate::WriteLock)), [`Semaphore`](crate::Semaphore) (one
/// permit per acquisition) and [`RedlockMutex`](crate::RedlockMutex). Each
/// method does what the kind's own method of the same name does, with the
/// same errors and cancel safety; the kinds' own docs say how each behaves. It is object safe: hold a
/// `Box<dyn Lock>` to choose the kind at run time.
///
/// ```no_run
/// # async fn demo(client: leasehold::Client, fair: bool) -> leasehold::Result<()> {
/// use leasehold::Lock;
///
/// let lock: Box<dyn Lock> = if fair {
///     Box::new(client.fair_mutex("jobs")?)
/// } else {
///     Box::new(client.mutex("jobs")?)
/// };
/// let guard = lock.acquire().await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub trait Lock: std::fmt::Debug + Send + Sync {
    /// The lock's name.
    fn name(&self) -> &str;

    /// The Redis key of the lock itself (`<prefix>:{name}`): what a
    /// [`MultiLock`](crate::MultiLock) orders its locks by.
    fn key(&self) -> &str;

    /// One attempt: the guard if the lock could be taken now, else `None`.
    fn try_acquire(&self) -> LockFuture<'_, Option<LeaseGuard>>;

    /// Waits as long as it takes for the lock.
    fn acquire(&self) -> LockFuture<'_, LeaseGuard>;

    /// Waits at most `wait` for the lock.
    fn acquire_timeout(&self, wait: Duration) -> LockFuture<'_, LeaseGuard>;

    /// Releases the lease that `token` holds (for the kinds with owners,
    /// only a lease of the handle's owner).
    fn release_token<'a>(&'a self, token: &'a str) -> LockFuture<'a, ()>;

    /// Sets the remaining lease of `token` to `lease` if it still holds
    /// the lock.
    fn extend_token<'a>(&'a self, token: &'a str, lease: Duration) -> LockFuture<'a, ()>;

    /// Removes the lock whoever holds it, and wakes its waiters: an admin
    /// action. Whether a lock was removed.
    fn force_release(&self) -> LockFuture<'_, bool>;

    /// The lock's state as Redis sees it now.
    fn inspect(&self) -> LockFuture<'_, LockInfo>;
}

/// Implements [`Lock`] for a face whose `core` field is a
/// [`LockCore`](crate::core::LockCore).
macro_rules! impl_lock {
    ($($face:ty),+) => {$(
        impl Lock for $face {
            fn name(&self) -> &str {
                &self.core.keys.name
            }

            fn key(&self) -> &str {
                &self.core.keys.lock
            }

            fn try_acquire(&self) -> LockFuture<'_, Option<LeaseGuard>> {
                Box::pin(self.core.try_acquire())
            }

            fn acquire(&self) -> LockFuture<'_, LeaseGuard> {
                Box::pin(self.core.acquire(None))
            }

            fn acquire_timeout(&self, wait: Duration) -> LockFuture<'_, LeaseGuard> {
                Box::pin(self.core.acquire(Some(wait)))
            }

            fn release_token<'a>(&'a self, token: &'a str) -> LockFuture<'a, ()> {
                let span = self.core.span(Op::ReleaseToken);
                Box::pin(observe::traced(span, self.core.release_token(token)))
            }

            fn extend_token<'a>(&'a self, token: &'a str, lease: Duration) -> LockFuture<'a, ()> {
                let span = self.core.span(Op::ExtendToken);
                Box::pin(observe::traced(span, self.core.extend_token(token, lease)))
            }

            fn force_release(&self) -> LockFuture<'_, bool> {
                let span = self.core.span(Op::ForceRelease);
                Box::pin(observe::traced(span, self.core.force_release()))
            }

            fn inspect(&self) -> LockFuture<'_, LockInfo> {
                let span = self.core.span(Op::Inspect);
                Box::pin(observe::traced(span, self.core.inspect()))
            }
        }
    )+};
}

impl_lock!(
    crate::Mutex,
    crate::FairMutex,
    crate::ReentrantMutex,
    crate::ReadLock,
    crate::WriteLock,
    crate::Semaphore
);
