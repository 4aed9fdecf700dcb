//! A mutex over N independent Redis masters (Redlock), fenced.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::client::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_FENCE_RETENTION, DEFAULT_LEASE, DEFAULT_PREFIX,
};
use crate::core::Settings;
use crate::deploy::build;
use crate::engine::quorum::Clocks;
use crate::engine::redlock::{Ask, Masters, QuorumConfig};
use crate::engine::{ops, Engine, EngineConfig, Kind};
use crate::error::{Error, Result};
use crate::guard::LeaseGuard;
use crate::holder::LockInfo;
use crate::keys::{
    validate_lease, validate_prefix, validate_token, validate_wait, LockKeys, MAX_LEASE,
};
use crate::lock::{Lock, LockFuture};
use crate::observe::{self, Op};

/// The environment variable [`Redlock::from_env`] and the `leasehold`
/// command read the masters from: URLs separated by commas.
pub const REDLOCK_ENV_VAR: &str = "LEASEHOLD_REDLOCK";
/// The fewest masters a Redlock accepts: with two, one master out of reach
/// stops every lock, and one alone is a single Redis.
pub const MIN_MASTERS: usize = 3;
/// The part of a lease allowed for clock drift, unless set.
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
/// The drift allowed on top of that, unless set.
pub const DEFAULT_DRIFT_CONSTANT: Duration = Duration::from_millis(2);
/// The pause between tries of a wait (jittered by ±50%), unless set.
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);

/// N independent Redis masters (at least 3) that hold locks together: a
/// lock is held while a majority of them hold it and its validity has not
/// run out. Made by [`Redlock::builder`] (or [`open`](Redlock::open),
/// [`from_env`](Redlock::from_env)); locks are made by
/// [`mutex`](Redlock::mutex). Cheap to clone.
///
/// Only mutexes are offered: a fair queue, a reentrant owner's levels, a
/// read-write lock's readers or a semaphore's permits are state that every
/// master would have to agree on step by step, which a majority vote per
/// acquisition does not give. Use a [`Client`](crate::Client) on one
/// deployment for those.
///
/// Every acquisition hands out a fence that is larger than every fence
/// handed out before for the lock, even when the majority that grants it
/// is another than last time (see [`RedlockMutex`]).
///
/// ```no_run
/// # async fn demo() -> leasehold::Result<()> {
/// let redlock = leasehold::Redlock::builder([
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])
/// .build()?;
/// let mutex = redlock.mutex("ledger:eu")?;
/// let guard = mutex.acquire().await?;
/// // write, passing guard.fence() along
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    masters: Arc<Masters>,
    prefix: String,
    lease: Duration,
    watchdog: bool,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field("masters", &self.addresses())
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Redlock`]; start from [`Redlock::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct RedlockBuilder {
    urls: Vec<String>,
    prefix: String,
    lease: Duration,
    watchdog: bool,
    command_timeout: Duration,
    node_timeout: Option<Duration>,
    drift_factor: f64,
    drift_constant: Duration,
    validity_floor: Option<Duration>,
    retry_delay: Duration,
    restart_grace: Option<Duration>,
    fence_retention: Duration,
    name: Option<String>,
}

impl Redlock {
    /// The masters, for the engine's own tests.
    #[cfg(test)]
    pub(crate) fn masters(&self) -> &Arc<Masters> {
        &self.masters
    }

    /// A builder over the masters `urls` (each `redis://` or `rediss://`,
    /// one independent server each).
    pub fn builder<I, S>(urls: I) -> RedlockBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedlockBuilder {
            urls: urls.into_iter().map(Into::into).collect(),
            prefix: DEFAULT_PREFIX.to_owned(),
            lease: DEFAULT_LEASE,
            watchdog: true,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            node_timeout: None,
            drift_factor: DEFAULT_DRIFT_FACTOR,
            drift_constant: DEFAULT_DRIFT_CONSTANT,
            validity_floor: None,
            retry_delay: DEFAULT_RETRY_DELAY,
            restart_grace: None,
            fence_retention: DEFAULT_FENCE_RETENTION,
            name: None,
        }
    }

    /// A Redlock over the masters in `urls`, separated by commas, with the
    /// default settings.
    ///
    /// # Errors
    ///
    /// As [`RedlockBuilder::build`].
    pub fn open(urls: &str) -> Result<Redlock> {
        Redlock::builder(urls.split(',').map(str::trim).filter(|u| !u.is_empty())).build()
    }

    /// A Redlock over the masters in `$LEASEHOLD_REDLOCK` (URLs separated
    /// by commas).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the
    /// variable is not set; otherwise as [`RedlockBuilder::build`].
    pub fn from_env() -> Result<Redlock> {
        match std::env::var(REDLOCK_ENV_VAR) {
            Ok(urls) if !urls.trim().is_empty() => Redlock::open(&urls),
            _ => Err(Error::invalid(format!(
                "{REDLOCK_ENV_VAR} is not set: give the masters' URLs separated by commas, e.g. \
                 redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379"
            ))),
        }
    }

    /// The mutex `name` over these masters, with this Redlock's lease and
    /// watchdog setting. Its keys are those of a [`Mutex`](crate::Mutex) of
    /// the same name and prefix, on every master.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an
    /// empty name or one over 1024 bytes.
    pub fn mutex(&self, name: &str) -> Result<RedlockMutex> {
        Ok(RedlockMutex {
            masters: Arc::clone(&self.masters),
            keys: Arc::new(LockKeys::new(&self.prefix, name)?),
            // The masters are independent: a majority of them stands for
            // the replicas.
            settings: Settings::new(
                self.lease,
                self.watchdog,
                crate::conn::replicas::ReplicaAck::Off,
            ),
            handle: crate::core::new_handle(),
        })
    }

    /// The masters, as `host:port`, in the order given.
    pub fn addresses(&self) -> Vec<&str> {
        self.masters
            .nodes
            .iter()
            .map(|node| node.store.address())
            .collect()
    }

    /// How many masters must hold a lock for it to be held.
    pub fn quorum(&self) -> usize {
        crate::engine::quorum::majority(self.masters.len())
    }

    /// Waits until what this Redlock runs in the background is done, at
    /// most a few command timeouts: releases from dropped guards and
    /// attempts, and requests that outlived their round, such as a grant
    /// that came after the acquisition returned (fenced and kept while its
    /// hold is live, released otherwise).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub async fn flush(&self) {
        self.masters.flush().await;
    }
}

impl RedlockBuilder {
    /// The first part of every key (default `leasehold`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The lease of the locks made, unless a lock says otherwise (30 s).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Whether the locks made renew their leases while held (on).
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// How long one command to a master may take before its connection
    /// counts as broken and is replaced (2 s). Separate from the per-node
    /// deadline, which is how long an acquisition waits for a master.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// How long a round of an acquisition waits for each master before it
    /// counts the master as out of reach. By default a hundredth of the
    /// lease, and at least 5 ms: far below the lease, so that a slow
    /// master cannot eat it. With the default, a try in which so many
    /// masters missed the deadline that no majority answered makes the
    /// next try of the same wait wait twice as long, up to a quarter of the
    /// lease (a loaded host, or masters farther away than a hundredth of
    /// the lease), and a try that a majority answered in time goes back
    /// to the default; a deadline set here is kept as it is.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// The clock drift allowed for: `factor` of the lease plus `constant`
    /// (default 1% plus 2 ms). The validity of a grant is the lease, minus
    /// the time its acquisition took, minus the drift.
    pub fn drift(mut self, factor: f64, constant: Duration) -> Self {
        self.drift_factor = factor;
        self.drift_constant = constant;
        self
    }

    /// The least validity a grant must have left to be reported held;
    /// one with less is released and tried again (default a tenth of the
    /// lease).
    pub fn validity_floor(mut self, floor: Duration) -> Self {
        self.validity_floor = Some(floor);
        self
    }

    /// The pause between tries of a wait, before a jitter of ±50% (50 ms).
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// A master that has been up for less than `grace` grants nothing (as
    /// [`ClientBuilder::restart_grace`](crate::ClientBuilder::restart_grace)),
    /// each master on its own. Set it to the longest lease in use when the
    /// masters run without persistence: a restarted master has forgotten
    /// the locks it held.
    pub fn restart_grace(mut self, grace: Duration) -> Self {
        self.restart_grace = Some(grace);
        self
    }

    /// How long a fence counter outlives the last acquisition (7 days).
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// The client name leases record as their holder's (default the
    /// program's name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Builds the Redlock. Nothing is sent until a lock is used.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for
    /// fewer than 3 masters, the same master twice, a URL the Redis client
    /// cannot parse, an empty or braced prefix, a lease out of range, a
    /// zero command timeout or per-node deadline, a drift factor outside
    /// 0 to 0.5, or a fence retention under 24 h.
    pub fn build(self) -> Result<Redlock> {
        validate_prefix(&self.prefix)?;
        validate_lease(self.lease)?;
        let urls: Vec<&str> = self
            .urls
            .iter()
            .map(|url| url.trim())
            .filter(|url| !url.is_empty())
            .collect();
        if urls.len() < MIN_MASTERS {
            return Err(Error::invalid(format!(
                "a Redlock needs at least {MIN_MASTERS} independent masters, got {}: give 3 or \
                 more URLs (5 is usual), or use a Client for one Redis",
                urls.len()
            )));
        }
        if self.command_timeout.is_zero() || self.node_timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::invalid(
                "command timeout and per-node deadline must not be zero: give the masters some \
                 time to answer",
            ));
        }
        if !(0.0..=0.5).contains(&self.drift_factor) {
            return Err(Error::invalid(format!(
                "drift factor {} is out of range: give a part of the lease from 0 to 0.5, e.g. \
                 0.01",
                self.drift_factor
            )));
        }
        if self.fence_retention < MAX_LEASE {
            return Err(Error::invalid(format!(
                "fence retention {:?} is shorter than the longest lease (24h): a fence counter \
                 must outlive every lease, e.g. 7 days",
                self.fence_retention
            )));
        }
        if self.restart_grace.is_some_and(|g| g > MAX_LEASE) {
            return Err(Error::invalid(
                "restart grace is longer than 24h: set it to the longest lease in use",
            ));
        }
        let config = EngineConfig {
            restart_grace: self.restart_grace,
            fence_retention: self.fence_retention,
            identity: crate::holder::identity(self.name.as_deref()),
            connect_timeout: crate::client::DEFAULT_CONNECT_TIMEOUT,
            redlock_master: true,
        };
        let nodes = build::masters(&urls, self.command_timeout)?
            .into_iter()
            .map(|master| Engine::new(master, config.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Redlock {
            masters: Arc::new(Masters {
                nodes,
                config: QuorumConfig {
                    clocks: Clocks {
                        drift_factor: self.drift_factor,
                        drift_constant: self.drift_constant,
                    },
                    node_timeout: self.node_timeout,
                    validity_floor: self.validity_floor,
                    retry_delay: self.retry_delay,
                },
                inflight: Arc::default(),
                mine: std::sync::Mutex::default(),
                clocks: urls.iter().map(|_| Arc::default()).collect(),
            }),
            prefix: self.prefix,
            lease: self.lease,
            watchdog: self.watchdog,
        })
    }
}

/// A mutex over the masters of a [`Redlock`]: one holder at a time, held
/// while a majority of the masters hold it. Made by [`Redlock::mutex`];
/// cheap to clone.
///
/// An acquisition asks every master at once, each with a per-node
/// deadline far below the lease; it returns as soon as a majority has
/// granted, and gives up as soon as a majority can no longer grant. The
/// fence is one more than the largest counter among the masters that
/// granted (and at least their clock in µs), written back to them before
/// the lock is reported held, so it never goes back when the majority
/// changes. A grant with less than the validity floor left is released and
/// tried again. The guard is a [`LeaseGuard`]: the watchdog renews on every
/// master in parallel, and the lease is lost when a renewal reaches fewer
/// than a majority in time, or its validity runs out.
///
/// Waiting polls: a busy lock is tried again after a jittered pause (and
/// no later than the lease in the way can run out), bounded by the wait.
#[derive(Clone)]
pub struct RedlockMutex {
    masters: Arc<Masters>,
    /// Shared with every request and hold of this lock.
    keys: Arc<LockKeys>,
    settings: Settings,
    /// This handle's id in this process, shared by its clones.
    handle: Arc<str>,
}

impl fmt::Debug for RedlockMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockMutex")
            .field("name", &self.keys.name)
            .field("masters", &self.masters.len())
            .field("lease", &self.settings.lease)
            .field("watchdog", &self.settings.watchdog)
            .field("hold_at_least", &self.settings.hold_at_least)
            .field("max_hold", &self.settings.max_hold)
            .finish()
    }
}

/// What one master holds of a lock, as [`RedlockMutex::inspect_masters`]
/// reads it.
#[derive(Debug)]
#[non_exhaustive]
pub struct MasterInfo {
    /// The master, as `host:port`.
    pub address: String,
    /// Its state of the lock, or why it could not be read.
    pub info: Result<LockInfo>,
}

impl RedlockMutex {
    /// The lock's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// This lock with another lease length.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// lease under 10 ms or over 24 h.
    pub fn with_lease(mut self, lease: Duration) -> Result<Self> {
        self.settings.set_lease(lease)?;
        Ok(self)
    }

    /// This lock with the watchdog on or off.
    #[must_use]
    pub fn with_watchdog(mut self, on: bool) -> Self {
        self.settings.watchdog = on;
        self
    }

    /// This lock with a hold-at-least, as
    /// [`Mutex::with_hold_at_least`](crate::Mutex::with_hold_at_least): a
    /// release before it keeps the lock on every master until it has passed.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// hold over 24 h, or longer than the max hold.
    pub fn with_hold_at_least(mut self, hold: Duration) -> Result<Self> {
        self.settings.set_hold_at_least(hold)?;
        Ok(self)
    }

    /// This lock with a max hold, as
    /// [`Mutex::with_max_hold`](crate::Mutex::with_max_hold).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// max hold under 10 ms or over 24 h, or shorter than the hold-at-least.
    pub fn with_max_hold(mut self, max: Duration) -> Result<Self> {
        self.settings.set_max_hold(max)?;
        Ok(self)
    }

    /// Who acquires through this handle now: the current tokio task (or,
    /// outside a task, the thread), as for a [`Mutex`](crate::Mutex).
    fn holder(&self) -> String {
        crate::core::Owners::None.holder(&self.handle).into_owned()
    }

    /// Whether the caller (the current tokio task, or the calling thread
    /// outside a task) holds this lock in this process now, as
    /// [`Mutex::is_held_by_current_owner`](crate::Mutex::is_held_by_current_owner):
    /// a guard it took through this handle (or a clone of it) is alive, not
    /// released or detached, and its lease is not known lost. Its own
    /// [`acquire`](Self::acquire) or [`try_acquire`](Self::try_acquire)
    /// fails at once with [`ErrorKind::Conflict`](crate::ErrorKind::Conflict)
    /// instead of waiting for itself. Answered without a round trip.
    #[must_use]
    pub fn is_held_by_current_owner(&self) -> bool {
        self.masters.held_by(&self.keys, &self.holder()).is_some()
    }

    fn ask<'a>(&'a self, holder: &'a str) -> Ask<'a> {
        let s = &self.settings;
        Ask {
            keys: &self.keys,
            holder,
            lease: s.max_hold.map_or(s.lease, |max| s.lease.min(max)),
            renew: s.watchdog,
            hold_at_least: s.hold_at_least,
            max_hold: s.max_hold,
        }
    }

    /// One try on every master: the guard if a majority granted, `None`
    /// if the lock is held elsewhere.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Quorum`](crate::ErrorKind::Quorum) when so many masters
    /// are out of reach that no majority is possible: at once when they
    /// refuse or fail, and after tries for up to the command timeout when
    /// they only miss the per-node deadline (a connection still being made,
    /// a slow or paused master); [`ErrorKind::Conflict`](crate::ErrorKind::Conflict)
    /// when a master keeps another kind of lock under the name, or at once
    /// when the caller holds this lock already (see
    /// [`is_held_by_current_owner`](Self::is_held_by_current_owner)):
    /// waiting would be a wait for itself.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped try releases in the background on every
    /// master that granted, and a grant that arrives later is released by
    /// the request that got it.
    pub async fn try_acquire(&self) -> Result<Option<LeaseGuard>> {
        let holder = self.holder();
        let ask = self.ask(&holder);
        self.masters.refuse_own_second_attempt(&ask)?;
        let attempt = self.masters.try_acquire(&ask);
        let fence = |held: &Option<crate::engine::redlock::QuorumHeld>| {
            held.as_ref().map(crate::engine::redlock::QuorumHeld::fence)
        };
        let held =
            observe::acquisition(Kind::Mutex, &self.keys.name, false, attempt, fence).await?;
        Ok(held.map(LeaseGuard::quorum))
    }

    /// Waits as long as it takes for the lock.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Quorum`](crate::ErrorKind::Quorum) when so many
    /// masters are out of reach that no majority is possible, as for
    /// [`try_acquire`](Self::try_acquire): waiting for holders to let go
    /// would not help. Otherwise as [`try_acquire`](Self::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`try_acquire`](Self::try_acquire).
    pub async fn acquire(&self) -> Result<LeaseGuard> {
        self.acquire_within(None).await
    }

    /// Waits at most `wait` for the lock.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when the lock is
    /// still held elsewhere after `wait`; otherwise as
    /// [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`try_acquire`](Self::try_acquire).
    pub async fn acquire_timeout(&self, wait: Duration) -> Result<LeaseGuard> {
        validate_wait(wait)?;
        self.acquire_within(Some(wait)).await
    }

    async fn acquire_within(&self, wait: Option<Duration>) -> Result<LeaseGuard> {
        let holder = self.holder();
        let ask = self.ask(&holder);
        self.masters.refuse_own_second_attempt(&ask)?;
        let attempt = self.masters.acquire(&ask, wait);
        let fence = |held: &crate::engine::redlock::QuorumHeld| Some(held.fence());
        let held = observe::acquisition(Kind::Mutex, &self.keys.name, true, attempt, fence).await?;
        Ok(LeaseGuard::quorum(held))
    }

    /// Waits for the lock, runs `work` with the guard, releases, and
    /// returns what `work` returned if the lease held to the end, as
    /// [`Mutex::with_lock`](crate::Mutex::with_lock).
    ///
    /// # Errors
    ///
    /// As [`Mutex::with_lock`](crate::Mutex::with_lock) and
    /// [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the guard is released in the background.
    pub async fn with_lock<T>(&self, work: impl AsyncFnOnce(&LeaseGuard) -> T) -> Result<T> {
        crate::with_lock::locked(self.acquire().await?, work).await
    }

    /// As [`with_lock`](Self::with_lock), waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`with_lock`](Self::with_lock) and
    /// [`acquire_timeout`](Self::acquire_timeout).
    ///
    /// # Cancel safety
    ///
    /// As [`with_lock`](Self::with_lock).
    pub async fn with_lock_timeout<T>(
        &self,
        wait: Duration,
        work: impl AsyncFnOnce(&LeaseGuard) -> T,
    ) -> Result<T> {
        crate::with_lock::locked(self.acquire_timeout(wait).await?, work).await
    }

    /// Releases the lock on every master where `token` holds it (a lease
    /// taken by another process); on how many masters it was held.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when fewer than a
    /// majority held it (it is released on those that did);
    /// [`ErrorKind::Quorum`](crate::ErrorKind::Quorum) when too many did
    /// not answer to tell.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not release the lock.
    pub async fn release_token(&self, token: &str) -> Result<usize> {
        validate_token(token)?;
        let span = observe::span(Op::ReleaseToken, Kind::Mutex, &self.keys.name, None);
        observe::traced(span, self.masters.release_token(&self.keys, token)).await
    }

    /// Sets the lease of `token` to `lease` on every master; a majority
    /// must confirm.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when fewer than a
    /// majority hold it; [`ErrorKind::Quorum`](crate::ErrorKind::Quorum)
    /// when too many did not answer (nothing is released).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not extend the lease.
    pub async fn extend_token(&self, token: &str, lease: Duration) -> Result<()> {
        validate_token(token)?;
        let span = observe::span(Op::ExtendToken, Kind::Mutex, &self.keys.name, None);
        observe::traced(span, self.masters.extend_token(&self.keys, token, lease)).await
    }

    /// Removes the lock on every master whoever holds it: an admin action.
    /// Whether any master had it. Fence counters are kept.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Quorum`](crate::ErrorKind::Quorum) when a majority of
    /// the masters could not be reached.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not remove the lock.
    pub async fn force_release(&self) -> Result<bool> {
        let mut removed = false;
        let mut failed = 0;
        let mut last = None;
        let answers = futures_util::future::join_all(
            self.masters
                .nodes
                .iter()
                .map(|node| ops::force_release(node, &self.keys)),
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
        let n = self.masters.len();
        if failed > n - crate::engine::quorum::majority(n) {
            if let Some(last) = last {
                return Err(Error::new(
                    crate::error::ErrorKind::Quorum,
                    format!(
                        "force-release of lock {:?} reached {} of {n} masters (quorum not \
                         reached): {}",
                        self.keys.name,
                        n - failed,
                        last.situation()
                    ),
                )
                .remedy_of(Some(&last)));
            }
        }
        Ok(removed)
    }

    /// What every master holds of the lock, in the order the masters were
    /// given.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn inspect_masters(&self) -> Vec<MasterInfo> {
        let answers = futures_util::future::join_all(
            self.masters
                .nodes
                .iter()
                .map(|node| ops::inspect(node, &self.keys)),
        )
        .await;
        self.masters
            .nodes
            .iter()
            .zip(answers)
            .map(|(node, info)| MasterInfo {
                address: node.store.address().to_owned(),
                info,
            })
            .collect()
    }

    /// The lock as a majority of the masters see it: held when a majority
    /// hold it, with the holder and lease of the first of those. While it
    /// is held, the last fence is the holder's, the one its acquisition
    /// returned: the counter that a majority of the masters hold the lock
    /// at (its round two wrote it there). A master that granted after the
    /// majority had keeps a fence of its own, from its clock, a little
    /// past it: [`inspect_masters`](Self::inspect_masters) shows each
    /// master's. While it is free (or while no counter is shared by a
    /// majority of its holding masters, as in the moment its round two is
    /// written), the last fence is the largest counter any master has, at
    /// least the last fence handed out.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Quorum`](crate::ErrorKind::Quorum) when fewer than a
    /// majority of the masters could be read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn inspect(&self) -> Result<LockInfo> {
        let masters = self.inspect_masters().await;
        let n = masters.len();
        let majority = crate::engine::quorum::majority(n);
        let mut read = Vec::new();
        let mut last: Option<Error> = None;
        let mut passing = true;
        for master in masters {
            match master.info {
                Ok(info) => read.push(info),
                Err(error) => {
                    passing &= error.is_transient();
                    last = Some(error);
                }
            }
        }
        if read.len() < majority {
            let error = Error::new(
                crate::error::ErrorKind::Quorum,
                format!(
                    "inspect of lock {:?} read {} of {n} masters, fewer than a majority \
                     ({majority}): quorum not reached{}",
                    self.keys.name,
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
}

/// The fence counter that at least `majority` of the masters read hold the
/// lock at, if one is.
fn agreed_fence(read: &[LockInfo], majority: usize) -> Option<u64> {
    let mut counts: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
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

impl Lock for RedlockMutex {
    fn name(&self) -> &str {
        &self.keys.name
    }

    fn key(&self) -> &str {
        &self.keys.lock
    }

    fn try_acquire(&self) -> LockFuture<'_, Option<LeaseGuard>> {
        Box::pin(RedlockMutex::try_acquire(self))
    }

    fn acquire(&self) -> LockFuture<'_, LeaseGuard> {
        Box::pin(RedlockMutex::acquire(self))
    }

    fn acquire_timeout(&self, wait: Duration) -> LockFuture<'_, LeaseGuard> {
        Box::pin(RedlockMutex::acquire_timeout(self, wait))
    }

    fn release_token<'a>(&'a self, token: &'a str) -> LockFuture<'a, ()> {
        Box::pin(async move { RedlockMutex::release_token(self, token).await.map(drop) })
    }

    fn extend_token<'a>(&'a self, token: &'a str, lease: Duration) -> LockFuture<'a, ()> {
        Box::pin(RedlockMutex::extend_token(self, token, lease))
    }

    fn force_release(&self) -> LockFuture<'_, bool> {
        Box::pin(RedlockMutex::force_release(self))
    }

    fn inspect(&self) -> LockFuture<'_, LockInfo> {
        Box::pin(RedlockMutex::inspect(self))
    }
}
