use std::fmt;
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use crate::error::StartError;
use crate::server::{Mode, RedisServer, LAST_SLOT};
use crate::version::server_version;
use view::{info_field, Entry, View};

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = LAST_SLOT + 1;

/// `cluster-node-timeout` unless [`ClusterBuilder::node_timeout`] says
/// otherwise: long enough that a busy test machine does not trip a
/// failover, short enough that a killed master is replaced in seconds.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(2000);

/// Longest wait for the cluster to settle after a start or a change.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Keys moved by one `MIGRATE`.
const MIGRATE_BATCH: usize = 100;
const MIGRATE_TIMEOUT_MS: &str = "5000";
/// A manual failover is given up by the server after 5 s; asked again after
/// this.
const FAILOVER_RETRY: Duration = Duration::from_secs(6);
/// Lines of each node's log in a failure message.
const LOG_LINES: usize = 30;

/// The hash slot of `key`, as Redis Cluster computes it: CRC16 (XMODEM) of
/// the key, or of its hash tag (the part between the first `{` and the next
/// `}`, if not empty), modulo 16384.
///
/// ```
/// use leasehold_testkit::key_slot;
///
/// assert_eq!(key_slot("foo"), 12182);
/// assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
/// ```
pub fn key_slot(key: impl AsRef<[u8]>) -> u16 {
    let key = key.as_ref();
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let len = rest.iter().position(|&b| b == b'}')?;
            (len > 0).then(|| &rest[..len])
        })
        .unwrap_or(key);
    crc16(hashed) % SLOTS
}

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Settings for a [`RedisCluster`]; made by [`RedisCluster::builder`].
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    masters: usize,
    replicas: usize,
    node_timeout: Duration,
    args: Vec<String>,
}

impl ClusterBuilder {
    /// The nodes' `cluster-node-timeout` ([`DEFAULT_NODE_TIMEOUT`] unless
    /// set): how long a node may be unreachable before it is failed over.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Extra `redis-server` arguments for every node, after the cluster's
    /// own (see [`RedisServer::start_with_args`]), e.g.
    /// `&["--appendonly", "yes"]`.
    pub fn args(mut self, extra: &[&str]) -> Self {
        self.args.extend(extra.iter().map(|s| (*s).to_owned()));
        self
    }

    /// Starts the cluster and waits until it is ready (see
    /// [`RedisCluster::start`]). Panics with every node's log if it cannot.
    pub fn start(self) -> RedisCluster {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start`](Self::start), but returns the failure instead of
    /// panicking.
    ///
    /// # Errors
    ///
    /// No master was asked for, a node cannot be started, or the cluster
    /// does not settle within 30 s; the message includes the nodes' logs.
    pub fn try_start(self) -> Result<RedisCluster, StartError> {
        if self.masters == 0 || self.masters > usize::from(SLOTS) {
            return Err(StartError::other(format!(
                "a cluster needs 1 to {SLOTS} masters, not {}",
                self.masters
            )));
        }
        let timeout_ms = self.node_timeout.as_millis().max(1).to_string();
        let mut args = vec![
            "--cluster-node-timeout",
            &timeout_ms,
            // A replica takes over however long it was cut off from its master.
            "--cluster-replica-validity-factor",
            "0",
            // Replicas stay in their shard: no replica migration.
            "--cluster-migration-barrier",
            "100000",
            // A replica's first sync starts at once, not after 5 s.
            "--repl-diskless-sync-delay",
            "0",
        ];
        args.extend(self.args.iter().map(String::as_str));
        let per_shard = self.replicas + 1;
        let mut nodes = Vec::with_capacity(self.masters * per_shard);
        for _ in 0..self.masters * per_shard {
            nodes.push(RedisServer::launch(Mode::ClusterNode, None, &args, false)?);
        }
        let mut cluster = RedisCluster {
            shards: (0..self.masters)
                .map(|shard| (shard * per_shard..(shard + 1) * per_shard).collect())
                .collect(),
            masters: (0..self.masters).map(|shard| shard * per_shard).collect(),
            ids: Vec::new(),
            nodes,
            node_timeout: self.node_timeout,
        };
        cluster.form()?;
        Ok(cluster)
    }
}

/// A Redis Cluster of real `redis-server` processes on loopback: `M`
/// shards, each a master with `R` replicas, built with raw cluster commands
/// (no `redis-cli`).
///
/// Shard `s` starts out as master node `s * (R + 1)` with the following `R`
/// nodes as its replicas, and owns an equal share of the slots, in order
/// (shard 0 has slot 0). Failovers change which node of a shard is its
/// master, never which shard a node is in.
///
/// Nodes run with a short `cluster-node-timeout` ([`DEFAULT_NODE_TIMEOUT`]),
/// `cluster-replica-validity-factor 0` (a replica always takes over),
/// no replica migration, and the persistence defaults of [`RedisServer`].
/// Every wait is bounded; a cluster that does not settle panics with each
/// node's view of the cluster and the end of its log. Dropping it kills
/// every node.
///
/// ```no_run
/// use leasehold_testkit::{key_slot, RedisCluster};
///
/// let mut cluster = RedisCluster::start(3, 1);
/// let seeds = cluster.urls(); // hand these to the cluster client under test
/// # let _ = seeds;
/// let slot = key_slot("job");
/// let owner = cluster.master_for_slot(slot);
/// assert_eq!(owner.command(&["SET", "job", "1"]).unwrap(), "OK");
///
/// let to = (cluster.shard_of_slot(slot) + 1) % 3;
/// let migration = cluster.begin_migration(slot, to);
/// migration.move_keys(); // clients now get ASK for the moved keys
/// migration.finish(); // and MOVED from here on
///
/// cluster.failover(0); // graceful: shard 0's replica becomes its master
/// let killed = cluster.kill_master(1); // SIGKILL; the replica takes over
/// cluster.restart_node(killed); // it rejoins as a replica
/// ```
pub struct RedisCluster {
    /// Node indices of each shard's members.
    shards: Vec<Vec<usize>>,
    /// Node index of each shard's master, as last seen.
    masters: Vec<usize>,
    /// Node ids by node index; a node keeps its id across restarts.
    ids: Vec<String>,
    node_timeout: Duration,
    nodes: Vec<RedisServer>,
}

impl fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ports: Vec<u16> = self.nodes.iter().map(RedisServer::port).collect();
        f.debug_struct("RedisCluster")
            .field("ports", &ports)
            .field("shards", &self.shards)
            .field("masters", &self.masters)
            .field("node_timeout", &self.node_timeout)
            .finish()
    }
}

impl RedisCluster {
    /// Starts `masters` shards with `replicas` replicas each and waits until
    /// every node reports `cluster_state:ok`, all nodes agree on the slot
    /// map and the roles, and every replica is in sync with its master.
    ///
    /// Panics with every node's log if it cannot; see
    /// [`builder`](Self::builder) for settings.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        Self::builder(masters, replicas).start()
    }

    /// Settings for a cluster of `masters` shards with `replicas` replicas
    /// each.
    pub fn builder(masters: usize, replicas: usize) -> ClusterBuilder {
        ClusterBuilder {
            masters,
            replicas,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            args: Vec::new(),
        }
    }

    /// Slots, meetings and replication: the freshly started nodes become one
    /// cluster.
    fn form(&mut self) -> Result<(), StartError> {
        for node in &self.nodes {
            let id = node.command(&["CLUSTER", "MYID"])?;
            self.ids.push(id);
        }
        let shard_count = self.shards.len();
        for (shard, &master) in self.masters.iter().enumerate() {
            let node = &self.nodes[master];
            let first = slot_bound(shard, shard_count);
            let last = slot_bound(shard + 1, shard_count) - 1;
            // Distinct epochs spare the nodes from resolving a collision.
            let epoch = (shard + 1).to_string();
            self.expect_ok(master, &["CLUSTER", "SET-CONFIG-EPOCH", &epoch])?;
            node.claim_slots(first, last)?;
        }
        let explicit_bus = server_version()?.has_cluster_port();
        for (i, node) in self.nodes.iter().enumerate().skip(1) {
            let port = node.port().to_string();
            let bus = node.cluster_bus_port().unwrap_or(0).to_string();
            let mut meet = vec!["CLUSTER", "MEET", "127.0.0.1", &port];
            if explicit_bus {
                meet.push(&bus);
            }
            self.expect_ok(0, &meet)
                .map_err(|e| StartError::other(format!("node {i}: {e}")))?;
        }
        self.wait_for("every node to know every other", SETTLE_TIMEOUT, |c| {
            c.all_known()
        })?;
        for (shard, members) in self.shards.iter().enumerate() {
            let master_id = &self.ids[self.masters[shard]];
            for &replica in members.iter().skip(1) {
                self.expect_ok(replica, &["CLUSTER", "REPLICATE", master_id])?;
            }
        }
        self.settle(SETTLE_TIMEOUT)
    }

    /// Sends a command to node `i` that must answer `OK`.
    fn expect_ok(&self, i: usize, args: &[&str]) -> Result<(), StartError> {
        let reply = self.nodes[i].command(args)?;
        if reply == "OK" {
            Ok(())
        } else {
            Err(self.failure(&format!(
                "node {i} (127.0.0.1:{}) answered {} with {reply}",
                self.nodes[i].port(),
                args.join(" ")
            )))
        }
    }

    /// Polls `check` until it returns `Ok`, or fails after `timeout` with
    /// the last reason it gave and every node's state.
    fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&Self) -> Result<T, String>,
    ) -> Result<T, StartError> {
        let deadline = Instant::now() + timeout;
        loop {
            let reason = match check(self) {
                Ok(value) => return Ok(value),
                Err(reason) => reason,
            };
            if Instant::now() >= deadline {
                return Err(self.failure(&format!(
                    "waited {} s for {what}; last: {reason}",
                    timeout.as_secs()
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Waits until the cluster has settled (see [`start`](Self::start)) and
    /// notes which node is each shard's master.
    fn settle(&mut self, timeout: Duration) -> Result<(), StartError> {
        let view = self.wait_for("the cluster to settle", timeout, Self::settled)?;
        self.note_masters(&view);
        Ok(())
    }

    /// Notes each shard's master from `view`: its working master, the one
    /// that owns slots if a master that lost them all is still around.
    fn note_masters(&mut self, view: &View) {
        for shard in 0..self.shards.len() {
            let masters: Vec<(usize, &Entry)> = self.shards[shard]
                .iter()
                .filter_map(|&i| Some((i, view.entry(&self.ids[i])?)))
                .filter(|(_, e)| e.is_working() && e.is_master())
                .collect();
            let master = masters
                .iter()
                .find(|(_, e)| !e.slots.is_empty())
                .or(masters.first());
            if let Some(&(master, _)) = master {
                self.masters[shard] = master;
            }
        }
    }

    /// Indices of the nodes that are meant to be running.
    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].pid().is_some())
    }

    /// Ok once every live node lists every node, none still in handshake.
    fn all_known(&self) -> Result<(), String> {
        for i in self.live() {
            let view = self.view_of(i)?;
            for (j, id) in self.ids.iter().enumerate() {
                match view.entry(id) {
                    None => return Err(format!("node {i} does not know node {j} yet")),
                    Some(entry) if entry.has_flag("handshake") || entry.has_flag("noaddr") => {
                        return Err(format!("node {i} is still meeting node {j}"))
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    /// The agreed view, once every live node reports `cluster_state:ok`,
    /// sees the live nodes as working and the others as failed, all agree
    /// on roles and slots, and every live replica is in sync.
    fn settled(&self) -> Result<View, String> {
        let live: Vec<usize> = self.live().collect();
        let dead: Vec<usize> = (0..self.nodes.len())
            .filter(|i| !live.contains(i))
            .collect();
        let mut agreed: Option<(usize, View)> = None;
        for &i in &live {
            let node = &self.nodes[i];
            let replies = node
                .pipeline(&[
                    &["CLUSTER", "INFO"],
                    &["CLUSTER", "NODES"],
                    &["INFO", "replication"],
                ])
                .map_err(|e| e.to_string())?;
            let [info, nodes, replication] = replies.as_slice() else {
                return Err(format!("node {i} sent too few replies"));
            };
            if info_field(&info.render(), "cluster_state") != Some("ok") {
                return Err(format!("node {i} does not report cluster_state:ok"));
            }
            let view = View::parse(&nodes.render());
            for &j in &live {
                match view.entry(&self.ids[j]) {
                    Some(entry) if entry.is_working() => {}
                    Some(entry) => {
                        return Err(format!(
                            "node {i} sees live node {j} as {}",
                            entry.flags.join(",")
                        ))
                    }
                    None => return Err(format!("node {i} does not know live node {j}")),
                }
            }
            for &j in &dead {
                if view
                    .entry(&self.ids[j])
                    .is_some_and(|e| !e.has_flag("fail"))
                {
                    return Err(format!("node {i} has not failed stopped node {j} yet"));
                }
            }
            let working = view.working().count();
            if working != live.len() {
                return Err(format!(
                    "node {i} sees {working} working nodes; {} are running",
                    live.len()
                ));
            }
            if view.myself().is_some_and(|me| !me.is_master()) {
                let replication = replication.render();
                if info_field(&replication, "master_link_status") != Some("up")
                    || info_field(&replication, "master_sync_in_progress") != Some("0")
                {
                    return Err(format!("replica node {i} is not in sync with its master"));
                }
            }
            match &agreed {
                None => agreed = Some((i, view)),
                Some((first, seen)) => {
                    if seen.layout() != view.layout() {
                        return Err(format!("nodes {first} and {i} disagree on roles or slots"));
                    }
                }
            }
        }
        agreed
            .map(|(_, view)| view)
            .ok_or_else(|| "no node is running".to_owned())
    }

    /// Node `i`'s `CLUSTER NODES`.
    fn view_of(&self, i: usize) -> Result<View, String> {
        self.nodes[i]
            .command(&["CLUSTER", "NODES"])
            .map(|text| View::parse(&text))
            .map_err(|e| e.to_string())
    }

    /// The view of the first live node, masters first.
    fn current_view(&self) -> View {
        let mut candidates: Vec<usize> = self.masters.clone();
        candidates.extend(self.live());
        candidates
            .into_iter()
            .filter(|&i| self.nodes[i].pid().is_some())
            .find_map(|i| self.view_of(i).ok())
            .unwrap_or_else(|| panic!("{}", self.failure("no node answers CLUSTER NODES")))
    }

    /// An error about the cluster, with every node's view and log tail.
    fn failure(&self, what: &str) -> StartError {
        let mut message = format!("redis cluster: {what}");
        for (i, node) in self.nodes.iter().enumerate() {
            let shard = self.shard_of_node(i);
            let state = match node.pid() {
                Some(pid) => format!("pid {pid}"),
                None => "stopped".to_owned(),
            };
            message.push_str(&format!(
                "\n=== node {i} (shard {shard}) 127.0.0.1:{} {state}, dir {} ===",
                node.port(),
                node.dir().display()
            ));
            if node.pid().is_some() {
                match node.command(&["CLUSTER", "NODES"]) {
                    Ok(nodes) => {
                        message.push_str("\n--- CLUSTER NODES ---\n");
                        message.push_str(nodes.trim_end());
                    }
                    Err(e) => message.push_str(&format!("\n(no CLUSTER NODES: {e})")),
                }
            }
            message.push_str(&format!("\n--- last {LOG_LINES} log lines ---\n"));
            message.push_str(&node.log_tail(LOG_LINES));
        }
        StartError::other(message)
    }

    fn shard_of_node(&self, i: usize) -> usize {
        self.shards
            .iter()
            .position(|members| members.contains(&i))
            .unwrap_or(usize::MAX)
    }

    fn check_shard(&self, shard: usize) {
        let shards = self.shards.len();
        assert!(
            shard < shards,
            "shard {shard} out of range: the cluster has {shards}"
        );
    }

    /// The `redis://` URLs of every running node, current masters first:
    /// seeds for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        let mut order: Vec<usize> = self.masters.clone();
        order.extend(self.live().filter(|i| !self.masters.contains(i)));
        order
            .into_iter()
            .filter(|&i| self.nodes[i].pid().is_some())
            .map(|i| self.nodes[i].url())
            .collect()
    }

    /// Number of shards (masters).
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The master of `shard`, as of the last start, failover, kill, restart
    /// or [`wait_ok`](Self::wait_ok). Panics if there is no such shard.
    pub fn master(&self, shard: usize) -> &RedisServer {
        self.check_shard(shard);
        &self.nodes[self.masters[shard]]
    }

    /// The node index of `shard`'s master, for [`node_mut`](Self::node_mut)
    /// and [`restart_node`](Self::restart_node).
    pub fn master_index(&self, shard: usize) -> usize {
        self.check_shard(shard);
        self.masters[shard]
    }

    /// Every shard's master, in shard order.
    pub fn masters(&self) -> Vec<&RedisServer> {
        self.masters.iter().map(|&i| &self.nodes[i]).collect()
    }

    /// The other nodes of `shard` (running or not), in node order.
    pub fn replicas_of(&self, shard: usize) -> Vec<&RedisServer> {
        self.check_shard(shard);
        let master = self.masters[shard];
        self.shards[shard]
            .iter()
            .filter(|&&i| i != master)
            .map(|&i| &self.nodes[i])
            .collect()
    }

    /// Every node that is not a shard's master (running or not), in node
    /// order.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        (0..self.nodes.len())
            .filter(|i| !self.masters.contains(i))
            .map(|i| &self.nodes[i])
            .collect()
    }

    /// Every node, in node order (shard by shard).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `i`, e.g. to stop it or put a proxy in front of it. A node
    /// stopped here is taken for dead by the waits that follow: they wait
    /// for the cluster to fail it. Panics if `i` is out of range.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        let len = self.nodes.len();
        self.nodes
            .get_mut(i)
            .unwrap_or_else(|| panic!("node {i} out of range: the cluster has {len}"))
    }

    /// The `cluster-node-timeout` the nodes run with.
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// The shard whose master owns `slot` now.
    pub fn shard_of_slot(&self, slot: u16) -> usize {
        let port = self.addr_of_slot(slot).port();
        let node = self
            .nodes
            .iter()
            .position(|n| n.port() == port)
            .unwrap_or_else(|| {
                panic!("{}", self.failure(&format!("slot {slot} is on a stranger")))
            });
        self.shard_of_node(node)
    }

    /// The address of the master that owns `slot`, as a running node
    /// reports it now. Panics if no node answers or the slot has no owner.
    pub fn addr_of_slot(&self, slot: u16) -> SocketAddr {
        let view = self.current_view();
        match view.owner(slot) {
            Some(entry) => SocketAddr::from(([127, 0, 0, 1], entry.port)),
            None => panic!("{}", self.failure(&format!("no master owns slot {slot}"))),
        }
    }

    /// The master node that owns `slot` (see [`addr_of_slot`](Self::addr_of_slot)).
    pub fn master_for_slot(&self, slot: u16) -> &RedisServer {
        let port = self.addr_of_slot(slot).port();
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("{}", self.failure(&format!("slot {slot} is on a stranger"))))
    }

    /// The master node that owns `key`'s slot.
    pub fn master_for_key(&self, key: &str) -> &RedisServer {
        self.master_for_slot(key_slot(key))
    }

    /// Waits until the cluster has settled: every running node reports
    /// `cluster_state:ok`, sees every other running node as working and the
    /// stopped ones as failed, all agree on roles and slots, and every
    /// replica is in sync. Notes each shard's master.
    ///
    /// Panics with every node's view and log after 30 s.
    pub fn wait_ok(&mut self) {
        if let Err(e) = self.settle(SETTLE_TIMEOUT) {
            panic!("{e}");
        }
    }

    /// Moves `slot`, and every key in it, to `to_shard`'s master, and waits
    /// until every node agrees on its new owner. See
    /// [`begin_migration`](Self::begin_migration) for a migration in steps.
    pub fn migrate_slot(&self, slot: u16, to_shard: usize) {
        self.begin_migration(slot, to_shard).finish();
    }

    /// Starts moving `slot` to `to_shard`'s master: the target is set
    /// `IMPORTING`, the owner `MIGRATING`. Keys move only when the returned
    /// [`SlotMigration`] is told to, so a test can see `ASK` redirections
    /// for keys already moved while the rest are still served by the
    /// owner.
    ///
    /// Panics if the slot is out of range, already on that shard, or a node
    /// refuses.
    pub fn begin_migration(&self, slot: u16, to_shard: usize) -> SlotMigration<'_> {
        assert!(slot < SLOTS, "slot {slot} out of range: there are {SLOTS}");
        self.check_shard(to_shard);
        let source_port = self.addr_of_slot(slot).port();
        let source = self
            .nodes
            .iter()
            .position(|n| n.port() == source_port)
            .unwrap_or_else(|| {
                panic!("{}", self.failure(&format!("slot {slot} is on a stranger")))
            });
        let target = self.masters[to_shard];
        assert_ne!(
            source, target,
            "slot {slot} is already on shard {to_shard}'s master"
        );
        let slot_text = slot.to_string();
        let steps: [(usize, [&str; 5]); 2] = [
            (
                target,
                [
                    "CLUSTER",
                    "SETSLOT",
                    &slot_text,
                    "IMPORTING",
                    &self.ids[source],
                ],
            ),
            (
                source,
                [
                    "CLUSTER",
                    "SETSLOT",
                    &slot_text,
                    "MIGRATING",
                    &self.ids[target],
                ],
            ),
        ];
        for (node, args) in steps {
            if let Err(e) = self.expect_ok(node, &args) {
                panic!("{e}");
            }
        }
        SlotMigration {
            cluster: self,
            slot,
            source,
            target,
        }
    }

    /// A graceful failover of `shard`: `CLUSTER FAILOVER` on one of its
    /// running replicas, which takes over once it has caught up; the old
    /// master becomes its replica. Waits until every node agrees and the
    /// cluster has settled, and returns the new master's node index.
    ///
    /// Panics if the shard has no running replica or the failover does not
    /// happen within 30 s.
    pub fn failover(&mut self, shard: usize) -> usize {
        self.check_shard(shard);
        let old = self.masters[shard];
        let candidate = self.running_replica(shard);
        let candidate_id = self.ids[candidate].clone();
        let mut asked: Option<Instant> = None;
        let result = self.wait_for(
            &format!("node {candidate} to take over shard {shard}"),
            SETTLE_TIMEOUT,
            |cluster| {
                if asked.is_none_or(|at| at.elapsed() >= FAILOVER_RETRY) {
                    let is_master = cluster
                        .view_of(candidate)?
                        .myself()
                        .is_some_and(Entry::is_master);
                    if !is_master {
                        cluster
                            .expect_ok(candidate, &["CLUSTER", "FAILOVER"])
                            .map_err(|e| e.to_string())?;
                        asked = Some(Instant::now());
                    }
                }
                let view = cluster.settled()?;
                match view.entry(&candidate_id) {
                    Some(entry) if entry.is_master() => Ok(view),
                    _ => Err(format!("node {candidate} is not master yet")),
                }
            },
        );
        match result {
            Ok(view) => self.note_masters(&view),
            Err(e) => panic!("{e}"),
        }
        assert_ne!(self.masters[shard], old, "shard {shard} kept its master");
        self.masters[shard]
    }

    /// Kills `shard`'s master with SIGKILL and waits until one of its
    /// replicas has taken over and the cluster has settled (every running
    /// node agreeing that the killed one has failed). Returns the killed
    /// node's index: [`restart_node`](Self::restart_node) brings it back as
    /// a replica.
    ///
    /// Panics if the cluster has fewer than 3 shards (the masters left
    /// would not be a majority to vote), the shard has no running
    /// replica, or no replica takes over within 30 s plus four node
    /// timeouts.
    pub fn kill_master(&mut self, shard: usize) -> usize {
        self.check_shard(shard);
        let shards = self.shards.len();
        assert!(
            shards >= 3,
            "a killed master is replaced only with the votes of a majority of all masters, \
             which {shards} shard(s) cannot give with one down: start at least 3"
        );
        // Fails before the kill if there is no one to take over.
        self.running_replica(shard);
        let old = self.masters[shard];
        self.nodes[old].stop();
        let members = self.shards[shard].clone();
        let result = self.wait_for(
            &format!("a replica to take over shard {shard}"),
            SETTLE_TIMEOUT + 4 * self.node_timeout,
            |cluster| {
                let view = cluster.settled()?;
                let promoted = members.iter().any(|&i| {
                    i != old
                        && view
                            .entry(&cluster.ids[i])
                            .is_some_and(|e| e.is_working() && e.is_master())
                });
                if promoted {
                    Ok(view)
                } else {
                    Err(format!("no replica of shard {shard} is master yet"))
                }
            },
        );
        match result {
            Ok(view) => self.note_masters(&view),
            Err(e) => panic!("{e}"),
        }
        old
    }

    /// Restarts node `i` (same port, directory and node id; killing it
    /// first if it runs) and waits until the cluster has settled with it. A
    /// master that was failed over while it was down rejoins as a replica.
    ///
    /// Panics like [`wait_ok`](Self::wait_ok), or if `i` is out of range.
    pub fn restart_node(&mut self, i: usize) {
        self.node_mut(i).restart();
        let timeout = SETTLE_TIMEOUT + 4 * self.node_timeout;
        if let Err(e) = self.settle(timeout) {
            panic!("{e}");
        }
    }

    /// A running node of `shard` other than its master.
    fn running_replica(&self, shard: usize) -> usize {
        let master = self.masters[shard];
        self.shards[shard]
            .iter()
            .copied()
            .find(|&i| i != master && self.nodes[i].pid().is_some())
            .unwrap_or_else(|| panic!("shard {shard} has no running replica to take over"))
    }
}

/// The first slot of shard `shard` out of `shards` (and one past the last
/// slot of the shard before it).
fn slot_bound(shard: usize, shards: usize) -> u16 {
    let bound = shard * usize::from(SLOTS) / shards;
    u16::try_from(bound).unwrap_or(SLOTS)
}

/// A slot being moved between masters, from
/// [`RedisCluster::begin_migration`].
///
/// While it lives, the source answers `ASK` for keys of the slot it no
/// longer has and serves the rest; the target serves moved keys to clients
/// that send `ASKING` first. [`finish`](Self::finish) moves what is left and
/// hands the slot over; a migration dropped unfinished leaves the slot in
/// that state.
#[must_use = "the slot stays half-migrated until finish() is called"]
pub struct SlotMigration<'a> {
    cluster: &'a RedisCluster,
    slot: u16,
    source: usize,
    target: usize,
}

impl fmt::Debug for SlotMigration<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotMigration")
            .field("slot", &self.slot)
            .field("source_port", &self.source().port())
            .field("target_port", &self.target().port())
            .finish()
    }
}

impl SlotMigration<'_> {
    /// The slot being moved.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The master the slot is moving from (its owner until
    /// [`finish`](Self::finish)).
    pub fn source(&self) -> &RedisServer {
        &self.cluster.nodes[self.source]
    }

    /// The master the slot is moving to.
    pub fn target(&self) -> &RedisServer {
        &self.cluster.nodes[self.target]
    }

    /// Moves one key of the slot to the target (`MIGRATE`). Returns false
    /// if the source does not have it (never written, or already moved).
    ///
    /// Panics if the key is of another slot or `MIGRATE` fails.
    pub fn move_key(&self, key: &str) -> bool {
        let slot = key_slot(key);
        assert_eq!(
            slot, self.slot,
            "key {key:?} is in slot {slot}, not in the migrating slot {}",
            self.slot
        );
        match self.migrate(&[key]).as_str() {
            "OK" => true,
            "NOKEY" => false,
            other => panic!(
                "{}",
                self.failure(&format!("MIGRATE {key} answered {other}"))
            ),
        }
    }

    /// Moves every key the source still has in the slot to the target, in
    /// batches (`CLUSTER GETKEYSINSLOT`, then `MIGRATE … KEYS`). Returns how
    /// many keys it moved.
    ///
    /// Panics if a command fails.
    pub fn move_keys(&self) -> usize {
        let slot = self.slot.to_string();
        let batch = MIGRATE_BATCH.to_string();
        let mut moved = 0;
        loop {
            let keys = match self
                .source()
                .value(&["CLUSTER", "GETKEYSINSLOT", &slot, &batch])
            {
                Ok(reply) => reply,
                Err(e) => panic!("{}", self.failure(&e.to_string())),
            };
            let keys: Vec<&str> = keys.items().iter().filter_map(|k| k.text()).collect();
            if keys.is_empty() {
                return moved;
            }
            match self.migrate(&keys).as_str() {
                "OK" => moved += keys.len(),
                other => panic!(
                    "{}",
                    self.failure(&format!("MIGRATE of {} keys answered {other}", keys.len()))
                ),
            }
        }
    }

    /// Moves the remaining keys, assigns the slot to the target on the
    /// target, the source and every other master (`CLUSTER SETSLOT … NODE`),
    /// and waits until every node agrees on its new owner.
    ///
    /// Panics if a node refuses or the nodes do not agree within 30 s.
    pub fn finish(self) {
        self.move_keys();
        let cluster = self.cluster;
        let slot = self.slot.to_string();
        let target_id = &cluster.ids[self.target];
        let mut order = vec![self.target, self.source];
        order.extend(
            cluster.masters.iter().copied().filter(|&i| {
                i != self.target && i != self.source && cluster.nodes[i].pid().is_some()
            }),
        );
        for node in order {
            if let Err(e) =
                cluster.expect_ok(node, &["CLUSTER", "SETSLOT", &slot, "NODE", target_id])
            {
                panic!("{e}");
            }
        }
        let target_port = self.target().port();
        let result = cluster.wait_for(
            &format!("every node to agree that slot {slot} moved"),
            SETTLE_TIMEOUT,
            |cluster| {
                let view = cluster.settled()?;
                match view.owner(self.slot) {
                    Some(entry) if entry.port == target_port => Ok(()),
                    _ => Err(format!("slot {slot} is not on 127.0.0.1:{target_port} yet")),
                }
            },
        );
        if let Err(e) = result {
            panic!("{e}");
        }
    }

    /// `MIGRATE` of `keys` from the source to the target; the reply as text.
    fn migrate(&self, keys: &[&str]) -> String {
        let port = self.target().port().to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &port];
        match keys {
            [key] => args.extend([*key, "0", MIGRATE_TIMEOUT_MS]),
            _ => {
                args.extend(["", "0", MIGRATE_TIMEOUT_MS, "KEYS"]);
                args.extend(keys);
            }
        }
        self.source()
            .command(&args)
            .unwrap_or_else(|e| panic!("{}", self.failure(&e.to_string())))
    }

    fn failure(&self, what: &str) -> StartError {
        self.cluster.failure(&format!(
            "migrating slot {} from node {} to node {}: {what}",
            self.slot, self.source, self.target
        ))
    }
}

#[cfg(test)]
mod tests;
mod view;
