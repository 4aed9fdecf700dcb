//! The lock core every face holds: the engine, the lock's keys and kind,
//! its settings, and whose acquisitions it makes. A face adds only what is
//! its own (a semaphore's permit count, a read-write lock's two sides).

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::time::Duration;

use crate::conn::replicas::ReplicaAck;
use crate::deploy::backing::Backing;
use crate::engine::held::Held;
use crate::engine::ops::RwSide;
use crate::engine::state::Engine;
use crate::engine::{calls, wait, Kind, Request};
use crate::error::{Error, Result};
use crate::face::LockSettings;
use crate::guard::LeaseGuard;
use crate::holder::{LockInfo, Waiter};
use crate::keys::{validate_lease, validate_token, validate_wait, LockKeys};
use crate::observe::{self, Op};
use crate::owner::Owner;

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
        Ok(Owners::PerTask(crate::random::new_token()?.into()))
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
        Some(task) => {
            // One allocation of the right size: this runs on every
            // acquisition.
            let mut owner = String::with_capacity(handle.len() + 22);
            owner.push_str(handle);
            owner.push_str(":t");
            let _ = write!(owner, "{task}");
            owner
        }
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

/// What every face shares: the engine, the lock's keys and settings, and
/// the calls into the engine.
#[derive(Clone)]
pub(crate) struct LockCore {
    engine: Arc<Engine>,
    pub(crate) keys: LockKeys,
    pub(crate) settings: LockSettings,
    pub(crate) kind: Kind,
    pub(crate) owners: Owners,
    /// Semaphore permits each acquisition asks for (1 for the others).
    pub(crate) permits: u32,
    /// This handle's id in this process, shared by its clones.
    handle: Arc<str>,
    /// This client's notification channel for the lock: the lock's
    /// channel prefix and the client's id, made once.
    channel: Arc<str>,
    /// The holder of every acquisition, fixed by a blocking face to its
    /// calling thread.
    fixed_holder: Option<Arc<str>>,
}

impl LockCore {
    pub(crate) fn new(
        engine: Arc<Engine>,
        keys: LockKeys,
        kind: Kind,
        settings: LockSettings,
        owners: Owners,
    ) -> Self {
        let channel = format!("{}{}", keys.channels, engine.id).into();
        LockCore {
            engine,
            keys,
            settings,
            kind,
            owners,
            permits: 1,
            handle: new_handle(),
            channel,
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

    /// A reentrant mutex served in arrival order from now on (see
    /// `ReentrantMutex::fair`); the other kinds are left as they are.
    pub(crate) fn make_fair(&mut self) {
        if self.kind == Kind::Reentrant {
            self.kind = Kind::FairReentrant;
        }
    }

    /// Whether a new hold goes to the first live waiter (a fair kind).
    pub(crate) fn is_fair(&self) -> bool {
        matches!(self.kind, Kind::Fair | Kind::FairReentrant)
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
            Some(fence) => Err(Error::already_held(&self.keys.name, fence)),
            None => Ok(()),
        }
    }

    /// Sets which replicas must acknowledge a grant; refused on a quorum,
    /// whose masters are independent.
    pub(crate) fn set_replica_ack(&mut self, replicas: u32, timeout: Duration) -> Result<()> {
        self.refuse_replica_ack_on_quorum()?;
        self.settings.set_replica_ack(replicas, timeout)
    }

    /// Sets every setting at once (see [`LockSettings`]).
    pub(crate) fn set_settings(&mut self, settings: LockSettings) -> Result<()> {
        if settings.replica_ack != ReplicaAck::Off {
            self.refuse_replica_ack_on_quorum()?;
        }
        self.settings.set_all(settings)
    }

    fn refuse_replica_ack_on_quorum(&self) -> Result<()> {
        if matches!(self.engine.backing, Backing::Quorum(_)) {
            return Err(Error::invalid(
                "replica acknowledgement does not apply to a Redlock: its masters are \
                 independent, and a majority of them stands for the replicas",
            ));
        }
        Ok(())
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
            channel: &self.channel,
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

    /// Waits as long as it takes for the lock.
    pub(crate) async fn acquire(&self) -> Result<LeaseGuard> {
        self.acquire_within(None).await
    }

    /// Waits at most `wait` for the lock.
    pub(crate) async fn acquire_timeout(&self, wait: Duration) -> Result<LeaseGuard> {
        self.acquire_within(Some(wait)).await
    }

    /// Waits for the lock, at most `wait` if given (checked here).
    pub(crate) async fn acquire_within(&self, wait: Option<Duration>) -> Result<LeaseGuard> {
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

    /// The owner whose acquisitions this handle makes now, for the kinds
    /// with owners (which always have one).
    pub(crate) fn owner(&self) -> Owner {
        self.owners
            .current_owner()
            .unwrap_or_else(|| Owner::trusted("-".to_owned()))
    }

    /// Makes every acquisition through this handle `owner`'s.
    pub(crate) fn set_owner(&mut self, owner: Owner) {
        self.owners = Owners::Named(owner);
    }

    /// The span of `op` on this lock.
    pub(crate) fn span(&self, op: Op) -> tracing::Span {
        observe::span(op, self.kind, &self.keys.name, None)
    }

    /// The span of `op` on this lock as a face names it: of the lock's
    /// kind, or of `primitive` when one is given (`rw_lock` for an
    /// operation on a whole read-write lock).
    pub(crate) fn span_as<const N: usize>(
        &self,
        op: Op,
        primitive: [&'static str; N],
    ) -> tracing::Span {
        match primitive.first() {
            Some(primitive) => observe::span_of(op, primitive, &self.keys.name, None),
            None => self.span(op),
        }
    }

    /// Releases `token`: by token alone for the kinds without owners, and
    /// only if it is a lease of the current owner for the others.
    pub(crate) async fn release_token(&self, token: &str) -> Result<()> {
        self.release_token_counted(token).await.map(drop)
    }

    /// As [`release_token`](Self::release_token), and on how many servers
    /// the lease was held.
    pub(crate) async fn release_token_counted(&self, token: &str) -> Result<usize> {
        validate_token(token)?;
        match self.owners.current() {
            None => calls::release_token(&self.engine, &self.keys, token).await,
            Some(owner) => {
                calls::release_owned_token(&self.engine, &self.keys, self.kind, &owner, token)
                    .await
                    .map(|()| 1)
            }
        }
    }

    pub(crate) async fn release_token_keeping(&self, token: &str, keep: Duration) -> Result<()> {
        validate_token(token)?;
        validate_lease(keep)?;
        calls::release_token_keeping(&self.engine, &self.keys, token, keep).await
    }

    pub(crate) async fn extend_token(&self, token: &str, lease: Duration) -> Result<()> {
        validate_token(token)?;
        validate_lease(lease)?;
        calls::extend_token(
            &self.engine,
            &self.keys,
            token,
            lease,
            self.settings.replica_ack,
        )
        .await
    }

    pub(crate) async fn force_release(&self) -> Result<bool> {
        calls::force_release(&self.engine, &self.keys).await
    }

    pub(crate) async fn force_release_side(&self, side: RwSide) -> Result<bool> {
        calls::force_release_side(&self.engine, &self.keys, side).await
    }

    pub(crate) async fn inspect(&self) -> Result<LockInfo> {
        calls::inspect(&self.engine, &self.keys).await
    }

    pub(crate) async fn inspect_servers(&self) -> Vec<(String, Result<LockInfo>)> {
        calls::inspect_servers(&self.engine, &self.keys).await
    }

    pub(crate) async fn waiters(&self) -> Result<Vec<Waiter>> {
        calls::waiters(&self.engine, &self.keys).await
    }

    pub(crate) fn watch(&self) -> Result<crate::engine::watch::LockWatch> {
        calls::watch(&self.engine, &self.keys)
    }
}
