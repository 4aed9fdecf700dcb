//! Test support for leasehold: starts real `redis-server` processes on free
//! loopback ports, each with its own temporary directory, and tears them down
//! (kill, reap, remove the directory) when dropped.
//!
//! - [`RedisServer`]: one server; [`RedisServer::start_cluster_node`] starts
//!   one in cluster mode that holds every slot alone, for cluster clients.
//! - [`Masters`]: independent servers, as Redlock uses.
//! - [`FaultProxy`]: a TCP proxy in front of a server that injects latency,
//!   partitions, connection resets and half-open connections on demand.
//! - [`unreachable_url`]: an address where nothing listens.
//!
//! Servers are checked and driven with raw RESP over TCP
//! ([`RedisServer::command`]), and the proxy runs on plain threads, so this
//! crate depends on neither the `redis` client crate nor an async runtime.
//!
//! The `redis-server` binary is taken from `$LEASEHOLD_REDIS_SERVER` if set,
//! otherwise from `PATH`.
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
//! Servers and proxies kept in `static`s are never dropped, so their
//! processes and threads outlive the test binary; own them from the test (or
//! fixture) that uses them.

#![warn(missing_docs)]

mod error;
mod port;
mod proxy;
mod resp;
mod server;

pub use error::StartError;
pub use port::{free_port, unreachable_url};
pub use proxy::FaultProxy;
pub use server::{redis_server_path, Masters, RedisServer};
