//! What one client keeps of its leases, whatever deployment they live on:
//! the watchdog, the reentrant holds its guards share, the local wait
//! queues and the background releases.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::engine::held::Holds;
use crate::engine::queue::LocalQueues;
use crate::engine::release::Background;
use crate::engine::watchdog::Watchdog;

#[derive(Debug, Default)]
pub(crate) struct LeaseState {
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) queues: LocalQueues,
    /// The reentrant holds this client's guards share.
    pub(crate) holds: Holds,
    pub(crate) background: Background,
    /// Guards alive per lock and owner, for the kinds with owners.
    owners: Mutex<HashMap<(String, String), usize>>,
}

impl LeaseState {
    /// A guard of `owner` on `lock` begins (`taken`) or ends.
    pub(crate) fn owned(&self, lock: &str, owner: &str, taken: bool) {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (lock.to_owned(), owner.to_owned());
        if taken {
            *owners.entry(key).or_default() += 1;
        } else if let Some(count) = owners.get_mut(&key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                owners.remove(&key);
            }
        }
    }

    /// Whether a guard of this client holds `lock` for `owner` now.
    pub(crate) fn holds_for(&self, lock: &str, owner: &str) -> bool {
        self.owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&(lock.to_owned(), owner.to_owned()))
    }
}
