//! One class over every kind of lock: each call is made through the
//! library's object-safe `leasehold::Lock`, with the caller's owner fixed
//! for the kinds that have owners.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::call::{call, lib, secs, Length, Mode, Secs};
use crate::client::Source;
use crate::error::Fail;
use crate::held::{Guard, Inner};
use crate::runtime::Rebuilt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Mutex,
    Fair,
    Reentrant,
    FairReentrant,
    Read,
    Write,
    Semaphore,
    Redlock,
}

impl Kind {
    pub(crate) fn parse(kind: &str) -> Result<Kind, Fail> {
        Ok(match kind {
            "mutex" => Kind::Mutex,
            "fair_mutex" => Kind::Fair,
            "reentrant_mutex" => Kind::Reentrant,
            "fair_reentrant_mutex" => Kind::FairReentrant,
            "read" => Kind::Read,
            "write" => Kind::Write,
            "semaphore" => Kind::Semaphore,
            other => return Err(Fail::invalid(format!("no lock kind {other:?}"))),
        })
    }

    fn has_owners(self) -> bool {
        matches!(
            self,
            Kind::Reentrant | Kind::FairReentrant | Kind::Read | Kind::Write
        )
    }
}

/// What a lock is, to build it again in a child after `fork()`.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) kind: Kind,
    pub(crate) name: String,
    pub(crate) permits: u32,
    pub(crate) lease: Option<Duration>,
    pub(crate) watchdog: Option<bool>,
    pub(crate) hold_at_least: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) replica_ack: Option<(u32, Duration)>,
    pub(crate) owner: Option<String>,
}

/// A library lock of one process.
#[derive(Clone)]
pub(crate) enum Built {
    Mutex(leasehold::Mutex),
    Fair(leasehold::FairMutex),
    Reentrant(leasehold::ReentrantMutex),
    Read(leasehold::RwLock),
    Write(leasehold::RwLock),
    Semaphore(leasehold::Semaphore),
    Redlock(leasehold::RedlockMutex),
}

impl Spec {
    /// `made` (a lock's settings as its client made it) with what this
    /// spec gives; the lock checks them as it takes them.
    fn settings(&self, made: leasehold::LockSettings) -> leasehold::LockSettings {
        let mut settings = made;
        if let Some(lease) = self.lease {
            settings.lease = lease;
        }
        if let Some(on) = self.watchdog {
            settings.watchdog = on;
        }
        if let Some(max) = self.max_hold {
            settings.max_hold = Some(max);
        }
        if let Some(hold) = self.hold_at_least {
            settings.hold_at_least = Some(hold);
        }
        if let Some((replicas, timeout)) = self.replica_ack {
            settings.replica_ack = leasehold::ReplicaAck::AtLeast { replicas, timeout };
        }
        settings
    }
}

/// `$lock` with the settings `$spec` gives.
macro_rules! configured {
    ($lock:expr, $spec:expr) => {{
        let lock = $lock;
        let settings = $spec.settings(lock.settings());
        lib(lock.with_settings(settings))?
    }};
}

impl Built {
    fn configured(self, spec: &Spec) -> Result<Built, Fail> {
        Ok(match self {
            Built::Mutex(l) => Built::Mutex(configured!(l, spec)),
            Built::Fair(l) => Built::Fair(configured!(l, spec)),
            Built::Reentrant(l) => Built::Reentrant(configured!(l, spec)),
            Built::Read(l) => Built::Read(configured!(l, spec)),
            Built::Write(l) => Built::Write(configured!(l, spec)),
            Built::Semaphore(l) => Built::Semaphore(configured!(l, spec)),
            Built::Redlock(l) => Built::Redlock(configured!(l, spec)),
        })
    }

    /// This lock as the library's `Lock`, acquiring for `owner` where
    /// the kind has owners.
    fn caller(&self, owner: Option<leasehold::Owner>) -> Box<dyn leasehold::Lock> {
        match (self, owner) {
            (Built::Mutex(l), _) => Box::new(l.clone()),
            (Built::Fair(l), _) => Box::new(l.clone()),
            (Built::Semaphore(l), _) => Box::new(l.clone()),
            (Built::Redlock(l), _) => Box::new(l.clone()),
            (Built::Reentrant(l), Some(owner)) => Box::new(l.clone().with_owner(owner)),
            (Built::Reentrant(l), None) => Box::new(l.clone()),
            (Built::Read(l), Some(owner)) => Box::new(l.clone().with_owner(owner).read()),
            (Built::Read(l), None) => Box::new(l.read()),
            (Built::Write(l), Some(owner)) => Box::new(l.clone().with_owner(owner).write()),
            (Built::Write(l), None) => Box::new(l.write()),
        }
    }
}

/// A lock of any kind, made by a client.
#[pyclass(frozen, module = "leasehold._native")]
pub(crate) struct Lock {
    source: Source,
    spec: Spec,
    built: Rebuilt<Built>,
}

impl Lock {
    pub(crate) fn new(source: Source, spec: Spec) -> Result<Lock, Fail> {
        if spec.kind != Kind::Semaphore && spec.permits != 1 {
            return Err(Fail::invalid("only a semaphore has permits"));
        }
        if let Some(owner) = &spec.owner {
            if !spec.kind.has_owners() {
                return Err(Fail::invalid(format!(
                    "owner {owner:?} given to a lock without owners: only a reentrant mutex and \
                     a read-write lock have them"
                )));
            }
            lib(leasehold::Owner::from_id(owner.clone()))?;
        }
        let built = source.build(&spec)?.configured(&spec)?;
        Ok(Lock {
            source,
            spec,
            built: Rebuilt::new(built),
        })
    }

    fn mode(&self) -> Mode {
        self.source.mode()
    }

    /// This process's lock.
    fn built(&self) -> Result<Built, Fail> {
        self.built
            .get(|| self.source.build(&self.spec)?.configured(&self.spec))
    }

    /// The owner of a call made now: the one given to the lock, else the
    /// calling thread's (or the asyncio task `task`'s) on this client.
    fn owner(&self, task: Option<&str>) -> Result<Option<leasehold::Owner>, Fail> {
        if !self.spec.kind.has_owners() {
            return Ok(None);
        }
        match &self.spec.owner {
            Some(owner) => lib(leasehold::Owner::from_id(owner.clone())).map(Some),
            None => self.source.owner(task).map(Some),
        }
    }

    /// The library lock a call made now acquires through.
    pub(crate) fn caller(&self, task: Option<&str>) -> Result<Box<dyn leasehold::Lock>, Fail> {
        let owner = self.owner(task)?;
        Ok(self.built()?.caller(owner))
    }
}

#[pymethods]
impl Lock {
    /// The lock's name.
    #[getter]
    fn name(&self) -> &str {
        &self.spec.name
    }

    /// One attempt: a guard, or None when the lock is taken.
    #[pyo3(signature = (*, task=None, permits=1))]
    fn try_acquire(&self, py: Python<'_>, task: Option<&str>, permits: u32) -> PyResult<Py<PyAny>> {
        let (caller, built) = self.prepare(py, task, permits)?;
        let mode = self.mode();
        call(py, mode, Length::RoundTrip, async move {
            let taken = match (&built, permits) {
                (Some(Built::Semaphore(s)), n) if n != 1 => lib(s.try_acquire_many(n).await)?,
                _ => lib(caller.try_acquire().await)?,
            };
            Ok(taken.map(|guard| Guard::new(Inner::Lease(guard), mode)))
        })
    }

    /// Waits for the lock, at most `timeout` seconds (None: as long as it takes).
    #[pyo3(signature = (*, timeout=None, task=None, permits=1))]
    fn acquire(
        &self,
        py: Python<'_>,
        timeout: Option<Secs>,
        task: Option<&str>,
        permits: u32,
    ) -> PyResult<Py<PyAny>> {
        let (caller, built) = self.prepare(py, task, permits)?;
        let mode = self.mode();
        let timeout = secs(timeout);
        call(py, mode, Length::Wait, async move {
            let guard = match (&built, permits, timeout) {
                (Some(Built::Semaphore(s)), n, None) if n != 1 => lib(s.acquire_many(n).await)?,
                (Some(Built::Semaphore(s)), n, Some(t)) if n != 1 => {
                    lib(s.acquire_many_timeout(n, t).await)?
                }
                (_, _, None) => lib(caller.acquire().await)?,
                (_, _, Some(t)) => lib(caller.acquire_timeout(t).await)?,
            };
            Ok(Guard::new(Inner::Lease(guard), mode))
        })
    }

    /// How many levels (reentrant, write) or read leases the caller's owner holds.
    #[pyo3(signature = (*, task=None))]
    fn hold_count(&self, py: Python<'_>, task: Option<&str>) -> PyResult<Py<PyAny>> {
        let owner = self.owner(task).map_err(|e| e.into_pyerr(py))?;
        let built = self.built().map_err(|e| e.into_pyerr(py))?;
        call(py, self.mode(), Length::RoundTrip, async move {
            match (built, owner) {
                (Built::Reentrant(l), Some(o)) => lib(l.with_owner(o).hold_count().await),
                (Built::Read(l), Some(o)) => lib(l.with_owner(o).read().hold_count().await),
                (Built::Write(l), Some(o)) => lib(l.with_owner(o).write().hold_count().await),
                _ => Err(Fail::invalid(
                    "only a reentrant mutex and a read-write lock count holds",
                )),
            }
        })
    }

    /// The lock's state as Redis sees it now.
    fn inspect(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let caller = self.caller(None).map_err(|e| e.into_pyerr(py))?;
        call(py, self.mode(), Length::RoundTrip, async move {
            lib(caller.inspect().await).map(Info)
        })
    }

    /// Removes the lock whoever holds it (an admin action).
    fn force_release(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let caller = self.caller(None).map_err(|e| e.into_pyerr(py))?;
        call(py, self.mode(), Length::RoundTrip, async move {
            lib(caller.force_release().await)
        })
    }

    /// Removes one side of a read-write lock, `"read"` (every reader) or
    /// `"write"` (the writer), and nothing else (an admin action).
    fn force_release_side(&self, py: Python<'_>, side: &str) -> PyResult<Py<PyAny>> {
        let built = self.built().map_err(|e| e.into_pyerr(py))?;
        let readers = match side {
            "read" => true,
            "write" => false,
            _ => {
                return Err(Fail::invalid("a side is \"read\" or \"write\"").into_pyerr(py));
            }
        };
        call(py, self.mode(), Length::RoundTrip, async move {
            match built {
                Built::Read(l) | Built::Write(l) if readers => lib(l.force_release_readers().await),
                Built::Read(l) | Built::Write(l) => lib(l.force_release_writer().await),
                _ => Err(Fail::invalid(
                    "only a read-write lock's readers or writer are released apart",
                )),
            }
        })
    }

    /// Releases the lease that `token` holds, taken elsewhere.
    #[pyo3(signature = (token, *, task=None))]
    fn release_token(
        &self,
        py: Python<'_>,
        token: String,
        task: Option<&str>,
    ) -> PyResult<Py<PyAny>> {
        let caller = self.caller(task).map_err(|e| e.into_pyerr(py))?;
        call(py, self.mode(), Length::RoundTrip, async move {
            lib(caller.release_token(&token).await)
        })
    }

    /// Sets the lease left to `token` to `lease`, if it still holds the lock.
    fn extend_token(&self, py: Python<'_>, token: String, lease: Secs) -> PyResult<Py<PyAny>> {
        let caller = self.caller(None).map_err(|e| e.into_pyerr(py))?;
        call(py, self.mode(), Length::RoundTrip, async move {
            lib(caller.extend_token(&token, lease.0).await)
        })
    }

    /// A semaphore's free permits, as Redis sees them.
    fn available(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let semaphore = self.semaphore().map_err(|e| e.into_pyerr(py))?;
        call(py, self.mode(), Length::RoundTrip, async move {
            lib(semaphore.available().await)
        })
    }

    /// Sets a semaphore's permit count for every user (an admin action).
    fn set_permits(&self, py: Python<'_>, permits: u32) -> PyResult<Py<PyAny>> {
        let semaphore = self.semaphore().map_err(|e| e.into_pyerr(py))?;
        call(py, self.mode(), Length::RoundTrip, async move {
            lib(semaphore.set_permits(permits).await)
        })
    }

    /// Sets a semaphore's permit count only if none is set yet, for
    /// `lifetime` seconds when given; whether it was set.
    #[pyo3(signature = (permits, lifetime=None))]
    fn try_set_permits(
        &self,
        py: Python<'_>,
        permits: u32,
        lifetime: Option<Secs>,
    ) -> PyResult<Py<PyAny>> {
        let semaphore = self.semaphore().map_err(|e| e.into_pyerr(py))?;
        call(py, self.mode(), Length::RoundTrip, async move {
            match lifetime {
                Some(lifetime) => lib(semaphore.try_set_permits_for(permits, lifetime.0).await),
                None => lib(semaphore.try_set_permits(permits).await),
            }
        })
    }

    fn __repr__(&self) -> String {
        format!("{:?}({:?})", self.spec.kind, self.spec.name)
    }
}

impl Lock {
    /// The caller's lock, and for a request of several permits the
    /// semaphore itself.
    fn prepare(
        &self,
        py: Python<'_>,
        task: Option<&str>,
        permits: u32,
    ) -> PyResult<(Box<dyn leasehold::Lock>, Option<Built>)> {
        let prepared = || -> Result<_, Fail> {
            if permits != 1 && self.spec.kind != Kind::Semaphore {
                return Err(Fail::invalid(
                    "only a semaphore is acquired for several permits",
                ));
            }
            let caller = self.caller(task)?;
            let built = (permits != 1).then(|| self.built()).transpose()?;
            Ok((caller, built))
        };
        prepared().map_err(|e| e.into_pyerr(py))
    }

    fn semaphore(&self) -> Result<leasehold::Semaphore, Fail> {
        match self.built()? {
            Built::Semaphore(s) => Ok(s),
            _ => Err(Fail::invalid("only a semaphore has permits")),
        }
    }
}

/// What `inspect` saw, as a dict for the Python layer's `LockInfo`.
pub(crate) struct Info(leasehold::LockInfo);

fn epoch_seconds(time: Option<std::time::SystemTime>) -> Option<f64> {
    time.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs_f64())
}

impl<'py> IntoPyObject<'py> for Info {
    type Target = PyDict;
    type Output = Bound<'py, PyDict>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let info = self.0;
        let dict = PyDict::new(py);
        dict.set_item("name", &info.name)?;
        dict.set_item("held", info.held)?;
        dict.set_item("remaining", info.remaining.map(|d| d.as_secs_f64()))?;
        dict.set_item("last_fence", info.last_fence)?;
        dict.set_item("waiting_clients", info.waiting_clients)?;
        dict.set_item("kind", &info.kind)?;
        dict.set_item("permits", info.permits)?;
        dict.set_item("read_at", epoch_seconds(info.read_at))?;
        dict.set_item("server", &info.server)?;
        let holders = info
            .holders
            .iter()
            .map(|h| {
                let holder = PyDict::new(py);
                holder.set_item("pid", h.pid)?;
                holder.set_item("host", &h.host)?;
                holder.set_item("client_name", &h.client_name)?;
                holder.set_item("acquired_at", epoch_seconds(h.acquired_at))?;
                holder.set_item("remaining", h.remaining.map(|d| d.as_secs_f64()))?;
                holder.set_item("mode", h.mode.as_str())?;
                holder.set_item("permits", h.permits)?;
                holder.set_item("levels", h.levels)?;
                holder.set_item("owner", &h.owner)?;
                holder.set_item("fence", h.fence)?;
                Ok(holder)
            })
            .collect::<PyResult<Vec<_>>>()?;
        dict.set_item("holders", holders)?;
        Ok(dict)
    }
}

/// Several locks taken together, all or none, in the order of their keys.
#[pyclass(frozen, module = "leasehold._native")]
pub(crate) struct MultiLock {
    locks: Vec<Py<Lock>>,
    mode: Mode,
}

#[pymethods]
impl MultiLock {
    #[new]
    fn new(py: Python<'_>, locks: Vec<Py<Lock>>) -> PyResult<Self> {
        let Some(first) = locks.first() else {
            return Err(Fail::invalid(
                "a multi-lock needs at least one lock: give the locks to take together",
            )
            .into_pyerr(py));
        };
        let mode = first.get().mode();
        if locks.iter().any(|l| l.get().mode() != mode) {
            return Err(Fail::invalid(
                "a multi-lock's locks come from clients of one kind: all blocking, or all asyncio",
            )
            .into_pyerr(py));
        }
        Ok(MultiLock { locks, mode })
    }

    /// One attempt at every lock: a guard, or None when one is taken.
    #[pyo3(signature = (*, task=None))]
    fn try_acquire(&self, py: Python<'_>, task: Option<&str>) -> PyResult<Py<PyAny>> {
        let multi = self.multi(py, task)?;
        let mode = self.mode;
        call(py, mode, Length::RoundTrip, async move {
            let taken = lib(multi.try_acquire().await)?;
            Ok(taken.map(|guard| Guard::new(Inner::Multi(guard), mode)))
        })
    }

    /// Waits for every lock, at most `timeout` seconds (None: as long as it takes).
    #[pyo3(signature = (*, timeout=None, task=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        timeout: Option<Secs>,
        task: Option<&str>,
    ) -> PyResult<Py<PyAny>> {
        let multi = self.multi(py, task)?;
        let mode = self.mode;
        let timeout = secs(timeout);
        call(py, mode, Length::Wait, async move {
            let guard = match timeout {
                None => lib(multi.acquire().await)?,
                Some(t) => lib(multi.acquire_timeout(t).await)?,
            };
            Ok(Guard::new(Inner::Multi(guard), mode))
        })
    }
}

impl MultiLock {
    fn multi(&self, py: Python<'_>, task: Option<&str>) -> PyResult<Arc<leasehold::MultiLock>> {
        let made = || -> Result<_, Fail> {
            let locks = self
                .locks
                .iter()
                .map(|lock| lock.get().caller(task))
                .collect::<Result<Vec<_>, Fail>>()?;
            Ok(Arc::new(lib(leasehold::MultiLock::new(locks))?))
        };
        made().map_err(|e| e.into_pyerr(py))
    }
}
