//! A master watched by Redis Sentinel: every key is served by the master
//! the sentinels name, confirmed with `ROLE`, over one healing command
//! connection and one notifier.
//!
//! Failovers are followed three ways: a task listens for `+switch-master`
//! on one sentinel at a time (moving to the next when it drops, and asking
//! again for the master once subscribed, in case a switch was missed); a
//! master that answers READONLY has been demoted; a master that cannot be
//! reached is asked about again. In each case the sentinels are asked for
//! the master, and a new one is used only once it answers `ROLE` as a
//! master. The master the sentinels said was replaced is dropped at once:
//! requests in flight to it finish or fail there, and the next ones go to
//! the new master under the same tokens.
//!
//! Connections of our own, not the Redis client's sentinel connection, for
//! the reasons of `cluster.rs`: the engine must know which master it talks
//! to (the grace on a change of master reads its identity), and every
//! retry is bounded by the lock's own time budget.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::{AsyncConnectionConfig, Value};

use crate::conn::notify::Notifier;
use crate::conn::route::Route;
use crate::conn::scripts::{self, Publish};
use crate::conn::{Connection, Line};
use crate::deploy::cluster::NodeFactory;
use crate::deploy::{BoxFuture, Deployment};
use crate::error::verdict::Redirect;
use crate::error::{Error, ErrorKind, Result};

/// The channel on which sentinels announce a new master.
const SWITCH_MASTER: &str = "+switch-master";
/// How often the listener asks its sentinel which replicas could take
/// over from the master.
const REPLICAS_EVERY: Duration = Duration::from_secs(2);
/// The listener's pause before it tries the next sentinel, doubling.
const LISTEN_RETRY: Duration = Duration::from_millis(100);
const LISTEN_RETRY_MAX: Duration = Duration::from_secs(2);

/// The master the sentinels named, as the engine reaches it.
#[derive(Debug)]
struct Master {
    /// `host:port`, as the sentinels named it.
    addr: String,
    connection: Arc<Connection>,
    notifier: Notifier,
    /// Which master this is, counting from 1 since the client started.
    index: usize,
}

/// What the listener and the requests share.
#[derive(Debug, Default)]
struct Current {
    /// The master in use; `None` before the first request, and from the
    /// moment the sentinels say it was replaced until a new one is
    /// confirmed.
    master: Option<Arc<Master>>,
    /// Bumped at each announcement of the master by the sentinels: a
    /// resolution that started before one installs what it found only if
    /// it is the master announced.
    switches: u64,
    /// The master the sentinels last announced.
    announced: Option<String>,
}

#[derive(Debug)]
struct Shared {
    current: Mutex<Current>,
}

impl Shared {
    fn current(&self) -> MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The sentinels say `addr` is the master now: a master elsewhere is
    /// no longer used.
    fn switched(&self, addr: &str) {
        let mut current = self.current();
        current.switches += 1;
        current.announced = Some(addr.to_owned());
        if current.master.as_ref().is_some_and(|m| m.addr != addr) {
            current.master = None;
        }
    }
}

/// A master found through its sentinels.
#[derive(Debug)]
pub(crate) struct Sentinel {
    /// The name the sentinels monitor the master under.
    name: String,
    /// Each sentinel, with its `host:port`, asked in order.
    sentinels: Vec<(redis::Client, String)>,
    /// Makes the client of a master with the URL's credentials and TLS.
    factory: NodeFactory,
    command_timeout: Duration,
    /// For messages.
    address: String,
    shared: Arc<Shared>,
    /// Masters made so far, for `Master::index`.
    made: AtomicU64,
    /// One resolution at a time; the others take its outcome.
    resolving: tokio::sync::Mutex<()>,
    /// The `+switch-master` listener, started on the first request (and
    /// again should its runtime have stopped it).
    listener: Mutex<Option<tokio::task::AbortHandle>>,
    /// Off in tests that must meet a demoted master.
    listen: bool,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if let Some(listener) = self.listener.get_mut().ok().and_then(Option::take) {
            listener.abort();
        }
    }
}

impl Sentinel {
    /// The master `name` watched by `sentinels` (each with its
    /// `host:port`, at least one); its clients are made by `factory`.
    pub(crate) fn new(
        name: String,
        sentinels: Vec<(redis::Client, String)>,
        factory: NodeFactory,
        command_timeout: Duration,
    ) -> Self {
        let list = sentinels
            .iter()
            .map(|(_, addr)| addr.as_str())
            .collect::<Vec<_>>()
            .join(",");
        Sentinel {
            address: format!("master {name:?} of the sentinels at {list}"),
            name,
            sentinels,
            factory,
            command_timeout,
            shared: Arc::new(Shared {
                current: Mutex::default(),
            }),
            made: AtomicU64::new(0),
            resolving: tokio::sync::Mutex::new(()),
            listener: Mutex::new(None),
            listen: true,
        }
    }

    /// Without the `+switch-master` listener: only READONLY and lost
    /// connections move the client.
    #[cfg(test)]
    fn without_listener(mut self) -> Self {
        self.listen = false;
        self
    }

    fn start_listener(&self) {
        if !self.listen {
            return;
        }
        let mut listener = self.listener.lock().unwrap_or_else(PoisonError::into_inner);
        if listener.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        let task = tokio::spawn(listen(
            Arc::downgrade(&self.shared),
            self.sentinels.clone(),
            self.name.clone(),
            self.command_timeout,
        ));
        *listener = Some(task.abort_handle());
    }

    /// The master in use, if it is not known to be demoted.
    fn master(&self) -> Option<Arc<Master>> {
        let current = self.shared.current();
        current
            .master
            .as_ref()
            .filter(|m| !m.connection.is_demoted())
            .cloned()
    }

    /// The master to use now: the one in use unless `gone` (it failed, or
    /// answered READONLY), else the one the sentinels name, confirmed.
    async fn resolve(&self, gone: Option<&Arc<Master>>) -> Result<Arc<Master>> {
        let _one = tokio::time::timeout(self.command_timeout, self.resolving.lock())
            .await
            .map_err(|_| {
                Error::no_answer(&self.address, "finding the master", self.command_timeout)
            })?;
        if let Some(master) = self.master() {
            if gone.is_none_or(|gone| !Arc::ptr_eq(gone, &master)) {
                // Resolved meanwhile by another request.
                return Ok(master);
            }
        }
        let switches = self.shared.current().switches;
        let addr = self.ask_sentinels().await?;
        let reuse = gone
            .filter(|gone| gone.addr == addr && !gone.connection.is_demoted())
            .cloned();
        let master = match reuse {
            // Still the master by the sentinels: its connection heals by
            // itself once it answers again.
            Some(same) => same,
            None => self.confirm(&addr).await?,
        };
        // Which replicas could take over from it: a grant waits for them,
        // cut off from the master or not (see `ReplicaList`).
        for (sentinel, _) in &self.sentinels {
            if let Ok(replicas) = promotable(sentinel, &self.name, self.command_timeout).await {
                master.connection.promotable_replicas(replicas);
                break;
            }
        }
        let mut current = self.shared.current();
        if current.switches != switches
            && current
                .announced
                .as_ref()
                .is_some_and(|a| *a != master.addr)
        {
            return Err(self.switching());
        }
        current.master = Some(Arc::clone(&master));
        Ok(master)
    }

    /// A connection to `addr` that answers ROLE as a master.
    async fn confirm(&self, addr: &str) -> Result<Arc<Master>> {
        let (host, port) = split_addr(addr).ok_or_else(|| {
            Error::new(
                ErrorKind::Server,
                format!(
                    "the sentinels named {addr:?} as {}, which is no address",
                    self.address
                ),
            )
        })?;
        let redis = self.factory.client(host, port)?;
        let connection = Arc::new(Connection::new(
            redis.clone(),
            addr.to_owned(),
            self.command_timeout,
        ));
        let checkout = connection.get().await?;
        let role: Value = connection
            .run_on(checkout, "ROLE", |mut conn, _| async move {
                redis::cmd("ROLE").query_async(&mut conn).await
            })
            .await?;
        let is_master = matches!(&role, Value::Array(items)
            if items.first().and_then(scripts::as_text).as_deref() == Some("master"));
        if !is_master {
            return Err(Error::new(
                ErrorKind::Connection,
                format!(
                    "the sentinels name redis at {addr} as {}, but it is not a master yet \
                     (ROLE): a failover is under way; try again shortly",
                    self.address
                ),
            )
            .transient());
        }
        let index = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(Arc::new(Master {
            addr: addr.to_owned(),
            notifier: Notifier::new(redis, self.command_timeout),
            connection,
            index: usize::try_from(index).unwrap_or(usize::MAX),
        }))
    }

    fn switching(&self) -> Error {
        Error::new(
            ErrorKind::Connection,
            format!(
                "the sentinels switched {} while it was being looked up; try again shortly",
                self.address
            ),
        )
        .transient()
    }

    /// The master's `host:port` from the first sentinel that names it.
    async fn ask_sentinels(&self) -> Result<String> {
        let mut failure = None;
        let mut unknown = false;
        for (sentinel, addr) in &self.sentinels {
            match master_addr(sentinel, &self.name, self.command_timeout).await {
                Ok(Some(master)) => return Ok(master),
                Ok(None) => unknown = true,
                Err(e) => failure = Some(Error::redis(addr, "SENTINEL get-master-addr-by-name", e)),
            }
        }
        if unknown {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the sentinels at {} watch no master named {:?}: check the name at the end \
                     of the URL (SENTINEL MASTERS, asked of a sentinel, lists the names)",
                    self.sentinel_list(),
                    self.name
                ),
            ));
        }
        let error = Error::new(
            ErrorKind::Connection,
            format!(
                "no sentinel at {} answered where master {:?} is: check that they run and that \
                 the URL is right",
                self.sentinel_list(),
                self.name
            ),
        )
        .transient();
        Err(match failure {
            Some(cause) if !cause.is_transient() => cause,
            Some(cause) => error.with_source(cause),
            None => error,
        })
    }

    fn sentinel_list(&self) -> String {
        self.sentinels
            .iter()
            .map(|(_, addr)| addr.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    async fn route_key(&self) -> Result<Route> {
        self.start_listener();
        let master = match self.master() {
            Some(master) => master,
            None => {
                let gone = self.shared.current().master.clone();
                self.resolve(gone.as_ref()).await?
            }
        };
        match master.connection.get().await {
            Ok(checkout) => Ok(Route::new(
                Arc::clone(&master.connection),
                checkout,
                Publish::Classic,
            )),
            Err(error) if error.is_transient() => {
                // The master may have been replaced: the sentinels say.
                let next = self.resolve(Some(&master)).await?;
                if Arc::ptr_eq(&next, &master) {
                    return Err(error);
                }
                let checkout = next.connection.get().await?;
                Ok(Route::new(
                    Arc::clone(&next.connection),
                    checkout,
                    Publish::Classic,
                ))
            }
            Err(error) => Err(error),
        }
    }
}

impl Deployment for Sentinel {
    fn address(&self) -> &str {
        &self.address
    }

    fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    fn route<'a>(&'a self, _key: &'a str) -> BoxFuture<'a, Result<Route>> {
        Box::pin(self.route_key())
    }

    fn route_ready(&self, _key: &str) -> Option<Route> {
        // Its listener must be running, which only `route` sees to.
        if self.listen {
            let listener = self.listener.lock().unwrap_or_else(PoisonError::into_inner);
            if listener.as_ref().is_none_or(|task| task.is_finished()) {
                return None;
            }
        }
        let master = self.master()?;
        let checkout = master.connection.fresh(Line::Commands)?;
        Some(Route::new(
            Arc::clone(&master.connection),
            checkout,
            Publish::Classic,
        ))
    }

    fn follow<'a>(
        &'a self,
        _key: &'a str,
        _redirect: &'a Redirect,
    ) -> Option<BoxFuture<'a, Result<Route>>> {
        None
    }

    fn failed_over<'a>(&'a self, _key: &'a str) -> Option<BoxFuture<'a, Result<Route>>> {
        // The connection that got READONLY marked its master demoted, so
        // the route asks the sentinels.
        Some(Box::pin(self.route_key()))
    }

    fn server_of(&self, _key: &str) -> usize {
        self.shared
            .current()
            .master
            .as_ref()
            .map_or(0, |master| master.index)
    }

    fn notifier(&self, _key: &str) -> Option<Notifier> {
        self.master().map(|master| master.notifier.clone())
    }
}

/// `host:port` (the host may be an IPv6 address, bracketed or not).
fn split_addr(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host, port.parse().ok()?))
}

/// What one sentinel says of master `name`: its `host:port`, or `None`
/// when it watches no master of that name.
async fn master_addr(
    sentinel: &redis::Client,
    name: &str,
    timeout: Duration,
) -> redis::RedisResult<Option<String>> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    let mut conn = sentinel
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(name)
        .query_async(&mut conn)
        .await?;
    Ok(reply.map(|(host, port)| join_addr(&host, port)))
}

/// The replicas of master `name` that its sentinels could promote in its
/// place, as one sentinel sees them: not down (`s_down`, `o_down`) or out
/// of its reach (`disconnected`), not of priority 0, and not cut off from
/// the master for longer than the sentinels let a replica be and still
/// promote it (ten times `down-after-milliseconds`). One cut off for less
/// is among them: a failover may still promote it.
async fn promotable(
    sentinel: &redis::Client,
    name: &str,
    timeout: Duration,
) -> redis::RedisResult<Vec<String>> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    let mut conn = sentinel
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let (master, replicas): (Value, Value) = redis::pipe()
        .cmd("SENTINEL")
        .arg("MASTER")
        .arg(name)
        .cmd("SENTINEL")
        .arg("REPLICAS")
        .arg(name)
        .query_async(&mut conn)
        .await?;
    Ok(promotable_of(&master, &replicas))
}

/// What [`promotable`] reads from `SENTINEL MASTER` and `SENTINEL REPLICAS`.
fn promotable_of(master: &Value, replicas: &Value) -> Vec<String> {
    let down_after = fields(master)
        .get("down-after-milliseconds")
        .and_then(|ms| ms.parse::<u64>().ok())
        .unwrap_or(30_000);
    let Value::Array(replicas) = replicas else {
        return Vec::new();
    };
    replicas
        .iter()
        .map(fields)
        .filter(|replica| {
            let flags = replica.get("flags").map_or("", String::as_str);
            let down = flags
                .split(',')
                .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"));
            let priority = replica
                .get("replica-priority")
                .or_else(|| replica.get("slave-priority"))
                .and_then(|p| p.parse::<u64>().ok());
            let cut_off_ms = replica
                .get("master-link-down-time")
                .and_then(|ms| ms.parse::<u64>().ok())
                .unwrap_or(0);
            !down && priority != Some(0) && cut_off_ms <= down_after.saturating_mul(10)
        })
        .filter_map(|replica| {
            let port = replica.get("port")?.parse::<u16>().ok()?;
            Some(join_addr(replica.get("ip")?, port))
        })
        .collect()
}

/// The fields of a sentinel's reply about one server: a flat array of
/// names and values (RESP2), or a map.
fn fields(value: &Value) -> std::collections::HashMap<String, String> {
    let pairs: Vec<(&Value, &Value)> = match value {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|p| Some((p.first()?, p.get(1)?)))
            .collect(),
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        _ => Vec::new(),
    };
    pairs
        .into_iter()
        .filter_map(|(k, v)| Some((scripts::as_text(k)?, scripts::as_text(v)?)))
        .collect()
}

fn join_addr(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Listens for `+switch-master` of master `name` on one sentinel at a
/// time, until the deployment is gone. After each subscription the master
/// is asked for again: a switch announced while no sentinel was heard is
/// not missed.
async fn listen(
    shared: Weak<Shared>,
    sentinels: Vec<(redis::Client, String)>,
    name: String,
    timeout: Duration,
) {
    let mut pause = LISTEN_RETRY;
    for (sentinel, _) in sentinels.iter().cycle() {
        if shared.strong_count() == 0 {
            return;
        }
        if let Ok(Ok(mut pubsub)) = tokio::time::timeout(timeout, sentinel.get_async_pubsub()).await
        {
            let subscribed = tokio::time::timeout(timeout, pubsub.subscribe(SWITCH_MASTER)).await;
            if matches!(subscribed, Ok(Ok(()))) {
                if let Ok(Some(addr)) = master_addr(sentinel, &name, timeout).await {
                    match shared.upgrade() {
                        Some(shared) => shared.switched(&addr),
                        None => return,
                    }
                }
                pause = LISTEN_RETRY;
                let mut messages = pubsub.on_message();
                let mut replicas = tokio::time::interval(REPLICAS_EVERY);
                replicas.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    let message = tokio::select! {
                        message = messages.next() => message,
                        _ = replicas.tick() => {
                            let Some(shared) = shared.upgrade() else {
                                return;
                            };
                            let master = shared.current().master.clone();
                            if let Some(master) = master {
                                if let Ok(list) = promotable(sentinel, &name, timeout).await {
                                    master.connection.promotable_replicas(list);
                                }
                            }
                            continue;
                        }
                    };
                    let Some(message) = message else {
                        break;
                    };
                    let Ok(payload) = message.get_payload::<String>() else {
                        continue;
                    };
                    // "<name> <old ip> <old port> <new ip> <new port>"
                    let words: Vec<&str> = payload.split_ascii_whitespace().collect();
                    let [master, _, _, host, port] = words[..] else {
                        continue;
                    };
                    let Ok(port) = port.parse::<u16>() else {
                        continue;
                    };
                    if master != name {
                        continue;
                    }
                    match shared.upgrade() {
                        Some(shared) => shared.switched(&join_addr(host, port)),
                        None => return,
                    }
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LISTEN_RETRY_MAX);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::client::{Client, Config, DEFAULT_FENCE_RETENTION};
    use crate::deploy::backing::Backing;
    use crate::deploy::store::Store;
    use crate::engine::state::{Engine, EngineConfig};
    use leasehold_testkit::Sentinels;

    /// A client of `group` that learns of failovers only from what the
    /// masters answer, never from `+switch-master`.
    fn deaf_client(group: &Sentinels) -> Client {
        let timeout = Duration::from_secs(2);
        let sentinels = group
            .sentinel_addrs()
            .iter()
            .map(|addr| {
                let client = redis::Client::open(format!("redis://{addr}")).unwrap();
                (client, addr.to_string())
            })
            .collect();
        let template = redis::Client::open(group.sentinel_urls()[0].as_str()).unwrap();
        let deployment = Sentinel::new(
            group.master_name().to_owned(),
            sentinels,
            NodeFactory::new(&template),
            timeout,
        )
        .without_listener();
        let store = Store::new(Arc::new(deployment), None);
        let engine = Engine::new(
            Backing::One(Arc::new(store)),
            EngineConfig {
                restart_grace: None,
                fence_retention: DEFAULT_FENCE_RETENTION,
                identity: "test".to_owned(),
                connect_timeout: timeout,
            },
        )
        .unwrap();
        Client {
            engine,
            config: Arc::new(Config {
                prefix: "leasehold".to_owned(),
                lease: Duration::from_secs(30),
                watchdog: true,
                replica_ack: crate::conn::replicas::ReplicaAck::default(),
            }),
        }
    }

    /// The old master, demoted by a failover, answers READONLY: the
    /// request goes to the new master instead of failing, and so do the
    /// release and the watchdog's renewals of a lock taken before.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readonly_from_a_demoted_master_moves_the_client() {
        let mut group = Sentinels::start(1, 3);
        let client = deaf_client(&group);
        let held = client.mutex("held").unwrap().acquire().await.unwrap();
        let old = group.master_addr();
        tokio::task::block_in_place(|| group.failover());
        assert_ne!(group.master_addr(), old);
        let guard = client
            .mutex("job")
            .unwrap()
            .try_acquire()
            .await
            .unwrap()
            .expect("the lock is free on the new master");
        assert_eq!(
            group
                .master()
                .command(&["EXISTS", "leasehold:{job}"])
                .unwrap(),
            "1",
            "taken on the new master"
        );
        guard.release().await.unwrap();
        held.extend(Duration::from_secs(20)).await.unwrap();
        held.release().await.unwrap();
    }

    /// The replicas the sentinels could promote: not down, not out of their
    /// reach, not of priority 0, not cut off for longer than they allow.
    #[test]
    fn replicas_that_could_be_promoted_are_those_the_sentinels_would_take() {
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let server = |pairs: &[(&str, &str)]| {
            Value::Array(pairs.iter().flat_map(|(k, v)| [text(k), text(v)]).collect())
        };
        let master = server(&[("name", "m"), ("down-after-milliseconds", "1000")]);
        let replica = |port: &str, flags: &str, down_ms: &str, priority: &str| {
            server(&[
                ("ip", "10.0.0.5"),
                ("port", port),
                ("flags", flags),
                ("master-link-down-time", down_ms),
                ("slave-priority", priority),
            ])
        };
        let replicas = Value::Array(vec![
            replica("1", "slave", "0", "100"),
            // Cut off from the master for 9 s: still promotable.
            replica("2", "slave", "9000", "100"),
            replica("3", "s_down,slave", "0", "100"),
            replica("4", "slave,disconnected", "0", "100"),
            replica("5", "slave", "0", "0"),
            // Cut off for longer than ten times down-after.
            replica("6", "slave", "10001", "100"),
        ]);
        assert_eq!(
            promotable_of(&master, &replicas),
            ["10.0.0.5:1", "10.0.0.5:2"]
        );
        assert!(promotable_of(&master, &Value::Nil).is_empty());
    }
}
