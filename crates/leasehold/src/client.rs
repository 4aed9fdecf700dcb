//! The client: one connection for commands, one for notifications, one
//! watchdog task, shared by every lock made from it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::engine::notify::Notifier;
use crate::engine::queue::LocalQueues;
use crate::engine::watchdog::Watchdog;
use crate::engine::Background;
use crate::error::{Error, Result};
use crate::keys::{validate_lease, validate_prefix, LockKeys};
use crate::mutex::Mutex;

/// The Redis leasehold talks to when nothing else is said.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
/// The first part of every key leasehold writes.
pub const DEFAULT_PREFIX: &str = "leasehold";
/// The lease of a lock unless the lock or the client says otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// How long one command may take before it counts as Redis not answering.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// Settings every lock of a client starts from.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) prefix: String,
    pub(crate) command_timeout: Duration,
    pub(crate) lease: Duration,
    pub(crate) watchdog: bool,
}

/// Builds a [`Client`]; start from [`Client::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct ClientBuilder {
    url: String,
    config: Config,
    tls_root: Option<Vec<u8>>,
}

impl ClientBuilder {
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
        self.config.command_timeout = timeout;
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

    /// Trusts the CA certificate `pem` (PEM bytes) for `rediss://` URLs,
    /// instead of the public roots: for a Redis with a private CA. (A URL
    /// ending in `#insecure` skips verification altogether; for development only.)
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root = Some(pem.into());
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
        validate_prefix(&self.config.prefix)?;
        validate_lease(self.config.lease)?;
        if self.config.command_timeout.is_zero() {
            return Err(Error::invalid(
                "command timeout is zero: give Redis some time to answer, e.g. 2s",
            ));
        }
        if self.url.starts_with("rediss:") {
            // rustls needs a process-wide crypto provider; keep the one the
            // application installed, if any.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let invalid_url = |e| {
            Error::invalid(
                "redis URL is not valid: use redis://[user:password@]host:port[/db] or rediss://",
            )
            .with_source(e)
        };
        let redis = match self.tls_root {
            None => redis::Client::open(self.url.as_str()).map_err(invalid_url)?,
            Some(root) => {
                let certificates = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(root),
                };
                redis::Client::build_with_tls(self.url.as_str(), certificates).map_err(|e| {
                    Error::invalid(
                        "TLS root certificate is not usable: pass the CA certificate in PEM form",
                    )
                    .with_source(e)
                })?
            }
        };
        let address = redis.get_connection_info().addr().to_string();
        let notifier = Notifier::new(redis.clone(), self.config.command_timeout);
        Ok(Client {
            inner: Arc::new(ClientInner {
                redis,
                address,
                connection: tokio::sync::OnceCell::new(),
                config: self.config,
                notifier,
                watchdog: Arc::new(Watchdog::default()),
                queues: LocalQueues::default(),
                background: Background::default(),
            }),
        })
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
    pub(crate) inner: Arc<ClientInner>,
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

    /// A builder for a client of `url`, to change the defaults.
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            url: url.into(),
            config: Config {
                prefix: DEFAULT_PREFIX.to_owned(),
                command_timeout: DEFAULT_COMMAND_TIMEOUT,
                lease: DEFAULT_LEASE,
                watchdog: true,
            },
            tls_root: None,
        }
    }

    /// The mutex called `name`: one holder at a time, fenced.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an empty
    /// name, a name over 1024 bytes, or one that contains `{` or `}`.
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        let keys = LockKeys::new(&self.inner.config.prefix, name)?;
        Ok(Mutex::new(self.clone(), keys))
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
        let limit = self.inner.config.command_timeout.saturating_mul(4);
        let _ = tokio::time::timeout(limit, self.inner.background.idle()).await;
    }

    /// The key prefix of this client.
    pub fn prefix(&self) -> &str {
        &self.inner.config.prefix
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("address", &self.inner.address)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

pub(crate) struct ClientInner {
    redis: redis::Client,
    /// Host and port only: the URL may carry a password.
    address: String,
    connection: tokio::sync::OnceCell<ConnectionManager>,
    pub(crate) config: Config,
    pub(crate) notifier: Notifier,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) queues: LocalQueues,
    pub(crate) background: Background,
}

impl ClientInner {
    /// The connection, made on first use (bounded by the command timeout);
    /// nothing is sent by this.
    pub(crate) async fn connected(&self) -> Result<ConnectionManager> {
        let timeout = self.config.command_timeout;
        let connect = self.connection.get_or_try_init(|| async {
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                .set_number_of_retries(2)
                .set_max_delay(Duration::from_millis(500));
            ConnectionManager::new_with_config(self.redis.clone(), config)
                .await
                .map_err(|e| Error::redis(&self.address, "connect", e))
        });
        match tokio::time::timeout(timeout, connect).await {
            Ok(manager) => Ok(manager?.clone()),
            Err(_) => Err(Error::no_answer(&self.address, "connect", timeout)),
        }
    }

    /// Runs `operation` on `conn`, bounded by the command timeout.
    pub(crate) async fn run_on<T, F, Fut>(
        &self,
        conn: ConnectionManager,
        operation: &str,
        f: F,
    ) -> Result<T>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let timeout = self.config.command_timeout;
        match tokio::time::timeout(timeout, f(conn)).await {
            Ok(result) => result.map_err(|e| Error::redis(&self.address, operation, e)),
            Err(_) => Err(Error::no_answer(&self.address, operation, timeout)),
        }
    }

    /// Runs `operation` with a connection.
    pub(crate) async fn run<T, F, Fut>(&self, operation: &str, f: F) -> Result<T>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let conn = self.connected().await?;
        self.run_on(conn, operation, f).await
    }

    /// Runs one script on `conn`; NOSCRIPT is answered by loading it and
    /// sending it again.
    pub(crate) async fn eval_on(
        &self,
        conn: ConnectionManager,
        operation: &str,
        script: &redis::Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<redis::Value> {
        self.run_on(conn, operation, |mut conn| async move {
            let mut invocation = script.prepare_invoke();
            for key in keys {
                invocation.key(*key);
            }
            for arg in args {
                invocation.arg(*arg);
            }
            invocation.invoke_async(&mut conn).await
        })
        .await
    }

    /// Runs one script with a connection.
    pub(crate) async fn eval(
        &self,
        operation: &str,
        script: &redis::Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<redis::Value> {
        let conn = self.connected().await?;
        self.eval_on(conn, operation, script, keys, args).await
    }
}
