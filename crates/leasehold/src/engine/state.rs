//! One client's engine: what it leases from, its settings, and what it
//! keeps of its leases whatever it leases from (the queue of renewals, the
//! reentrant holds its guards share, the local wait queues and the
//! background releases).

use std::sync::Arc;
use std::time::Duration;

use crate::background::Background;
use crate::deploy::backing::Backing;
use crate::deploy::store::Store;
use crate::engine::holds::{Holds, Mine};
use crate::engine::queue::LocalQueues;
use crate::engine::schedule::Renewals;
use crate::error::{Error, Result};
use crate::keys::{millis, MAX_LEASE};
use crate::random::new_token;

#[derive(Debug, Default)]
pub(crate) struct LeaseState {
    /// The leases the watchdog renews.
    pub(crate) renewals: Arc<Renewals>,
    pub(crate) queues: LocalQueues,
    /// The reentrant holds this client's guards share.
    pub(crate) holds: Holds,
    /// The leases held here, by lock and holder.
    pub(crate) mine: Mine,
    /// Releases from drops, and requests that outlived their round.
    pub(crate) background: Arc<Background>,
}

/// How an engine behaves, fixed when it is made.
#[derive(Debug, Clone)]
pub(crate) struct EngineConfig {
    /// No lock is granted by a server that has been up for less than this.
    pub(crate) restart_grace: Option<Duration>,
    /// How long a fence counter outlives the last acquisition.
    pub(crate) fence_retention: Duration,
    /// "<pid> <host> <client name>", recorded with every lease and waiter.
    pub(crate) identity: String,
    /// A wait by a client that has never reached Redis ends after this.
    pub(crate) connect_timeout: Duration,
}

impl EngineConfig {
    /// Checks the settings every client and Redlock share.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.fence_retention < MAX_LEASE {
            return Err(Error::invalid(format!(
                "fence retention {:?} is shorter than the longest lease (24h): a fence counter \
                 must outlive every lease, e.g. 7 days",
                self.fence_retention
            )));
        }
        if self.restart_grace.is_some_and(|g| g > MAX_LEASE) {
            return Err(Error::invalid(
                "restart grace is longer than 24h: set it to the longest lease in use",
            ));
        }
        Ok(())
    }
}

/// One client's engine: what it leases from, its leases, and its settings.
/// Every primitive of a client works through one `Engine`.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) backing: Backing,
    pub(crate) config: EngineConfig,
    /// Names this client's notification channels: a release publishes to
    /// the one waiter it wakes, on its client's channel alone.
    pub(crate) id: String,
    pub(crate) leases: LeaseState,
    /// The fence retention in ms, as the scripts take it: written once,
    /// not for every request.
    retention_ms: String,
}

impl Engine {
    pub(crate) fn new(backing: Backing, config: EngineConfig) -> Result<Arc<Engine>> {
        Ok(Arc::new(Engine {
            backing,
            retention_ms: millis(config.fence_retention).to_string(),
            config,
            id: new_token()?,
            leases: LeaseState::default(),
        }))
    }

    pub(crate) fn command_timeout(&self) -> Duration {
        self.backing.command_timeout()
    }

    /// The one deployment this engine leases from, for what a quorum does
    /// not offer.
    pub(crate) fn one(&self) -> Result<&Arc<Store>> {
        self.backing.one()
    }

    /// The fence retention in ms, as a script argument.
    pub(crate) fn retention_ms(&self) -> &[u8] {
        self.retention_ms.as_bytes()
    }

    /// Waits until the releases this client runs in the background are
    /// done, at most four command timeouts.
    pub(crate) async fn flush(&self) {
        let limit = self.command_timeout().saturating_mul(4);
        let _ = tokio::time::timeout(limit, self.leases.background.idle()).await;
    }
}
