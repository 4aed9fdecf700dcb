//! The one error type of the library.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use crate::holder::Holder;

pub(crate) mod verdict;

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
             answering is waited for until the master drops it, and one that could take over \
             until the sentinels or the cluster find it down or, on a cluster, it has been cut \
             off too long to be promoted), turn the acknowledgement off at the cost of its safety \
             on a failover"
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
                 lease and no record of that attempt's release: the first attempt most likely \
                 released it, so the lease held to the end, unless the lock was removed first \
                 by a force-release or lost by redis (a restart or failover); the lease did \
                 not run out. Nothing is held now",
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
}

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
}
