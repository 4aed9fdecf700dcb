//! Releasing on one store: the release script, the pending release armed
//! around every request that may take a lock, and the background releases
//! that drops leave behind.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::background::Tracked;
use crate::conn::route::Route;
use crate::conn::scripts;
use crate::deploy::store::Store;
use crate::engine::lease::drift;
use crate::engine::state::Engine;
use crate::engine::Kind;
use crate::error::{Error, Result};
use crate::keys::{millis, LockKeys};

/// Releases `token` of `keys` on `store`, or takes it out of the waiter
/// queue if it waits there (`queued`); wakes (or, for a fair waiter, hands
/// the lock to) the next live waiter. Before `hold_until` the lock is kept
/// until then instead, and nobody is woken. `Ok(false)` when the token did
/// not hold the lock.
pub(crate) async fn release(
    engine: &Engine,
    store: &Store,
    keys: &LockKeys,
    token: &str,
    queued: bool,
    hold_until: Option<Instant>,
) -> Result<bool> {
    let route = store.route(keys).await?;
    let mode: &[u8] = if queued { b"1" } else { b"0" };
    release_in_mode(engine, store, route, keys, token, mode, hold_until, None).await
}

/// Which attempt of a guard's release a request is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Attempt<'a> {
    First,
    /// Sent again after an attempt that got no answer, and may have been
    /// applied; with the lease's fence when such an attempt was a
    /// compare-and-delete (see `release.lua`).
    Again(Option<&'a str>),
}

/// How long the server remembers a guard's release by its token: longer
/// than a release is sent again for (see `engine::held`), so that every
/// retry finds its first attempt's answer.
pub(crate) fn release_memory(engine: &Engine) -> Duration {
    (engine.command_timeout() * 6).max(Duration::from_secs(1))
}

/// Releases the lease `token` of a guard as [`release`] does (its token is
/// out of the queue), on `route`, taken for `keys`; `hash` says the
/// guard's lock is a hash kind's (a reentrant mutex, an rw-lock or a
/// semaphore), whose hash the release then reads first. The server
/// remembers a release for a while (see [`release_memory`]), so that the
/// same release sent `Again` answers what its first attempt did.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn release_held(
    engine: &Engine,
    store: &Store,
    route: Route,
    keys: &LockKeys,
    token: &str,
    hash: bool,
    hold_until: Option<Instant>,
    attempt: Attempt<'_>,
) -> Result<bool> {
    let mode: &[u8] = if hash { b"h" } else { b"0" };
    let memory = millis(release_memory(engine)).to_string();
    let again: &[u8] = match attempt {
        Attempt::First => b"",
        Attempt::Again(None) => b"r",
        Attempt::Again(Some(fence)) => fence.as_bytes(),
    };
    release_in_mode(
        engine,
        store,
        route,
        keys,
        token,
        mode,
        hold_until,
        Some((memory.as_bytes(), again)),
    )
    .await
}

/// The release script's run for [`release`] and [`release_held`]; `mode`
/// is its ARGV[2], `memory` its ARGV[8] and ARGV[9] (see `release.lua`).
#[allow(clippy::too_many_arguments)]
async fn release_in_mode(
    engine: &Engine,
    store: &Store,
    route: Route,
    keys: &LockKeys,
    token: &str,
    mode: &[u8],
    hold_until: Option<Instant>,
    memory: Option<(&[u8], &[u8])>,
) -> Result<bool> {
    // A quorum's master marks the counter with a token it does not hold
    // ('r', see release.lua).
    let mode = if mode == b"0" && store.marks_missed_releases() {
        b"r"
    } else {
        mode
    };
    let reply = run_release(
        engine, store, route, keys, token, mode, hold_until, None, memory,
    )
    .await?;
    match scripts::as_int(&reply) {
        Some(0) => Ok(false),
        // 2: kept until the hold ends.
        Some(1 | 2) => Ok(true),
        _ => Err(Error::unexpected_reply("release", &reply)),
    }
}

/// Releases `token` as [`release`] does if a lease of `owner` holds it, of
/// a lock of `kind`; `Ok(None)`, changing nothing, when a lease of another
/// owner does. A lock of another kind is a conflict, and is left as it is.
pub(crate) async fn release_as(
    engine: &Engine,
    store: &Store,
    keys: &LockKeys,
    token: &str,
    owner: &str,
    kind: Kind,
) -> Result<Option<bool>> {
    let route = store.route(keys).await?;
    let reply = run_release(
        engine,
        store,
        route,
        keys,
        token,
        b"0",
        None,
        Some((owner, kind)),
        None,
    )
    .await?;
    match scripts::as_int(&reply) {
        Some(0) => Ok(Some(false)),
        Some(1 | 2) => Ok(Some(true)),
        Some(3) => Ok(None),
        _ => match &reply {
            redis::Value::Array(items) if items.len() == 2 => {
                match (scripts::as_int(&items[0]), scripts::as_text(&items[1])) {
                    (Some(-1), Some(found)) => Err(kind.conflict(&keys.name, &found)),
                    _ => Err(Error::unexpected_reply("release", &reply)),
                }
            }
            _ => Err(Error::unexpected_reply("release", &reply)),
        },
    }
}

/// The release script on `route`, taken for `keys`; `queue` is its
/// ARGV[2], `owner` its ARGV[6] and ARGV[7], `memory` its ARGV[8] and
/// ARGV[9] (see `scripts/release.lua`).
#[allow(clippy::too_many_arguments)]
async fn run_release(
    engine: &Engine,
    store: &Store,
    route: Route,
    keys: &LockKeys,
    token: &str,
    queue: &[u8],
    hold_until: Option<Instant>,
    owner: Option<(&str, Kind)>,
    memory: Option<(&[u8], &[u8])>,
) -> Result<redis::Value> {
    // Measured after the connect, as late as can be: the lock is then kept
    // a little longer than asked, never shorter.
    let keep = hold_until.map_or(Duration::ZERO, |until| {
        until.saturating_duration_since(Instant::now())
    });
    let kept_ms;
    let keep: &[u8] = if keep.is_zero() {
        b"0"
    } else {
        // Redis's clock may run a little faster than this one.
        kept_ms = millis(keep + drift(keep)).max(1).to_string();
        kept_ms.as_bytes()
    };
    let (owner, kind): (&[u8], &[u8]) = match owner {
        Some((owner, kind)) => (owner.as_bytes(), kind.stored_name().as_bytes()),
        None => (b"", b""),
    };
    let (memory, again) = memory.unwrap_or((b"0", b""));
    let args: [&[u8]; 9] = [
        token.as_bytes(),
        queue,
        engine.retention_ms(),
        keys.channels.as_bytes(),
        keep,
        owner,
        kind,
        memory,
        again,
    ];
    store
        .eval_on(
            route,
            &keys.lock,
            "release",
            |s| &s.release,
            &[
                &keys.lock,
                &keys.fence,
                &keys.queue,
                &keys.waiters,
                &keys.released,
            ],
            &args,
        )
        .await
}

/// Releases a token in the background unless disarmed: armed around every
/// request that may take a lock or queue a waiter, so that a dropped or
/// failed request whose command may have reached Redis never leaves the
/// lock held by nobody, nor a waiter in the queue that nobody refreshes.
pub(crate) struct PendingRelease<'a> {
    engine: Arc<Engine>,
    store: Arc<Store>,
    /// Borrowed: copied only when a release is left to the background.
    keys: &'a LockKeys,
    token: String,
    queued: bool,
    hold_until: Option<Instant>,
    /// A request of the token may be out in a batch of acknowledged
    /// requests: the release waits for it (see [`release_in_background`]).
    after_acks: bool,
    armed: bool,
}

impl<'a> PendingRelease<'a> {
    pub(crate) fn arm(
        engine: &Arc<Engine>,
        store: &Arc<Store>,
        keys: &'a LockKeys,
        token: &str,
    ) -> Self {
        PendingRelease {
            engine: Arc::clone(engine),
            store: Arc::clone(store),
            keys,
            token: token.to_owned(),
            queued: false,
            hold_until: None,
            after_acks: true,
            armed: true,
        }
    }

    /// Armed for a lease already held, whose grant was answered: nothing
    /// of its token is out in a batch of acknowledged requests.
    pub(crate) fn of_held(mut self) -> Self {
        self.after_acks = false;
        self
    }

    /// A release before `hold_until` keeps the lock until then.
    pub(crate) fn keep_until(mut self, hold_until: Option<Instant>) -> Self {
        self.hold_until = hold_until;
        self
    }

    /// The token may be in the waiter queue from now on.
    pub(crate) fn queued(&mut self) {
        self.queued = true;
    }

    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for PendingRelease<'_> {
    fn drop(&mut self) {
        if self.armed {
            spawn_release(
                Arc::clone(&self.engine),
                Arc::clone(&self.store),
                self.keys.clone(),
                std::mem::take(&mut self.token),
                self.queued,
                self.hold_until,
                self.after_acks,
            );
        }
    }
}

/// Releases a token from a drop: a few tries, then the lease's expiry (or
/// the waiter's heartbeat) is the safety net. Without a runtime only the
/// expiry is left. A request of the token sent in a batch of acknowledged
/// requests may not have reached the server yet: the release waits for
/// the batch out.
pub(crate) fn release_in_background(
    engine: Arc<Engine>,
    store: Arc<Store>,
    keys: LockKeys,
    token: String,
    queued: bool,
    hold_until: Option<Instant>,
) {
    spawn_release(engine, store, keys, token, queued, hold_until, true);
}

/// Releases the token of a lease held, whose grant was answered, from its
/// guard's drop, as [`release_in_background`] does, without waiting for
/// the batch of acknowledged requests out: nothing of its token is in it,
/// and other locks' grants in it may wait as long as the replica timeout.
pub(crate) fn release_held_in_background(
    engine: Arc<Engine>,
    store: Arc<Store>,
    keys: LockKeys,
    token: String,
    hold_until: Option<Instant>,
) {
    spawn_release(engine, store, keys, token, false, hold_until, false);
}

/// The background release of [`release_in_background`]; `after_acks`:
/// after the batch of acknowledged requests out.
fn spawn_release(
    engine: Arc<Engine>,
    store: Arc<Store>,
    keys: LockKeys,
    token: String,
    queued: bool,
    hold_until: Option<Instant>,
    after_acks: bool,
) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let tracked = Tracked::new(&engine.leases.background);
    handle.spawn(async move {
        let _tracked = tracked;
        // A request of the token sent in a batch of acknowledged requests
        // may not have reached the server yet: a release must come after it.
        if after_acks {
            if let Ok(route) = store.route(&keys).await {
                route.after_acknowledged().await;
            }
        }
        // Three tries, 50 ms and 200 ms apart.
        for pause in [50, 200] {
            if release(&engine, &store, &keys, &token, queued, hold_until)
                .await
                .is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        let _ = release(&engine, &store, &keys, &token, queued, hold_until).await;
    });
}
