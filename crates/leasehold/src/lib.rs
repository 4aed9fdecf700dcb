//! Distributed locks on Redis: fenced leases that tell you when they are lost.
//!
//! leasehold lets processes on many machines agree, through one Redis, that
//! only one of them works on a resource at a time: rebuilds a cache entry,
//! runs the nightly job, writes a record.
//!
//! # Quick start
//!
//! ```no_run
//! # async fn demo() -> leasehold::Result<()> {
//! let client = leasehold::Client::open("redis://127.0.0.1:6379")?;
//! let mutex = client.mutex("reports:nightly")?;
//! let guard = mutex.acquire().await?;
//! tokio::select! {
//!     () = guard.lost() => eprintln!("lease lost: stop writing"),
//!     () = do_the_work(guard.fence()) => {}
//! }
//! guard.release().await?;
//! # Ok(()) }
//! # async fn do_the_work(_fence: u64) {}
//! ```
//!
//! # Which lock to use
//!
//! | you need | use |
//! |---|---|
//! | one holder at a time | [`Mutex`] |
//!
//! Read-write locks, fair (FIFO) locks, semaphores and Redlock over several
//! independent Redis servers are built on the same lease engine and follow.
//!
//! # The safety model
//!
//! A lock over a network is a **lease**: it ends when its time runs out,
//! whether or not its holder is done. A holder can stall (a GC pause, a
//! swapped-out VM, a slow disk) past its lease while another process takes
//! the lock. So there are two kinds of use:
//!
//! - **Efficiency**: the lock saves duplicate work (two processes rebuilding
//!   the same cache entry). A rare overlap costs a little work. The lease and
//!   the watchdog are enough.
//! - **Correctness**: an overlap corrupts data. Then the resource itself must
//!   check: every acquisition carries a **fence** ([`MutexGuard::fence`]), a
//!   number larger than every fence before it. Send it with every read and
//!   write, and have the resource refuse a fence smaller than the largest it
//!   has seen. A stalled holder's late write then fails instead of
//!   overwriting its successor's.
//!
//! Fences are built as a hybrid logical clock (the larger of the stored
//! counter + 1 and the server's time in microseconds), so they keep growing
//! even if Redis loses the counter in a restart without persistence.
//!
//! # Leases, the watchdog, and losing a lock
//!
//! By default a held lease is renewed at a third of its length by one
//! watchdog task per [`Client`], which renews every lease due at once in one
//! round trip. The guard keeps a local deadline on the monotonic clock
//! (`sent_at + lease − drift`) that moves only when a renewal succeeds. When
//! a renewal finds the lock gone, or the deadline passes without one (Redis
//! out of reach), the lease is lost: [`MutexGuard::lost`] resolves and
//! [`MutexGuard::is_lost`] turns true for good.
//!
//! # Waiting
//!
//! A waiter does not poll. It tries once; if the lock is busy it subscribes
//! to the lock's release channel and sleeps until a release is published, the
//! holder's lease can have expired, or its own wait runs out, then tries
//! again. Tasks of one client waiting for one lock queue locally, so only
//! one of them talks to Redis.
//!
//! # Cancellation
//!
//! Every async fn documents its cancel safety. Dropping an acquire never
//! leaves a lock held by nobody: if the request may have reached Redis, its
//! token is released in the background. Dropping a guard releases it in the
//! background. A runtime that shuts down cancels its tasks, background
//! releases included: call [`Client::flush`] before it does (at the end of
//! `main`), or those locks stay held until their leases run out.
//!
//! # Keys
//!
//! A lock called `name` lives at `<prefix>:{name}`, with its fence counter at
//! `<prefix>:{name}:fence` (never expires) and its release channel at
//! `<prefix>:{name}:ch`. Names are non-empty UTF-8 of at most 1024 bytes
//! without `{` or `}`.
//!
//! An ACL user needs access to both the keys and the channels, for example
//! `~leasehold:* &leasehold:*`. Redis 7 gives a new user no channels; without
//! them locks still work, but waiters hear no releases and wake only when the
//! holder's lease can have run out.
#![cfg_attr(not(test), forbid(clippy::panic))]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod client;
mod engine;
mod error;
mod fair_mutex;
mod keys;
mod mutex;

pub use client::{
    Client, ClientBuilder, DEFAULT_COMMAND_TIMEOUT, DEFAULT_FENCE_RETENTION, DEFAULT_LEASE,
    DEFAULT_PREFIX, DEFAULT_URL,
};
pub use error::{Error, ErrorKind, Result};
pub use fair_mutex::FairMutex;
pub use keys::{MAX_LEASE, MAX_NAME_LEN, MAX_PREFIX_LEN, MAX_TOKEN_LEN, MAX_WAIT, MIN_LEASE};
pub use mutex::{DetachedLease, LockInfo, Mutex, MutexGuard};
/// The Redis client crate leasehold is built on, so that users name one version.
pub use redis;

#[cfg(test)]
mod tests {
    use super::*;

    fn is_send_sync<T: Send + Sync>() {}

    #[test]
    fn bounds() {
        is_send_sync::<Client>();
        is_send_sync::<Mutex>();
        is_send_sync::<FairMutex>();
        is_send_sync::<MutexGuard>();
        is_send_sync::<Error>();
    }
}
