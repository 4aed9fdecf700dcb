//! Tasks left to run in the background (releases from drops, requests
//! that outlived their round), counted so that a flush can wait for them
//! before the runtime shuts down and cancels them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

#[derive(Debug, Default)]
pub(crate) struct Background {
    pending: AtomicUsize,
    done: Notify,
}

impl Background {
    /// Resolves once no background task is running.
    pub(crate) async fn idle(&self) {
        loop {
            let done = self.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.pending.load(Ordering::Acquire) == 0 {
                return;
            }
            done.await;
        }
    }
}

/// Counts one background task on a [`Background`] for as long as it exists,
/// even if a shutting-down runtime drops it unpolled.
pub(crate) struct Tracked(Arc<Background>);

impl Tracked {
    pub(crate) fn new(background: &Arc<Background>) -> Self {
        background.pending.fetch_add(1, Ordering::AcqRel);
        Tracked(Arc::clone(background))
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.0.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.done.notify_waiters();
        }
    }
}
