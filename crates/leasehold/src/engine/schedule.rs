//! The held leases that the watchdog renews, in a queue ordered by
//! renewal time: an acquire or release costs the same with twenty thousand
//! leases held as with none, and the watchdog's task is woken only when
//! the next renewal time moves earlier.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::engine::lease::Lease;

/// How soon to look again at a lease whose extend or release is in flight.
const BUSY_RECHECK: Duration = Duration::from_millis(10);

#[derive(Debug, Default)]
struct State {
    leases: HashMap<u64, Arc<Lease>>,
    /// Renewal time and lease id; an entry whose time is no longer the
    /// lease's scheduled one is stale and skipped.
    queue: BinaryHeap<Reverse<(Instant, u64)>>,
}

/// The held leases that the watchdog renews, in a queue ordered by
/// renewal time, and the watchdog's task.
#[derive(Debug, Default)]
pub(crate) struct Renewals {
    state: Mutex<State>,
    pub(crate) wake: Notify,
    /// The renewal task; started again if the runtime it ran on is gone.
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Renewals {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Renews `lease` from now on; `start` starts the task that renews,
    /// when there is none (or the runtime it ran on is gone).
    pub(crate) fn register(
        &self,
        lease: Arc<Lease>,
        start: impl FnOnce(&tokio::runtime::Handle) -> JoinHandle<()>,
    ) {
        {
            let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
            if task.as_ref().is_none_or(JoinHandle::is_finished) {
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    *task = Some(start(&handle));
                }
            }
        }
        self.state().leases.insert(lease.id, Arc::clone(&lease));
        self.schedule(&lease);
    }

    /// Queues `lease` at its next renewal time; wakes the task only if that
    /// is now the earliest.
    pub(crate) fn schedule(&self, lease: &Lease) {
        if self.enqueue(lease) {
            self.wake.notify_one();
        }
    }

    /// Queues `lease` without waking the task (the task itself calls this);
    /// true when it is now the earliest.
    pub(crate) fn enqueue(&self, lease: &Lease) -> bool {
        let at = lease.schedule();
        let mut state = self.state();
        if !state.leases.contains_key(&lease.id) {
            return false;
        }
        let earliest = state
            .queue
            .peek()
            .is_none_or(|Reverse((next, _))| at < *next);
        state.queue.push(Reverse((at, lease.id)));
        earliest
    }

    /// Forgets a lease; its queue entry is dropped when it comes up.
    pub(crate) fn unregister(&self, id: u64) {
        self.state().leases.remove(&id);
    }

    /// The leases to renew now, each with its renewal turn taken, and when
    /// the next one comes due.
    pub(crate) fn due(&self) -> (Vec<Due>, Option<Instant>) {
        let now = Instant::now();
        let mut due = Vec::new();
        let mut busy = Vec::new();
        let mut state = self.state();
        while let Some(&Reverse((at, id))) = state.queue.peek() {
            let lease = match state.leases.get(&id) {
                Some(lease) if lease.is_scheduled_at(at) => Arc::clone(lease),
                _ => {
                    state.queue.pop();
                    continue;
                }
            };
            if lease.is_finished() || lease.loss().is_some() {
                state.queue.pop();
                state.leases.remove(&id);
                continue;
            }
            // Leases due a little later go along, so that leases taken at
            // different moments settle into shared rounds.
            if at > now + lease.renewal_ahead() {
                break;
            }
            state.queue.pop();
            match Arc::clone(&lease.renewing).try_lock_owned() {
                Ok(turn) => due.push((lease, turn)),
                // An extend or release is in flight and sets the outcome
                // itself; two requests in flight could land out of order.
                Err(_) => busy.push(lease),
            }
        }
        drop(state);
        for lease in busy {
            lease.retry_renewal_at(now + BUSY_RECHECK);
            // No wake: the task looks at the queue again when it has done.
            self.enqueue(&lease);
        }
        let next = self.state().queue.peek().map(|Reverse((at, _))| *at);
        (due, next)
    }
}

/// A lease due for renewal, and the turn that keeps an extend or release
/// out meanwhile.
pub(crate) type Due = (Arc<Lease>, OwnedMutexGuard<()>);
