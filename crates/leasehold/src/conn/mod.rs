//! Scripts and connections: the layer under the deployments. A server's
//! command connection ([`Connection`]: made on first use, checked when it
//! has been idle, and replaced — never reused — once it stops answering),
//! a route that runs scripts on it ([`route`]), the script registry
//! ([`scripts`]), what a master lists of its replicas ([`replicas`]), the
//! subscriber connection ([`notify`]), and what listens on a port that is
//! not Redis ([`probe`]).
//!
//! Every command is bounded by the command timeout here, and only here, so
//! that a slow or paused Redis is reported as "did not answer within …"
//! and a refused connection as "cannot reach".

pub(crate) mod acks;
pub(crate) mod notify;
pub(crate) mod probe;
pub(crate) mod replicas;
pub(crate) mod route;
pub(crate) mod scripts;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;
use tokio::time::Instant;

use crate::conn::replicas::{Acked, ReplicaList, Validity};
use crate::error::verdict::{verdict_of, Verdict};
use crate::error::{Error, Result};
use crate::holder::ReplicaStatus;

/// A connection unused this long is checked with PING before it is trusted
/// again: a peer that vanished without FIN or RST shows only when asked.
const IDLE_CHECK: Duration = Duration::from_secs(15);

/// How long a failed connect may look at what listens on the port: a plain
/// Redis answers at once, and the probe only runs after a failure.
const PROBE_AFTER_FAILURE: Duration = Duration::from_millis(500);
/// The same after a connect that got no answer, which has already cost the
/// whole command timeout.
const PROBE_AFTER_TIMEOUT: Duration = Duration::from_millis(250);

/// What was learnt about the server when the connection was made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerInfo {
    /// When the server started, on the local monotonic clock (the latest
    /// moment consistent with its reported uptime).
    pub(crate) started: Instant,
    /// The server runs in cluster mode: a script may only touch one slot.
    pub(crate) cluster: bool,
    /// The server has sharded pub/sub (SSUBSCRIBE, SPUBLISH: Redis 7.0 on).
    pub(crate) sharded_pubsub: bool,
    /// Which server process, and which history of the data, this is: a
    /// digest of its run id and replication id. Another value for the same
    /// slot is another master (a restart, or a replica promoted).
    pub(crate) identity: u64,
    /// A digest of its replication id.
    pub(crate) replid: u64,
    /// A digest of the replication id it had before it was last promoted
    /// (`master_replid2`), when it was: a replica promoted in place of a
    /// master carries that master's replication id here.
    pub(crate) promoted_from: Option<u64>,
    /// The server's clock as `INFO` read it when the connection was made
    /// (`server_time_usec`, Redis 6.2 on and Valkey): where a client has
    /// not read it from a script's reply yet, it still knows it.
    pub(crate) clock: Option<ClockReading>,
    /// The server has FCALL (Redis 7.0 on, Valkey).
    pub(crate) functions: bool,
    /// The server has EVALSHA: it has Lua scripting, unless it was taken
    /// away (a Sentinel never has it, but is refused before).
    pub(crate) evalsha: bool,
    /// Which compare-and-delete the server has.
    pub(crate) compare_and_delete: CompareAndDelete,
}

/// A server's clock, and when this host asked for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClockReading {
    /// The server's clock in µs, somewhere between the request's sending
    /// and its reply.
    pub(crate) server_us: u64,
    /// When the request was sent, on this host's clock.
    pub(crate) sent: Instant,
    /// From the request's sending to its reply.
    pub(crate) loose: Duration,
}

#[derive(Clone)]
struct Current {
    conn: MultiplexedConnection,
    generation: u64,
    server: ServerInfo,
}

#[derive(Default)]
struct Slot {
    current: Option<Current>,
    generation: u64,
    last_answer: Option<Instant>,
    /// The last connect that failed, and when: callers that queued behind
    /// it take its outcome.
    failed: Option<(Instant, Error)>,
}

/// One live connection handed out for a command, with what it was made for.
#[derive(Clone)]
pub(crate) struct Checkout {
    pub(crate) conn: MultiplexedConnection,
    line: Line,
    generation: u64,
    pub(crate) server: ServerInfo,
}

/// Which of a server's two connections: every command, or the requests
/// whose writes the replicas must acknowledge (in batches, see [`acks`]).
/// A `WAIT` holds back every command behind it on its connection for as
/// long as the replicas take: on a line of their own, renewals and
/// releases never queue behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Line {
    Commands = 0,
    Acks = 1,
}

/// One connection to the server, healed on its own.
#[derive(Default)]
struct Link {
    slot: Mutex<Slot>,
    /// One connect at a time; the others wait for its outcome.
    connecting: tokio::sync::Mutex<()>,
}

pub(crate) struct Connection {
    redis: redis::Client,
    /// Host and port only: the URL may carry a password.
    pub(crate) address: String,
    pub(crate) timeout: Duration,
    /// Its connections, by [`Line`].
    links: [Link; 2],
    /// The server answered READONLY: it is a replica now.
    demoted: AtomicBool,
    /// The server refuses functions to this user: scripts go with
    /// EVALSHA.
    no_functions: AtomicBool,
    /// The server refuses its compare-and-delete to this user: such
    /// releases go through the bare script.
    no_compare_and_delete: AtomicBool,
    /// The replicas the server last listed.
    replicas: Mutex<ReplicaList>,
    /// The requests whose writes the replicas must acknowledge, sent in
    /// batches on the [`Line::Acks`] connection.
    acks: acks::AckQueue,
    /// The server runs in cluster mode.
    cluster: AtomicBool,
}

/// The command that deletes a key only if it holds a given value, where the
/// server has one: Valkey 9's `DELIFEQ key value`, Redis 8.4's `DELEX key
/// IFEQ value`. Releasing a lock nobody waited for then needs no script
/// (elsewhere it is the bare `delete_if_equal.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompareAndDelete {
    DelIfEq,
    DelEx,
    /// Neither: such releases go through the bare script.
    None,
}

/// The commands that not every server has, asked about by name when a
/// connection is made. They are never tried to find out: a server answers
/// a command it lacks with an error that quotes the first 128 bytes of its
/// arguments, where a lock's name and its holder's identity are, cut
/// inside a character as often as not; and redis-rs reads an error line
/// as UTF-8 or drops the connection, with every request on it.
const OPTIONAL_COMMANDS: [&str; 4] = ["FCALL", "DELIFEQ", "DELEX", "EVALSHA"];

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl Connection {
    pub(crate) fn new(redis: redis::Client, address: String, timeout: Duration) -> Self {
        Connection {
            redis,
            address,
            timeout,
            links: Default::default(),
            demoted: AtomicBool::new(false),
            no_functions: AtomicBool::new(false),
            no_compare_and_delete: AtomicBool::new(false),
            replicas: Mutex::default(),
            acks: acks::AckQueue::default(),
            cluster: AtomicBool::new(false),
        }
    }

    fn replica_list(&self) -> MutexGuard<'_, ReplicaList> {
        self.replicas.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the server's replicas are to be asked for again before a
    /// grant relies on their number.
    pub(crate) fn replicas_due(&self) -> bool {
        self.replica_list().is_due()
    }

    /// What the server said of its replicas just now (`INFO
    /// replication`).
    pub(crate) fn read_replicas_alone(&self, info: &str) {
        self.replica_list().replace(ReplicaList::parse(info), None);
    }

    /// What a cluster's master said of its replicas just now (`INFO
    /// replication`), of those that could take over from it when it let
    /// this user ask that too (`CLUSTER NODES`), how long one cut off from
    /// it may still be promoted (its settings), and how many times replicas
    /// synchronised with it (`INFO stats`, when read).
    pub(crate) fn read_replicas(
        &self,
        info: &str,
        nodes: Option<&str>,
        validity: Validity,
        stats: Option<&str>,
    ) {
        let promotable =
            nodes.map(|nodes| (ReplicaList::promotable_in_cluster(nodes), Some(validity)));
        self.replica_list()
            .replace(ReplicaList::parse(info).with_syncs(stats), promotable);
    }

    /// What the server lists of its replicas, asked on `conn` and read into
    /// this connection's list.
    pub(crate) async fn read_replicas_on(
        &self,
        conn: &mut MultiplexedConnection,
    ) -> redis::RedisResult<()> {
        if !self.is_cluster() {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(conn)
                .await?;
            self.read_replicas_alone(&info);
            return Ok(());
        }
        // A cluster's master knows its replicas cut off from it too; where this
        // user may not ask (an ACL), its list alone is what is known. How long
        // one cut off may still be promoted is in its settings (Redis's
        // defaults where CONFIG is refused); whether one came back in sync
        // since the last reading, in its count of resyncs.
        let mut replies = redis::pipe()
            .ignore_errors()
            .cmd("INFO")
            .arg("replication")
            .cmd("CLUSTER")
            .arg("NODES")
            .cmd("CONFIG")
            .arg("GET")
            .arg("cluster-node-timeout")
            .cmd("CONFIG")
            .arg("GET")
            .arg("cluster-replica-validity-factor")
            .cmd("CONFIG")
            .arg("GET")
            .arg("repl-ping-replica-period")
            .cmd("INFO")
            .arg("stats")
            .query_async::<Vec<redis::Value>>(conn)
            .await?
            .into_iter();
        let info = reply_text(replies.next()).unwrap_or_default();
        let nodes = reply_text(replies.next());
        let validity = Validity::from_config(
            config_number(replies.next()),
            config_number(replies.next()),
            config_number(replies.next()),
        );
        let stats = reply_text(replies.next());
        self.read_replicas(&info, nodes.as_deref(), validity, stats.as_deref());
        Ok(())
    }

    /// The replicas that could take over from the server, as its
    /// deployment knows them (the sentinels).
    pub(crate) fn promotable_replicas(&self, replicas: Vec<String>) {
        self.replica_list().set_promotable(replicas);
    }

    /// How many replicas a grant waits for (see [`ReplicaList::asked`]).
    pub(crate) fn replicas_asked(&self) -> u32 {
        self.replica_list().asked()
    }

    /// Whether the server runs in cluster mode, as its connection found.
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster.load(Ordering::Relaxed)
    }

    /// How an acknowledgement asked of the server's replicas went.
    pub(crate) fn note_ack(&self, acked: Acked) {
        self.replica_list().note(acked);
    }

    /// What is known of the server's replicas, for `inspect`.
    pub(crate) fn replica_status(&self) -> ReplicaStatus {
        self.replica_list().status()
    }

    /// Whether the server answered a write with READONLY: a failover made
    /// it a replica (or the URL names one).
    pub(crate) fn is_demoted(&self) -> bool {
        self.demoted.load(Ordering::Relaxed)
    }

    pub(crate) fn demoted(&self) {
        self.demoted.store(true, Ordering::Relaxed);
    }

    /// Whether scripts may be called as functions on `server`.
    pub(crate) fn functions(&self, server: &ServerInfo) -> bool {
        server.functions && !self.no_functions.load(Ordering::Relaxed)
    }

    /// The server refuses functions to this user.
    pub(crate) fn no_functions(&self) {
        self.no_functions.store(true, Ordering::Relaxed);
    }

    /// Which compare-and-delete `server` lets this user run.
    pub(crate) fn compare_and_delete(&self, server: &ServerInfo) -> CompareAndDelete {
        if self.no_compare_and_delete.load(Ordering::Relaxed) {
            CompareAndDelete::None
        } else {
            server.compare_and_delete
        }
    }

    /// The server refuses its compare-and-delete to this user.
    pub(crate) fn no_compare_and_delete(&self) {
        self.no_compare_and_delete.store(true, Ordering::Relaxed);
    }

    fn slot(&self, line: Line) -> MutexGuard<'_, Slot> {
        self.links[line as usize]
            .slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A healthy connection, made if there is none. The whole of it,
    /// queueing behind another caller's connect included, is bounded by one
    /// command timeout (and a quarter of one more, at most 250 ms, when a
    /// TLS connect got no answer and the port is looked at), and a caller
    /// that queued behind a connect that failed meanwhile takes its outcome
    /// instead of trying again. Nothing the caller asked for is sent by
    /// this.
    pub(crate) async fn get(&self) -> Result<Checkout> {
        self.get_on(Line::Commands).await
    }

    /// As [`get`](Self::get), the connection of `line`.
    pub(crate) async fn get_on(&self, line: Line) -> Result<Checkout> {
        if let Some(checkout) = self.fresh(line) {
            return Ok(checkout);
        }
        // Boxed: the connect's future is large, and every request's future
        // would carry its room otherwise.
        Box::pin(self.get_again(line)).await
    }

    /// [`get_on`](Self::get_on) without a fresh connection: checks the
    /// one there, or connects anew.
    async fn get_again(&self, line: Line) -> Result<Checkout> {
        let started = Instant::now();
        let deadline = started + self.timeout;
        let no_answer = || Error::no_answer(&self.address, "connect", self.timeout);
        let connecting = &self.links[line as usize].connecting;
        let _connecting = tokio::time::timeout_at(deadline, connecting.lock())
            .await
            .map_err(|_| no_answer())?;
        if let Some(checkout) = self.fresh(line) {
            return Ok(checkout);
        }
        if let Some((at, error)) = &self.slot(line).failed {
            if *at >= started {
                return Err(error.shared_copy());
            }
        }
        let stale = self.slot(line).current.take();
        if let Some(current) = stale {
            // Idle for a while: ask before trusting it again.
            let mut conn = current.conn.clone();
            let pong = tokio::time::timeout_at(
                deadline,
                redis::cmd("PING").query_async::<redis::Value>(&mut conn),
            )
            .await;
            if matches!(pong, Ok(Ok(_))) {
                let checkout = Checkout {
                    conn: current.conn.clone(),
                    line,
                    generation: current.generation,
                    server: current.server,
                };
                let mut slot = self.slot(line);
                slot.current = Some(current);
                slot.last_answer = Some(Instant::now());
                return Ok(checkout);
            }
        }
        let (conn, server) = match self.connect(deadline).await {
            Ok(made) => made,
            Err(error) => {
                self.slot(line).failed = Some((Instant::now(), error.shared_copy()));
                return Err(error);
            }
        };
        let mut slot = self.slot(line);
        slot.generation += 1;
        slot.failed = None;
        let current = Current {
            conn,
            generation: slot.generation,
            server,
        };
        slot.current = Some(current.clone());
        slot.last_answer = Some(Instant::now());
        Ok(Checkout {
            conn: current.conn,
            line,
            generation: current.generation,
            server: current.server,
        })
    }

    pub(crate) fn fresh(&self, line: Line) -> Option<Checkout> {
        let slot = self.slot(line);
        let current = slot.current.as_ref()?;
        if slot.last_answer.is_none_or(|at| at.elapsed() >= IDLE_CHECK) {
            return None;
        }
        Some(Checkout {
            conn: current.conn.clone(),
            line,
            generation: current.generation,
            server: current.server,
        })
    }

    async fn connect(&self, deadline: Instant) -> Result<(MultiplexedConnection, ServerInfo)> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        let connect = async {
            let mut conn = self
                .redis
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            let asked = Instant::now();
            type Replies = (
                redis::RedisResult<redis::Value>,
                redis::RedisResult<redis::Value>,
                redis::RedisResult<redis::Value>,
                redis::RedisResult<Vec<redis::Value>>,
            );
            // The library name and version say which Functions libraries
            // this client may call (see `Client::script_libraries`); a
            // server older than 7.2 refuses them, which changes nothing.
            let (server, cluster, replication, commands): Replies = redis::pipe()
                .ignore_errors()
                .cmd("CLIENT")
                .arg("SETINFO")
                .arg("LIB-NAME")
                .arg(scripts::CLIENT_LIB_NAME)
                .ignore()
                .cmd("CLIENT")
                .arg("SETINFO")
                .arg("LIB-VER")
                .arg(scripts::client_lib_ver())
                .ignore()
                .cmd("INFO")
                .arg("server")
                .cmd("INFO")
                .arg("cluster")
                .cmd("INFO")
                .arg("replication")
                .cmd("COMMAND")
                .arg("INFO")
                .arg(&OPTIONAL_COMMANDS)
                .query_async(&mut conn)
                .await?;
            let (server, cluster, replication) = (
                info_text(server)?,
                info_text(cluster)?,
                info_text(replication)?,
            );
            // A server that will not say (COMMAND refused to this user).
            let commands = commands.ok();
            let clock = info_field(&server, "server_time_usec")
                .and_then(|us| us.parse::<u64>().ok())
                .map(|server_us| ClockReading {
                    server_us,
                    sent: asked,
                    loose: asked.elapsed(),
                });
            Ok::<_, redis::RedisError>((conn, server, cluster, replication, commands, clock))
        };
        let (conn, server, cluster, replication, commands, clock) =
            match tokio::time::timeout_at(deadline, connect).await {
                Ok(Ok(made)) => made,
                Ok(Err(e)) => {
                    let refused = e.is_connection_refusal();
                    // The server answered bytes that are not RESP.
                    let garbled = e.kind() == redis::ErrorKind::Parse;
                    let handshake = crate::error::verdict::is_tls_failure(&e);
                    let error = Error::redis(&self.address, "connect", e);
                    if refused || !(error.is_connection() || garbled || handshake) {
                        return Err(error);
                    }
                    let within = deadline.saturating_duration_since(Instant::now());
                    return Err(match self.mismatch(within.min(PROBE_AFTER_FAILURE)).await {
                        Some(found) => found.error(&self.address),
                        None if garbled => probe::Mismatch::NotRedis(None).error(&self.address),
                        None => error,
                    });
                }
                Err(_) => {
                    let error = Error::no_answer(&self.address, "connect", self.timeout);
                    // Only a TLS client waits silently on the wrong port; a
                    // plain one is reset at once.
                    if !matches!(
                        self.redis.get_connection_info().addr(),
                        redis::ConnectionAddr::TcpTls { .. }
                    ) {
                        return Err(error);
                    }
                    let within = (self.timeout / 4).min(PROBE_AFTER_TIMEOUT);
                    return Err(match self.mismatch(within).await {
                        Some(found) => found.error(&self.address),
                        None => error,
                    });
                }
            };
        // Valkey names the field server_mode.
        let mode = info_field(&server, "redis_mode").or_else(|| info_field(&server, "server_mode"));
        if mode == Some("sentinel") {
            return Err(Error::sentinel(&self.address));
        }
        let uptime = info_field(&server, "uptime_in_seconds")
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
        let now = Instant::now();
        let seven = info_field(&server, "redis_version")
            .and_then(|version| version.split('.').next())
            .and_then(|major| major.parse::<u32>().ok())
            .is_some_and(|major| major >= 7);
        // COMMAND INFO answers nil for each command the server lacks.
        let commands = commands.map(|reply| {
            let has = |at: usize| reply.get(at).is_some_and(|c| *c != redis::Value::Nil);
            [has(0), has(1), has(2), has(3)]
        });
        let info = ServerInfo {
            started: now.checked_sub(Duration::from_secs(uptime)).unwrap_or(now),
            cluster: info_field(&cluster, "cluster_enabled") == Some("1"),
            sharded_pubsub: seven,
            identity: digest(&[
                info_field(&server, "run_id").unwrap_or_default(),
                info_field(&replication, "master_replid").unwrap_or_default(),
            ]),
            replid: digest(&[info_field(&replication, "master_replid").unwrap_or_default()]),
            promoted_from: info_field(&replication, "master_replid2")
                .filter(|id| id.bytes().any(|b| b != b'0'))
                .map(|id| digest(&[id])),
            clock,
            // Unasked, by the version: every server from 7.0 on has FCALL.
            functions: commands.map_or(seven, |[fcall, ..]| fcall),
            compare_and_delete: match commands {
                Some([_, true, ..]) => CompareAndDelete::DelIfEq,
                Some([_, _, true, _]) => CompareAndDelete::DelEx,
                _ => CompareAndDelete::None,
            },
            evalsha: commands.is_none_or(|[.., evalsha]| evalsha),
        };
        self.cluster.store(info.cluster, Ordering::Relaxed);
        if info.cluster {
            // Its replicas, and which could take over, are read with
            // CLUSTER NODES before a grant relies on them.
            self.replica_list().mark_due();
        } else {
            self.read_replicas_alone(&replication);
        }
        Ok((conn, info))
    }

    /// What the port speaks, when it is another protocol than the URL's.
    async fn mismatch(&self, within: Duration) -> Option<probe::Mismatch> {
        probe::mismatch(self.redis.get_connection_info().addr(), within).await
    }

    /// Runs `f` on a connection taken with [`get`](Self::get), bounded by
    /// the command timeout. A connection that timed out or failed is
    /// dropped, so the next command gets a new one.
    pub(crate) async fn run_on<T, F, Fut>(
        &self,
        checkout: Checkout,
        operation: &str,
        f: F,
    ) -> Result<T>
    where
        F: FnOnce(MultiplexedConnection, ServerInfo) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.run_on_within(checkout, operation, Duration::ZERO, f)
            .await
    }

    /// As [`run_on`](Self::run_on), with `more` time than the command
    /// timeout: for what the server itself holds back (WAIT).
    pub(crate) async fn run_on_within<T, F, Fut>(
        &self,
        checkout: Checkout,
        operation: &str,
        more: Duration,
        f: F,
    ) -> Result<T>
    where
        F: FnOnce(MultiplexedConnection, ServerInfo) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let (line, generation) = (checkout.line, checkout.generation);
        let limit = self.timeout + more;
        match tokio::time::timeout(limit, f(checkout.conn, checkout.server)).await {
            Ok(Ok(value)) => {
                self.slot(line).last_answer = Some(Instant::now());
                Ok(value)
            }
            Ok(Err(e)) => {
                if verdict_of(&e) == Verdict::Reconnect {
                    self.broken(line, generation);
                } else {
                    // The server answered, with an error.
                    self.slot(line).last_answer = Some(Instant::now());
                }
                let error = Error::redis(&self.address, operation, e);
                if error.is_readonly() {
                    self.demoted();
                }
                Err(error)
            }
            Err(_) => {
                self.broken(line, generation);
                Err(Error::no_answer(&self.address, operation, limit))
            }
        }
    }

    /// Forgets the connection of `line` and `generation` if it is still
    /// the current one.
    fn broken(&self, line: Line, generation: u64) {
        let mut slot = self.slot(line);
        if slot
            .current
            .as_ref()
            .is_some_and(|c| c.generation == generation)
        {
            slot.current = None;
        }
    }
}

/// A 64-bit FNV-1a digest of `parts`, each ended by a zero byte.
fn digest(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &byte in part.as_bytes().iter().chain(&[0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// An `INFO` reply as text. It holds paths of the server's host (its
/// executable, its config file), which need not be UTF-8: such bytes are
/// replaced, never refused.
fn info_text(reply: redis::RedisResult<redis::Value>) -> redis::RedisResult<String> {
    match reply? {
        redis::Value::BulkString(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        other => Ok(redis::from_redis_value(other)?),
    }
}

/// The value of `field` in an `INFO` reply.
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// A reply as text, if it is one.
fn reply_text(value: Option<redis::Value>) -> Option<String> {
    match value {
        Some(redis::Value::BulkString(bytes)) => String::from_utf8(bytes).ok(),
        Some(redis::Value::SimpleString(text)) => Some(text),
        Some(redis::Value::VerbatimString { text, .. }) => Some(text),
        _ => None,
    }
}

/// The number in a reply of `CONFIG GET one-setting` (a name and a value,
/// as an array or a map); `None` when refused or not there.
fn config_number(value: Option<redis::Value>) -> Option<u64> {
    let value = match value? {
        redis::Value::Array(mut items) if items.len() == 2 => items.pop(),
        redis::Value::Map(mut pairs) if pairs.len() == 1 => pairs.pop().map(|(_, v)| v),
        _ => None,
    };
    reply_text(value)?.trim().parse().ok()
}
