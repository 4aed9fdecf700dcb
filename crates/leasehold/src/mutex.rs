//! The mutex: one holder at a time, fenced.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::client::Client;
use crate::engine::held::Held;
use crate::engine::release::{release, release_as};
use crate::engine::{self, scripts, wait, Kind, Request};
use crate::error::{Error, ErrorKind, Result};
use crate::guard::{LeaseGuard, MutexGuard};
use crate::holder::Holder;
use crate::keys::{
    millis, validate_lease, validate_token, validate_wait, LockKeys, MAX_LEASE, MIN_LEASE,
};
use crate::observe::{self, Op};
use crate::owner::Owner;

/// A lock with one holder at a time across every process that uses the same
/// Redis and key prefix. Made by [`Client::mutex`]; cheap to clone.
///
/// Each acquisition gets a fresh random token and a fence: a number larger
/// than every fence handed out before for this lock. Pass the fence to the
/// resources you write, and have them refuse smaller ones: that keeps them
/// safe even when a holder stalls past its lease.
///
/// The mutex is not reentrant: a holder that acquires it again waits for
/// itself. Use [`acquire_timeout`](Mutex::acquire_timeout) when that could happen.
///
/// ```no_run
/// # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
/// let mutex = client.mutex("cache:user:42")?;
/// if let Some(guard) = mutex.try_acquire().await? {
///     // rebuild the cache entry, then:
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Mutex {
    core: Core,
}

impl fmt::Debug for Mutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.debug("Mutex", f)
    }
}

impl Mutex {
    pub(crate) fn new(client: Client, keys: LockKeys) -> Self {
        Mutex {
            core: Core::new(client, keys, Kind::Mutex),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.core.keys.name
    }

    /// This mutex with another lease length (the client's by default).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a zero
    /// lease, one under 10 ms, or one over 24 h.
    pub fn with_lease(mut self, lease: Duration) -> Result<Self> {
        validate_lease(lease)?;
        self.core.lease = lease;
        Ok(self)
    }

    /// This mutex with the watchdog on or off (the client's setting by
    /// default). Off, each lease is fixed: it ends after its length unless
    /// extended, and the guard reports it lost then.
    #[must_use]
    pub fn with_watchdog(mut self, on: bool) -> Self {
        self.core.watchdog = on;
        self
    }

    /// This mutex with a hold-at-least of `hold` (off, zero, by default):
    /// for run-once jobs. A release before `hold` has passed since the
    /// acquisition does not free the lock: it stays held, and is no longer
    /// renewed, until `hold` has passed, and then expires. Nobody is woken
    /// early; waiters take it when it expires. The release reports success
    /// (the lease held to the end). So a job that several hosts start within
    /// `hold` of each other (cron on every host, clocks apart by a little)
    /// runs once: the first to take the lock runs it, and the others find it
    /// busy even when the first finished quickly.
    ///
    /// The hold is measured on this process's monotonic clock from the
    /// moment the grant arrived, which is after Redis granted it, and the
    /// release sends Redis only the time left (rounded up, with an allowance
    /// for clock drift) as a relative expiry. No wall clock is compared
    /// across machines, so clock differences between hosts and Redis cannot
    /// shorten the hold; the lock may be held a few milliseconds longer
    /// than `hold`, never shorter. A holder that dies without releasing
    /// keeps the lock only until its lease runs out, and a lease that was
    /// lost is not held on.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a hold
    /// over 24 h, or longer than the max hold.
    pub fn with_hold_at_least(mut self, hold: Duration) -> Result<Self> {
        self.core.set_hold_at_least(hold)?;
        Ok(self)
    }

    /// This mutex with a cap on renewal (off by default): the watchdog
    /// renews a lease no further than `max` after its acquisition, so a
    /// holder stuck in an endless loop cannot keep the lock forever. The
    /// lease then ends at the cap: [`MutexGuard::lost`] resolves and the
    /// loss error says that the max hold was reached. An explicit
    /// [`extend`](MutexGuard::extend) stops at the cap too.
    ///
    /// The cap is counted on this process's monotonic clock from the moment
    /// the acquire request was sent, so the lock never outlives it by this
    /// holder's reckoning.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a cap
    /// under 10 ms or over 24 h, or shorter than the hold-at-least.
    pub fn with_max_hold(mut self, max: Duration) -> Result<Self> {
        self.core.set_max_hold(max)?;
        Ok(self)
    }

    /// One attempt: the guard if the lock was free, `None` if someone else holds it.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when Redis is
    /// out of reach, slow, or answered so late that the lease had almost run
    /// out (it is then given back); [`ErrorKind::Auth`](crate::ErrorKind::Auth)
    /// when Redis refuses the credentials, [`ErrorKind::Config`](crate::ErrorKind::Config)
    /// when it refuses the connection's settings (database number, TLS);
    /// [`ErrorKind::Server`](crate::ErrorKind::Server) for an unexpected reply.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped after the request may have
    /// reached Redis, the token it sent is released in the background, so the
    /// lock is never left held by nobody.
    pub async fn try_acquire(&self) -> Result<Option<MutexGuard>> {
        self.core.try_acquire().await
    }

    /// Waits as long as it takes for the lock.
    ///
    /// Waiting does not poll. A waiter that finds the lock busy joins the
    /// lock's waiter queue in Redis; a release wakes the first live waiter
    /// alone, which then tries again. A free lock still goes to whoever asks
    /// first, so a holder that releases and asks again at once often wins;
    /// to keep waits bounded, a waiter that has waited more than a few
    /// milliseconds asks to be handed the lock at the next release instead
    /// (the starvation mode of Go's `sync.Mutex`). Use
    /// [`FairMutex`](crate::FairMutex) for strict first come, first served.
    /// A waiter also wakes when the holder's lease can have run out.
    /// Tasks of one client that wait for the same lock queue in FIFO order,
    /// and only the first of them talks to Redis.
    ///
    /// Passing faults do not end the wait: when Redis does not answer, the
    /// connection fails or the server is not ready, the waiter keeps its
    /// place, backs off and tries again on a new connection.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Server`](crate::ErrorKind::Server) for an unexpected
    /// reply or a refused script. Connection faults are ridden out; refused
    /// credentials ([`ErrorKind::Auth`](crate::ErrorKind::Auth)) and settings
    /// ([`ErrorKind::Config`](crate::ErrorKind::Config)) end the wait at once,
    /// since waiting cannot mend them.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves nothing held; a
    /// request that may have taken the lock is undone, and the waiter leaves
    /// the queue, in the background.
    pub async fn acquire(&self) -> Result<MutexGuard> {
        self.core.acquire(None).await
    }

    /// Waits at most `wait` for the lock.
    ///
    /// An attempt that is in flight when `wait` runs out is seen through, so
    /// against a slow Redis the call can end up to one command timeout late.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when the lock is
    /// still held after `wait`; [`ErrorKind::Connection`](crate::ErrorKind::Connection)
    /// when Redis did not answer at all during the whole wait (the last fault
    /// is reported); [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
    /// for a wait over a day; otherwise as [`acquire`](Mutex::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Mutex::acquire).
    pub async fn acquire_timeout(&self, wait: Duration) -> Result<MutexGuard> {
        validate_wait(wait)?;
        self.core.acquire(Some(wait)).await
    }

    /// Releases the lock if `token` holds it: for a lease taken by another
    /// process, such as `leasehold acquire` in a shell script.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the token does
    /// not hold the lock (it expired, or it was released or removed).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not release the lock.
    pub async fn release_token(&self, token: &str) -> Result<()> {
        observe::traced(
            self.core.span(Op::ReleaseToken),
            self.core.release_token(token),
        )
        .await
    }

    /// Sets the remaining lease of `token` to `lease` if it still holds the lock.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the token does
    /// not hold the lock; [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
    /// for a lease out of range.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not extend the lease.
    pub async fn extend_token(&self, token: &str, lease: Duration) -> Result<()> {
        observe::traced(
            self.core.span(Op::ExtendToken),
            self.core.extend_token(token, lease),
        )
        .await
    }

    /// Removes the lock whoever holds it, and wakes its first waiter: an
    /// admin action for a lock whose holder is known to be gone. Returns
    /// whether a lock was removed. The fence counter is kept, so fences
    /// never go back.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the name's
    /// key is no lock (a key leasehold did not write, such as a list: it is
    /// left as it is); [`ErrorKind::Connection`](crate::ErrorKind::Connection)
    /// or [`ErrorKind::Server`](crate::ErrorKind::Server).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not remove the lock.
    pub async fn force_release(&self) -> Result<bool> {
        observe::traced(self.core.span(Op::ForceRelease), self.core.force_release()).await
    }

    /// The lock's state as Redis sees it now.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
    /// [`ErrorKind::Server`](crate::ErrorKind::Server).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn inspect(&self) -> Result<LockInfo> {
        observe::traced(self.core.span(Op::Inspect), self.core.inspect()).await
    }
}

/// What [`Mutex`] and [`FairMutex`](crate::FairMutex) share: the lock's
/// keys and settings, and the calls into the engine.
#[derive(Clone)]
pub(crate) struct Core {
    client: Client,
    pub(crate) keys: LockKeys,
    pub(crate) lease: Duration,
    pub(crate) watchdog: bool,
    pub(crate) hold_at_least: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) kind: Kind,
    /// The owner of reentrant acquisitions; none for the mutexes and the
    /// semaphore.
    pub(crate) owner: Option<Owner>,
    /// Semaphore permits each acquisition asks for (1 for the others).
    pub(crate) permits: u32,
}

impl Core {
    pub(crate) fn new(client: Client, keys: LockKeys, kind: Kind) -> Self {
        let (lease, watchdog) = (client.config.lease, client.config.watchdog);
        Core {
            client,
            keys,
            lease,
            watchdog,
            hold_at_least: None,
            max_hold: None,
            kind,
            owner: None,
            permits: 1,
        }
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn set_hold_at_least(&mut self, hold: Duration) -> Result<()> {
        if hold > MAX_LEASE {
            return Err(Error::invalid(format!(
                "hold-at-least {hold:?} is longer than 24h: a run-once window is at most a day"
            )));
        }
        let hold = (!hold.is_zero()).then_some(hold);
        check_hold_within_cap(hold, self.max_hold)?;
        self.hold_at_least = hold;
        Ok(())
    }

    pub(crate) fn set_max_hold(&mut self, max: Duration) -> Result<()> {
        if max < MIN_LEASE || max > MAX_LEASE {
            return Err(Error::invalid(format!(
                "max hold {max:?} is out of range: give at least 10ms and at most 24h"
            )));
        }
        check_hold_within_cap(self.hold_at_least, Some(max))?;
        self.max_hold = Some(max);
        Ok(())
    }

    pub(crate) fn debug(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("name", &self.keys.name)
            .field("owner", &self.owner)
            .field("lease", &self.lease)
            .field("watchdog", &self.watchdog)
            .field("hold_at_least", &self.hold_at_least)
            .field("max_hold", &self.max_hold)
            .finish()
    }

    fn request(&self) -> Request<'_> {
        Request {
            keys: &self.keys,
            kind: self.kind,
            // No lease, not even the first, runs past the max hold.
            lease: self.max_hold.map_or(self.lease, |max| self.lease.min(max)),
            renew: self.watchdog,
            hold_at_least: self.hold_at_least,
            max_hold: self.max_hold,
            // Every hash lease records an owner; '-' is nobody's.
            owner: self.owner.as_ref().map_or("-", Owner::id),
            permits: self.permits,
        }
    }

    pub(crate) async fn try_acquire(&self) -> Result<Option<MutexGuard>> {
        let request = self.request();
        let attempt = wait::try_acquire(&self.client.node, &request);
        let fence = |held: &Option<Held>| held.as_ref().map(|held| held.lease().fence);
        let held = observe::acquisition(self.kind, &self.keys.name, false, attempt, fence).await?;
        Ok(held.map(LeaseGuard::new))
    }

    pub(crate) async fn acquire(&self, wait: Option<Duration>) -> Result<MutexGuard> {
        let request = self.request();
        let attempt = wait::acquire(&self.client.node, &request, wait);
        let fence = |held: &Held| Some(held.lease().fence);
        let held = observe::acquisition(self.kind, &self.keys.name, true, attempt, fence).await?;
        Ok(LeaseGuard::new(held))
    }

    /// The span of `op` on this lock.
    pub(crate) fn span(&self, op: Op) -> tracing::Span {
        observe::span(op, self.kind, &self.keys.name, None)
    }

    pub(crate) async fn release_token(&self, token: &str) -> Result<()> {
        validate_token(token)?;
        if release(&self.client.node, &self.keys, token, false, None).await? {
            Ok(())
        } else {
            Err(self.token_not_held())
        }
    }

    /// Releases `token` only if a lease of `owner` holds it: a reentrant
    /// mutex's level, an rw-lock's read or write lease.
    pub(crate) async fn release_owned_token(&self, owner: &Owner, token: &str) -> Result<()> {
        validate_token(token)?;
        let unit = if self.kind == Kind::Reentrant {
            "level"
        } else {
            "lease"
        };
        let name = &self.keys.name;
        let owner = owner.id();
        match release_as(&self.client.node, &self.keys, token, owner, self.kind).await? {
            Some(true) => Ok(()),
            Some(false) => Err(Error::not_held(format!(
                "lock {name:?} has no {unit} held by this token: it expired, or was released or \
                 removed"
            ))),
            None => Err(Error::not_held(format!(
                "lock {name:?} is held at this token by another owner, not by {owner:?}: only \
                 the owner's handles release its {unit}s; use `Mutex::release_token` or \
                 `force_release` as an admin"
            ))),
        }
    }

    pub(crate) async fn extend_token(&self, token: &str, lease: Duration) -> Result<()> {
        validate_token(token)?;
        validate_lease(lease)?;
        if engine::renew_one(&self.client.node, &self.keys, token, lease).await? {
            Ok(())
        } else {
            Err(self.token_not_held())
        }
    }

    fn token_not_held(&self) -> Error {
        Error::not_held(format!(
            "lock {:?} is not held by this token: it expired, or was released or removed",
            self.keys.name
        ))
    }

    pub(crate) async fn force_release(&self) -> Result<bool> {
        let node = &self.client.node;
        let keys = &self.keys;
        let retention = millis(node.config.fence_retention).to_string();
        let reply = node
            .eval(
                "force-release",
                &scripts::FORCE_RELEASE,
                &[&keys.lock, &keys.fence, &keys.queue, &keys.waiters],
                &[retention.as_bytes(), keys.channels.as_bytes()],
            )
            .await?;
        if let redis::Value::Array(items) = &reply {
            return match (items.first(), items.get(1).and_then(scripts::as_text)) {
                (Some(redis::Value::Int(-1)), Some(found)) => Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "lock {:?} is a redis {found} that leasehold did not write: force-release \
                         removes only locks, so it was left as it is; delete the key by hand if \
                         it is not needed",
                        keys.name
                    ),
                )),
                _ => Err(Error::unexpected_reply("force-release", &reply)),
            };
        }
        scripts::flag("force-release", &reply)
    }

    pub(crate) async fn inspect(&self) -> Result<LockInfo> {
        let keys = &self.keys;
        let reply = self
            .client
            .node
            .eval(
                "inspect",
                &scripts::INSPECT,
                &[&keys.lock, &keys.fence, &keys.queue],
                &[],
            )
            .await?;
        LockInfo::read(&keys.name, &reply)
    }
}

/// A lock kept after its release for longer than the holder may renew it
/// would outlive the cap: refused, whichever of the two is set first.
fn check_hold_within_cap(hold: Option<Duration>, cap: Option<Duration>) -> Result<()> {
    match (hold, cap) {
        (Some(hold), Some(cap)) if hold > cap => Err(Error::invalid(format!(
            "hold-at-least {hold:?} is longer than the max hold {cap:?}: the lock would be kept \
             past its cap; make the hold shorter or the cap longer"
        ))),
        _ => Ok(()),
    }
}

/// What [`Mutex::inspect`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// Someone holds the lock.
    pub held: bool,
    /// The time left on the holder's lease; `None` when free (or when the key
    /// was set by hand without an expiry).
    pub remaining: Option<Duration>,
    /// The last fence handed out, if any ever was.
    pub last_fence: Option<u64>,
    /// Waiters in the lock's waiter queue: for a `Mutex` or `FairMutex` one
    /// per waiting client (its other tasks wait behind it locally), for the
    /// other kinds one per waiting task. A waiter that died counts until its
    /// heartbeat runs out.
    pub waiting_clients: u64,
    /// The kind of lock the name holds now: `"mutex"` (a `Mutex` or
    /// `FairMutex`), `"reentrant"`, `"rwlock"` or `"semaphore"`; `None` when
    /// nothing is there. A key leasehold did not write shows its Redis type.
    pub kind: Option<String>,
    /// Every live lease: the one holder of a mutex, the readers or the
    /// writer of an rw-lock, each permit lease of a semaphore.
    pub holders: Vec<Holder>,
    /// A semaphore's permit count.
    pub permits: Option<u32>,
    /// When Redis read this state, by the Redis server's clock: compare a
    /// holder's [`acquired_at`](Holder::acquired_at) with it, not with the
    /// local clock (see [`Holder::held_for`]).
    pub read_at: Option<SystemTime>,
}

impl LockInfo {
    /// Reads the reply of `scripts/inspect.lua`.
    fn read(name: &str, reply: &redis::Value) -> Result<LockInfo> {
        let unexpected = || Error::unexpected_reply("inspect", reply);
        let redis::Value::Array(items) = reply else {
            return Err(unexpected());
        };
        let int = |i: usize| {
            items
                .get(i)
                .and_then(scripts::as_int)
                .ok_or_else(unexpected)
        };
        let kind = items
            .first()
            .and_then(scripts::as_text)
            .ok_or_else(unexpected)?;
        let (pttl, fence, waiting, permits) = (int(1)?, int(2)?, int(3)?, int(4)?);
        let read_at = u64::try_from(int(5)?)
            .ok()
            .map(|us| UNIX_EPOCH + Duration::from_micros(us));
        let remaining = engine::pttl(pttl);
        let records = items[6.min(items.len())..]
            .iter()
            .filter_map(scripts::as_text);
        let holders: Vec<Holder> = if kind == "mutex" {
            records
                .map(|record| Holder::from_mutex_record(&record, remaining))
                .collect()
        } else {
            records
                .filter_map(|record| Holder::from_hash_record(&record, true))
                .collect()
        };
        let held = match kind.as_str() {
            "none" => false,
            "reentrant" | "rwlock" | "semaphore" => !holders.is_empty(),
            _ => true,
        };
        Ok(LockInfo {
            name: name.to_owned(),
            held,
            remaining: if held { remaining } else { None },
            last_fence: u64::try_from(fence).ok(),
            waiting_clients: u64::try_from(waiting).unwrap_or(0),
            kind: (kind != "none").then_some(kind),
            holders,
            permits: u32::try_from(permits).ok(),
            read_at,
        })
    }
}
