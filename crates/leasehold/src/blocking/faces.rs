//! The blocking faces of every primitive: each holds its async face and
//! runs its calls on the blocking runtime.

use std::sync::Arc;
use std::time::Duration;

use super::guard::LeaseGuard;
use super::runtime::Shared;
use crate::holder::LockInfo;
use crate::lock::Lock as AsyncLock;
use crate::owner::Owner;

/// A blocking face: the async lock its calls run on.
pub(crate) trait Face {
    type Async: AsyncLock;

    /// The async lock for a call made now, on the calling thread: for the
    /// kinds with owners, with the calling thread's owner (or the named
    /// one) fixed, so that the call's owner does not depend on where the
    /// runtime polls it.
    fn caller(&self) -> Self::Async;

    fn shared(&self) -> &Arc<Shared>;
}

fn guard(face: &impl Face, guard: crate::LeaseGuard) -> LeaseGuard {
    LeaseGuard::new(guard, Arc::clone(face.shared()))
}

fn try_acquire(face: &impl Face) -> crate::Result<Option<LeaseGuard>> {
    let lock = face.caller();
    let taken = face.shared().block_on(lock.try_acquire())??;
    Ok(taken.map(|taken| guard(face, taken)))
}

fn acquire(face: &impl Face, wait: Option<Duration>) -> crate::Result<LeaseGuard> {
    let lock = face.caller();
    let taken = match wait {
        None => face.shared().block_on(lock.acquire())??,
        Some(wait) => face.shared().block_on(lock.acquire_timeout(wait))??,
    };
    Ok(guard(face, taken))
}

/// `acquire`, `try_acquire` and `acquire_timeout`, each blocking the
/// calling thread on the async face's call of the same name.
macro_rules! acquire_calls {
    ($($face:ident),+) => {$(
        acquire_calls!(@one $face, stringify!($face));
    )+};
    (@one $face:ident, $kind:expr) => {
        impl $face {
            #[doc = concat!(
                "One attempt, blocking for one round trip: the guard if the lock could be \
                 taken now, `None` otherwise. As the async [`", $kind, "::try_acquire`](crate::",
                $kind, "::try_acquire).\n\n# Errors\n\nAs the async [`", $kind, "::try_acquire`](crate::",
                $kind, "::try_acquire); [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) \
                 when called inside an async runtime."
            )]
            pub fn try_acquire(&self) -> crate::Result<Option<LeaseGuard>> {
                try_acquire(self)
            }

            #[doc = concat!(
                "Whether the calling thread's owner (for the kinds without owners, the calling \
                 thread through this handle) holds this lock in this process now, without a \
                 round trip. As the async [`", $kind, "::is_held_by_current_owner`](crate::",
                $kind, "::is_held_by_current_owner)."
            )]
            #[must_use]
            pub fn is_held_by_current_owner(&self) -> bool {
                self.caller().is_held_by_current_owner()
            }

            #[doc = concat!(
                "Blocks the calling thread as long as it takes for the lock. Waiting works as the async \
                 [`", $kind, "::acquire`](crate::", $kind, "::acquire): no polling, passing \
                 faults ridden out. Nothing can cancel it: use [`acquire_timeout`](Self::acquire_timeout) \
                 to bound the wait.\n\n# Errors\n\nAs the async [`", $kind, "::acquire`](crate::",
                $kind, "::acquire); [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) \
                 when called inside an async runtime."
            )]
            pub fn acquire(&self) -> crate::Result<LeaseGuard> {
                acquire(self, None)
            }

            #[doc = concat!(
                "Blocks the calling thread at most `wait` for the lock.\n\n# Errors\n\n\
                 [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when it is still taken \
                 after `wait`; otherwise as the async [`", $kind, "::acquire_timeout`](crate::", $kind,
                "::acquire_timeout), and [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) \
                 when called inside an async runtime."
            )]
            pub fn acquire_timeout(&self, wait: Duration) -> crate::Result<LeaseGuard> {
                acquire(self, Some(wait))
            }

            #[doc = concat!(
                "Blocks for the lock, runs `work` with the guard, releases, and returns what \
                 `work` returned, but only if the lease held from the acquisition to the \
                 release. As the async [`", $kind, "::with_lock`](crate::", $kind,
                "::with_lock), except that a thread cannot be cut short: `work` runs to its end \
                 even when the lease is lost meanwhile, so check [`LeaseGuard::is_lost`] between \
                 its steps and pass [`LeaseGuard::fence`] to every resource it writes.\n\n\
                 # Errors\n\n\
                 [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the lease was lost \
                 before the release (the output is dropped: it may have overlapped with another \
                 holder); [`ErrorKind::Connection`](crate::ErrorKind::Connection) when the \
                 release got no answer (the output is dropped too); otherwise as \
                 [`acquire`](Self::acquire)."
            )]
            pub fn with_lock<T>(&self, work: impl FnOnce(&LeaseGuard) -> T) -> crate::Result<T> {
                locked(acquire(self, None)?, work)
            }

            #[doc = concat!(
                "As [`with_lock`](Self::with_lock), blocking at most `wait` for the lock.\n\n\
                 # Errors\n\n\
                 [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when it is still taken after \
                 `wait`, and `work` never ran; otherwise as [`with_lock`](Self::with_lock)."
            )]
            pub fn with_lock_timeout<T>(
                &self,
                wait: Duration,
                work: impl FnOnce(&LeaseGuard) -> T,
            ) -> crate::Result<T> {
                locked(acquire(self, Some(wait))?, work)
            }
        }

        impl Lock for $face {
            fn name(&self) -> &str {
                $face::name(self)
            }

            fn key(&self) -> &str {
                &self.inner.core.keys.lock
            }

            fn settings(&self) -> crate::LockSettings {
                self.inner.core.settings
            }

            fn set_settings(&mut self, settings: crate::LockSettings) -> crate::Result<()> {
                self.inner.core.set_settings(settings)
            }

            fn try_acquire(&self) -> crate::Result<Option<LeaseGuard>> {
                try_acquire(self)
            }

            fn acquire(&self) -> crate::Result<LeaseGuard> {
                acquire(self, None)
            }

            fn acquire_timeout(&self, wait: Duration) -> crate::Result<LeaseGuard> {
                acquire(self, Some(wait))
            }
        }

        crate::lock::lock_operations!(crate::blocking::faces::blocking_calls! { $face });
    };
}

/// Runs `work` under `guard` and releases it: the output only if the lease
/// held to the release (a lost lease makes the release report the loss).
fn locked<T>(guard: LeaseGuard, work: impl FnOnce(&LeaseGuard) -> T) -> crate::Result<T> {
    let output = work(&guard);
    guard.release()?;
    Ok(output)
}

/// The acquisitions and settings every blocking lock answers: [`Mutex`],
/// [`FairMutex`], [`ReentrantMutex`], [`ReadLock`], [`WriteLock`] and
/// [`Semaphore`] (one permit per acquisition), each as its own method of the
/// same name. It is object safe: hold a `Box<dyn Lock>` to choose the kind at
/// run time, and set it up through its [`settings`](Lock::settings) whatever
/// the kind.
///
/// ```no_run
/// # fn demo(client: leasehold::blocking::Client, fair: bool) -> leasehold::Result<()> {
/// use leasehold::blocking::Lock;
///
/// let lock: Box<dyn Lock> = if fair {
///     Box::new(client.fair_mutex("jobs")?)
/// } else {
///     Box::new(client.mutex("jobs")?)
/// };
/// let guard = lock.acquire()?;
/// guard.release()?;
/// # Ok(()) }
/// ```
pub trait Lock: std::fmt::Debug + Send + Sync {
    /// The lock's name.
    fn name(&self) -> &str;

    /// The Redis key of the lock itself (`<prefix>:{name}`), as
    /// the async [`Lock::key`](crate::Lock::key).
    fn key(&self) -> &str;

    /// The lock's settings: lease, watchdog, hold-at-least, max hold and
    /// replica acknowledgement, as the async [`Lock::settings`](crate::Lock::settings).
    fn settings(&self) -> crate::LockSettings;

    /// Changes the lock's settings at once, as
    /// the async [`Lock::set_settings`](crate::Lock::set_settings); nothing changes when
    /// one is refused.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) as the
    /// kind's `with_lease`, `with_hold_at_least`, `with_max_hold` and
    /// `with_replica_ack` say; for a lock of another crate that keeps the
    /// default, always, as its settings are its own.
    fn set_settings(&mut self, settings: crate::LockSettings) -> crate::Result<()> {
        let _ = settings;
        Err(crate::Error::invalid(format!(
            "the settings of lock {:?} are set where it is made: set them before it is wrapped",
            self.name()
        )))
    }

    /// One attempt: the guard if the lock could be taken now, else `None`.
    ///
    /// # Errors
    ///
    /// As the kind's own `try_acquire`.
    fn try_acquire(&self) -> crate::Result<Option<LeaseGuard>>;

    /// Blocks as long as it takes for the lock.
    ///
    /// # Errors
    ///
    /// As the kind's own `acquire`.
    fn acquire(&self) -> crate::Result<LeaseGuard>;

    /// Blocks at most `wait` for the lock.
    ///
    /// # Errors
    ///
    /// As the kind's own `acquire_timeout`.
    fn acquire_timeout(&self, wait: Duration) -> crate::Result<LeaseGuard>;
}

/// The calls of the list of operations besides the acquisitions
/// (`release_token`, `extend_token`, `force_release`, `inspect`), each
/// blocking the calling thread on the [`crate::Lock`] call of the same
/// name, for a face with a `caller`.
macro_rules! blocking_calls {
    (
        { $face:ident }
        acquisitions { $( $(#[$adoc:meta])* $aop:ident ( $($aarg:ident : $aty:ty),* ) -> $aout:ty; )* }
        others { $( $(#[$odoc:meta])* $oop:ident ( $($oarg:ident : $oty:ty),* ) -> $oout:ty, $span:ident; )* }
    ) => {
        impl $face {
            $(
                $(#[$odoc])*
                ///
                /// Blocks the calling thread for the round trip, as
                #[doc = concat!("[`Lock::", stringify!($oop), "`](crate::Lock::", stringify!($oop), ").")]
                ///
                /// # Errors
                ///
                /// As the async face's call of the same name;
                /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
                /// when called inside an async runtime.
                // The list's arguments borrow for `'a`, which some calls do not need.
                #[allow(clippy::needless_lifetimes)]
                pub fn $oop<'a>(&'a self $(, $oarg: $oty)*) -> crate::Result<$oout> {
                    let lock = self.caller();
                    self.shared().block_on(AsyncLock::$oop(&lock $(, $oarg)*))?
                }
            )*
        }
    };
}

pub(crate) use blocking_calls;

/// The settings methods and `waiters`, each the async face's of the same
/// name, for a face of a whole lock.
macro_rules! settings {
    ($($face:ident),+) => {$(
        settings!(@one $face, stringify!($face));
    )+};
    (@one $face:ident, $kind:expr) => {
        impl $face {
            /// The lock's name.
            #[must_use]
            pub fn name(&self) -> &str {
                self.inner.name()
            }

            #[doc = concat!(
                "This lock's settings: see [`", $kind, "::settings`](crate::", $kind, "::settings)."
            )]
            #[must_use]
            pub fn settings(&self) -> crate::LockSettings {
                self.inner.settings()
            }

            #[doc = concat!(
                "This lock with `settings`: see [`", $kind, "::with_settings`](crate::", $kind,
                "::with_settings).\n\n# Errors\n\nAs [`", $kind, "::with_settings`](crate::",
                $kind, "::with_settings)."
            )]
            pub fn with_settings(mut self, settings: crate::LockSettings) -> crate::Result<Self> {
                self.inner = self.inner.with_settings(settings)?;
                Ok(self)
            }

            #[doc = concat!(
                "This lock with another lease length: see [`", $kind, "::with_lease`](crate::",
                $kind, "::with_lease).\n\n# Errors\n\n\
                 [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a zero lease, \
                 one under 10 ms, or one over 24 h."
            )]
            pub fn with_lease(mut self, lease: Duration) -> crate::Result<Self> {
                self.inner = self.inner.with_lease(lease)?;
                Ok(self)
            }

            #[doc = concat!(
                "This lock with the watchdog on or off: see [`", $kind,
                "::with_watchdog`](crate::", $kind, "::with_watchdog)."
            )]
            #[must_use]
            pub fn with_watchdog(mut self, on: bool) -> Self {
                self.inner = self.inner.with_watchdog(on);
                self
            }

            #[doc = concat!(
                "This lock with a hold-at-least, for run-once jobs: see [`", $kind,
                "::with_hold_at_least`](crate::", $kind, "::with_hold_at_least).\n\n\
                 # Errors\n\n[`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a \
                 hold over 24 h, or longer than the max hold."
            )]
            pub fn with_hold_at_least(mut self, hold: Duration) -> crate::Result<Self> {
                self.inner = self.inner.with_hold_at_least(hold)?;
                Ok(self)
            }

            #[doc = concat!(
                "This lock with a cap on renewal: see [`", $kind, "::with_max_hold`](crate::",
                $kind, "::with_max_hold).\n\n# Errors\n\n\
                 [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a cap under \
                 10 ms or over 24 h, or shorter than the hold-at-least."
            )]
            pub fn with_max_hold(mut self, max: Duration) -> crate::Result<Self> {
                self.inner = self.inner.with_max_hold(max)?;
                Ok(self)
            }

            #[doc = concat!(
                "The lock's live waiters in line, head first, blocking for the round trip. As \
                 the async [`", $kind, "::waiters`](crate::", $kind,
                "::waiters).\n\n# Errors\n\nConnection and server errors; \
                 [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when called inside \
                 an async runtime."
            )]
            pub fn waiters(&self) -> crate::Result<Vec<crate::Waiter>> {
                let lock = self.inner.clone();
                self.shared.block_on(async move { lock.waiters().await })?
            }
        }
    };
}

/// The blocking [`Mutex`](crate::Mutex): one holder at a time, fenced.
/// Made by [`Client::mutex`](super::Client::mutex); cheap to clone.
///
/// Not reentrant: a thread that holds it and acquires it again waits for
/// itself (use [`acquire_timeout`](Self::acquire_timeout) where that could
/// happen).
///
/// ```no_run
/// # fn demo(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let mutex = client.mutex("cache:user:42")?;
/// if let Some(guard) = mutex.try_acquire()? {
///     // rebuild the cache entry, passing guard.fence() along
///     guard.release()?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Mutex {
    inner: crate::Mutex,
    shared: Arc<Shared>,
}

/// The blocking [`FairMutex`](crate::FairMutex): one holder at a time,
/// granted in the order the waiters arrived, across every process (and
/// every thread). Made by [`Client::fair_mutex`](super::Client::fair_mutex);
/// cheap to clone.
#[derive(Clone, Debug)]
pub struct FairMutex {
    inner: crate::FairMutex,
    shared: Arc<Shared>,
}

/// The blocking [`ReentrantMutex`](crate::ReentrantMutex): one owner at a
/// time, who may take it again. Made by
/// [`Client::reentrant_mutex`](super::Client::reentrant_mutex); cheap to
/// clone.
///
/// **The owner follows the calling thread**, as Redisson's does: threads
/// that share a handle (cloned, or by reference) exclude each other, and a
/// thread that acquires again through the same handle while it holds the
/// lock nests a level instead of waiting. Each guard is a level; the lock
/// is free once every level is released. [`with_owner`](Self::with_owner)
/// names one owner for every thread that uses the handle.
///
/// ```no_run
/// # fn demo(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let lock = client.reentrant_mutex("config:write")?;
/// let outer = lock.acquire()?;
/// let inner = lock.acquire()?; // this thread holds it: a level, no wait
/// assert_eq!(inner.fence(), outer.fence());
/// inner.release()?;
/// outer.release()?; // free now
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ReentrantMutex {
    inner: crate::ReentrantMutex,
    shared: Arc<Shared>,
}

/// The blocking [`RwLock`](crate::RwLock): many readers or one writer,
/// writers not starved. Made by [`Client::rw_lock`](super::Client::rw_lock);
/// take it through [`read`](Self::read) or [`write`](Self::write). Cheap to
/// clone.
///
/// **The owner follows the calling thread**, as for
/// [`ReentrantMutex`]: a writer thread excludes every other thread that
/// uses the handle; within one thread a second read or write is a reentry,
/// a read under a write is a downgrade, and a write under a read (an
/// upgrade) is refused at once with
/// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict).
///
/// ```no_run
/// # fn demo(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let catalog = client.rw_lock("catalog")?;
/// let view = catalog.read().acquire()?; // alongside other readers
/// view.release()?;
/// let edit = catalog.write().acquire()?; // alone
/// edit.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    inner: crate::RwLock,
    shared: Arc<Shared>,
}

/// The read side of a blocking [`RwLock`], from [`RwLock::read`].
#[derive(Clone, Debug)]
pub struct ReadLock {
    inner: crate::RwLock,
    shared: Arc<Shared>,
}

/// The write side of a blocking [`RwLock`], from [`RwLock::write`].
#[derive(Clone, Debug)]
pub struct WriteLock {
    inner: crate::RwLock,
    shared: Arc<Shared>,
}

/// The blocking [`Semaphore`](crate::Semaphore): at most a fixed number of
/// permits held at once, every acquisition a lease of its own, waiters
/// served in turn. Made by [`Client::semaphore`](super::Client::semaphore);
/// cheap to clone.
///
/// ```no_run
/// # fn demo(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let exports = client.semaphore("exports", 4)?;
/// let permit = exports.acquire()?; // one of 4
/// permit.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    inner: crate::Semaphore,
    shared: Arc<Shared>,
}

impl Mutex {
    pub(crate) fn new(inner: crate::Mutex, shared: Arc<Shared>) -> Self {
        Mutex { inner, shared }
    }
}

impl FairMutex {
    pub(crate) fn new(inner: crate::FairMutex, shared: Arc<Shared>) -> Self {
        FairMutex { inner, shared }
    }
}

/// `owner` and `with_owner`, each the async face's, for a kind with owners;
/// the face gives the doc of `with_owner`.
macro_rules! owner_calls {
    ($face:ident, $(#[$with:meta])*) => {
        impl $face {
            /// The owner of an acquisition made now on the calling thread: the
            /// owner named with [`with_owner`](Self::with_owner), else the calling
            /// thread's on this handle.
            #[must_use]
            pub fn owner(&self) -> Owner {
                self.inner.owner()
            }

            $(#[$with])*
            #[must_use]
            pub fn with_owner(mut self, owner: Owner) -> Self {
                self.inner = self.inner.with_owner(owner);
                self
            }
        }
    };
}

owner_calls!(
    ReentrantMutex,
    /// This lock acquired on behalf of `owner`, whichever thread acquires:
    /// every thread and clone that uses the handle shares `owner`'s hold.
);
owner_calls!(
    RwLock,
    /// This lock acquired on behalf of `owner`, whichever thread acquires:
    /// every thread and clone that uses the handle shares `owner`'s read
    /// and write holds.
);

impl ReentrantMutex {
    pub(crate) fn new(inner: crate::ReentrantMutex, shared: Arc<Shared>) -> Self {
        ReentrantMutex { inner, shared }
    }

    /// This lock served in arrival order across owners, as
    /// [`ReentrantMutex::fair`](crate::ReentrantMutex::fair).
    #[must_use]
    pub fn fair(mut self) -> Self {
        self.inner = self.inner.fair();
        self
    }

    /// Whether this handle waits its turn (see [`fair`](Self::fair)).
    #[must_use]
    pub fn is_fair(&self) -> bool {
        self.inner.is_fair()
    }

    /// How many levels the calling thread's owner holds now, as Redis sees
    /// it, blocking for the round trip.
    ///
    /// # Errors
    ///
    /// As [`inspect`](Self::inspect).
    pub fn hold_count(&self) -> crate::Result<usize> {
        let lock = self.caller();
        self.shared.block_on(lock.hold_count())?
    }
}

impl RwLock {
    pub(crate) fn new(inner: crate::RwLock, shared: Arc<Shared>) -> Self {
        RwLock { inner, shared }
    }

    /// The read side: shared with other readers.
    #[must_use]
    pub fn read(&self) -> ReadLock {
        ReadLock {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }

    /// The write side: exclusive.
    #[must_use]
    pub fn write(&self) -> WriteLock {
        WriteLock {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }

    /// Releases a read or write lease of the calling thread's owner by its
    /// token, blocking for the round trip. As
    /// [`RwLock::release_token`](crate::RwLock::release_token).
    ///
    /// # Errors
    ///
    /// As [`RwLock::release_token`](crate::RwLock::release_token);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn release_token(&self, token: &str) -> crate::Result<()> {
        let lock = self.caller();
        self.shared.block_on(lock.release_token(token))?
    }

    /// Removes every reader and writer and wakes the waiters (an admin
    /// action), blocking for the round trip: whether a lock was removed.
    ///
    /// # Errors
    ///
    /// As [`RwLock::force_release`](crate::RwLock::force_release);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn force_release(&self) -> crate::Result<bool> {
        self.shared.block_on(self.inner.force_release())?
    }

    /// Removes every reader's lease and nothing else, blocking for the
    /// round trip. As
    /// [`RwLock::force_release_readers`](crate::RwLock::force_release_readers).
    ///
    /// # Errors
    ///
    /// As [`RwLock::force_release_readers`](crate::RwLock::force_release_readers);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn force_release_readers(&self) -> crate::Result<bool> {
        self.shared.block_on(self.inner.force_release_readers())?
    }

    /// Removes the writer's lease and nothing else, blocking for the round
    /// trip. As [`RwLock::force_release_writer`](crate::RwLock::force_release_writer).
    ///
    /// # Errors
    ///
    /// As [`RwLock::force_release_writer`](crate::RwLock::force_release_writer);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn force_release_writer(&self) -> crate::Result<bool> {
        self.shared.block_on(self.inner.force_release_writer())?
    }

    /// The lock's state as Redis sees it now: every reader and the writer,
    /// blocking for the round trip.
    ///
    /// # Errors
    ///
    /// As [`RwLock::inspect`](crate::RwLock::inspect);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn inspect(&self) -> crate::Result<LockInfo> {
        self.shared.block_on(self.inner.inspect())?
    }

    fn caller(&self) -> crate::RwLock {
        let owner = self.inner.owner();
        self.inner.clone().with_owner(owner)
    }

    /// Whether the calling thread's owner holds a read or the write lease
    /// of this lock in this process now, without a round trip. As
    /// [`RwLock::is_held_by_current_owner`](crate::RwLock::is_held_by_current_owner).
    #[must_use]
    pub fn is_held_by_current_owner(&self) -> bool {
        self.caller().is_held_by_current_owner()
    }
}

/// What the two sides of a blocking [`RwLock`] add to the acquisitions,
/// each side given its async side's method and the docs that differ.
macro_rules! rw_side {
    ($side:ident, $of:ident, $(#[$count:meta])*) => {
        impl $side {
            /// The lock's name.
            #[must_use]
            pub fn name(&self) -> &str {
                self.inner.name()
            }

            $(#[$count])*
            ///
            /// # Errors
            ///
            #[doc = concat!(
                "As [`", stringify!($side), "::hold_count`](crate::", stringify!($side),
                "::hold_count);"
            )]
            /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
            /// called inside an async runtime.
            pub fn hold_count(&self) -> crate::Result<usize> {
                let lock = self.caller();
                self.shared
                    .block_on(async move { lock.hold_count().await })?
            }
        }

        impl Face for $side {
            type Async = crate::$side;

            fn caller(&self) -> crate::$side {
                let owner = self.inner.owner();
                self.inner.clone().with_owner(owner).$of()
            }

            fn shared(&self) -> &Arc<Shared> {
                &self.shared
            }
        }
    };
}

rw_side!(
    ReadLock,
    read,
    /// How many read leases the calling thread's owner holds now, as Redis
    /// sees it, blocking for the round trip.
);
rw_side!(
    WriteLock,
    write,
    /// How many levels of the write lock the calling thread's owner holds
    /// now, as Redis sees it, blocking for the round trip.
);

impl Semaphore {
    pub(crate) fn new(inner: crate::Semaphore, shared: Arc<Shared>) -> Self {
        Semaphore { inner, shared }
    }

    /// The permit count this handle expects the semaphore to have.
    #[must_use]
    pub fn permits(&self) -> u32 {
        self.inner.permits()
    }

    /// One attempt at `n` permits, held by one lease, blocking for one
    /// round trip: a guard if they were free and nobody waits before this
    /// request, else `None`.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::try_acquire_many`](crate::Semaphore::try_acquire_many);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn try_acquire_many(&self, n: u32) -> crate::Result<Option<LeaseGuard>> {
        let taken = self.shared.block_on(self.inner.try_acquire_many(n))??;
        Ok(taken.map(|taken| guard(self, taken)))
    }

    /// Blocks the calling thread as long as it takes for `n` permits, in
    /// turn with the other waiters.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire_many`](crate::Semaphore::acquire_many);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn acquire_many(&self, n: u32) -> crate::Result<LeaseGuard> {
        let taken = self.shared.block_on(self.inner.acquire_many(n))??;
        Ok(guard(self, taken))
    }

    /// Blocks the calling thread at most `wait` for `n` permits.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire_many_timeout`](crate::Semaphore::acquire_many_timeout);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn acquire_many_timeout(&self, n: u32, wait: Duration) -> crate::Result<LeaseGuard> {
        let taken = self
            .shared
            .block_on(self.inner.acquire_many_timeout(n, wait))??;
        Ok(guard(self, taken))
    }

    /// Permits free now, as Redis sees it, blocking for the round trip.
    ///
    /// # Errors
    ///
    /// As [`inspect`](Self::inspect).
    pub fn available(&self) -> crate::Result<u32> {
        self.shared.block_on(self.inner.available())?
    }

    /// Sets the semaphore's permit count for every user (an admin action),
    /// blocking for the round trip. As
    /// [`Semaphore::set_permits`](crate::Semaphore::set_permits).
    ///
    /// # Errors
    ///
    /// As [`Semaphore::set_permits`](crate::Semaphore::set_permits);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn set_permits(&self, permits: u32) -> crate::Result<()> {
        self.shared.block_on(self.inner.set_permits(permits))?
    }

    /// Sets the permit count only if none is set yet, blocking for the
    /// round trip. As [`Semaphore::try_set_permits`](crate::Semaphore::try_set_permits).
    ///
    /// # Errors
    ///
    /// As [`Semaphore::try_set_permits`](crate::Semaphore::try_set_permits);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn try_set_permits(&self, permits: u32) -> crate::Result<bool> {
        self.shared.block_on(self.inner.try_set_permits(permits))?
    }

    /// Sets the permit count only if none is set yet, for `lifetime`,
    /// blocking for the round trip. As
    /// [`Semaphore::try_set_permits_for`](crate::Semaphore::try_set_permits_for).
    ///
    /// # Errors
    ///
    /// As [`Semaphore::try_set_permits_for`](crate::Semaphore::try_set_permits_for);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn try_set_permits_for(&self, permits: u32, lifetime: Duration) -> crate::Result<bool> {
        self.shared
            .block_on(self.inner.try_set_permits_for(permits, lifetime))?
    }
}

macro_rules! face_without_owners {
    ($($face:ident),+) => {$(
        impl Face for $face {
            type Async = crate::$face;

            fn caller(&self) -> crate::$face {
                // The calling thread holds what the call takes.
                let mut lock = self.inner.clone();
                lock.core.fix_holder();
                lock
            }

            fn shared(&self) -> &Arc<Shared> {
                &self.shared
            }
        }
    )+};
}

face_without_owners!(Mutex, FairMutex, Semaphore);

impl Face for ReentrantMutex {
    type Async = crate::ReentrantMutex;

    fn caller(&self) -> crate::ReentrantMutex {
        let owner = self.inner.owner();
        self.inner.clone().with_owner(owner)
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl FairMutex {
    /// This client's place in the lock's line, from 1 at the head, or
    /// `None` when it does not wait for it, blocking for the round trip. As
    /// [`FairMutex::queue_position`](crate::FairMutex::queue_position).
    ///
    /// # Errors
    ///
    /// As [`waiters`](Self::waiters).
    pub fn queue_position(&self) -> crate::Result<Option<usize>> {
        let lock = self.inner.clone();
        self.shared
            .block_on(async move { lock.queue_position().await })?
    }
}

impl Semaphore {
    /// Takes every permit free now in one lease, blocking for the round
    /// trips. As [`Semaphore::drain`](crate::Semaphore::drain).
    ///
    /// # Errors
    ///
    /// As [`Semaphore::drain`](crate::Semaphore::drain);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn drain(&self) -> crate::Result<Option<LeaseGuard>> {
        let lock = self.caller();
        let taken = self.shared.block_on(async move { lock.drain().await })??;
        Ok(taken.map(|taken| guard(self, taken)))
    }

    /// Deletes the semaphore, its count and every permit lease (an admin
    /// action), blocking for the round trip. As
    /// [`Semaphore::delete`](crate::Semaphore::delete).
    ///
    /// # Errors
    ///
    /// As [`Semaphore::delete`](crate::Semaphore::delete);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn delete(&self) -> crate::Result<bool> {
        let lock = self.inner.clone();
        self.shared.block_on(async move { lock.delete().await })?
    }

    /// The time left on the permit lease of `token`, blocking for the round
    /// trip. As [`Semaphore::permit_lease_left`](crate::Semaphore::permit_lease_left).
    ///
    /// # Errors
    ///
    /// As [`Semaphore::permit_lease_left`](crate::Semaphore::permit_lease_left);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn permit_lease_left(&self, token: &str) -> crate::Result<Option<Duration>> {
        let lock = self.inner.clone();
        let token = token.to_owned();
        self.shared
            .block_on(async move { lock.permit_lease_left(&token).await })?
    }

    /// Releases the permit leases of several tokens at once, blocking for
    /// the round trip: how many released permits. As
    /// [`Semaphore::release_tokens`](crate::Semaphore::release_tokens).
    ///
    /// # Errors
    ///
    /// As [`Semaphore::release_tokens`](crate::Semaphore::release_tokens);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn release_tokens(&self, tokens: &[&str]) -> crate::Result<usize> {
        let lock = self.inner.clone();
        let tokens: Vec<String> = tokens.iter().map(|t| (*t).to_owned()).collect();
        self.shared.block_on(async move {
            let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
            lock.release_tokens(&tokens).await
        })?
    }
}

acquire_calls!(
    Mutex,
    FairMutex,
    ReentrantMutex,
    ReadLock,
    WriteLock,
    Semaphore
);

settings!(Mutex, FairMutex, ReentrantMutex, RwLock, Semaphore);
