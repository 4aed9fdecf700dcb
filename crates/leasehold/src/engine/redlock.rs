//! Taking a lease from a quorum of independent masters (Redlock), with
//! fences that never go back. The masters are asked in parallel and
//! counted (see [`Quorum`]); the lease taken is held, renewed, extended and
//! released as any other (see [`Held`]).
//!
//! An acquisition has two rounds:
//!
//! 1. the mutex acquire script on every master: each that grants returns
//!    `max(its counter + 1, its clock in µs)`, already stored there;
//! 2. the largest of those, the fence, is written to every master that
//!    granted with a smaller one, on the condition that the token still
//!    holds the lock there (`scripts/redlock_fence.lua`). A grant that
//!    arrives once the fence is decided (a master slower than the per-node
//!    deadline) writes it to its master itself, from its request's task.
//!
//! The lock is reported held only once a majority confirmed round two with
//! validity (lease − elapsed − drift) above the floor left. Any later
//! majority shares a master with that one, whose counter is at least the
//! fence, so the next fence is larger (see docs/SAFETY.md).
//!
//! A round-one request takes the lock only up to a limit on its master's
//! clock, which this client reads when it connects and from every
//! round-one reply ([`MasterClock`], [`count::RoundOneLimit`]): a request
//! the network held until after its release cannot grant to a token
//! nobody holds.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::background::Tracked;
use crate::conn::scripts;
use crate::deploy::quorum::count::{self, Tally};
use crate::deploy::quorum::{Fanned, MasterClock, Quorum};
use crate::deploy::store::{Answer, Store};
use crate::engine::held::Held;
use crate::engine::masters::{no_quorum, phase, Phase, PhaseState, SharedPhase};
use crate::engine::release::{release, release_in_background};
use crate::engine::state::Engine;
use crate::engine::{pttl, Kind, Request};
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{millis, LockKeys, MIN_LEASE};
use crate::random::new_token;

/// How far ahead of this host's clock a proposed fence is, in µs: enough
/// for masters whose clocks run a little ahead to take it.
const PROPOSAL_LEAD_US: u64 = 2_000;
/// How far past its own clock a master takes a proposed fence, in µs: a
/// host whose clock is further ahead gets the masters' own fences.
const PROPOSAL_AHEAD_US: u64 = 1_000_000;

/// What a round-one request does with a grant it got.
enum LateGrant {
    /// Counted by the try, or stored the fence already.
    Counted,
    /// The fence is decided and this master's counter is behind it.
    Fence(u64),
    /// The try is over, or the hold ended: nobody counts it.
    Release,
}

/// One master's answer to round one.
#[derive(Debug)]
enum Grant {
    Granted(u64),
    Busy(Option<Duration>),
    InGrace(Duration),
    /// The request reached the master past its limit, and took nothing.
    TooLate,
}

/// One try over every master, as the caller of [`attempt`] sees it.
enum Try {
    Held(Held),
    /// Not now: held elsewhere, or the grant came too late to be used.
    /// `missed` when a master missed the per-node deadline, in either
    /// round, and the masters that missed could have made a majority with
    /// the grants: the lock may be free, and a host too busy to hear the
    /// masters in time kept the try from telling.
    Busy {
        hint: Option<Duration>,
        missed: bool,
    },
    /// Too many masters failed for a majority to be possible; `missed` of
    /// them did not answer within the per-node deadline (a connection
    /// being made, or a slow master), `too_late` refused the request as
    /// past its limit (their clocks read again from the refusal), the
    /// others answered an error.
    Blocked {
        tally: Tally,
        error: Option<Error>,
        missed: usize,
        too_late: usize,
    },
}

/// One try: round one on every master, round two on those that granted.
async fn attempt(
    engine: &Arc<Engine>,
    quorum: &Arc<Quorum>,
    request: &Request<'_>,
    keys: &Arc<LockKeys>,
    node_timeout: Duration,
) -> Result<Try> {
    let n = quorum.len();
    let token: Arc<str> = new_token()?.into();
    let shared: SharedPhase = Arc::new(StdMutex::new(PhaseState::new(Phase::Trying)));
    let start = Instant::now();
    let rx = {
        let keys = Arc::clone(keys);
        let token = Arc::clone(&token);
        let lease = request.lease;
        let shared = &shared;
        let proposed = proposal();
        let (engine, clocks) = (Arc::clone(engine), quorum.clocks.clone());
        quorum.fan_out(
            &Arc::clone(&engine.leases.background),
            |_| true,
            move |i, master| {
                let (keys, token, shared) =
                    (Arc::clone(&keys), Arc::clone(&token), Arc::clone(shared));
                let engine = Arc::clone(&engine);
                let clock = clocks.get(i).cloned().unwrap_or_default();
                async move {
                    let mut refused_by = None;
                    // A grant is still of use: the try, or its hold,
                    // goes on.
                    let wanted = || matches!(phase(&shared).phase, Phase::Trying | Phase::Held);
                    let answer = take_on(
                        &engine,
                        &master,
                        &clock,
                        (&keys, &token),
                        lease,
                        proposed,
                        &wanted,
                        &mut refused_by,
                    )
                    .await;
                    // A grant, or an error after which the master may
                    // have run the script (its reply lost): either may
                    // hold the lock there, and a try that fails must
                    // release it.
                    let may_hold = match &answer {
                        Ok(Grant::Granted(_)) => true,
                        Ok(_) => false,
                        Err(error) => !error.is_conflict(),
                    };
                    if may_hold {
                        let stored = match &answer {
                            Ok(Grant::Granted(fence)) => Some(*fence),
                            _ => None,
                        };
                        let late = {
                            let mut state = phase(&shared);
                            if state.phase == Phase::Over {
                                LateGrant::Release
                            } else if state.phase == Phase::Released {
                                if state.late_grant(i) {
                                    LateGrant::Release
                                } else {
                                    LateGrant::Counted
                                }
                            } else {
                                state.granted.push((i, stored));
                                match state.fence {
                                    Some(fence) if stored.is_none_or(|s| s < fence) => {
                                        LateGrant::Fence(fence)
                                    }
                                    _ => LateGrant::Counted,
                                }
                            }
                        };
                        match late {
                            // Nobody counts this grant any more.
                            LateGrant::Release => release_in_background(
                                Arc::clone(&engine),
                                Arc::clone(&master),
                                LockKeys::clone(&keys),
                                token.to_string(),
                                false,
                                None,
                            ),
                            // Round two, for this master alone: the
                            // try (or the hold) no longer listens, and
                            // whatever ends the hold releases here too.
                            LateGrant::Fence(fence) => {
                                fence_late(&engine, &master, &keys, &token, fence).await;
                            }
                            LateGrant::Counted => {}
                        }
                        if answer.is_err() {
                            release_once_refused(
                                &engine,
                                &master,
                                &shared,
                                (&keys, &token),
                                refused_by,
                            );
                        }
                    }
                    answer
                }
            },
        )
    };
    let mut attempt = Attempt {
        engine: Arc::clone(engine),
        quorum: Arc::clone(quorum),
        keys: Arc::clone(keys),
        token,
        shared,
        rx,
        granted: Vec::new(),
        settled: false,
    };
    let mut tally = Tally::new(n);
    let mut fences = Vec::with_capacity(n);
    let mut busy: Vec<Duration> = Vec::new();
    let mut last_error = None;
    let mut conflict = None;
    let mut missed = 0;
    let mut too_late = 0;
    let until = start + node_timeout;
    while !tally.decided() {
        let Ok(Some((i, answer))) = attempt.rx.recv_until(until).await else {
            // The ones that did not answer in time count as failed.
            missed = tally.pending();
            tally.failed += missed;
            if last_error.is_none() {
                last_error = Some(Error::new(
                    ErrorKind::Connection,
                    format!("no answer within the per-node deadline of {node_timeout:?}"),
                ));
            }
            break;
        };
        match answer {
            Ok(Grant::Granted(fence)) => {
                tally.yes += 1;
                fences.push(fence);
                attempt.granted.push((i, fence));
            }
            Ok(Grant::Busy(pttl)) => {
                tally.no += 1;
                busy.extend(pttl);
            }
            Ok(Grant::InGrace(left)) => {
                tally.no += 1;
                busy.push(left);
            }
            Ok(Grant::TooLate) => {
                // The request ran later than the limit allowed (a
                // stalled master, or its clock ran ahead of this
                // client's reading, which its reply refreshed): a
                // miss, and the next try is not refused for it.
                tally.failed += 1;
                too_late += 1;
                last_error = Some(Error::new(
                    ErrorKind::Connection,
                    "a master took the request as too late by its clock, which ran ahead \
                     of this host's reading of it (read again from the reply)",
                ));
            }
            Err(error) if error.is_conflict() => {
                tally.no += 1;
                conflict = Some(error);
            }
            Err(error) => {
                tally.failed += 1;
                last_error = Some(error);
            }
        }
    }
    if let Some(conflict) = conflict {
        attempt.give_up().await;
        return Err(conflict);
    }
    if !tally.won() {
        attempt.give_up().await;
        if tally.blocked_by_failures() {
            return Ok(Try::Blocked {
                tally,
                error: last_error,
                missed,
                too_late,
            });
        }
        // The lock frees on a majority once the shortest leases in the
        // way run out.
        busy.sort();
        let needed = tally.majority().saturating_sub(tally.yes + tally.pending());
        let hint = needed.checked_sub(1).and_then(|k| busy.get(k).copied());
        return Ok(Try::Busy {
            hint,
            missed: missed > 0 && tally.yes + missed >= tally.majority(),
        });
    }
    // Grants recorded by requests whose answers the count did not wait
    // for join in, and the fence is decided under the same lock: every
    // grant recorded after this writes the fence itself.
    let mut unknown = Vec::new();
    let fence = {
        let mut state = phase(&attempt.shared);
        for &(i, stored) in &state.granted {
            if attempt.granted.iter().any(|&(j, _)| j == i) {
                continue;
            }
            match stored {
                Some(f) => {
                    fences.push(f);
                    attempt.granted.push((i, f));
                }
                None => unknown.push(i),
            }
        }
        let fence = count::fence(&fences);
        state.fence = fence;
        fence
    };
    let Some(fence) = fence else {
        attempt.give_up().await;
        return Ok(Try::Busy {
            hint: None,
            missed: false,
        });
    };
    // Round two: the fence, to every master that granted with a smaller
    // one (or may have granted, its reply lost). Those that granted with
    // it stored it with the grant, in one script: when they are a
    // majority, no round trip is needed.
    let stored = attempt.granted.iter().filter(|&&(_, f)| f == fence).count();
    let behind: Vec<usize> = attempt
        .granted
        .iter()
        .filter(|&&(_, f)| f < fence)
        .map(|&(i, _)| i)
        .chain(unknown)
        .collect();
    let mut round_two_missed = false;
    let confirmed = if stored >= tally.majority() {
        if !behind.is_empty() {
            // Not waited for: the majority has the fence already.
            drop(fan_out_fence(
                engine,
                quorum,
                keys,
                &attempt.token,
                fence,
                &behind,
            ));
        }
        stored
    } else {
        let (written, missed) = write_fence(
            fan_out_fence(engine, quorum, keys, &attempt.token, fence, &behind),
            behind.len(),
            tally.majority() - stored,
            node_timeout,
        )
        .await;
        round_two_missed = missed;
        stored + written
    };
    let floor = quorum.validity_floor(request.lease);
    if confirmed < tally.majority()
        || !quorum
            .config
            .clocks
            .usable(request.lease, start.elapsed(), floor)
    {
        // Too few confirmed, or too little is left of the lease to use.
        attempt.give_up().await;
        return Ok(Try::Busy {
            hint: None,
            missed: round_two_missed || missed > 0,
        });
    }
    phase(&attempt.shared).phase = Phase::Held;
    attempt.settled = true;
    let held = Held::take_on_quorum(
        engine,
        request,
        attempt.token.to_string(),
        fence,
        start,
        Arc::clone(&attempt.shared),
    );
    Ok(Try::Held(held))
}

/// Sends round two to the masters in `which`.
fn fan_out_fence(
    engine: &Arc<Engine>,
    quorum: &Quorum,
    keys: &Arc<LockKeys>,
    token: &Arc<str>,
    fence: u64,
    which: &[usize],
) -> Fanned<bool> {
    let keys = Arc::clone(keys);
    let token = Arc::clone(token);
    let background = Arc::clone(&engine.leases.background);
    let engine = Arc::clone(engine);
    quorum.fan_out(
        &background,
        |i| which.contains(&i),
        move |_, master| {
            let (engine, keys, token) =
                (Arc::clone(&engine), Arc::clone(&keys), Arc::clone(&token));
            async move { fence_on(&engine, &master, &keys, &token, fence).await }
        },
    )
}

/// Round two: how many of the masters in `behind` stored `fence` while
/// `token` still held the lock there, and whether the count stopped at
/// the per-node deadline. Returns once `needed` did, or once they cannot.
async fn write_fence(
    mut rx: Fanned<bool>,
    behind: usize,
    needed: usize,
    node_timeout: Duration,
) -> (usize, bool) {
    let (mut yes, mut answered) = (0, 0);
    let until = Instant::now() + node_timeout;
    while yes < needed && behind - answered + yes >= needed {
        match rx.recv_until(until).await {
            Ok(Some((_, Ok(true)))) => {
                yes += 1;
                answered += 1;
            }
            Ok(Some(_)) => answered += 1,
            Ok(None) => break,
            Err(_) => return (yes, true),
        }
    }
    (yes, false)
}

/// Waits for the lock on a majority of `quorum`, at most `wait` if given.
///
/// Cancel safe: a dropped try releases in the background on every master
/// that granted, and a grant that arrives later is released by the request
/// that got it.
pub(crate) async fn acquire(
    engine: &Arc<Engine>,
    quorum: &Arc<Quorum>,
    request: &Request<'_>,
    wait: Option<Duration>,
) -> Result<Held> {
    match tries(engine, quorum, request, wait, false).await? {
        Some(held) => Ok(held),
        None => Err(Error::wait_timed_out(
            &request.keys.name,
            wait.unwrap_or_default(),
            None,
        )),
    }
}

/// One try: the lease, or `None` when the lock is held elsewhere.
///
/// Cancel safe, as [`acquire`].
pub(crate) async fn try_acquire(
    engine: &Arc<Engine>,
    quorum: &Arc<Quorum>,
    request: &Request<'_>,
) -> Result<Option<Held>> {
    tries(engine, quorum, request, None, true).await
}

/// Tries until the lock is held, or, with `once`, until one try got
/// an answer from enough masters to tell; `None` when the lock is held
/// elsewhere at the end. Masters that answer errors (refused, out of
/// reach) so that no majority is possible end it at once with the
/// quorum error; masters that only miss the per-node deadline (a
/// connection being made, a slow or paused master), or refuse a
/// request as past its limit (a master that stalled, its clock read
/// again from the refusal), are given up to the command timeout first.
async fn tries(
    engine: &Arc<Engine>,
    quorum: &Arc<Quorum>,
    request: &Request<'_>,
    wait: Option<Duration>,
    once: bool,
) -> Result<Option<Held>> {
    let started = Instant::now();
    let deadline = wait.map(|wait| started + wait);
    let mut blocked_since: Option<Instant> = None;
    let lease = request.lease;
    let mut node_timeout = quorum.node_timeout(lease);
    let mut min_pause = Duration::ZERO;
    // Shared by the requests of every try: a request to each master costs a
    // reference count, not a copy of every key.
    let keys = Arc::new(request.keys.clone());
    loop {
        let tried_at = Instant::now();
        let hint = match attempt(engine, quorum, request, &keys, node_timeout).await? {
            Try::Held(held) => return Ok(Some(held)),
            Try::Blocked {
                tally,
                error,
                missed,
                too_late,
            } => {
                let since = *blocked_since.get_or_insert(tried_at);
                if missed + too_late == 0
                    || since.elapsed() >= quorum.command_timeout()
                    || deadline.is_some_and(|deadline| Instant::now() >= deadline)
                {
                    return Err(no_quorum(&keys, tally, error));
                }
                // Too many masters missed the deadline: on a loaded
                // host, or with masters slower than the default
                // deadline, the next try waits longer for them.
                if missed > 0 && quorum.config.node_timeout.is_none() {
                    node_timeout = count::widened_deadline(node_timeout, lease);
                }
                None
            }
            Try::Busy { hint, missed } if missed => {
                // Masters that missed the deadline might have granted: the
                // next try waits longer for them (a loaded host), and a
                // single try is not answered "held elsewhere" for them,
                // within the command timeout.
                if quorum.config.node_timeout.is_none() {
                    node_timeout = count::widened_deadline(node_timeout, lease);
                }
                if once {
                    let since = *blocked_since.get_or_insert(tried_at);
                    if since.elapsed() >= quorum.command_timeout() {
                        return Ok(None);
                    }
                } else {
                    // A wait goes on: only tries that no majority could
                    // answer count toward giving up with a quorum error.
                    blocked_since = None;
                }
                // The late grants of this try release themselves when
                // their replies come: the next try waits a deadline for
                // them, so as not to find its own late grant in the way.
                min_pause = node_timeout;
                hint
            }
            Try::Busy { .. } if once => return Ok(None),
            Try::Busy { hint, .. } => {
                blocked_since = None;
                // A majority answered in time: back to the default
                // deadline, so that a master that stays silent does
                // not hold each next try for the widened one.
                node_timeout = quorum.node_timeout(lease);
                hint
            }
        };
        let left = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(None);
                }
                left
            }
            None => Duration::MAX,
        };
        let base = hint.map_or(quorum.config.retry_delay, |hint| {
            hint.clamp(
                MIN_LEASE.min(quorum.config.retry_delay),
                quorum.config.retry_delay,
            )
        });
        let pause = count::retry_pause(base, jitter(), left).max(min_pause.min(left));
        min_pause = Duration::ZERO;
        tokio::time::sleep(pause).await;
    }
}

/// A try in progress: what it must undo if it fails or is dropped.
struct Attempt {
    engine: Arc<Engine>,
    quorum: Arc<Quorum>,
    keys: Arc<LockKeys>,
    token: Arc<str>,
    shared: SharedPhase,
    rx: Fanned<Grant>,
    /// The masters counted as having granted, with the fence each stored.
    granted: Vec<(usize, u64)>,
    settled: bool,
}

impl Attempt {
    /// Marks the try over and collects every grant known so far: the ones
    /// that come later release themselves.
    fn abandon(&mut self) -> Vec<usize> {
        self.settled = true;
        let mut state = phase(&self.shared);
        state.phase = Phase::Over;
        std::mem::take(&mut state.granted)
            .into_iter()
            .map(|(i, _)| i)
            .collect()
    }

    /// The try failed: release on every master that may have granted, in
    /// parallel, once, and wait a per-node deadline at most for them.
    async fn give_up(&mut self) {
        let granted = self.abandon();
        if granted.is_empty() {
            return;
        }
        let (keys, token) = (Arc::clone(&self.keys), Arc::clone(&self.token));
        let engine = Arc::clone(&self.engine);
        let mut rx = self.quorum.fan_out(
            &self.engine.leases.background,
            |i| granted.contains(&i),
            move |_, master| {
                let (engine, keys, token) =
                    (Arc::clone(&engine), Arc::clone(&keys), Arc::clone(&token));
                async move { release(&engine, &master, &keys, &token, false, None).await }
            },
        );
        let until = Instant::now() + self.quorum.command_timeout();
        for _ in 0..granted.len() {
            if !matches!(rx.recv_until(until).await, Ok(Some(_))) {
                break;
            }
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        // Dropped mid-try: undo it in the background.
        let granted = self.abandon();
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        for i in granted {
            if let Some(master) = self.quorum.masters.get(i) {
                release_in_background(
                    Arc::clone(&self.engine),
                    Arc::clone(master),
                    LockKeys::clone(&self.keys),
                    self.token.to_string(),
                    false,
                    None,
                );
            }
        }
    }
}

/// Round one on one master: the mutex acquire script, which never queues
/// here. A master in its restart grace is not asked.
///
/// Once the master's clock was read (when the connection was made, or from an
/// earlier reply), the request carries its limit: past half a command timeout
/// after sending, it takes nothing. `refused_by` is then set, before the
/// request leaves, to when a request sent to this master surely runs after that
/// limit: a release sent earlier (on a new connection, the request's own given
/// up) may run before a round one that the network still holds. Within the
/// limit, such a release finds no token and names it in the master's counter,
/// and the round one that comes after it takes nothing (see `mark_released` in
/// `lib.lua`). A request refused as too late is sent once more at once, with a
/// limit from the refusal's reading of the clock, while a grant is still
/// `wanted`.
#[allow(clippy::too_many_arguments)]
async fn take_on(
    engine: &Engine,
    master: &Store,
    clock: &MasterClock,
    (keys, token): (&LockKeys, &str),
    lease: Duration,
    proposed: u64,
    wanted: &(dyn Fn() -> bool + Sync),
    refused_by: &mut Option<Instant>,
) -> Result<Grant> {
    let route = master.route(keys).await?;
    clock.first(route.server().clock);
    if let Some(left) = master.grace_left(&keys.lock, route.server()) {
        return Ok(Grant::InGrace(left));
    }
    let lease_ms = millis(lease).to_string();
    let proposed = proposed.to_string();
    let ahead = PROPOSAL_AHEAD_US.to_string();
    let fixed: [&[u8]; 6] = [
        token.as_bytes(),
        lease_ms.as_bytes(),
        engine.retention_ms(),
        engine.config.identity.as_bytes(),
        proposed.as_bytes(),
        ahead.as_bytes(),
    ];
    // A refusal read the master's clock when it ran, after whatever held
    // the request (round trips to load the scripts on a master that had
    // lost them, a stall): sent again with a limit from that reading, the
    // request is on time unless it is held as long once more.
    let mut refused = false;
    loop {
        let sent = Instant::now();
        let limit = clock.limit(sent, master.command_timeout() / 2);
        *refused_by = limit.and_then(|limit| sent.checked_add(limit.refused_after));
        let limit = limit.map(|limit| limit.master_us.to_string());
        let mut args = [&b""[..]; 7];
        args[..6].copy_from_slice(&fixed);
        args[6] = limit.as_deref().unwrap_or_default().as_bytes();
        let reply = match master
            .send(
                route.clone(),
                &keys.lock,
                "acquire",
                |s| &s.redlock_acquire,
                &[&keys.lock, &keys.fence],
                &args,
                true,
            )
            .await?
        {
            Answer::Reply(reply, _, _) => reply,
            Answer::InGrace(left) => return Ok(Grant::InGrace(left)),
        };
        match grant_of(&reply, clock, sent, &keys.name)? {
            Grant::TooLate if !refused && wanted() => refused = true,
            grant => return Ok(grant),
        }
    }
}

/// What a round-one reply says, its reading of the master's clock noted
/// (`sent`: when its request was sent).
fn grant_of(reply: &redis::Value, clock: &MasterClock, sent: Instant, name: &str) -> Result<Grant> {
    let unexpected = || Error::unexpected_reply("acquire", reply);
    let redis::Value::Array(items) = reply else {
        return Err(unexpected());
    };
    let int = |i: usize| items.get(i).and_then(scripts::as_int);
    // The master's clock, last in every reply but a conflict's.
    let read_clock = |i: usize| {
        let master_us = int(i).and_then(|us| u64::try_from(us).ok());
        master_us
            .map(|us| clock.read(us, sent))
            .ok_or_else(unexpected)
    };
    match (int(0), items.len()) {
        (Some(1), 3) => {
            read_clock(2)?;
            int(1)
                .and_then(|fence| u64::try_from(fence).ok())
                .map(Grant::Granted)
                .ok_or_else(unexpected)
        }
        (Some(0), 3) => {
            read_clock(2)?;
            Ok(Grant::Busy(int(1).and_then(pttl)))
        }
        (Some(2), 2) => {
            read_clock(1)?;
            Ok(Grant::TooLate)
        }
        (Some(-1), 2) => {
            let found = items
                .get(1)
                .and_then(scripts::as_text)
                .ok_or_else(unexpected)?;
            Err(Kind::Mutex.conflict(name, &found))
        }
        _ => Err(unexpected()),
    }
}

/// A round-one request to `engine` failed (no answer in time, a
/// connection lost) and may still run there: held in the network, on a
/// connection given up, it can arrive after a release sent on a new one.
/// Once it would surely be refused (`refused_by`), the token is released
/// there once more if the try is over or the hold released by then
/// (a hold still live releases on every master when it ends).
fn release_once_refused(
    engine: &Arc<Engine>,
    master: &Arc<Store>,
    shared: &SharedPhase,
    (keys, token): (&LockKeys, &str),
    refused_by: Option<Instant>,
) {
    let Some(at) = refused_by.filter(|&at| Instant::now() < at) else {
        return;
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let tracked = Tracked::new(&engine.leases.background);
    let (engine, master, shared) = (Arc::clone(engine), Arc::clone(master), Arc::clone(shared));
    let (keys, token) = (keys.clone(), token.to_owned());
    runtime.spawn(async move {
        let _tracked = tracked;
        tokio::time::sleep_until(at).await;
        if matches!(phase(&shared).phase, Phase::Over | Phase::Released) {
            release_in_background(engine, master, keys, token, false, None);
        }
    });
}

/// The fence a try proposes: this host's clock in µs, a little ahead. A
/// master takes it as its fence when it is at least its own hybrid clock's
/// and not more than [`PROPOSAL_AHEAD_US`] past its clock; masters whose
/// clocks are that close to this host's then agree on one fence.
fn proposal() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(0));
    now.saturating_add(PROPOSAL_LEAD_US)
}

/// Round two on one master: stores `fence` if `token` holds the lock there.
async fn fence_on(
    engine: &Engine,
    master: &Store,
    keys: &LockKeys,
    token: &str,
    fence: u64,
) -> Result<bool> {
    let fence = fence.to_string();
    let reply = master
        .eval(
            keys,
            "fence",
            |s| &s.redlock_fence,
            &[&keys.lock, &keys.fence],
            &[token.as_bytes(), fence.as_bytes(), engine.retention_ms()],
        )
        .await?;
    scripts::flag("fence", &reply)
}

/// Round two for a grant that came after the fence was decided: a few
/// tries while the connection heals, each conditional on the token still
/// holding the lock there. What is not written stays behind on a master
/// outside the confirmed majority, which the fences' argument does not need.
async fn fence_late(engine: &Engine, master: &Store, keys: &LockKeys, token: &str, fence: u64) {
    for pause in [25, 100] {
        match fence_on(engine, master, keys, token, fence).await {
            Err(error) if error.is_transient() => {
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            _ => return,
        }
    }
    let _ = fence_on(engine, master, keys, token, fence).await;
}

fn jitter() -> u32 {
    let mut bytes = [0u8; 4];
    // Without randomness the pause is not jittered; it is still bounded.
    let _ = getrandom::fill(&mut bytes);
    u32::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::ClockReading;

    /// Three masters of the test kit, and a Redlock over them whose lock
    /// "job" was taken and released once (every master's clock read).
    async fn read_masters() -> (
        leasehold_testkit::Masters,
        crate::redlock::Redlock,
        LockKeys,
    ) {
        let servers = leasehold_testkit::Masters::start(3);
        let redlock = crate::redlock::Redlock::builder(servers.urls())
            .lease(Duration::from_secs(60))
            .watchdog(false)
            .build()
            .expect("a Redlock");
        let mutex = redlock.mutex("job").expect("a mutex");
        let warm = mutex.acquire().await.expect("the lock");
        warm.release_counted().await.expect("released");
        redlock.flush().await;
        let keys = LockKeys::new("leasehold", "job").expect("keys");
        (servers, redlock, keys)
    }

    async fn holder(url: &str, key: &str) -> Option<String> {
        let mut conn = connection(url).await;
        redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("GET")
    }

    fn reading(quorum: &Quorum, i: usize) -> ClockReading {
        let sample = *quorum.clocks[i].sample();
        sample.expect("read")
    }

    /// Sets what the client read of a master's clock 10 s back, as if the
    /// master's clock had stepped forward since.
    fn set_back(clock: &MasterClock) {
        if let Some(sample) = clock.sample().as_mut() {
            sample.server_us -= 10_000_000;
        }
    }

    /// A connection of the test's own to `url`.
    async fn connection(url: &str) -> redis::aio::MultiplexedConnection {
        redis::Client::open(url)
            .expect("a valid URL")
            .get_multiplexed_async_connection()
            .await
            .expect("a connection")
    }

    /// How many round-one requests (scripts or functions) `url` ran.
    async fn script_calls(url: &str) -> u64 {
        let mut conn = connection(url).await;
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .expect("INFO");
        stats
            .lines()
            .filter_map(|line| {
                line.strip_prefix("cmdstat_fcall:calls=")
                    .or_else(|| line.strip_prefix("cmdstat_evalsha:calls="))
            })
            .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
            .sum()
    }

    /// A master whose clock ran past what the client read of it (here the
    /// reading is set 10 s back) refuses round one as too late and takes
    /// nothing; the refusal reads its clock, and the request sent again at
    /// once, with a limit from that reading, is granted: that master ran
    /// two requests, the others one, and every master holds the lock.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_master_past_the_limit_is_read_again_and_asked_again() {
        let (servers, redlock, keys) = read_masters().await;
        let (_, masters) = redlock.quorum_for_tests();
        let before = reading(&masters, 0).server_us;
        set_back(&masters.clocks[0]);
        let urls = servers.urls();
        let mut calls = Vec::new();
        for url in &urls {
            calls.push(script_calls(url).await);
        }
        let mutex = redlock.mutex("job").expect("a mutex");
        let guard = mutex.acquire().await.expect("a majority grants");
        redlock.flush().await;
        for (i, url) in urls.iter().enumerate() {
            let value = holder(url, &keys.lock).await.unwrap_or_default();
            assert!(value.starts_with(guard.token()), "{value:?}");
            let ran = script_calls(url).await - calls[i];
            assert_eq!(ran, if i == 0 { 2 } else { 1 }, "master {i}");
        }
        assert!(
            reading(&masters, 0).server_us >= before,
            "the refusal was not read"
        );
        guard.release_counted().await.expect("released");
    }

    /// Two of three masters whose clocks ran past what the client read of
    /// them (here the readings are set 10 s back, as after a step forward)
    /// refuse round one as too late: a majority refused, yet the refusals
    /// read the clocks again, so the acquire tries once more and gets the
    /// lock instead of ending in a `Quorum` error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_majority_past_the_limit_is_asked_again() {
        let (servers, redlock, keys) = read_masters().await;
        let (_, masters) = redlock.quorum_for_tests();
        for clock in &masters.clocks[..2] {
            set_back(clock);
        }
        let mutex = redlock.mutex("job").expect("a mutex");
        let guard = mutex.acquire().await.expect("granted on the next try");
        redlock.flush().await;
        for url in &servers.urls() {
            let value = holder(url, &keys.lock).await.unwrap_or_default();
            assert!(value.starts_with(guard.token()), "{value:?}");
        }
        guard.release_counted().await.expect("released");
    }

    /// Every master's clock ran past what the client read of it (a host
    /// suspended, whose monotonic clock stood still while the masters'
    /// ran on): every master refuses round one as too late, and each
    /// request is sent again at once with the clock its refusal read, for
    /// `try_acquire` as for `acquire`: no error, no retry's pause.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_master_past_the_limit_is_tried_again_at_once() {
        let (_servers, redlock, _keys) = read_masters().await;
        let (_, masters) = redlock.quorum_for_tests();
        let set_back_all = || masters.clocks.iter().for_each(|clock| set_back(clock));
        let mutex = redlock.mutex("job").expect("a mutex");
        set_back_all();
        let guard = mutex
            .try_acquire()
            .await
            .expect("no error")
            .expect("the lock");
        guard.release_counted().await.expect("released");
        set_back_all();
        let started = Instant::now();
        let guard = mutex.acquire().await.expect("the lock");
        assert!(
            started.elapsed() < masters.config.retry_delay,
            "waited a retry's pause"
        );
        guard.release_counted().await.expect("released");
    }

    /// A round one that failed before it would be refused may still run on
    /// its master (held on a connection given up): once it would be
    /// refused, the token is released there once more, if the try is over
    /// or the hold released; a hold still live releases when it ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_round_one_that_failed_early_is_released_again_once_refused() {
        let (servers, redlock, keys) = read_masters().await;
        let (engine, masters) = redlock.quorum_for_tests();
        let url = &servers.urls()[0];
        for (state, stays) in [
            (Phase::Released, false),
            (Phase::Over, false),
            (Phase::Held, true),
        ] {
            let token = new_token().expect("a token");
            // What the held round one did when it arrived.
            let mut conn = connection(url).await;
            let _: () = redis::cmd("SET")
                .arg(&keys.lock)
                .arg(format!("{token} 1 test"))
                .arg("PX")
                .arg(60_000)
                .query_async(&mut conn)
                .await
                .expect("SET");
            let shared = Arc::new(StdMutex::new(PhaseState::new(state)));
            let at = Instant::now() + Duration::from_millis(200);
            release_once_refused(
                &engine,
                &masters.masters[0],
                &shared,
                (&keys, &token),
                Some(at),
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(
                holder(url, &keys.lock).await.is_some(),
                "released before the limit"
            );
            redlock.flush().await;
            assert!(Instant::now() >= at);
            let left = holder(url, &keys.lock).await;
            assert_eq!(left.is_some(), stays, "{state:?}: {left:?}");
            let _: () = redis::cmd("DEL")
                .arg(&keys.lock)
                .query_async(&mut conn)
                .await
                .expect("DEL");
        }
    }
}
