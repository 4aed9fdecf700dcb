//! Test support for leasehold: starts real `redis-server` processes on free
//! loopback ports, each with its own temporary directory, and tears them down
//! (kill, reap, remove the directory) when dropped.
//!
//! Liveness is checked with a raw RESP `PING` over TCP, so this crate does not
//! depend on the `redis` client crate.
//!
//! The `redis-server` binary is taken from `$LEASEHOLD_REDIS_SERVER` if set,
//! otherwise from `PATH`.
//!
//! ```
//! use leasehold_testkit::{unreachable_url, Masters, RedisServer};
//!
//! let mut server = RedisServer::start();
//! let url = server.url(); // hand this to the client under test
//! assert!(url.starts_with("redis://127.0.0.1:"));
//! server.stop(); // simulate a crash
//! server.restart(); // same port, same directory
//!
//! let masters = Masters::start(3); // independent masters for Redlock
//! assert_eq!(masters.urls().len(), 3);
//! let down = unreachable_url(); // nothing listens there
//! # let _ = down;
//! ```
//!
//! Servers kept in `static`s are never dropped, so their processes outlive the
//! test binary; own servers from the test (or fixture) that uses them.

#![warn(missing_docs)]

mod error;
mod port;
mod server;

pub use error::StartError;
pub use port::{free_port, unreachable_url};
pub use server::{redis_server_path, Masters, RedisServer};
