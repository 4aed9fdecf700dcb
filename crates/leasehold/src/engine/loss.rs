//! Why a lease was lost, as the guard reports it and the metrics count it.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

/// Why a lease was lost: what [`LeaseGuard::loss_reason`](crate::LeaseGuard::loss_reason)
/// reports once [`lost`](crate::LeaseGuard::lost) has resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// Redis no longer had the token: the lock expired, was removed, or was taken.
    TokenGone,
    /// The local deadline passed without a successful renewal.
    DeadlinePassed,
    /// The lease reached its max hold: nothing renews it past that.
    MaxHoldReached,
    /// A lock over several masters (a [`Redlock`](crate::Redlock)): a
    /// renewal round reached fewer than a majority of them in time.
    QuorumLost,
    /// Redis no longer had the token, and the server that said so is
    /// another than the one that granted the lease: a failover promoted a
    /// replica that had not got it (or lost it), or the server restarted
    /// without it.
    MasterChanged,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::TokenGone => {
                "redis no longer holds its token (it expired, or was removed by force-release \
                 or by hand)"
            }
            LossReason::DeadlinePassed => {
                "it was not renewed before it ran out (redis unreachable or too slow, or a fixed \
                 lease not extended in time)"
            }
            LossReason::MaxHoldReached => "it reached its max hold, past which it is not renewed",
            LossReason::QuorumLost => {
                "a renewal reached fewer than a majority of the masters in time (too many out of \
                 reach, slow, or no longer holding its token)"
            }
            LossReason::MasterChanged => {
                "the master changed (a failover, or a restart) and the new one does not have its \
                 token: the grant or a renewal had not reached the replica that took over, or \
                 the server restarted without it"
            }
        })
    }
}

impl LossReason {
    /// As `Display`, told of the lease: whether the watchdog renewed it,
    /// and its max hold.
    pub(crate) fn describe(self, renewed: bool, max_hold: Option<Duration>) -> Cow<'static, str> {
        match self {
            LossReason::TokenGone | LossReason::QuorumLost | LossReason::MasterChanged => {
                self.to_string().into()
            }
            LossReason::DeadlinePassed if !renewed => {
                "its fixed lease ran out (the watchdog is off: extend the lease in time)".into()
            }
            LossReason::DeadlinePassed => {
                "it could not be renewed before it ran out (redis unreachable or too slow)".into()
            }
            LossReason::MaxHoldReached => format!(
                "it reached its max hold of {:?}, past which it is not renewed (raise the max \
                 hold if the work needs longer)",
                max_hold.unwrap_or_default()
            )
            .into(),
        }
    }
}
