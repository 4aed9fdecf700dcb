//! What a Redis error means, decided here once for every caller, as the
//! Redis client's `RetryMethod` is: the [`Verdict`] (try again on a new
//! connection, wait it out, follow it to another server, load a script
//! again, use another command, or give up), and the [`Error`] it becomes.

use std::fmt;

use super::{Error, ErrorKind, Remedy};

/// What a caller does about a Redis error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The connection broke, gave no answer or was refused: try again on
    /// a new one (the Redis client's `Reconnect`).
    Reconnect,
    /// The server is not ready for the request: wait a little and try
    /// again (`WaitAndRetry`).
    WaitOut(NotReady),
    /// Another node serves the key: a cluster's MOVED or ASK
    /// (`MovedRedirect`, `AskRedirect`).
    Follow(Redirect),
    /// The server is a replica now: READONLY, or a WAIT cut short by its
    /// demotion (UNBLOCKED). A deployment that follows failovers goes to
    /// the new master (`RefreshSlotsAndRetry`).
    FailedOver { unblocked: bool },
    /// The server lost the script (NOSCRIPT) or the functions library:
    /// load it and send again.
    Reload,
    /// The server does not know the command, or does not let this user
    /// run it: another command does it, where there is one.
    Refused,
    /// Only a fix mends it (`NoRetry`).
    GiveUp,
}

/// Why a server is not ready for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotReady {
    /// LOADING: it loads its data set.
    Loading,
    /// BUSY: it runs a script or function.
    Busy,
    /// TRYAGAIN: the keys' slot is moving (a multi-key request whose keys
    /// are on both sides of a migration).
    SlotMoving,
    /// CLUSTERDOWN: the cluster is down, or no node serves the slot.
    ClusterDown,
    /// MASTERDOWN: a replica cut off from its master.
    MasterDown,
    /// A MOVED or ASK that does not say where.
    RedirectUnread,
}

impl NotReady {
    fn of_code(code: &str) -> Option<NotReady> {
        Some(match code {
            "LOADING" => NotReady::Loading,
            "BUSY" => NotReady::Busy,
            "TRYAGAIN" => NotReady::SlotMoving,
            "CLUSTERDOWN" => NotReady::ClusterDown,
            "MASTERDOWN" => NotReady::MasterDown,
            _ => return None,
        })
    }

    fn describe(self) -> &'static str {
        match self {
            NotReady::Loading => "it is loading its data set into memory; try again shortly",
            NotReady::Busy => "it is busy running a script or function; try again shortly",
            NotReady::SlotMoving => {
                "the lock's cluster slot is being moved to another node (TRYAGAIN); try again \
                 shortly"
            }
            NotReady::ClusterDown => {
                "its cluster is down or no node serves the lock's slot (CLUSTERDOWN); try again \
                 shortly, and see CLUSTER INFO on it if this lasts"
            }
            NotReady::MasterDown => {
                "it is a replica whose link to its master is down (MASTERDOWN), as in a \
                 failover; try again shortly, or point the URL at the master"
            }
            NotReady::RedirectUnread => "it sent the request to a node it did not name",
        }
    }
}

/// The verdict on one error reply of a server, alone or in a pipeline.
pub(crate) fn verdict_of_reply(e: &redis::ServerError) -> Verdict {
    let code = |wanted: &str| reply_has_code(e, wanted);
    if code("UNBLOCKED") {
        Verdict::FailedOver { unblocked: true }
    } else if code("READONLY") {
        Verdict::FailedOver { unblocked: false }
    } else if let Some(redirect) = redirect_in(e) {
        Verdict::Follow(redirect)
    } else if code("MOVED") || code("ASK") {
        Verdict::WaitOut(NotReady::RedirectUnread)
    } else if code("CROSSSLOT") {
        Verdict::GiveUp
    } else if unknown_script_command_in(e).is_some() {
        Verdict::Refused
    } else if let Some(why) = NotReady::of_code(script_inner_code(e).unwrap_or(e.code())) {
        Verdict::WaitOut(why)
    } else if code("NOSCRIPT")
        || e.kind() == Some(redis::ServerErrorKind::NoScript)
        || (e.code() == "ERR" && e.details().unwrap_or("").starts_with("Function not found"))
    {
        Verdict::Reload
    } else if is_refusal(e) {
        Verdict::Refused
    } else {
        Verdict::GiveUp
    }
}

/// The verdict on an error of the Redis client: that of its first error
/// reply that asks for more than giving up, else what the failure of the
/// connection calls for.
pub(crate) fn verdict_of(err: &redis::RedisError) -> Verdict {
    if matches!(
        err.kind(),
        redis::ErrorKind::InvalidClientConfig | redis::ErrorKind::AuthenticationFailed
    ) {
        return Verdict::GiveUp;
    }
    let replies = server_errors(err);
    let verdicts: Vec<Verdict> = replies.iter().map(verdict_of_reply).collect();
    // In the order the replies are looked at: a failover over a redirect
    // over a wait, as one reply alone would be read.
    let first = |pick: fn(&Verdict) -> bool| verdicts.iter().find(|v| pick(v)).cloned();
    if let Some(verdict) = first(|v| matches!(v, Verdict::FailedOver { unblocked: true }))
        .or_else(|| first(|v| matches!(v, Verdict::FailedOver { .. })))
        .or_else(|| first(|v| matches!(v, Verdict::Follow(_))))
        .or_else(|| first(|v| *v == Verdict::WaitOut(NotReady::RedirectUnread)))
        .or_else(|| first(|v| matches!(v, Verdict::WaitOut(_))))
        .or_else(|| first(|v| *v == Verdict::Reload))
        .or_else(|| first(|v| *v == Verdict::Refused))
    {
        return verdict;
    }
    if err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_unrecoverable_error()
    {
        return Verdict::Reconnect;
    }
    Verdict::GiveUp
}

/// Whether the reply refuses the command itself: unknown to the server
/// (or these arguments of it), or not allowed to this user.
fn is_refusal(e: &redis::ServerError) -> bool {
    let detail = e.details().unwrap_or("").to_ascii_lowercase();
    e.code() == "NOPERM"
        || (e.code() == "ERR"
            && (detail.starts_with("unknown command")
                || detail.starts_with("unknown subcommand")
                || detail.starts_with("syntax error")
                || detail.contains("wrong number of arguments")))
}

/// Whether a FUNCTION LOAD failed because the library is there already.
pub(crate) fn is_library_loaded(err: &redis::RedisError) -> bool {
    server_errors(err).iter().any(|e| {
        let detail = e.details().unwrap_or("");
        e.code() == "ERR" && detail.starts_with("Library") && detail.contains("already exists")
    })
}

impl Error {
    /// What a caller does about this error (see [`Verdict`]): from the
    /// Redis reply behind it; else a passing fault is tried again on a new
    /// connection, and anything else is given up on.
    pub(crate) fn verdict(&self) -> Verdict {
        match self.redis_error() {
            Some(err) => verdict_of(err),
            None if self.transient => Verdict::Reconnect,
            None => Verdict::GiveUp,
        }
    }

    /// Wraps an error of the Redis client at `address` met during `operation`.
    ///
    /// Its [`Verdict`] decides the kind: LOADING, BUSY, TRYAGAIN,
    /// CLUSTERDOWN and MASTERDOWN pass (transient `Connection`), as does a
    /// connection that failed or did not answer. MOVED and ASK are followed
    /// to the cluster node that serves the lock (and pass, transient
    /// `Connection`, should the slot keep moving past a few hops);
    /// READONLY (a replica) is `Config`, a URL to fix, and keeps the reply
    /// for the verdict: a Sentinel deployment follows it to the new master
    /// instead.
    pub(crate) fn redis(address: &str, operation: &str, err: redis::RedisError) -> Self {
        let verdict = verdict_of(&err);
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
        } else {
            match verdict {
                // A WAIT for the replicas cut short: the server was made a
                // replica (a failover), or its operator unblocked the client.
                Verdict::FailedOver { unblocked: true } => Error::new(
                    ErrorKind::Connection,
                    format!(
                        "redis at {address} stopped waiting for its replicas during {operation} \
                         (UNBLOCKED: it was made a replica, or its client was unblocked); trying \
                         again"
                    ),
                )
                .transient(),
                Verdict::FailedOver { unblocked: false } => Error::new(
                    ErrorKind::Config,
                    format!(
                        "redis at {address} is a read-only replica and refused {operation}: point \
                         the URL at its master (INFO replication on the replica names it: \
                         master_host, master_port), or, if sentinels watch it, at them: \
                         redis+sentinel://host:port[,host:port…]/MASTER_NAME"
                    ),
                ),
                Verdict::Follow(redirect) => {
                    Error::new(ErrorKind::Connection, redirect.message(address)).transient()
                }
                Verdict::WaitOut(NotReady::RedirectUnread) => Error::new(
                    ErrorKind::Connection,
                    format!(
                        "redis at {address} is a Redis Cluster node and sent {operation} to \
                         another node that could not be read from its reply; try again shortly"
                    ),
                )
                .transient(),
                _ if has_code(&err, "CROSSSLOT") => Error::new(
                    ErrorKind::Server,
                    format!(
                        "redis at {address} refused {operation}: its keys are in different \
                         cluster slots (CROSSSLOT), though every key of a lock shares the lock's \
                         hash tag; this is a bug in leasehold, please report it"
                    ),
                ),
                _ if unknown_script_command(&err).is_some() => {
                    let command = unknown_script_command(&err).unwrap_or_default();
                    Error::lacks_command(address, &command)
                }
                Verdict::WaitOut(why) => Error::new(
                    ErrorKind::Connection,
                    format!(
                        "redis at {address} is not ready ({operation}): {}",
                        why.describe()
                    ),
                )
                .transient(),
                // Only the settings from the URL (AUTH, SELECT) and INFO
                // are sent on connect.
                _ if operation == "connect" && is_server_error(&err) => {
                    let what = if err.to_string().contains("switch database") {
                        "the database number in the URL: use one the server has (0 to 15 with \
                         the default `databases 16`), e.g. redis://host:port/0"
                    } else {
                        "the connection settings in the URL"
                    };
                    Error::new(
                        ErrorKind::Config,
                        format!("redis at {address} refused the connection settings: check {what}"),
                    )
                }
                _ if err.is_timeout() => Error::new(
                    ErrorKind::Connection,
                    format!(
                        "redis at {address} did not answer {operation} in time: check that it \
                         is reachable and not overloaded or paused"
                    ),
                )
                .transient(),
                Verdict::Reconnect => Error::new(
                    ErrorKind::Connection,
                    format!(
                        "cannot reach redis at {address} ({operation}): check that it runs and \
                         that the URL is right"
                    ),
                )
                .transient(),
                _ => Error::new(
                    ErrorKind::Server,
                    format!("redis at {address} answered {operation} with an error"),
                ),
            }
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
        matches!(self.verdict(), Verdict::FailedOver { .. })
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
    server_errors(err).iter().any(|e| reply_has_code(e, code))
}

/// Whether an error reply has the code `code`, or wraps a reply that has
/// it: before Redis 7, an error raised inside a script comes back as ERR
/// with the inner reply in its text ("… @user_script: 466: -READONLY …").
fn reply_has_code(e: &redis::ServerError, code: &str) -> bool {
    let inner = format!("-{code} ");
    e.code() == code || e.details().is_some_and(|d| d.contains(&inner))
}

/// The error replies behind `err`: one, or one per failed command of a
/// pipeline; none for a failure that is not a reply.
fn server_errors(err: &redis::RedisError) -> Vec<redis::ServerError> {
    err.clone()
        .into_server_errors()
        .map(|errors| errors.iter().map(|(_, e)| e.clone()).collect())
        .unwrap_or_default()
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
    server_errors(err)
        .iter()
        .find_map(unknown_script_command_in)
}

fn unknown_script_command_in(e: &redis::ServerError) -> Option<String> {
    let detail = e.details()?.strip_prefix("unknown command ")?;
    // Quoted 'EVALSHA' by Redis 7, `EVALSHA` by Redis 6.
    let quote = detail.chars().next().filter(|c| matches!(c, '\'' | '`'))?;
    let command = detail[quote.len_utf8()..].split(quote).next()?;
    ["EVALSHA", "EVAL", "SCRIPT", "FCALL"]
        .iter()
        .any(|known| command.eq_ignore_ascii_case(known))
        .then(|| command.to_ascii_uppercase())
}

/// A MOVED or ASK reply, if it reads as one: `MOVED 3999 127.0.0.1:6381`.
fn redirect_in(e: &redis::ServerError) -> Option<Redirect> {
    let kind = match e.kind()? {
        redis::ServerErrorKind::Moved => RedirectKind::Moved,
        redis::ServerErrorKind::Ask => RedirectKind::Ask,
        _ => return None,
    };
    let mut words = e.details()?.split_ascii_whitespace();
    let slot = words.next()?.parse().ok().filter(|slot| *slot < SLOTS)?;
    let addr = words.next()?.to_owned();
    Some(Redirect { kind, slot, addr })
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

    /// Where the verdict on `err` sends the request.
    fn followed(err: &Error) -> Option<Redirect> {
        match err.verdict() {
            Verdict::Follow(redirect) => Some(redirect),
            _ => None,
        }
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

    /// Every caller reads one verdict off a reply: what a route, a
    /// deployment and the watchdog do about it.
    #[test]
    fn each_reply_has_one_verdict() {
        let cases = [
            (
                "-READONLY You can't write against a read only replica.\r\n",
                Verdict::FailedOver { unblocked: false },
            ),
            (
                "-UNBLOCKED force unblock from blocking operation\r\n",
                Verdict::FailedOver { unblocked: true },
            ),
            (
                "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
                Verdict::WaitOut(NotReady::SlotMoving),
            ),
            (
                "-LOADING Redis is loading the dataset in memory\r\n",
                Verdict::WaitOut(NotReady::Loading),
            ),
            ("-MOVED\r\n", Verdict::WaitOut(NotReady::RedirectUnread)),
            (
                "-NOSCRIPT No matching script. Please use EVAL.\r\n",
                Verdict::Reload,
            ),
            ("-ERR Function not found\r\n", Verdict::Reload),
            (
                "-NOPERM User default has no permissions to run the 'fcall' command\r\n",
                Verdict::Refused,
            ),
            (
                "-ERR unknown command 'DELIFEQ', with args beginning with: \r\n",
                Verdict::Refused,
            ),
            (
                "-ERR unknown command 'EVALSHA', with args beginning with: \r\n",
                Verdict::Refused,
            ),
            (
                "-CROSSSLOT Keys in request don't hash to the same slot\r\n",
                Verdict::GiveUp,
            ),
            (
                "-ERR value is not an integer or out of range\r\n",
                Verdict::GiveUp,
            ),
        ];
        for (bytes, verdict) in cases {
            assert_eq!(wrapped(bytes).verdict(), verdict, "{bytes}");
            let Some(redis::Value::ServerError(e)) =
                redis::parse_redis_value(bytes.as_bytes()).ok()
            else {
                panic!("{bytes}: not an error reply");
            };
            assert_eq!(
                verdict_of_reply(&e),
                verdict,
                "{bytes}: as a pipeline's reply"
            );
        }
        assert_eq!(
            followed(&wrapped("-ASK 12 127.0.0.1:7001\r\n")).map(|r| r.kind),
            Some(RedirectKind::Ask)
        );
        assert_eq!(
            Error::no_answer(ADDRESS, "acquire", std::time::Duration::from_secs(1)).verdict(),
            Verdict::Reconnect
        );
        assert_eq!(Error::invalid("no").verdict(), Verdict::GiveUp);
    }

    #[test]
    fn redirects_are_read_from_the_kept_reply() {
        assert_eq!(
            followed(&wrapped("-MOVED 3999 127.0.0.1:6381\r\n")),
            Some(Redirect {
                kind: RedirectKind::Moved,
                slot: 3999,
                addr: "127.0.0.1:6381".to_owned(),
            })
        );
        assert_eq!(
            followed(&wrapped("-ASK 16383 cache-2.example:7002\r\n")),
            Some(Redirect {
                kind: RedirectKind::Ask,
                slot: 16383,
                addr: "cache-2.example:7002".to_owned(),
            })
        );
        // No host: the host of the node that answered, named so in the message.
        let same_host = wrapped("-MOVED 12 :7001\r\n");
        assert_eq!(
            followed(&same_host).map(|r| r.addr),
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
            assert_eq!(followed(&err), None, "{bytes}");
            assert_eq!(err.kind(), ErrorKind::Connection, "{bytes}: {err:?}");
            assert!(err.is_retryable(), "{bytes}: {err:?}");
            assert!(err.to_string().contains("Redis Cluster node"), "{err}");
        }
        assert_eq!(followed(&wrapped("-READONLY You can't write\r\n")), None);
        assert_eq!(followed(&Error::invalid("no")), None);
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
