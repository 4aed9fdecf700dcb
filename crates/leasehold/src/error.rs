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
    /// Redis could not be reached, did not answer within the command
    /// timeout, or was not ready: loading its data, busy with a script, or
    /// in a cluster or replica that is failing over (LOADING, BUSY,
    /// TRYAGAIN, CLUSTERDOWN, MASTERDOWN). Worth trying again later.
    Connection,
    /// Redis refused the credentials (a wrong or missing password or user),
    /// or the user may not run what leasehold needs (ACL). Trying again does
    /// not help: fix the user and password in the URL, or the ACL.
    Auth,
    /// Redis refused the connection's settings: a database number it does
    /// not have, TLS on a port without it or a certificate it cannot prove.
    /// Or the URL names a server that cannot hold the locks as it is: a
    /// read-only replica (READONLY), or a Sentinel given as a data node
    /// (`redis://` instead of `redis+sentinel://`), or the sentinels watch
    /// no master of the URL's name, or no Redis at all (a port that answers
    /// HTTP, or bytes that are not the Redis protocol). Trying again does
    /// not help: fix the URL or the TLS settings.
    Config,
    /// Redis answered with an error, or with a reply leasehold does not
    /// understand. Trying again does not help; the message and the
    /// [`redis_error`](Error::redis_error) say what Redis said.
    Server,
    /// The operating system refused something leasehold needs (randomness for tokens).
    System,
    /// The lock cannot be taken as asked, and waiting would not change
    /// that: its name is in use by another kind of lock, the owner of a
    /// read lock asked for the write lock (an upgrade, which could deadlock),
    /// or a semaphore was asked for with another permit count than it has,
    /// or the holder of a `Mutex` or `FairMutex` asked for it again (it is
    /// not reentrant: the wait would be for itself).
    Conflict,
    /// Fewer replicas than asked (by default every replica the master has
    /// connected: see [`ReplicaAck`](crate::ReplicaAck)) acknowledged an
    /// acquisition or an extend in time. An acquisition was undone: the
    /// lock is not held. Trying again may succeed once the replicas catch
    /// up; the message says how many acknowledged, and names them.
    ReplicasMissing,
    /// A request was sent again after an earlier attempt got no answer,
    /// and what the retry found cannot tell whether that earlier attempt
    /// was applied. A release that finds its token gone on a retry is the
    /// case: its first attempt may have released the lock (the lease then
    /// held to the end), or the lock may have been removed some other way
    /// first (a `force_release`, a Redis restart or failover that lost
    /// it). It is never reported as [`NotHeld`](ErrorKind::NotHeld), which
    /// says a loss happened. Nothing is held any more either way.
    OutcomeUnknown,
    /// A lock over several independent masters (a [`Redlock`](crate::Redlock))
    /// could not reach a majority of them: too many were out of reach or
    /// too slow (quorum not reached). The message says how many answered
    /// and how many a majority is. Worth trying again once the masters are
    /// back.
    Quorum,
}

/// A change that gets past an error when the change is a setting or a call
/// of this API: an [`Error`]'s message ends with it, in the API's names
/// ([`advice`](Remedy::advice)). A front end with names of its own for
/// these (the `leasehold` command's flags and subcommands) shows
/// [`Error::situation`] and says the remedy its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Remedy {
    /// A semaphore was asked for with another permit count than it has:
    /// change the count for every user
    /// ([`Semaphore::set_permits`](crate::Semaphore::set_permits)), or ask
    /// with the count it has.
    SetPermits,
    /// Redis did not answer within the command timeout: if it is only
    /// slow, raise the timeout
    /// ([`ClientBuilder::command_timeout`](crate::ClientBuilder::command_timeout),
    /// [`RedlockBuilder::command_timeout`](crate::RedlockBuilder::command_timeout)).
    CommandTimeout,
    /// A TLS handshake failed, as one does on a certificate signed by a
    /// private CA: trust that CA
    /// ([`ClientBuilder::tls_root_certificate`](crate::ClientBuilder::tls_root_certificate)).
    TrustCa,
    /// Fewer replicas than asked acknowledged in time: allow them longer
    /// (the timeout of [`ReplicaAck`](crate::ReplicaAck)).
    ReplicaTimeout,
    /// The lease at a token belongs to another owner: release it by token
    /// with a face that has no owner
    /// ([`Mutex::release_token`](crate::Mutex::release_token)), or as an
    /// admin (`force_release`).
    ReleaseAsAdmin,
}

impl Remedy {
    /// The remedy in the API's names, as an error's message ends with it.
    pub fn advice(self) -> &'static str {
        match self {
            Remedy::SetPermits => "change it for everyone with `Semaphore::set_permits`",
            Remedy::CommandTimeout => {
                "if it is only slow, raise the command timeout \
                 (`ClientBuilder::command_timeout`, `RedlockBuilder::command_timeout`)"
            }
            Remedy::TrustCa => {
                "for a certificate signed by a private CA, trust the CA with \
                 `ClientBuilder::tls_root_certificate`"
            }
            Remedy::ReplicaTimeout => {
                "or allow a longer replica timeout (the timeout of `ReplicaAck`, \
                 `ClientBuilder::replica_ack`, `with_replica_ack`)"
            }
            Remedy::ReleaseAsAdmin => "use `Mutex::release_token` or `force_release` as an admin",
        }
    }
}

/// The error of every fallible leasehold operation.
///
/// Its message says what happened and what to do; the Redis error behind it,
/// if any, is kept as [`source`](std::error::Error::source). Where what to
/// do is a setting or a call of this API, the message ends with it in the
/// API's names, and [`remedy`](Self::remedy) says which it is.
pub struct Error {
    kind: ErrorKind,
    /// What happened, and what to do that is no setting or call.
    message: Cow<'static, str>,
    remedy: Option<Remedy>,
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
            remedy: None,
            source: None,
            transient: false,
        }
    }

    pub(crate) fn transient(mut self) -> Self {
        self.transient = true;
        self
    }

    pub(crate) fn with_remedy(mut self, remedy: Remedy) -> Self {
        self.remedy = Some(remedy);
        self
    }

    /// Takes the remedy of `inner`, an error this one's message tells of
    /// (by its [`situation`](Self::situation)), if it has none of its own.
    pub(crate) fn remedy_of(mut self, inner: Option<&Error>) -> Self {
        self.remedy = self.remedy.or(inner.and_then(|inner| inner.remedy));
        self
    }

    /// The same error for another caller, without its source.
    pub(crate) fn shared_copy(&self) -> Error {
        Error {
            kind: self.kind,
            message: self.message.clone(),
            remedy: self.remedy,
            source: None,
            transient: self.transient,
        }
    }

    /// A passing fault, which a lock's wait rides out: Redis did not
    /// answer, the connection failed or was lost, the server was not ready
    /// (loading, busy), or a cluster slot or a master was moving (a
    /// failover under way). A loop of the caller's own, such as one over
    /// [`LockWatch::next`](crate::LockWatch::next), can pause and try again
    /// on it the same way.
    ///
    /// False for what only a fix mends (credentials, settings, input), and
    /// for a client that never reached Redis within its connect timeout.
    /// Narrower than [`is_retryable`](Self::is_retryable), which also holds
    /// for a wait that ran out or a quorum not reached.
    pub fn is_transient(&self) -> bool {
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
    /// A non-reentrant lock's own second acquisition, by the holder that
    /// has it already (fence `fence`): it would wait for itself.
    pub(crate) fn already_held(name: &str, fence: u64) -> Self {
        Error::new(
            ErrorKind::Conflict,
            format!(
                "lock {name:?} is already held by this caller (fence {fence}), the same task (or \
                 thread) through this handle or a clone of it: the lock is not reentrant, so this \
                 acquisition would wait for itself; release the guard first, or use a \
                 ReentrantMutex to nest acquisitions"
            ),
        )
    }

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
                 same count"
            ),
        )
        .with_remedy(Remedy::SetPermits)
    }

    /// Fewer replicas than asked acknowledged that the lock `name` was
    /// `done` (taken, extended) within the WAIT's `timeout`; `connected`:
    /// those asked were every replica the master has (`replicas`, their
    /// addresses: those it lists and those that could take over from it);
    /// `then` says what became of it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn replicas_missing(
        name: &str,
        done: &str,
        acked: u32,
        asked: u32,
        connected: bool,
        replicas: &[String],
        timeout: Duration,
        then: &str,
    ) -> Self {
        let plural = if asked == 1 { "" } else { "s" };
        let which = if connected {
            format!("its {asked} replica{plural} ({})", replicas.join(", "))
        } else {
            format!("the {asked} replica{plural} asked for")
        };
        let advice = if connected {
            "check the replicas (INFO replication on the master lists them; one that stopped \
             answering is waited for until the master drops it), turn the acknowledgement off at \
             the cost of its safety on a failover"
        } else {
            "check the replicas (INFO replication on the master lists them), ask for fewer"
        };
        Error::new(
            ErrorKind::ReplicasMissing,
            format!(
                "lock {name:?} was {done} on the master, but only {acked} of {which} \
                 acknowledged it within {timeout:?}, so {then}: {advice}"
            ),
        )
        .with_remedy(Remedy::ReplicaTimeout)
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

    /// The change that gets past this error, when it is a setting or a
    /// call of this API; the message ends with it, in the API's names.
    pub fn remedy(&self) -> Option<Remedy> {
        self.remedy
    }

    /// The message without the words of its [`remedy`](Self::remedy): what
    /// happened, and what to do that is no setting or call. The whole
    /// message is this, then `; `, then [`Remedy::advice`].
    pub fn situation(&self) -> &str {
        &self.message
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

    /// Redis could not be reached, did not answer in time, or was not ready.
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

    /// Redis refused the connection's settings (database number, TLS), or
    /// the URL names a replica, a Sentinel or another cluster node's slot.
    pub fn is_config(&self) -> bool {
        self.kind == ErrorKind::Config
    }

    /// The lock cannot be taken as asked (another kind of lock holds the
    /// name, a read-to-write upgrade, a semaphore's permit count differs).
    pub fn is_conflict(&self) -> bool {
        self.kind == ErrorKind::Conflict
    }

    /// Fewer replicas than asked acknowledged an acquisition or an extend.
    pub fn is_replicas_missing(&self) -> bool {
        self.kind == ErrorKind::ReplicasMissing
    }

    /// A retried request cannot tell whether its first, unanswered attempt
    /// was applied (see [`ErrorKind::OutcomeUnknown`]).
    pub fn is_outcome_unknown(&self) -> bool {
        self.kind == ErrorKind::OutcomeUnknown
    }

    /// A lock over several masters could not reach a majority of them.
    pub fn is_quorum(&self) -> bool {
        self.kind == ErrorKind::Quorum
    }

    /// Trying the same operation again later may succeed: Redis was out of
    /// reach or not ready, the lock was busy for the whole wait, or too few
    /// replicas acknowledged in time. False for refused credentials and
    /// settings, which only a fix makes work.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Connection
                | ErrorKind::Timeout
                | ErrorKind::ReplicasMissing
                | ErrorKind::Quorum
        )
    }
}

impl Error {
    /// Wraps an error of the Redis client at `address` met during `operation`.
    ///
    /// Redis's cluster and failover replies follow the Redis client's own
    /// verdicts (`redis::RetryMethod`): LOADING, BUSY, TRYAGAIN, CLUSTERDOWN
    /// and MASTERDOWN pass (transient `Connection`). What it would follow
    /// on another node: MOVED and ASK are followed to the cluster node that
    /// serves the lock (and pass, transient `Connection`, should the slot
    /// keep moving past a few hops); READONLY (a replica) is `Config`, a
    /// URL to fix, and keeps the reply for [`is_readonly`](Self::is_readonly):
    /// a Sentinel deployment follows it to the new master instead.
    pub(crate) fn redis(address: &str, operation: &str, err: redis::RedisError) -> Self {
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
                     is for this host and signed by a trusted CA"
                ),
            )
            .with_remedy(Remedy::TrustCa)
        } else if has_code(&err, "UNBLOCKED") {
            // A WAIT for the replicas cut short: the server was made a
            // replica (a failover), or its operator unblocked the client.
            Error::new(
                ErrorKind::Connection,
                format!(
                    "redis at {address} stopped waiting for its replicas during {operation} \
                     (UNBLOCKED: it was made a replica, or its client was unblocked); trying again"
                ),
            )
            .transient()
        } else if has_code(&err, "READONLY") {
            Error::new(
                ErrorKind::Config,
                format!(
                    "redis at {address} is a read-only replica and refused {operation}: point \
                     the URL at its master (INFO replication on the replica names it: \
                     master_host, master_port), or, if sentinels watch it, at them: \
                     redis+sentinel://host:port[,host:port…]/MASTER_NAME"
                ),
            )
        } else if let Some(redirect) = redirect_of(&err) {
            Error::new(ErrorKind::Connection, redirect.message(address)).transient()
        } else if has_code(&err, "MOVED") || has_code(&err, "ASK") {
            Error::new(
                ErrorKind::Connection,
                format!(
                    "redis at {address} is a Redis Cluster node and sent {operation} to another \
                     node that could not be read from its reply; try again shortly"
                ),
            )
            .transient()
        } else if has_code(&err, "CROSSSLOT") {
            Error::new(
                ErrorKind::Server,
                format!(
                    "redis at {address} refused {operation}: its keys are in different cluster \
                     slots (CROSSSLOT), though every key of a lock shares the lock's hash tag; \
                     this is a bug in leasehold, please report it"
                ),
            )
        } else if let Some(command) = unknown_script_command(&err) {
            Error::lacks_command(address, &command)
        } else if let Some(why) = not_ready(&err) {
            Error::new(
                ErrorKind::Connection,
                format!("redis at {address} is not ready ({operation}): {why}"),
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

    /// The server at `address` does not have `command`, a scripting
    /// command leasehold needs.
    pub(crate) fn lacks_command(address: &str, command: &str) -> Self {
        Error::new(
            ErrorKind::Config,
            format!(
                "redis at {address} does not know {command}, which leasehold needs: it is \
                 not a Redis data node with Lua scripting; if it is a Sentinel, point the \
                 URL at the master it watches"
            ),
        )
    }

    /// The URL names a Sentinel: it answers `INFO` but keeps no keys.
    pub(crate) fn sentinel(address: &str) -> Self {
        Error::new(
            ErrorKind::Config,
            format!(
                "redis at {address} is a Sentinel, not a data node: point the URL at the master \
                 it watches, or give the sentinels as redis+sentinel://{address}/MASTER_NAME \
                 (the others after it, separated by commas) and leasehold follows them to the \
                 master through failovers"
            ),
        )
    }

    /// Redis refused a write because it is a replica (READONLY): the URL
    /// names one, or a failover just made this master one.
    /// A WAIT cut short with UNBLOCKED when the master was made a replica
    /// counts as one.
    pub(crate) fn is_readonly(&self) -> bool {
        self.redis_error()
            .is_some_and(|err| has_code(err, "READONLY") || has_code(err, "UNBLOCKED"))
    }

    /// Where a Redis Cluster node sent the command (MOVED, ASK), as the
    /// node wrote it.
    pub(crate) fn redirect(&self) -> Option<Redirect> {
        self.redis_error().and_then(redirect_of)
    }

    pub(crate) fn no_answer(address: &str, operation: &str, timeout: Duration) -> Self {
        Error::new(
            ErrorKind::Connection,
            format!(
                "redis at {address} did not answer {operation} within {timeout:?}: it is slow, \
                 paused or out of reach; check its load"
            ),
        )
        .with_remedy(Remedy::CommandTimeout)
        .transient()
    }

    /// A release that got no answer: whether the lease held to its end is
    /// not known.
    pub(crate) fn release_unknown(name: &str, fence: u64, last: &Error) -> Self {
        Error::new(
            ErrorKind::Connection,
            format!(
                "release of lock {name:?} (fence {fence}) got no answer, so whether the lease \
                 held to the end is unknown: {}; the lock expires by itself at the end of \
                 its lease",
                last.message
            ),
        )
        .remedy_of(Some(last))
    }

    /// A release of lock `name` (fence `fence`) whose retry found the token
    /// gone after an earlier attempt got no answer (`first`).
    pub(crate) fn release_retry_unknown(name: &str, fence: u64, first: &Error) -> Self {
        Error::new(
            ErrorKind::OutcomeUnknown,
            format!(
                "release of lock {name:?} (fence {fence}) was sent again after its first attempt \
                 got no answer ({}), and the retry found the lock no longer held by this \
                 lease: the first attempt most likely released it, so the lease held to the \
                 end, unless the lock was removed first by a force-release or lost by redis \
                 (a restart or failover); the lease did not run out. Nothing is held now",
                first.message
            ),
        )
        .remedy_of(Some(first))
    }

    /// This fault, met by a client that has not reached Redis once in
    /// `timeout`: no longer passing, and said so.
    pub(crate) fn never_reached(self, timeout: Duration) -> Error {
        Error {
            kind: self.kind,
            message: format!(
                "gave up after {timeout:?} without reaching redis once: {}; check the URL, \
                 and that the server runs and is reachable from here",
                self.message
            )
            .into(),
            remedy: self.remedy,
            source: self.source,
            transient: false,
        }
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
    // Before Redis 7, an error raised inside a script comes back as ERR
    // with the inner reply in its text ("… @user_script: 466: -READONLY …").
    let inner = format!("-{code} ");
    let wraps = |detail: Option<&str>| detail.is_some_and(|d| d.contains(&inner));
    err.code() == Some(code)
        || wraps(err.detail())
        || server_errors(err)
            .iter()
            .any(|e| e.code() == code || wraps(e.details()))
}

/// The error replies behind `err`: one, or one per failed command of a
/// pipeline; none for a failure that is not a reply.
fn server_errors(err: &redis::RedisError) -> Vec<redis::ServerError> {
    err.clone()
        .into_server_errors()
        .map(|errors| errors.iter().map(|(_, e)| e.clone()).collect())
        .unwrap_or_default()
}

/// Why a server that answered with `err` is not ready yet, when it is a
/// reply the Redis client would wait and retry on (or BUSY, which it does
/// not know).
fn not_ready(err: &redis::RedisError) -> Option<&'static str> {
    server_errors(err).iter().find_map(|e| {
        Some(match script_inner_code(e).unwrap_or(e.code()) {
            "LOADING" => "it is loading its data set into memory; try again shortly",
            "BUSY" => "it is busy running a script or function; try again shortly",
            "TRYAGAIN" => {
                "the lock's cluster slot is being moved to another node (TRYAGAIN); try again \
                 shortly"
            }
            "CLUSTERDOWN" => {
                "its cluster is down or no node serves the lock's slot (CLUSTERDOWN); try again \
                 shortly, and see CLUSTER INFO on it if this lasts"
            }
            "MASTERDOWN" => {
                "it is a replica whose link to its master is down (MASTERDOWN), as in a \
                 failover; try again shortly, or point the URL at the master"
            }
            _ => return None,
        })
    })
}

/// The code of the reply a script's own command got, where the server
/// wraps it in ERR (before Redis 7: "Error running script (…):
/// @user_script:466: -MASTERDOWN …").
fn script_inner_code(e: &redis::ServerError) -> Option<&str> {
    if e.code() != "ERR" {
        return None;
    }
    let detail = e.details()?;
    let (_, rest) = detail.split_once(": -")?;
    let code = rest.split(' ').next()?;
    (!code.is_empty() && code.chars().all(|c| c.is_ascii_uppercase())).then_some(code)
}

/// The scripting command a server does not know, from its "unknown
/// command" reply: a Sentinel, or a proxy without scripting, answers so.
fn unknown_script_command(err: &redis::RedisError) -> Option<String> {
    server_errors(err).iter().find_map(|e| {
        let detail = e.details()?.strip_prefix("unknown command ")?;
        // Quoted 'EVALSHA' by Redis 7, `EVALSHA` by Redis 6.
        let quote = detail.chars().next().filter(|c| matches!(c, '\'' | '`'))?;
        let command = detail[quote.len_utf8()..].split(quote).next()?;
        ["EVALSHA", "EVAL", "SCRIPT", "FCALL"]
            .iter()
            .any(|known| command.eq_ignore_ascii_case(known))
            .then(|| command.to_ascii_uppercase())
    })
}

/// The first MOVED or ASK reply behind `err`, if it reads as one:
/// `MOVED 3999 127.0.0.1:6381`.
fn redirect_of(err: &redis::RedisError) -> Option<Redirect> {
    server_errors(err).iter().find_map(|e| {
        let kind = match e.kind()? {
            redis::ServerErrorKind::Moved => RedirectKind::Moved,
            redis::ServerErrorKind::Ask => RedirectKind::Ask,
            _ => return None,
        };
        let mut words = e.details()?.split_ascii_whitespace();
        let slot = words.next()?.parse().ok().filter(|slot| *slot < SLOTS)?;
        let addr = words.next()?.to_owned();
        Some(Redirect { kind, slot, addr })
    })
}

/// Hash slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// Where a Redis Cluster node sent a command instead of running it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redirect {
    pub(crate) kind: RedirectKind,
    /// The hash slot of the command's keys.
    pub(crate) slot: u16,
    /// The node to ask, `host:port` as the node wrote it; an empty host
    /// (`:6380`) is the host of the node that answered.
    pub(crate) addr: String,
}

/// Which redirect a Redis Cluster node answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RedirectKind {
    /// The slot is served by another node: ask it from now on.
    Moved,
    /// The slot is moving to another node: ask it (after ASKING) for this
    /// one command.
    Ask,
}

impl Redirect {
    /// The message of an [`Error`] for a redirect from the node at `address`.
    pub(crate) fn message(&self, address: &str) -> String {
        let target = match self.addr.strip_prefix(':') {
            Some(port) => {
                let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
                format!("{host}:{port}")
            }
            None => self.addr.clone(),
        };
        let slot = self.slot;
        let what = match self.kind {
            RedirectKind::Moved => format!("the lock's slot {slot} is served by {target} (MOVED)"),
            RedirectKind::Ask => format!("it is moving the lock's slot {slot} to {target} (ASK)"),
        };
        format!(
            "redis at {address} is a Redis Cluster node, and {what}: the slot kept moving while \
             the request followed it; try again shortly"
        )
    }
}

/// Redis answered with an error (not an I/O or client-side failure).
fn is_server_error(err: &redis::RedisError) -> bool {
    matches!(
        err.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    )
}

/// Whether `err` comes from a failed TLS handshake.
pub(crate) fn is_tls_failure(err: &redis::RedisError) -> bool {
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

/// What Redis said, as `redis-cli` shows it (`NOAUTH Authentication
/// required.`), each different reply of a pipeline once; the Redis
/// client's own errors without the name of their kind.
impl fmt::Display for RedisCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut said: Vec<String> = Vec::new();
        for e in server_errors(&self.0) {
            let line = match e.details() {
                Some(detail) => format!("{} {detail}", e.code()),
                None => e.code().to_owned(),
            };
            if !said.contains(&line) {
                said.push(line);
            }
        }
        if !said.is_empty() {
            return f.write_str(&said.join("; "));
        }
        // The client writes its own errors "description - Kind: detail".
        let text = self.0.to_string();
        let kind = format!(" - {:?}", self.0.kind());
        f.write_str(&text.replacen(&kind, "", 1))
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
        f.write_str(&self.message)?;
        match self.remedy {
            Some(remedy) => write!(f, "; {}", remedy.advice()),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind).field("message", &self.message);
        if let Some(remedy) = &self.remedy {
            d.field("remedy", remedy);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const ADDRESS: &str = "127.0.0.1:7000";

    /// The error the Redis client makes of `bytes`, an error reply as a
    /// server sent it.
    fn reply(bytes: &str) -> redis::RedisError {
        redis::parse_redis_value(bytes.as_bytes())
            .unwrap()
            .extract_error()
            .unwrap_err()
    }

    fn wrapped(bytes: &str) -> Error {
        Error::redis(ADDRESS, "acquire", reply(bytes))
    }

    /// Each reply as Redis 7.0 sent it to leasehold's scripts and
    /// commands: a replica, a Sentinel, cluster nodes, a busy or loading
    /// server.
    #[test]
    fn cluster_and_failover_replies_have_a_kind_and_a_verdict() {
        use ErrorKind::*;
        let cases = [
            (
                "-READONLY You can't write against a read only replica. script: \
                 78856a9bbe26eefb11479e1ab334dbcd8da9e0c9, on @user_script:422.\r\n",
                Config,
                false,
                "is a read-only replica and refused acquire: point the URL at its master",
            ),
            (
                "-MOVED 16287 127.0.0.1:47305\r\n",
                Connection,
                true,
                "is a Redis Cluster node, and the lock's slot 16287 is served by \
                 127.0.0.1:47305 (MOVED): the slot kept moving",
            ),
            (
                "-ASK 16287 127.0.0.1:47306\r\n",
                Connection,
                true,
                "it is moving the lock's slot 16287 to 127.0.0.1:47306 (ASK)",
            ),
            (
                "-CROSSSLOT Keys in request don't hash to the same slot\r\n",
                Server,
                false,
                "(CROSSSLOT), though every key of a lock shares the lock's hash tag; this is a \
                 bug in leasehold",
            ),
            (
                "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
                Connection,
                true,
                "is not ready (acquire): the lock's cluster slot is being moved to another node \
                 (TRYAGAIN); try again shortly",
            ),
            (
                "-CLUSTERDOWN Hash slot not served\r\n",
                Connection,
                true,
                "(CLUSTERDOWN); try again shortly",
            ),
            (
                "-CLUSTERDOWN The cluster is down\r\n",
                Connection,
                true,
                "(CLUSTERDOWN); try again shortly",
            ),
            (
                "-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to \
                 'no'.\r\n",
                Connection,
                true,
                "(MASTERDOWN), as in a failover; try again shortly",
            ),
            (
                "-LOADING Redis is loading the dataset in memory\r\n",
                Connection,
                true,
                "is loading its data set into memory; try again shortly",
            ),
            (
                "-BUSY Redis is busy running a script. You can only call SCRIPT KILL or \
                 SHUTDOWN NOSAVE.\r\n",
                Connection,
                true,
                "is busy running a script or function; try again shortly",
            ),
            (
                "-ERR unknown command 'EVALSHA', with args beginning with: \
                 '78856a9bbe26eefb11479e1ab334dbcd8da9e0c9' '4' 'leasehold:{x}' \r\n",
                Config,
                false,
                "does not know EVALSHA, which leasehold needs",
            ),
            (
                "-ERR unknown command `evalsha`, with args beginning with: `0` \r\n",
                Config,
                false,
                "if it is a Sentinel, point the URL at the master it watches",
            ),
            (
                "-ERR unknown command 'FOO', with args beginning with: \r\n",
                Server,
                false,
                "answered acquire with an error",
            ),
            (
                "-NOAUTH Authentication required.\r\n",
                Auth,
                false,
                "requires a password (acquire)",
            ),
            (
                "-WRONGPASS invalid username-password pair or user is disabled.\r\n",
                Auth,
                false,
                "refused the credentials (acquire)",
            ),
        ];
        for (bytes, kind, transient, says) in cases {
            let err = wrapped(bytes);
            assert_eq!(err.kind(), kind, "{bytes}: {err:?}");
            assert_eq!(err.is_transient(), transient, "{bytes}: {err:?}");
            assert_eq!(err.is_retryable(), transient, "{bytes}: {err:?}");
            assert!(err.to_string().contains(says), "{bytes}: {err}");
            assert!(
                err.to_string().starts_with("redis at 127.0.0.1:7000 "),
                "{err}"
            );
            assert!(err.redis_error().is_some(), "{bytes}: the reply is kept");
        }
    }

    #[test]
    fn redirects_are_read_from_the_kept_reply() {
        assert_eq!(
            wrapped("-MOVED 3999 127.0.0.1:6381\r\n").redirect(),
            Some(Redirect {
                kind: RedirectKind::Moved,
                slot: 3999,
                addr: "127.0.0.1:6381".to_owned(),
            })
        );
        assert_eq!(
            wrapped("-ASK 16383 cache-2.example:7002\r\n").redirect(),
            Some(Redirect {
                kind: RedirectKind::Ask,
                slot: 16383,
                addr: "cache-2.example:7002".to_owned(),
            })
        );
        // No host: the host of the node that answered, named so in the message.
        let same_host = wrapped("-MOVED 12 :7001\r\n");
        assert_eq!(
            same_host.redirect().map(|r| r.addr),
            Some(":7001".to_owned())
        );
        assert!(
            same_host
                .to_string()
                .contains("slot 12 is served by 127.0.0.1:7001 (MOVED)"),
            "{same_host}"
        );
        // A redirect that does not read as one passes, as one followed too often.
        for bytes in [
            "-MOVED 16384 127.0.0.1:7001\r\n",
            "-MOVED twelve 127.0.0.1:7001\r\n",
            "-ASK 12\r\n",
            "-MOVED\r\n",
        ] {
            let err = wrapped(bytes);
            assert_eq!(err.redirect(), None, "{bytes}");
            assert_eq!(err.kind(), ErrorKind::Connection, "{bytes}: {err:?}");
            assert!(err.is_retryable(), "{bytes}: {err:?}");
            assert!(err.to_string().contains("Redis Cluster node"), "{err}");
        }
        assert_eq!(wrapped("-READONLY You can't write\r\n").redirect(), None);
        assert_eq!(Error::invalid("no").redirect(), None);
    }

    #[test]
    fn readonly_is_known_by_its_reply() {
        assert!(
            wrapped("-READONLY You can't write against a read only replica.\r\n").is_readonly()
        );
        assert!(!wrapped("-MASTERDOWN Link with MASTER is down\r\n").is_readonly());
        // A WAIT cut short because the master was made a replica.
        let unblocked = wrapped(
            "-UNBLOCKED force unblock from blocking operation, instance state changed (master -> \
             replica?)\r\n",
        );
        assert!(unblocked.is_readonly(), "{unblocked:?}");
        assert!(unblocked.is_transient(), "{unblocked:?}");
        assert_eq!(unblocked.kind(), ErrorKind::Connection, "{unblocked:?}");
        // Redis 6.2 wraps what a script's command got in ERR.
        let old = wrapped(
            "-ERR Error running script (call to f_14dff9be061713574fcc5c3bf2d97572d7931cce): \
             @user_script:466: @user_script: 466: -READONLY You can't write against a read only \
             replica. \r\n",
        );
        assert!(old.is_readonly(), "{old:?}");
        assert_eq!(old.kind(), ErrorKind::Config, "{old:?}");
        let down = wrapped(
            "-ERR Error running script (call to f_14dff9be061713574fcc5c3bf2d97572d7931cce): \
             @user_script:466: @user_script: 466: -MASTERDOWN Link with MASTER is down and \
             replica-serve-stale-data is set to 'no'. \r\n",
        );
        assert!(down.is_retryable(), "{down:?}");
        assert!(!Error::not_held("gone").is_readonly());
    }

    /// An error whose remedy is a setting or a call ends with it in the
    /// API's names; its situation has none of them, and an error that
    /// tells of it takes its remedy.
    #[test]
    fn a_remedy_is_said_last_and_kept_apart() {
        let permits = Error::permits_mismatch("pool", 5, 3);
        assert_eq!(permits.remedy(), Some(Remedy::SetPermits));
        assert_eq!(
            permits.to_string(),
            "semaphore \"pool\" has 3 permits, not 5: every user must give the same count; \
             change it for everyone with `Semaphore::set_permits`"
        );
        assert!(!permits.situation().contains("set_permits"), "{permits}");

        let slow = Error::no_answer(ADDRESS, "acquire", Duration::from_secs(2));
        assert_eq!(slow.remedy(), Some(Remedy::CommandTimeout));
        assert!(slow.is_transient());
        assert!(
            slow.to_string().ends_with(&format!(
                "check its load; {}",
                Remedy::CommandTimeout.advice()
            )),
            "{slow}"
        );
        assert!(
            Remedy::CommandTimeout
                .advice()
                .contains("`ClientBuilder::command_timeout`"),
            "the advice names the builder setting"
        );
        assert!(!slow.situation().contains("command timeout"), "{slow:?}");

        let unknown = Error::release_unknown("job", 7, &slow);
        assert_eq!(unknown.remedy(), Some(Remedy::CommandTimeout));
        assert!(unknown.situation().contains(slow.situation()), "{unknown}");
        assert!(
            !unknown.situation().contains("command_timeout"),
            "{unknown}"
        );
        assert_eq!(
            unknown
                .to_string()
                .matches("ClientBuilder::command_timeout")
                .count(),
            1,
            "the advice once, at the end: {unknown}"
        );
        let gave_up = slow.shared_copy().never_reached(Duration::from_secs(10));
        assert_eq!(gave_up.remedy(), Some(Remedy::CommandTimeout));
        assert!(!gave_up.is_transient());

        assert_eq!(Error::invalid("no").remedy(), None);
        assert_eq!(Error::invalid("no").situation(), "no");
    }

    /// The source says what Redis said in its words, without the Redis
    /// client's names for its error kinds.
    #[test]
    fn the_source_is_what_redis_said() {
        let source = |err: &Error| {
            std::error::Error::source(err)
                .map(ToString::to_string)
                .unwrap_or_default()
        };
        let err = wrapped("-NOAUTH Authentication required.\r\n");
        assert_eq!(source(&err), "NOAUTH Authentication required.");
        let err = wrapped("-MOVED 3999 127.0.0.1:6381\r\n");
        assert_eq!(source(&err), "MOVED 3999 127.0.0.1:6381");
        let refused = redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        let err = Error::redis(ADDRESS, "connect", refused);
        assert_eq!(err.kind(), ErrorKind::Auth);
        assert_eq!(source(&err), "Password authentication failed");
    }
}
