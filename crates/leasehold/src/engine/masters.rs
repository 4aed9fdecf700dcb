//! Requests to every master of a quorum, in parallel, counted as they
//! answer: renewals and releases of a token, a force-release, and what the
//! masters hold of a lock. And the phase that every request of one lease
//! on a quorum shares, so that a grant that arrives late is released
//! exactly when nobody counts it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::deploy::quorum::count::{majority, Tally};
use crate::deploy::quorum::{Quorum, Stop};
use crate::engine::ops::{self, renew_one, Renewed};
use crate::engine::release::{release, release_in_background};
use crate::engine::state::Engine;
use crate::error::{Error, ErrorKind, Result};
use crate::holder::LockInfo;
use crate::keys::{validate_lease, LockKeys};

/// Where an acquisition's token stands, shared by the requests still in
/// flight: a grant that arrives once the acquisition gave up, or after
/// the hold ended, is released by the request that got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Trying,
    Held,
    /// Given up, or dropped: a grant that comes now releases itself.
    Over,
    /// Released by a release of the held lease, which sends a release to
    /// every master: a grant that comes now is left to it (see
    /// [`PhaseState::late_grant`]).
    Released,
}

/// The phase, and every master whose grant was recorded while trying or
/// holding: a request records its grant, or sees the try over and
/// releases, under the one lock, so no grant slips between the two.
#[derive(Debug)]
pub(crate) struct PhaseState {
    pub(crate) phase: Phase,
    /// Each master that may hold the lock for this token, with the fence it
    /// stored in round one (`None`: an error after which it may have run
    /// the script, its reply lost).
    pub(crate) granted: Vec<(usize, Option<u64>)>,
    /// The fence, once the try decided it: a grant recorded from then on
    /// writes it to its master itself (round two for a late grant).
    pub(crate) fence: Option<u64>,
    /// Once released: each master whose release answered, and whether it
    /// took this token away there.
    released: Vec<(usize, bool)>,
    /// Once released: each master that granted before its release answered.
    late: Vec<usize>,
}

impl PhaseState {
    pub(crate) fn new(phase: Phase) -> Self {
        PhaseState {
            phase,
            granted: Vec::new(),
            fence: None,
            released: Vec::new(),
            late: Vec::new(),
        }
    }

    /// A grant (or a lost reply that may be one) from master `i` came
    /// after the hold was released. Its release, sent to every master
    /// after this master's round one, mostly took it away already, or
    /// will: only a release that answered without finding the token may
    /// have run before the grant. Whether the grant must release itself.
    pub(crate) fn late_grant(&mut self, i: usize) -> bool {
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

pub(crate) type SharedPhase = Arc<Mutex<PhaseState>>;

pub(crate) fn phase(shared: &SharedPhase) -> MutexGuard<'_, PhaseState> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Renews `token` to `lease` on every master, counting until the count is
/// decided or `until`.
pub(crate) async fn renew_all(
    engine: &Arc<Engine>,
    quorum: &Quorum,
    keys: &Arc<LockKeys>,
    token: &Arc<str>,
    lease: Duration,
    until: Instant,
) -> (Tally, Option<Error>) {
    let (keys, token) = (Arc::clone(keys), Arc::clone(token));
    quorum
        .fan_out(
            &engine.leases.background,
            |_| true,
            move |_, master| {
                let (keys, token) = (Arc::clone(&keys), Arc::clone(&token));
                async move {
                    let renewed = renew_one(&master, &keys, &token, lease).await?;
                    Ok(renewed == Renewed::Yes)
                }
            },
        )
        .tally(quorum.len(), until, Stop::Decided)
        .await
}

/// What [`release_all`] releases, and how long it waits.
pub(crate) struct Releasing<'a> {
    pub(crate) keys: &'a Arc<LockKeys>,
    pub(crate) token: &'a Arc<str>,
    pub(crate) hold_until: Option<Instant>,
    pub(crate) until: Instant,
    pub(crate) patience: Duration,
    pub(crate) live_until: Option<Instant>,
    pub(crate) quick: bool,
    /// The released hold's phase: each master's answer is recorded there,
    /// for the grants of its round one that come late.
    pub(crate) phase: Option<SharedPhase>,
}

/// Releases `token` on every master; how many held it. Waits for every
/// answer until `until`, and no longer than `patience` once a majority is
/// decided; with `quick`, not at all once a majority confirmed.
///
/// A master that fails with a transient error (a connection reset, no
/// answer in time) is tried again in the background a few times, while
/// the lease may still be live there (`live_until`, when known): the
/// caller's answer does not wait for that, and a flush does.
pub(crate) async fn release_all(
    engine: &Arc<Engine>,
    quorum: &Quorum,
    release: Releasing<'_>,
) -> (Tally, Option<Error>) {
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
    let background = Arc::clone(&engine.leases.background);
    let engine = Arc::clone(engine);
    let rx = quorum.fan_out(
        &background,
        |_| true,
        move |i, master| {
            let (engine, keys, token, shared) = (
                Arc::clone(&engine),
                Arc::clone(&keys),
                Arc::clone(&token),
                shared.clone(),
            );
            async move {
                let answer =
                    self::release(&engine, &master, &keys, &token, false, hold_until).await;
                let again = shared.is_some_and(|shared| {
                    phase(&shared).release_answered(i, matches!(answer, Ok(true)))
                });
                let passing = answer.as_ref().is_err_and(|error| {
                    error.is_transient() && live_until.is_none_or(|live| Instant::now() < live)
                });
                // Once for a grant that came before this answer, once for a
                // passing fault.
                for _ in 0..usize::from(again) + usize::from(passing) {
                    release_in_background(
                        Arc::clone(&engine),
                        Arc::clone(&master),
                        LockKeys::clone(&keys),
                        token.to_string(),
                        false,
                        hold_until,
                    );
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
    rx.tally(quorum.len(), until, stop).await
}

/// Releases `token` on every master, for a lease taken elsewhere, keeping
/// the lock until `hold_until` if given; on how many masters it was held.
pub(crate) async fn release_token(
    engine: &Arc<Engine>,
    quorum: &Quorum,
    keys: &LockKeys,
    token: &str,
    hold_until: Option<Instant>,
) -> Result<usize> {
    let timeout = quorum.command_timeout();
    let (tally, last) = release_all(
        engine,
        quorum,
        Releasing {
            keys: &Arc::new(keys.clone()),
            token: &token.into(),
            hold_until,
            until: Instant::now() + timeout,
            patience: timeout,
            live_until: None,
            quick: false,
            phase: None,
        },
    )
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
    Err(no_quorum(keys, tally, last))
}

/// Sets the lease of `token` to `lease` on every master; a majority must
/// confirm.
pub(crate) async fn extend_token(
    engine: &Arc<Engine>,
    quorum: &Quorum,
    keys: &LockKeys,
    token: &str,
    lease: Duration,
) -> Result<()> {
    validate_lease(lease)?;
    let until = Instant::now() + quorum.command_timeout();
    let keys = &Arc::new(keys.clone());
    let (tally, last) = renew_all(engine, quorum, keys, &token.into(), lease, until).await;
    if tally.won() {
        Ok(())
    } else if tally.surely_lost() {
        Err(Error::not_held(format!(
            "lock {:?} is held by this token on fewer than a majority of its {} masters: \
             it expired, or was released or removed",
            keys.name, tally.n
        )))
    } else {
        Err(no_quorum(keys, tally, last))
    }
}

/// The error of a request that too many unreachable masters kept from a
/// majority.
pub(crate) fn no_quorum(keys: &LockKeys, tally: Tally, last: Option<Error>) -> Error {
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

/// The error of an extend of a held lease that fewer than a majority
/// confirmed.
pub(crate) fn extend_short(
    keys: &LockKeys,
    fence: u64,
    tally: Tally,
    last: Option<Error>,
) -> Error {
    let mut error = Error::new(
        ErrorKind::Quorum,
        format!(
            "extend of lock {:?} (fence {fence}) reached {} of {} masters, fewer than a majority \
             ({}): quorum not reached; the lease is left as it was{}",
            keys.name,
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
    error
}

/// The error of a release of a held lease that too few masters answered
/// to tell whether the lease held to the end.
pub(crate) fn release_unanswered(
    keys: &LockKeys,
    fence: u64,
    tally: Tally,
    last: Option<&Error>,
) -> Error {
    Error::new(
        ErrorKind::Connection,
        format!(
            "release of lock {:?} (fence {fence}) reached {} of {} masters that held it, and {} \
             did not answer, so whether the lease held to the end is unknown{}; the lock \
             expires by itself at the end of its lease",
            keys.name,
            tally.yes,
            tally.n,
            tally.failed,
            last.map(|e| format!(" (last: {})", e.situation()))
                .unwrap_or_default()
        ),
    )
    .remedy_of(last)
}

/// Releases `token` on every master in the background: for a guard
/// dropped, counted so that a flush waits for them.
pub(crate) fn release_everywhere(
    engine: &Arc<Engine>,
    quorum: &Quorum,
    keys: &LockKeys,
    token: &str,
    hold_until: Option<Instant>,
) {
    for master in &quorum.masters {
        release_in_background(
            Arc::clone(engine),
            Arc::clone(master),
            keys.clone(),
            token.to_owned(),
            false,
            hold_until,
        );
    }
}

/// Removes the lock on every master whoever holds it; whether any master
/// had it. Fence counters are kept.
pub(crate) async fn force_release(
    engine: &Engine,
    quorum: &Quorum,
    keys: &LockKeys,
) -> Result<bool> {
    let mut removed = false;
    let mut failed = 0;
    let mut last = None;
    let answers = futures_util::future::join_all(
        quorum
            .masters
            .iter()
            .map(|master| ops::force_release(engine, master, keys, None)),
    )
    .await;
    for answer in answers {
        match answer {
            Ok(was) => removed |= was,
            Err(error) => {
                failed += 1;
                last = Some(error);
            }
        }
    }
    let n = quorum.len();
    if failed > n - majority(n) {
        if let Some(last) = last {
            return Err(Error::new(
                ErrorKind::Quorum,
                format!(
                    "force-release of lock {:?} reached {} of {n} masters (quorum not \
                     reached): {}",
                    keys.name,
                    n - failed,
                    last.situation()
                ),
            )
            .remedy_of(Some(&last)));
        }
    }
    Ok(removed)
}

/// What every master holds of the lock, by its address, in the order the
/// masters were given.
pub(crate) async fn inspect_masters(
    quorum: &Quorum,
    keys: &LockKeys,
) -> Vec<(String, Result<LockInfo>)> {
    let answers = futures_util::future::join_all(
        quorum
            .masters
            .iter()
            .map(|master| ops::inspect(master, keys)),
    )
    .await;
    quorum
        .masters
        .iter()
        .map(|master| master.address().to_owned())
        .zip(answers)
        .collect()
}

/// The lock as a majority of the masters see it: held when a majority
/// hold it, with the holder and lease of the first of those, and the fence
/// a majority of its holding masters share (see `Mutex::inspect`).
pub(crate) async fn inspect(quorum: &Quorum, keys: &LockKeys) -> Result<LockInfo> {
    let masters = inspect_masters(quorum, keys).await;
    let n = masters.len();
    let majority = majority(n);
    let mut read = Vec::new();
    let mut last: Option<Error> = None;
    let mut passing = true;
    for (_, info) in masters {
        match info {
            Ok(info) => read.push(info),
            Err(error) => {
                passing &= error.is_transient();
                last = Some(error);
            }
        }
    }
    if read.len() < majority {
        let error = Error::new(
            ErrorKind::Quorum,
            format!(
                "inspect of lock {:?} read {} of {n} masters, fewer than a majority \
                 ({majority}): quorum not reached{}",
                keys.name,
                read.len(),
                last.as_ref()
                    .map(|e| format!(" (last: {})", e.situation()))
                    .unwrap_or_default()
            ),
        )
        .remedy_of(last.as_ref());
        // Masters out of reach for a while: a look again may read them.
        return Err(if passing { error.transient() } else { error });
    }
    let held = read.iter().filter(|info| info.held).count() >= majority;
    let holders_fence = if held {
        agreed_fence(&read, majority)
    } else {
        None
    };
    let last_fence = holders_fence.or(read.iter().filter_map(|info| info.last_fence).max());
    let at = read
        .iter()
        .position(|info| info.held == held && (!held || info.last_fence == last_fence))
        .or(read.iter().position(|info| info.held == held))
        .unwrap_or(0);
    let mut chosen = read.swap_remove(at);
    chosen.last_fence = last_fence;
    chosen.held = held;
    if !held {
        chosen.holders.clear();
        chosen.remaining = None;
    }
    chosen.server = format!("{n} masters");
    Ok(chosen)
}

/// The fence counter that at least `majority` of the masters read hold the
/// lock at, if one is.
fn agreed_fence(read: &[LockInfo], majority: usize) -> Option<u64> {
    let mut counts: HashMap<u64, usize> = HashMap::new();
    for fence in read
        .iter()
        .filter(|info| info.held)
        .filter_map(|info| info.last_fence)
    {
        *counts.entry(fence).or_default() += 1;
    }
    counts
        .into_iter()
        .find(|&(_, count)| count >= majority)
        .map(|(fence, _)| fence)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A grant that comes after the release is taken away once, whichever
    /// of the two answers is heard first: by the release, when it ran
    /// after the grant on that master; by one more release, when it ran
    /// before.
    #[test]
    fn a_grant_after_the_release_is_released_once_in_either_order() {
        let released = || PhaseState::new(Phase::Released);
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
}
