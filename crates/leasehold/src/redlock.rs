//! A Redlock: N independent Redis masters that hold locks together. It is
//! a [`Client`] whose engine leases from their quorum, and its locks are
//! the client's [`Mutex`]es.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::client::{Client, ClientBuilder, Config};
use crate::conn::replicas::ReplicaAck;
use crate::deploy::backing::Backing;
use crate::deploy::build;
use crate::deploy::quorum::count::Clocks;
use crate::deploy::quorum::{Quorum, QuorumConfig};
use crate::deploy::store::Store;
use crate::engine::state::Engine;
use crate::error::{Error, Result};
use crate::mutex::Mutex;

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
/// [`mutex`](Redlock::mutex). Cheap to clone. It is a [`Client`] whose
/// engine leases from the masters' quorum ([`client`](Redlock::client)):
/// its locks are the same [`Mutex`] as one deployment's, with the same
/// guard, and the blocking API has it too
/// ([`blocking::Redlock`](crate::blocking::Redlock)).
///
/// Only mutexes are offered: a fair queue, a reentrant owner's levels, a
/// read-write lock's readers or a semaphore's permits are state that every
/// master would have to agree on step by step, which a majority vote per
/// acquisition does not give. Use a [`Client`](crate::Client) on one
/// deployment for those.
///
/// Every acquisition hands out a fence that is larger than every fence
/// handed out before for the lock, even when the majority that grants it
/// is another than last time (see [`mutex`](Redlock::mutex)).
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
    client: Client,
    quorum: Arc<Quorum>,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field("masters", &self.addresses())
            .field("prefix", &self.client.prefix())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Redlock`]; start from [`Redlock::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct RedlockBuilder {
    urls: Vec<String>,
    /// The settings a Redlock shares with a client, checked as a client's.
    client: ClientBuilder,
    node_timeout: Option<Duration>,
    drift_factor: f64,
    drift_constant: Duration,
    validity_floor: Option<Duration>,
    retry_delay: Duration,
}

impl Redlock {
    /// The engine and the quorum, for the engine's own tests.
    #[cfg(test)]
    pub(crate) fn quorum_for_tests(&self) -> (Arc<Engine>, Arc<Quorum>) {
        (Arc::clone(&self.client.engine), Arc::clone(&self.quorum))
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
            client: Client::builder(String::new()),
            node_timeout: None,
            drift_factor: DEFAULT_DRIFT_FACTOR,
            drift_constant: DEFAULT_DRIFT_CONSTANT,
            validity_floor: None,
            retry_delay: DEFAULT_RETRY_DELAY,
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
    /// tried again. The guard is a [`LeaseGuard`](crate::LeaseGuard): the watchdog renews on every
    /// master in parallel, and the lease is lost when a renewal reaches fewer
    /// than a majority in time, or its validity runs out.
    ///
    /// Waiting polls: a busy lock is tried again after a jittered pause (and
    /// no later than the lease in the way can run out), bounded by the wait.
    ///
    /// Its keys are those of a [`Mutex`] of the same name and prefix, on
    /// every master; its lease and watchdog are this Redlock's. Every
    /// call of [`Mutex`] works on it, with the differences its docs name:
    /// a wait polls (nobody waits in line, so
    /// [`waiters`](Mutex::waiters) is empty), a lock cannot be watched,
    /// replica acknowledgement does not apply (a majority of the masters
    /// stands for the replicas), and the errors of a quorum
    /// ([`ErrorKind::Quorum`](crate::ErrorKind::Quorum)) come where too
    /// many masters are out of reach.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an
    /// empty name or one over 1024 bytes.
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        self.client.mutex(name)
    }

    /// The client whose engine leases from these masters: the same
    /// [`Client`] as one deployment's, for code that takes a client. It
    /// makes [`mutex`](Client::mutex)es alone; the other kinds are refused
    /// with [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput).
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The masters, as `host:port`, in the order given.
    pub fn addresses(&self) -> Vec<&str> {
        self.quorum
            .masters
            .iter()
            .map(|master| master.address())
            .collect()
    }

    /// How many masters must hold a lock for it to be held.
    pub fn quorum(&self) -> usize {
        self.quorum.majority()
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
        self.client.flush().await;
    }
}

impl RedlockBuilder {
    /// The first part of every key (default `leasehold`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.client = self.client.prefix(prefix);
        self
    }

    /// The lease of the locks made, unless a lock says otherwise (30 s).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.client = self.client.lease(lease);
        self
    }

    /// Whether the locks made renew their leases while held (on).
    pub fn watchdog(mut self, on: bool) -> Self {
        self.client = self.client.watchdog(on);
        self
    }

    /// How long one command to a master may take before its connection
    /// counts as broken and is replaced (2 s). Separate from the per-node
    /// deadline, which is how long an acquisition waits for a master.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.client = self.client.command_timeout(timeout);
        self
    }

    /// How long a round of an acquisition waits for each master before it
    /// counts the master as out of reach. By default a hundredth of the
    /// lease, at least 50 ms and at most a quarter of the lease: far below
    /// the lease, so that a slow master cannot eat it, and above what a
    /// busy host takes to schedule the client and the masters. With the
    /// default, a try in which masters missed the deadline and could have
    /// made a majority with the grants (a loaded host, or masters farther
    /// away than the deadline) makes the next try wait twice as long, up
    /// to a quarter of the lease, and a try that the masters answered in
    /// time goes back to the default; a `try_acquire` is then tried again
    /// rather than answered "held elsewhere", within the command timeout.
    /// A deadline set here is kept as it is. The cost of the floor: a try
    /// whose masters do not answer at all (cut off, paused; a master that
    /// is down refuses the connection at once) takes 50 ms to count them
    /// out where a hundredth of a short lease would take less.
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
        self.client = self.client.restart_grace(grace);
        self
    }

    /// How long a fence counter outlives the last acquisition (7 days).
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.client = self.client.fence_retention(retention);
        self
    }

    /// The client name leases record as their holder's (default the
    /// program's name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.client = self.client.name(name);
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
        let client = self.client.checked()?;
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
        if self.node_timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::invalid(
                "per-node deadline must not be zero: give the masters some time to answer",
            ));
        }
        if !(0.0..=0.5).contains(&self.drift_factor) {
            return Err(Error::invalid(format!(
                "drift factor {} is out of range: give a part of the lease from 0 to 0.5, e.g. \
                 0.01",
                self.drift_factor
            )));
        }
        let masters = build::masters(&urls, client.command_timeout)?
            .into_iter()
            .map(|master| Arc::new(Store::new(master, client.engine.restart_grace).quorum_master()))
            .collect();
        let quorum = Arc::new(Quorum::new(
            masters,
            QuorumConfig {
                clocks: Clocks {
                    drift_factor: self.drift_factor,
                    drift_constant: self.drift_constant,
                },
                node_timeout: self.node_timeout,
                validity_floor: self.validity_floor,
                retry_delay: self.retry_delay,
            },
        ));
        // The masters are independent: a majority of them stands for the
        // replicas.
        let config = Config {
            replica_ack: ReplicaAck::Off,
            ..client.config
        };
        let client = Client {
            engine: Engine::new(Backing::Quorum(Arc::clone(&quorum)), client.engine)?,
            config: Arc::new(config),
        };
        Ok(Redlock { client, quorum })
    }
}

/// A mutex over the masters of a [`Redlock`]: the [`Mutex`] that
/// [`Redlock::mutex`] makes.
pub type RedlockMutex = Mutex;
