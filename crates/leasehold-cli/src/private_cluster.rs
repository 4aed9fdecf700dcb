//! A Redis Cluster of the demo's own: masters without replicas, each a
//! [`PrivateRedis`] in cluster mode (a free port and a free bus port, a
//! temporary directory, a process group of its own, dead with the demo),
//! joined with raw cluster commands. Dropping it, or the future that starts
//! it, kills every node started so far.

use std::time::Duration;

use leasehold::redis;
use tokio::time::Instant;

use crate::private_redis::{PrivateRedis, CLUSTER_BUS_OFFSET};

/// Hash slots of a Redis Cluster.
const SLOTS: usize = 16_384;
/// Longest wait for the nodes to meet and agree.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);
/// Longest wait for one command to a node.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub(crate) struct PrivateCluster {
    nodes: Vec<PrivateRedis>,
}

impl PrivateCluster {
    /// Starts `masters` nodes, shares the slots out among them in order,
    /// and waits until every node reports `cluster_state:ok` and knows
    /// every other.
    pub(crate) async fn start(masters: usize) -> anyhow::Result<Self> {
        let mut cluster = PrivateCluster {
            nodes: Vec::with_capacity(masters),
        };
        let mut taken = Vec::with_capacity(2 * masters);
        for _ in 0..masters {
            let node = PrivateRedis::start_cluster_node(&taken).await?;
            taken.extend([node.port(), node.port().saturating_add(CLUSTER_BUS_OFFSET)]);
            cluster.nodes.push(node);
        }
        cluster.form().await?;
        Ok(cluster)
    }

    /// Every node, in slot order (the first holds slot 0).
    pub(crate) fn nodes(&self) -> &[PrivateRedis] {
        &self.nodes
    }

    /// The nodes' URLs, as seeds for a client.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(PrivateRedis::url).collect()
    }

    async fn form(&self) -> anyhow::Result<()> {
        let mut conns = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let client = redis::Client::open(node.url())?;
            let conn = within(node, "connect", client.get_multiplexed_async_connection()).await?;
            conns.push(conn);
        }
        let count = self.nodes.len();
        for (i, (node, conn)) in self.nodes.iter().zip(&mut conns).enumerate() {
            // Distinct epochs: the nodes need not settle a collision.
            let mut epoch = redis::cmd("CLUSTER");
            epoch.arg("SET-CONFIG-EPOCH").arg(i + 1);
            expect_ok(node, conn, "CLUSTER SET-CONFIG-EPOCH", &epoch).await?;
            let mut slots = redis::cmd("CLUSTER");
            slots.arg("ADDSLOTS");
            for slot in i * SLOTS / count..(i + 1) * SLOTS / count {
                slots.arg(slot);
            }
            expect_ok(node, conn, "CLUSTER ADDSLOTS", &slots).await?;
        }
        if let Some((first, others)) = self.nodes.split_first() {
            for other in others {
                // The bus port is the node's port plus 10000, as MEET assumes.
                let mut meet = redis::cmd("CLUSTER");
                meet.arg("MEET").arg("127.0.0.1").arg(other.port());
                expect_ok(first, &mut conns[0], "CLUSTER MEET", &meet).await?;
            }
        }
        let deadline = Instant::now() + FORM_TIMEOUT;
        loop {
            let mut waiting = None;
            for (node, conn) in self.nodes.iter().zip(&mut conns) {
                if let Some(why) = unsettled(node, conn, count).await? {
                    waiting = Some(why);
                    break;
                }
            }
            let Some(why) = waiting else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "the demo's Redis Cluster did not form within {} s: {why}",
                    FORM_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Why `node` is not ready yet, or `None` once it reports
/// `cluster_state:ok`, knows `count` nodes and every slot, and is meeting
/// none of them still.
async fn unsettled(
    node: &PrivateRedis,
    conn: &mut redis::aio::MultiplexedConnection,
    count: usize,
) -> anyhow::Result<Option<String>> {
    let info: String = within(
        node,
        "CLUSTER INFO",
        redis::cmd("CLUSTER").arg("INFO").query_async(conn),
    )
    .await?;
    let nodes: String = within(
        node,
        "CLUSTER NODES",
        redis::cmd("CLUSTER").arg("NODES").query_async(conn),
    )
    .await?;
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_owned)
    };
    let known = field("cluster_known_nodes").and_then(|n| n.parse::<usize>().ok());
    let assigned = field("cluster_slots_ok").and_then(|n| n.parse::<usize>().ok());
    let why = if field("cluster_state").as_deref() != Some("ok") {
        Some("cluster_state is not ok")
    } else if known != Some(count) || assigned != Some(SLOTS) {
        Some("it does not know every node and slot")
    } else if nodes.contains("handshake") || nodes.contains("noaddr") {
        Some("it is still meeting a node")
    } else {
        None
    };
    Ok(why.map(|why| format!("{} says {why}", node.addr())))
}

async fn expect_ok(
    node: &PrivateRedis,
    conn: &mut redis::aio::MultiplexedConnection,
    what: &str,
    command: &redis::Cmd,
) -> anyhow::Result<()> {
    let reply: String = within(node, what, command.query_async(conn)).await?;
    if reply == "OK" {
        Ok(())
    } else {
        anyhow::bail!("{} answered {what} with {reply}", node.addr())
    }
}

/// `request` to `node`, bounded by the command timeout.
async fn within<T>(
    node: &PrivateRedis,
    what: &str,
    request: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(COMMAND_TIMEOUT, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(anyhow::anyhow!(
            "{} of the demo's cluster refused {what}: {e}",
            node.addr()
        )),
        Err(_) => Err(anyhow::anyhow!(
            "{} of the demo's cluster did not answer {what} within {} s",
            node.addr(),
            COMMAND_TIMEOUT.as_secs()
        )),
    }
}
