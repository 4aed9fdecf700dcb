//! The client: one connection for commands, one for notifications, one
//! watchdog task, shared by every lock made from it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::conn::replicas::ReplicaAck;
use crate::core::{LockCore, Owners};
use crate::deploy::backing::Backing;
use crate::deploy::build::{self, SentinelAuth};
use crate::deploy::store::Store;
use crate::engine::libraries::{self, ScriptLibrary};
use crate::engine::state::{Engine, EngineConfig};
use crate::engine::Kind;
use crate::error::{Error, Result};
use crate::face::LockSettings;
use crate::fair_mutex::FairMutex;
use crate::keys::{validate_lease, validate_prefix, LockKeys};
use crate::mutex::Mutex;
use crate::reentrant_mutex::ReentrantMutex;
use crate::rw_lock::RwLock;
use crate::semaphore::{validate_permits, Semaphore};

/// The Redis leasehold talks to when nothing else is said.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
/// The environment variables [`Client::from_env`] reads the Redis URL from,
/// in order; the first that is set and not empty wins, else [`DEFAULT_URL`].
pub const URL_ENV_VARS: [&str; 2] = ["LEASEHOLD_URL", "REDIS_URL"];
/// The first part of every key leasehold writes.
pub const DEFAULT_PREFIX: &str = "leasehold";
/// The lease of a lock unless the lock or the client says otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// How long a wait goes on when the client has never reached Redis (a
/// wrong address, a server not started): it then ends with the reason.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one command may take before it counts as Redis not answering.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a fence counter outlives the last acquisition of its lock.
pub const DEFAULT_FENCE_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Settings every lock of a client starts from.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) prefix: String,
    pub(crate) lease: Duration,
    pub(crate) watchdog: bool,
    pub(crate) replica_ack: ReplicaAck,
}

/// Builds a [`Client`]; start from [`Client::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct ClientBuilder {
    url: String,
    pub(crate) config: Config,
    pub(crate) engine: EngineConfig,
    pub(crate) command_timeout: Duration,
    name: Option<String>,
    tls_root: Option<Vec<u8>>,
    sentinel_auth: SentinelAuth,
}

impl ClientBuilder {
    /// A builder for the Redis named by the environment: `LEASEHOLD_URL`,
    /// else `REDIS_URL`, else [`DEFAULT_URL`]. Empty values (and values that
    /// are not UTF-8) are skipped. The `leasehold` command reads the same
    /// variables.
    pub fn from_env() -> ClientBuilder {
        Client::builder(url_from_env())
    }

    /// The URLs to reach the deployment by, tried in turn until one
    /// answers: seeds of a Redis Cluster (any of its nodes), or one server.
    /// Replaces the URL the builder was made with.
    pub fn seeds<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.url = urls
            .into_iter()
            .map(Into::into)
            .collect::<Vec<String>>()
            .join(",");
        self
    }

    /// The first part of every key (default [`DEFAULT_PREFIX`]). Clients that
    /// must see each other's locks use the same prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.prefix = prefix.into();
        self
    }

    /// How long one command may take (default [`DEFAULT_COMMAND_TIMEOUT`]).
    /// Keep it well below a third of the shortest lease, so that a slow
    /// renewal is noticed while the lease still runs.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// How long a wait goes on while this client has never reached Redis
    /// (default [`DEFAULT_CONNECT_TIMEOUT`]): a wrong host or port, a
    /// server not started. The wait then ends with the last fault (DNS
    /// failure, connection refused, no answer), as a
    /// [`Connection`](crate::ErrorKind::Connection) error (exit 69 on the
    /// command line). Once any request has reached Redis, waits ride out
    /// outages for as long as their own bound allows.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.engine.connect_timeout = timeout;
        self
    }

    /// Grants no lock through a Redis server that has been up for less than
    /// `grace` (default: off). Set it to at least the longest lease in use
    /// when Redis runs without persistence: a restart then forgets every
    /// lock, and without a grace a waiter takes a lock at once whose old
    /// holder learns of the loss only at its next renewal. With the grace,
    /// every holder from before the restart has passed its local deadline
    /// before anyone is granted the lock again. The uptime is read once per
    /// connection. Meanwhile a `try_acquire` finds every lock busy (`None`),
    /// and a wait that runs out says that the grace held it back.
    ///
    /// The same grace starts at a **change of master**: when the server
    /// that serves a lock's slot is another master than the one this client
    /// last saw there (another run id or replication id: a replica promoted
    /// by a Redis Cluster or Sentinel failover, a restart), it grants no
    /// lock on that slot until the grace has passed. A promoted replica has
    /// a long uptime, and may have missed the latest grants of the master
    /// it replaced; with the grace, their holders' leases end before it
    /// grants again. Without it, fences still keep a fenced resource safe.
    /// A client only knows the masters it has talked to: one that starts
    /// after a failover sees no change.
    pub fn restart_grace(mut self, grace: Duration) -> Self {
        self.engine.restart_grace = Some(grace);
        self
    }

    /// How long the fence counter of a lock outlives its last acquisition
    /// (default [`DEFAULT_FENCE_RETENTION`], at least the longest lease, 24 h).
    /// Fences stay monotonic across its expiry because a fence is never
    /// smaller than the Redis server's clock in microseconds; this assumes
    /// that clock never steps back by more than the retention.
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.engine.fence_retention = retention;
        self
    }

    /// The name this client's leases carry, so that `inspect` and the busy
    /// and timeout errors can say who holds a lock (default: the program's
    /// file name). Each lease also records the host, the process id and the
    /// time Redis granted it. Keep it short: control characters are
    /// replaced and it is cut at [`MAX_CLIENT_NAME_LEN`](crate::MAX_CLIENT_NAME_LEN) bytes.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The lease of each lock made from this client (default [`DEFAULT_LEASE`]).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }

    /// Whether held leases are renewed automatically while their guard lives
    /// (default on). Off, a lease ends after its fixed length unless
    /// [`MutexGuard::extend`](crate::MutexGuard::extend) is called.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.config.watchdog = on;
        self
    }

    /// Which replicas must acknowledge a grant before it counts, for every
    /// lock of this client (a lock may say otherwise with `with_replica_ack`).
    /// The default, [`ReplicaAck::Connected`] with a
    /// [`DEFAULT_REPLICA_TIMEOUT`](crate::DEFAULT_REPLICA_TIMEOUT) of 1 s,
    /// waits for every replica of the master, those it lists and those that
    /// could take over from it, so that a failover to one of them keeps the
    /// lock; a master without replicas pays nothing. [`ReplicaAck::Off`]
    /// grants as soon as the master has: faster on a replicated master (no
    /// `WAIT`, which costs a round trip from the master to its slowest
    /// replica per grant), but a failover to a replica that had not got the
    /// grant yet can give the lock to a second holder while the first
    /// still holds it.
    ///
    /// While a replica that could take over does not acknowledge (stopped,
    /// restarting, resynchronising, cut off from its master: until it is
    /// back, or the sentinels or the cluster mark it down, or, for a master
    /// named directly, the master drops it), no grant on that master is
    /// acknowledged: each is undone, a wait with a bound tries again until
    /// it runs out, and a wait without one gives up after the
    /// [`connect_timeout`](Self::connect_timeout) with
    /// [`ErrorKind::ReplicasMissing`](crate::ErrorKind::ReplicasMissing). A
    /// rolling restart of the replicas pauses grants on each master while
    /// its replica is away; locks already held are not affected.
    pub fn replica_ack(mut self, ack: ReplicaAck) -> Self {
        self.config.replica_ack = ack;
        self
    }

    /// Trusts the CA certificate `pem` (PEM bytes) for `rediss://` URLs,
    /// instead of the public roots: for a Redis with a private CA. (A URL
    /// ending in `#insecure` skips verification altogether; for development only.)
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root = Some(pem.into());
        self
    }

    /// The password the sentinels of a `redis+sentinel://` URL are asked
    /// with (`AUTH`), when it is not the data nodes': the URL's user and
    /// password are the master's and its replicas'. The URL may give it as
    /// `?sentinel_password=…` instead (percent-encoded); this wins. Without
    /// either, the sentinels are asked without credentials.
    pub fn sentinel_password(mut self, password: impl Into<String>) -> Self {
        self.sentinel_auth.password = Some(password.into());
        self
    }

    /// The ACL user the sentinels are asked as, with
    /// [`sentinel_password`](Self::sentinel_password) (or the URL's
    /// `?sentinel_username=…`; this wins).
    pub fn sentinel_username(mut self, username: impl Into<String>) -> Self {
        self.sentinel_auth.username = Some(username.into());
        self
    }

    /// Checks the settings and makes the client. Nothing is sent to Redis
    /// until the first lock operation.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a URL
    /// the Redis client cannot parse, an empty or braced prefix, a zero or
    /// out-of-range lease, or a zero command timeout.
    pub fn build(self) -> Result<Client> {
        let checked = self.checked()?;
        let deployment = build::deployment(
            &checked.url,
            checked.command_timeout,
            checked.tls_root.as_deref(),
            &checked.sentinel_auth,
        )?;
        let store = Store::new(deployment, checked.engine.restart_grace);
        Ok(Client {
            engine: Engine::new(Backing::One(Arc::new(store)), checked.engine)?,
            config: Arc::new(checked.config),
        })
    }

    /// The settings checked, with the holder identity made from the name:
    /// what every client is built from, one deployment or a
    /// [`Redlock`](crate::Redlock)'s masters.
    pub(crate) fn checked(mut self) -> Result<ClientBuilder> {
        validate_prefix(&self.config.prefix)?;
        self.engine.identity = crate::holder::identity(self.name.as_deref());
        validate_lease(self.config.lease)?;
        self.config.replica_ack = self.config.replica_ack.validate()?;
        if self.command_timeout.is_zero() {
            return Err(Error::invalid(
                "command timeout is zero: give Redis some time to answer, e.g. 2s",
            ));
        }
        self.engine.validate()?;
        Ok(self)
    }
}

/// A connection to one Redis deployment, from which locks are made.
///
/// Cloning is cheap and shares the connections and the watchdog. Make one
/// client per process (or per Redis), not one per lock.
///
/// ```no_run
/// # async fn demo() -> leasehold::Result<()> {
/// let client = leasehold::Client::open("redis://127.0.0.1:6379")?;
/// let guard = client.mutex("reports:nightly")?.acquire().await?;
/// println!("fence {}", guard.fence());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) engine: Arc<Engine>,
    pub(crate) config: Arc<Config>,
}

impl Client {
    /// A client with default settings for `url` (`redis://`, or `rediss://`
    /// for TLS; user and password go in the URL).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the URL cannot be parsed.
    pub fn open(url: &str) -> Result<Client> {
        Client::builder(url).build()
    }

    /// A client with default settings for the Redis named by the
    /// environment: `LEASEHOLD_URL`, else `REDIS_URL`, else [`DEFAULT_URL`]
    /// (see [`ClientBuilder::from_env`]).
    ///
    /// ```no_run
    /// # async fn demo() -> leasehold::Result<()> {
    /// let client = leasehold::Client::from_env()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the URL cannot be parsed.
    pub fn from_env() -> Result<Client> {
        ClientBuilder::from_env().build()
    }

    /// A builder for a client of `url`, to change the defaults.
    ///
    /// `url` names one Redis server (`redis://`, or `rediss://` for TLS;
    /// user and password go in the URL), or any node of a Redis Cluster:
    /// a node in cluster mode is found out as one on the first request, the
    /// slot map is read from it, and every lock goes to the master of its
    /// hash slot. Several seeds of a cluster may be given separated by
    /// commas (or with [`ClientBuilder::seeds`]); they are tried in turn,
    /// and one that cannot be reached is skipped.
    ///
    /// A master watched by Redis Sentinel is named by its sentinels:
    /// `redis+sentinel://[user:password@]host:port[,host:port…]/MASTER_NAME[/DB][?sentinel_username=…&sentinel_password=…]`
    /// (`rediss+sentinel://` for TLS, to the sentinels and the data nodes
    /// alike; port 26379 if none is given). The user, password and
    /// database are the data nodes' (the master and its replicas); the
    /// sentinels are asked with `sentinel_username` and `sentinel_password`
    /// when given (as parameters or with
    /// [`ClientBuilder::sentinel_password`]), else without credentials, as
    /// Redis's own sentinels are by default (`requirepass` on a sentinel
    /// guards the sentinel alone). The client follows failovers: on
    /// `+switch-master`, a READONLY answer or a lost connection it asks the
    /// sentinels again and moves every connection to the new master.
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            url: url.into(),
            config: Config {
                prefix: DEFAULT_PREFIX.to_owned(),
                lease: DEFAULT_LEASE,
                watchdog: true,
                replica_ack: ReplicaAck::default(),
            },
            engine: EngineConfig {
                restart_grace: None,
                fence_retention: DEFAULT_FENCE_RETENTION,
                identity: String::new(),
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            },
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            name: None,
            tls_root: None,
            sentinel_auth: SentinelAuth::default(),
        }
    }

    /// The mutex called `name`: one holder at a time, fenced.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an empty
    /// name or a name over 1024 bytes. Any other UTF-8 name is accepted,
    /// braces included (they are escaped in the lock's keys: see the crate
    /// docs on keys).
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        Ok(Mutex::new(self.core(name, Kind::Mutex, Owners::None)?))
    }

    /// The fair mutex called `name`: one holder at a time, fenced, granted
    /// in the order the waiters arrived at Redis.
    ///
    /// A fair mutex and a [`Mutex`] of the same name share one lock; use
    /// one kind per name.
    ///
    /// # Errors
    ///
    /// As [`mutex`](Client::mutex).
    pub fn fair_mutex(&self, name: &str) -> Result<FairMutex> {
        Ok(FairMutex::new(self.core(name, Kind::Fair, Owners::None)?))
    }

    /// The reentrant mutex called `name`: one owner at a time, who may take
    /// it again. Each task that acquires through the handle is an owner of
    /// its own (see [`ReentrantMutex::with_owner`] to name one).
    ///
    /// # Errors
    ///
    /// As [`mutex`](Client::mutex); [`ErrorKind::System`](crate::ErrorKind::System)
    /// when no randomness is left for the owner id.
    pub fn reentrant_mutex(&self, name: &str) -> Result<ReentrantMutex> {
        let owners = Owners::per_task()?;
        Ok(ReentrantMutex::new(self.core(
            name,
            Kind::Reentrant,
            owners,
        )?))
    }

    /// The read-write lock called `name`: many readers or one writer,
    /// writers not starved. Each task that acquires through the handle is
    /// an owner of its own (see [`RwLock::with_owner`] to name one).
    ///
    /// # Errors
    ///
    /// As [`reentrant_mutex`](Client::reentrant_mutex).
    pub fn rw_lock(&self, name: &str) -> Result<RwLock> {
        let owners = Owners::per_task()?;
        Ok(RwLock::new(self.core(name, Kind::Write, owners)?))
    }

    /// The semaphore called `name` with `permits` permits: at most that
    /// many held at once. Every user must give the same count (see
    /// [`Semaphore::set_permits`] to change it).
    ///
    /// # Errors
    ///
    /// As [`mutex`](Client::mutex), and
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for zero
    /// permits or more than [`MAX_PERMITS`](crate::MAX_PERMITS).
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        validate_permits(permits)?;
        let kind = Kind::Semaphore { total: permits };
        Ok(Semaphore::new(
            self.core(name, kind, Owners::None)?,
            permits,
        ))
    }

    /// Waits until the releases this client runs in the background — for
    /// guards dropped without [`release`](crate::MutexGuard::release) and for
    /// cancelled acquisitions — are done, at most four command timeouts.
    ///
    /// Call it before the runtime shuts down (at the end of `main`, before a
    /// CLI exits): a runtime that stops cancels its tasks, and a cancelled
    /// release leaves the lock held until its lease runs out. The client
    /// stays usable afterwards.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub async fn flush(&self) {
        self.engine.flush().await;
    }

    /// The leasehold Redis Functions libraries on every master of the
    /// deployment (every master of a Redis Cluster, the master the
    /// sentinels name, each master of a Redlock): their names, whether
    /// this version loads them, and how many connected clients said they
    /// may call them. Every version of leasehold loads a library of its own
    /// (its name carries a hash of its scripts), and a rolling upgrade
    /// leaves the old version's behind. A server without Functions (Redis
    /// 6.2) has none.
    ///
    /// # Errors
    ///
    /// A master out of reach, or a user not allowed `FUNCTION LIST` or
    /// `CLIENT LIST`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn script_libraries(&self) -> Result<Vec<ScriptLibrary>> {
        libraries::libraries(&self.engine, None).await
    }

    /// Removes the leasehold Functions libraries that no connected client
    /// may call ([`ScriptLibrary::is_unused`]), on every master, and
    /// answers every library found, the removed ones marked. A library of
    /// this version, or one a connected client said it may call, is never
    /// removed. Clients of leasehold from before clients said which
    /// library they call, and every client of a server older than Redis
    /// 7.2, cannot be told apart from others: while one is connected, a
    /// library is removed only with `force`. A client that finds its
    /// library gone loads it again, at the cost of one more round trip on
    /// its next call, so a removal that was wrong (a client that connects
    /// between the look and the removal, or a forced one) slows a call and
    /// fails none.
    ///
    /// # Errors
    ///
    /// As [`script_libraries`](Self::script_libraries), and a user not
    /// allowed `FUNCTION DELETE`.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may have removed some libraries.
    pub async fn remove_unused_script_libraries(&self, force: bool) -> Result<Vec<ScriptLibrary>> {
        libraries::libraries(&self.engine, Some(force)).await
    }

    /// The core of the lock `name` of `kind`, with this client's settings.
    /// A Redlock's client makes mutexes alone.
    pub(crate) fn core(&self, name: &str, kind: Kind, owners: Owners) -> Result<LockCore> {
        let keys = LockKeys::new(&self.config.prefix, name)?;
        if kind != Kind::Mutex && matches!(self.engine.backing, Backing::Quorum(_)) {
            return Err(Error::invalid(
                "a Redlock offers mutexes only: a fair queue, a reentrant owner's levels, a \
                 read-write lock's readers and a semaphore's permits are state that every \
                 master would have to agree on step by step, which a majority vote per \
                 acquisition does not give; use a Client on one deployment for them",
            ));
        }
        let settings = LockSettings::new(
            self.config.lease,
            self.config.watchdog,
            self.config.replica_ack,
        );
        Ok(LockCore::new(
            Arc::clone(&self.engine),
            keys,
            kind,
            settings,
            owners,
        ))
    }

    /// The key prefix of this client.
    pub fn prefix(&self) -> &str {
        &self.config.prefix
    }
}

/// The Redis URL the environment names, as [`ClientBuilder::from_env`] reads it.
fn url_from_env() -> String {
    URL_ENV_VARS
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|url| !url.is_empty()))
        .unwrap_or_else(|| DEFAULT_URL.to_owned())
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("address", &self.engine.backing.address())
            .field("config", &self.config)
            .field("node", &self.engine.config)
            .finish_non_exhaustive()
    }
}
