//! One Redis deployment as the engine sees it: the command connection, the
//! notifier, the watchdog, the local wait queues and the background
//! releases. Every primitive of a client works through one `Node`; Redlock
//! will hold several.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::conn::{self, Connection, ServerInfo};
use crate::engine::held::Holds;
use crate::engine::notify::Notifier;
use crate::engine::queue::LocalQueues;
use crate::engine::release::Background;
use crate::engine::watchdog::Watchdog;
use crate::error::Result;

/// How a node behaves, fixed when it is made.
#[derive(Debug, Clone)]
pub(crate) struct NodeConfig {
    pub(crate) command_timeout: Duration,
    /// No lock is granted by a server that has been up for less than this.
    pub(crate) restart_grace: Option<Duration>,
    /// How long a fence counter outlives the last acquisition.
    pub(crate) fence_retention: Duration,
    /// "<pid> <host> <client name>", recorded with every lease and waiter.
    pub(crate) identity: String,
}

#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) connection: Connection,
    pub(crate) config: NodeConfig,
    /// Names this client's notification channels: a release publishes to
    /// the one waiter it wakes, on its client's channel alone.
    pub(crate) id: String,
    pub(crate) notifier: Notifier,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) queues: LocalQueues,
    /// The reentrant holds this client's guards share.
    pub(crate) holds: Holds,
    pub(crate) background: Background,
}

impl Node {
    pub(crate) fn new(redis: redis::Client, config: NodeConfig) -> Result<Arc<Node>> {
        let address = redis.get_connection_info().addr().to_string();
        let notifier = Notifier::new(redis.clone(), config.command_timeout);
        Ok(Arc::new(Node {
            connection: Connection::new(redis, address, config.command_timeout),
            id: crate::engine::new_token()?,
            config,
            notifier,
            watchdog: Arc::new(Watchdog::default()),
            queues: LocalQueues::default(),
            holds: Holds::default(),
            background: Background::default(),
        }))
    }

    pub(crate) fn address(&self) -> &str {
        &self.connection.address
    }

    /// A healthy connection, for a request that must arm something first.
    pub(crate) async fn connected(&self) -> Result<conn::Checkout> {
        self.connection.get().await
    }

    /// Runs one script on `conn`; NOSCRIPT is answered by loading it and
    /// sending it again.
    pub(crate) async fn eval_on(
        &self,
        conn: conn::Checkout,
        operation: &str,
        script: &redis::Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<redis::Value> {
        self.connection
            .run_on(conn, operation, |mut conn, _| async move {
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

    /// Runs one script with a healthy connection.
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

    /// How long from now no lock may be granted by the server behind
    /// `server`, under the restart grace.
    pub(crate) fn restart_grace_left(&self, server: &ServerInfo) -> Option<Duration> {
        let grace = self.config.restart_grace?;
        let ends = server.started + grace;
        let left = ends.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }
}
