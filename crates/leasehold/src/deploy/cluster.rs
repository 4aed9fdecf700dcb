//! A Redis Cluster: every key is served by the master of its hash slot.
//! Each master has a healing command connection and a notifier of its own;
//! the slot map comes from `CLUSTER SLOTS` and is mended by the servers'
//! MOVED replies, refreshed on a redirect, a lost connection or a cluster
//! that is not ready, at most once per [`REFRESH_EVERY`].
//!
//! Connections of our own per node rather than the Redis client's cluster
//! connection: the engine needs to know which server it talks to (the
//! restart grace, one renewal pipeline per node), to heal each node's
//! connection as it heals a single server's, and to bound every retry by
//! the lock's own time budget rather than the client's default retries.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use redis::{ConnectionAddr, Value};
use tokio::time::Instant;

use crate::conn::notify::Notifier;
use crate::conn::route::Route;
use crate::conn::scripts::Publish;
use crate::conn::{Connection, Line};
use crate::deploy::{BoxFuture, Deployment};
use crate::error::verdict::{Redirect, RedirectKind};
use crate::error::{Error, ErrorKind, Result};
use crate::keys::hash_slot;

/// Hash slots of a Redis Cluster.
const SLOTS: usize = 16384;
/// A slot no known master serves.
const NOBODY: u16 = u16::MAX;
/// The slot map is read again at most this often.
const REFRESH_EVERY: Duration = Duration::from_millis(100);

/// One master of the cluster, as the engine reaches it.
#[derive(Debug)]
struct Node {
    connection: Arc<Connection>,
    notifier: Notifier,
}

/// Which master serves each slot.
#[derive(Debug)]
struct Topology {
    /// An index into `masters`, or [`NOBODY`].
    slots: Vec<u16>,
    masters: Vec<Arc<Node>>,
}

impl Topology {
    fn empty() -> Self {
        Topology {
            slots: vec![NOBODY; SLOTS],
            masters: Vec::new(),
        }
    }

    fn master_of(&self, slot: u16) -> Option<(usize, &Arc<Node>)> {
        let index = usize::from(*self.slots.get(usize::from(slot))?);
        self.masters.get(index).map(|node| (index, node))
    }
}

/// Makes the Redis client of a node from the client of a seed, so that
/// every node is reached with the seed's settings (TLS, credentials,
/// database, socket options).
#[derive(Debug, Clone)]
pub(crate) struct NodeFactory {
    seed: redis::ConnectionInfo,
}

impl NodeFactory {
    pub(crate) fn new(seed: &redis::Client) -> Self {
        NodeFactory {
            seed: seed.get_connection_info().clone(),
        }
    }

    pub(crate) fn client(&self, host: &str, port: u16) -> Result<redis::Client> {
        let name = format!("{host}:{port}");
        let host = host.to_owned();
        let addr = match self.seed.addr().clone() {
            ConnectionAddr::Tcp(..) => ConnectionAddr::Tcp(host, port),
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            },
            _ => {
                return Err(Error::new(
                    ErrorKind::Config,
                    "a Redis Cluster or a Sentinel's master is reached over TCP: give a \
                     redis://, rediss:// or redis+sentinel:// URL",
                ))
            }
        };
        redis::Client::open(self.seed.clone().set_addr(addr)).map_err(|e| {
            Error::invalid(format!("cannot make a client for cluster node {name}")).with_source(e)
        })
    }

    fn host_of_seed(&self) -> String {
        match self.seed.addr() {
            ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.clone(),
            _ => String::new(),
        }
    }
}

#[derive(Debug)]
pub(crate) struct Cluster {
    factory: NodeFactory,
    command_timeout: Duration,
    /// The seeds and every node ever seen, for messages.
    address: String,
    /// Where to ask for the slot map when no master answers.
    seeds: Vec<(String, u16)>,
    topology: RwLock<Arc<Topology>>,
    /// Every node ever known, by "host:port": connections outlive a refresh.
    nodes: Mutex<HashMap<String, Arc<Node>>>,
    /// One refresh at a time, and when the last one ran.
    refreshing: tokio::sync::Mutex<Option<Instant>>,
    publish: Publish,
}

impl Cluster {
    /// A cluster reached first through `seeds` (host and port), whose
    /// nodes are made by `factory`.
    /// `sharded`: the servers have sharded pub/sub, and notifications use
    /// it (SPUBLISH reaches the shard alone; PUBLISH on a cluster goes to
    /// every node).
    pub(crate) fn new(
        factory: NodeFactory,
        seeds: Vec<(String, u16)>,
        command_timeout: Duration,
        sharded: bool,
    ) -> Self {
        let address = seeds
            .iter()
            .map(|(host, port)| format!("{host}:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        Cluster {
            factory,
            command_timeout,
            address: format!("the cluster at {address}"),
            seeds,
            topology: RwLock::new(Arc::new(Topology::empty())),
            nodes: Mutex::default(),
            refreshing: tokio::sync::Mutex::new(None),
            publish: if sharded {
                Publish::Sharded
            } else {
                Publish::Classic
            },
        }
    }

    fn topology(&self) -> Arc<Topology> {
        Arc::clone(&self.topology.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The node at `host:port`, made on first use.
    fn node(&self, host: &str, port: u16) -> Result<Arc<Node>> {
        let key = format!("{host}:{port}");
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(node) = nodes.get(&key) {
            return Ok(Arc::clone(node));
        }
        let redis = self.factory.client(host, port)?;
        let notifier = match self.publish {
            Publish::Sharded => Notifier::sharded(redis.clone(), self.command_timeout),
            Publish::Classic => Notifier::new(redis.clone(), self.command_timeout),
        };
        let node = Arc::new(Node {
            notifier,
            connection: Arc::new(Connection::new(redis, key.clone(), self.command_timeout)),
        });
        nodes.insert(key, Arc::clone(&node));
        Ok(node)
    }

    async fn route_to(&self, node: &Arc<Node>) -> Result<Route> {
        match node.connection.get().await {
            Ok(checkout) => Ok(Route::new(
                Arc::clone(&node.connection),
                checkout,
                self.publish,
            )),
            Err(error) => {
                if error.is_transient() {
                    // The master may be gone: a replica takes over.
                    let _ = self.refresh(false).await;
                }
                Err(error)
            }
        }
    }

    async fn route_key(&self, key: &str) -> Result<Route> {
        let slot = hash_slot(key);
        let node = match self.topology().master_of(slot) {
            Some((_, node)) => Arc::clone(node),
            None => {
                self.refresh(true).await?;
                match self.topology().master_of(slot) {
                    Some((_, node)) => Arc::clone(node),
                    None => return Err(self.no_master(slot)),
                }
            }
        };
        self.route_to(&node).await
    }

    fn no_master(&self, slot: u16) -> Error {
        Error::new(
            ErrorKind::Connection,
            format!(
                "no master of {} serves hash slot {slot} now: the cluster is failing over or \
                 missing a shard; try again shortly",
                self.address
            ),
        )
        .transient()
    }

    /// Reads the slot map again, from a master it knows or else a seed;
    /// skipped when the last read is younger than [`REFRESH_EVERY`] unless
    /// `needed`.
    async fn refresh(&self, needed: bool) -> Result<()> {
        let mut last = self.refreshing.lock().await;
        if !needed && last.is_some_and(|at| at.elapsed() < REFRESH_EVERY) {
            return Ok(());
        }
        let mut asked: Vec<Arc<Node>> = self.topology().masters.clone();
        for (host, port) in &self.seeds {
            asked.push(self.node(host, *port)?);
        }
        let mut failure = None;
        for node in asked {
            match self.read_slots(&node).await {
                Ok(topology) => {
                    *self
                        .topology
                        .write()
                        .unwrap_or_else(PoisonError::into_inner) = Arc::new(topology);
                    *last = Some(Instant::now());
                    return Ok(());
                }
                Err(error) => failure = Some(error),
            }
        }
        *last = Some(Instant::now());
        Err(failure.unwrap_or_else(|| self.no_master(0)))
    }

    async fn read_slots(&self, node: &Arc<Node>) -> Result<Topology> {
        let checkout = node.connection.get().await?;
        let reply: Value = node
            .connection
            .run_on(checkout, "reading the slot map", |mut conn, _| async move {
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        let unexpected = || Error::unexpected_reply("CLUSTER SLOTS", &reply);
        let Value::Array(ranges) = &reply else {
            return Err(unexpected());
        };
        let asked_host = node
            .connection
            .address
            .rsplit_once(':')
            .map(|(host, _)| host.to_owned())
            .unwrap_or_default();
        let mut topology = Topology::empty();
        let mut index_of: HashMap<String, u16> = HashMap::new();
        for range in ranges {
            let Value::Array(fields) = range else {
                return Err(unexpected());
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return Err(unexpected());
            };
            let host = match master.first() {
                Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
                Some(Value::SimpleString(host)) => host.clone(),
                _ => return Err(unexpected()),
            };
            // An empty host (or "?") is the host of the node that answered.
            let host = if host.is_empty() || host == "?" {
                asked_host.clone()
            } else {
                host
            };
            let port = match master.get(1) {
                Some(Value::Int(port)) => u16::try_from(*port).map_err(|_| unexpected())?,
                _ => return Err(unexpected()),
            };
            let (start, end) = (
                usize::try_from(*start).map_err(|_| unexpected())?,
                usize::try_from(*end).map_err(|_| unexpected())?,
            );
            if start > end || end >= SLOTS {
                return Err(unexpected());
            }
            let key = format!("{host}:{port}");
            let index = match index_of.get(&key) {
                Some(index) => *index,
                None => {
                    let index = u16::try_from(topology.masters.len()).map_err(|_| unexpected())?;
                    topology.masters.push(self.node(&host, port)?);
                    index_of.insert(key, index);
                    index
                }
            };
            topology.slots[start..=end].fill(index);
        }
        Ok(topology)
    }

    /// A MOVED says who serves `slot` now: the map learns it at once.
    fn learn(&self, slot: u16, node: &Arc<Node>) {
        let mut current = self
            .topology
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let index = match current.masters.iter().position(|m| Arc::ptr_eq(m, node)) {
            Some(index) => index,
            None => current.masters.len(),
        };
        let Ok(index16) = u16::try_from(index) else {
            return;
        };
        let mut slots = current.slots.clone();
        let mut masters = current.masters.clone();
        if index == masters.len() {
            masters.push(Arc::clone(node));
        }
        if let Some(entry) = slots.get_mut(usize::from(slot)) {
            *entry = index16;
        }
        *current = Arc::new(Topology { slots, masters });
    }

    /// The node a redirect names; an empty host is that of the master the
    /// map had for the slot.
    fn redirect_node(&self, redirect: &Redirect) -> Result<Arc<Node>> {
        let (host, port) = match redirect.addr.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), port),
            None => (String::new(), redirect.addr.as_str()),
        };
        let port: u16 = port.parse().map_err(|_| {
            Error::new(
                ErrorKind::Server,
                format!(
                    "a node of {} redirected to {:?}, which is no address",
                    self.address, redirect.addr
                ),
            )
        })?;
        let host = if host.is_empty() {
            self.topology()
                .master_of(redirect.slot)
                .and_then(|(_, node)| {
                    node.connection
                        .address
                        .rsplit_once(':')
                        .map(|(host, _)| host.to_owned())
                })
                .unwrap_or_else(|| self.factory.host_of_seed())
        } else {
            host
        };
        self.node(&host, port)
    }
}

impl Deployment for Cluster {
    fn address(&self) -> &str {
        &self.address
    }

    fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    fn route<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Route>> {
        Box::pin(self.route_key(key))
    }

    fn route_ready(&self, key: &str) -> Option<Route> {
        let topology = self.topology();
        let (_, node) = topology.master_of(hash_slot(key))?;
        let checkout = node.connection.fresh(Line::Commands)?;
        Some(Route::new(
            Arc::clone(&node.connection),
            checkout,
            self.publish,
        ))
    }

    fn masters(&self) -> BoxFuture<'_, Result<Vec<Route>>> {
        Box::pin(async move {
            self.refresh(true).await?;
            let mut routes = Vec::new();
            for node in &self.topology().masters {
                routes.push(self.route_to(node).await?);
            }
            Ok(routes)
        })
    }

    fn follow<'a>(
        &'a self,
        _key: &'a str,
        redirect: &'a Redirect,
    ) -> Option<BoxFuture<'a, Result<Route>>> {
        Some(Box::pin(async move {
            let node = self.redirect_node(redirect)?;
            match redirect.kind {
                RedirectKind::Moved => {
                    self.learn(redirect.slot, &node);
                    // The rest of the map may have changed too.
                    let _ = self.refresh(false).await;
                    self.route_to(&node).await
                }
                RedirectKind::Ask => Ok(self.route_to(&node).await?.asking()),
            }
        }))
    }

    fn server_of(&self, key: &str) -> usize {
        self.topology()
            .master_of(hash_slot(key))
            .map_or(0, |(index, _)| index)
    }

    fn notifier(&self, key: &str) -> Option<Notifier> {
        self.topology()
            .master_of(hash_slot(key))
            .map(|(_, node)| node.notifier.clone())
    }
}
