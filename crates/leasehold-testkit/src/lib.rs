//! Test support for leasehold: starts real `redis-server` processes on free
//! loopback ports, each with its own temporary directory, and tears them down
//! (kill, reap, remove the directory) when dropped.
//!
//! - [`RedisServer`]: one server; [`RedisServer::start_cluster_node`] starts
//!   one in cluster mode that holds every slot alone, for cluster clients.
//! - [`Masters`]: independent servers, as Redlock uses.
//! - [`RedisCluster`]: a Redis Cluster of masters with replicas, with slot
//!   migrations (in steps, to see `ASK`), graceful failovers and killed
//!   masters; [`key_slot`] computes a key's slot.
//! - [`Sentinels`]: a master, its replicas and the sentinels that watch
//!   them, with failovers by `SENTINEL FAILOVER` and by a killed master.
//! - [`FaultProxy`]: a TCP proxy in front of a server that injects latency,
//!   partitions, connection resets and half-open connections on demand.
//! - [`unreachable_url`]: an address where nothing listens.
//!
//! Servers are checked and driven with raw RESP over TCP
//! ([`RedisServer::command`]), and the proxy runs on plain threads, so this
//! crate depends on neither the `redis` client crate nor an async runtime.
//!
//! The `redis-server` binary is taken from `$LEASEHOLD_REDIS_SERVER` if set,
//! otherwise from `PATH`. Valkey's `valkey-server` and Redis from 6.2 on
//! work too; [`server_version`] tells which one runs, and
//! [`StartError::is_tls_unsupported`] tells a binary built without TLS.
//!
//! ```
//! use std::time::Duration;
//! use leasehold_testkit::{unreachable_url, FaultProxy, Masters, RedisServer};
//!
//! let mut server = RedisServer::start();
//! let url = server.url(); // hand this to the client under test
//! assert!(url.starts_with("redis://127.0.0.1:"));
//! assert_eq!(server.command(&["SET", "k", "v"]).unwrap(), "OK");
//! server.stop(); // simulate a crash
//! server.restart(); // same port, same directory
//!
//! let proxy = FaultProxy::start(server.addr());
//! let flaky_url = proxy.url(); // the client connects through the proxy
//! # let _ = flaky_url;
//! proxy.set_reply_latency(Duration::from_millis(20)); // slow replies
//! proxy.blackhole(true); // a partition: bytes are held until it heals
//! proxy.freeze_existing(); // open connections go silent, as if the peer died
//! proxy.reset(); // every connection is aborted with a TCP RST
//! proxy.heal(); // no latency, no partition
//!
//! let node = RedisServer::start_cluster_node(); // owns all 16384 slots
//! assert_eq!(node.command(&["CLUSTER", "KEYSLOT", "k"]).unwrap(), "7629");
//!
//! let masters = Masters::start(3); // independent masters for Redlock
//! assert_eq!(masters.urls().len(), 3);
//! let down = unreachable_url(); // nothing listens there
//! # let _ = down;
//! ```
//!
//! Clusters and sentinels take a few seconds to start and to fail over:
//!
//! ```no_run
//! use leasehold_testkit::{key_slot, server_version, RedisCluster, Sentinels};
//!
//! let mut cluster = RedisCluster::start(3, 1); // 3 masters, 1 replica each
//! let seeds = cluster.urls(); // hand these to the cluster client
//! # let _ = seeds;
//! let slot = key_slot("job");
//! assert_eq!(cluster.master_for_slot(slot).command(&["SET", "job", "1"]).unwrap(), "OK");
//! let to = (cluster.shard_of_slot(slot) + 1) % cluster.shards();
//! let migration = cluster.begin_migration(slot, to);
//! migration.move_keys(); // the old owner now answers ASK for "job"
//! migration.finish(); // and MOVED from here on
//! cluster.failover(0); // graceful: shard 0's replica takes over
//! let killed = cluster.kill_master(1); // SIGKILL; shard 1's replica takes over
//! cluster.restart_node(killed); // back as a replica
//!
//! let mut group = Sentinels::start(1, 3); // a master, 1 replica, 3 sentinels
//! let url = group.url(); // redis+sentinel://127.0.0.1:…,…/mymaster
//! # let _ = url;
//! group.failover(); // SENTINEL FAILOVER
//! group.kill_master(); // the sentinels promote the replica
//!
//! let version = server_version().unwrap(); // e.g. Redis 7.0.15, Valkey 9.1.2
//! # let _ = version;
//! ```
//!
//! Servers and proxies kept in `static`s are never dropped, so their
//! processes and threads outlive the test binary; own them from the test (or
//! fixture) that uses them.

#![warn(missing_docs)]

mod cluster;
mod error;
mod pin;
mod port;
mod proxy;
mod resp;
mod sentinel;
mod server;
mod version;

pub use cluster::{
    key_slot, ClusterBuilder, RedisCluster, SlotMigration, DEFAULT_NODE_TIMEOUT, SLOTS,
};
pub use error::StartError;
pub use pin::{cpus_allowed, pin_current_thread_to, pin_servers_to};
pub use port::{free_port, unreachable_url};
pub use proxy::FaultProxy;
pub use sentinel::{
    Sentinels, SentinelsBuilder, DEFAULT_DOWN_AFTER, DEFAULT_FAILOVER_TIMEOUT, DEFAULT_MASTER_NAME,
};
pub use server::{redis_server_path, Masters, RedisServer};
pub use version::{server_version, Product, ServerVersion};
