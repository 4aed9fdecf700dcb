//! What one client keeps of its leases, whatever deployment they live on:
//! the watchdog, the reentrant holds its guards share, the local wait
//! queues and the background releases.

use std::sync::Arc;

use crate::engine::held::{Holds, Mine};
use crate::engine::queue::LocalQueues;
use crate::engine::release::Background;
use crate::engine::watchdog::Watchdog;

#[derive(Debug, Default)]
pub(crate) struct LeaseState {
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) queues: LocalQueues,
    /// The reentrant holds this client's guards share.
    pub(crate) holds: Holds,
    /// The leases held here, by lock and holder.
    pub(crate) mine: Mine,
    pub(crate) background: Background,
}
