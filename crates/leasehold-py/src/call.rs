//! One way to run a call, blocking or as an awaitable, so that every method
//! is written once for `leasehold.Client` and `leasehold.asyncio.Client`.

use std::future::Future;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDelta;
use pyo3::IntoPyObjectExt;

use crate::error::{Answer, Fail};
use crate::runtime;

/// Whether calls block the calling thread or return asyncio awaitables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Blocking,
    Asyncio,
}

impl Mode {
    pub(crate) fn new(asyncio: bool) -> Mode {
        if asyncio {
            Mode::Asyncio
        } else {
            Mode::Blocking
        }
    }
}

/// How long a call may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Length {
    /// A round trip or a few, bounded by the command timeout.
    RoundTrip,
    /// A wait that may last (for a lock, for a loss): Ctrl-C ends it.
    Wait,
}

/// Runs `future` as `mode` says: to its end with the GIL released, or as
/// an awaitable on the caller's event loop. Its value (or its error,
/// raised) is made once the GIL is held again.
pub(crate) fn call<F, T>(
    py: Python<'_>,
    mode: Mode,
    length: Length,
    future: F,
) -> PyResult<Py<PyAny>>
where
    F: Future<Output = Result<T, Fail>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    match mode {
        Mode::Blocking => {
            let output = match length {
                Length::RoundTrip => runtime::block_on(py, future)?,
                Length::Wait => runtime::block_on_interruptible(py, future)?,
            };
            Answer(output).into_py_any(py)
        }
        Mode::Asyncio => {
            pyo3_async_runtimes::generic::future_into_py::<runtime::Asyncio, _, _>(py, async move {
                Ok(Answer(future.await))
            })
            .map(Bound::unbind)
        }
    }
}

/// A duration from Python: seconds (int or float) or a `datetime.timedelta`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Secs(pub(crate) Duration);

impl<'a, 'py> FromPyObject<'a, 'py> for Secs {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        let seconds: f64 = if let Ok(delta) = obj.cast::<PyDelta>() {
            delta.call_method0("total_seconds")?.extract()?
        } else if obj.is_instance_of::<pyo3::types::PyBool>() {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "a duration is seconds (int or float) or a datetime.timedelta, not a bool",
            ));
        } else {
            obj.extract().map_err(|_: PyErr| {
                pyo3::exceptions::PyTypeError::new_err(format!(
                    "a duration is seconds (int or float) or a datetime.timedelta, not {}",
                    obj.get_type()
                        .name()
                        .map_or_else(|_| "that".to_owned(), |n| n.to_string())
                ))
            })?
        };
        if !seconds.is_finite() || seconds < 0.0 {
            return Err(Fail::invalid(format!(
                "duration {seconds} s is not valid: give a number of seconds >= 0, or a timedelta"
            ))
            .into_pyerr(py));
        }
        Duration::try_from_secs_f64(seconds).map(Secs).map_err(|_| {
            Fail::invalid(format!(
                "duration {seconds} s is too long: give at most a day"
            ))
            .into_pyerr(py)
        })
    }
}

/// The duration inside, if any.
pub(crate) fn secs(value: Option<Secs>) -> Option<Duration> {
    value.map(|Secs(d)| d)
}

/// A `leasehold::Result` as this module's.
pub(crate) fn lib<T>(result: leasehold::Result<T>) -> Result<T, Fail> {
    result.map_err(Fail::from)
}
