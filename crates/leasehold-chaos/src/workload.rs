//! The workloads: one per primitive. A workload names its locks, says how
//! its holders may overlap, and takes its lock for a worker. A new
//! primitive is a new variant here; the harness, the faults and the checker
//! stay as they are.

use std::time::Duration;

use anyhow::{bail, Result};
use leasehold::{Client, Election, Leadership, LeaseGuard, Lock, Semaphore};

use crate::events::Mode;

/// The permits of every semaphore the harness uses.
pub(crate) const SEMAPHORE_PERMITS: u32 = 2;
/// How far lock numbers are searched for one on a given shard: a shard
/// holds a third of the slots, so a few numbers do.
const SPREAD_SEARCH: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Workload {
    Mutex,
    Fair,
    Reentrant,
    RwLock,
    Semaphore,
    Election,
}

impl Workload {
    pub(crate) const ALL: [Workload; 6] = [
        Workload::Mutex,
        Workload::Fair,
        Workload::Reentrant,
        Workload::RwLock,
        Workload::Semaphore,
        Workload::Election,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Workload::Mutex => "mutex",
            Workload::Fair => "fair",
            Workload::Reentrant => "reentrant",
            Workload::RwLock => "rwlock",
            Workload::Semaphore => "semaphore",
            Workload::Election => "election",
        }
    }

    pub(crate) fn parse_list(list: &str) -> Result<Vec<Workload>> {
        let mut out = Vec::new();
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            if word == "all" {
                out.extend(Workload::ALL);
                continue;
            }
            match Workload::ALL.iter().find(|w| w.name() == word) {
                Some(w) => out.push(*w),
                None => bail!(
                    "unknown workload {word:?}: use mutex, fair, reentrant, rwlock, semaphore, election or all"
                ),
            }
        }
        if out.is_empty() {
            bail!(
                "no workload given: use mutex, fair, reentrant, rwlock, semaphore, election or all"
            );
        }
        out.dedup();
        Ok(out)
    }

    /// The name of this workload's lock number `i`.
    pub(crate) fn lock_name(self, i: usize) -> String {
        format!("{}-{i}", self.name())
    }

    /// The names of a run's locks, `locks` of each of `workloads`. On one
    /// server they are `<workload>-0`, `-1`, …; on a cluster of `shards`
    /// shards, where `shard_of` tells on which shard a name's slot is, the
    /// numbers are picked so that the run's locks go round the shards in
    /// turn, every workload's as well as all of them.
    pub(crate) fn lock_names(
        workloads: &[Workload],
        locks: usize,
        shards: usize,
        shard_of: impl Fn(&str) -> usize,
    ) -> Vec<String> {
        let mut names = Vec::new();
        for (w, workload) in workloads.iter().enumerate() {
            let mut taken = std::collections::BTreeSet::new();
            for i in 0..locks {
                if shards <= 1 {
                    names.push(workload.lock_name(i));
                    continue;
                }
                let wanted = (w * locks + i) % shards;
                let fits =
                    |n: &usize| !taken.contains(n) && shard_of(&workload.lock_name(*n)) == wanted;
                let n = (0..SPREAD_SEARCH)
                    .find(fits)
                    .or_else(|| (0..).find(|n| !taken.contains(n)))
                    .unwrap_or(i);
                taken.insert(n);
                names.push(workload.lock_name(n));
            }
        }
        names
    }

    /// The workload a lock name belongs to.
    pub(crate) fn of_lock(lock: &str) -> Option<Workload> {
        let kind = lock.rsplit_once('-')?.0;
        Workload::ALL.into_iter().find(|w| w.name() == kind)
    }

    /// How many holders of a lock of this workload may overlap: `None` for
    /// the exclusion of writers (and exclusive holders) alone.
    pub(crate) fn permits(self) -> Option<u32> {
        match self {
            Workload::Semaphore => Some(SEMAPHORE_PERMITS),
            _ => None,
        }
    }

    /// Whether its holders do a fenced read-modify-write on the resource (a
    /// reader reads only; a semaphore's holders share no register).
    pub(crate) fn uses_resource(self) -> bool {
        self != Workload::Semaphore
    }
}

/// One lock of a workload, as a worker holds its handle: the kind matters
/// only where an acquisition asks for more than the lock (a side, permits,
/// a campaign).
#[derive(Debug)]
pub(crate) enum Handle {
    /// A lock taken whole: a mutex, fair or not, or a reentrant mutex,
    /// which its owner takes again to nest.
    Lock {
        lock: Box<dyn Lock>,
        nests: bool,
    },
    /// The sides of a read-write lock; a writer nests by taking the read
    /// side (a downgrade).
    RwLock {
        read: Box<dyn Lock>,
        write: Box<dyn Lock>,
    },
    Semaphore(Semaphore),
    Election(Election),
}

/// What a section holds: a lease, or the leadership of an election.
#[derive(Debug)]
pub(crate) enum Held {
    Lease(LeaseGuard),
    Leader(Box<Leadership>),
}

impl Held {
    /// Time left before the lease runs out by the holder's own clock.
    pub(crate) fn valid_for(&self) -> Duration {
        match self {
            Held::Lease(g) => g.valid_for(),
            Held::Leader(l) => l.valid_for(),
        }
    }

    pub(crate) fn fence(&self) -> u64 {
        match self {
            Held::Lease(g) => g.fence(),
            Held::Leader(l) => l.fence(),
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        match self {
            Held::Lease(g) => g.is_lost(),
            Held::Leader(l) => l.is_lost(),
        }
    }

    pub(crate) async fn lost(&self) {
        match self {
            Held::Lease(g) => g.lost().await,
            Held::Leader(l) => l.lost().await,
        }
    }

    pub(crate) async fn release(self) -> leasehold::Result<()> {
        match self {
            Held::Lease(g) => g.release().await,
            Held::Leader(l) => l.resign().await,
        }
    }
}

/// A wait that ended without the lock.
#[derive(Debug)]
pub(crate) struct WaitError {
    /// The error's kind, lowercase ("timeout", "connection", …).
    pub(crate) kind: String,
    pub(crate) message: String,
}

impl WaitError {
    pub(crate) fn is_timeout(&self) -> bool {
        self.kind == "timeout"
    }
}

impl From<leasehold::Error> for WaitError {
    fn from(e: leasehold::Error) -> Self {
        WaitError {
            kind: format!("{:?}", e.kind()).to_lowercase(),
            message: e.to_string(),
        }
    }
}

impl Handle {
    /// The handle of lock `name`, with the client's settings (its replica
    /// acknowledgement among them). A Redlock's client makes mutexes alone.
    pub(crate) fn new(
        client: &Client,
        workload: Workload,
        name: &str,
    ) -> leasehold::Result<Handle> {
        let whole = |lock: Box<dyn Lock>, nests| Handle::Lock { lock, nests };
        Ok(match workload {
            Workload::Mutex => whole(Box::new(client.mutex(name)?), false),
            Workload::Fair => whole(Box::new(client.fair_mutex(name)?), false),
            Workload::Reentrant => whole(Box::new(client.reentrant_mutex(name)?), true),
            Workload::RwLock => {
                let rw = client.rw_lock(name)?;
                Handle::RwLock {
                    read: Box::new(rw.read()),
                    write: Box::new(rw.write()),
                }
            }
            Workload::Semaphore => Handle::Semaphore(client.semaphore(name, SEMAPHORE_PERMITS)?),
            Workload::Election => Handle::Election(client.election(name)?),
        })
    }

    /// The mode an acquisition takes and the permits it asks for: a
    /// read-write lock is read three times in four; a semaphore is taken
    /// whole one time in four.
    pub(crate) fn mode(&self, draw: u64) -> (Mode, u32) {
        match self {
            Handle::Lock { .. } | Handle::Election(_) => (Mode::Exclusive, 1),
            Handle::RwLock { .. } if draw.is_multiple_of(4) => (Mode::Write, 1),
            Handle::RwLock { .. } => (Mode::Read, 1),
            Handle::Semaphore(_) if draw.is_multiple_of(4) => (Mode::Permit, SEMAPHORE_PERMITS),
            Handle::Semaphore(_) => (Mode::Permit, 1),
        }
    }

    /// Waits at most `wait` for the lock; `value` is what a candidate of an
    /// election campaigns with.
    pub(crate) async fn acquire(
        &self,
        mode: Mode,
        permits: u32,
        wait: Duration,
        value: &str,
    ) -> Result<Held, WaitError> {
        let guard = match self {
            Handle::Lock { lock, .. } => lock.acquire_timeout(wait).await?,
            Handle::RwLock { write, .. } if mode == Mode::Write => {
                write.acquire_timeout(wait).await?
            }
            Handle::RwLock { read, .. } => read.acquire_timeout(wait).await?,
            Handle::Semaphore(s) => s.acquire_many_timeout(permits, wait).await?,
            Handle::Election(e) => {
                return match tokio::time::timeout(wait, e.campaign(value)).await {
                    Ok(won) => Ok(Held::Leader(Box::new(won?))),
                    Err(_) => Err(WaitError {
                        kind: "timeout".into(),
                        message: format!("not elected within {} ms", wait.as_millis()),
                    }),
                };
            }
        };
        Ok(Held::Lease(guard))
    }

    /// A second level of the lock its owner holds already: the reentrant
    /// lock again, or the read lock of a writer that will downgrade.
    /// `None` for the other locks.
    pub(crate) async fn nest(
        &self,
        mode: Mode,
        wait: Duration,
    ) -> Option<leasehold::Result<LeaseGuard>> {
        match self {
            Handle::Lock { lock, nests: true } => Some(lock.acquire_timeout(wait).await),
            Handle::RwLock { read, .. } if mode == Mode::Write => {
                Some(read.acquire_timeout(wait).await)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_names_lead_back_to_their_workload() {
        for w in Workload::ALL {
            assert_eq!(Workload::of_lock(&w.lock_name(3)), Some(w));
        }
        assert_eq!(Workload::of_lock("nothing"), None);
        assert_eq!(
            Workload::parse_list("fair, mutex").unwrap(),
            [Workload::Fair, Workload::Mutex]
        );
        assert_eq!(Workload::parse_list("all").unwrap().len(), 6);
        assert!(Workload::parse_list("spinlock").is_err());
        assert!(Workload::parse_list("").is_err());
    }

    #[test]
    fn on_a_cluster_the_locks_go_round_the_shards() {
        let one = Workload::lock_names(&[Workload::Mutex, Workload::Fair], 2, 1, |_| 0);
        assert_eq!(one, ["mutex-0", "mutex-1", "fair-0", "fair-1"]);
        let shard_of = |name: &str| usize::from(leasehold_testkit::key_slot(name)) * 3 / 16384;
        let names = Workload::lock_names(&Workload::ALL, 3, 3, shard_of);
        assert_eq!(names.len(), 18);
        for (i, name) in names.iter().enumerate() {
            assert_eq!(shard_of(name), i % 3, "{name}");
            assert_eq!(Workload::of_lock(name), Some(Workload::ALL[i / 3]));
        }
        let unique: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
    }
}
