//! The one error type of the library.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use crate::holder::Holder;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, in a form a program can branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The wait for a lock ran out before the lock could be taken.
    Timeout,
    /// The lock is not held by this lease or token: it was released, it
    /// expired, it was removed by an admin, or the lease was lost.
    NotHeld,
    /// An argument was refused before anything was sent to Redis.
    InvalidInput,
    /// Redis could not be reached, or did not answer within the command
    /// timeout. Worth trying again later.
    Connection,
    /// Redis refused the credentials (a wrong or missing password or user),
    /// or the user may not run what leasehold needs (ACL). Trying again does
    /// not help: fix the user and password in the URL, or the ACL.
    Auth,
    /// Redis refused the connection's settings: a database number it does
    /// not have, TLS on a port without it or a certificate it cannot prove.
    /// Trying again does not help: fix the URL or the TLS settings.
    Config,
    /// Redis answered with an error, or with a reply leasehold does not understand.
    Server,
    /// The operating system refused something leasehold needs (randomness for tokens).
    System,
    /// The lock cannot be taken as asked, and waiting would not change
    /// that: its name is in use by another kind of lock, the owner of a
    /// read lock asked for the write lock (an upgrade, which could deadlock),
    /// or a semaphore was asked for with another permit count than it has.
    Conflict,
}

/// The error of every fallible leasehold operation.
///
/// Its message says what happened and what to do; the Redis error behind it,
/// if any, is kept as [`source`](std::error::Error::source).
pub struct Error {
    kind: ErrorKind,
    message: Cow<'static, str>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    /// A passing fault (no answer, connection lost, server not ready): a
    /// wait tries again instead of ending on it.
    transient: bool,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Error {
            kind,
            message: message.into(),
            source: None,
            transient: false,
        }
    }

    fn transient(mut self) -> Self {
        self.transient = true;
        self
    }

    /// The same error for another caller, without its source.
    pub(crate) fn shared_copy(&self) -> Error {
        Error {
            kind: self.kind,
            message: self.message.clone(),
            source: None,
            transient: self.transient,
        }
    }

    /// A fault a wait rides out: Redis did not answer, the connection
    /// failed, or the server was not ready.
    pub(crate) fn is_transient(&self) -> bool {
        self.transient
    }

    pub(crate) fn with_source(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    pub(crate) fn invalid(message: impl Into<Cow<'static, str>>) -> Self {
        Error::new(ErrorKind::InvalidInput, message)
    }

    pub(crate) fn not_held(message: impl Into<Cow<'static, str>>) -> Self {
        Error::new(ErrorKind::NotHeld, message)
    }

    pub(crate) fn wait_timed_out(name: &str, waited: Duration, holder: Option<&Holder>) -> Self {
        let message = match holder {
            Some(holder) => format!(
                "lock {name:?} is still held after waiting {waited:?}, by {}{}: wait longer, \
                 or see `leasehold inspect {name}`",
                holder.describe(),
                holder
                    .remaining
                    .map(|left| format!(" with {left:?} of its lease left"))
                    .unwrap_or_default()
            ),
            None => format!(
                "lock {name:?} is still held after waiting {waited:?}: wait longer, or check \
                 with `leasehold inspect` who holds it"
            ),
        };
        Error::new(ErrorKind::Timeout, message)
    }

    /// The name holds another kind of lock than the one asked for; both
    /// as messages name them ("a read-write lock").
    pub(crate) fn wrong_kind(name: &str, asked: &str, found: &str) -> Self {
        Error::new(
            ErrorKind::Conflict,
            format!(
                "lock {name:?} is in use as {found}, not {asked}: a name is one kind of lock; \
                 use another name, or the kind already in use"
            ),
        )
    }

    pub(crate) fn upgrade_refused(name: &str) -> Self {
        Error::new(
            ErrorKind::Conflict,
            format!(
                "the owner holds a read lock on {name:?} and asked for the write lock: upgrading \
                 is refused, since two readers upgrading would wait for each other forever; \
                 release the read lock first, then ask for the write lock"
            ),
        )
    }

    pub(crate) fn permits_mismatch(name: &str, asked: u32, stored: i64) -> Self {
        Error::new(
            ErrorKind::Conflict,
            format!(
                "semaphore {name:?} has {stored} permits, not {asked}: every user must give the \
                 same count; change it for everyone with `Semaphore::set_permits`"
            ),
        )
    }

    /// A wait that ran out while the server was younger than the restart grace.
    pub(crate) fn wait_timed_out_in_grace(name: &str, waited: Duration) -> Self {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "lock {name:?} could not be taken within {waited:?}: redis restarted less than \
                 the restart grace ago and grants no lock until it has passed; wait longer"
            ),
        )
    }

    pub(crate) fn unexpected_reply(operation: &str, reply: &redis::Value) -> Self {
        Error::new(
            ErrorKind::Server,
            format!(
                "unexpected reply from redis to {operation}: {reply:?}; is this a Redis 7 \
                 compatible server?"
            ),
        )
    }

    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The wait for a lock ran out.
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// The lock is not (or no longer) held by this lease or token.
    pub fn is_not_held(&self) -> bool {
        self.kind == ErrorKind::NotHeld
    }

    /// An argument was refused before anything was sent.
    pub fn is_invalid_input(&self) -> bool {
        self.kind == ErrorKind::InvalidInput
    }

    /// Redis could not be reached or did not answer in time.
    pub fn is_connection(&self) -> bool {
        self.kind == ErrorKind::Connection
    }

    /// Redis answered with an error or an unexpected reply.
    pub fn is_server(&self) -> bool {
        self.kind == ErrorKind::Server
    }

    /// Redis refused the credentials, or the ACL user's permissions.
    pub fn is_auth(&self) -> bool {
        self.kind == ErrorKind::Auth
    }

    /// Redis refused the connection's settings (database number, TLS).
    pub fn is_config(&self) -> bool {
        self.kind == ErrorKind::Config
    }

    /// The lock cannot be taken as asked (another kind of lock holds the
    /// name, a read-to-write upgrade, a semaphore's permit count differs).
    pub fn is_conflict(&self) -> bool {
        self.kind == ErrorKind::Conflict
    }

    /// Trying the same operation again later may succeed: Redis was out of
    /// reach, or the lock was busy for the whole wait. False for refused
    /// credentials and settings, which only a fix makes work.
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, ErrorKind::Connection | ErrorKind::Timeout)
    }
}

impl Error {
    /// Wraps an error of the Redis client at `address` met during `operation`.
    pub(crate) fn redis(address: &str, operation: &str, err: redis::RedisError) -> Self {
        use redis::ServerErrorKind as S;
        let not_ready = matches!(
            err.kind(),
            redis::ErrorKind::Server(S::BusyLoading | S::TryAgain | S::MasterDown | S::ClusterDown)
        ) || err.code() == Some("BUSY");
        let error = if err.kind() == redis::ErrorKind::InvalidClientConfig {
            Error::new(
                ErrorKind::InvalidInput,
                format!("the connection settings for redis at {address} are not usable"),
            )
        } else if err.kind() == redis::ErrorKind::AuthenticationFailed
            || has_code(&err, "WRONGPASS")
        {
            Error::new(
                ErrorKind::Auth,
                format!(
                    "redis at {address} refused the credentials ({operation}): check the user \
                     and password in the URL (redis://USER:PASSWORD@host:port)"
                ),
            )
        } else if has_code(&err, "NOAUTH") {
            Error::new(
                ErrorKind::Auth,
                format!(
                    "redis at {address} requires a password ({operation}): put it in the URL, \
                     redis://:PASSWORD@host:port or redis://USER:PASSWORD@host:port"
                ),
            )
        } else if has_code(&err, "NOPERM") {
            Error::new(
                ErrorKind::Auth,
                format!(
                    "redis at {address} does not let this user run {operation}: give the ACL \
                     user the lock keys and channels, e.g. ~leasehold:* &leasehold:* +@all"
                ),
            )
        } else if is_tls_failure(&err) {
            Error::new(
                ErrorKind::Config,
                format!(
                    "the TLS handshake with redis at {address} failed: check that the \
                     server speaks TLS on this port (else use redis://) and that its certificate \
                     is for this host and signed by a trusted CA (see tls_root_certificate)"
                ),
            )
        } else if not_ready {
            Error::new(
                ErrorKind::Connection,
                format!(
                    "redis at {address} is not ready ({operation}): it is loading its data, \
                     running a long script or failing over; try again shortly"
                ),
            )
            .transient()
        } else if operation == "connect" && is_server_error(&err) {
            // Only the settings from the URL (AUTH, SELECT) and INFO are
            // sent on connect.
            let what = if err.to_string().contains("switch database") {
                "the database number in the URL: use one the server has (0 to 15 with the \
                 default `databases 16`), e.g. redis://host:port/0"
            } else {
                "the connection settings in the URL"
            };
            Error::new(
                ErrorKind::Config,
                format!("redis at {address} refused the connection settings: check {what}"),
            )
        } else if err.is_timeout() {
            Error::new(
                ErrorKind::Connection,
                format!(
                    "redis at {address} did not answer {operation} in time: check that it is \
                     reachable and not overloaded or paused"
                ),
            )
            .transient()
        } else if err.is_io_error()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || err.is_unrecoverable_error()
        {
            Error::new(
                ErrorKind::Connection,
                format!(
                    "cannot reach redis at {address} ({operation}): check that it runs and that \
                     the URL is right"
                ),
            )
            .transient()
        } else {
            Error::new(
                ErrorKind::Server,
                format!("redis at {address} answered {operation} with an error"),
            )
        };
        error.with_source(RedisCause(err))
    }

    pub(crate) fn no_answer(address: &str, operation: &str, timeout: Duration) -> Self {
        Error::new(
            ErrorKind::Connection,
            format!(
                "redis at {address} did not answer {operation} within {timeout:?}: it is slow, \
                 paused or out of reach; check its load, or raise the command timeout"
            ),
        )
        .transient()
    }

    /// A release that got no answer: whether the lease held to its end is
    /// not known.
    pub(crate) fn release_unknown(name: &str, fence: u64, last: &Error) -> Self {
        Error::new(
            ErrorKind::Connection,
            format!(
                "release of lock {name:?} (fence {fence}) got no answer, so whether the lease \
                 held to the end is unknown: {last}; the lock expires by itself at the end of \
                 its lease"
            ),
        )
    }

    /// The Redis client's error behind this one, if there is one.
    pub fn redis_error(&self) -> Option<&redis::RedisError> {
        self.source
            .as_deref()
            .and_then(|s| s.downcast_ref::<RedisCause>())
            .map(|cause| &cause.0)
    }
}

/// Whether Redis answered `err` with the error code `code`, alone or in a
/// pipeline.
fn has_code(err: &redis::RedisError, code: &str) -> bool {
    err.code() == Some(code)
        || err
            .clone()
            .into_server_errors()
            .is_some_and(|errors| errors.iter().any(|(_, e)| e.code() == code))
}

/// Redis answered with an error (not an I/O or client-side failure).
fn is_server_error(err: &redis::RedisError) -> bool {
    matches!(
        err.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    )
}

/// Whether `err` comes from a failed TLS handshake.
fn is_tls_failure(err: &redis::RedisError) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(current) = next {
        if current.is::<rustls::Error>() {
            return true;
        }
        // The Redis client keeps I/O errors behind an `Arc`, and an I/O
        // error's `source` skips the error it wraps: look through both.
        let shared = current
            .downcast_ref::<std::sync::Arc<dyn std::error::Error + Send + Sync>>()
            .map(|inner| &**inner as &(dyn std::error::Error + 'static));
        let wrapped = current
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        next = shared.or(wrapped).or_else(|| current.source());
    }
    false
}

/// A Redis client error as the source of an [`Error`]. Its own message
/// already includes its cause, so the cause is not repeated as a source.
struct RedisCause(redis::RedisError);

impl fmt::Display for RedisCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for RedisCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl std::error::Error for RedisCause {}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind).field("message", &self.message);
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}
