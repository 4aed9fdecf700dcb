//! One guard class over what a caller can hold: a lease, several leases
//! taken together, a leadership.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pyo3::prelude::*;
use tokio::sync::{watch, RwLock};

use crate::call::{call, secs, Length, Mode, Secs};
use crate::error::Fail;
use crate::runtime::PerProcess;

/// What a guard holds.
pub(crate) enum Inner {
    Lease(leasehold::LeaseGuard),
    Multi(leasehold::MultiGuard),
    Leadership(Box<leasehold::Leadership>),
}

impl Inner {
    fn loss(&self) -> Option<String> {
        match self {
            Inner::Lease(g) => g.loss_reason().map(|r| r.to_string()),
            Inner::Leadership(g) => g.loss_reason().map(|r| r.to_string()),
            Inner::Multi(g) => g
                .loss_reason()
                .map(|l| format!("lock {:?}: {}", l.name, l.reason)),
        }
    }

    fn valid_for(&self) -> Duration {
        match self {
            Inner::Lease(g) => g.valid_for(),
            Inner::Multi(g) => g.valid_for(),
            Inner::Leadership(g) => g.valid_for(),
        }
    }

    async fn lost(&self) {
        match self {
            Inner::Lease(g) => g.lost().await,
            Inner::Multi(g) => g.lost().await,
            Inner::Leadership(g) => g.lost().await,
        }
    }

    async fn release(self) -> leasehold::Result<()> {
        match self {
            Inner::Lease(g) => g.release().await,
            Inner::Multi(g) => g.release().await,
            Inner::Leadership(g) => (*g).resign().await,
        }
    }

    async fn extend(&self, lease: Duration) -> Result<(), Fail> {
        match self {
            Inner::Lease(g) => Ok(g.extend(lease).await?),
            Inner::Multi(g) => {
                for guard in g.guards() {
                    guard.extend(lease).await?;
                }
                Ok(())
            }
            Inner::Leadership(_) => Err(Fail::invalid(
                "a leadership's lease is renewed by the watchdog: it has no extend",
            )),
        }
    }
}

/// A held guard shared with the calls in flight on it: extends and waits
/// for loss read it, the release takes it out.
struct Held {
    inner: RwLock<Option<Inner>>,
    /// True once a release started: waits for loss end then.
    finished: watch::Sender<bool>,
    /// Why the lease was lost, as the release found it.
    lost_before_release: Mutex<Option<String>>,
}

/// A held lease (or several, or a leadership): its fence and loss, and its
/// release.
#[pyclass(frozen, module = "leasehold._native")]
pub(crate) struct Guard {
    held: PerProcess<Arc<Held>>,
    mode: Mode,
    name: String,
    fences: Vec<u64>,
    token: String,
    permits: u32,
    value: Option<String>,
}

impl Guard {
    pub(crate) fn new(inner: Inner, mode: Mode) -> Guard {
        let (name, fences, token, permits, value) = match &inner {
            Inner::Lease(g) => (
                g.name().to_owned(),
                vec![g.fence()],
                g.token().to_owned(),
                g.permits(),
                None,
            ),
            Inner::Multi(g) => (
                g.guards()
                    .iter()
                    .map(leasehold::LeaseGuard::name)
                    .collect::<Vec<_>>()
                    .join(","),
                g.fences(),
                String::new(),
                1,
                None,
            ),
            Inner::Leadership(g) => (
                g.name().to_owned(),
                vec![g.fence()],
                String::new(),
                1,
                Some(g.value().to_owned()),
            ),
        };
        Guard {
            held: PerProcess::new(Arc::new(Held {
                inner: RwLock::new(Some(inner)),
                finished: watch::channel(false).0,
                lost_before_release: Mutex::new(None),
            })),
            mode,
            name,
            fences,
            token,
            permits,
            value,
        }
    }

    /// The held state, or why this process cannot use it.
    fn mine(&self) -> Result<Arc<Held>, Fail> {
        self.held.mine().cloned().ok_or_else(|| {
            Fail::not_held(format!(
                "lock {:?} is held by process {}, which forked this one: a child does not \
                 hold its parent's locks; take the lock again in this process",
                self.name,
                self.held.owner_pid()
            ))
        })
    }
}

#[pymethods]
impl Guard {
    /// The lock's name (for several locks, their names joined by commas).
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The fence of the acquisition (of several locks: the first's).
    #[getter]
    fn fence(&self) -> u64 {
        self.fences.first().copied().unwrap_or(0)
    }

    /// The fences of every lock taken together, in the order given.
    #[getter]
    fn fences(&self) -> Vec<u64> {
        self.fences.clone()
    }

    /// The token that identifies this lease in Redis.
    #[getter]
    fn token(&self) -> &str {
        &self.token
    }

    /// Semaphore permits this lease holds (1 for the other locks).
    #[getter]
    fn permits(&self) -> u32 {
        self.permits
    }

    /// The value a leader campaigned with.
    #[getter]
    fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// Whether this guard was made in another process (this one is a fork).
    #[getter]
    fn forked(&self) -> bool {
        self.held.mine().is_none()
    }

    /// Why the lease was lost, or None while it is held.
    #[getter]
    fn lost_reason(&self) -> Option<String> {
        let held = match self.mine() {
            Ok(held) => held,
            Err(e) => return Some(e.message()),
        };
        let reason = match held.inner.try_read() {
            Ok(inner) => match inner.as_ref() {
                Some(inner) => inner.loss(),
                None => None,
            },
            Err(_) => None,
        };
        reason.or_else(|| {
            held.lost_before_release
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
    }

    /// Whether the lease was lost (once true, stays true).
    #[getter]
    fn lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Whether the guard was released.
    #[getter]
    fn released(&self) -> bool {
        self.mine().is_ok_and(|held| *held.finished.borrow())
    }

    /// Seconds left before the lease runs out if no renewal comes.
    #[getter]
    fn valid_for(&self) -> f64 {
        let Ok(held) = self.mine() else {
            return 0.0;
        };
        let valid_for = match held.inner.try_read() {
            Ok(inner) => inner
                .as_ref()
                .map_or(0.0, |inner| inner.valid_for().as_secs_f64()),
            Err(_) => 0.0,
        };
        valid_for
    }

    /// Sets the lease to `lease` seconds from now.
    fn extend(&self, py: Python<'_>, lease: Secs) -> PyResult<Py<PyAny>> {
        let held = self.mine().map_err(|e| e.into_pyerr(py))?;
        let name = self.name.clone();
        call(py, self.mode, Length::RoundTrip, async move {
            let inner = held.inner.read().await;
            match inner.as_ref() {
                Some(inner) => inner.extend(lease.0).await,
                None => Err(released(&name)),
            }
        })
    }

    /// Releases the lease; raises if it was lost before.
    fn release(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let held = self.mine().map_err(|e| e.into_pyerr(py))?;
        let name = self.name.clone();
        call(py, self.mode, Length::RoundTrip, async move {
            // Only the first release takes the lease out; a second one,
            // even a concurrent one, reports that it was released.
            if held.finished.send_replace(true) {
                return Err(released(&name));
            }
            let Some(inner) = held.inner.write().await.take() else {
                return Err(released(&name));
            };
            let loss = inner.loss();
            let released = inner.release().await;
            if let Err(e) = &released {
                if e.is_not_held() {
                    *held
                        .lost_before_release
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) =
                        Some(loss.unwrap_or_else(|| e.to_string()));
                }
            }
            Ok(released?)
        })
    }

    /// Waits until the lease is lost: True then; False when `timeout`
    /// seconds passed first, or the guard was released.
    #[pyo3(signature = (timeout=None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<Secs>) -> PyResult<Py<PyAny>> {
        let held = self.mine().map_err(|e| e.into_pyerr(py))?;
        let timeout = secs(timeout);
        call(py, self.mode, Length::Wait, async move {
            let mut finished = held.finished.subscribe();
            let wait = async {
                let inner = held.inner.read().await;
                let Some(inner) = inner.as_ref() else {
                    return false;
                };
                tokio::select! {
                    () = inner.lost() => true,
                    _ = finished.wait_for(|done| *done) => false,
                }
            };
            Ok(match timeout {
                Some(timeout) => tokio::time::timeout(timeout, wait).await.unwrap_or(false),
                None => wait.await,
            })
        })
    }

    fn __repr__(&self) -> String {
        format!("Guard(name={:?}, fences={:?})", self.name, self.fences)
    }
}

fn released(name: &str) -> Fail {
    Fail::not_held(format!(
        "the lease of lock {name:?} was released already: acquire the lock again"
    ))
}
