//! One task per engine renews every held lease at a third of its length.
//!
//! Leases wait in a queue ordered by renewal time, so an acquire or release
//! costs the same with twenty thousand leases held as with none; the task
//! is woken only when the next renewal time moves earlier. All leases due
//! around the same time go out together: one pipeline of multi-key renew
//! scripts per round, one script per hash slot on a cluster-mode server.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use redis::Value;
use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::deploy::Route;
use crate::engine::lease::Lease;
use crate::engine::ops::{renew_one, Renewed};
use crate::engine::scripts;
use crate::engine::Engine;
use crate::keys::{hash_slot, millis};

/// Leases per renew script: one script blocks Redis while it runs, so big
/// batches are cut into pieces that share one pipeline.
const LEASES_PER_SCRIPT: usize = 256;

/// How soon to look again at a lease whose extend or release is in flight.
const BUSY_RECHECK: Duration = Duration::from_millis(10);

#[derive(Debug, Default)]
struct State {
    leases: HashMap<u64, Arc<Lease>>,
    /// Renewal time and lease id; an entry whose time is no longer the
    /// lease's scheduled one is stale and skipped.
    queue: BinaryHeap<Reverse<(Instant, u64)>>,
}

#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    state: Mutex<State>,
    wake: Notify,
    /// The renewal task; started again if the runtime it ran on is gone.
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Watchdog {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn register(self: &Arc<Self>, engine: &Arc<Engine>, lease: Arc<Lease>) {
        {
            let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
            if task.as_ref().is_none_or(JoinHandle::is_finished) {
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    *task = Some(handle.spawn(run(Arc::downgrade(engine), Arc::clone(self))));
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
    fn enqueue(&self, lease: &Lease) -> bool {
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
    fn due(&self) -> (Vec<Due>, Option<Instant>) {
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
type Due = (Arc<Lease>, OwnedMutexGuard<()>);

/// A due lease with the length it is renewed to.
type Renewal = (Arc<Lease>, Duration, OwnedMutexGuard<()>);

async fn run(engine: Weak<Engine>, watchdog: Arc<Watchdog>) {
    loop {
        let (due, next) = watchdog.due();
        // The task holds the engine only while it renews, so that dropping the
        // last handle to the client ends the task.
        let Some(inner) = engine.upgrade() else {
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

/// Renews `leases`: one round per server that serves them, in parallel.
async fn renew(engine: &Engine, leases: Vec<Due>) {
    let mut servers: BTreeMap<usize, Vec<Due>> = BTreeMap::new();
    for due in leases {
        let server = engine.deployment.server_of(&due.0.keys.lock);
        servers.entry(server).or_default().push(due);
    }
    let rounds = servers
        .into_values()
        .map(|leases| renew_on_server(engine, leases));
    futures_util::future::join_all(rounds).await;
}

/// Renews `leases`, all served by one server: one pipeline.
async fn renew_on_server(engine: &Engine, leases: Vec<Due>) {
    let Some(first) = leases.first() else {
        return;
    };
    let route = match engine.deployment.route(&first.0.keys.lock).await {
        Ok(route) => route,
        Err(_) => {
            retry_later(engine, leases.iter().map(|(lease, _)| lease));
            return;
        }
    };
    let cluster = route.server().cluster;
    // Lengths are cut at the max hold from the moment the round is sent,
    // not from when it came due: a reconnect in between would otherwise
    // carry the lease past its cap.
    let sent_at = Instant::now();
    let mut groups: BTreeMap<u16, Vec<Renewal>> = BTreeMap::new();
    for (lease, turn) in leases {
        let Some(length) = lease.renewal_length(sent_at) else {
            // At its max hold: left to run out, and reported lost then.
            engine.leases.watchdog.unregister(lease.id);
            tokio::spawn(lease.report_loss_at_deadline());
            continue;
        };
        let due = (lease, length, turn);
        // One script may only touch one slot on a cluster-mode server.
        let group = if cluster {
            hash_slot(&due.0.keys.lock)
        } else {
            0
        };
        groups.entry(group).or_default().push(due);
    }
    let batches: Vec<&[Renewal]> = groups
        .values()
        .flat_map(|group| group.chunks(LEASES_PER_SCRIPT))
        .collect();
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for batch in &batches {
        let keys: Vec<&str> = batch.iter().map(|(l, _, _)| l.keys.lock.as_str()).collect();
        let lease_ms: Vec<String> = batch
            .iter()
            .map(|(_, d, _)| millis(*d).to_string())
            .collect();
        let tokens: Vec<_> = batch.iter().map(|(l, _, _)| l.renewal_token()).collect();
        let mut args: Vec<&[u8]> = Vec::with_capacity(batch.len() * 2);
        for (token, ms) in tokens.iter().zip(&lease_ms) {
            args.push(token.as_bytes());
            args.push(ms.as_bytes());
        }
        pipe.add_command(scripts::evalsha(&route.scripts().renew, &keys, &args));
    }
    let Some(replies) = send_renewals(&route, &pipe).await else {
        retry_later(
            engine,
            batches.iter().flat_map(|b| b.iter().map(|(l, _, _)| l)),
        );
        return;
    };
    let mut redirected: Vec<&Renewal> = Vec::new();
    for (i, batch) in batches.iter().enumerate() {
        // A reply of the wrong shape or a missing one leaves its leases to a
        // later retry rather than due again at once.
        let outcomes = match replies.get(i) {
            Some(Value::Array(items)) if items.len() == batch.len() => items,
            Some(Value::ServerError(e)) if is_redirect(e) || batch.len() > 1 && is_try_again(e) => {
                // The slot moved, or is moving (a batch whose keys are now
                // on both sides of a migration is refused whole): renewed
                // one by one below, each following the cluster to where
                // its lock is now.
                redirected.extend(batch.iter());
                continue;
            }
            _ => {
                retry_later(engine, batch.iter().map(|(lease, _, _)| lease));
                continue;
            }
        };
        for ((lease, length, _), outcome) in batch.iter().zip(outcomes) {
            // A lease released meanwhile has its outcome from the release.
            if lease.is_finished() {
                continue;
            }
            match scripts::renewal(outcome) {
                scripts::Renewal::Renewed => {
                    crate::engine::metrics::renewed();
                    lease.renewed(sent_at, *length);
                }
                scripts::Renewal::NotHeld => lease.mark_gone(route.server().identity),
                scripts::Renewal::Refused(_) => lease.retry_renewal_later(),
            }
            engine.leases.watchdog.enqueue(lease);
        }
    }
    for some in redirected.chunks(RENEWED_ALONE_AT_ONCE) {
        let alone = some.iter().map(|(lease, _, _)| renew_alone(engine, lease));
        futures_util::future::join_all(alone).await;
    }
}

/// Leases renewed alone at once, after a redirect: enough that a slot
/// with many leases is done within a few round trips, few enough not to
/// flood a cluster that is moving slots.
const RENEWED_ALONE_AT_ONCE: usize = 32;

/// Whether a server refused a batch because its keys are on both sides of
/// a slot migration (TRYAGAIN).
fn is_try_again(error: &redis::ServerError) -> bool {
    matches!(error.kind(), Some(redis::ServerErrorKind::TryAgain))
}

/// Whether a server sent a renewal elsewhere (MOVED, ASK).
fn is_redirect(error: &redis::ServerError) -> bool {
    matches!(
        error.kind(),
        Some(redis::ServerErrorKind::Moved | redis::ServerErrorKind::Ask)
    )
}

/// Renews one lease on its own, following redirects; its turn is held by
/// the caller.
async fn renew_alone(engine: &Engine, lease: &Arc<Lease>) {
    if lease.is_finished() {
        return;
    }
    let sent_at = Instant::now();
    let Some(length) = lease.renewal_length(sent_at) else {
        engine.leases.watchdog.enqueue(lease);
        return;
    };
    // No WAIT here: it would hold back the client's connection every round.
    match renew_one(engine, &lease.keys, &lease.renewal_token(), length).await {
        Ok(Renewed::Yes) if !lease.is_finished() => {
            crate::engine::metrics::renewed();
            lease.renewed(sent_at, length);
        }
        Ok(Renewed::Yes) => {}
        Ok(Renewed::NotHeld { server }) => lease.mark_gone(server),
        Err(_) => lease.retry_renewal_later(),
    }
    engine.leases.watchdog.enqueue(lease);
}

fn retry_later<'a>(engine: &Engine, leases: impl Iterator<Item = &'a Arc<Lease>>) {
    for lease in leases {
        lease.retry_renewal_later();
        engine.leases.watchdog.enqueue(lease);
    }
}

/// Sends the renewal pipeline; loads the script and sends again if the
/// server lost it. `None` when Redis did not answer usefully.
async fn send_renewals(route: &Route, pipe: &redis::Pipeline) -> Option<Vec<Value>> {
    for _ in 0..2 {
        let replies = route.pipeline("lease renewal", pipe).await.ok()?;
        if !replies.iter().any(scripts::is_noscript) {
            return Some(replies);
        }
        route
            .load("loading the renew script", &route.scripts().renew)
            .await
            .ok()?;
    }
    None
}
