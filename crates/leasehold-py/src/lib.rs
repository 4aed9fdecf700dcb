//! The native module of the `leasehold` Python package: the library's
//! public API, with conversion and runtime plumbing only. The lock protocol
//! is the library's; the Python idioms (context managers, exceptions, the
//! asyncio module) are in the pure-Python package around this module.

mod call;
mod client;
mod election;
mod error;
mod held;
mod lock;
mod runtime;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_class::<client::Redlock>()?;
    m.add_class::<lock::Lock>()?;
    m.add_class::<lock::MultiLock>()?;
    m.add_class::<held::Guard>()?;
    m.add_class::<election::Election>()?;
    m.add_class::<election::LeaderWatch>()?;
    m.add("DEFAULT_URL", leasehold::DEFAULT_URL)?;
    m.add("URL_ENV_VARS", leasehold::URL_ENV_VARS.to_vec())?;
    m.add("DEFAULT_PREFIX", leasehold::DEFAULT_PREFIX)?;
    m.add("DEFAULT_LEASE", leasehold::DEFAULT_LEASE.as_secs_f64())?;
    Ok(())
}
