//! Leader election: campaign, and ask who leads.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use tokio::sync::{watch, Mutex};

use crate::call::{call, lib, secs, Length, Secs};
use crate::client::ClientCore;
use crate::error::Fail;
use crate::held::{Guard, Inner};
use crate::runtime::{PerProcess, Rebuilt};

/// One election: at most one leader at a time among its candidates.
#[pyclass(frozen, module = "leasehold._native")]
pub(crate) struct Election {
    core: Arc<ClientCore>,
    name: String,
    lease: Option<Duration>,
    max_term: Option<Duration>,
    built: Rebuilt<leasehold::Election>,
}

impl Election {
    pub(crate) fn new(
        core: Arc<ClientCore>,
        name: String,
        lease: Option<Duration>,
        max_term: Option<Duration>,
    ) -> Result<Election, Fail> {
        let built = build(&core, &name, lease, max_term)?;
        Ok(Election {
            core,
            name,
            lease,
            max_term,
            built: Rebuilt::new(built),
        })
    }

    fn built(&self) -> Result<leasehold::Election, Fail> {
        self.built
            .get(|| build(&self.core, &self.name, self.lease, self.max_term))
    }
}

fn build(
    core: &ClientCore,
    name: &str,
    lease: Option<Duration>,
    max_term: Option<Duration>,
) -> Result<leasehold::Election, Fail> {
    let mut election = lib(core.client()?.election(name))?;
    if let Some(lease) = lease {
        election = lib(election.with_lease(lease))?;
    }
    if let Some(max) = max_term {
        election = lib(election.with_max_term(max))?;
    }
    Ok(election)
}

#[pymethods]
impl Election {
    /// The election's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Waits to lead (at most `timeout` seconds; None: as long as it
    /// takes), then records `value` as the leader's.
    #[pyo3(signature = (value, *, timeout=None))]
    fn campaign(
        &self,
        py: Python<'_>,
        value: String,
        timeout: Option<Secs>,
    ) -> PyResult<Py<PyAny>> {
        let election = self.built().map_err(|e| e.into_pyerr(py))?;
        let mode = self.core.mode();
        let timeout = secs(timeout);
        let name = self.name.clone();
        call(py, mode, Length::Wait, async move {
            let won = match timeout {
                None => election.campaign(value).await,
                Some(wait) => tokio::time::timeout(wait, election.campaign(value))
                    .await
                    .map_err(|_| {
                        Fail::timeout(format!(
                            "election {name:?} was not won within {wait:?}: another candidate \
                             leads; wait longer, or follow the leader instead"
                        ))
                    })?,
            };
            Ok(Guard::new(Inner::Leadership(Box::new(lib(won)?)), mode))
        })
    }

    /// Follows who leads: a watch that holds the leader and is updated
    /// on each change, once its first reading from Redis is in.
    fn observe(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let election = self.built().map_err(|e| e.into_pyerr(py))?;
        let mode = self.core.mode();
        let name = self.name.clone();
        call(py, mode, Length::RoundTrip, async move {
            let receiver = lib(election.observe().await)?;
            Ok(LeaderWatch {
                receiver: PerProcess::new(Arc::new(Mutex::new(receiver))),
                mode,
                name,
            })
        })
    }

    /// Who leads now, as (value, fence), or None.
    fn leader(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let election = self.built().map_err(|e| e.into_pyerr(py))?;
        call(py, self.core.mode(), Length::RoundTrip, async move {
            let leader = lib(election.leader().await)?;
            Ok(leader.map(|l| (l.value, l.fence)))
        })
    }
}

type Leading = Option<(String, u64)>;

fn leading(leader: &Option<leasehold::Leader>) -> Leading {
    leader.as_ref().map(|l| (l.value.clone(), l.fence))
}

/// Who leads an election, followed: updated on each change.
#[pyclass(frozen, module = "leasehold._native")]
pub(crate) struct LeaderWatch {
    receiver: PerProcess<Arc<Mutex<watch::Receiver<Option<leasehold::Leader>>>>>,
    mode: crate::call::Mode,
    name: String,
}

impl LeaderWatch {
    fn mine(&self) -> Result<Arc<Mutex<watch::Receiver<Option<leasehold::Leader>>>>, Fail> {
        self.receiver.mine().cloned().ok_or_else(|| {
            Fail::invalid(format!(
                "this watch of election {:?} follows it for process {}, which forked this one: \
                 observe the election again in this process",
                self.name,
                self.receiver.owner_pid()
            ))
        })
    }
}

#[pymethods]
impl LeaderWatch {
    /// The leader as last seen, as (value, fence), or None: nobody leads.
    fn current(&self, py: Python<'_>) -> PyResult<Leading> {
        let shared = self.mine().map_err(|e| e.into_pyerr(py))?;
        let receiver = shared.try_lock().map_err(|_| {
            Fail::invalid(
                "another call waits on this watch: read it from one thread or task at a time",
            )
            .into_pyerr(py)
        })?;
        let now = leading(&receiver.borrow());
        Ok(now)
    }

    /// Waits for the next change (at most `timeout` seconds): the leader
    /// then, as (value, fence) or None, marked as a change; or no change
    /// when the time ran out.
    #[pyo3(signature = (timeout=None))]
    fn changed(&self, py: Python<'_>, timeout: Option<Secs>) -> PyResult<Py<PyAny>> {
        let receiver = self.mine().map_err(|e| e.into_pyerr(py))?;
        let timeout = secs(timeout);
        let name = self.name.clone();
        call(py, self.mode, Length::Wait, async move {
            let mut receiver = receiver.lock().await;
            let changed = match timeout {
                Some(wait) => match tokio::time::timeout(wait, receiver.changed()).await {
                    Ok(changed) => changed,
                    Err(_) => return Ok((false, None)),
                },
                None => receiver.changed().await,
            };
            if changed.is_err() {
                return Err(Fail::system(format!(
                    "the watch of election {name:?} ended: observe it again"
                )));
            }
            let now = leading(&receiver.borrow_and_update());
            Ok((true, now))
        })
    }
}
