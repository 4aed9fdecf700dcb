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
//! | one holder at a time, cheapest under light contention | [`Mutex`] |
//! | one holder at a time, first come first served, even waits | [`FairMutex`] |
//! | one owner at a time that may take the lock again (nested calls) | [`ReentrantMutex`] |
//! | the same, owners served first come first served (Redisson's fair lock) | [`ReentrantMutex::fair`] |
//! | many readers or one writer, writers not starved | [`RwLock`] |
//! | at most N holders at once (a pool of slots, a rate of parallel jobs) | [`Semaphore`] |
//! | a job started on many hosts runs once | any, with a hold-at-least (see [Run-once jobs](#run-once-jobs)) |
//! | several locks at once, all or none, without deadlock (a transfer between two accounts) | [`MultiLock`] over any of them |
//!
//! Every primitive is fenced, renewed by the same watchdog, reports a lost
//! lease the same way, and hands out the same [`LeaseGuard`] (named
//! [`MutexGuard`] for the mutexes). A `Mutex` lets a free lock go to whoever
//! asks first, so a holder that releases and asks again often gets it straight
//! back, until a waiter has waited a few milliseconds and is handed the lock at
//! the next release; a `FairMutex` always hands the lock to the first waiter in
//! line inside the release itself, and nobody can barge in. A `ReentrantMutex`
//! belongs to the task that takes it (tasks that share a handle exclude each
//! other; an explicit [`Owner`] shares a hold across tasks), counts its levels,
//! and never makes a reentry wait; made [`fair`](ReentrantMutex::fair), it
//! serves new holds in the order the owners arrived. An `RwLock` gives every reader a lease of
//! its own (a dead reader frees only its share), queues readers behind a
//! waiting writer, allows write→read downgrade and refuses read→write upgrade
//! at once. A `Semaphore` stores its permit count with it, gives every
//! acquisition a lease and a fence, and serves waiters in order so a request
//! for many permits is not starved.
//!
//! ```no_run
//! # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
//! // Reentrant: nested calls by one owner do not wait for themselves.
//! let config = client.reentrant_mutex("config")?;
//! let outer = config.acquire().await?;
//! let inner = config.acquire().await?;
//! inner.release().await?;
//! outer.release().await?;
//!
//! // Read-write: readers together, writers alone.
//! let catalog = client.rw_lock("catalog")?;
//! let view = catalog.read().acquire().await?; // view.fence(): past the last write's
//! view.release().await?;
//! let edit = catalog.write().acquire().await?;
//! edit.release().await?;
//!
//! // Semaphore: at most 4 exports at once.
//! let exports = client.semaphore("exports", 4)?;
//! let permit = exports.acquire().await?;
//! permit.release().await?;
//!
//! // Fair: served in the order the waiters lined up, across processes.
//! let turns = client.fair_mutex("turns")?;
//! let turn = turns.acquire().await?;
//! turn.release().await?;
//! # Ok(()) }
//! ```
//!
//! A name is one kind of lock: asking for a name as another kind than the
//! one that holds it is refused at once with [`ErrorKind::Conflict`]
//! (waiting would never end), and nothing is overwritten.
//!
//! # Synchronous code
//!
//! [`blocking`] has the same locks for code without an async runtime, as
//! reqwest and redis-rs have: `leasehold::blocking::Client::open(url)?`
//! makes them, their calls block the calling thread, and the owner of a
//! reentrant or read-write hold is the calling thread.
//!
//! ```no_run
//! # fn demo() -> leasehold::Result<()> {
//! let client = leasehold::blocking::Client::open("redis://127.0.0.1:6379")?;
//! let guard = client.mutex("reports:nightly")?.acquire()?;
//! // work, passing guard.fence() along and checking guard.is_lost()
//! guard.release()?;
//! # Ok(()) }
//! ```
//!
//! # Who holds a lock
//!
//! Every lease records who took it: the process id, the host, the client's
//! name ([`ClientBuilder::name`], the program's name by default) and the
//! time Redis granted it. `inspect()` lists every holder ([`LockInfo::holders`]:
//! the mutex's holder, each reader or writer, each permit lease), and a wait
//! that runs out names the holder and the lease it has left.
//!
//! To learn when leases others hold end, without waiting for the lock,
//! watch it: `watch()` on every primitive gives a [`LockWatch`], whose
//! [`next`](LockWatch::next) reports each lease's end ([`LockEvent`]:
//! released, force-released, expired, or lost by the server; its fence
//! and holder; the next holder if one took it at once). A release is heard
//! at once, an expiry a few milliseconds after the lease ends, without
//! keyspace notifications; a lock nobody watches costs nothing more.
//!
//! ```no_run
//! # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
//! let mut watch = client.mutex("reports:nightly")?.watch()?;
//! loop {
//!     let ended = watch.next().await?;
//!     println!("lease {} ended: {:?}", ended.fence, ended.ended);
//! }
//! # }
//! ```
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
//! even if Redis loses the counter in a restart without persistence, and the
//! counter may expire after a retention with no acquisition (a week by
//! default, [`ClientBuilder::fence_retention`]) instead of piling up one key
//! per lock name ever used. The one assumption: the Redis host's clock does
//! not step back by more than the retention.
//!
//! What a single Redis can lose: a restart without persistence forgets every
//! lock at once, and a waiter may then take a lock whose old holder learns
//! of the loss only at its next renewal. [`ClientBuilder::restart_grace`]
//! closes that window from the client: no lock is granted by a server that
//! has been up for less than the grace, so every holder from before the
//! restart has passed its local deadline first. A failover to a replica that
//! missed the write loses locks the same way: so on a master with replicas
//! every grant waits, by default, until the replicas the master has
//! connected acknowledge it ([`ReplicaAck`], [`ClientBuilder::replica_ack`]),
//! and a grant they do not acknowledge in time is undone. Eviction (run
//! Redis with `maxmemory-policy noeviction`) loses locks too; fences are what
//! keeps a resource safe through all of them.
//!
//! # Leases, the watchdog, and losing a lock
//!
//! By default a held lease is renewed at a third of its length by one
//! watchdog task per [`Client`]. Leases wait for it in a queue ordered by
//! renewal time, and every lease due at once is renewed in one round trip
//! (one script per 256 leases, and per hash slot on a cluster-mode server),
//! so holding twenty thousand leases costs an acquire or release nothing
//! extra. The guard keeps a local deadline on the monotonic clock
//! (`sent_at + lease − drift`) that moves only when a renewal succeeds. When
//! a renewal finds the lock gone, or the deadline passes without one (Redis
//! out of reach), the lease is lost: [`MutexGuard::lost`] resolves and
//! [`MutexGuard::is_lost`] turns true for good; [`MutexGuard::loss_reason`]
//! says why ([`LossReason`]). A release waits for a
//! renewal in flight, so their answers are never applied out of order.
//!
//! # Run-once jobs
//!
//! A job that cron starts on every host should run once, but a lock that is
//! released when the job ends lets a host whose cron fires a little later
//! (0.5 s, say) find it free and run the job again. With
//! `with_hold_at_least` ([`Mutex::with_hold_at_least`], and the same on
//! [`FairMutex`], [`ReentrantMutex`], both faces of an [`RwLock`] and
//! [`Semaphore`]) a release before the hold has passed since the
//! acquisition keeps the lock until then instead, and reports success; the
//! late host finds it busy. On the command line: `leasehold run NAME
//! --no-wait --hold-at-least 10m -- CMD`.
//!
//! ```no_run
//! # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
//! use std::time::Duration;
//!
//! let nightly = client
//!     .mutex("reports:nightly")?
//!     .with_hold_at_least(Duration::from_secs(10 * 60))?;
//! // On every host at 03:00: one of them runs the report.
//! if let Some(guard) = nightly.try_acquire().await? {
//!     write_report(guard.fence()).await;
//!     guard.release().await?; // keeps the lock until 10 minutes have passed
//! }
//! # Ok(()) }
//! # async fn write_report(_fence: u64) {}
//! ```
//!
//! The hold is measured on the holder's monotonic clock from the moment the
//! grant reached it, which is after Redis granted it, and the release sends
//! Redis only the time left as a relative expiry, so no clock is compared
//! across machines: clock differences cannot shorten the hold. Choose a hold
//! longer than the spread of the hosts' start times and shorter than the
//! job's period.
//!
//! The `run_once` example starts the job in five processes, one of them
//! after the others have finished, and the job runs once.
//!
//! # A cap on renewal
//!
//! The watchdog renews a lease for as long as its guard lives, which a holder
//! stuck in an endless loop would do forever. `with_max_hold`
//! ([`Mutex::with_max_hold`], and the same on every other primitive) caps
//! it: no renewal reaches past the cap after the acquisition, the lease ends
//! there, and [`MutexGuard::lost`] resolves with a loss that names the cap
//! (`leasehold run --max-hold DUR` on the command line). An election caps a
//! leader's term the same way ([`Election::with_max_term`]).
//!
//! # Work under a lock in one call
//!
//! [`Mutex::with_lock`] (and `with_lock` on every other primitive: the
//! reentrant mutex, the read and write faces, the semaphore) waits for the lock,
//! runs the work with the guard, releases, and hands back the work's output
//! only if the lease held from the acquisition to the release. The work is
//! raced against [`MutexGuard::lost`]: a lost lease drops it at its next
//! await point, and the call returns an error of kind
//! [`ErrorKind::NotHeld`], the kind a release reports for a lost lease.
//! [`Mutex::run_locked`] does the same for a future that needs no guard,
//! and [`Mutex::with_lock_timeout`] bounds the wait.
//!
//! ```no_run
//! # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
//! let ledger = client.mutex("ledger:eu")?;
//! let written = ledger
//!     .with_lock(async |guard| write_entries(guard.fence()).await)
//!     .await?; // Err(NotHeld) if the lease was lost: nothing is returned
//! # let _ = written;
//! # Ok(()) }
//! # async fn write_entries(_fence: u64) -> usize { 0 }
//! ```
//!
//! Dropping the call's future drops the work where it stands and releases
//! the lock in the background, as dropping a guard does.
//!
//! # Leader election
//!
//! [`Client::election`] makes an [`Election`]: candidates
//! [`campaign`](Election::campaign) with a value (an address, a host name)
//! and wait in line; the winner gets a [`Leadership`], a lease with a fence
//! and a [`lost`](Leadership::lost) signal like a guard's. Anyone can ask
//! who leads ([`Election::leader`]: the value and fence, or `None`) or
//! follow the changes ([`Election::observe`], a `tokio::sync::watch`
//! receiver).
//!
//! ```no_run
//! # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
//! use std::time::Duration;
//!
//! let election = client
//!     .election("scheduler")?
//!     .with_lease(Duration::from_secs(5))?; // a dead leader is replaced within 5 s
//! let leadership = election.campaign("10.0.0.7:8080").await?;
//! tokio::select! {
//!     () = leadership.lost() => eprintln!("no longer the leader"),
//!     () = lead(leadership.fence()) => {}
//! }
//! leadership.resign().await?;
//! # Ok(()) }
//! # async fn lead(_fence: u64) {}
//! ```
//!
//! An election is a [`FairMutex`], so leadership passes in the order the
//! candidates lined up, and a leader that resigns and campaigns again goes
//! to the back. The winner records its value beside the lock
//! (`<prefix>:{name}:leader`, "fence token value", with a TTL) and
//! announces it on `<prefix>:{name}:leader:ch`; a resignation is announced
//! too. The record is trusted only while the lock is held by the token that
//! wrote it, so a leader that died is never reported once its lease has run
//! out. A leader that dies announces nothing: observers also read again
//! when its lease can have run out, and at least every 5 s. The
//! `leader_election` example kills a leader with SIGKILL and watches the
//! standby take over; `leasehold leader NAME` prints the leader from a shell.
//!
//! # Observability
//!
//! Every lock operation runs in a [`tracing`](https://docs.rs/tracing) span
//! named after it (`acquire`, `release`, …; target `leasehold`, level
//! `DEBUG`) with the fields `name`, `primitive`, `outcome`, `waited` and
//! `fence`, and a lost lease is logged at `WARN` with its reason. Counters
//! (acquisitions, timeouts, losses by reason, renewals and renewal
//! failures), histograms (wait and hold time) and gauges (held leases,
//! waiting tasks) go through the [`metrics`](https://docs.rs/metrics)
//! facade to whatever recorder the application installs; [`observe`] lists
//! their names and labels. Lock names are span fields, never metric
//! labels. The `prometheus` example exports them with
//! `metrics-exporter-prometheus`.
//!
//! # Waiting
//!
//! A waiter does not poll. A failed attempt puts the waiting client into the
//! lock's waiter queue in Redis, in the same script. A release wakes the
//! first live waiter alone, with a message on that client's own channel for
//! the lock (a `FairMutex` release makes it the holder first), so the work
//! Redis does per release does not grow with the number of waiters. A waiter
//! also wakes when the holder's lease can have run out, and once a second to
//! refresh its heartbeat: a waiter whose heartbeat runs out (3 s: its process
//! died) is passed over. Tasks of one client waiting for one `Mutex` or
//! `FairMutex` queue locally, so only one of them is in the queue in Redis;
//! every waiting task of the other primitives has a place of its own in
//! Redis's queue, so that readers that arrive together are let in together
//! and a semaphore serves every request in its turn.
//!
//! A wait rides out passing faults: when Redis does not answer, the
//! connection fails, or the server is still loading, the waiter keeps its
//! place, backs off (jittered, up to a second) and tries again on a new
//! connection until its wait runs out; only a wait that never reached Redis
//! ends with the connection error. A grant whose answer arrives so late
//! that the lease has (almost) run out is never handed out: it is given
//! back and the wait goes on.
//!
//! # Connections
//!
//! Each [`Client`] keeps one command connection and one subscriber
//! connection. A command connection that does not answer within the command
//! timeout is replaced, not reused, and one that has been idle is checked
//! with PING first, so a connection left half-open by a vanished peer or a
//! dropped NAT entry heals at the next operation. Errors say which happened:
//! "did not answer within …" for a slow or paused Redis, "cannot reach" for
//! a refused connection. Refused credentials ([`ErrorKind::Auth`]) and
//! settings the server refuses ([`ErrorKind::Config`]: a database number it
//! does not have, a TLS handshake that fails, a `rediss://` URL for a port
//! that speaks plain RESP or a `redis://` URL for a TLS port) are not
//! faults that pass: they are not retryable, and they end a wait at once.
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
//! # The command line
//!
//! The `leasehold` binary (`cargo install --path crates/leasehold-cli`)
//! puts the same locks in shell scripts and cron jobs:
//!
//! ```text
//! leasehold run nightly-report --no-wait --hold-at-least 10m -- ./report.sh
//! leasehold run catalog --read -- ./export.sh      # --write, --fair, --semaphore N
//! leasehold run acct:alice acct:bob -- ./move.sh   # both, all or none; LEASEHOLD_FENCE_1, _2
//! out=$(leasehold acquire deploy --lease 5m --wait 1m) || exit   # "TOKEN FENCE"
//! read -r token fence <<<"$out"
//! leasehold release deploy "$token"                # extend NAME TOKEN --lease DUR
//! leasehold inspect catalog --json                 # who holds it, readers, permits, queue
//! leasehold watch catalog deploy                   # live view
//! leasehold leader scheduler                       # who leads an election
//! leasehold demo                                   # contention on a private redis-server
//! ```
//!
//! `run` renews the lease while the command runs, passes the fence as
//! `LEASEHOLD_FENCE`, kills the command (and what it started) if the runner
//! dies, and exits 76 if the lease was lost. Exit codes say what happened:
//! 75 busy, 76 lost, 69 Redis out of reach, 77 credentials refused, 78
//! settings refused, 65 the name holds another kind of lock, 2 usage;
//! `--json` prints every result, and every failure, as one JSON object.
//! `leasehold completions bash|zsh|fish` and `leasehold man` come from the
//! same definitions. The repository's README has the full reference and a
//! shell recipe that fails closed.
//!
//! # Keys
//!
//! A lock called `name` lives at `<prefix>:{name}` (a string for the
//! mutexes, a hash with one entry per lease for the other primitives), with its fence counter at
//! `<prefix>:{name}:fence` (expires after the fence retention), its waiter
//! queue at `<prefix>:{name}:q` with one heartbeat key per waiter under
//! `<prefix>:{name}:w:`, and each client's notification channel under
//! `<prefix>:{name}:ch:`. An election called `name` adds its leader record
//! at `<prefix>:{name}:leader` (expires after the fence retention; the
//! leader rewrites it at a quarter of that) and announces on
//! `<prefix>:{name}:leader:ch`. Every key expires on its own.
//!
//! A name is any non-empty UTF-8 string of at most 1024 bytes
//! ([`MAX_NAME_LEN`], counted on the name as given). Braces in a name are
//! escaped in its keys, so that the hash tag still holds the whole name and
//! every key of the lock stays in one Redis Cluster slot: `{` becomes `%7B`,
//! `}` becomes `%7D`, `%` becomes `%25`, and a `%` marks the tag, so the
//! lock `user:{42}` lives at `<prefix>:%{user:%7B42%7D}` (its fence at
//! `<prefix>:%{user:%7B42%7D}:fence`, and so on). Names without braces are
//! used as they are, so two names never share a key: `a%7Bb` lives at
//! `<prefix>:{a%7Bb}`, `a{b` at `<prefix>:%{a%7Bb}`.
//!
//! An ACL user needs access to both the keys and the channels, for example
//! `~leasehold:* &leasehold:*`. Redis 7 gives a new user no channels; without
//! them locks still work, but waiters hear no releases and wake only when the
//! holder's lease can have run out or their heartbeat is due.
#![cfg_attr(not(test), forbid(clippy::panic))]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod background;
pub mod blocking;
mod client;
mod conn;
mod core;
mod deploy;
mod election;
mod engine;
mod error;
mod face;
mod fair_mutex;
mod guard;
mod holder;
mod keys;
mod lock;
mod multi_lock;
mod mutex;
pub mod observe;
mod owner;
mod random;
mod redlock;
mod reentrant_mutex;
mod rw_lock;
mod semaphore;
mod with_lock;

pub use client::{
    Client, ClientBuilder, DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FENCE_RETENTION, DEFAULT_LEASE, DEFAULT_PREFIX, DEFAULT_URL, URL_ENV_VARS,
};
pub use conn::replicas::{ReplicaAck, DEFAULT_REPLICA_TIMEOUT};
pub use election::{Election, Leader, Leadership, MAX_LEADER_VALUE_LEN};
pub use engine::libraries::ScriptLibrary;
pub use engine::loss::LossReason;
pub use engine::watch::{LeaseEnd, LockEvent, LockWatch, WATCH_EVENTS_KEPT};
pub use error::{Error, ErrorKind, Remedy, Result};
pub use face::LockSettings;
pub use fair_mutex::FairMutex;
pub use guard::{DetachedLease, LeaseGuard, MutexGuard};
pub use holder::{
    CutOffReplica, HoldMode, Holder, LockInfo, ReplicaStatus, Waiter, MAX_CLIENT_NAME_LEN,
};
pub use keys::{MAX_LEASE, MAX_NAME_LEN, MAX_PREFIX_LEN, MAX_TOKEN_LEN, MAX_WAIT, MIN_LEASE};
pub use lock::{Lock, LockFuture};
pub use multi_lock::{MultiGuard, MultiLock, MultiLockBuilder, MultiLoss};
pub use mutex::{MasterInfo, Mutex};
pub use owner::{Owner, MAX_OWNER_LEN};
/// The Redis client crate leasehold is built on, so that users name one version.
pub use redis;
pub use redlock::{
    Redlock, RedlockBuilder, RedlockMutex, DEFAULT_DRIFT_CONSTANT, DEFAULT_DRIFT_FACTOR,
    DEFAULT_RETRY_DELAY, MIN_MASTERS, REDLOCK_ENV_VAR,
};
pub use reentrant_mutex::ReentrantMutex;
pub use rw_lock::{ReadLock, RwLock, WriteLock};
pub use semaphore::{Semaphore, MAX_PERMITS, MAX_PERMIT_LIFETIME};

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
        is_send_sync::<ReentrantMutex>();
        is_send_sync::<RwLock>();
        is_send_sync::<ReadLock>();
        is_send_sync::<WriteLock>();
        is_send_sync::<Semaphore>();
        is_send_sync::<Owner>();
        is_send_sync::<Election>();
        is_send_sync::<Leadership>();
        is_send_sync::<Error>();
        is_send_sync::<MultiLock>();
        is_send_sync::<MultiGuard>();
    }
}
