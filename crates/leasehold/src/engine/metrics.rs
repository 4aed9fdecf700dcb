//! The metrics the engine reports about leases, through the [`metrics`]
//! facade: the names and labels (public through `observe`), and the hooks
//! the engine calls when a lease is taken, renewed, lost or let go.

use std::time::{Duration, Instant};

use crate::engine::loss::LossReason;
use crate::engine::Kind;

/// Counter: leases taken, labelled by `primitive`.
pub const ACQUISITIONS: &str = "leasehold_acquisitions_total";
/// Counter: waits for a lock that ran out, labelled by `primitive`.
pub const TIMEOUTS: &str = "leasehold_acquire_timeouts_total";
/// Counter: leases lost while held, labelled by `reason`.
pub const LOSSES: &str = "leasehold_leases_lost_total";
/// Counter: renewals by the watchdog that Redis confirmed.
pub const RENEWALS: &str = "leasehold_renewals_total";
/// Counter: renewals by the watchdog that got no usable answer.
pub const RENEWAL_FAILURES: &str = "leasehold_renewal_failures_total";
/// Histogram (seconds): from an acquire call to its lease, by `primitive`.
pub const WAIT_SECONDS: &str = "leasehold_wait_seconds";
/// Histogram (seconds): how long a guard held its lease, by `primitive`.
pub const HOLD_SECONDS: &str = "leasehold_hold_seconds";
/// Gauge: guards alive in this process, by `primitive`.
pub const HELD_LEASES: &str = "leasehold_held_leases";
/// Gauge: tasks waiting in `acquire` or `acquire_timeout`, by `primitive`.
pub const WAITING_TASKS: &str = "leasehold_waiting_tasks";
/// The label that names the kind of lock: `mutex`, `fair_mutex`,
/// `reentrant_mutex`, `fair_reentrant_mutex`, `rw_lock_read`,
/// `rw_lock_write` or `semaphore`.
pub const PRIMITIVE_LABEL: &str = "primitive";
/// The label that names why a lease was lost.
pub const REASON_LABEL: &str = "reason";

pub(crate) fn primitive(kind: Kind) -> &'static str {
    match kind {
        Kind::Mutex => "mutex",
        Kind::Fair => "fair_mutex",
        Kind::Reentrant => "reentrant_mutex",
        Kind::FairReentrant => "fair_reentrant_mutex",
        Kind::Read => "rw_lock_read",
        Kind::Write => "rw_lock_write",
        Kind::Semaphore { .. } => "semaphore",
    }
}

pub(crate) fn reason(reason: LossReason) -> &'static str {
    match reason {
        LossReason::TokenGone => "token_gone",
        LossReason::DeadlinePassed => "deadline_passed",
        LossReason::MaxHoldReached => "max_hold_reached",
        LossReason::QuorumLost => "quorum_lost",
        LossReason::MasterChanged => "master_changed",
    }
}

/// A lease held by a guard, as the metrics see it: counted in
/// [`HELD_LEASES`] from its acquisition until the guard is gone (released,
/// dropped or detached), when its hold time is recorded.
#[derive(Debug)]
pub(crate) struct Holding {
    kind: Kind,
    since: Instant,
}

impl Holding {
    pub(crate) fn new(kind: Kind) -> Self {
        metrics::gauge!(HELD_LEASES, PRIMITIVE_LABEL => primitive(kind)).increment(1.0);
        Holding {
            kind,
            since: Instant::now(),
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    /// How long the lease has been held by this guard.
    fn held_for(&self) -> Duration {
        self.since.elapsed()
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        let primitive = primitive(self.kind);
        metrics::gauge!(HELD_LEASES, PRIMITIVE_LABEL => primitive).decrement(1.0);
        metrics::histogram!(HOLD_SECONDS, PRIMITIVE_LABEL => primitive)
            .record(self.held_for().as_secs_f64());
    }
}

/// A lease was lost while held, for `why`.
pub(crate) fn lease_lost(name: &str, why: LossReason) {
    let reason = reason(why);
    tracing::warn!(target: "leasehold", name, reason, "lease lost");
    metrics::counter!(LOSSES, REASON_LABEL => reason).increment(1);
}

/// The watchdog renewed a lease.
pub(crate) fn renewed() {
    metrics::counter!(RENEWALS).increment(1);
}

/// A renewal by the watchdog got no usable answer.
pub(crate) fn renewal_failed() {
    metrics::counter!(RENEWAL_FAILURES).increment(1);
}
