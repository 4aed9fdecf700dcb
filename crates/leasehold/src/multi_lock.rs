//! Several locks taken as one: all or none, in one global order.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::engine::loss::LossReason;
use crate::error::{Error, ErrorKind, Result};
use crate::guard::LeaseGuard;
use crate::keys::validate_wait;
use crate::lock::Lock;

/// Several locks taken together, all or none: Redisson's `MultiLock`.
///
/// Use it when one piece of work needs several resources at once: a
/// transfer between two accounts locks both accounts, a job that moves
/// files from one directory to another locks both directories. Taking the
/// locks one by one in the order the code happens to name them deadlocks
/// as soon as two processes name the same two in opposite orders (each
/// holds one and waits for the other). A `MultiLock` cannot: it takes its
/// locks in one global order, whatever order they were given in.
///
/// # The order
///
/// The locks are taken in the byte order of their Redis keys
/// (`<prefix>:{name}`, [`Lock::key`]): for locks of one client, in the
/// order of their names. Every process that takes an overlapping set of
/// locks through a `MultiLock` takes the shared ones in the same relative
/// order, so no two of them can each hold a lock the other waits for. The
/// guarantee covers the locks taken through `MultiLock`s: code that holds
/// one lock by hand and then takes a `MultiLock`, or takes several locks
/// by hand, must keep the same order itself.
///
/// Any mix of kinds goes: mutexes, fair mutexes, a side of a read-write
/// lock, a semaphore's permit, a reentrant mutex ([`MultiLock::builder`],
/// or [`MultiLock::new`] with `Box<dyn Lock>`s). A lock may appear once: a
/// read and a write side of one read-write lock share its key, and are
/// refused together as a lock given twice.
///
/// # Fences and losses
///
/// The guard, a [`MultiGuard`], holds one lease per lock, and so one fence
/// per lock ([`MultiGuard::fences`], in the order the locks were given):
/// pass each resource the fence of its own lock. It is lost as soon as any
/// of its leases is lost ([`MultiGuard::lost`], [`MultiGuard::is_lost`],
/// and [`MultiGuard::loss_reason`] names the lock): the work is then no
/// longer protected as a whole.
///
/// # Redis Cluster
///
/// Each lock is taken, renewed and released on its own, by the scripts of
/// its own kind, so the locks may live on any shards: nothing ever touches
/// two locks' keys in one command.
///
/// ```no_run
/// # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
/// use leasehold::MultiLock;
///
/// // Another process may name them the other way round: no deadlock.
/// let accounts = MultiLock::builder()
///     .lock(client.mutex("account:alice")?)
///     .lock(client.mutex("account:bob")?)
///     .build()?;
/// let guard = accounts.acquire().await?;
/// let fences = guard.fences(); // alice's, then bob's
/// tokio::select! {
///     () = guard.lost() => eprintln!("stop: {:?}", guard.loss_reason()),
///     () = transfer(fences[0], fences[1]) => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// # async fn transfer(_from_fence: u64, _to_fence: u64) {}
/// ```
#[derive(Debug)]
pub struct MultiLock {
    /// In the order given.
    locks: Vec<Box<dyn Lock>>,
    /// Indices into `locks`, in the order they are taken (by key).
    order: Vec<usize>,
}

/// Builds a [`MultiLock`] from locks of any kind.
#[derive(Debug, Default)]
#[must_use]
pub struct MultiLockBuilder {
    locks: Vec<Box<dyn Lock>>,
}

impl MultiLockBuilder {
    /// Adds a lock: its guard and fence come after those of the locks
    /// added before it.
    pub fn lock(mut self, lock: impl Lock + 'static) -> Self {
        self.locks.push(Box::new(lock));
        self
    }

    /// The multi-lock over the locks added.
    ///
    /// # Errors
    ///
    /// As [`MultiLock::new`].
    pub fn build(self) -> Result<MultiLock> {
        MultiLock::new(self.locks)
    }
}

/// How long a take waits for each lock.
#[derive(Clone, Copy)]
enum Wait {
    Try,
    Forever,
    Until(Instant),
}

/// What one pass over the locks ended with.
enum Pass {
    Taken(MultiGuard),
    Busy,
    /// Every lock was taken, but a lease taken early was lost while a later
    /// lock was waited for: all were released.
    LostMeanwhile(String),
}

impl MultiLock {
    /// A builder: add the locks with [`MultiLockBuilder::lock`].
    pub fn builder() -> MultiLockBuilder {
        MultiLockBuilder::default()
    }

    /// A multi-lock over `locks`. Their guards and fences are handed out
    /// in this order; they are taken in the order of their keys.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] when `locks` is empty, or when a lock
    /// appears twice (two locks with one key: the same name and prefix).
    pub fn new(locks: Vec<Box<dyn Lock>>) -> Result<MultiLock> {
        if locks.is_empty() {
            return Err(Error::invalid(
                "a multi-lock needs at least one lock: add the locks to take together",
            ));
        }
        let mut order: Vec<usize> = (0..locks.len()).collect();
        order.sort_by(|&a, &b| locks[a].key().cmp(locks[b].key()));
        if let Some(pair) = order
            .windows(2)
            .find(|pair| locks[pair[0]].key() == locks[pair[1]].key())
        {
            return Err(Error::invalid(format!(
                "lock {:?} is given twice to one multi-lock: each lock is taken once (the read \
                 and write sides of a read-write lock are one lock); give every lock once",
                locks[pair[0]].name()
            )));
        }
        Ok(MultiLock { locks, order })
    }

    /// The locks, in the order they were given.
    pub fn locks(&self) -> &[Box<dyn Lock>] {
        &self.locks
    }

    /// The locks, in the order they are taken: by key.
    pub fn locks_in_order(&self) -> impl Iterator<Item = &dyn Lock> + '_ {
        self.order.iter().map(|&i| &*self.locks[i])
    }

    /// One attempt at every lock, in order: the guard if every lock could
    /// be taken now; `None` if one was busy, and then the locks taken
    /// before it have been released (a release that gets no answer goes on
    /// in the background, and its lease runs out meanwhile).
    ///
    /// # Errors
    ///
    /// As the locks' own `try_acquire`; whatever was taken before the
    /// error is released in the background.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves nothing held.
    /// The guards taken so far live in the future and are released in the
    /// background when it is dropped, and the attempt in flight is undone
    /// as a dropped `try_acquire` of its kind is.
    pub async fn try_acquire(&self) -> Result<Option<MultiGuard>> {
        match self.pass(Wait::Try).await? {
            Pass::Taken(guard) => Ok(Some(guard)),
            Pass::Busy | Pass::LostMeanwhile(_) => Ok(None),
        }
    }

    /// Waits as long as it takes for every lock, taking them in order.
    ///
    /// A lock taken is held while the later ones are waited for (that is
    /// what makes the order deadlock-free), and renewed meanwhile. If a
    /// lease taken early is lost during the wait (a fixed lease shorter
    /// than the wait, a lock removed by force), every lock is released and
    /// the wait starts over: no lease of the guard handed out is lost at
    /// the moment it is handed out.
    ///
    /// # Errors
    ///
    /// As the locks' own `acquire`; whatever was taken before the error is
    /// released in the background.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves nothing held.
    /// The guards taken so far live in the future and are released in the
    /// background when it is dropped, and the wait in flight is undone (its
    /// request released, its place in the queue left) as a dropped
    /// `acquire` of its kind is.
    pub async fn acquire(&self) -> Result<MultiGuard> {
        loop {
            if let Pass::Taken(guard) = self.pass(Wait::Forever).await? {
                return Ok(guard);
            }
        }
    }

    /// Waits at most `wait` in all for every lock, taking them in order.
    ///
    /// The locks taken are held while the later ones are waited for, as in
    /// [`acquire`](MultiLock::acquire), and are released before the error
    /// is returned if `wait` runs out first. As with one lock, an attempt
    /// in flight when `wait` runs out is seen through.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Timeout`] when a lock is still held by another after
    /// `wait` (the error names it); [`ErrorKind::InvalidInput`] for a wait
    /// over a day, before anything is sent; otherwise as the locks' own
    /// `acquire_timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](MultiLock::acquire).
    pub async fn acquire_timeout(&self, wait: Duration) -> Result<MultiGuard> {
        validate_wait(wait)?;
        let deadline = Instant::now() + wait;
        loop {
            match self.pass(Wait::Until(deadline)).await? {
                Pass::Taken(guard) => return Ok(guard),
                Pass::LostMeanwhile(name) if Instant::now() >= deadline => {
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "the lease on lock {name:?} was lost while the multi-lock waited for \
                             its other locks, and the wait of {wait:?} ran out: nothing is held; \
                             wait longer, or give the locks a longer lease"
                        ),
                    ));
                }
                // A pass that waits never ends busy: a busy lock times out.
                Pass::Busy | Pass::LostMeanwhile(_) => {}
            }
        }
    }

    /// Takes every lock in order, or none.
    async fn pass(&self, wait: Wait) -> Result<Pass> {
        let mut taken: Vec<(usize, LeaseGuard)> = Vec::with_capacity(self.locks.len());
        for &index in &self.order {
            let lock = &self.locks[index];
            let attempt = match wait {
                Wait::Try => lock.try_acquire().await,
                Wait::Forever => lock.acquire().await.map(Some),
                Wait::Until(deadline) => lock
                    .acquire_timeout(deadline.saturating_duration_since(Instant::now()))
                    .await
                    .map(Some),
            };
            match attempt {
                Ok(Some(guard)) => taken.push((index, guard)),
                Ok(None) => {
                    release_all(taken).await;
                    return Ok(Pass::Busy);
                }
                Err(err) if err.is_timeout() => {
                    release_all(taken).await;
                    return Err(err);
                }
                // Dropped: released in the background, so that the error is
                // not held up by releases to a Redis that may be out of reach.
                Err(err) => return Err(err),
            }
        }
        if let Some((_, lost)) = taken.iter().find(|(_, guard)| guard.is_lost()) {
            let name = lost.name().to_owned();
            release_all(taken).await;
            return Ok(Pass::LostMeanwhile(name));
        }
        taken.sort_by_key(|&(index, _)| index);
        Ok(Pass::Taken(MultiGuard {
            guards: taken.into_iter().map(|(_, guard)| guard).collect(),
        }))
    }
}

/// Releases every guard, each on its own; their outcomes do not matter to a
/// take that gives up.
async fn release_all(taken: Vec<(usize, LeaseGuard)>) {
    join_all(taken.into_iter().map(|(_, guard)| guard.release())).await;
}

/// The leases of a [`MultiLock`]: one per lock, in the order the locks were
/// given.
///
/// It is lost as soon as any of its leases is lost: [`lost`](MultiGuard::lost)
/// resolves, [`is_lost`](MultiGuard::is_lost) turns true for good, and
/// [`loss_reason`](MultiGuard::loss_reason) says which lock and why.
///
/// Release it with [`release`](MultiGuard::release) to learn whether every
/// lease held to the end. Dropped without it, every lock is released in the
/// background (see [`Client::flush`](crate::Client::flush)); outside a
/// runtime the leases expire.
#[must_use = "dropping the guard releases the locks at once"]
#[clippy::has_significant_drop]
pub struct MultiGuard {
    guards: Vec<LeaseGuard>,
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.guards.iter().map(LeaseGuard::name).collect();
        f.debug_struct("MultiGuard")
            .field("names", &names)
            .field("fences", &self.fences())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl MultiGuard {
    /// The guard of each lock, in the order the locks were given.
    pub fn guards(&self) -> &[LeaseGuard] {
        &self.guards
    }

    /// The fence of each lock's acquisition, in the order the locks were
    /// given (see [`LeaseGuard::fence`]): pass each resource the fence of
    /// the lock that guards it.
    pub fn fences(&self) -> Vec<u64> {
        self.guards.iter().map(LeaseGuard::fence).collect()
    }

    /// Some lease was lost: the work done from here on is not protected as
    /// a whole. Once true, stays true.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LeaseGuard::is_lost)
    }

    /// Which lock lost its lease, and why, once one has: the first lost
    /// one in the order the locks were given. `None` while every lease is
    /// held.
    pub fn loss_reason(&self) -> Option<MultiLoss> {
        self.guards.iter().enumerate().find_map(|(index, guard)| {
            guard.loss_reason().map(|reason| MultiLoss {
                index,
                name: guard.name().to_owned(),
                reason,
            })
        })
    }

    /// Resolves when any of the leases is lost (at once if one already
    /// is). Race it against the work with `tokio::select!`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub async fn lost(&self) {
        let mut watches: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = self
            .guards
            .iter()
            .map(|guard| Box::pin(guard.lost()) as Pin<Box<dyn Future<Output = ()> + Send>>)
            .collect();
        std::future::poll_fn(|cx| {
            for watch in &mut watches {
                if watch.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
            }
            Poll::Pending
        })
        .await;
    }

    /// Time left before the first of the leases runs out by the local
    /// clock, if no renewal comes; zero once one is lost.
    pub fn valid_for(&self) -> Duration {
        self.guards
            .iter()
            .map(LeaseGuard::valid_for)
            .min()
            .unwrap_or_default()
    }

    /// Releases every lease, all at once (each as [`LeaseGuard::release`]
    /// does), and reports the first error in the order the locks were
    /// given. A failed release does not stop the others.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotHeld`] when a lease was lost before the release: the
    /// work done under the guard may have overlapped with another holder
    /// of that lock. [`ErrorKind::Connection`] when a release got no
    /// answer: whether that lease held to the end is unknown (it expires at
    /// the end of its lease, and the release goes on in the background).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, every release finishes in the background.
    pub async fn release(self) -> Result<()> {
        let outcomes = join_all(self.guards.into_iter().map(LeaseGuard::release)).await;
        outcomes
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }

    /// The guards, in the order the locks were given, to release or keep
    /// one by one.
    pub fn into_guards(self) -> Vec<LeaseGuard> {
        self.guards
    }
}

/// Which lock of a [`MultiGuard`] lost its lease, and why: what
/// [`MultiGuard::loss_reason`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MultiLoss {
    /// The lock's place among the locks, in the order they were given.
    pub index: usize,
    /// The lock's name.
    pub name: String,
    /// Why its lease was lost.
    pub reason: LossReason,
}

impl fmt::Display for MultiLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lease on lock {:?} was lost: {}", self.name, self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_send<T: Send>(_: &T) {}

    #[allow(dead_code)]
    fn futures_are_send(multi: &MultiLock, guard: MultiGuard) {
        is_send(&multi.try_acquire());
        is_send(&multi.acquire());
        is_send(&multi.acquire_timeout(Duration::ZERO));
        is_send(&guard.lost());
        is_send(&guard.release());
    }
}
