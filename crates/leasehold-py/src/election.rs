//! Leader election: campaign, and ask who leads.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;

use crate::call::{call, lib, secs, Length, Secs};
use crate::client::ClientCore;
use crate::error::Fail;
use crate::held::{Guard, Inner};
use crate::runtime::Rebuilt;

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

    /// Who leads now, as (value, fence), or None.
    fn leader(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let election = self.built().map_err(|e| e.into_pyerr(py))?;
        call(py, self.core.mode(), Length::RoundTrip, async move {
            let leader = lib(election.leader().await)?;
            Ok(leader.map(|l| (l.value, l.fence)))
        })
    }
}
