//! The lock core every face holds: the engine, the lock's keys and kind,
//! its settings, and whose acquisitions it makes. A face adds only what is
//! its own (a semaphore's permit count, a read-write lock's two sides).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::deploy::ReplicaAck;
use crate::engine::held::Held;
use crate::engine::{ops, wait, Engine, Kind, Request};
use crate::error::{Error, Result};
use crate::guard::LeaseGuard;
use crate::holder::{LockInfo, Waiter};
use crate::keys::{validate_lease, validate_token, validate_wait, LockKeys, MAX_LEASE, MIN_LEASE};
use crate::observe::{self, Op};
use crate::owner::Owner;

/// What the settings methods of every face change.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) lease: Duration,
    pub(crate) watchdog: bool,
    pub(crate) hold_at_least: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) replica_ack: ReplicaAck,
}

impl Settings {
    pub(crate) fn new(lease: Duration, watchdog: bool, replica_ack: ReplicaAck) -> Self {
        Settings {
            lease,
            watchdog,
            hold_at_least: None,
            max_hold: None,
            replica_ack,
        }
    }

    pub(crate) fn set_replica_ack(&mut self, replicas: u32, timeout: Duration) -> Result<()> {
        self.replica_ack = ReplicaAck::at_least(replicas, timeout).validate()?;
        Ok(())
    }

    pub(crate) fn set_lease(&mut self, lease: Duration) -> Result<()> {
        validate_lease(lease)?;
        self.lease = lease;
        Ok(())
    }

    pub(crate) fn set_hold_at_least(&mut self, hold: Duration) -> Result<()> {
        if hold > MAX_LEASE {
            return Err(Error::invalid(format!(
                "hold-at-least {hold:?} is longer than 24h: a run-once window is at most a day"
            )));
        }
        let hold = (!hold.is_zero()).then_some(hold);
        check_hold_within_cap(hold, self.max_hold)?;
        self.hold_at_least = hold;
        Ok(())
    }

    pub(crate) fn set_max_hold(&mut self, max: Duration) -> Result<()> {
        if max < MIN_LEASE || max > MAX_LEASE {
            return Err(Error::invalid(format!(
                "max hold {max:?} is out of range: give at least 10ms and at most 24h"
            )));
        }
        check_hold_within_cap(self.hold_at_least, Some(max))?;
        self.max_hold = Some(max);
        Ok(())
    }
}

/// A lock kept after its release for longer than the holder may renew it
/// would outlive the cap: refused, whichever of the two is set first.
fn check_hold_within_cap(hold: Option<Duration>, cap: Option<Duration>) -> Result<()> {
    match (hold, cap) {
        (Some(hold), Some(cap)) if hold > cap => Err(Error::invalid(format!(
            "hold-at-least {hold:?} is longer than the max hold {cap:?}: the lock would be kept \
             past its cap; make the hold shorter or the cap longer"
        ))),
        _ => Ok(()),
    }
}

/// Whose acquisitions a handle of a reentrant kind makes.
#[derive(Debug, Clone)]
pub(crate) enum Owners {
    /// Nobody's: the mutexes and the semaphore know no owners.
    None,
    /// The task that acquires, on this handle: each tokio task (outside a
    /// task, each thread) is an owner of its own, so tasks that share the
    /// handle, cloned or behind an `Arc`, exclude each other.
    PerTask(Arc<str>),
    /// One owner named by the code, shared by every task that uses it.
    Named(Owner),
}

impl Owners {
    /// A fresh handle's owners: one per task.
    pub(crate) fn per_task() -> Result<Owners> {
        Ok(Owners::PerTask(crate::engine::new_token()?.into()))
    }

    /// The owner of an acquisition made now, in the current task.
    pub(crate) fn current(&self) -> Option<Cow<'_, str>> {
        match self {
            Owners::None => None,
            Owners::Named(owner) => Some(Cow::Borrowed(owner.id())),
            Owners::PerTask(handle) => Some(Cow::Owned(task_owner(handle))),
        }
    }

    /// Who holds an acquisition made now in this process: the owner, or,
    /// for the kinds without owners, the current task (outside a task, the
    /// thread) on the handle `handle`.
    pub(crate) fn holder(&self, handle: &str) -> Cow<'_, str> {
        match self.current() {
            Some(owner) => owner,
            None => Cow::Owned(task_owner(handle)),
        }
    }

    /// The owner of an acquisition made now, as an [`Owner`].
    pub(crate) fn current_owner(&self) -> Option<Owner> {
        match self {
            Owners::Named(owner) => Some(owner.clone()),
            _ => self.current().map(|id| Owner::trusted(id.into_owned())),
        }
    }
}

/// The current tokio task's (outside a task, the thread's) id on `handle`.
fn task_owner(handle: &str) -> String {
    match tokio::task::try_id() {
        Some(task) => format!("{handle}:t{task}"),
        None => format!("{handle}:{:?}", std::thread::current().id())
            .replace(|c: char| !c.is_ascii_alphanumeric() && c != ':', ""),
    }
}

/// Ids of handles within this process: a handle and its clones share one.
static HANDLES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A new handle's id in this process.
pub(crate) fn new_handle() -> Arc<str> {
    format!(
        "h{}",
        HANDLES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
    .into()
}

/// The error of a non-reentrant lock's own second acquisition, by the
/// holder that has it already (fence `fence`): it would wait for itself.
pub(crate) fn already_held(name: &str, fence: u64) -> Error {
    Error::new(
        crate::error::ErrorKind::Conflict,
        format!(
            "lock {name:?} is already held by this caller (fence {fence}), the same task (or \
             thread) through this handle or a clone of it: the lock is not reentrant, so this \
             acquisition would wait for itself; release the guard first, or use a \
             ReentrantMutex to nest acquisitions"
        ),
    )
}

/// What every face shares: the engine, the lock's keys and settings, and
/// the calls into the engine.
#[derive(Clone)]
pub(crate) struct LockCore {
    engine: Arc<Engine>,
    pub(crate) keys: LockKeys,
    pub(crate) settings: Settings,
    pub(crate) kind: Kind,
    pub(crate) owners: Owners,
    /// Semaphore permits each acquisition asks for (1 for the others).
    pub(crate) permits: u32,
    /// This handle's id in this process, shared by its clones.
    handle: Arc<str>,
    /// The holder of every acquisition, fixed by a blocking face to its
    /// calling thread.
    fixed_holder: Option<Arc<str>>,
}

impl LockCore {
    pub(crate) fn new(
        engine: Arc<Engine>,
        keys: LockKeys,
        kind: Kind,
        settings: Settings,
        owners: Owners,
    ) -> Self {
        LockCore {
            engine,
            keys,
            settings,
            kind,
            owners,
            permits: 1,
            handle: new_handle(),
            fixed_holder: None,
        }
    }

    /// Who holds an acquisition made now through this handle, in this
    /// process (see [`Request::holder`](crate::engine::Request)).
    pub(crate) fn holder(&self) -> Cow<'_, str> {
        match &self.fixed_holder {
            Some(holder) => Cow::Borrowed(holder),
            None => self.owners.holder(&self.handle),
        }
    }

    /// Fixes the holder of this copy's acquisitions to the current one
    /// (the calling thread, for a blocking face).
    pub(crate) fn fix_holder(&mut self) {
        if self.fixed_holder.is_none() {
            self.fixed_holder = Some(self.holder().into());
        }
    }

    /// Whether the current holder holds a lease of this lock here, of a
    /// kind `of` accepts, not released and not known lost.
    pub(crate) fn held_by_current_owner(&self, of: impl Fn(Kind) -> bool) -> bool {
        self.engine
            .leases
            .mine
            .held_by(&self.keys.lock, &self.holder(), of)
            .is_some()
    }

    /// A `Mutex` or `FairMutex` its caller holds already: waiting would
    /// wait for itself.
    fn refuse_own_second_attempt(&self, holder: &str) -> Result<()> {
        if !matches!(self.kind, Kind::Mutex | Kind::Fair) {
            return Ok(());
        }
        let lock = &self.keys.lock;
        match self
            .engine
            .leases
            .mine
            .held_by(lock, holder, |kind| kind == self.kind)
        {
            Some(fence) => Err(already_held(&self.keys.name, fence)),
            None => Ok(()),
        }
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub(crate) fn debug(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("name", &self.keys.name)
            .field("owners", &self.owners)
            .field("lease", &self.settings.lease)
            .field("watchdog", &self.settings.watchdog)
            .field("hold_at_least", &self.settings.hold_at_least)
            .field("max_hold", &self.settings.max_hold)
            .field("replica_ack", &self.settings.replica_ack)
            .finish()
    }

    fn request<'a>(&'a self, owner: &'a str, holder: &'a str) -> Request<'a> {
        let s = &self.settings;
        Request {
            keys: &self.keys,
            kind: self.kind,
            // No lease, not even the first, runs past the max hold.
            lease: s.max_hold.map_or(s.lease, |max| s.lease.min(max)),
            renew: s.watchdog,
            hold_at_least: s.hold_at_least,
            max_hold: s.max_hold,
            owner,
            holder,
            permits: self.permits,
            replica_ack: s.replica_ack,
        }
    }

    pub(crate) async fn try_acquire(&self) -> Result<Option<LeaseGuard>> {
        let owner = self.owners.current();
        let holder = self.holder();
        self.refuse_own_second_attempt(&holder)?;
        // Every hash lease records an owner; '-' is nobody's.
        let request = self.request(owner.as_deref().unwrap_or("-"), &holder);
        let attempt = wait::try_acquire(&self.engine, &request);
        let fence = |held: &Option<Held>| held.as_ref().map(|held| held.lease().fence);
        let held = observe::acquisition(self.kind, &self.keys.name, false, attempt, fence).await?;
        Ok(held.map(LeaseGuard::new))
    }

    /// Waits for the lock, at most `wait` if given (checked here).
    pub(crate) async fn acquire(&self, wait: Option<Duration>) -> Result<LeaseGuard> {
        if let Some(wait) = wait {
            validate_wait(wait)?;
        }
        let owner = self.owners.current();
        let holder = self.holder();
        self.refuse_own_second_attempt(&holder)?;
        let request = self.request(owner.as_deref().unwrap_or("-"), &holder);
        let attempt = wait::acquire(&self.engine, &request, wait);
        let fence = |held: &Held| Some(held.lease().fence);
        let held = observe::acquisition(self.kind, &self.keys.name, true, attempt, fence).await?;
        Ok(LeaseGuard::new(held))
    }

    /// The span of `op` on this lock.
    pub(crate) fn span(&self, op: Op) -> tracing::Span {
        observe::span(op, self.kind, &self.keys.name, None)
    }

    /// Releases `token`: by token alone for the kinds without owners, and
    /// only if it is a lease of the current owner for the others.
    pub(crate) async fn release_token(&self, token: &str) -> Result<()> {
        validate_token(token)?;
        match self.owners.current() {
            None => ops::release_token(&self.engine, &self.keys, token).await,
            Some(owner) => {
                ops::release_owned_token(&self.engine, &self.keys, self.kind, &owner, token).await
            }
        }
    }

    pub(crate) async fn release_token_keeping(&self, token: &str, keep: Duration) -> Result<()> {
        validate_token(token)?;
        validate_lease(keep)?;
        ops::release_token_keeping(&self.engine, &self.keys, token, keep).await
    }

    pub(crate) async fn extend_token(&self, token: &str, lease: Duration) -> Result<()> {
        validate_token(token)?;
        validate_lease(lease)?;
        ops::extend_token(
            &self.engine,
            &self.keys,
            token,
            lease,
            self.settings.replica_ack,
        )
        .await
    }

    pub(crate) async fn force_release(&self) -> Result<bool> {
        ops::force_release(&self.engine, &self.keys).await
    }

    pub(crate) async fn inspect(&self) -> Result<LockInfo> {
        ops::inspect(&self.engine, &self.keys).await
    }

    pub(crate) async fn waiters(&self) -> Result<Vec<Waiter>> {
        crate::engine::admin::waiters(&self.engine, &self.keys).await
    }

    pub(crate) fn watch(&self) -> Result<crate::engine::watch::LockWatch> {
        crate::engine::watch::LockWatch::new(Arc::clone(&self.engine), self.keys.clone())
    }
}

/// The settings methods every face has, written once: `name`, `with_lease`,
/// `with_watchdog`, `with_hold_at_least`, `with_max_hold` and
/// `with_replica_ack`, and `watch`, on a type
/// whose `core` field is a [`LockCore`].
macro_rules! lock_settings {
    ($face:ident) => {
        impl $face {
            /// The lock's name.
            #[must_use]
            pub fn name(&self) -> &str {
                &self.core.keys.name
            }

            /// This lock with another lease length (the client's by default).
            ///
            /// # Errors
            ///
            /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for
            /// a zero lease, one under 10 ms, or one over 24 h.
            pub fn with_lease(mut self, lease: std::time::Duration) -> $crate::Result<Self> {
                self.core.settings.set_lease(lease)?;
                Ok(self)
            }

            /// This lock with the watchdog on or off (the client's setting
            /// by default). Off, each lease is fixed: it ends after its
            /// length unless extended, and the guard reports it lost then.
            #[must_use]
            pub fn with_watchdog(mut self, on: bool) -> Self {
                self.core.settings.watchdog = on;
                self
            }

            /// This lock with a hold-at-least of `hold` (off, zero, by
            /// default): for run-once jobs. A release before `hold` has
            /// passed since the acquisition does not free the lock: it stays
            /// held, and is no longer renewed, until `hold` has passed, and
            /// then expires. Nobody is woken early; waiters take it when it
            /// expires. The release reports success (the lease held to the
            /// end). So a job that several hosts start within `hold` of each
            /// other (cron on every host, clocks apart by a little) runs
            /// once: the first to take the lock runs it, and the others find
            /// it busy even when the first finished quickly.
            ///
            /// The hold is measured on this process's monotonic clock from
            /// the moment the grant arrived, which is after Redis granted
            /// it, and the release sends Redis only the time left (rounded
            /// up, with an allowance for clock drift) as a relative expiry.
            /// No wall clock is compared across machines, so clock
            /// differences between hosts and Redis cannot shorten the hold;
            /// the lock may be held a few milliseconds longer than `hold`,
            /// never shorter. A holder that dies without releasing keeps the
            /// lock only until its lease runs out, and a lease that was lost
            /// is not held on.
            ///
            /// # Errors
            ///
            /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for
            /// a hold over 24 h, or longer than the max hold.
            pub fn with_hold_at_least(mut self, hold: std::time::Duration) -> $crate::Result<Self> {
                self.core.settings.set_hold_at_least(hold)?;
                Ok(self)
            }

            /// This lock with a cap on renewal (off by default): the
            /// watchdog renews a lease no further than `max` after its
            /// acquisition, so a holder stuck in an endless loop cannot keep
            /// the lock forever. The lease then ends at the cap:
            /// [`LeaseGuard::lost`](crate::LeaseGuard::lost) resolves and the
            /// loss error says that the max hold was reached. An explicit
            /// [`extend`](crate::LeaseGuard::extend) stops at the cap too.
            ///
            /// The cap is counted on this process's monotonic clock from the
            /// moment the acquire request was sent, so the lock never
            /// outlives it by this holder's reckoning.
            ///
            /// # Errors
            ///
            /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for
            /// a cap under 10 ms or over 24 h, or shorter than the
            /// hold-at-least.
            pub fn with_max_hold(mut self, max: std::time::Duration) -> $crate::Result<Self> {
                self.core.settings.set_max_hold(max)?;
                Ok(self)
            }

            /// This lock with acknowledgement by at least `replicas`
            /// replicas ([`ReplicaAck::AtLeast`](crate::ReplicaAck::AtLeast)),
            /// or none with `replicas` of 0 ([`ReplicaAck::Off`](crate::ReplicaAck::Off)),
            /// instead of the client's setting
            /// ([`ClientBuilder::replica_ack`](crate::ClientBuilder::replica_ack):
            /// by default every replica of the master, those it lists and
            /// those that could take over from it, see
            /// [`ReplicaAck::Connected`](crate::ReplicaAck::Connected)).
            /// Each acquisition, and each
            /// [`extend`](crate::LeaseGuard::extend), is followed on the
            /// same connection, in the same round trip, by `WAIT replicas
            /// timeout`. When fewer than `replicas` replicas acknowledge
            /// the grant within `timeout`, it is released at once and the
            /// acquisition fails with
            /// [`ErrorKind::ReplicasMissing`](crate::ErrorKind::ReplicasMissing),
            /// saying how many did; a wait (`acquire`) keeps trying within
            /// its bound instead (without a bound, for as long as the
            /// client's connect timeout). An extend that too few replicas
            /// acknowledge fails the same way, and the lease stays
            /// extended on the master.
            ///
            /// What it gives is best effort, not consensus: a replica that
            /// acknowledged has the lock's keys in memory, so a failover
            /// to it keeps the lock, but a failover to another replica, or
            /// a replica that restarts without persistence, still loses it
            /// (Redis's WAIT documentation says the same). The watchdog's
            /// renewals send no WAIT. Redis holds this client's command
            /// connection, shared by its locks, for up to `timeout` while
            /// replicas lag: keep it short against the lease (tens of
            /// milliseconds on a healthy network).
            ///
            /// # Errors
            ///
            /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for
            /// a timeout under 10 ms or over 60 s.
            pub fn with_replica_ack(
                mut self,
                replicas: u32,
                timeout: std::time::Duration,
            ) -> $crate::Result<Self> {
                self.core.settings.set_replica_ack(replicas, timeout)?;
                Ok(self)
            }

            /// Watches the lock without waiting for it: the
            /// [`LockWatch`](crate::LockWatch) reports the end of each lease
            /// it sees held, by anyone, with how it ended (released,
            /// force-released, expired, or gone from the server), its
            /// fence, and who took the lock next if someone did at once.
            /// It works on a lock of any kind, whatever kind this handle
            /// is: it only reads the lock's leases.
            ///
            /// A release of a watched lock is heard at once, through the
            /// lock's watch channel (sharded pub/sub on a Redis Cluster);
            /// an expiry a few milliseconds after the lease ends, as the
            /// watch looks then (one script). Keyspace notifications are
            /// not needed. A lock nobody watches costs its holders nothing
            /// more; while watched, each release of it publishes one
            /// message, and each watch looks at least every 3 s (every
            /// second while the lock is free). Nothing is sent before the
            /// first [`next`](crate::LockWatch::next) or
            /// [`holders`](crate::LockWatch::holders).
            ///
            /// # Errors
            ///
            /// [`ErrorKind::System`](crate::ErrorKind::System) when the
            /// operating system gives no randomness for the watch's id.
            pub fn watch(&self) -> $crate::Result<crate::LockWatch> {
                self.core.watch()
            }
        }

        impl std::fmt::Debug for $face {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.core.debug(stringify!($face), f)
            }
        }
    };
}

pub(crate) use lock_settings;
