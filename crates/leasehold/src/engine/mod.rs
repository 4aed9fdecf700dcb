//! The lease engine under every primitive: taking, holding, renewing and
//! releasing leases, waiting in the queue, and the admin operations, over one
//! [`Backing`](crate::deploy::backing::Backing): a deployment's store, or a
//! quorum of masters. It knows nothing of the public faces built on it, nor of
//! the topology behind its store.

pub(crate) mod admin;
pub(crate) mod calls;
pub(crate) mod held;
pub(crate) mod holds;
pub(crate) mod lease;
pub(crate) mod libraries;
pub(crate) mod loss;
pub(crate) mod masters;
pub(crate) mod metrics;
pub(crate) mod ops;
pub(crate) mod queue;
pub(crate) mod redlock;
pub(crate) mod release;
pub(crate) mod schedule;
pub(crate) mod state;
pub(crate) mod wait;
pub(crate) mod watch;
pub(crate) mod watchdog;

use std::time::Duration;

use crate::conn::replicas::ReplicaAck;
use crate::error::Error;
use crate::keys::LockKeys;

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
    /// As `Reentrant`, but a new hold goes to the first live waiter (FIFO
    /// across owners); a reentry never waits.
    FairReentrant,
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
            Kind::Reentrant | Kind::FairReentrant => "reentrant",
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

    /// A reentrant mutex, fair or not.
    pub(crate) fn is_reentrant(self) -> bool {
        matches!(self, Kind::Reentrant | Kind::FairReentrant)
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
    /// This client's notification channel for the lock.
    pub(crate) channel: &'a str,
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
