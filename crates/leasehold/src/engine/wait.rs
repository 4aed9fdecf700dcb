//! Taking a lock: one attempt, or a wait in the lock's waiter queue.
//!
//! A failed attempt puts the waiter into the queue in Redis in the same
//! script, with a heartbeat deadline on the server's clock: the first
//! waiting task of a client for a `Mutex` or `FairMutex` (the others wait
//! behind it locally), every waiting task for the other kinds. A release
//! wakes the first live waiter alone (`Mutex`), hands it the lock
//! (`FairMutex`), or wakes every waiter at the front that the lock can
//! admit now (readers, permits that fit), each with a message naming its
//! token on its client's own channel for the lock.
//! The waiter refreshes its heartbeat while it waits, and also wakes when
//! the blocking lease can have run out, so a lost message only delays it.
//! Passing faults (no answer, a lost connection, a server not ready) do not
//! end a wait: it backs off and tries again until the wait runs out.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::conn::notify::Subscription;
use crate::conn::replicas::{Acked, ReplicaAck};
use crate::conn::scripts::{self, Scripts};
use crate::deploy::backing::Backing;
use crate::deploy::store::{Answer, Pick, Store};
use crate::engine::held::Held;
use crate::engine::holds::Hold;
use crate::engine::lease::local_deadline;
use crate::engine::redlock;
use crate::engine::release::{release, PendingRelease};
use crate::engine::state::Engine;
use crate::engine::{pttl, Kind, Request};
use crate::error::{Error, Result};
use crate::holder::Holder;
use crate::keys::{millis, LockKeys, MAX_LEASE};
use crate::random::new_token;

/// How long a waiter stays in the queue without a heartbeat: a waiter that
/// died is passed over after this, and a lock handed to it comes back
/// within this (the hand-off lease is no longer).
pub(crate) const WAITER_HEARTBEAT: Duration = Duration::from_secs(3);
/// How often a waiter refreshes its heartbeat (by trying again).
const HEARTBEAT_REFRESH: Duration = Duration::from_secs(1);
/// A `Mutex` waiter that has waited this long asks to be handed the lock at
/// the next release instead of being woken to race for it: without this, a
/// holder that releases and asks again at once wins nearly every race.
const STARVING: Duration = Duration::from_millis(5);
/// Backoff after a passing fault: from the first pause, doubling, capped.
const FIRST_BACKOFF: Duration = Duration::from_millis(25);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What one attempt found.
enum Outcome {
    /// Held by this token, with the lease Redis set (`ttl`) by a request
    /// sent at `sent_at`; for a reentrant level, of the hold `hold`.
    Granted {
        fence: u64,
        ttl: Duration,
        sent_at: Instant,
        hold: Option<Hold>,
        /// The acquisition time in the lock's value, when this attempt
        /// wrote it unmarked (a `Mutex` or `FairMutex` taken free): a
        /// release can then delete it by comparing (see
        /// [`crate::conn::route::Route::compare_and_delete`]).
        acquired: Option<String>,
        /// The identity of the server that granted it.
        server: u64,
    },
    /// Held by someone else (or promised to an earlier waiter); the blocking
    /// lease runs out within `pttl` if known. `fence` is the last fence
    /// handed out when the attempt ran, for a waiter that takes a hand-off
    /// from its message (a `Mutex` or `FairMutex` with the watchdog); 0
    /// for the others, which never do.
    Busy {
        pttl: Option<Duration>,
        sent_at: Instant,
        fence: u64,
        holder: Option<Holder>,
        /// Replicas were asked to acknowledge the attempt: a hand-off to
        /// this waiter is theirs to acknowledge too before it counts.
        acked: bool,
        /// The identity of the server that answered.
        server: u64,
    },
    /// Not asked: the server is younger than the restart grace, which ends
    /// in `left`.
    InGrace { left: Duration },
    /// Granted, but fewer replicas acknowledged it than the request asked
    /// (`replicas`: those the master lists): it is to be undone.
    Unacked { acked: Acked, replicas: Vec<String> },
}

/// One attempt without queueing: the lease if the lock was free. On a
/// quorum, one try on every master.
///
/// Cancel safe: a request that may have taken the lock is undone in the
/// background.
pub(crate) async fn try_acquire(
    engine: &Arc<Engine>,
    request: &Request<'_>,
) -> Result<Option<Held>> {
    let store = match &engine.backing {
        Backing::One(store) => store,
        // Boxed, as in `acquire`.
        Backing::Quorum(quorum) => {
            return Box::pin(redlock::try_acquire(engine, quorum, request)).await
        }
    };
    let token = new_token()?;
    let mut pending = None;
    let tried = attempt(
        engine,
        store,
        request,
        &token,
        Queueing::No,
        false,
        &mut pending,
    );
    match tried.await? {
        Outcome::Granted {
            fence,
            ttl,
            sent_at,
            hold,
            acquired,
            server,
        } => {
            if !usable(sent_at, ttl) {
                // `pending` releases it on the way out.
                return Err(late_grant(store, request));
            }
            if let Some(pending) = pending {
                pending.disarm();
            }
            Ok(Some(Held::take(
                engine, request, token, hold, fence, sent_at, ttl, acquired, server,
            )))
        }
        Outcome::Busy { .. } | Outcome::InGrace { .. } => {
            if let Some(pending) = pending {
                pending.disarm();
            }
            Ok(None)
        }
        Outcome::Unacked { acked, replicas } => {
            leave(engine, store, request.keys, &mut pending, &token).await;
            Err(unacked(request, acked, &replicas))
        }
    }
}

/// The error of a grant too few replicas acknowledged, once undone.
fn unacked(request: &Request<'_>, acked: Acked, replicas: &[String]) -> Error {
    Error::replicas_missing(
        &request.keys.name,
        "taken",
        acked.acked,
        acked.asked,
        matches!(request.replica_ack, ReplicaAck::Connected { .. }),
        replicas,
        request.replica_ack.timeout().unwrap_or_default(),
        "it was released and is not held",
    )
}

/// Waits for the lock, at most `wait` if given. On a quorum, tries again
/// after a pause while the lock is busy (see [`redlock`]).
///
/// Cancel safe: dropping the future leaves nothing held and takes the
/// waiter out of the queue, in the background.
pub(crate) async fn acquire(
    engine: &Arc<Engine>,
    request: &Request<'_>,
    wait: Option<Duration>,
) -> Result<Held> {
    let store = match &engine.backing {
        Backing::One(store) => store,
        // Boxed: one future does not carry the room of both kinds of
        // backing.
        Backing::Quorum(quorum) => {
            return Box::pin(redlock::acquire(engine, quorum, request, wait)).await
        }
    };
    let deadline = wait.map(|wait| Instant::now() + wait);
    let mut seen = Seen::default();
    let waiting = wait_for(engine, store, request, wait, deadline, &mut seen);
    let Some(deadline) = deadline else {
        return waiting.await;
    };
    // A request in flight when the wait runs out gets one command timeout.
    match tokio::time::timeout_at(deadline + engine.command_timeout(), waiting).await {
        Ok(result) => result,
        Err(_) => Err(seen.give_up(request, wait.unwrap_or_default())),
    }
}

/// What a wait met, for the error it ends with.
#[derive(Default)]
struct Seen {
    /// Some attempt got an answer.
    answered: bool,
    /// The last attempt was held back by the restart grace.
    in_grace: bool,
    last_error: Option<Error>,
    /// Who held the lock at the last busy answer.
    holder: Option<Holder>,
    /// The last attempt was granted, but too few replicas acknowledged it.
    unacked: Option<Error>,
    /// Since when every grant was undone for want of acknowledgements.
    unacked_since: Option<Instant>,
}

impl Seen {
    /// The error a wait that ran out ends with: the last fault if Redis
    /// never answered during the whole wait, else a timeout.
    fn give_up(&mut self, request: &Request<'_>, wait: Duration) -> Error {
        if let Some(error) = self.unacked.take() {
            return error;
        }
        match self.last_error.take() {
            Some(error) if !self.answered => error,
            _ if self.in_grace => Error::wait_timed_out_in_grace(&request.keys.name, wait),
            _ => Error::wait_timed_out(&request.keys.name, wait, self.holder.as_ref()),
        }
    }
}

async fn wait_for(
    engine: &Arc<Engine>,
    store: &Arc<Store>,
    request: &Request<'_>,
    wait: Option<Duration>,
    deadline: Option<Instant>,
    seen: &mut Seen,
) -> Result<Held> {
    let keys = request.keys;
    let began = Instant::now();
    let waited = wait.unwrap_or_default();
    // A mutex admits one holder at a time: the tasks of this client take
    // turns here, and only the first of them is in the Redis queue. The
    // hash kinds admit several at once (readers, permits) and know owners
    // (a reentry never waits): each of their tasks holds its own place in
    // the Redis queue, so tasks that wait together are admitted together,
    // and keep their turn against the waiters of other clients.
    let _turn = if request.kind.is_hash() {
        None
    } else {
        let local = engine.leases.queues.queue(&keys.lock);
        Some(match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, local.lock_owned())
                .await
                .map_err(|_| Error::wait_timed_out(&keys.name, waited, None))?,
            None => local.lock_owned().await,
        })
    };
    // A wait of zero is one attempt: it does not queue.
    let queue = deadline.is_none_or(|d| d > Instant::now());
    let channel = request.channel;
    let mut token = new_token()?;
    let mut pending: Option<PendingRelease<'_>> = None;
    // Listening before the first attempt costs nothing when the channel is
    // still subscribed from an earlier wait, and no message can slip by.
    let mut subscription: Option<Subscription> = store
        .known_notifier(&keys.lock)
        .and_then(|notifier| notifier.listen_if_confirmed(channel));
    let mut backoff = FIRST_BACKOFF;
    // When this wait first found the lock busy.
    let mut queued_at: Option<Instant> = None;
    // When the current token's place and heartbeat were last refreshed,
    // and with which mode (hand over or not).
    let mut refreshed: Option<(Instant, bool)> = None;
    loop {
        let asks_hand_over = starving(queued_at);
        let queue_mode = match refreshed {
            // Not listening yet: a busy answer is followed by a subscription
            // and another attempt, which queues.
            _ if !queue || subscription.is_none() => Queueing::No,
            Some((at, mode)) if mode == asks_hand_over && at.elapsed() < HEARTBEAT_REFRESH => {
                Queueing::Fresh
            }
            // Queued before with this token: a hand-off that ran out took
            // it out of the queue, and the script puts it back in front.
            Some(_) => Queueing::Again,
            None => Queueing::Refresh,
        };
        // The attempt that found the lock busy: its send time, and the last
        // fence when it ran. A hand-off with a larger fence happened after
        // it ran, so its lease started after that send time; a message with
        // a smaller one is stale (delayed, or read late) and grants nothing.
        // Whether replicas were asked to acknowledge it: then a hand-off is
        // theirs to acknowledge too.
        let (blocked_for, busy_sent, busy_fence, busy_acked, busy_server) = match attempt(
            engine,
            store,
            request,
            &token,
            queue_mode,
            asks_hand_over,
            &mut pending,
        )
        .await
        {
            Ok(Outcome::Granted {
                fence,
                ttl,
                sent_at,
                hold,
                acquired,
                server,
            }) => {
                seen.answered = true;
                if usable(sent_at, ttl) {
                    if let Some(pending) = pending.take() {
                        pending.disarm();
                    }
                    return Ok(Held::take(
                        engine, request, token, hold, fence, sent_at, ttl, acquired, server,
                    ));
                }
                // The answer came too late to use: let the lease go (in the
                // background, through `pending`) and wait on afresh.
                pending = None;
                token = new_token()?;
                refreshed = None;
                pause(backoff_step(&mut backoff), deadline).await;
                continue;
            }
            Ok(Outcome::Busy {
                pttl,
                sent_at,
                fence,
                holder,
                acked,
                server,
            }) => {
                seen.answered = true;
                seen.holder = holder;
                seen.in_grace = false;
                seen.unacked = None;
                seen.unacked_since = None;
                queued_at.get_or_insert(sent_at);
                if matches!(queue_mode, Queueing::Refresh | Queueing::Again) {
                    refreshed = Some((sent_at, asks_hand_over));
                }
                backoff = FIRST_BACKOFF;
                (pttl, sent_at, fence, acked, server)
            }
            Ok(Outcome::Unacked { acked, replicas }) => {
                // Undone before anything else, so that nothing stays held
                // while the replicas catch up; the wait goes on afresh.
                seen.answered = true;
                leave(engine, store, keys, &mut pending, &token).await;
                seen.unacked = Some(unacked(request, acked, &replicas));
                let since = *seen.unacked_since.get_or_insert_with(Instant::now);
                token = new_token()?;
                refreshed = None;
                // A free lock that cannot be made safe is an outage to
                // report: a wait without a bound gives up as one that never
                // reached Redis does.
                let outage = wait.is_none() && since.elapsed() >= engine.config.connect_timeout;
                if !queue || outage || deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(seen.give_up(request, waited));
                }
                pause(backoff_step(&mut backoff), deadline).await;
                continue;
            }
            Ok(Outcome::InGrace { left }) => {
                seen.answered = true;
                seen.in_grace = true;
                pause(left, deadline).await;
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    leave(engine, store, keys, &mut pending, &token).await;
                    return Err(seen.give_up(request, waited));
                }
                continue;
            }
            Err(error) if error.is_transient() && queue => {
                // A client that never reached Redis at all has a wrong
                // address, or a server that is not there: it gives up once
                // the connect timeout has passed, saying why.
                if !store.has_reached_redis() && began.elapsed() >= engine.config.connect_timeout {
                    leave(engine, store, keys, &mut pending, &token).await;
                    return Err(error.never_reached(engine.config.connect_timeout));
                }
                // Keep the queue turn and try again on a healed connection.
                seen.last_error = Some(error);
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    leave(engine, store, keys, &mut pending, &token).await;
                    return Err(seen.give_up(request, waited));
                }
                pause(backoff_step(&mut backoff), deadline).await;
                continue;
            }
            Err(error) => return Err(error),
        };
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            leave(engine, store, keys, &mut pending, &token).await;
            return Err(seen.give_up(request, waited));
        }
        // The lock's shard may have moved to another server since the
        // subscription was made (a cluster's slot migration or failover).
        let notifier = store.known_notifier(&keys.lock);
        if let (Some(listening), Some(notifier)) = (&subscription, &notifier) {
            if !listening.is_of(notifier) || listening.is_moved() {
                subscription = None;
            }
        }
        let Some(listening) = subscription.as_mut() else {
            // Listen once the fast path failed; the next attempt covers a
            // release that happened before the subscription was confirmed.
            match notifier {
                Some(notifier) => {
                    subscription = Some(notifier.subscribe(channel, deadline).await);
                }
                None => pause(HEARTBEAT_REFRESH, deadline).await,
            }
            continue;
        };
        // One millisecond past the PTTL, so the key has surely expired; and
        // no later than the next heartbeat.
        let nap = blocked_for
            .map_or(HEARTBEAT_REFRESH, |p| {
                p.min(MAX_LEASE) + Duration::from_millis(1)
            })
            .min(HEARTBEAT_REFRESH);
        let mut until = now + nap;
        if let Some(deadline) = deadline {
            until = until.min(deadline);
        }
        match listen(listening, &token, until).await {
            Heard::TryAgain => {}
            // Without the watchdog the hand-off lease is made whole by the
            // next attempt (see the acquire scripts), which then grants it;
            // so it is where replicas acknowledge: the release that handed
            // the lock over did not wait for them.
            Heard::HandedOver { .. } if !request.renew || busy_acked => {}
            Heard::HandedOver { fence } => {
                let ttl = hand_off_lease(request);
                if fence > busy_fence && usable(busy_sent, ttl) {
                    if let Some(pending) = pending.take() {
                        pending.disarm();
                    }
                    return Ok(Held::take(
                        engine,
                        request,
                        token,
                        None,
                        fence,
                        busy_sent,
                        ttl,
                        None,
                        busy_server,
                    ));
                }
                // Stale, or too little left to trust from this message: the
                // attempt that follows tells, with the lock's real PTTL.
            }
        }
    }
}

/// Whether a waiter queued at `queued_at` asks to be handed the lock.
fn starving(queued_at: Option<Instant>) -> bool {
    queued_at.is_some_and(|at| at.elapsed() >= STARVING)
}

/// A waiter that gives up leaves the queue before it returns, so that a
/// release can no longer hand the lock to a waiter that is gone (it would
/// hold the lock and burn a fence until the leave). If Redis does not answer,
/// `pending` leaves in the background.
async fn leave(
    engine: &Engine,
    store: &Store,
    keys: &LockKeys,
    pending: &mut Option<PendingRelease<'_>>,
    token: &str,
) {
    let Some(queued) = pending.take() else {
        return;
    };
    // Boxed: a wait rarely ends here, and the release's future is large.
    if Box::pin(release(engine, store, keys, token, true, None))
        .await
        .is_ok()
    {
        queued.disarm();
    }
}

/// Sleeps `step`, not past `deadline`.
async fn pause(step: Duration, deadline: Option<Instant>) {
    let mut until = Instant::now() + step;
    if let Some(deadline) = deadline {
        until = until.min(deadline);
    }
    tokio::time::sleep_until(until).await;
}

enum Heard {
    TryAgain,
    HandedOver { fence: u64 },
}

/// Sleeps until a message for `token` (or a "look again"), or `until`. A
/// message with a fence says the release made this waiter the holder.
async fn listen(subscription: &mut Subscription, token: &str, until: Instant) -> Heard {
    loop {
        tokio::select! {
            message = subscription.inbox.recv() => {
                let Some(message) = message else {
                    tokio::time::sleep_until(until).await;
                    return Heard::TryAgain;
                };
                if message.is_empty() {
                    return Heard::TryAgain;
                }
                let text = String::from_utf8_lossy(&message);
                let mut words = text.split(' ');
                if words.next() != Some(token) {
                    // For an earlier wait of this client: not ours.
                    continue;
                }
                return match words.next().map(str::parse::<u64>) {
                    Some(Ok(fence)) => Heard::HandedOver { fence },
                    _ => Heard::TryAgain,
                };
            }
            () = tokio::time::sleep_until(until) => return Heard::TryAgain,
        }
    }
}

/// The lease a release hands to this waiter: short, so that a lock handed
/// to a waiter that died comes back within its heartbeat, whatever the
/// lease. A live waiter makes it whole at once: the watchdog renews it to
/// the full lease, or, when the watchdog is off, the waiter's next attempt
/// sets it.
fn hand_off_lease(request: &Request<'_>) -> Duration {
    request.lease.min(WAITER_HEARTBEAT)
}

/// Whether a lease set to `ttl` by a request sent at `sent_at` still has
/// more than a tenth of it left by the local clock.
fn usable(sent_at: Instant, ttl: Duration) -> bool {
    local_deadline(sent_at, ttl) > Instant::now() + ttl / 10
}

fn late_grant(store: &Store, request: &Request<'_>) -> Error {
    Error::new(
        crate::error::ErrorKind::Connection,
        format!(
            "redis at {} answered so late that the lease on lock {:?} had almost run out; it \
             was given back: check the network and the server's load",
            store.address(),
            request.keys.name
        ),
    )
}

fn backoff_step(backoff: &mut Duration) -> Duration {
    let step = *backoff;
    *backoff = (*backoff * 2).min(MAX_BACKOFF);
    // Jitter in [step/2, step): waiters that failed together spread out.
    let half = step / 2;
    let jitter =
        getrandom::u64().unwrap_or(0) % u64::try_from(half.as_micros()).unwrap_or(1).max(1);
    half + Duration::from_micros(jitter)
}

/// How an attempt that finds the lock busy treats the waiter queue.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Queueing {
    /// It does not queue.
    No,
    /// It queues, or refreshes its place and heartbeat.
    Refresh,
    /// As `Refresh`, for a token queued before: one out of the queue (a
    /// hand-off to it ran out) goes back in front.
    Again,
    /// It is queued with a heartbeat refreshed within `HEARTBEAT_REFRESH`
    /// and the same mode: the lock is marked as waited for, nothing else.
    Fresh,
}

/// One attempt with `token`; `queue` says what it does with the waiter
/// queue when busy; a queued waiter is handed the lock at a release if
/// `hand_over` (a fair lock always is). Arms `pending` before anything is
/// sent.
async fn attempt<'k>(
    engine: &Arc<Engine>,
    store: &Arc<Store>,
    request: &Request<'k>,
    token: &str,
    queue: Queueing,
    hand_over: bool,
    pending: &mut Option<PendingRelease<'k>>,
) -> Result<Outcome> {
    let keys = request.keys;
    // Nothing can be held before the request leaves: connect first, then
    // arm the release that undoes a request cut off on its way.
    let route = store.route(keys).await?;
    // A reentry waits out the grace too: a server that lost the hold
    // would grant it as a new hold, with a new fence, under a guard that
    // believes it nests in the old one.
    if let Some(left) = store.grace_left(&keys.lock, route.server()) {
        return Ok(Outcome::InGrace { left });
    }
    let route = route.with_ack(request.replica_ack);
    // Sent before: this token may hold the lock or be queued already.
    let sent_before = pending.is_some();
    let armed = pending.get_or_insert_with(|| PendingRelease::arm(engine, store, keys, token));
    if queue != Queueing::No {
        armed.queued();
    }
    let lease_ms = millis(request.lease).to_string();
    let heartbeat = millis(WAITER_HEARTBEAT).to_string();
    let mode: &[u8] = match request.kind {
        Kind::Mutex if !hand_over => b"m",
        Kind::Mutex | Kind::Fair => b"f",
        Kind::Reentrant | Kind::FairReentrant => b"x",
        Kind::Read => b"r",
        Kind::Write => b"w",
        Kind::Semaphore { .. } => b"s",
    };
    // A mutex's attempt that does not queue leaves out what only queueing
    // uses: each argument costs the server work.
    let bare = queue == Queueing::No && !request.kind.is_hash();
    // The arguments every acquire script takes first (see `lib.lua`).
    let mut args: Vec<&[u8]> = vec![
        token.as_bytes(),
        lease_ms.as_bytes(),
        engine.retention_ms(),
        match queue {
            Queueing::No => b"0",
            Queueing::Refresh => b"1",
            Queueing::Again if request.kind.is_hash() => b"1",
            Queueing::Again => b"3",
            // The hash kinds' script refreshes on every attempt.
            Queueing::Fresh if request.kind.is_hash() => b"1",
            Queueing::Fresh => b"2",
        },
        if bare { b"" } else { heartbeat.as_bytes() },
        if bare { b"" } else { engine.id.as_bytes() },
        if sent_before { b"1" } else { b"0" },
        engine.config.identity.as_bytes(),
    ];
    if !bare {
        args.push(mode);
    }
    let keys_list = [keys.lock.as_str(), &keys.fence, &keys.queue, &keys.waiters];
    if bare && request.kind == Kind::Mutex && !sent_before {
        // Neither queued nor holding before: the fast path alone.
        let args: [&[u8]; 4] = [
            token.as_bytes(),
            lease_ms.as_bytes(),
            engine.retention_ms(),
            engine.config.identity.as_bytes(),
        ];
        return run_attempt(
            store,
            request,
            route,
            pending,
            sent_before,
            |s| &s.try_acquire,
            &keys_list[..2],
            &args,
        )
        .await;
    }
    // What follows is the script's own.
    let (pick, own): (Pick, _) = match request.kind {
        Kind::Mutex | Kind::Fair => {
            let pick: Pick = if request.kind == Kind::Fair {
                |s| &s.fair_acquire
            } else {
                |s| &s.acquire
            };
            // A busy answer carries the last fence only for a waiter that
            // takes a hand-off from its message (with the watchdog): one
            // without makes the lease whole by another attempt, whose
            // answer has the fence.
            let own = if bare {
                Vec::new()
            } else {
                vec![
                    millis(hand_off_lease(request)).to_string(),
                    if request.renew { "1" } else { "0" }.to_owned(),
                ]
            };
            (pick, own)
        }
        Kind::Reentrant
        | Kind::FairReentrant
        | Kind::Read
        | Kind::Write
        | Kind::Semaphore { .. } => {
            let total = match request.kind {
                Kind::Semaphore { total } => total,
                _ => 0,
            };
            let live_levels = if request.kind.is_reentrant() {
                engine.leases.holds.live_levels(&keys.lock, request.owner)
            } else {
                String::new()
            };
            let mut own = vec![
                request.kind.stored_name().to_owned(),
                request.owner.to_owned(),
                request.permits.to_string(),
                total.to_string(),
                request.max_hold.map_or(0, millis).to_string(),
                live_levels,
            ];
            if request.kind == Kind::FairReentrant {
                own.push("1".to_owned());
            }
            (|s: &Scripts| &s.family_acquire, own)
        }
    };
    args.extend(own.iter().map(String::as_bytes));
    run_attempt(
        store,
        request,
        route,
        pending,
        sent_before,
        pick,
        &keys_list,
        &args,
    )
    .await
}

/// Sends an attempt's script and reads its answer.
#[allow(clippy::too_many_arguments)]
async fn run_attempt(
    store: &Store,
    request: &Request<'_>,
    route: crate::conn::route::Route,
    pending: &mut Option<PendingRelease<'_>>,
    sent_before: bool,
    pick: Pick,
    keys_list: &[&str],
    args: &[&[u8]],
) -> Result<Outcome> {
    let keys = request.keys;
    let sent_at = Instant::now();
    let (reply, acked, route) = match store
        .send(route, &keys.lock, "acquire", pick, keys_list, args, true)
        .await?
    {
        Answer::Reply(reply, acked, route) => (reply, acked, route),
        Answer::InGrace(left) => return Ok(Outcome::InGrace { left }),
    };
    let mut outcome = read_attempt(request, &reply, sent_at);
    match (&mut outcome, acked) {
        (Ok(Outcome::Granted { .. }), Some(acked)) if acked.is_short() => {
            return Ok(Outcome::Unacked {
                acked,
                replicas: route.replicas().named(),
            });
        }
        _ => {}
    }
    match &mut outcome {
        Ok(Outcome::Granted { server, .. }) => *server = route.server().identity,
        Ok(Outcome::Busy {
            acked: waited,
            server,
            ..
        }) => {
            *waited = acked.is_some();
            *server = route.server().identity;
        }
        _ => {}
    }
    if !sent_before && outcome.as_ref().is_err_and(Error::is_conflict) {
        // Refused before it could hold or queue anything.
        if let Some(pending) = pending.take() {
            pending.disarm();
        }
    }
    outcome
}

/// Reads an acquire script's reply (see `scripts/acquire.lua` and
/// `scripts/family_acquire.lua`).
fn read_attempt(request: &Request<'_>, reply: &redis::Value, sent_at: Instant) -> Result<Outcome> {
    let unexpected = || Error::unexpected_reply("acquire", reply);
    if let redis::Value::BulkString(text) = reply {
        // Taken by this attempt, for the lease it asked: "<fence>", or
        // "<fence> <acquired>" when the value's acquisition time is not the
        // fence (see `take_fence` in `scripts/lib.lua`).
        let text = std::str::from_utf8(text).map_err(|_| unexpected())?;
        let (fence_text, acquired) = text.split_once(' ').unwrap_or((text, text));
        let fence = fence_text.parse::<u64>().map_err(|_| unexpected())?;
        // Only a mutex's value is a string a compare-and-delete can match.
        let acquired = (!request.kind.is_hash()).then(|| acquired.to_owned());
        return Ok(Outcome::Granted {
            fence,
            ttl: request.lease,
            sent_at,
            hold: None,
            acquired,
            server: 0,
        });
    }
    let redis::Value::Array(items) = reply else {
        return Err(unexpected());
    };
    let code = items.first().and_then(scripts::as_int);
    let int = |i: usize| items.get(i).and_then(scripts::as_int);
    let text = |i: usize| items.get(i).and_then(scripts::as_text);
    let name = &request.keys.name;
    match (code, items.len()) {
        (Some(1), 3 | 5) => {
            let fence = int(1).and_then(|f| u64::try_from(f).ok());
            let ttl = int(2).and_then(pttl);
            let hold = text(3).map(|token| Hold {
                token,
                cap_left: int(4)
                    .and_then(|ms| u64::try_from(ms).ok())
                    .map(Duration::from_millis),
            });
            match (fence, ttl) {
                (Some(fence), Some(ttl)) if hold.is_some() == (items.len() == 5) => {
                    Ok(Outcome::Granted {
                        fence,
                        ttl,
                        sent_at,
                        hold,
                        acquired: None,
                        server: 0,
                    })
                }
                _ => Err(unexpected()),
            }
        }
        (Some(0), 4) => {
            let blocker = int(1).ok_or_else(unexpected)?;
            let fence = int(2).ok_or_else(unexpected)?;
            let holder = text(3).and_then(|record| {
                if request.kind.is_hash() {
                    Holder::from_hash_record(&record, false)
                } else {
                    // Without the token that starts the record.
                    let rest = record.split_once(' ').map(|(_, rest)| rest)?;
                    Some(Holder::from_mutex_record(rest, None))
                }
            });
            let mut holder = holder;
            if let Some(holder) = holder.as_mut() {
                holder.remaining = pttl(blocker);
            }
            Ok(Outcome::Busy {
                pttl: pttl(blocker),
                sent_at,
                fence: u64::try_from(fence).unwrap_or(0),
                holder,
                acked: false,
                server: 0,
            })
        }
        (Some(-1), 2) => {
            let found = text(1).ok_or_else(unexpected)?;
            Err(request.kind.conflict(name, &found))
        }
        (Some(-2), 1) => Err(Error::upgrade_refused(name)),
        (Some(-3), 2) => {
            let stored = int(1).ok_or_else(unexpected)?;
            let asked = match request.kind {
                Kind::Semaphore { total } => total,
                _ => 0,
            };
            Err(Error::permits_mismatch(name, asked, stored))
        }
        _ => Err(unexpected()),
    }
}
