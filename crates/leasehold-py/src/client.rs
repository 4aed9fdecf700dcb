//! The clients: a deployment's (`Client`) and a Redlock's masters
//! (`Redlock`). Each keeps its settings and builds its library client again
//! in a child after `fork()`.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::call::{call, lib, secs, Length, Mode, Secs};
use crate::error::Fail;
use crate::lock::{Built, Kind, Lock, Spec};
use crate::runtime::{self, Rebuilt};

/// Calls each builder setter whose setting was given; one left out (None)
/// keeps the library's default.
macro_rules! set_given {
    ($builder:ident; $($setter:ident: $value:expr),+ $(,)?) => {
        $(
            if let Some(value) = $value {
                $builder = $builder.$setter(value);
            }
        )+
    };
}

/// What a client is in one process: its library client and the id its
/// threads' and tasks' owners start with.
#[derive(Clone)]
struct Proc {
    client: leasehold::Client,
    owners: Arc<str>,
}

/// Where locks come from: a deployment, or a Redlock's masters.
pub(crate) enum Source {
    Client(Arc<ClientCore>),
    Redlock(Arc<RedlockCore>),
}

impl Source {
    /// The lock `spec` of this process's client.
    pub(crate) fn build(&self, spec: &Spec) -> Result<Built, Fail> {
        match self {
            Source::Client(core) => {
                let client = core.proc()?.client;
                let name = spec.name.as_str();
                Ok(match spec.kind {
                    Kind::Mutex => Built::Mutex(lib(client.mutex(name))?),
                    Kind::Fair => Built::Fair(lib(client.fair_mutex(name))?),
                    Kind::Reentrant => Built::Reentrant(lib(client.reentrant_mutex(name))?),
                    Kind::FairReentrant => {
                        Built::Reentrant(lib(client.reentrant_mutex(name))?.fair())
                    }
                    Kind::Read => Built::Read(lib(client.rw_lock(name))?),
                    Kind::Write => Built::Write(lib(client.rw_lock(name))?),
                    Kind::Semaphore => Built::Semaphore(lib(client.semaphore(name, spec.permits))?),
                    Kind::Redlock => {
                        return Err(Fail::invalid("a Redlock mutex comes from a Redlock"))
                    }
                })
            }
            Source::Redlock(core) => Ok(Built::Redlock(lib(core.redlock()?.mutex(&spec.name))?)),
        }
    }

    /// The owner id of an acquisition by the calling thread (or by the
    /// asyncio task `task`), unique to this client in this process.
    pub(crate) fn owner(&self, task: Option<&str>) -> Result<leasehold::Owner, Fail> {
        let Source::Client(core) = self else {
            return Err(Fail::invalid("a Redlock mutex has no owners"));
        };
        let owners = core.proc()?.owners;
        let id = match task {
            Some(task) => format!("{owners}:a{task}"),
            None => format!("{owners}:{}", thread_id()),
        };
        lib(leasehold::Owner::from_id(id))
    }

    pub(crate) fn mode(&self) -> Mode {
        match self {
            Source::Client(core) => core.mode,
            Source::Redlock(core) => core.mode,
        }
    }
}

impl Clone for Source {
    fn clone(&self) -> Self {
        match self {
            Source::Client(core) => Source::Client(Arc::clone(core)),
            Source::Redlock(core) => Source::Redlock(Arc::clone(core)),
        }
    }
}

/// The calling thread's id in this process, digits only.
fn thread_id() -> String {
    format!("{:?}", std::thread::current().id())
        .chars()
        .filter(char::is_ascii_digit)
        .collect()
}

pub(crate) struct ClientCore {
    builder: leasehold::ClientBuilder,
    state: Rebuilt<Proc>,
    mode: Mode,
}

impl ClientCore {
    fn proc(&self) -> Result<Proc, Fail> {
        self.state.get(|| build_proc(&self.builder))
    }
}

fn build_proc(builder: &leasehold::ClientBuilder) -> Result<Proc, Fail> {
    let handle = runtime::handle()?;
    let _context = handle.enter();
    Ok(Proc {
        client: lib(builder.clone().build())?,
        owners: lib(leasehold::Owner::new())?.id().into(),
    })
}

/// A client of one Redis deployment (one server, a Cluster, or a master
/// watched by Sentinel).
#[pyclass(frozen, weakref, module = "leasehold._native")]
pub(crate) struct Client {
    core: Arc<ClientCore>,
    url: String,
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (
        url, *, asyncio, prefix=None, lease=None, watchdog=None, command_timeout=None,
        connect_timeout=None, restart_grace=None, fence_retention=None, name=None,
        tls_root_certificate=None, sentinel_username=None, sentinel_password=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: String,
        asyncio: bool,
        prefix: Option<String>,
        lease: Option<Secs>,
        watchdog: Option<bool>,
        command_timeout: Option<Secs>,
        connect_timeout: Option<Secs>,
        restart_grace: Option<Secs>,
        fence_retention: Option<Secs>,
        name: Option<String>,
        tls_root_certificate: Option<Vec<u8>>,
        sentinel_username: Option<String>,
        sentinel_password: Option<String>,
    ) -> PyResult<Self> {
        let mut builder = leasehold::Client::builder(url.clone());
        set_given!(builder;
            prefix: prefix,
            lease: secs(lease),
            watchdog: watchdog,
            command_timeout: secs(command_timeout),
            connect_timeout: secs(connect_timeout),
            restart_grace: secs(restart_grace),
            fence_retention: secs(fence_retention),
            name: name,
            tls_root_certificate: tls_root_certificate,
            sentinel_username: sentinel_username,
            sentinel_password: sentinel_password,
        );
        // Built now so that a bad URL or setting is refused here.
        let proc = build_proc(&builder).map_err(|e| e.into_pyerr(py))?;
        Ok(Client {
            core: Arc::new(ClientCore {
                builder,
                state: Rebuilt::new(proc),
                mode: Mode::new(asyncio),
            }),
            url,
        })
    }

    /// The URL the client was made with.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    /// The first part of every key this client writes.
    #[getter]
    fn prefix(&self, py: Python<'_>) -> PyResult<String> {
        let proc = self.core.proc().map_err(|e| e.into_pyerr(py))?;
        Ok(proc.client.prefix().to_owned())
    }

    /// A lock of `kind` called `name`, with its settings.
    #[pyo3(signature = (
        kind, name, *, permits=1, lease=None, watchdog=None, hold_at_least=None,
        max_hold=None, replicas=0, replica_timeout=None, owner=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn lock(
        &self,
        py: Python<'_>,
        kind: &str,
        name: String,
        permits: u32,
        lease: Option<Secs>,
        watchdog: Option<bool>,
        hold_at_least: Option<Secs>,
        max_hold: Option<Secs>,
        replicas: u32,
        replica_timeout: Option<Secs>,
        owner: Option<String>,
    ) -> PyResult<Lock> {
        let kind = Kind::parse(kind).map_err(|e| e.into_pyerr(py))?;
        let spec = Spec {
            kind,
            name,
            permits,
            lease: secs(lease),
            watchdog,
            hold_at_least: secs(hold_at_least),
            max_hold: secs(max_hold),
            replica_ack: (replicas > 0).then(|| {
                (
                    replicas,
                    secs(replica_timeout).unwrap_or(leasehold::DEFAULT_REPLICA_TIMEOUT),
                )
            }),
            owner,
        };
        Lock::new(Source::Client(Arc::clone(&self.core)), spec).map_err(|e| e.into_pyerr(py))
    }

    /// The election called `name`.
    #[pyo3(signature = (name, *, lease=None, max_term=None))]
    fn election(
        &self,
        py: Python<'_>,
        name: String,
        lease: Option<Secs>,
        max_term: Option<Secs>,
    ) -> PyResult<crate::election::Election> {
        crate::election::Election::new(Arc::clone(&self.core), name, secs(lease), secs(max_term))
            .map_err(|e| e.into_pyerr(py))
    }

    /// Waits until the releases this client runs in the background are
    /// done (at most four command timeouts); `block` blocks whatever the
    /// client's mode (for an exit hook).
    #[pyo3(signature = (*, block=false))]
    fn flush(&self, py: Python<'_>, block: bool) -> PyResult<Py<PyAny>> {
        let mode = if block {
            Mode::Blocking
        } else {
            self.core.mode
        };
        // A process that never used the client has nothing to flush.
        let client = self.core.state.existing().map(|proc| proc.client);
        call(py, mode, Length::RoundTrip, async move {
            if let Some(client) = client {
                client.flush().await;
            }
            Ok(())
        })
    }

    /// Whether the client's calls return awaitables.
    #[getter]
    fn asyncio(&self) -> bool {
        self.core.mode == Mode::Asyncio
    }

    fn __repr__(&self) -> String {
        format!("Client({:?})", self.url)
    }
}

impl ClientCore {
    /// This process's library client.
    pub(crate) fn client(&self) -> Result<leasehold::Client, Fail> {
        Ok(self.proc()?.client)
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }
}

pub(crate) struct RedlockCore {
    builder: leasehold::RedlockBuilder,
    state: Rebuilt<leasehold::Redlock>,
    mode: Mode,
}

impl RedlockCore {
    fn redlock(&self) -> Result<leasehold::Redlock, Fail> {
        self.state.get(|| build_redlock(&self.builder))
    }
}

fn build_redlock(builder: &leasehold::RedlockBuilder) -> Result<leasehold::Redlock, Fail> {
    let handle = runtime::handle()?;
    let _context = handle.enter();
    lib(builder.clone().build())
}

/// A mutex over several independent Redis masters, held while a majority
/// holds it.
#[pyclass(frozen, weakref, module = "leasehold._native")]
pub(crate) struct Redlock {
    core: Arc<RedlockCore>,
}

#[pymethods]
impl Redlock {
    #[new]
    #[pyo3(signature = (
        urls, *, asyncio, prefix=None, lease=None, watchdog=None, command_timeout=None,
        node_timeout=None, retry_delay=None, restart_grace=None, fence_retention=None, name=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        urls: Vec<String>,
        asyncio: bool,
        prefix: Option<String>,
        lease: Option<Secs>,
        watchdog: Option<bool>,
        command_timeout: Option<Secs>,
        node_timeout: Option<Secs>,
        retry_delay: Option<Secs>,
        restart_grace: Option<Secs>,
        fence_retention: Option<Secs>,
        name: Option<String>,
    ) -> PyResult<Self> {
        let mut builder = leasehold::Redlock::builder(urls);
        set_given!(builder;
            prefix: prefix,
            lease: secs(lease),
            watchdog: watchdog,
            command_timeout: secs(command_timeout),
            node_timeout: secs(node_timeout),
            retry_delay: secs(retry_delay),
            restart_grace: secs(restart_grace),
            fence_retention: secs(fence_retention),
            name: name,
        );
        let redlock = build_redlock(&builder).map_err(|e| e.into_pyerr(py))?;
        Ok(Redlock {
            core: Arc::new(RedlockCore {
                builder,
                state: Rebuilt::new(redlock),
                mode: Mode::new(asyncio),
            }),
        })
    }

    /// The mutex `name` over these masters.
    #[pyo3(signature = (name, *, lease=None, watchdog=None, hold_at_least=None, max_hold=None))]
    fn lock(
        &self,
        py: Python<'_>,
        name: String,
        lease: Option<Secs>,
        watchdog: Option<bool>,
        hold_at_least: Option<Secs>,
        max_hold: Option<Secs>,
    ) -> PyResult<Lock> {
        let spec = Spec {
            kind: Kind::Redlock,
            name,
            permits: 1,
            lease: secs(lease),
            watchdog,
            hold_at_least: secs(hold_at_least),
            max_hold: secs(max_hold),
            replica_ack: None,
            owner: None,
        };
        Lock::new(Source::Redlock(Arc::clone(&self.core)), spec).map_err(|e| e.into_pyerr(py))
    }

    /// The masters, as `host:port`.
    #[getter]
    fn addresses(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let redlock = self.core.redlock().map_err(|e| e.into_pyerr(py))?;
        Ok(redlock.addresses().into_iter().map(str::to_owned).collect())
    }

    /// How many masters must hold a lock for it to be held.
    #[getter]
    fn quorum(&self, py: Python<'_>) -> PyResult<usize> {
        let redlock = self.core.redlock().map_err(|e| e.into_pyerr(py))?;
        Ok(redlock.quorum())
    }

    /// Waits until what this Redlock runs in the background is done;
    /// `block` blocks whatever the mode (for an exit hook).
    #[pyo3(signature = (*, block=false))]
    fn flush(&self, py: Python<'_>, block: bool) -> PyResult<Py<PyAny>> {
        let mode = if block {
            Mode::Blocking
        } else {
            self.core.mode
        };
        let redlock = self.core.state.existing();
        call(py, mode, Length::RoundTrip, async move {
            if let Some(redlock) = redlock {
                redlock.flush().await;
            }
            Ok(())
        })
    }
}
