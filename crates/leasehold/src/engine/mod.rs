//! The lease engine under every primitive: taking, holding, renewing and
//! releasing leases, waiting in the queue, and the admin operations, over
//! one [`Store`]. It knows nothing of the public faces built on it, nor of
//! the topology behind the store.

pub(crate) mod admin;
pub(crate) mod held;
pub(crate) mod lease;
pub(crate) mod loss;
pub(crate) mod metrics;
pub(crate) mod ops;
pub(crate) mod queue;
pub(crate) mod quorum;
pub(crate) mod redlock;
pub(crate) mod release;
pub(crate) mod state;
pub(crate) mod wait;
pub(crate) mod watch;
pub(crate) mod watchdog;

use std::sync::Arc;
use std::time::Duration;

use crate::conn::replicas::ReplicaAck;
use crate::deploy::store::Store;
use crate::deploy::Deployment;
use crate::error::{Error, Result};
use crate::keys::{millis, LockKeys};
use crate::random::new_token;

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
    /// This engine is one master of a Redlock: a release that does not
    /// find its token marks the fence counter with it, so that the
    /// token's round one, if it arrives after all, takes nothing (see
    /// `release.lua` and `redlock_acquire.lua`).
    pub(crate) redlock_master: bool,
}

/// One client's engine: its store, its leases, and its settings.
/// Every primitive of a client works through one `Engine`.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) store: Store,
    pub(crate) config: EngineConfig,
    /// Names this client's notification channels: a release publishes to
    /// the one waiter it wakes, on its client's channel alone.
    pub(crate) id: String,
    pub(crate) leases: state::LeaseState,
    /// The fence retention in ms, as the scripts take it: written once,
    /// not for every request.
    retention_ms: String,
}

impl Engine {
    pub(crate) fn new(
        deployment: Arc<dyn Deployment>,
        config: EngineConfig,
    ) -> Result<Arc<Engine>> {
        Ok(Arc::new(Engine {
            store: Store::new(deployment, config.restart_grace),
            retention_ms: millis(config.fence_retention).to_string(),
            config,
            id: new_token()?,
            leases: state::LeaseState::default(),
        }))
    }

    pub(crate) fn command_timeout(&self) -> Duration {
        self.store.command_timeout()
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

/// Which primitive a request is for, and so how the lock is taken and
/// handed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A free lock goes to whoever asks; a release wakes one waiter.
    Mutex,
    /// A release hands the lock to the first live waiter (FIFO).
    Fair,
    /// One owner, who may take it again; non-fair, as `Mutex`.
    Reentrant,
    /// A shared (read) or exclusive (write) share of a read-write lock;
    /// reentrant per owner, writers served in arrival order with readers.
    Read,
    Write,
    /// Permits of a semaphore of `total`, served in arrival order.
    Semaphore {
        total: u32,
    },
}

impl Kind {
    /// The error for lock `name` asked for as this kind while Redis keeps
    /// it as `found` (the kind a script read, as `stored_phrase` takes it).
    pub(crate) fn conflict(self, name: &str, found: &str) -> Error {
        Error::wrong_kind(name, &self.phrase(), &stored_phrase(found))
    }

    /// The name Redis keeps for this kind, as errors and `inspect` show it.
    pub(crate) fn stored_name(self) -> &'static str {
        match self {
            Kind::Mutex | Kind::Fair => "mutex",
            Kind::Reentrant => "reentrant",
            Kind::Read | Kind::Write => "rwlock",
            Kind::Semaphore { .. } => "semaphore",
        }
    }

    /// How messages name this kind: "a semaphore of 4 permits".
    pub(crate) fn phrase(self) -> String {
        match self {
            Kind::Semaphore { total } => format!("a semaphore of {total} permits"),
            _ => stored_phrase(self.stored_name()),
        }
    }

    /// Kept in a hash with one entry per lease (see `scripts/lib.lua`).
    pub(crate) fn is_hash(self) -> bool {
        !matches!(self, Kind::Mutex | Kind::Fair)
    }
}

/// How messages name the kind Redis keeps as `stored`: one of
/// [`Kind::stored_name`], or the type of a key leasehold did not write.
pub(crate) fn stored_phrase(stored: &str) -> String {
    match stored {
        "mutex" => "a mutex".to_owned(),
        "reentrant" => "a reentrant mutex".to_owned(),
        "rwlock" => "a read-write lock".to_owned(),
        "semaphore" => "a semaphore".to_owned(),
        "hash" => "a hash leasehold did not write".to_owned(),
        other => format!("a Redis {other}"),
    }
}

/// What an acquisition asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) kind: Kind,
    pub(crate) lease: Duration,
    /// The watchdog renews the lease while it is held.
    pub(crate) renew: bool,
    /// A release before this much time since the acquisition keeps the
    /// lock until then.
    pub(crate) hold_at_least: Option<Duration>,
    /// Nothing renews the lease past this much time since the acquisition.
    pub(crate) max_hold: Option<Duration>,
    /// Who may take the lock again while holding it (reentrant kinds).
    pub(crate) owner: &'a str,
    /// Who holds the lease in this process once granted: the owner, or for
    /// the kinds without owners the task (or thread) acquiring through the
    /// handle. Never sent to Redis.
    pub(crate) holder: &'a str,
    /// Semaphore permits asked for (1 for the other kinds).
    pub(crate) permits: u32,
    /// Replicas that must acknowledge the grant, else it is undone.
    pub(crate) replica_ack: ReplicaAck,
}

/// Reads a PTTL reply: negative values mean no expiry or no key.
pub(crate) fn pttl(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}
