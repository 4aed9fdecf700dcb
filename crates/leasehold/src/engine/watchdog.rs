//! One task per engine renews every held lease at a third of its length,
//! as the queue of [`Renewals`] says when. All leases due
//! around the same time go out together: on one deployment, one pipeline
//! of multi-key renew scripts per server and round (as many scripts as the
//! store says one server takes them in); on a quorum, each lease on every
//! master at once.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::Value;
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use crate::conn::scripts;
use crate::deploy::backing::Backing;
use crate::deploy::quorum::Quorum;
use crate::deploy::store::Store;
use crate::engine::lease::Lease;
use crate::engine::loss::LossReason;
use crate::engine::masters::renew_all;
use crate::engine::ops::{renew_one, Renewed};
use crate::engine::schedule::{Due, Renewals};
use crate::engine::state::Engine;
use crate::error::verdict::{verdict_of_reply, NotReady, Verdict};
use crate::keys::millis;

/// Leases per renew script: one script blocks Redis while it runs, so big
/// batches are cut into pieces that share one pipeline.
const LEASES_PER_SCRIPT: usize = 256;

/// A due lease with the length it is renewed to.
type Renewal = (Arc<Lease>, Duration, OwnedMutexGuard<()>);

/// Renews `lease` while it is held (see [`Renewals`]), starting the
/// engine's watchdog task if it is not running.
pub(crate) fn register(engine: &Arc<Engine>, lease: Arc<Lease>) {
    let renewals = &engine.leases.renewals;
    renewals.register(lease, |runtime| {
        runtime.spawn(run(Arc::downgrade(engine), Arc::clone(renewals)))
    });
}

async fn run(engine: Weak<Engine>, watchdog: Arc<Renewals>) {
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

/// Renews `leases`: on one deployment, one round per server that serves
/// them; on a quorum, each lease on every master; all in parallel.
async fn renew(engine: &Arc<Engine>, leases: Vec<Due>) {
    match &engine.backing {
        Backing::One(store) => {
            let mut servers: BTreeMap<usize, Vec<Due>> = BTreeMap::new();
            for due in leases {
                let server = store.server_of(&due.0.keys.lock);
                servers.entry(server).or_default().push(due);
            }
            let rounds = servers
                .into_values()
                .map(|leases| renew_on_server(engine, store, leases));
            futures_util::future::join_all(rounds).await;
        }
        Backing::Quorum(quorum) => {
            let rounds = leases.into_iter().map(|(lease, turn)| async move {
                let _turn = turn;
                renew_on_quorum(engine, quorum, &lease).await;
            });
            futures_util::future::join_all(rounds).await;
        }
    }
}

/// The length to renew `lease` to from `sent_at`; `None` at its max hold,
/// when it is left to run out, and reported lost then.
fn length_now(engine: &Engine, lease: &Arc<Lease>, sent_at: Instant) -> Option<Duration> {
    let length = lease.renewal_length(sent_at);
    if length.is_none() {
        engine.leases.renewals.unregister(lease.id);
        tokio::spawn(Arc::clone(lease).report_loss_at_deadline());
    }
    length
}

/// Renews `leases`, all served by one server: one pipeline, a script per
/// group of leases one script may take there.
async fn renew_on_server(engine: &Engine, store: &Store, leases: Vec<Due>) {
    let Some(first) = leases.first() else {
        return;
    };
    let route = match store.route_key(&first.0.keys.lock).await {
        Ok(route) => route,
        Err(_) => {
            retry_later(engine, leases.iter().map(|(lease, _)| lease));
            return;
        }
    };
    // Lengths are cut at the max hold from the moment the round is sent,
    // not from when it came due: a reconnect in between would otherwise
    // carry the lease past its cap.
    let sent_at = Instant::now();
    let renewals: Vec<Renewal> = leases
        .into_iter()
        .filter_map(|(lease, turn)| Some((length_now(engine, &lease, sent_at)?, lease, turn)))
        .map(|(length, lease, turn)| (lease, length, turn))
        .collect();
    let groups = store.one_script_groups(&route, renewals, |(lease, _, _)| &lease.keys.lock);
    let batches: Vec<&[Renewal]> = groups
        .iter()
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
    let Some(replies) = route
        .script_pipeline("lease renewal", &pipe, |s| &s.renew)
        .await
    else {
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
            Some(Value::ServerError(e))
                if match verdict_of_reply(e) {
                    Verdict::Follow(_) => true,
                    Verdict::WaitOut(NotReady::SlotMoving) => batch.len() > 1,
                    _ => false,
                } =>
            {
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
            engine.leases.renewals.enqueue(lease);
        }
    }
    for some in redirected.chunks(RENEWED_ALONE_AT_ONCE) {
        let alone = some
            .iter()
            .map(|(lease, _, _)| renew_alone(engine, store, lease));
        futures_util::future::join_all(alone).await;
    }
}

/// Renews `lease` on every master of `quorum` in parallel; its turn is
/// held by the caller. A round that reaches fewer than a majority in time
/// loses the lease.
async fn renew_on_quorum(engine: &Arc<Engine>, quorum: &Quorum, lease: &Arc<Lease>) {
    let sent_at = Instant::now();
    let Some(length) = length_now(engine, lease, sent_at) else {
        return;
    };
    let until = lease.deadline().min(sent_at + quorum.command_timeout());
    let keys = Arc::new(lease.keys.clone());
    let token = Arc::from(lease.token.as_str());
    let (tally, _) = renew_all(engine, quorum, &keys, &token, length, until).await;
    if lease.is_finished() {
        // Its outcome is the release's.
    } else if tally.won() {
        crate::engine::metrics::renewed();
        lease.renewed(sent_at, length);
    } else if tally.surely_lost() {
        lease.mark_lost(LossReason::TokenGone);
    } else {
        lease.mark_lost(LossReason::QuorumLost);
    }
    engine.leases.renewals.enqueue(lease);
}

/// Leases renewed alone at once, after a redirect: enough that a slot
/// with many leases is done within a few round trips, few enough not to
/// flood a cluster that is moving slots.
const RENEWED_ALONE_AT_ONCE: usize = 32;

/// Renews one lease on its own, following redirects; its turn is held by
/// the caller.
async fn renew_alone(engine: &Engine, store: &Store, lease: &Arc<Lease>) {
    if lease.is_finished() {
        return;
    }
    let sent_at = Instant::now();
    let Some(length) = lease.renewal_length(sent_at) else {
        engine.leases.renewals.enqueue(lease);
        return;
    };
    // No WAIT here: it would hold back the client's connection every round.
    match renew_one(store, &lease.keys, &lease.renewal_token(), length).await {
        Ok(Renewed::Yes) if !lease.is_finished() => {
            crate::engine::metrics::renewed();
            lease.renewed(sent_at, length);
        }
        Ok(Renewed::Yes) => {}
        Ok(Renewed::NotHeld { server }) => lease.mark_gone(server),
        Err(_) => lease.retry_renewal_later(),
    }
    engine.leases.renewals.enqueue(lease);
}

fn retry_later<'a>(engine: &Engine, leases: impl Iterator<Item = &'a Arc<Lease>>) {
    for lease in leases {
        lease.retry_renewal_later();
        engine.leases.renewals.enqueue(lease);
    }
}
