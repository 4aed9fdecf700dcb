//! A held lease together with its engine: what every primitive's guard
//! wraps, on one deployment or on a quorum alike. Extending, releasing,
//! detaching and dropping live here once.
//!
//! The levels of a reentrant hold share one lease: one token, fence and
//! deadline in Redis and here, renewed once by the watchdog. Each level's
//! guard has a token of its own, which releases that level alone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::conn::replicas::ReplicaAck;
use crate::conn::route::Route;
use crate::conn::scripts;
use crate::deploy::backing::Backing;
use crate::deploy::quorum::Quorum;
use crate::deploy::store::Store;
use crate::engine::holds::Hold;
use crate::engine::lease::Lease;
use crate::engine::loss::LossReason;
use crate::engine::masters::{
    extend_short, phase, release_all, release_everywhere, release_unanswered, renew_all, Phase,
    Releasing, SharedPhase,
};
use crate::engine::ops::{acknowledge_renewal, renew_one, Renewed};
use crate::engine::release::{release_held, release_held_in_background, Attempt, PendingRelease};
use crate::engine::state::Engine;
use crate::engine::{watchdog, Request};
use crate::error::{Error, Result};
use crate::keys::validate_lease;

/// A release or an extend that fails to reach Redis is tried again for this
/// many command timeouts, and never past the lease.
const RELEASE_TRIES_FOR: u32 = 3;

pub(crate) struct Held {
    engine: Arc<Engine>,
    lease: Arc<Lease>,
    /// What releases this guard's share: the lease's token, or a reentrant
    /// level's own.
    token: String,
    /// Released, detached or dropped: this guard counts on the lease no more.
    done: AtomicBool,
    /// The acquisition time in the lock's value, when the acquisition wrote
    /// it unmarked: the release then first tries to delete the value by
    /// comparing, where the server can (nobody waited for it).
    acquired: Option<String>,
    /// On a quorum: the phase its requests share with this guard, whose
    /// end tells a grant that comes late what to do.
    phase: Option<SharedPhase>,
    pub(crate) holding: crate::engine::metrics::Holding,
}

impl Held {
    /// A lease just taken with `token`: Redis set it to `ttl` by a request
    /// sent at `sent_at`. `hold` names the reentrant hold the token is a
    /// level of; the levels this client has of it share its lease, which
    /// keeps the settings of the first. A lease is handed to the watchdog
    /// when its request asks for renewal. `acquired` is the acquisition
    /// time in the lock's value when the grant wrote it unmarked.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn take(
        engine: &Arc<Engine>,
        request: &Request<'_>,
        token: String,
        hold: Option<Hold>,
        fence: u64,
        sent_at: Instant,
        ttl: Duration,
        acquired: Option<String>,
        server: u64,
    ) -> Self {
        let lease = match hold {
            Some(hold) => {
                let lease = engine.leases.holds.join(
                    request,
                    &token,
                    hold,
                    fence,
                    (sent_at, ttl),
                    |lease| start(engine, request, lease),
                );
                lease.add_level_token(&token);
                lease
            }
            None => start(
                engine,
                request,
                Lease::new(request, token.clone(), fence, sent_at, ttl, None),
            ),
        };
        lease.granted_on(server);
        Held::new(engine, request, lease, token, acquired, None)
    }

    /// A lease a majority of a quorum's masters granted `token` with
    /// `fence`, by a try that began at `start`; its requests share `phase`.
    pub(crate) fn take_on_quorum(
        engine: &Arc<Engine>,
        request: &Request<'_>,
        token: String,
        fence: u64,
        began: Instant,
        phase: SharedPhase,
    ) -> Self {
        let clocks = engine.backing.clocks();
        let lease = Lease::new(request, token.clone(), fence, began, request.lease, clocks);
        let lease = start(engine, request, lease);
        Held::new(engine, request, lease, token, None, Some(phase))
    }

    fn new(
        engine: &Arc<Engine>,
        request: &Request<'_>,
        lease: Arc<Lease>,
        token: String,
        acquired: Option<String>,
        phase: Option<SharedPhase>,
    ) -> Self {
        engine
            .leases
            .mine
            .add(&request.keys.lock, request.holder, request.kind, &lease);
        Held {
            engine: Arc::clone(engine),
            lease,
            token,
            done: AtomicBool::new(false),
            acquired,
            phase,
            holding: crate::engine::metrics::Holding::new(request.kind),
        }
    }

    pub(crate) fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The token that releases this guard's share of the lock.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// How many servers the lease is taken on.
    pub(crate) fn servers(&self) -> usize {
        self.engine.backing.servers()
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
        // One request at a time per lease; see `Lease::renewing`.
        let turn = self.lease.renewing.lock().await;
        let sent_at = Instant::now();
        let lease = &self.lease;
        // Never past the max hold.
        let Some(length) = lease.cut_at_cap(length, sent_at) else {
            lease.mark_lost(LossReason::MaxHoldReached);
            return Err(self.lost_error(LossReason::MaxHoldReached));
        };
        lease.extending(sent_at, length);
        if lease.renew {
            // The next renewal may have moved earlier.
            self.engine.leases.renewals.schedule(lease);
        }
        let renewed = match &self.engine.backing {
            Backing::One(store) => self.extend_on(store, sent_at, length).await,
            Backing::Quorum(quorum) => self.extend_on_quorum(quorum, sent_at, length).await,
        };
        let renewed = match renewed {
            Ok(renewed) => renewed,
            Err(error) => {
                if lease.renew {
                    self.engine.leases.renewals.schedule(lease);
                }
                return Err(error);
            }
        };
        match renewed {
            Renewed::Yes => lease.renewed(sent_at, length),
            Renewed::NotHeld { server } => lease.mark_gone(server),
        }
        if lease.renew {
            self.engine.leases.renewals.schedule(lease);
        }
        if let Some(reason) = lease.loss() {
            return Err(self.lost_error(reason));
        }
        drop(turn);
        // Extended where no WAIT holds it back (see `extend_on`): the
        // replicas acknowledge it apart, without holding the watchdog off
        // the lease.
        let Backing::One(store) = &self.engine.backing else {
            return Ok(());
        };
        if lease.replica_ack == ReplicaAck::Off {
            return Ok(());
        }
        let token = lease.renewal_token();
        let acked =
            acknowledge_renewal(store, &lease.keys, &token, length, lease.replica_ack).await?;
        if let Renewed::NotHeld { server } = acked {
            let _turn = lease.renewing.lock().await;
            lease.mark_gone(server);
        }
        match lease.loss() {
            Some(reason) => Err(self.lost_error(reason)),
            None => Ok(()),
        }
    }

    /// The extend on one deployment, sent again while it gets no answer.
    async fn extend_on(
        &self,
        store: &Store,
        sent_at: Instant,
        length: Duration,
    ) -> Result<Renewed> {
        let lease = &self.lease;
        let token = lease.renewal_token();
        // An extend sets the lease to `length` from when it runs, so sending
        // it again after an unanswered attempt gives the same outcome; and
        // no extend removes a token, so a retry that finds it gone found a
        // loss that really happened (the lease counts from the first send).
        let timeout = self.engine.command_timeout();
        let give_up = (sent_at + timeout * RELEASE_TRIES_FOR).min(lease.deadline());
        let mut pause = Duration::from_millis(25);
        loop {
            match renew_one(store, &lease.keys, &token, length).await {
                Err(error) if error.is_transient() && Instant::now() + pause < give_up => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                renewed => return renewed,
            }
        }
    }

    /// The extend on every master of a quorum, once: a majority must
    /// confirm it, else the lease is left as it was (never shortened below
    /// what a shorter `length` may have set), and nothing is released.
    async fn extend_on_quorum(
        &self,
        quorum: &Quorum,
        sent_at: Instant,
        length: Duration,
    ) -> Result<Renewed> {
        let lease = &self.lease;
        let until = lease.deadline().min(sent_at + quorum.command_timeout());
        let keys = Arc::new(lease.keys.clone());
        let token = Arc::from(lease.token.as_str());
        let (tally, last) = renew_all(&self.engine, quorum, &keys, &token, length, until).await;
        if tally.won() {
            Ok(Renewed::Yes)
        } else if tally.surely_lost() {
            Ok(Renewed::NotHeld { server: 0 })
        } else {
            Err(extend_short(&lease.keys, lease.fence, tally, last))
        }
    }

    /// Releases the lock and reports how the lease ended: held to the end,
    /// lost, or unknown (no answer); and on how many servers it was held
    /// (1 on one deployment). On a quorum, `count_all` waits for every
    /// master's answer; without, the call returns once a majority
    /// confirmed, and the others' releases run on in the background.
    pub(crate) async fn release(self, count_all: bool) -> Result<usize> {
        let engine = Arc::clone(&self.engine);
        match &engine.backing {
            Backing::One(store) => self.release_on(store).await.map(|()| 1),
            // Boxed, as the other kind of backing's futures are too: one
            // future does not carry the room of both.
            Backing::Quorum(quorum) => Box::pin(self.release_on_quorum(quorum, count_all)).await,
        }
    }

    async fn release_on(self, store: &Arc<Store>) -> Result<()> {
        // From here the drop does nothing and, after the last level, the
        // watchdog lets go: this call owns the release.
        self.finish(None);
        let (engine, lease) = (&self.engine, &self.lease);
        // Dropped before an answer, the release goes on in the background.
        let pending = PendingRelease::arm(engine, store, &lease.keys, &self.token)
            .of_held()
            .keep_until(lease.hold_until);
        // A renewal in flight is seen through first, so that its answer is
        // never applied after the release's.
        let _turn = Arc::clone(&lease.renewing).lock_owned().await;
        let timeout = engine.command_timeout();
        let give_up = (Instant::now() + timeout * RELEASE_TRIES_FOR).min(lease.deadline().max(
            // At least one try, whatever is left of the lease.
            Instant::now() + timeout,
        ));
        let mut pause = Duration::from_millis(25);
        // The fence counter as this lease's grant left it, as text: made
        // for a release sent again, the rare case.
        let mut fence: Option<String> = None;
        // An earlier attempt that got no answer may have been applied.
        let mut unanswered: Option<Error> = None;
        // Whether such an attempt may have been a compare-and-delete, which
        // leaves no record of itself (see `release.lua`).
        let mut deleted_unanswered = false;
        // The server the last attempt went to, by identity.
        let mut server = 0;
        let released = loop {
            // An attempt that gets no connection sends nothing: only one
            // that went out can have been applied.
            let mut compared = false;
            let (attempt, sent) = match store.route(&lease.keys).await {
                Ok(route) => {
                    server = route.server().identity;
                    // Sent again, the release script finds what the first
                    // attempt did, whichever it was.
                    let first = unanswered.is_none();
                    let deleted = if first {
                        compared = self.acquired.is_some();
                        self.compare_and_delete(store, route.clone()).await
                    } else {
                        Ok(false)
                    };
                    let attempt = match deleted {
                        Ok(true) => Ok(true),
                        Ok(false) => {
                            compared = false;
                            let attempt = if first {
                                Attempt::First
                            } else {
                                let fence = fence.get_or_insert_with(|| lease.fence.to_string());
                                Attempt::Again(deleted_unanswered.then_some(fence.as_str()))
                            };
                            // Boxed: the common release is the compare
                            // and delete above, and this future is large.
                            Box::pin(release_held(
                                engine,
                                store,
                                route,
                                &lease.keys,
                                &self.token,
                                self.holding.kind().is_hash(),
                                lease.hold_until,
                                attempt,
                            ))
                            .await
                        }
                        Err(error) => Err(error),
                    };
                    (attempt, true)
                }
                Err(error) => (Err(error), false),
            };
            match attempt {
                Ok(released) => break released,
                Err(error) if error.is_transient() && Instant::now() + pause < give_up => {
                    if sent {
                        unanswered = Some(error);
                        deleted_unanswered |= compared;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                // `pending` goes on trying in the background; the expiry is
                // the safety net after that. A lease known to be lost says so.
                Err(error) => {
                    return Err(match lease.loss() {
                        Some(reason) => self.lost_error(reason),
                        None => Error::release_unknown(&lease.keys.name, lease.fence, &error),
                    })
                }
            }
        };
        pending.disarm();
        if !released {
            if let Some(first) = unanswered {
                // The token is gone, but this call's own unanswered attempt
                // may be what removed it: that is no loss to report. Only a
                // lease already known lost (its deadline passed before the
                // answer) says so.
                return Err(match lease.loss() {
                    Some(reason) => self.lost_error(reason),
                    None => Error::release_retry_unknown(&lease.keys.name, lease.fence, &first),
                });
            }
            if !lease.is_finished() {
                // Only this level is known gone: other levels of the hold
                // may still hold it, and their renewals tell.
                return Err(self.lost_error(lease.loss().unwrap_or(LossReason::TokenGone)));
            }
            lease.mark_gone(server);
        }
        match lease.loss() {
            Some(reason) => Err(self.lost_error(reason)),
            None => Ok(()),
        }
    }

    /// The release on every master of a quorum, in parallel.
    async fn release_on_quorum(self, quorum: &Quorum, count_all: bool) -> Result<usize> {
        let lease = Arc::clone(&self.lease);
        // The turn first (a renewal may hold it): a release dropped while it
        // waits leaves this guard to its drop, which releases everywhere in
        // the background. From the finish on, the release below is sent to
        // every master before this future yields.
        let _turn = lease.renewing.lock().await;
        self.finish(Some(Phase::Released));
        let timeout = quorum.command_timeout();
        let length = lease.length();
        let (tally, last) = release_all(
            &self.engine,
            quorum,
            Releasing {
                keys: &Arc::new(lease.keys.clone()),
                token: &Arc::from(lease.token.as_str()),
                hold_until: lease.hold_until,
                until: Instant::now() + timeout,
                patience: quorum.node_timeout(length),
                // The master's key lives at most a lease past the last
                // round that set it, give or take the drift.
                live_until: Some(
                    lease.deadline()
                        + quorum.config.clocks.drift(length).saturating_mul(2)
                        + lease.hold_until.map_or(Duration::ZERO, |until| {
                            until.saturating_duration_since(Instant::now())
                        }),
                ),
                quick: !count_all,
                phase: self.phase.clone(),
            },
        )
        .await;
        if let Some(reason) = lease.loss() {
            return Err(self.lost_error(reason));
        }
        if tally.won() {
            return Ok(tally.yes);
        }
        if tally.surely_lost() || tally.failed == 0 {
            lease.mark_lost(LossReason::TokenGone);
            return Err(self.lost_error(LossReason::TokenGone));
        }
        Err(release_unanswered(
            &lease.keys,
            lease.fence,
            tally,
            last.as_ref(),
        ))
    }

    /// Deletes the lock's value by comparing, when the value is known
    /// unmarked (nobody waited for it, and the hold-at-least is over): with
    /// the server's compare-and-delete where it has one, else with a script
    /// that does only that (a fraction of the release script's work).
    /// `Ok(true)` when that released it; `Ok(false)` when the release
    /// script is to run (the value is marked, kept, or not this lease's).
    async fn compare_and_delete(&self, store: &Store, route: Route) -> Result<bool> {
        let Some(acquired) = &self.acquired else {
            return Ok(false);
        };
        let lease = &self.lease;
        if lease.hold_until.is_some_and(|until| until > Instant::now()) {
            return Ok(false);
        }
        let identity = &self.engine.config.identity;
        let mut value = Vec::with_capacity(lease.token.len() + acquired.len() + identity.len() + 2);
        value.extend_from_slice(lease.token.as_bytes());
        value.push(b' ');
        value.extend_from_slice(acquired.as_bytes());
        value.push(b' ');
        value.extend_from_slice(identity.as_bytes());
        if let Some(deleted) = route.compare_and_delete(&lease.keys.lock, &value).await? {
            return Ok(deleted);
        }
        let reply = store
            .eval_on(
                route,
                &lease.keys.lock,
                "release",
                |s| &s.delete_if_equal,
                &[&lease.keys.lock],
                &[&value],
            )
            .await?;
        scripts::flag("release", &reply)
    }

    /// Stops renewing and forgets the lease without releasing it. On a
    /// quorum, a grant that comes later is fenced and kept, as the lease
    /// lives on.
    pub(crate) fn detach(self) {
        self.finish(None);
    }

    /// This guard lets go of the lease; true the first time only. The last
    /// guard of a lease stops its renewal. On a quorum, the lease's
    /// requests go to phase `end` (see [`Phase`]); with none, a grant that
    /// comes later is kept.
    fn finish(&self, end: Option<Phase>) -> bool {
        if self.done.swap(true, Ordering::AcqRel) {
            return false;
        }
        if let (Some(end), Some(shared)) = (end, &self.phase) {
            phase(shared).phase = end;
        }
        self.lease.remove_level_token(&self.token);
        if self.lease.drop_level() {
            if self.lease.finish() {
                self.engine.leases.renewals.unregister(self.lease.id);
            }
            self.engine.leases.holds.forget(&self.lease);
            self.engine.leases.mine.forget(&self.lease);
        }
        true
    }

    fn lost_error(&self, reason: LossReason) -> Error {
        let lease = &self.lease;
        let over = match self.servers() {
            1 => String::new(),
            n => format!(" over {n} masters"),
        };
        Error::not_held(format!(
            "lease on lock {:?} (fence {}){over} was lost: {}",
            lease.keys.name,
            lease.fence,
            reason.describe(lease.renew, lease.max_hold())
        ))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.finish(Some(Phase::Over)) {
            return;
        }
        let (engine, lease) = (&self.engine, &self.lease);
        match &engine.backing {
            Backing::One(store) => release_held_in_background(
                Arc::clone(engine),
                Arc::clone(store),
                lease.keys.clone(),
                self.token.clone(),
                lease.hold_until,
            ),
            Backing::Quorum(quorum) => {
                release_everywhere(engine, quorum, &lease.keys, &self.token, lease.hold_until)
            }
        }
    }
}

/// A new lease, renewed by the watchdog if the request asks for it.
fn start(engine: &Arc<Engine>, request: &Request<'_>, lease: Lease) -> Arc<Lease> {
    let lease = Arc::new(lease);
    if request.renew {
        watchdog::register(engine, Arc::clone(&lease));
    }
    lease
}
