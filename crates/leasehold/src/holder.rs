//! Who holds a lock: the identity every lease records, and reading it back.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest client name a lease records; longer names are cut.
pub const MAX_CLIENT_NAME_LEN: usize = 128;

/// "<pid> <host> <client name>": what a lease records of its holder.
pub(crate) fn identity(name: Option<&str>) -> String {
    let name = match name {
        Some(name) => name.to_owned(),
        None => program_name(),
    };
    format!(
        "{} {} {}",
        std::process::id(),
        clean(&host_name(), 255).replace(' ', "_"),
        clean(&name, MAX_CLIENT_NAME_LEN)
    )
}

fn program_name() -> String {
    std::env::args_os()
        .next()
        .and_then(|arg0| {
            std::path::Path::new(&arg0)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_default()
}

#[cfg(not(unix))]
fn host_name() -> String {
    std::env::var("COMPUTERNAME").unwrap_or_else(|_| "unknown-host".to_owned())
}

#[cfg(unix)]
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its whole length, which is passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown-host".to_owned();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let host = String::from_utf8_lossy(&buf[..len]).into_owned();
    if host.is_empty() {
        "unknown-host".to_owned()
    } else {
        host
    }
}

/// Control characters replaced, cut at `max` bytes on a char boundary.
fn clean(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let c = if c.is_control() { '?' } else { c };
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

/// How a lease holds its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HoldMode {
    /// Alone: a mutex, a fair mutex, or the hold of a reentrant mutex.
    Exclusive,
    /// A reader of an rw-lock.
    Read,
    /// The writer of an rw-lock.
    Write,
    /// Permits of a semaphore.
    Permits,
}

impl HoldMode {
    /// `"exclusive"`, `"read"`, `"write"` or `"permits"`.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldMode::Exclusive => "exclusive",
            HoldMode::Read => "read",
            HoldMode::Write => "write",
            HoldMode::Permits => "permits",
        }
    }
}

impl std::fmt::Display for HoldMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One holder of a lock, as [`LockInfo`](crate::LockInfo) and the busy and
/// timeout errors report it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's process id, if it recorded one.
    pub pid: Option<u32>,
    /// The host the holder runs on.
    pub host: String,
    /// The holder's client name ([`ClientBuilder::name`](crate::ClientBuilder::name)).
    pub client_name: String,
    /// When Redis granted the lease, by the Redis server's clock. For a
    /// `Mutex` or `FairMutex` this is its fence read as µs since the epoch:
    /// the server's clock, or a few µs past it when the fence counter ran
    /// ahead of the clock.
    pub acquired_at: Option<SystemTime>,
    /// The time left on this holder's lease.
    pub remaining: Option<Duration>,
    /// How this lease holds the lock.
    pub mode: HoldMode,
    /// Semaphore permits this lease holds (1 for the other primitives).
    pub permits: u32,
    /// The levels of a reentrant mutex's hold, all on this one lease (1
    /// for the other primitives); 0 for a hold released within its
    /// hold-at-least, kept until that is over.
    pub levels: u32,
    /// The [`Owner`](crate::Owner) of a reentrant mutex or rw-lock lease.
    pub owner: Option<String>,
    /// The fence of the acquisition, where the record keeps one (the hash
    /// primitives; a mutex's holder has the lock's last fence).
    pub fence: Option<u64>,
    /// The holder released the lock within its hold-at-least, and the lock
    /// is kept, on purpose, until that is over ([`remaining`](Self::remaining)
    /// says how long): nobody runs under it any more.
    pub kept: bool,
}

impl Holder {
    /// Reads "<acquired µs> <pid> <host> <name>" (a mutex's record without
    /// its token).
    pub(crate) fn from_mutex_record(record: &str, remaining: Option<Duration>) -> Holder {
        let (record, kept) = unmark(record);
        let mut words = record.splitn(4, ' ');
        let acquired = words.next().and_then(|w| w.parse::<u64>().ok());
        let mut holder = Holder::identity_only(words.next(), words.next(), words.next());
        holder.acquired_at = acquired.map(|us| UNIX_EPOCH + Duration::from_micros(us));
        holder.remaining = remaining;
        holder.kept = kept;
        holder
    }

    /// Reads "<ms left or expiry> <mode> <owner> <permits> <fence> <acquired
    /// µs> <pid> <host> <name>" (a hash primitive's lease); `remaining` is
    /// the first field when `left` is true.
    pub(crate) fn from_hash_record(record: &str, left: bool) -> Option<Holder> {
        let (record, kept) = unmark(record);
        let mut words = record.splitn(9, ' ');
        let first = words.next()?.parse::<u64>().ok()?;
        let mode = match words.next()? {
            "r" => HoldMode::Read,
            "w" => HoldMode::Write,
            "s" => HoldMode::Permits,
            _ => HoldMode::Exclusive,
        };
        let owner = words.next()?;
        let count = words.next()?.parse::<u32>().ok()?;
        // A reentrant hold counts its levels where the others count permits.
        let (permits, levels) = if mode == HoldMode::Exclusive {
            (1, count)
        } else {
            (count, 1)
        };
        let fence = words.next()?.parse::<u64>().ok();
        let acquired = words.next()?.parse::<u64>().ok();
        let mut holder = Holder::identity_only(words.next(), words.next(), words.next());
        holder.mode = mode;
        holder.permits = permits;
        holder.levels = levels;
        holder.owner = (owner != "-").then(|| owner.to_owned());
        holder.fence = fence;
        holder.acquired_at = acquired.map(|us| UNIX_EPOCH + Duration::from_micros(us));
        holder.remaining = left.then(|| Duration::from_millis(first));
        // A reentrant hold with no level left is kept too.
        holder.kept = kept || levels == 0;
        Some(holder)
    }

    fn identity_only(pid: Option<&str>, host: Option<&str>, name: Option<&str>) -> Holder {
        Holder {
            pid: pid.and_then(|p| p.parse().ok()),
            host: host.unwrap_or_default().to_owned(),
            client_name: name.unwrap_or_default().to_owned(),
            acquired_at: None,
            remaining: None,
            mode: HoldMode::Exclusive,
            permits: 1,
            levels: 1,
            owner: None,
            fence: None,
            kept: false,
        }
    }

    /// How long this holder had held its lease when Redis read it at
    /// `read_at` ([`LockInfo::read_at`](crate::LockInfo::read_at)); both
    /// times are the Redis server's, so no clocks of two machines are
    /// compared.
    pub fn held_for(&self, read_at: SystemTime) -> Option<Duration> {
        read_at.duration_since(self.acquired_at?).ok()
    }

    /// Whether this holder is the process that asks: its process id and
    /// host are this process's (whatever its client name). A waiter that
    /// finds itself holding the lock it waits for sees its own grant, on
    /// its way to being returned or undone.
    #[must_use]
    pub fn is_this_process(&self) -> bool {
        self.pid == Some(std::process::id())
            && self.host == clean(&host_name(), 255).replace(' ', "_")
    }

    /// "pid 4242 on build-7 (nightly-job)", or "an unnamed holder" for a
    /// record without an identity.
    pub fn describe(&self) -> String {
        let who = match self.pid {
            Some(pid) if self.client_name.is_empty() => format!("pid {pid} on {}", self.host),
            Some(pid) => format!("pid {pid} on {} ({})", self.host, self.client_name),
            None => "a holder that recorded no identity".to_owned(),
        };
        if self.kept {
            format!("{who}, released and kept until its hold-at-least is over")
        } else {
            who
        }
    }
}

/// How a record that a release kept ends (see `KEPT` in `lib.lua`).
const KEPT: &str = "\u{1f}kept";

/// How a mutex's record ends (before [`KEPT`]) once a waiter may be
/// queued behind its holder (see `WAITED` in `lib.lua`).
const WAITED: &str = "\u{1f}w";

/// `record` without the marks of a kept lease and of a waited-for one,
/// and whether it had the first.
fn unmark(record: &str) -> (&str, bool) {
    let (record, kept) = match record.strip_suffix(KEPT) {
        Some(rest) => (rest, true),
        None => (record, false),
    };
    (record.strip_suffix(WAITED).unwrap_or(record), kept)
}

/// What `inspect` saw, on any kind of lock ([`Mutex::inspect`](crate::Mutex::inspect)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// Someone holds the lock.
    pub held: bool,
    /// The time left on the holder's lease; `None` when free (or when the key
    /// was set by hand without an expiry).
    pub remaining: Option<Duration>,
    /// The last fence handed out, if any ever was.
    pub last_fence: Option<u64>,
    /// Waiters in the lock's waiter queue: for a `Mutex` or `FairMutex` one
    /// per waiting client (its other tasks wait behind it locally), for the
    /// other kinds one per waiting task. A waiter that died counts until its
    /// heartbeat runs out.
    pub waiting_clients: u64,
    /// The kind of lock the name holds now: `"mutex"` (a `Mutex` or
    /// `FairMutex`), `"reentrant"`, `"rwlock"` or `"semaphore"`; `None` when
    /// nothing is there. A key leasehold did not write shows its Redis type.
    pub kind: Option<String>,
    /// Every live lease: the one holder of a mutex, the readers or the
    /// writer of an rw-lock, each permit lease of a semaphore.
    pub holders: Vec<Holder>,
    /// A semaphore's permit count.
    pub permits: Option<u32>,
    /// When Redis read this state, by the Redis server's clock: compare a
    /// holder's [`acquired_at`](Holder::acquired_at) with it, not with the
    /// local clock (see [`Holder::held_for`]).
    pub read_at: Option<SystemTime>,
    /// The server that answered, as `host:port`: on a Redis Cluster the
    /// master that serves the lock's hash slot (where its keys live), on
    /// one server that server.
    pub server: String,
    /// What this client knows of that server's replicas: those it lists,
    /// and whether the last acknowledgement asked of them fell short.
    /// `None` where no one server stands behind the answer (a Redlock).
    pub replicas: Option<ReplicaStatus>,
    /// As this client sees it, that server grants no lock for this long
    /// yet: it restarted, or took over from another master, less than the
    /// restart grace ago (see
    /// [`ClientBuilder::restart_grace`](crate::ClientBuilder::restart_grace)).
    pub grace_left: Option<Duration>,
}

/// What a client knows of the replicas of the master behind a lock, as
/// [`LockInfo::replicas`](crate::LockInfo::replicas) shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaStatus {
    /// `host:port` of each replica the master listed connected and in
    /// sync when this client last asked (`INFO replication`).
    pub online: Vec<String>,
    /// `host:port` of each replica that could take over from the master, as
    /// the deployment knows them (a cluster's nodes, the sentinels), cut
    /// off from it or not; empty for a master named directly. A cluster
    /// replica cut off from its master for longer than Redis lets such a
    /// replica be promoted is no longer one of them (see
    /// [`cut_off`](Self::cut_off)). A grant waits for as many replicas as
    /// the longer of the two lists.
    pub promotable: Vec<String>,
    /// The last acknowledgement this client asked for on this master,
    /// when too few replicas gave it: `(acknowledged, asked)`. `None` once
    /// one was had.
    pub last_shortfall: Option<(u32, u32)>,
    /// Each replica that could take over but that the master does not list
    /// in sync (cut off from it, or resynchronising), for how long, and
    /// whether grants still wait for it.
    pub cut_off: Vec<CutOffReplica>,
}

/// A replica that could take over from its master but that the master does
/// not list in sync, as [`ReplicaStatus::cut_off`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CutOffReplica {
    /// `host:port`, as the deployment names it.
    pub address: String,
    /// How long this client has seen the master not list it, at readings
    /// never more than 10 s apart and with no resync of a replica between
    /// them (it may have been cut off for longer).
    pub missing_for: Duration,
    /// On a Redis Cluster, how much longer it could still be promoted:
    /// Redis refuses to promote a replica cut off for longer than
    /// `cluster-node-timeout` × (`cluster-replica-validity-factor` + 1) +
    /// `repl-ping-replica-period` (a failover an operator asks for by hand
    /// excepted); zero once that passed. `None` when nothing bounds it: a
    /// validity factor of 0, or a replica the sentinels could promote.
    pub promotable_for: Option<Duration>,
    /// Grants wait for it: false once it was cut off for longer than it
    /// could be promoted.
    pub waited_for: bool,
    /// The cluster's `cluster-replica-validity-factor` (Redis's default,
    /// 10, where `CONFIG` is refused); `None` behind Sentinel.
    pub validity_factor: Option<u64>,
}

impl CutOffReplica {
    /// Why a grant waits for it, or does not.
    fn why(&self) -> String {
        let missing = format!("not in sync with the master for {:.1?}", self.missing_for);
        match (self.waited_for, self.promotable_for, self.validity_factor) {
            (false, _, _) => format!(
                "{missing}: not waited for, cut off longer than the cluster lets a replica be \
                 promoted"
            ),
            (true, Some(left), _) => {
                format!("{missing}: waited for while it could still be promoted, {left:.1?} more")
            }
            (true, None, Some(0)) => format!(
                "{missing}: waited for, since cluster-replica-validity-factor 0 lets it be \
                 promoted however long it is cut off"
            ),
            (true, None, Some(_)) => {
                format!("{missing}: waited for, since it could still be promoted")
            }
            (true, None, None) => {
                format!("{missing}: waited for while the sentinels could still promote it")
            }
        }
    }
}

/// Its address, and whether grants wait for it, and why.
impl std::fmt::Display for CutOffReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.address, self.why())
    }
}

impl ReplicaStatus {
    /// Every replica named, listed by the master or able to take over; one
    /// cut off from the master says whether it is waited for, and why.
    pub(crate) fn named(&self) -> Vec<String> {
        let mut all = self.online.clone();
        for replica in &self.promotable {
            if !all.contains(replica) {
                all.push(replica.clone());
            }
        }
        for cut in &self.cut_off {
            let named = cut.to_string();
            match all.iter_mut().find(|replica| **replica == cut.address) {
                Some(replica) => *replica = named,
                None => all.push(named),
            }
        }
        all
    }
}

/// One waiter in a lock's waiter queue, as [`Mutex::waiters`](crate::Mutex::waiters)
/// reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// Its place in line, from 1 at the head. A release wakes (for a
    /// `FairMutex`, hands the lock to) the head first.
    pub position: usize,
    /// The waiter's process id, if it recorded one.
    pub pid: Option<u32>,
    /// The host the waiter runs on.
    pub host: String,
    /// The waiter's client name ([`ClientBuilder::name`](crate::ClientBuilder::name)).
    pub client_name: String,
    /// What it waits for: [`HoldMode::Exclusive`] for the mutexes and a
    /// reentrant mutex, a read or the write lease of an rw-lock, or
    /// permits of a semaphore.
    pub wants: HoldMode,
    /// The semaphore permits it asks for (1 for the other kinds).
    pub permits: u32,
    /// When it joined the queue, by the Redis server's clock.
    pub queued_at: Option<SystemTime>,
    /// The waiter belongs to the client that read the queue.
    pub this_client: bool,
}

impl Waiter {
    /// Reads a waiter's record, "hand_off_ms mode want client pid host
    /// name", queued at `queued_us`; `None` for one leasehold did not write.
    pub(crate) fn from_record(
        position: usize,
        queued_us: Option<u64>,
        record: &str,
        client: &str,
    ) -> Option<Waiter> {
        let mut words = record.splitn(7, ' ');
        let _hand_off = words.next()?;
        let wants = match words.next()? {
            "r" => HoldMode::Read,
            "w" => HoldMode::Write,
            "s" => HoldMode::Permits,
            _ => HoldMode::Exclusive,
        };
        let permits = words.next()?.parse::<u32>().ok()?;
        let this_client = words.next()? == client;
        let who = Holder::identity_only(words.next(), words.next(), words.next());
        Some(Waiter {
            position,
            pid: who.pid,
            host: who.host,
            client_name: who.client_name,
            wants,
            permits,
            queued_at: queued_us.map(|us| UNIX_EPOCH + Duration::from_micros(us)),
            this_client,
        })
    }

    /// "pid 4242 on build-7 (nightly-job)".
    pub fn describe(&self) -> String {
        match self.pid {
            Some(pid) if self.client_name.is_empty() => format!("pid {pid} on {}", self.host),
            Some(pid) => format!("pid {pid} on {} ({})", self.host, self.client_name),
            None => "a waiter that recorded no identity".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_reads_back() {
        let id = identity(Some("nightly\njob"));
        let record = format!("1700000000000000 {id}");
        let holder = Holder::from_mutex_record(&record, None);
        assert_eq!(holder.pid, Some(std::process::id()));
        assert_eq!(holder.client_name, "nightly?job");
        assert!(!holder.host.is_empty());
        assert_eq!(
            holder.acquired_at,
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
    }

    #[test]
    fn marks_are_not_part_of_the_name() {
        let marked = Holder::from_mutex_record("1700000000000000 12 host job\u{1f}w", None);
        assert_eq!((marked.client_name.as_str(), marked.kept), ("job", false));
        let kept = Holder::from_mutex_record("1700000000000000 12 host job\u{1f}w\u{1f}kept", None);
        assert_eq!((kept.client_name.as_str(), kept.kept), ("job", true));
    }

    #[test]
    fn long_names_are_cut_on_a_char_boundary() {
        let name = "é".repeat(MAX_CLIENT_NAME_LEN);
        let cut = clean(&name, MAX_CLIENT_NAME_LEN);
        assert_eq!(cut.len(), MAX_CLIENT_NAME_LEN);
    }

    #[test]
    fn hash_records_read_back() {
        let holder =
            Holder::from_hash_record("1500 r owner1 1 77 1700000000000000 12 host a b", true)
                .unwrap();
        assert_eq!(holder.mode, HoldMode::Read);
        assert_eq!(holder.fence, Some(77));
        assert_eq!(holder.remaining, Some(Duration::from_millis(1500)));
        assert_eq!(holder.pid, Some(12));
        assert_eq!(holder.client_name, "a b");
        assert_eq!(holder.owner.as_deref(), Some("owner1"));
        assert_eq!(holder.levels, 1);
        let hold =
            Holder::from_hash_record("900 x job-42 3 77 1700000000000000 12 host a", true).unwrap();
        assert_eq!(
            (hold.mode, hold.levels, hold.permits),
            (HoldMode::Exclusive, 3, 1)
        );
        assert!(Holder::from_hash_record("garbage", true).is_none());
    }
}
