//! A held lease together with its engine: what every primitive's guard
//! wraps. Extending, releasing, detaching and dropping live here once.
//!
//! The levels of a reentrant hold share one lease: one token, fence and
//! deadline in Redis and here, renewed once by the watchdog. Each level's
//! guard has a token of its own, which releases that level alone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::deploy::ReplicaAck;
use crate::engine::lease::{Lease, LossReason};
use crate::engine::ops::{acknowledge_renewal, renew_one, Renewed};
use crate::engine::release::{release_held, release_in_background, PendingRelease};
use crate::engine::scripts;
use crate::engine::Engine;
use crate::engine::{Kind, Request};
use crate::error::{Error, Result};
use crate::keys::validate_lease;

/// A release or an extend that fails to reach Redis is tried again for this
/// many command timeouts, and never past the lease.
const RELEASE_TRIES_FOR: u32 = 3;

/// The reentrant hold a granted level belongs to.
#[derive(Debug)]
pub(crate) struct Hold {
    /// The hold's token: its first level's.
    pub(crate) token: String,
    /// What was left of the hold's max hold when Redis granted the level.
    pub(crate) cap_left: Option<Duration>,
}

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
                let lease = engine
                    .leases
                    .holds
                    .join(engine, request, &token, hold, fence, sent_at, ttl);
                lease.add_level_token(&token);
                lease
            }
            None => start(
                engine,
                request,
                Lease::new(request, token.clone(), fence, sent_at, ttl),
            ),
        };
        lease.granted_on(server);
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
            self.engine.leases.watchdog.schedule(lease);
        }
        let token = lease.renewal_token();
        // An extend sets the lease to `length` from when it runs, so sending
        // it again after an unanswered attempt gives the same outcome; and
        // no extend removes a token, so a retry that finds it gone found a
        // loss that really happened (the lease counts from the first send).
        let timeout = self.engine.command_timeout();
        let give_up = (sent_at + timeout * RELEASE_TRIES_FOR).min(lease.deadline());
        let mut pause = Duration::from_millis(25);
        // Extended where no WAIT holds it back: the replicas acknowledge it
        // apart, below, without holding the watchdog off the lease.
        let renewed = loop {
            match renew_one(&self.engine, &lease.keys, &token, length).await {
                Ok(renewed) => break renewed,
                Err(error) if error.is_transient() && Instant::now() + pause < give_up => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Err(error) => {
                    if lease.renew {
                        self.engine.leases.watchdog.schedule(lease);
                    }
                    return Err(error);
                }
            }
        };
        match renewed {
            Renewed::Yes => lease.renewed(sent_at, length),
            Renewed::NotHeld { server } => lease.mark_gone(server),
        }
        if lease.renew {
            self.engine.leases.watchdog.schedule(lease);
        }
        if let Some(reason) = lease.loss() {
            return Err(self.lost_error(reason));
        }
        drop(turn);
        if lease.replica_ack == ReplicaAck::Off {
            return Ok(());
        }
        let acked =
            acknowledge_renewal(&self.engine, &lease.keys, &token, length, lease.replica_ack)
                .await?;
        if let Renewed::NotHeld { server } = acked {
            let _turn = lease.renewing.lock().await;
            lease.mark_gone(server);
        }
        match lease.loss() {
            Some(reason) => Err(self.lost_error(reason)),
            None => Ok(()),
        }
    }

    /// Releases the lock and reports how the lease ended: held to the end,
    /// lost, or unknown (no answer).
    pub(crate) async fn release(self) -> Result<()> {
        // From here the drop does nothing and, after the last level, the
        // watchdog lets go: this call owns the release.
        self.finish();
        let (engine, lease) = (&self.engine, &self.lease);
        // Dropped before an answer, the release goes on in the background.
        let pending =
            PendingRelease::arm(engine, &lease.keys, &self.token).keep_until(lease.hold_until);
        // A renewal in flight is seen through first, so that its answer is
        // never applied after the release's.
        let _turn = Arc::clone(&lease.renewing).lock_owned().await;
        let timeout = engine.command_timeout();
        let give_up = (Instant::now() + timeout * RELEASE_TRIES_FOR).min(lease.deadline().max(
            // At least one try, whatever is left of the lease.
            Instant::now() + timeout,
        ));
        let mut pause = Duration::from_millis(25);
        // An earlier attempt that got no answer may have been applied.
        let mut unanswered: Option<Error> = None;
        // The server the last attempt went to, by identity.
        let mut server = 0;
        let released = loop {
            // An attempt that gets no connection sends nothing: only one
            // that went out can have been applied.
            let (attempt, sent) = match engine.route(&lease.keys).await {
                Ok(route) => {
                    server = route.server().identity;
                    let attempt = match self.compare_and_delete(route.clone()).await {
                        Ok(true) => Ok(true),
                        Ok(false) => {
                            release_held(
                                engine,
                                route,
                                &lease.keys,
                                &self.token,
                                self.holding.kind().is_hash(),
                                lease.hold_until,
                            )
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

    /// Deletes the lock's value by comparing, when the value is known
    /// unmarked (nobody waited for it, and the hold-at-least is over): with
    /// the server's compare-and-delete where it has one, else with a script
    /// that does only that (a fraction of the release script's work).
    /// `Ok(true)` when that released it; `Ok(false)` when the release
    /// script is to run (the value is marked, kept, or not this lease's).
    async fn compare_and_delete(&self, route: crate::deploy::Route) -> Result<bool> {
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
        let reply = self
            .engine
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

    /// Stops renewing and forgets the lease without releasing it.
    pub(crate) fn detach(self) {
        self.finish();
    }

    /// This guard lets go of the lease; true the first time only. The last
    /// guard of a lease stops its renewal.
    fn finish(&self) -> bool {
        if self.done.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.lease.remove_level_token(&self.token);
        if self.lease.drop_level() {
            if self.lease.finish() {
                self.engine.leases.watchdog.unregister(self.lease.id);
            }
            self.engine.leases.holds.forget(&self.lease);
            self.engine.leases.mine.forget(&self.lease);
        }
        true
    }

    fn lost_error(&self, reason: LossReason) -> Error {
        let lease = &self.lease;
        Error::not_held(format!(
            "lease on lock {:?} (fence {}) was lost: {}",
            lease.keys.name,
            lease.fence,
            reason.describe(lease.renew, lease.max_hold())
        ))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.finish() {
            release_in_background(
                Arc::clone(&self.engine),
                self.lease.keys.clone(),
                self.token.clone(),
                false,
                self.lease.hold_until,
            );
        }
    }
}

/// A new lease, renewed by the watchdog if the request asks for it.
fn start(engine: &Arc<Engine>, request: &Request<'_>, lease: Lease) -> Arc<Lease> {
    let lease = Arc::new(lease);
    if request.renew {
        engine.leases.watchdog.register(engine, Arc::clone(&lease));
    }
    lease
}

type HoldMap = HashMap<(String, String), (String, Weak<Lease>)>;

/// The reentrant holds this client's guards share, by lock key and hold
/// token, each with its owner.
#[derive(Debug, Default)]
pub(crate) struct Holds(Mutex<HoldMap>);

impl Holds {
    fn holds(&self) -> std::sync::MutexGuard<'_, HoldMap> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live levels this client holds of `owner`'s hold of `lock`, as
    /// [`Lease::live_levels`] gives them; empty when it holds none.
    pub(crate) fn live_levels(&self, lock: &str, owner: &str) -> String {
        self.holds()
            .iter()
            .filter(|((key, _), (of, _))| key == lock && of == owner)
            .find_map(|(_, (_, lease))| lease.upgrade())
            .map(|lease| lease.live_levels())
            .unwrap_or_default()
    }

    /// The lease of `hold` with one more level, `token`: the one its other
    /// levels here share, refreshed by this reentry, or a new one when there
    /// are none (the first level; a level of an owner shared with another
    /// client; a level taken while the hold was kept past its last level).
    #[allow(clippy::too_many_arguments)]
    fn join(
        &self,
        engine: &Arc<Engine>,
        request: &Request<'_>,
        token: &str,
        hold: Hold,
        fence: u64,
        sent_at: Instant,
        ttl: Duration,
    ) -> Arc<Lease> {
        let mut holds = self.holds();
        let key = (request.keys.lock.clone(), hold.token);
        if let Some(lease) = holds.get(&key).and_then(|(_, lease)| lease.upgrade()) {
            if lease.add_level() {
                lease.refreshed(sent_at, ttl);
                return lease;
            }
        }
        let mut lease = Lease::new(request, key.1.clone(), fence, sent_at, ttl);
        if key.1 != token {
            // A hold begun elsewhere: its own max hold and hold-at-least,
            // which Redis keeps, bound it.
            lease = lease.joining(sent_at, ttl, hold.cap_left);
        }
        let lease = start(engine, request, lease);
        holds.insert(key, (request.owner.to_owned(), Arc::downgrade(&lease)));
        lease
    }

    /// Forgets `lease`, whose last guard is gone.
    fn forget(&self, lease: &Arc<Lease>) {
        let mut holds = self.holds();
        if holds.is_empty() {
            return;
        }
        let key = (lease.keys.lock.clone(), lease.token.clone());
        if holds
            .get(&key)
            .is_some_and(|(_, known)| std::ptr::eq(known.as_ptr(), Arc::as_ptr(lease)))
        {
            holds.remove(&key);
        }
    }
}

type MineMap = HashMap<String, Vec<(String, Kind, Weak<Lease>)>>;

/// The leases this client holds, by lock key, each with its holder (see
/// [`Request::holder`]) and kind: what tells a holder's own second attempt
/// on a non-reentrant lock, and answers "do I hold this?".
#[derive(Debug, Default)]
pub(crate) struct Mine(Mutex<MineMap>);

impl Mine {
    fn map(&self) -> std::sync::MutexGuard<'_, MineMap> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, lock: &str, holder: &str, kind: Kind, lease: &Arc<Lease>) {
        let mut map = self.map();
        let entries = map.entry(lock.to_owned()).or_default();
        entries.retain(|(_, _, held)| held.upgrade().is_some_and(|l| !l.is_finished()));
        if !entries
            .iter()
            .any(|(_, _, held)| std::ptr::eq(held.as_ptr(), Arc::as_ptr(lease)))
        {
            entries.push((holder.to_owned(), kind, Arc::downgrade(lease)));
        }
    }

    /// Forgets `lease`, whose last guard is gone, and what else of its lock
    /// is over: so that the map holds only the locks held now.
    fn forget(&self, lease: &Arc<Lease>) {
        let mut map = self.map();
        let Some(entries) = map.get_mut(&lease.keys.lock) else {
            return;
        };
        entries.retain(|(_, _, held)| {
            !std::ptr::eq(held.as_ptr(), Arc::as_ptr(lease))
                && held.upgrade().is_some_and(|l| !l.is_finished())
        });
        if entries.is_empty() {
            map.remove(&lease.keys.lock);
        }
    }

    /// The fence of a lease of `lock` that `holder` holds here, of a kind
    /// `of` accepts, that is neither released nor known lost.
    pub(crate) fn held_by(
        &self,
        lock: &str,
        holder: &str,
        of: impl Fn(Kind) -> bool,
    ) -> Option<u64> {
        let mut map = self.map();
        let entries = map.get_mut(lock)?;
        entries.retain(|(_, _, held)| held.upgrade().is_some_and(|l| !l.is_finished()));
        let found = entries.iter().find_map(|(who, kind, held)| {
            let lease = held.upgrade()?;
            (who == holder && of(*kind) && lease.loss().is_none()).then_some(lease.fence)
        });
        if entries.is_empty() {
            map.remove(lock);
        }
        found
    }
}
