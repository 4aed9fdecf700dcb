//! A lock over N independent masters (Redlock), with fences that never go
//! back. Each master is an [`Engine`] over one standalone server, with its
//! own healing connection and restart grace; this module asks them in
//! parallel and counts (its arithmetic is in [`quorum`](super::quorum)).
//!
//! Every request to a master runs in a task of its own, so a master that
//! is slow or out of reach costs the caller no more than the per-node
//! deadline, while the request itself runs on to its connection's command
//! timeout (which replaces a connection that stopped answering).
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
//! round-one reply ([`MasterClock`], [`quorum::RoundOneLimit`]): a request
//! the network held until after its release cannot grant to a token
//! nobody holds.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::deploy::conn::ClockReading;
use crate::engine::lease::LossReason;
use crate::engine::ops::{renew_one, Renewed};
use crate::engine::quorum::{self, Clocks, Tally};
use crate::engine::release::{release, release_in_background, Background, Tracked};
use crate::engine::{new_token, scripts, Answer, Engine};
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{millis, validate_lease, LockKeys, MIN_LEASE};

/// How far ahead of this host's clock a proposed fence is, in µs: enough
/// for masters whose clocks run a little ahead to take it.
const PROPOSAL_LEAD_US: u64 = 2_000;
/// How far past its own clock a master takes a proposed fence, in µs: a
/// host whose clock is further ahead gets the masters' own fences.
const PROPOSAL_AHEAD_US: u64 = 1_000_000;

/// The per-node deadline is never shorter than this.
pub(crate) const NODE_DEADLINE_FLOOR: Duration = Duration::from_millis(5);

/// How the masters of one Redlock are asked and counted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QuorumConfig {
    pub(crate) clocks: Clocks,
    /// The per-node deadline; a hundredth of the lease when not set.
    pub(crate) node_timeout: Option<Duration>,
    /// Validity a grant must have left to be reported; a tenth of the
    /// lease when not set.
    pub(crate) validity_floor: Option<Duration>,
    /// The pause between tries of a wait, before jitter.
    pub(crate) retry_delay: Duration,
}

/// The masters of one Redlock.
#[derive(Debug)]
pub(crate) struct Masters {
    pub(crate) nodes: Vec<Arc<Engine>>,
    pub(crate) config: QuorumConfig,
    /// Requests that outlived the round that sent them (a late grant, its
    /// fence or its release, a release a master answered late): what
    /// [`flush`](Masters::flush) waits for.
    pub(crate) inflight: Arc<Background>,
    /// The holds this process has, by lock key, each with its holder: what
    /// tells a holder's own second acquisition.
    pub(crate) mine: StdMutex<HoldMap>,
    /// What this client last read of each master's clock, by master.
    pub(crate) clocks: Vec<Arc<MasterClock>>,
}

/// What a client last read of one master's clock: the master's time in a
/// round-one reply, and when (and how long) that request was out. Every
/// round-one request carries the instant on the master's clock past which
/// it is too late to take the lock ([`quorum::RoundOneLimit`]).
#[derive(Debug, Default)]
pub(crate) struct MasterClock {
    sample: StdMutex<Option<ClockReading>>,
}

impl MasterClock {
    /// The limit of a round-one request sent now, once the master's clock
    /// was read; `window` is how long after sending it may still take the
    /// lock.
    fn limit(&self, now: Instant, window: Duration) -> Option<quorum::RoundOneLimit> {
        let sample = (*self.sample.lock().unwrap_or_else(PoisonError::into_inner))?;
        Some(quorum::RoundOneLimit::new(
            sample.server_us,
            sample.loose,
            now.saturating_duration_since(sample.sent),
            window,
        ))
    }

    /// The master's clock as read when this client's connection to it
    /// was made, until a reply is read: so that the client's first round
    /// one there carries a limit too.
    fn first(&self, reading: Option<ClockReading>) {
        let mut sample = self.sample.lock().unwrap_or_else(PoisonError::into_inner);
        if sample.is_none() {
            *sample = reading;
        }
    }

    /// The master ran a request sent at `sent` at `master_us` on its
    /// clock, and its reply came now.
    fn read(&self, master_us: u64, sent: Instant) {
        let sample = ClockReading {
            server_us: master_us,
            sent,
            loose: sent.elapsed(),
        };
        *self.sample.lock().unwrap_or_else(PoisonError::into_inner) = Some(sample);
    }
}

/// The holds of one process, by lock key, each with its holder.
pub(crate) type HoldMap = HashMap<String, Vec<(String, Weak<Hold>)>>;

/// What one acquisition asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask<'a> {
    /// Shared by the requests and the hold: a request to each master
    /// costs a reference count, not a copy of every key.
    pub(crate) keys: &'a Arc<LockKeys>,
    /// Who acquires, in this process (see [`Request::holder`](crate::engine::Request)).
    pub(crate) holder: &'a str,
    pub(crate) lease: Duration,
    pub(crate) renew: bool,
    pub(crate) hold_at_least: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
}

/// Where an acquisition's token stands, shared by the requests still in
/// flight: a grant that arrives once the acquisition gave up, or after
/// the hold ended, is released by the request that got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Trying,
    Held,
    /// Given up, or dropped: a grant that comes now releases itself.
    Over,
    /// Released by [`QuorumHeld::release`], which sends a release to every
    /// master: a grant that comes now is left to it (see
    /// [`PhaseState::late_grant`]).
    Released,
}

/// The phase, and every master whose grant was recorded while trying or
/// holding: a request records its grant, or sees the try over and
/// releases, under the one lock, so no grant slips between the two.
#[derive(Debug)]
struct PhaseState {
    phase: Phase,
    /// Each master that may hold the lock for this token, with the fence it
    /// stored in round one (`None`: an error after which it may have run
    /// the script, its reply lost).
    granted: Vec<(usize, Option<u64>)>,
    /// The fence, once the try decided it: a grant recorded from then on
    /// writes it to its master itself (round two for a late grant).
    fence: Option<u64>,
    /// Once released: each master whose release answered, and whether it
    /// took this token away there.
    released: Vec<(usize, bool)>,
    /// Once released: each master that granted before its release answered.
    late: Vec<usize>,
}

impl PhaseState {
    /// A grant (or a lost reply that may be one) from master `i` came
    /// after the hold was released. Its release, sent to every master
    /// after this master's round one, mostly took it away already, or
    /// will: only a release that answered without finding the token may
    /// have run before the grant. Whether the grant must release itself.
    fn late_grant(&mut self, i: usize) -> bool {
        match self.released.iter().find(|&&(j, _)| j == i) {
            Some(&(_, took)) => !took,
            None => {
                self.late.push(i);
                false
            }
        }
    }

    /// Master `i`'s release answered (`took`: it took the token away).
    /// Whether to release there once more: a grant came before this
    /// answer, and the release did not find it.
    fn release_answered(&mut self, i: usize, took: bool) -> bool {
        self.released.push((i, took));
        !took && self.late.contains(&i)
    }
}

/// What a round-one request does with a grant it got.
enum LateGrant {
    /// Counted by the try, or stored the fence already.
    Counted,
    /// The fence is decided and this master's counter is behind it.
    Fence(u64),
    /// The try is over, or the hold ended: nobody counts it.
    Release,
}

type SharedPhase = Arc<StdMutex<PhaseState>>;

fn phase(shared: &SharedPhase) -> MutexGuard<'_, PhaseState> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
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

/// One try over every master, as the caller of [`Masters::attempt`] sees it.
enum Try {
    Held(QuorumHeld),
    /// Not now: held elsewhere, or the grant came too late to be used.
    Busy(Option<Duration>),
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

impl Masters {
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    pub(crate) fn node_timeout(&self, lease: Duration) -> Duration {
        self.config
            .node_timeout
            .unwrap_or_else(|| quorum::node_deadline(lease, NODE_DEADLINE_FLOOR))
    }

    fn validity_floor(&self, lease: Duration) -> Duration {
        self.config.validity_floor.unwrap_or(lease / 10)
    }

    fn mine(&self) -> MutexGuard<'_, HoldMap> {
        self.mine.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The fence of a hold of `keys` that `holder` has here, neither
    /// released nor known lost.
    pub(crate) fn held_by(&self, keys: &LockKeys, holder: &str) -> Option<u64> {
        let mut mine = self.mine();
        let entries = mine.get_mut(&keys.lock)?;
        entries.retain(|(_, hold)| hold.upgrade().is_some_and(|h| !h.is_finished()));
        let found = entries.iter().find_map(|(who, hold)| {
            let hold = hold.upgrade()?;
            (who == holder && hold.loss().is_none()).then_some(hold.fence)
        });
        if entries.is_empty() {
            mine.remove(&keys.lock);
        }
        found
    }

    /// Refuses the own second acquisition of a holder: it would wait for
    /// itself.
    pub(crate) fn refuse_own_second_attempt(&self, ask: &Ask<'_>) -> Result<()> {
        match self.held_by(ask.keys, ask.holder) {
            Some(fence) => Err(crate::core::already_held(&ask.keys.name, fence)),
            None => Ok(()),
        }
    }

    fn remember(&self, holder: &str, hold: &Arc<Hold>) {
        let mut mine = self.mine();
        let entries = mine.entry(hold.keys.lock.clone()).or_default();
        entries.retain(|(_, held)| held.upgrade().is_some_and(|h| !h.is_finished()));
        entries.push((holder.to_owned(), Arc::downgrade(hold)));
    }

    fn forget(&self, hold: &Arc<Hold>) {
        let mut mine = self.mine();
        let Some(entries) = mine.get_mut(&hold.keys.lock) else {
            return;
        };
        entries.retain(|(_, held)| {
            !std::ptr::eq(held.as_ptr(), Arc::as_ptr(hold))
                && held.upgrade().is_some_and(|h| !h.is_finished())
        });
        if entries.is_empty() {
            mine.remove(&hold.keys.lock);
        }
    }

    pub(crate) fn command_timeout(&self) -> Duration {
        self.nodes
            .first()
            .map_or(Duration::from_secs(2), |node| node.command_timeout())
    }

    /// Runs `op` on the masters `which` picks, all at once; the answers
    /// arrive as they come. Requests still in flight when the caller stops
    /// listening run on in a task of their own (see [`Fanned`]).
    fn fan_out<T, F, Fut>(&self, which: impl Fn(usize) -> bool, op: F) -> Fanned<T>
    where
        F: Fn(usize, Arc<Engine>) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let futures = FuturesUnordered::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if !which(i) {
                continue;
            }
            // Unconstrained by the task's budget: a request that is ready
            // to go leaves at the first poll. Held back by the budget, it
            // could be sent after the caller's next request to the same
            // master (a release after the next acquire).
            let request = tokio::task::unconstrained(op(i, Arc::clone(node)));
            futures.push(Box::pin(async move { (i, request.await) }) as Pending<T>);
        }
        Fanned {
            futures,
            inflight: Arc::clone(&self.inflight),
        }
    }

    /// Waits until the requests that outlived their rounds are done, then
    /// until every master's background releases are, each at most a few
    /// command timeouts.
    pub(crate) async fn flush(&self) {
        let limit = self.command_timeout().saturating_mul(4);
        let _ = tokio::time::timeout(limit, self.inflight.idle()).await;
        for node in &self.nodes {
            node.flush().await;
        }
    }

    /// One try: round one on every master, round two on those that granted.
    async fn attempt(self: &Arc<Self>, ask: &Ask<'_>, node_timeout: Duration) -> Result<Try> {
        let n = self.len();
        let token: Arc<str> = new_token()?.into();
        let shared: SharedPhase = Arc::new(StdMutex::new(PhaseState {
            phase: Phase::Trying,
            granted: Vec::new(),
            fence: None,
            released: Vec::new(),
            late: Vec::new(),
        }));
        let start = Instant::now();
        let rx = {
            let keys = Arc::clone(ask.keys);
            let token = Arc::clone(&token);
            let lease = ask.lease;
            let shared = &shared;
            let proposed = proposal();
            let masters = Arc::clone(self);
            self.fan_out(
                |_| true,
                move |i, engine| {
                    let (keys, token, shared) =
                        (Arc::clone(&keys), Arc::clone(&token), Arc::clone(shared));
                    let masters = Arc::clone(&masters);
                    async move {
                        let clock = masters.clocks.get(i).cloned().unwrap_or_default();
                        let mut refused_by = None;
                        // A grant is still of use: the try, or its hold,
                        // goes on.
                        let wanted = || matches!(phase(&shared).phase, Phase::Trying | Phase::Held);
                        let answer = take_on(
                            &engine,
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
                                    LockKeys::clone(&keys),
                                    token.to_string(),
                                    false,
                                    None,
                                ),
                                // Round two, for this master alone: the
                                // try (or the hold) no longer listens, and
                                // whatever ends the hold releases here too.
                                LateGrant::Fence(fence) => {
                                    fence_late(&engine, &keys, &token, fence).await;
                                }
                                LateGrant::Counted => {}
                            }
                            if answer.is_err() {
                                release_once_refused(
                                    &masters,
                                    &engine,
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
            masters: Arc::clone(self),
            keys: Arc::clone(ask.keys),
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
            return Ok(Try::Busy(hint));
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
            let fence = quorum::fence(&fences);
            state.fence = fence;
            fence
        };
        let Some(fence) = fence else {
            attempt.give_up().await;
            return Ok(Try::Busy(None));
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
        let confirmed = if stored >= tally.majority() {
            if !behind.is_empty() {
                // Not waited for: the majority has the fence already.
                drop(self.fan_out_fence(ask.keys, &attempt.token, fence, &behind));
            }
            stored
        } else {
            stored
                + self
                    .write_fence(
                        ask.keys,
                        &attempt.token,
                        fence,
                        &behind,
                        tally.majority() - stored,
                        node_timeout,
                    )
                    .await
        };
        let floor = self.validity_floor(ask.lease);
        if confirmed < tally.majority()
            || !self.config.clocks.usable(ask.lease, start.elapsed(), floor)
        {
            // Too few confirmed, or too little is left of the lease to use.
            attempt.give_up().await;
            return Ok(Try::Busy(None));
        }
        let held = QuorumHeld::new(self, ask, &mut attempt, fence, start, node_timeout);
        Ok(Try::Held(held))
    }

    /// Sends round two to the masters in `which`.
    fn fan_out_fence(
        &self,
        keys: &Arc<LockKeys>,
        token: &Arc<str>,
        fence: u64,
        which: &[usize],
    ) -> Fanned<bool> {
        let keys = Arc::clone(keys);
        let token = Arc::clone(token);
        self.fan_out(
            |i| which.contains(&i),
            move |_, engine| {
                let (keys, token) = (Arc::clone(&keys), Arc::clone(&token));
                async move { fence_on(&engine, &keys, &token, fence).await }
            },
        )
    }

    /// Round two: how many of the masters in `behind` stored `fence` while
    /// `token` still held the lock there. Returns once `needed` did, or
    /// once they cannot.
    async fn write_fence(
        &self,
        keys: &Arc<LockKeys>,
        token: &Arc<str>,
        fence: u64,
        behind: &[usize],
        needed: usize,
        node_timeout: Duration,
    ) -> usize {
        let mut rx = self.fan_out_fence(keys, token, fence, behind);
        let (mut yes, mut answered) = (0, 0);
        let until = Instant::now() + node_timeout;
        while yes < needed && behind.len() - answered + yes >= needed {
            match rx.recv_until(until).await {
                Ok(Some((_, Ok(true)))) => {
                    yes += 1;
                    answered += 1;
                }
                Ok(Some(_)) => answered += 1,
                Ok(None) | Err(_) => break,
            }
        }
        yes
    }

    /// Waits for the lock, at most `wait` if given.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        ask: &Ask<'_>,
        wait: Option<Duration>,
    ) -> Result<QuorumHeld> {
        match self.tries(ask, wait, false).await? {
            Some(held) => Ok(held),
            None => Err(Error::wait_timed_out(
                &ask.keys.name,
                wait.unwrap_or_default(),
                None,
            )),
        }
    }

    /// One try: the guard, or `None` when the lock is held elsewhere.
    pub(crate) async fn try_acquire(self: &Arc<Self>, ask: &Ask<'_>) -> Result<Option<QuorumHeld>> {
        self.tries(ask, None, true).await
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
        self: &Arc<Self>,
        ask: &Ask<'_>,
        wait: Option<Duration>,
        once: bool,
    ) -> Result<Option<QuorumHeld>> {
        let started = Instant::now();
        let deadline = wait.map(|wait| started + wait);
        let mut blocked_since: Option<Instant> = None;
        let mut node_timeout = self.node_timeout(ask.lease);
        loop {
            let tried_at = Instant::now();
            let hint = match self.attempt(ask, node_timeout).await? {
                Try::Held(held) => return Ok(Some(held)),
                Try::Blocked {
                    tally,
                    error,
                    missed,
                    too_late,
                } => {
                    let since = *blocked_since.get_or_insert(tried_at);
                    if missed + too_late == 0
                        || since.elapsed() >= self.command_timeout()
                        || deadline.is_some_and(|deadline| Instant::now() >= deadline)
                    {
                        return Err(self.no_quorum(ask.keys, tally, error));
                    }
                    // Too many masters missed the deadline: on a loaded
                    // host, or with masters slower than the default
                    // deadline, the next try waits longer for them.
                    if missed > 0 && self.config.node_timeout.is_none() {
                        node_timeout = quorum::widened_deadline(node_timeout, ask.lease);
                    }
                    None
                }
                Try::Busy(_) if once => return Ok(None),
                Try::Busy(hint) => {
                    blocked_since = None;
                    // A majority answered in time: back to the default
                    // deadline, so that a master that stays silent does
                    // not hold each next try for the widened one.
                    node_timeout = self.node_timeout(ask.lease);
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
            let base = hint.map_or(self.config.retry_delay, |hint| {
                hint.clamp(
                    MIN_LEASE.min(self.config.retry_delay),
                    self.config.retry_delay,
                )
            });
            tokio::time::sleep(quorum::retry_pause(base, jitter(), left)).await;
        }
    }

    /// The error of a try that too many unreachable masters kept from a
    /// majority.
    fn no_quorum(&self, keys: &LockKeys, tally: Tally, last: Option<Error>) -> Error {
        let n = tally.n;
        let mut error = Error::new(
            ErrorKind::Quorum,
            format!(
                "lock {:?}: quorum not reached: {} of {n} masters did not answer (a majority is \
                 {}){}; bring the masters back, or check their URLs",
                keys.name,
                tally.failed,
                tally.majority(),
                last.as_ref()
                    .map(|e| format!(", last: {}", e.situation()))
                    .unwrap_or_default()
            ),
        )
        .remedy_of(last.as_ref());
        if let Some(source) = last {
            error = error.with_source(source);
        }
        error
    }

    /// Runs `op` on every master and counts the answers until the count is
    /// decided, or `until`.
    async fn count<F, Fut>(&self, until: Instant, op: F) -> (Tally, Option<Error>)
    where
        F: Fn(usize, Arc<Engine>) -> Fut,
        Fut: Future<Output = Result<bool>> + Send + 'static,
    {
        self.fan_out(|_| true, op)
            .tally(self.len(), until, Stop::Decided)
            .await
    }

    /// Renews `token` to `lease` on every master.
    async fn renew_all(
        &self,
        keys: &Arc<LockKeys>,
        token: &Arc<str>,
        lease: Duration,
        until: Instant,
    ) -> (Tally, Option<Error>) {
        let (keys, token) = (Arc::clone(keys), Arc::clone(token));
        self.count(until, move |_, engine| {
            let (keys, token) = (Arc::clone(&keys), Arc::clone(&token));
            async move {
                let renewed = renew_one(&engine, &keys, &token, lease).await?;
                Ok(renewed == Renewed::Yes)
            }
        })
        .await
    }

    /// Releases `token` on every master; how many held it. Waits for every
    /// answer until `until`, and no longer than `patience` once a majority
    /// is decided; with `quick`, not at all once a majority confirmed.
    ///
    /// A master that fails with a transient error (a connection reset, no
    /// answer in time) is tried again in the background a few times, while
    /// the lease may still be live there (`live_until`, when known): the
    /// caller's answer does not wait for that, and a flush does.
    async fn release_all(&self, release: Releasing<'_>) -> (Tally, Option<Error>) {
        let Releasing {
            keys,
            token,
            hold_until,
            until,
            patience,
            live_until,
            quick,
            phase: shared,
        } = release;
        let (keys, token) = (Arc::clone(keys), Arc::clone(token));
        let rx = self.fan_out(
            |_| true,
            move |i, engine| {
                let (keys, token, shared) = (Arc::clone(&keys), Arc::clone(&token), shared.clone());
                async move {
                    let answer =
                        crate::engine::release::release(&engine, &keys, &token, false, hold_until)
                            .await;
                    let again = shared.is_some_and(|shared| {
                        phase(&shared).release_answered(i, matches!(answer, Ok(true)))
                    });
                    if again {
                        release_in_background(
                            Arc::clone(&engine),
                            LockKeys::clone(&keys),
                            token.to_string(),
                            false,
                            hold_until,
                        );
                    }
                    if let Err(error) = &answer {
                        if error.is_transient()
                            && live_until.is_none_or(|live| Instant::now() < live)
                        {
                            release_in_background(
                                Arc::clone(&engine),
                                LockKeys::clone(&keys),
                                token.to_string(),
                                false,
                                hold_until,
                            );
                        }
                    }
                    answer
                }
            },
        );
        let stop = if quick {
            Stop::Won(patience)
        } else {
            Stop::After(patience)
        };
        rx.tally(self.len(), until, stop).await
    }

    /// Releases `token` on every master, for a lease taken elsewhere; how
    /// many held it.
    pub(crate) async fn release_token(&self, keys: &Arc<LockKeys>, token: &str) -> Result<usize> {
        let (tally, last) = self
            .release_all(Releasing {
                keys,
                token: &token.into(),
                hold_until: None,
                until: Instant::now() + self.command_timeout(),
                patience: self.command_timeout(),
                live_until: None,
                quick: false,
                phase: None,
            })
            .await;
        if tally.won() {
            return Ok(tally.yes);
        }
        if tally.surely_lost() || tally.failed == 0 {
            return Err(Error::not_held(format!(
                "lock {:?} is held by this token on {} of {} masters, fewer than a majority \
                 ({}): it expired, or was released or removed (released where it was held)",
                keys.name,
                tally.yes,
                tally.n,
                tally.majority()
            )));
        }
        Err(self.no_quorum(keys, tally, last))
    }

    /// Sets the lease of `token` to `lease` on every master; a majority
    /// must confirm.
    pub(crate) async fn extend_token(
        &self,
        keys: &Arc<LockKeys>,
        token: &str,
        lease: Duration,
    ) -> Result<()> {
        validate_lease(lease)?;
        let until = Instant::now() + self.command_timeout();
        let (tally, last) = self.renew_all(keys, &token.into(), lease, until).await;
        if tally.won() {
            Ok(())
        } else if tally.surely_lost() {
            Err(Error::not_held(format!(
                "lock {:?} is held by this token on fewer than a majority of its {} masters: \
                 it expired, or was released or removed",
                keys.name, tally.n
            )))
        } else {
            Err(self.no_quorum(keys, tally, last))
        }
    }
}

/// What [`Masters::release_all`] releases, and how long it waits.
struct Releasing<'a> {
    keys: &'a Arc<LockKeys>,
    token: &'a Arc<str>,
    hold_until: Option<Instant>,
    until: Instant,
    patience: Duration,
    live_until: Option<Instant>,
    quick: bool,
    /// The released hold's phase: each master's answer is recorded there,
    /// for the grants of its round one that come late.
    phase: Option<SharedPhase>,
}

type Pending<T> = std::pin::Pin<Box<dyn Future<Output = (usize, Result<T>)> + Send>>;

/// Requests to several masters in flight, polled together by whoever
/// listens for their answers. Dropped with requests still in flight (the
/// round was decided, or its caller gave up), it hands them to a task of
/// their own, so that each runs on to its answer or its connection's
/// command timeout: a grant that comes late is released by its request,
/// and a connection that stopped answering is replaced.
struct Fanned<T: Send + 'static> {
    futures: FuturesUnordered<Pending<T>>,
    /// Counts the task that runs on what is left, for a flush.
    inflight: Arc<Background>,
}

/// When a count of yes/no answers stops listening before every master
/// answered (it never listens past its `until`).
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// Once the count is decided either way.
    Decided,
    /// Once a majority said yes; otherwise as `After`.
    Won(Duration),
    /// Once decided, no longer than this after the count began.
    After(Duration),
}

impl Fanned<bool> {
    /// Counts the answers of `n` masters (yes, no, failed) until `until`,
    /// or earlier as `stop` says; the masters that did not answer by then
    /// count as failed. With the last error seen.
    async fn tally(mut self, n: usize, until: Instant, stop: Stop) -> (Tally, Option<Error>) {
        let began = Instant::now();
        let mut tally = Tally::new(n);
        let mut last = None;
        while tally.pending() > 0 {
            let by = match stop {
                Stop::Decided if tally.decided() => break,
                Stop::Won(_) if tally.won() => break,
                Stop::Won(patience) | Stop::After(patience) if tally.decided() => {
                    until.min(began.checked_add(patience).unwrap_or(until))
                }
                _ => until,
            };
            match self.recv_until(by).await {
                Ok(Some((_, Ok(true)))) => tally.yes += 1,
                Ok(Some((_, Ok(false)))) => tally.no += 1,
                Ok(Some((_, Err(error)))) => {
                    tally.failed += 1;
                    last = Some(error);
                }
                Ok(None) | Err(_) => {
                    tally.failed += tally.pending();
                    break;
                }
            }
        }
        (tally, last)
    }
}

impl<T: Send + 'static> Fanned<T> {
    /// The next answer, `Ok(None)` when all came, `Err` past `until`.
    async fn recv_until(
        &mut self,
        until: Instant,
    ) -> std::result::Result<Option<(usize, Result<T>)>, tokio::time::error::Elapsed> {
        tokio::time::timeout_at(until, self.futures.next()).await
    }
}

impl<T: Send + 'static> Drop for Fanned<T> {
    fn drop(&mut self) {
        if self.futures.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut futures = std::mem::take(&mut self.futures);
        let tracked = Tracked::new(&self.inflight);
        runtime.spawn(async move {
            let _tracked = tracked;
            while futures.next().await.is_some() {}
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers of three masters: each after `ms` milliseconds.
    fn answers(replies: [(u64, Result<bool>); 3]) -> Fanned<bool> {
        let futures = FuturesUnordered::new();
        for (i, (ms, reply)) in replies.into_iter().enumerate() {
            futures.push(Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                (i, reply)
            }) as Pending<bool>);
        }
        Fanned {
            futures,
            inflight: Arc::default(),
        }
    }

    fn gone() -> Error {
        Error::new(ErrorKind::Connection, "reset").transient()
    }

    /// Three masters of the test kit, and a Redlock over them whose lock
    /// "job" was taken and released once (every master's clock read).
    async fn read_masters() -> (leasehold_testkit::Masters, crate::Redlock, LockKeys) {
        let servers = leasehold_testkit::Masters::start(3);
        let redlock = crate::Redlock::builder(servers.urls())
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

    fn reading(masters: &Masters, i: usize) -> ClockReading {
        let sample = masters.clocks[i].sample.lock().expect("a reading");
        sample.expect("read")
    }

    /// Sets what the client read of a master's clock 10 s back, as if the
    /// master's clock had stepped forward since.
    fn set_back(clock: &MasterClock) {
        if let Some(sample) = clock.sample.lock().expect("a reading").as_mut() {
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
        let masters = Arc::clone(redlock.masters());
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
        let masters = Arc::clone(redlock.masters());
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
        let masters = Arc::clone(redlock.masters());
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
        let masters = Arc::clone(redlock.masters());
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
            let shared = Arc::new(StdMutex::new(PhaseState {
                phase: state,
                ..released()
            }));
            let at = Instant::now() + Duration::from_millis(200);
            release_once_refused(
                &masters,
                &masters.nodes[0],
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

    fn released() -> PhaseState {
        PhaseState {
            phase: Phase::Released,
            granted: Vec::new(),
            fence: None,
            released: Vec::new(),
            late: Vec::new(),
        }
    }

    /// A grant that comes after the release is taken away once, whichever
    /// of the two answers is heard first: by the release, when it ran
    /// after the grant on that master; by one more release, when it ran
    /// before.
    #[test]
    fn a_grant_after_the_release_is_released_once_in_either_order() {
        // The grant is heard first.
        let mut state = released();
        assert!(!state.late_grant(1));
        assert!(!state.release_answered(1, true), "the release took it");
        let mut state = released();
        assert!(!state.late_grant(1));
        assert!(
            state.release_answered(1, false),
            "the release ran before it"
        );
        // The release's answer is heard first.
        let mut state = released();
        assert!(!state.release_answered(1, true));
        assert!(!state.late_grant(1), "the release took it");
        let mut state = released();
        assert!(!state.release_answered(1, false));
        assert!(state.late_grant(1), "the release ran before it");
        // Another master's answers say nothing of this one.
        let mut state = released();
        assert!(!state.release_answered(0, false));
        assert!(!state.late_grant(1));
        assert!(!state.release_answered(2, false));
        assert!(state.release_answered(1, false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_count_stops_as_told() {
        let far = Instant::now() + Duration::from_secs(60);
        let slow_third = || answers([(1, Ok(true)), (2, Ok(true)), (10_000, Ok(true))]);
        // Decided, or won: the third is not waited for.
        for stop in [Stop::Decided, Stop::Won(Duration::from_secs(30))] {
            let (tally, last) = slow_third().tally(3, far, stop).await;
            assert_eq!((tally.yes, tally.no, tally.failed), (2, 0, 0));
            assert!(last.is_none());
        }
        // With patience, until it runs out: the third counts as failed.
        let (tally, _) = slow_third()
            .tally(3, far, Stop::After(Duration::from_millis(100)))
            .await;
        assert_eq!((tally.yes, tally.failed), (2, 1));
        // With patience enough, every answer.
        let (tally, _) = slow_third()
            .tally(3, far, Stop::After(Duration::from_secs(30)))
            .await;
        assert_eq!(tally.yes, 3);
        // Not won: a quick count waits as a patient one does, and says
        // what failed.
        let (tally, last) = answers([(1, Ok(false)), (2, Err(gone())), (3, Ok(true))])
            .tally(3, far, Stop::Won(Duration::from_secs(1)))
            .await;
        assert_eq!((tally.yes, tally.no, tally.failed), (1, 1, 1));
        assert!(last.is_some_and(|e| e.is_transient()));
        // Never past `until`.
        let soon = Instant::now() + Duration::from_millis(5);
        let (tally, _) = answers([(1, Ok(true)), (50, Ok(true)), (50, Ok(true))])
            .tally(3, soon, Stop::After(Duration::from_secs(30)))
            .await;
        assert_eq!((tally.yes, tally.failed), (1, 2));
    }
}

/// A try in progress: what it must undo if it fails or is dropped.
struct Attempt {
    masters: Arc<Masters>,
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
        let mut rx = self.masters.fan_out(
            |i| granted.contains(&i),
            move |_, engine| {
                let (keys, token) = (Arc::clone(&keys), Arc::clone(&token));
                async move { release(&engine, &keys, &token, false, None).await }
            },
        );
        let until = Instant::now() + self.masters.command_timeout();
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
            if let Some(node) = self.masters.nodes.get(i) {
                release_in_background(
                    Arc::clone(node),
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
/// Once the master's clock was read (when the connection was made, or
/// from an earlier reply), the request carries its limit: past half a
/// command timeout after sending, it takes nothing. `refused_by` is then set, before the request leaves, to when
/// a request sent to this master surely runs after that limit: a release
/// sent earlier (on a new connection, the request's own given up) may
/// run before a round one that the network still holds. Within the limit,
/// such a release finds no token and names it in the master's counter,
/// and the round one that comes after it takes nothing (see
/// `mark_released` in `lib.lua`). A request
/// refused as too late is sent once more at once, with a limit from the
/// refusal's reading of the clock, while a grant is still `wanted`.
async fn take_on(
    engine: &Engine,
    clock: &MasterClock,
    (keys, token): (&LockKeys, &str),
    lease: Duration,
    proposed: u64,
    wanted: &(dyn Fn() -> bool + Sync),
    refused_by: &mut Option<Instant>,
) -> Result<Grant> {
    let route = engine.route(keys).await?;
    clock.first(route.server().clock);
    if let Some(left) = engine.grace_left(&keys.lock, route.server()) {
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
        let limit = clock.limit(sent, engine.command_timeout() / 2);
        *refused_by = limit.and_then(|limit| sent.checked_add(limit.refused_after));
        let limit = limit.map(|limit| limit.master_us.to_string());
        let mut args = [&b""[..]; 7];
        args[..6].copy_from_slice(&fixed);
        args[6] = limit.as_deref().unwrap_or_default().as_bytes();
        let reply = match engine
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
            Ok(Grant::Busy(int(1).and_then(crate::engine::pttl)))
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
            Err(crate::engine::Kind::Mutex.conflict(name, &found))
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
    masters: &Arc<Masters>,
    engine: &Arc<Engine>,
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
    let tracked = Tracked::new(&masters.inflight);
    let (engine, shared) = (Arc::clone(engine), Arc::clone(shared));
    let (keys, token) = (keys.clone(), token.to_owned());
    runtime.spawn(async move {
        let _tracked = tracked;
        tokio::time::sleep_until(at).await;
        if matches!(phase(&shared).phase, Phase::Over | Phase::Released) {
            release_in_background(engine, keys, token, false, None);
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
async fn fence_on(engine: &Engine, keys: &LockKeys, token: &str, fence: u64) -> Result<bool> {
    let fence = fence.to_string();
    let reply = engine
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
async fn fence_late(engine: &Engine, keys: &LockKeys, token: &str, fence: u64) {
    for pause in [25, 100] {
        match fence_on(engine, keys, token, fence).await {
            Err(error) if error.is_transient() => {
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            _ => return,
        }
    }
    let _ = fence_on(engine, keys, token, fence).await;
}

fn jitter() -> u32 {
    let mut bytes = [0u8; 4];
    // Without randomness the pause is not jittered; it is still bounded.
    let _ = getrandom::fill(&mut bytes);
    u32::from_le_bytes(bytes)
}

#[derive(Debug)]
struct Timing {
    lease: Duration,
    /// On the monotonic clock: the start of the last successful round plus
    /// its lease, minus the drift.
    deadline: Instant,
    next_renewal: Instant,
    capped: bool,
    loss: Option<LossReason>,
}

/// A lease held on a majority of the masters.
#[derive(Debug)]
pub(crate) struct Hold {
    masters: Arc<Masters>,
    keys: Arc<LockKeys>,
    token: Arc<str>,
    fence: u64,
    renew: bool,
    hold_until: Option<Instant>,
    cap: Option<Instant>,
    max_hold: Option<Duration>,
    timing: StdMutex<Timing>,
    lost_tx: watch::Sender<u64>,
    /// One renewal, extend or release at a time.
    turn: tokio::sync::Mutex<()>,
    shared: SharedPhase,
    finished: AtomicBool,
    /// Wakes the watchdog: a new renewal time, or the end.
    wake: Notify,
}

/// What a [`LeaseGuard`](crate::LeaseGuard) holds for a Redlock.
#[derive(Debug)]
pub(crate) struct QuorumHeld {
    hold: Arc<Hold>,
    done: AtomicBool,
    _holding: crate::engine::metrics::Holding,
}

impl QuorumHeld {
    fn new(
        masters: &Arc<Masters>,
        ask: &Ask<'_>,
        attempt: &mut Attempt,
        fence: u64,
        start: Instant,
        _node_timeout: Duration,
    ) -> Self {
        phase(&attempt.shared).phase = Phase::Held;
        attempt.settled = true;
        let clocks = masters.config.clocks;
        let cap = ask.max_hold.map(|max| start + max);
        let mut deadline = start + clocks.trusted_for(ask.lease);
        if let Some(cap) = cap {
            deadline = deadline.min(cap);
        }
        let (lost_tx, _) = watch::channel(0);
        let hold = Arc::new(Hold {
            masters: Arc::clone(masters),
            keys: Arc::clone(ask.keys),
            token: Arc::clone(&attempt.token),
            fence,
            renew: ask.renew,
            hold_until: ask.hold_at_least.map(|hold| Instant::now() + hold),
            cap,
            max_hold: ask.max_hold,
            timing: StdMutex::new(Timing {
                lease: ask.lease,
                deadline,
                next_renewal: start + ask.lease / 3,
                capped: cap.is_some_and(|cap| start + ask.lease >= cap),
                loss: None,
            }),
            lost_tx,
            turn: tokio::sync::Mutex::new(()),
            shared: Arc::clone(&attempt.shared),
            finished: AtomicBool::new(false),
            wake: Notify::new(),
        });
        masters.remember(ask.holder, &hold);
        if ask.renew {
            tokio::spawn(watchdog(Arc::clone(&hold)));
        }
        QuorumHeld {
            hold,
            done: AtomicBool::new(false),
            _holding: crate::engine::metrics::Holding::new(crate::engine::Kind::Mutex),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.hold.keys.name
    }

    pub(crate) fn fence(&self) -> u64 {
        self.hold.fence
    }

    pub(crate) fn token(&self) -> &str {
        &self.hold.token
    }

    pub(crate) fn masters(&self) -> usize {
        self.hold.masters.len()
    }

    pub(crate) fn loss(&self) -> Option<LossReason> {
        self.hold.loss()
    }

    pub(crate) async fn lost(&self) {
        self.hold.lost().await;
    }

    pub(crate) fn valid_for(&self) -> Duration {
        if self.loss().is_some() {
            return Duration::ZERO;
        }
        self.hold
            .timing()
            .deadline
            .saturating_duration_since(Instant::now())
    }

    /// Sets the lease to `length` from now on every master. A majority must
    /// confirm; short of that the lease is left as it was (never shortened
    /// below what a shorter `length` may have set), and nothing is released.
    pub(crate) async fn extend(&self, length: Duration) -> Result<()> {
        validate_lease(length)?;
        let hold = &self.hold;
        if let Some(reason) = hold.loss() {
            return Err(hold.lost_error(reason));
        }
        let _turn = hold.turn.lock().await;
        let sent = Instant::now();
        let Some(length) = hold.cut_at_cap(length, sent) else {
            hold.mark_lost(LossReason::MaxHoldReached);
            return Err(hold.lost_error(LossReason::MaxHoldReached));
        };
        // Until a majority confirms, trust the shorter of the old and the
        // new lease: a shortening may take effect on the masters that got it.
        hold.extending(sent, length);
        let until = hold.deadline().min(sent + hold.masters.command_timeout());
        let (tally, last) = hold
            .masters
            .renew_all(&hold.keys, &hold.token, length, until)
            .await;
        if tally.won() {
            hold.renewed(sent, length);
            hold.wake.notify_one();
            return match hold.loss() {
                Some(reason) => Err(hold.lost_error(reason)),
                None => Ok(()),
            };
        }
        if tally.surely_lost() {
            hold.mark_lost(LossReason::TokenGone);
            return Err(hold.lost_error(LossReason::TokenGone));
        }
        let mut error = Error::new(
            ErrorKind::Quorum,
            format!(
                "extend of lock {:?} (fence {}) reached {} of {} masters, fewer than a majority \
                 ({}): quorum not reached; the lease is left as it was{}",
                hold.keys.name,
                hold.fence,
                tally.yes,
                tally.n,
                tally.majority(),
                last.as_ref()
                    .map(|e| format!(" (last: {})", e.situation()))
                    .unwrap_or_default()
            ),
        )
        .remedy_of(last.as_ref());
        if let Some(last) = last {
            error = error.with_source(last);
        }
        Err(error)
    }

    /// Releases on every master in parallel; on how many it was held. With
    /// `count_all`, every master's answer is waited for (up to a per-node
    /// deadline past the decision); without, the call returns once a
    /// majority confirmed, and the others' releases run on in the
    /// background.
    pub(crate) async fn release(self, count_all: bool) -> Result<usize> {
        let hold = Arc::clone(&self.hold);
        // The turn first (a renewal may hold it): a release dropped while it
        // waits leaves this guard to its drop, which releases everywhere in
        // the background. From the finish on, the release below is sent to
        // every master before this future yields.
        let _turn = hold.turn.lock().await;
        self.finish(Some(Phase::Released));
        let masters = &hold.masters;
        let timeout = masters.command_timeout();
        let lease = hold.timing().lease;
        let (tally, last) = masters
            .release_all(Releasing {
                keys: &hold.keys,
                token: &hold.token,
                hold_until: hold.hold_until,
                until: Instant::now() + timeout,
                patience: masters.node_timeout(lease),
                // The master's key lives at most a lease past the last
                // round that set it, give or take the drift.
                live_until: Some(
                    hold.deadline()
                        + masters.config.clocks.drift(lease).saturating_mul(2)
                        + hold.hold_until.map_or(Duration::ZERO, |until| {
                            until.saturating_duration_since(Instant::now())
                        }),
                ),
                quick: !count_all,
                phase: Some(Arc::clone(&hold.shared)),
            })
            .await;
        if let Some(reason) = hold.loss() {
            return Err(hold.lost_error(reason));
        }
        if tally.won() {
            return Ok(tally.yes);
        }
        if tally.surely_lost() || tally.failed == 0 {
            hold.mark_lost(LossReason::TokenGone);
            return Err(hold.lost_error(LossReason::TokenGone));
        }
        Err(Error::new(
            ErrorKind::Connection,
            format!(
                "release of lock {:?} (fence {}) reached {} of {} masters that held it, and {} \
                 did not answer, so whether the lease held to the end is unknown{}; the lock \
                 expires by itself at the end of its lease",
                hold.keys.name,
                hold.fence,
                tally.yes,
                tally.n,
                tally.failed,
                last.as_ref()
                    .map(|e| format!(" (last: {})", e.situation()))
                    .unwrap_or_default()
            ),
        )
        .remedy_of(last.as_ref()))
    }

    /// Stops renewing without releasing. A grant that comes later is
    /// fenced and kept, as the lease lives on.
    pub(crate) fn detach(self) {
        self.finish(None);
    }

    /// This guard lets go of the hold; true the first time only. The hold
    /// goes to phase `end` (see [`Phase`]); with none (detached), a grant
    /// that comes later is kept.
    fn finish(&self, end: Option<Phase>) -> bool {
        if self.done.swap(true, Ordering::AcqRel) {
            return false;
        }
        if let Some(end) = end {
            phase(&self.hold.shared).phase = end;
        }
        self.hold.finished.store(true, Ordering::Release);
        self.hold.masters.forget(&self.hold);
        // A lease that ran out while nobody looked is reported now.
        self.hold.loss();
        self.hold.wake.notify_one();
        true
    }
}

impl Drop for QuorumHeld {
    fn drop(&mut self) {
        if !self.finish(Some(Phase::Over)) {
            return;
        }
        // On every master, counted by each master's engine so that a
        // flush waits for them.
        let hold = &self.hold;
        for node in &hold.masters.nodes {
            release_in_background(
                Arc::clone(node),
                LockKeys::clone(&hold.keys),
                hold.token.to_string(),
                false,
                hold.hold_until,
            );
        }
    }
}

impl Hold {
    fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    fn timing(&self) -> MutexGuard<'_, Timing> {
        self.timing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn deadline(&self) -> Instant {
        self.timing().deadline
    }

    fn loss(&self) -> Option<LossReason> {
        let mut timing = self.timing();
        if timing.loss.is_none() && Instant::now() >= timing.deadline {
            let reason = if timing.capped {
                LossReason::MaxHoldReached
            } else {
                LossReason::DeadlinePassed
            };
            timing.loss = Some(reason);
            drop(timing);
            crate::engine::metrics::lease_lost(&self.keys.name, reason);
            self.signal();
            return Some(reason);
        }
        timing.loss
    }

    fn mark_lost(&self, reason: LossReason) {
        let mut timing = self.timing();
        if timing.loss.is_none() {
            timing.loss = Some(reason);
            drop(timing);
            crate::engine::metrics::lease_lost(&self.keys.name, reason);
            self.signal();
        }
    }

    fn signal(&self) {
        self.lost_tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    async fn lost(&self) {
        let mut rx = self.lost_tx.subscribe();
        loop {
            rx.borrow_and_update();
            if self.loss().is_some() {
                return;
            }
            let deadline = self.deadline();
            tokio::select! {
                _ = rx.changed() => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    fn cut_at_cap(&self, length: Duration, now: Instant) -> Option<Duration> {
        let Some(cap) = self.cap else {
            return Some(length);
        };
        let left = cap.saturating_duration_since(now);
        if left < MIN_LEASE {
            self.timing().capped = true;
            return None;
        }
        Some(length.min(left))
    }

    fn trusted_until(&self, sent: Instant, length: Duration) -> Instant {
        let deadline = sent + self.masters.config.clocks.trusted_for(length);
        self.cap.map_or(deadline, |cap| deadline.min(cap))
    }

    fn extending(&self, sent: Instant, length: Duration) {
        let deadline = self.trusted_until(sent, length);
        let mut timing = self.timing();
        if deadline < timing.deadline {
            timing.deadline = deadline;
            drop(timing);
            self.signal();
        }
    }

    /// A majority renewed `length` in a round that started at `sent`.
    fn renewed(&self, sent: Instant, length: Duration) {
        let deadline = self.trusted_until(sent, length);
        let mut timing = self.timing();
        if timing.loss.is_some() || Instant::now() >= timing.deadline {
            return;
        }
        let earlier = deadline < timing.deadline;
        timing.deadline = deadline;
        if self.cap.is_some_and(|cap| sent + length >= cap) {
            timing.capped = true;
        } else {
            timing.lease = length;
        }
        timing.next_renewal = sent + length / 3;
        drop(timing);
        if earlier {
            self.signal();
        }
    }

    fn lost_error(&self, reason: LossReason) -> Error {
        Error::not_held(format!(
            "lease on lock {:?} (fence {}) over {} masters was lost: {}",
            self.keys.name,
            self.fence,
            self.masters.len(),
            reason.describe(self.renew, self.max_hold)
        ))
    }
}

/// Renews the lease on every master at a third of its lease, in parallel,
/// until it is finished or lost. A round that reaches fewer than a
/// majority loses the lease.
async fn watchdog(hold: Arc<Hold>) {
    loop {
        let (at, capped) = {
            let timing = hold.timing();
            (timing.next_renewal, timing.capped)
        };
        if hold.finished.load(Ordering::Acquire) || hold.loss().is_some() {
            return;
        }
        if capped {
            // Nothing renews past the max hold: report the loss at the deadline.
            tokio::select! {
                () = tokio::time::sleep_until(hold.deadline()) => { hold.loss(); }
                () = hold.wake.notified() => {}
            }
            continue;
        }
        tokio::select! {
            () = tokio::time::sleep_until(at) => {}
            () = hold.wake.notified() => continue,
        }
        let _turn = hold.turn.lock().await;
        if hold.finished.load(Ordering::Acquire) || hold.loss().is_some() {
            return;
        }
        let sent = Instant::now();
        let length = hold.timing().lease;
        let Some(length) = hold.cut_at_cap(length, sent) else {
            continue;
        };
        let until = hold.deadline().min(sent + hold.masters.command_timeout());
        let (tally, _) = hold
            .masters
            .renew_all(&hold.keys, &hold.token, length, until)
            .await;
        if tally.won() {
            hold.renewed(sent, length);
            crate::engine::metrics::renewed();
        } else if tally.surely_lost() {
            hold.mark_lost(LossReason::TokenGone);
        } else {
            hold.mark_lost(LossReason::QuorumLost);
        }
    }
}
