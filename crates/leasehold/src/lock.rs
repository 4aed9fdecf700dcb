//! What every kind of lock can do, as one trait: for code that takes "a
//! lock" without caring which kind (a command-line tool, a test harness, a
//! generic helper). The operations every face answers are one list
//! ([`lock_operations`]), from which the trait, each face's implementation
//! of it ([`face_lock`]) and the blocking faces' calls are made.

use std::future::Future;
use std::pin::Pin;

use crate::error::Result;
use crate::face::LockSettings;

/// The future a [`Lock`] method returns: boxed, so that `dyn Lock` works.
pub type LockFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// The operations every face answers, each with its doc, its arguments
/// (borrowed for `'a`, the call's lifetime) and what it answers; those
/// traced in a span of their own name it (an acquisition is traced as
/// one). `$apply` is called with the list, after `$pass`.
macro_rules! lock_operations {
    ($($apply:ident)::+ ! { $($pass:tt)* }) => {
        $($apply)::+! {
            { $($pass)* }
            acquisitions {
                /// One attempt: the guard if the lock could be taken now,
                /// else `None`.
                try_acquire() -> Option<$crate::guard::LeaseGuard>;
                /// Waits as long as it takes for the lock.
                acquire() -> $crate::guard::LeaseGuard;
                /// Waits at most `wait` for the lock.
                acquire_timeout(wait: std::time::Duration) -> $crate::guard::LeaseGuard;
            }
            others {
                /// Releases the lease that `token` holds (for the kinds with
                /// owners, only a lease of the handle's owner).
                release_token(token: &'a str) -> (), ReleaseToken;
                /// Sets the remaining lease of `token` to `lease` if it still
                /// holds the lock.
                extend_token(token: &'a str, lease: std::time::Duration) -> (), ExtendToken;
                /// Removes the lock whoever holds it, and wakes its waiters:
                /// an admin action. Whether a lock was removed.
                force_release() -> bool, ForceRelease;
                /// The lock's state as Redis sees it now.
                inspect() -> $crate::holder::LockInfo, Inspect;
            }
        }
    };
}

pub(crate) use lock_operations;

/// Declares [`Lock`] from the list of operations.
macro_rules! declare_lock {
    (
        {}
        acquisitions { $( $(#[$adoc:meta])* $aop:ident ( $($aarg:ident : $aty:ty),* ) -> $aout:ty; )* }
        others { $( $(#[$odoc:meta])* $oop:ident ( $($oarg:ident : $oty:ty),* ) -> $oout:ty, $span:ident; )* }
    ) => {
        /// The calls every kind of lock answers: [`Mutex`](crate::Mutex),
        /// [`FairMutex`](crate::FairMutex), [`ReentrantMutex`](crate::ReentrantMutex),
        /// each side of an [`RwLock`](crate::RwLock) ([`ReadLock`](crate::ReadLock),
        /// [`WriteLock`](crate::WriteLock)) and [`Semaphore`](crate::Semaphore)
        /// (one permit per acquisition), on one deployment or, for a mutex,
        /// on a [`Redlock`](crate::Redlock)'s masters. Each method does what
        /// the kind's own method of the same name does, with the same errors
        /// and cancel safety; the kinds' own docs say how each behaves. It is
        /// object safe: hold a `Box<dyn Lock>` to choose the kind at run time,
        /// and set it up through its [`settings`](Lock::settings) whatever
        /// the kind.
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

            /// The lock's settings: lease, watchdog, hold-at-least, max hold
            /// and replica acknowledgement.
            fn settings(&self) -> LockSettings;

            /// Changes the lock's settings at once, each checked as the
            /// kind's `with_*` method of it checks it; nothing changes when
            /// one is refused.
            ///
            /// # Errors
            ///
            /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) as
            /// the kind's `with_lease`, `with_hold_at_least`, `with_max_hold`
            /// and `with_replica_ack` say; for a lock of another crate that
            /// keeps the default, always, as its settings are its own.
            fn set_settings(&mut self, settings: LockSettings) -> Result<()> {
                let _ = settings;
                Err(crate::error::Error::invalid(format!(
                    "the settings of lock {:?} are set where it is made: set them before it is \
                     wrapped",
                    self.name()
                )))
            }

            $( $(#[$adoc])* fn $aop<'a>(&'a self $(, $aarg: $aty)*) -> LockFuture<'a, $aout>; )*

            $( $(#[$odoc])* fn $oop<'a>(&'a self $(, $oarg: $oty)*) -> LockFuture<'a, $oout>; )*
        }
    };
}

lock_operations!(declare_lock! {});

/// Implements [`Lock`] for a face whose `core` field is a `LockCore`,
/// from the list of operations.
macro_rules! face_lock {
    ($face:ty) => {
        $crate::lock::lock_operations!(crate::lock::impl_lock_for! { $face });
    };
}

pub(crate) use face_lock;

macro_rules! impl_lock_for {
    (
        { $face:ty }
        acquisitions { $( $(#[$adoc:meta])* $aop:ident ( $($aarg:ident : $aty:ty),* ) -> $aout:ty; )* }
        others { $( $(#[$odoc:meta])* $oop:ident ( $($oarg:ident : $oty:ty),* ) -> $oout:ty, $span:ident; )* }
    ) => {
        impl $crate::lock::Lock for $face {
            fn name(&self) -> &str {
                &self.core.keys.name
            }

            fn key(&self) -> &str {
                &self.core.keys.lock
            }

            fn settings(&self) -> $crate::face::LockSettings {
                self.core.settings
            }

            fn set_settings(
                &mut self,
                settings: $crate::face::LockSettings,
            ) -> $crate::error::Result<()> {
                self.core.set_settings(settings)
            }

            $(
                fn $aop<'a>(&'a self $(, $aarg: $aty)*) -> $crate::lock::LockFuture<'a, $aout> {
                    Box::pin(self.core.$aop($($aarg),*))
                }
            )*

            $(
                fn $oop<'a>(&'a self $(, $oarg: $oty)*) -> $crate::lock::LockFuture<'a, $oout> {
                    let span = self.core.span($crate::observe::Op::$span);
                    Box::pin($crate::observe::traced(span, self.core.$oop($($oarg),*)))
                }
            )*
        }
    };
}

pub(crate) use impl_lock_for;
