//! Errors, raised in Python as `leasehold.LeaseholdError` and its
//! subclasses (defined in `leasehold/exceptions.py`), by the error's kind.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::IntoPyObjectExt;

/// A failed call: the library's error, or one of this module's own.
#[derive(Debug)]
pub(crate) enum Fail {
    Lib(leasehold::Error),
    Own { kind: &'static str, message: String },
}

impl Fail {
    pub(crate) fn invalid(message: impl Into<String>) -> Fail {
        Fail::own("invalid_input", message)
    }

    pub(crate) fn system(message: impl Into<String>) -> Fail {
        Fail::own("system", message)
    }

    pub(crate) fn timeout(message: impl Into<String>) -> Fail {
        Fail::own("timeout", message)
    }

    pub(crate) fn not_held(message: impl Into<String>) -> Fail {
        Fail::own("not_held", message)
    }

    fn own(kind: &'static str, message: impl Into<String>) -> Fail {
        Fail::Own {
            kind,
            message: message.into(),
        }
    }

    /// The kind, as `LeaseholdError.kind` names it: the library's
    /// `ErrorKind` in snake case.
    pub(crate) fn kind(&self) -> &'static str {
        use leasehold::ErrorKind as K;
        match self {
            Fail::Own { kind, .. } => kind,
            Fail::Lib(e) => match e.kind() {
                K::Timeout => "timeout",
                K::NotHeld => "not_held",
                K::InvalidInput => "invalid_input",
                K::Connection => "connection",
                K::Auth => "auth",
                K::Config => "config",
                K::Server => "server",
                K::System => "system",
                K::Conflict => "conflict",
                K::ReplicasMissing => "replicas_missing",
                K::OutcomeUnknown => "outcome_unknown",
                K::Quorum => "quorum",
                _ => "other",
            },
        }
    }

    /// The message, with the causes after it as `anyhow`'s `{:#}` shows them.
    pub(crate) fn message(&self) -> String {
        match self {
            Fail::Own { message, .. } => message.clone(),
            Fail::Lib(e) => {
                let mut message = e.to_string();
                let mut source = std::error::Error::source(e);
                while let Some(cause) = source {
                    let cause_text = cause.to_string();
                    if !message.contains(&cause_text) {
                        message.push_str(": ");
                        message.push_str(&cause_text);
                    }
                    source = cause.source();
                }
                message
            }
        }
    }

    /// The Python exception of this error's class.
    pub(crate) fn into_pyerr(self, py: Python<'_>) -> PyErr {
        static MAKE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let kind = self.kind();
        let message = self.message();
        let made = MAKE
            .import(py, "leasehold.exceptions", "_from_native")
            .and_then(|make| make.call1((kind, message.as_str())));
        match made {
            Ok(exception) => PyErr::from_value(exception),
            Err(e) => e,
        }
    }
}

impl From<leasehold::Error> for Fail {
    fn from(e: leasehold::Error) -> Self {
        Fail::Lib(e)
    }
}

/// The outcome of a call, turned into its Python value, or raised, once
/// the GIL is held: the same for a blocking call and an awaitable.
pub(crate) struct Answer<T>(pub(crate) Result<T, Fail>);

impl<'py, T> IntoPyObject<'py> for Answer<T>
where
    T: IntoPyObject<'py>,
{
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.0 {
            Ok(value) => value.into_bound_py_any(py),
            Err(fail) => Err(fail.into_pyerr(py)),
        }
    }
}
