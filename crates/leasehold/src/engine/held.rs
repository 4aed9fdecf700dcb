//! A held lease together with its client: what every primitive's guard
//! wraps. Extending, releasing, detaching and dropping live here once.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::ClientInner;
use crate::engine::lease::{Lease, LossReason};
use crate::engine::{release, release_in_background, renew_one, PendingRelease};
use crate::error::{Error, Result};
use crate::keys::{validate_lease, LockKeys};

pub(crate) struct Held {
    client: Arc<ClientInner>,
    lease: Arc<Lease>,
}

impl Held {
    /// A lease just taken by an acquire sent at `sent_at`; handed to the
    /// watchdog when `renew` is on.
    pub(crate) fn take(
        client: &Arc<ClientInner>,
        keys: LockKeys,
        token: String,
        fence: u64,
        length: Duration,
        renew: bool,
        sent_at: Instant,
    ) -> Self {
        let lease = Arc::new(Lease::new(keys, token, fence, length, renew, sent_at));
        if renew {
            client.watchdog.register(client, Arc::clone(&lease));
        }
        Held {
            client: Arc::clone(client),
            lease,
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
        // One renewal at a time per lease; see `Lease::renewing`.
        let _turn = self.lease.renewing.lock().await;
        let sent_at = Instant::now();
        let lease = &self.lease;
        lease.extending(sent_at, length);
        if lease.renew {
            // The next renewal may have moved earlier.
            self.client.watchdog.wake();
        }
        if renew_one(&self.client, &lease.keys, &lease.token, length).await? {
            lease.renewed(sent_at, length);
        } else {
            lease.mark_lost(LossReason::TokenGone);
        }
        match lease.loss() {
            Some(reason) => Err(self.lost_error(reason)),
            None => Ok(()),
        }
    }

    pub(crate) async fn release(self) -> Result<()> {
        // From here the drop does nothing: this call owns the release.
        self.finish();
        let (client, lease) = (&self.client, &self.lease);
        let pending = PendingRelease::arm(client, &lease.keys, &lease.token);
        let released = release(client, &lease.keys, &lease.token).await?;
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
            self.client.watchdog.unregister(self.lease.id);
        }
        first
    }

    fn lost_error(&self, reason: LossReason) -> Error {
        let lease = &self.lease;
        Error::not_held(format!(
            "lease on lock {:?} (fence {}) was lost: {}",
            lease.keys.name,
            lease.fence,
            reason.describe(lease.renew)
        ))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.finish() {
            release_in_background(
                Arc::clone(&self.client),
                self.lease.keys.clone(),
                self.lease.token.clone(),
            );
        }
    }
}
