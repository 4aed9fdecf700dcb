//! The same locks for synchronous code: every primitive and its guard, with
//! calls that block the calling thread instead of returning futures.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! fn main() -> leasehold::Result<()> {
//!     let client = leasehold::blocking::Client::open("redis://127.0.0.1:6379")?;
//!     let mutex = client.mutex("reports:nightly")?;
//!     let guard = mutex.acquire_timeout(Duration::from_secs(30))?;
//!     for batch in 0..10 {
//!         if guard.is_lost() {
//!             eprintln!("lease lost: stop writing");
//!             break;
//!         }
//!         write_batch(batch, guard.fence());
//!     }
//!     guard.release()?;
//!     Ok(())
//! }
//! # fn write_batch(_batch: u32, _fence: u64) {}
//! ```
//!
//! # How calls block
//!
//! A blocking [`Client`] wraps an async [`crate::Client`] and runs its calls
//! on a tokio runtime of its own: one current-thread runtime on a thread
//! named `leasehold-blocking`, shared by every blocking client of the
//! process. The first blocking client starts it; it stops once the last
//! blocking client, lock and guard are dropped, after it has finished the
//! releases they left in the background (as [`Client::flush`] does), and
//! that last drop waits for it. The runtime's thread drives the
//! connections, the timers and the watchdog, so a lease is renewed while
//! the calling thread is busy with the work (unlike a lock taken on a
//! current-thread async runtime that the work blocks).
//!
//! Every call that talks to Redis blocks the calling thread until it is
//! done: `acquire` as long as the lock is taken (it cannot be cancelled:
//! use `acquire_timeout` to bound a wait), the others for a round trip or,
//! when Redis does not answer, the same bounded retries as the async call.
//! The calls answer with the same [`Error`](crate::Error) and kinds as the
//! async ones, and renew, fence and lose leases the same way.
//!
//! # Owners follow the thread
//!
//! The owner of a [`ReentrantMutex`] or [`RwLock`] acquisition is the
//! calling thread on that handle, as Redisson's is: threads that share a
//! handle (cloned, or by reference) exclude each other, and a thread that
//! acquires again through the handle while it holds the lock nests a level
//! (reentrant) or shares its hold (read-write) instead of waiting for
//! itself. `with_owner` names one owner for every thread that uses the
//! handle, or for several processes.
//!
//! # Work under a lock, any kind, and elections
//!
//! Every blocking lock has `with_lock` and `with_lock_timeout`: the closure
//! runs under the lock and its output comes back only if the lease held to
//! the release (a thread cannot be cut short: the closure runs to its end,
//! so check [`LeaseGuard::is_lost`] between its steps). [`Lock`] is the one
//! object-safe trait over every kind. [`Election`] campaigns, reads and
//! follows the leader of an election ([`LeaderWatch`]).
//!
//! # A lost lease
//!
//! [`LeaseGuard::is_lost`] is a flag to check between steps of the work;
//! [`LeaseGuard::wait_lost`] blocks until the lease is lost, for a thread
//! that watches while another works, and [`LeaseGuard::lost_timeout`]
//! waits at most a given time.
//!
//! # Inside an async runtime
//!
//! A blocking call made on a thread that is inside a tokio runtime (a task,
//! `block_on`, `spawn_blocking`, or a thread that entered a runtime's
//! context) returns an [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
//! error at once instead of blocking, and sends nothing: blocking there
//! stalls the runtime, and on a current-thread runtime would wait forever
//! for a lock held by one of its own tasks. Use the async API in async
//! code, or make the call from a thread of your own (`std::thread::spawn`).
//! The calls that do not block (`fence`, `is_lost`, a drop, …) work
//! anywhere; a guard dropped there is released in the background as
//! usual, and the last drop of a client there does not wait for the
//! runtime to finish.

mod election;
mod faces;
mod guard;
mod runtime;

use std::sync::Arc;

pub use election::{Election, LeaderWatch, Leadership};
pub use faces::{FairMutex, Lock, Mutex, ReadLock, ReentrantMutex, RwLock, Semaphore, WriteLock};
pub use guard::{LeaseGuard, MutexGuard};

use crate::client::ClientBuilder;
use crate::error::Result;
use crate::redlock::RedlockBuilder;
use runtime::{Runtime, Shared};

/// A blocking client of one Redis deployment, from which blocking locks
/// are made: the blocking face of [`crate::Client`].
///
/// Cloning is cheap and shares the connections and the watchdog. Make one
/// client per process (or per Redis), not one per lock.
///
/// ```no_run
/// # fn demo() -> leasehold::Result<()> {
/// use std::time::Duration;
///
/// let client = leasehold::blocking::Client::from_builder(
///     leasehold::Client::builder("redis://127.0.0.1:6379").lease(Duration::from_secs(10)),
/// )?;
/// let guard = client.mutex("reports:nightly")?.acquire()?;
/// println!("fence {}", guard.fence());
/// guard.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Client {
    shared: Arc<Shared>,
}

impl Client {
    /// A blocking client with default settings for `url`, as
    /// [`crate::Client::open`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the
    /// URL cannot be parsed; [`ErrorKind::System`](crate::ErrorKind::System)
    /// when the blocking runtime cannot be started (no thread or no I/O
    /// driver from the operating system).
    pub fn open(url: &str) -> Result<Client> {
        Client::from_builder(crate::Client::builder(url))
    }

    /// A blocking client for the Redis named by the environment, as
    /// [`crate::Client::from_env`].
    ///
    /// # Errors
    ///
    /// As [`open`](Client::open).
    pub fn from_env() -> Result<Client> {
        Client::from_builder(ClientBuilder::from_env())
    }

    /// A blocking client with the settings of `builder` (made by
    /// [`crate::Client::builder`]). Nothing is sent to Redis until the
    /// first lock operation.
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::build`]; [`ErrorKind::System`](crate::ErrorKind::System)
    /// when the blocking runtime cannot be started.
    pub fn from_builder(builder: ClientBuilder) -> Result<Client> {
        let client = builder.build()?;
        let runtime = Runtime::shared()?;
        Ok(Client {
            shared: Arc::new(Shared { client, runtime }),
        })
    }

    /// The mutex called `name`: one holder at a time, fenced.
    ///
    /// # Errors
    ///
    /// As [`crate::Client::mutex`].
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        Ok(Mutex::new(self.shared.client.mutex(name)?, self.share()))
    }

    /// The fair mutex called `name`: one holder at a time, in the order the
    /// waiters arrived.
    ///
    /// # Errors
    ///
    /// As [`crate::Client::fair_mutex`].
    pub fn fair_mutex(&self, name: &str) -> Result<FairMutex> {
        Ok(FairMutex::new(
            self.shared.client.fair_mutex(name)?,
            self.share(),
        ))
    }

    /// The reentrant mutex called `name`; its owner is the calling thread
    /// (see [`ReentrantMutex`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Client::reentrant_mutex`].
    pub fn reentrant_mutex(&self, name: &str) -> Result<ReentrantMutex> {
        Ok(ReentrantMutex::new(
            self.shared.client.reentrant_mutex(name)?,
            self.share(),
        ))
    }

    /// The read-write lock called `name`; its owner is the calling thread
    /// (see [`RwLock`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Client::rw_lock`].
    pub fn rw_lock(&self, name: &str) -> Result<RwLock> {
        Ok(RwLock::new(self.shared.client.rw_lock(name)?, self.share()))
    }

    /// The semaphore called `name` with `permits` permits.
    ///
    /// # Errors
    ///
    /// As [`crate::Client::semaphore`].
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        Ok(Semaphore::new(
            self.shared.client.semaphore(name, permits)?,
            self.share(),
        ))
    }

    /// The leader election called `name`, as [`crate::Client::election`].
    ///
    /// # Errors
    ///
    /// As [`crate::Client::election`].
    pub fn election(&self, name: &str) -> Result<Election> {
        Ok(Election::new(
            self.shared.client.election(name)?,
            self.share(),
        ))
    }

    /// Blocks until the releases this client runs in the background (for
    /// guards dropped without `release`) are done, at most four command
    /// timeouts. The runtime does this by itself before it stops; call it
    /// where a process may end without dropping its clients (before
    /// `std::process::exit`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn flush(&self) -> Result<()> {
        self.shared.block_on(self.shared.client.flush())
    }

    /// The key prefix of this client.
    #[must_use]
    pub fn prefix(&self) -> &str {
        self.shared.client.prefix()
    }

    /// As [`crate::Client::script_libraries`].
    ///
    /// # Errors
    ///
    /// As [`crate::Client::script_libraries`].
    pub fn script_libraries(&self) -> Result<Vec<crate::ScriptLibrary>> {
        self.shared
            .block_on(self.shared.client.script_libraries())?
    }

    /// As [`crate::Client::remove_unused_script_libraries`].
    ///
    /// # Errors
    ///
    /// As [`crate::Client::remove_unused_script_libraries`].
    pub fn remove_unused_script_libraries(&self, force: bool) -> Result<Vec<crate::ScriptLibrary>> {
        self.shared
            .block_on(self.shared.client.remove_unused_script_libraries(force))?
    }

    fn share(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }
}

/// The blocking face of a [`crate::Redlock`]: N independent masters that
/// hold locks together, whose locks are blocking [`Mutex`]es. The
/// masters are asked, renewed and released on the blocking runtime, as a
/// [`Client`]'s server is.
///
/// ```no_run
/// # fn demo() -> leasehold::Result<()> {
/// let redlock = leasehold::blocking::Redlock::open(
///     "redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379",
/// )?;
/// let guard = redlock.mutex("ledger:eu")?.acquire()?;
/// // write, passing guard.fence() along
/// guard.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Redlock {
    redlock: crate::Redlock,
    client: Client,
}

impl Redlock {
    /// A blocking Redlock over the masters in `urls`, separated by commas,
    /// with the default settings, as [`crate::Redlock::open`].
    ///
    /// # Errors
    ///
    /// As [`crate::RedlockBuilder::build`];
    /// [`ErrorKind::System`](crate::ErrorKind::System) when the blocking
    /// runtime cannot be started.
    pub fn open(urls: &str) -> Result<Redlock> {
        Redlock::from_redlock(crate::Redlock::open(urls)?)
    }

    /// A blocking Redlock over the masters in `$LEASEHOLD_REDLOCK`, as
    /// [`crate::Redlock::from_env`].
    ///
    /// # Errors
    ///
    /// As [`open`](Redlock::open).
    pub fn from_env() -> Result<Redlock> {
        Redlock::from_redlock(crate::Redlock::from_env()?)
    }

    /// A blocking Redlock with the settings of `builder` (made by
    /// [`crate::Redlock::builder`]). Nothing is sent until a lock is used.
    ///
    /// # Errors
    ///
    /// As [`open`](Redlock::open).
    pub fn from_builder(builder: RedlockBuilder) -> Result<Redlock> {
        Redlock::from_redlock(builder.build()?)
    }

    fn from_redlock(redlock: crate::Redlock) -> Result<Redlock> {
        let runtime = Runtime::shared()?;
        let client = Client {
            shared: Arc::new(Shared {
                client: redlock.client().clone(),
                runtime,
            }),
        };
        Ok(Redlock { redlock, client })
    }

    /// The mutex called `name` over these masters, as
    /// [`crate::Redlock::mutex`].
    ///
    /// # Errors
    ///
    /// As [`crate::Redlock::mutex`].
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        self.client.mutex(name)
    }

    /// The blocking client whose locks these masters hold: it makes
    /// mutexes alone (see [`crate::Redlock::client`]).
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The masters, as `host:port`, in the order given.
    #[must_use]
    pub fn addresses(&self) -> Vec<&str> {
        self.redlock.addresses()
    }

    /// How many masters must hold a lock for it to be held.
    #[must_use]
    pub fn quorum(&self) -> usize {
        self.redlock.quorum()
    }

    /// Blocks until what this Redlock runs in the background is done, as
    /// [`Client::flush`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn flush(&self) -> Result<()> {
        self.client.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_send_sync<T: Send + Sync>() {}

    #[test]
    fn bounds() {
        is_send_sync::<Client>();
        is_send_sync::<Redlock>();
        is_send_sync::<Mutex>();
        is_send_sync::<FairMutex>();
        is_send_sync::<ReentrantMutex>();
        is_send_sync::<RwLock>();
        is_send_sync::<ReadLock>();
        is_send_sync::<WriteLock>();
        is_send_sync::<Semaphore>();
        is_send_sync::<LeaseGuard>();
        is_send_sync::<Election>();
        is_send_sync::<Leadership>();
        is_send_sync::<LeaderWatch>();
    }
}
