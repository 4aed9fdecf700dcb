//! One fixture for both topologies: a behaviour test written once as
//! `async fn name(servers: Servers)` runs on one server and on a Redis
//! Cluster of three masters, instantiated by [`on_both_topologies!`].
//!
//! Raw commands go to the server that holds their key's slot
//! ([`Servers::command`], [`Servers::cmd`]), so a test reads and writes the
//! lock's keys the same way on either; commands about a server (`SCRIPT
//! FLUSH`, `TIME`) go to [`Servers::server_for`] a key.

use std::time::Duration;

use leasehold::redis::FromRedisValue;
use leasehold::{Client, MutexGuard};
use leasehold_testkit::{RedisCluster, RedisServer};

/// Where a test's locks live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One redis-server.
    Single,
    /// A Redis Cluster of three masters without replicas.
    Cluster,
}

/// The servers of one test, of either topology; stopped when dropped.
#[derive(Debug)]
pub(crate) enum Servers {
    Single(RedisServer),
    Cluster(RedisCluster),
}

impl Servers {
    /// Starts one server, or a cluster of three masters (a few seconds).
    pub(crate) fn start(topology: Topology) -> Servers {
        match topology {
            Topology::Single => Servers::Single(RedisServer::start()),
            Topology::Cluster => Servers::Cluster(RedisCluster::start(3, 0)),
        }
    }

    pub(crate) fn topology(&self) -> Topology {
        match self {
            Servers::Single(_) => Topology::Single,
            Servers::Cluster(_) => Topology::Cluster,
        }
    }

    /// Every node's URL, masters first: a client's seeds.
    pub(crate) fn seeds(&self) -> Vec<String> {
        match self {
            Servers::Single(server) => vec![server.url()],
            Servers::Cluster(cluster) => cluster.urls(),
        }
    }

    /// What a client is opened with: the server's URL, or every node's
    /// separated by commas.
    pub(crate) fn url(&self) -> String {
        self.seeds().join(",")
    }

    /// The server that holds `key`'s slot (on one server, that server).
    pub(crate) fn server_for(&self, key: &str) -> &RedisServer {
        match self {
            Servers::Single(server) => server,
            Servers::Cluster(cluster) => cluster.master_for_key(key),
        }
    }

    /// `127.0.0.1:PORT` of the server that holds `key`'s slot, as
    /// [`LockInfo::server`](leasehold::LockInfo::server) names it.
    pub(crate) fn addr_for(&self, key: &str) -> String {
        format!("127.0.0.1:{}", self.server_for(key).port())
    }

    /// Every master: the one server, or each shard's.
    pub(crate) fn masters(&self) -> Vec<&RedisServer> {
        match self {
            Servers::Single(server) => vec![server],
            Servers::Cluster(cluster) => cluster.masters(),
        }
    }

    /// Runs a raw command on the server that holds `key`'s slot; its reply
    /// as text (see [`RedisServer::command`]).
    pub(crate) fn command(&self, key: &str, args: &[&str]) -> String {
        self.server_for(key)
            .command(args)
            .unwrap_or_else(|e| panic!("{} on the server of {key}: {e}", args.join(" ")))
    }

    /// Runs a raw command on the server that holds the slot of its key,
    /// `args[1]` (as in `["PTTL", "leasehold:{job}"]`), its reply read as
    /// `T`. A command without a key goes to `cmd(servers.server_for(key), ..)`.
    pub(crate) async fn cmd<T: FromRedisValue>(&self, args: &[&str]) -> T {
        let key = args.get(1).expect("a command with a key");
        super::cmd(self.server_for(key), args).await
    }

    /// Every key matching `pattern` on every master, with the master that
    /// holds it.
    pub(crate) async fn keys(&self, pattern: &str) -> Vec<(String, &RedisServer)> {
        let mut found = Vec::new();
        for master in self.masters() {
            let keys: Vec<String> = super::cmd(master, &["KEYS", pattern]).await;
            found.extend(keys.into_iter().map(|key| (key, master)));
        }
        found
    }

    pub(crate) fn client(&self) -> Client {
        Client::open(&self.url()).unwrap()
    }

    /// A client whose locks use `lease` and, if `watchdog`, renew it.
    pub(crate) fn client_with(&self, lease: Duration, watchdog: bool) -> Client {
        Client::builder(self.url())
            .lease(lease)
            .watchdog(watchdog)
            .build()
            .unwrap()
    }

    /// Takes the lock "job" with a client of its own.
    pub(crate) async fn hold(&self, lease: Duration, watchdog: bool) -> MutexGuard {
        self.client_with(lease, watchdog)
            .mutex("job")
            .unwrap()
            .acquire()
            .await
            .unwrap()
    }
}

/// For each `name` (an `async fn name(servers: Servers)` in the calling
/// file), a module `name` with two tests, `single` and `cluster`, that
/// start their servers and run it. `name: multi_thread` runs it on two
/// worker threads, as `#[tokio::test(flavor = "multi_thread")]`.
///
/// ```ignore
/// common::on_both_topologies!(try_acquire_is_refused_while_held, waiters_wake: multi_thread);
/// ```
#[allow(unused_macros)]
macro_rules! on_both_topologies {
    ($($name:ident $(: $flavor:ident)?),* $(,)?) => {
        $( $crate::common::on_both_topologies!(@flavor $name [$($flavor)?]); )*
    };
    (@flavor $name:ident []) => {
        $crate::common::on_both_topologies!(@tests $name [tokio::test]);
    };
    (@flavor $name:ident [multi_thread]) => {
        $crate::common::on_both_topologies!(
            @tests $name [tokio::test(flavor = "multi_thread", worker_threads = 2)]
        );
    };
    (@tests $name:ident [$($test:tt)*]) => {
        mod $name {
            use $crate::common::{Servers, Topology};

            #[$($test)*]
            async fn single() {
                super::$name(Servers::start(Topology::Single)).await;
            }

            #[$($test)*]
            async fn cluster() {
                super::$name(Servers::start(Topology::Cluster)).await;
            }
        }
    };
}
pub(crate) use on_both_topologies;
