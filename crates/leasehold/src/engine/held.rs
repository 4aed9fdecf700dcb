//! A held lease together with its node: what every primitive's guard
//! wraps. Extending, releasing, detaching and dropping live here once.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::lease::{Lease, LossReason};
use crate::engine::node::Node;
use crate::engine::release::{release, release_in_background, PendingRelease};
use crate::engine::{renew_one, Request};
use crate::error::{Error, Result};
use crate::keys::validate_lease;

/// A release that fails to reach Redis is tried again for this many command
/// timeouts, and never past the lease.
const RELEASE_TRIES_FOR: u32 = 3;

pub(crate) struct Held {
    node: Arc<Node>,
    lease: Arc<Lease>,
    pub(crate) holding: crate::observe::Holding,
}

impl Held {
    /// A lease just taken: Redis set it to `ttl` by a request sent at
    /// `sent_at`. Handed to the watchdog when the request asks for renewal.
    pub(crate) fn take(
        node: &Arc<Node>,
        request: &Request<'_>,
        token: String,
        fence: u64,
        sent_at: Instant,
        ttl: Duration,
    ) -> Self {
        let lease = Arc::new(Lease::new(request, token, fence, sent_at, ttl));
        if request.renew {
            node.watchdog.register(node, Arc::clone(&lease));
        }
        Held {
            node: Arc::clone(node),
            lease,
            holding: crate::observe::Holding::new(request.kind),
        }
    }

    pub(crate) fn lease(&self) -> &Lease {
        &self.lease
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lease.loss().is_some()
    }

    pub(crate) async fn lost(&self) {
        self.lease.lost().await;
    }

    pub(crate) fn valid_for(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.lease
            .deadline()
            .saturating_duration_since(Instant::now())
    }

    pub(crate) async fn extend(&self, length: Duration) -> Result<()> {
        validate_lease(length)?;
        if let Some(reason) = self.lease.loss() {
            return Err(self.lost_error(reason));
        }
        // One request at a time per lease; see `Lease::renewing`.
        let _turn = self.lease.renewing.lock().await;
        let sent_at = Instant::now();
        let lease = &self.lease;
        // Never past the max hold.
        let Some(length) = lease.cut_at_cap(length, sent_at) else {
            lease.mark_lost(LossReason::MaxHoldReached);
            return Err(self.lost_error(LossReason::MaxHoldReached));
        };
        lease.extending(sent_at, length);
        if lease.renew {
            // The next renewal may have moved earlier.
            self.node.watchdog.schedule(lease);
        }
        if renew_one(&self.node, &lease.keys, &lease.token, length).await? {
            lease.renewed(sent_at, length);
        } else {
            lease.mark_lost(LossReason::TokenGone);
        }
        if lease.renew {
            self.node.watchdog.schedule(lease);
        }
        match lease.loss() {
            Some(reason) => Err(self.lost_error(reason)),
            None => Ok(()),
        }
    }

    /// Releases the lock and reports how the lease ended: held to the end,
    /// lost, or unknown (no answer).
    pub(crate) async fn release(self) -> Result<()> {
        // From here the drop does nothing and the watchdog lets go: this
        // call owns the release.
        self.finish();
        let (node, lease) = (&self.node, &self.lease);
        // Dropped before an answer, the release goes on in the background.
        let pending =
            PendingRelease::arm(node, &lease.keys, &lease.token).keep_until(lease.hold_until);
        // A renewal in flight is seen through first, so that its answer is
        // never applied after the release's.
        let _turn = Arc::clone(&lease.renewing).lock_owned().await;
        let timeout = node.config.command_timeout;
        let give_up = (Instant::now() + timeout * RELEASE_TRIES_FOR).min(lease.deadline().max(
            // At least one try, whatever is left of the lease.
            Instant::now() + timeout,
        ));
        let mut pause = Duration::from_millis(25);
        let released = loop {
            match release(node, &lease.keys, &lease.token, false, lease.hold_until).await {
                Ok(released) => break released,
                Err(error) if error.is_transient() && Instant::now() + pause < give_up => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                // `pending` goes on trying in the background; the expiry is
                // the safety net after that. A lease known to be lost says so.
                Err(error) => {
                    return Err(match lease.loss() {
                        Some(reason) => self.lost_error(reason),
                        None => Error::release_unknown(&lease.keys.name, lease.fence, &error),
                    })
                }
            }
        };
        pending.disarm();
        if !released {
            lease.mark_lost(LossReason::TokenGone);
        }
        match lease.loss() {
            Some(reason) => Err(self.lost_error(reason)),
            None => Ok(()),
        }
    }

    /// Stops renewing and forgets the lease without releasing it.
    pub(crate) fn detach(self) {
        self.finish();
    }

    /// Stops renewal; true the first time only.
    fn finish(&self) -> bool {
        let first = self.lease.finish();
        if first {
            self.node.watchdog.unregister(self.lease.id);
        }
        first
    }

    fn lost_error(&self, reason: LossReason) -> Error {
        let lease = &self.lease;
        Error::not_held(format!(
            "lease on lock {:?} (fence {}) was lost: {}",
            lease.keys.name,
            lease.fence,
            reason.describe(lease.renew, lease.max_hold())
        ))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.finish() {
            release_in_background(
                Arc::clone(&self.node),
                self.lease.keys.clone(),
                self.lease.token.clone(),
                false,
                self.lease.hold_until,
            );
        }
    }
}
