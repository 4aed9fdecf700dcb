//! One task per client renews every held lease at a third of its length.
//!
//! All leases due around the same time go out together: one pipeline of
//! multi-key renew scripts per round, so the cost grows with round trips,
//! not with the number of held locks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use redis::Value;
use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::ClientInner;
use crate::engine::lease::{Lease, LossReason};
use crate::engine::scripts::{self, RENEW};
use crate::keys::millis;

/// Leases per renew script: one script blocks Redis while it runs, so big
/// batches are cut into pieces that share one pipeline.
const LEASES_PER_SCRIPT: usize = 256;

/// How soon to look again at a lease whose extend is in flight.
const BUSY_RECHECK: Duration = Duration::from_millis(10);

#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    leases: Mutex<HashMap<u64, Arc<Lease>>>,
    wake: Notify,
    /// The renewal task; started again if the runtime it ran on is gone.
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Watchdog {
    pub(crate) fn register(self: &Arc<Self>, client: &Arc<ClientInner>, lease: Arc<Lease>) {
        self.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(lease.id, lease);
        {
            let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
            if task.as_ref().is_none_or(JoinHandle::is_finished) {
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    *task = Some(handle.spawn(run(Arc::downgrade(client), Arc::clone(self))));
                }
            }
        }
        self.wake();
    }

    /// Makes the task look at every lease again now.
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    pub(crate) fn unregister(&self, id: u64) {
        self.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        // Let the task see at once whether anything is left to renew.
        self.wake();
    }

    /// The leases to renew now, each with its renewal turn taken, and when
    /// to look again.
    fn due(&self) -> (Vec<Due>, Option<Instant>) {
        let now = Instant::now();
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        let mut soonest = |at: Instant| next = Some(next.map_or(at, |n: Instant| n.min(at)));
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        leases.retain(|_, lease| {
            if lease.is_finished() || lease.loss().is_some() {
                return false;
            }
            let (at, ahead) = lease.renewal_window();
            if at > now + ahead {
                soonest(at);
            } else if let Ok(turn) = Arc::clone(&lease.renewing).try_lock_owned() {
                due.push((Arc::clone(lease), lease.lease(), turn));
            } else {
                // An extend is in flight and sets the deadline itself; two
                // renewals in flight could land out of order.
                soonest(now + BUSY_RECHECK);
            }
            true
        });
        (due, next)
    }
}

/// A lease due for renewal, the length to renew it to, and the turn that
/// keeps an extend out meanwhile.
type Due = (Arc<Lease>, Duration, OwnedMutexGuard<()>);

async fn run(client: Weak<ClientInner>, watchdog: Arc<Watchdog>) {
    loop {
        let (due, next) = watchdog.due();
        // The task holds the client only while it renews, so that dropping
        // the last handle to the client ends the task.
        let Some(inner) = client.upgrade() else {
            return;
        };
        if !due.is_empty() {
            renew(&inner, due).await;
            continue;
        }
        drop(inner);
        let until = next.unwrap_or_else(|| Instant::now() + Duration::from_secs(1));
        tokio::select! {
            () = watchdog.wake.notified() => {}
            () = tokio::time::sleep_until(until) => {}
        }
    }
}

async fn renew(inner: &ClientInner, leases: Vec<Due>) {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for chunk in leases.chunks(LEASES_PER_SCRIPT) {
        let keys: Vec<&str> = chunk.iter().map(|(l, _, _)| l.keys.lock.as_str()).collect();
        let lease_ms: Vec<String> = chunk
            .iter()
            .map(|(_, d, _)| millis(*d).to_string())
            .collect();
        let mut args: Vec<&[u8]> = Vec::with_capacity(chunk.len() * 2);
        for ((lease, _, _), ms) in chunk.iter().zip(&lease_ms) {
            args.push(lease.token.as_bytes());
            args.push(ms.as_bytes());
        }
        pipe.add_command(scripts::evalsha(&RENEW, &keys, &args));
    }
    let sent_at = Instant::now();
    let Some(replies) = send_renewals(inner, &pipe).await else {
        for (lease, _, _) in &leases {
            lease.retry_renewal_later();
        }
        return;
    };
    for (i, chunk) in leases.chunks(LEASES_PER_SCRIPT).enumerate() {
        // A reply of the wrong shape or a missing one leaves its leases to a
        // later retry rather than due again at once.
        let outcomes = match replies.get(i) {
            Some(Value::Array(items)) if items.len() == chunk.len() => items,
            _ => {
                for (lease, _, _) in chunk {
                    lease.retry_renewal_later();
                }
                continue;
            }
        };
        for ((lease, length, _), outcome) in chunk.iter().zip(outcomes) {
            match scripts::renewal(outcome) {
                scripts::Renewal::Renewed => lease.renewed(sent_at, *length),
                scripts::Renewal::NotHeld => lease.mark_lost(LossReason::TokenGone),
                scripts::Renewal::Refused(_) => lease.retry_renewal_later(),
            }
        }
    }
}

/// Sends the renewal pipeline; loads the script and sends again if the
/// server lost it. `None` when Redis did not answer usefully.
async fn send_renewals(inner: &ClientInner, pipe: &redis::Pipeline) -> Option<Vec<Value>> {
    for _ in 0..2 {
        let replies: Vec<Value> = inner
            .run("lease renewal", |mut conn| async move {
                pipe.query_async(&mut conn).await
            })
            .await
            .ok()?;
        if !replies.iter().any(scripts::is_noscript) {
            return Some(replies);
        }
        inner
            .run("loading the renew script", |mut conn| async move {
                RENEW.prepare_invoke().load_async(&mut conn).await
            })
            .await
            .ok()?;
    }
    None
}
