//! The read-write lock: many readers or one writer, writers not starved.

use crate::core::LockCore;
use crate::engine::ops::RwSide;
use crate::engine::Kind;
use crate::error::Result;
use crate::face::{face_calls, face_settings};
use crate::guard::LeaseGuard;
use crate::holder::HoldMode;
use crate::lock::face_lock;
use crate::observe::{self, Op};

/// A lock held by many readers or one writer at a time. Made by
/// [`Client::rw_lock`](crate::Client::rw_lock); take it through [`read`](RwLock::read) or
/// [`write`](RwLock::write). Cheap to clone.
///
/// **The owner follows the task**, as for [`ReentrantMutex`](crate::ReentrantMutex):
/// tasks that share a handle (cloned, or behind an `Arc`) are different
/// owners, so a writer task excludes every other task; within one task,
/// a second read or write is a reentry and a read under a write is a
/// downgrade. [`with_owner`](RwLock::with_owner) names an owner that
/// every task using the handle shares.
///
/// - **Every reader has its own lease**, renewed by the watchdog while its
///   guard lives: a reader that dies frees its share when its own lease
///   ends, and a release removes only its own share.
/// - **Writers are not starved.** Once a writer waits, readers that arrive
///   after it queue behind it; waiters are served in arrival order (every
///   waiting task has its own place, whichever client it belongs to), and
///   the readers at the front of the queue are admitted together. A writer's
///   release wakes all of them at once; a reader's release wakes a writer
///   only when the last reader leaves.
/// - **Reentrant per [`Owner`](crate::Owner).** An owner may take its read or write lock
///   again without waiting. A writer may also take the read lock and then
///   release the write lock: a downgrade, with no gap for another writer.
///   A reader asking for the write lock (an upgrade) is refused at once with
///   [`ErrorKind::Conflict`](crate::ErrorKind::Conflict): two readers
///   upgrading would wait for each other forever.
/// - **Fences.** A write acquisition gets a new fence, larger than every
///   fence before it. So does the first reader of a read phase (a reader
///   that finds no other holder); the readers that join it while it holds
///   share that fence, and a writer's downgrade keeps the write's. So no
///   reader's fence is older than a grant before it, even when a failover
///   rolled the lock's fence counter back to an older write's, and a
///   writer that stalls past its lease and writes late is refused by a
///   resource that has served a read since: the reader's fence is larger.
///   Readers of one phase cannot be told apart by fence.
///
/// All of the lock's state lives in one hash under the lock's hash tag, so
/// it works on Redis Cluster unchanged.
///
/// ```no_run
/// # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
/// let lock = client.rw_lock("catalog")?;
/// let reading = lock.read().acquire().await?;
/// // read, alongside other readers
/// reading.release().await?;
/// let writing = lock.write().acquire().await?;
/// // write alone, passing writing.fence() along
/// writing.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    pub(crate) core: LockCore,
}

face_settings!(RwLock);

impl RwLock {
    pub(crate) fn new(core: LockCore) -> Self {
        RwLock { core }
    }

    /// Whether this handle's owner ([`owner`](RwLock::owner): the current
    /// task's, or the one named with [`with_owner`](RwLock::with_owner)) holds
    /// this lock in this process now: a guard it took through this handle (or a
    /// clone of it) is alive, not released, and its lease is not known lost. A
    /// read or the write lease counts.
    ///
    /// It is answered from this process's own leases, without a round trip:
    /// a lease removed behind the holder's back (a force-release, a Redis
    /// that lost it) counts as held until a renewal, or the lease's local
    /// deadline, tells. A guard moved to another task still counts for the
    /// one that acquired it.
    #[must_use]
    pub fn is_held_by_current_owner(&self) -> bool {
        self.core.held_by_current_owner(|_| true)
    }

    /// The read side: shared with other readers.
    #[must_use]
    pub fn read(&self) -> ReadLock {
        let mut core = self.core.clone();
        core.kind = Kind::Read;
        ReadLock { core }
    }

    /// The write side: exclusive.
    #[must_use]
    pub fn write(&self) -> WriteLock {
        WriteLock {
            core: self.core.clone(),
        }
    }
}

impl RwLock {
    /// Removes every reader's lease and nothing else (a writer that also
    /// holds the read lock keeps its write lease), and wakes the waiters
    /// that can go then (a waiting writer, once no reader is left): an
    /// admin action, as Redisson's `readLock().forceUnlock()`. Whether a
    /// reader was removed. A reader whose lease was removed finds its
    /// guard lost ([`LossReason::TokenGone`](crate::LossReason::TokenGone))
    /// at its next renewal. The fence counter is kept.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the name is
    /// another kind of lock, or a key leasehold did not write;
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
    /// [`ErrorKind::Server`](crate::ErrorKind::Server).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not remove the readers.
    pub async fn force_release_readers(&self) -> Result<bool> {
        observe::traced(
            self.core.span_as(Op::ForceRelease, ["rw_lock"]),
            self.core.force_release_side(RwSide::Readers),
        )
        .await
    }

    /// Removes the writer's lease and nothing else (readers stay: those of
    /// a writer that downgraded), and wakes the waiters that can go then:
    /// an admin action, as Redisson's `writeLock().forceUnlock()`. Whether
    /// a writer was removed. The writer whose lease was removed finds its
    /// guard lost ([`LossReason::TokenGone`](crate::LossReason::TokenGone))
    /// at its next renewal. The fence counter is kept.
    ///
    /// # Errors
    ///
    /// As [`force_release_readers`](Self::force_release_readers).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not remove the writer.
    pub async fn force_release_writer(&self) -> Result<bool> {
        observe::traced(
            self.core.span_as(Op::ForceRelease, ["rw_lock"]),
            self.core.force_release_side(RwSide::Writer),
        )
        .await
    }
}

// The spans of operations on a whole lock, which may concern readers and
// the writer alike, are of the primitive `rw_lock`.
face_calls! {
    RwLock -> LeaseGuard, spans "rw_lock" {
        /// The owner whose acquisitions this handle makes now: the owner named
        /// with [`with_owner`](Self::with_owner), else the current task's.
        owner;

        /// This lock acquired on behalf of `owner`, whichever task acquires:
        /// every task and clone that uses the handle shares `owner`'s read and
        /// write holds.
        with_owner;

        /// Releases a read or write lease of this handle's [`Owner`](crate::Owner) by its
        /// token, say one taken by another process that shares the owner id
        /// (see [`Mutex::release_token`](crate::Mutex::release_token)). A lease
        /// of another owner is refused and left as it is: one owner's read lock
        /// is never released by another. An admin who must remove a lease
        /// whatever its owner uses `client.mutex(name)?.release_token(token)`
        /// or [`force_release`](RwLock::force_release).
        ///
        /// # Errors
        ///
        /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the token holds
        /// nothing, or holds a lease of another owner;
        /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the name
        /// holds another kind of lock;
        /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
        /// token that no lease could have.
        ///
        /// # Cancel safety
        ///
        /// Dropping the future may or may not release the lease.
        release_token;

        /// Removes every reader and writer, and wakes the waiters: an admin
        /// action. The fence counter is kept.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the name's
        /// key is no lock (a key leasehold did not write: it is left as it is);
        /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
        /// [`ErrorKind::Server`](crate::ErrorKind::Server).
        ///
        /// # Cancel safety
        ///
        /// Dropping the future may or may not remove the lock.
        force_release;

        /// The lock's state as Redis sees it now: every reader and the writer,
        /// each with its own lease left.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
        /// [`ErrorKind::Server`](crate::ErrorKind::Server).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: it only reads.
        inspect;

        /// The lock's live waiters in line, head first, as Redis sees them
        /// now: who waits, since when, for what. A waiter whose heartbeat ran
        /// out (it died) is left out. For a `Mutex` or `FairMutex` there is one
        /// waiter per waiting client (its other tasks wait behind it locally);
        /// for the other kinds one per waiting task.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
        /// [`ErrorKind::Server`](crate::ErrorKind::Server).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: it only reads.
        waiters;
    }
}

/// One side of an [`RwLock`], both written once: the side's struct, the
/// kind of lease it takes and its hold mode, and the docs that differ.
macro_rules! rw_side {
    (
        $(#[$doc:meta])*
        $side:ident, $kind:ident;
        held { $(#[$held:meta])* }
        hold_count { $(#[$count:meta])* }
        try_acquire { $(#[$try:meta])* }
        acquire { $(#[$acquire:meta])* }
        acquire_timeout { $(#[$timeout:meta])* }
    ) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $side {
            pub(crate) core: LockCore,
        }

        face_lock!($side);

        impl std::fmt::Debug for $side {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.core.debug(stringify!($side), f)
            }
        }

        impl $side {
            /// Whether this handle's owner ([`owner`](RwLock::owner): the current
            /// task's, or the one named with [`with_owner`](RwLock::with_owner)) holds
            /// this lock in this process now: a guard it took through this handle (or a
            /// clone of it) is alive, not released, and its lease is not known lost.
            $(#[$held])*
            ///
            /// It is answered from this process's own leases, without a round trip:
            /// a lease removed behind the holder's back (a force-release, a Redis
            /// that lost it) counts as held until a renewal, or the lease's local
            /// deadline, tells. A guard moved to another task still counts for the
            /// one that acquired it.
            #[must_use]
            pub fn is_held_by_current_owner(&self) -> bool {
                self.core.held_by_current_owner(|kind| kind == Kind::$kind)
            }

            $(#[$count])*
            ///
            /// # Errors
            ///
            /// As [`RwLock::inspect`].
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: it only reads.
            pub async fn hold_count(&self) -> Result<usize> {
                hold_count(&self.core, HoldMode::$kind).await
            }
        }

        $crate::face::face_calls! {
            $side -> LeaseGuard {
                $(#[$try])*
                try_acquire;
                $(#[$acquire])*
                acquire;
                $(#[$timeout])*
                acquire_timeout;
            }
        }
    };
}

rw_side! {
    /// The read side of an [`RwLock`], from [`RwLock::read`].
    ReadLock, Read;
    held {
        /// Only read leases count.
    }
    hold_count {
        /// How many read leases this handle's owner holds now, as Redis sees
        /// it (across processes that share a named owner).
    }
    try_acquire {
        /// One attempt: a read lease if no writer holds the lock or waits
        /// before this reader (or the owner holds it already), else `None`.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the name is
        /// in use by another kind of lock; otherwise as
        /// [`Mutex::try_acquire`](crate::Mutex::try_acquire).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: a request that may have taken a lease is undone in the
        /// background.
    }
    acquire {
        /// Waits as long as it takes for a read lease.
        ///
        /// # Errors
        ///
        /// As [`try_acquire`](Self::try_acquire); connection faults are ridden out.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: dropping the future leaves nothing held.
    }
    acquire_timeout {
        /// Waits at most `wait` for a read lease.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when a writer still
        /// holds or waits first after `wait`; otherwise as [`acquire`](Self::acquire).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe, as [`acquire`](Self::acquire).
    }
}

rw_side! {
    /// The write side of an [`RwLock`], from [`RwLock::write`].
    WriteLock, Write;
    held {
        /// Only the write lease counts.
    }
    hold_count {
        /// How many levels of the write lock this handle's owner holds now, as
        /// Redis sees it (across processes that share a named owner).
    }
    try_acquire {
        /// One attempt: the write lease if nobody holds the lock and nobody
        /// waits before this writer (or the owner holds the write lock
        /// already), else `None`.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the owner
        /// holds a read lease and not the write lease (an upgrade), or the name
        /// is in use by another kind of lock; otherwise as
        /// [`Mutex::try_acquire`](crate::Mutex::try_acquire).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: a request that may have taken the lock is undone in the
        /// background.
    }
    acquire {
        /// Waits as long as it takes for the write lease.
        ///
        /// # Errors
        ///
        /// As [`try_acquire`](Self::try_acquire): an upgrade is refused at once,
        /// never waited for. Connection faults are ridden out.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: dropping the future leaves nothing held.
    }
    acquire_timeout {
        /// Waits at most `wait` for the write lease.
        ///
        /// # Errors
        ///
        /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when readers or
        /// another writer still hold it after `wait`; otherwise as
        /// [`acquire`](Self::acquire).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe, as [`acquire`](Self::acquire).
    }
}

/// The levels the current owner holds of `core`'s lock in `mode`, as Redis
/// sees it.
async fn hold_count(core: &LockCore, mode: HoldMode) -> Result<usize> {
    let info = core.inspect().await?;
    let owner = core.owners.current();
    let mine = owner.as_deref();
    Ok(info
        .holders
        .iter()
        .filter(|h| h.mode == mode && h.owner.as_deref() == mine)
        .fold(0, |n: usize, h| {
            n.saturating_add(usize::try_from(h.levels).unwrap_or(usize::MAX))
        }))
}
