//! Which kind of lock `run` and `acquire` take, and taking it with the right
//! face of the library.
//!
//! Every kind hands out the same `LeaseGuard`, and the release and renew
//! scripts serve every kind by token, so the rest of the CLI does not care
//! which kind it holds.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use leasehold::{LeaseGuard, LockFuture, MultiGuard, MultiLock};

/// Where a command takes its locks: the client of one deployment, or of a
/// Redlock's masters (which takes mutexes alone).
#[derive(Debug)]
pub(crate) struct Locker {
    pub(crate) client: leasehold::Client,
    /// How many masters, on a Redlock.
    pub(crate) masters: Option<usize>,
}

impl Locker {
    /// Refuses, in the command's words, what a Redlock does not offer.
    pub(crate) fn refuse_on_redlock(&self, given: bool, message: &str) -> anyhow::Result<()> {
        if self.masters.is_some() && given {
            return Err(crate::exit::Fail {
                code: crate::exit::USAGE,
                message: message.to_owned(),
            }
            .into());
        }
        Ok(())
    }
}

/// The kind flags; at most one of them.
#[derive(Debug, Clone, Args)]
#[group(multiple = false)]
pub(crate) struct KindArgs {
    /// Take the lock in turn: waiters are served in the order they arrived,
    /// across every process (a fair lock; `release` and `extend` need no flag)
    #[arg(long)]
    pub(crate) fair: bool,
    /// Take a read share of a read-write lock: many readers at once, never
    /// with a writer. Readers that arrive after a waiting writer go after it.
    /// LEASEHOLD_FENCE is past the last write's, shared by readers holding together
    #[arg(long)]
    pub(crate) read: bool,
    /// Take the write side of a read-write lock: alone, with no reader. A
    /// name is either a read-write lock or a plain lock, never both
    #[arg(long)]
    pub(crate) write: bool,
    /// Take one permit of a semaphore of N permits: at most N holders at
    /// once. Every user of the name must give the same N
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(leasehold::MAX_PERMITS)))]
    pub(crate) semaphore: Option<u32>,
}

/// The kind of lock asked for on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Mutex,
    Fair,
    Read,
    Write,
    Semaphore(u32),
}

impl From<&KindArgs> for Kind {
    fn from(args: &KindArgs) -> Self {
        match args {
            KindArgs { fair: true, .. } => Kind::Fair,
            KindArgs { read: true, .. } => Kind::Read,
            KindArgs { write: true, .. } => Kind::Write,
            KindArgs {
                semaphore: Some(n), ..
            } => Kind::Semaphore(*n),
            _ => Kind::Mutex,
        }
    }
}

/// The lock `run` and `acquire` take, through the face of its kind.
pub(crate) type Lock = Box<dyn leasehold::Lock>;

/// What `run` and `acquire` set on the lock besides its kind.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Holding {
    /// Kept until this has passed since it was taken when released sooner.
    pub(crate) at_least: Option<Duration>,
    /// Renewed no further than this after it was taken.
    pub(crate) at_most: Option<Duration>,
    /// `--replicas` was given (which a Redlock refuses).
    pub(crate) replicas_given: bool,
}

/// The lock `name` of `kind`, through the face of that kind, with
/// `holding`'s settings.
pub(crate) fn lock(
    client: &leasehold::Client,
    name: &str,
    kind: Kind,
    holding: Holding,
) -> leasehold::Result<Lock> {
    let mut lock: Lock = match kind {
        Kind::Mutex => Box::new(client.mutex(name)?),
        Kind::Fair => Box::new(client.fair_mutex(name)?),
        // Each process is an owner of its own.
        Kind::Read => Box::new(client.rw_lock(name)?.read()),
        Kind::Write => Box::new(client.rw_lock(name)?.write()),
        Kind::Semaphore(n) => Box::new(client.semaphore(name, n)?),
    };
    let mut settings = lock.settings();
    settings.hold_at_least = holding.at_least.or(settings.hold_at_least);
    settings.max_hold = holding.at_most.or(settings.max_hold);
    lock.set_settings(settings)?;
    Ok(lock)
}

/// The lock `name` of `kind` on `locker`. A Redlock offers the mutex
/// alone, without replica acknowledgement.
pub(crate) fn taken_lock(
    locker: &Locker,
    name: &str,
    kind: Kind,
    holding: Holding,
) -> anyhow::Result<Lock> {
    locker.refuse_on_redlock(
        kind != Kind::Mutex,
        "--redlock takes a mutex only: a fair queue, read and write shares and semaphore \
         permits are state that every master would have to agree on step by step, which a \
         majority vote per acquisition does not give; drop --fair/--read/--write/--semaphore, \
         or use --url",
    )?;
    locker.refuse_on_redlock(
        holding.replicas_given,
        "--replicas does not apply to --redlock: its masters are independent, and a majority \
         of them stands for the replicas",
    )?;
    Ok(lock(&locker.client, name, kind, holding)?)
}

/// What `run` and `acquire` take: one lock, or several together.
pub(crate) trait Take {
    type Guard;

    /// The lock the status line and a busy error speak of: of several, the
    /// one being taken now.
    fn shown(&self) -> &Lock;

    async fn try_take(&self) -> leasehold::Result<Option<Self::Guard>>;

    /// Waits at most `wait`, or forever.
    async fn take(&self, wait: Option<Duration>) -> leasehold::Result<Self::Guard>;
}

impl Take for Lock {
    type Guard = LeaseGuard;

    fn shown(&self) -> &Lock {
        self
    }

    async fn try_take(&self) -> leasehold::Result<Option<LeaseGuard>> {
        self.try_acquire().await
    }

    async fn take(&self, wait: Option<Duration>) -> leasehold::Result<LeaseGuard> {
        match wait {
            Some(wait) => self.acquire_timeout(wait).await,
            None => self.acquire().await,
        }
    }
}

/// The locks `run` takes, all or none, through the library's `MultiLock`,
/// and a view of the one it is taking now.
#[derive(Debug)]
pub(crate) struct Locks {
    multi: MultiLock,
    now: Lock,
}

impl Take for Locks {
    type Guard = MultiGuard;

    fn shown(&self) -> &Lock {
        &self.now
    }

    async fn try_take(&self) -> leasehold::Result<Option<MultiGuard>> {
        self.multi.try_acquire().await
    }

    async fn take(&self, wait: Option<Duration>) -> leasehold::Result<MultiGuard> {
        match wait {
            Some(wait) => self.multi.acquire_timeout(wait).await,
            None => self.multi.acquire().await,
        }
    }
}

/// The locks `names` of `kind`, to be taken together.
pub(crate) fn locks(
    locker: &Locker,
    names: &[String],
    kind: Kind,
    holding: Holding,
) -> anyhow::Result<Locks> {
    let locks = names
        .iter()
        .map(|name| taken_lock(locker, name, kind, holding).map(Arc::new))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let taking = Arc::new(AtomicUsize::new(0));
    let members: Vec<Lock> = locks
        .iter()
        .enumerate()
        .map(|(index, lock)| {
            Box::new(Member {
                lock: Arc::clone(lock),
                index,
                taking: Arc::clone(&taking),
            }) as Lock
        })
        .collect();
    let multi = MultiLock::new(members)?;
    // Before the first attempt, the first lock in the order they are taken.
    let first = locks
        .iter()
        .enumerate()
        .min_by(|(_, a), (_, b)| a.key().cmp(b.key()))
        .map_or(0, |(index, _)| index);
    taking.store(first, Ordering::Relaxed);
    Ok(Locks {
        multi,
        now: Box::new(Taking { locks, taking }),
    })
}

/// One lock of a `Locks`: notes that it is the one being taken.
#[derive(Debug)]
struct Member {
    lock: Arc<Lock>,
    index: usize,
    taking: Arc<AtomicUsize>,
}

impl Member {
    fn note<'a, T>(&self, attempt: LockFuture<'a, T>) -> LockFuture<'a, T> {
        self.taking.store(self.index, Ordering::Relaxed);
        attempt
    }
}

impl leasehold::Lock for Member {
    fn name(&self) -> &str {
        self.lock.name()
    }

    fn key(&self) -> &str {
        self.lock.key()
    }

    fn settings(&self) -> leasehold::LockSettings {
        self.lock.settings()
    }

    fn try_acquire(&self) -> LockFuture<'_, Option<LeaseGuard>> {
        self.note(self.lock.try_acquire())
    }

    fn acquire(&self) -> LockFuture<'_, LeaseGuard> {
        self.note(self.lock.acquire())
    }

    fn acquire_timeout(&self, wait: Duration) -> LockFuture<'_, LeaseGuard> {
        self.note(self.lock.acquire_timeout(wait))
    }

    fn release_token<'a>(&'a self, token: &'a str) -> LockFuture<'a, ()> {
        self.lock.release_token(token)
    }

    fn extend_token<'a>(&'a self, token: &'a str, lease: Duration) -> LockFuture<'a, ()> {
        self.lock.extend_token(token, lease)
    }

    fn force_release(&self) -> LockFuture<'_, bool> {
        self.lock.force_release()
    }

    fn inspect(&self) -> LockFuture<'_, leasehold::LockInfo> {
        self.lock.inspect()
    }
}

/// The lock of a `Locks` being taken now (or last): what the status line
/// shows and a busy error names.
#[derive(Debug)]
struct Taking {
    locks: Vec<Arc<Lock>>,
    taking: Arc<AtomicUsize>,
}

impl Taking {
    fn now(&self) -> &Lock {
        // `taking` is always an index of `locks`.
        &self.locks[self.taking.load(Ordering::Relaxed)]
    }
}

impl leasehold::Lock for Taking {
    fn name(&self) -> &str {
        self.now().name()
    }

    fn key(&self) -> &str {
        self.now().key()
    }

    fn settings(&self) -> leasehold::LockSettings {
        self.now().settings()
    }

    fn try_acquire(&self) -> LockFuture<'_, Option<LeaseGuard>> {
        self.now().try_acquire()
    }

    fn acquire(&self) -> LockFuture<'_, LeaseGuard> {
        self.now().acquire()
    }

    fn acquire_timeout(&self, wait: Duration) -> LockFuture<'_, LeaseGuard> {
        self.now().acquire_timeout(wait)
    }

    fn release_token<'a>(&'a self, token: &'a str) -> LockFuture<'a, ()> {
        self.now().release_token(token)
    }

    fn extend_token<'a>(&'a self, token: &'a str, lease: Duration) -> LockFuture<'a, ()> {
        self.now().extend_token(token, lease)
    }

    fn force_release(&self) -> LockFuture<'_, bool> {
        self.now().force_release()
    }

    fn inspect(&self) -> LockFuture<'_, leasehold::LockInfo> {
        self.now().inspect()
    }
}

/// The client name a command's leases carry, so that `inspect` shows who
/// holds a lock: the command line as it was typed ("leasehold run nightly
/// --read --no-wait --hold-at-least 10m -- ./job.sh --full"), cut to the
/// longest name a lease records. `--url` and its value are left out: a URL
/// may carry a password.
pub(crate) fn client_name() -> String {
    // A command's arguments need not be UTF-8.
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    client_name_from(&args)
}

/// As [`client_name`], for the words after the program's name.
fn client_name_from(args: &[String]) -> String {
    let mut words = vec!["leasehold".to_owned()];
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        // URLs may carry passwords: they are not recorded.
        if arg == "--url" || arg == "--redlock" {
            args.next();
            continue;
        }
        if arg.starts_with("--url=") || arg.starts_with("--redlock=") {
            continue;
        }
        words.push(quote(arg));
    }
    cut(&words.join(" "), leasehold::MAX_CLIENT_NAME_LEN)
}

/// `word` as a shell would need it to read it back as one word.
fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%^".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// `text` cut to at most `max` bytes on a char boundary, ending in "..." when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    const MORE: &str = "...";
    let mut end = max.saturating_sub(MORE.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MORE}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn the_client_name_reads_as_the_command_line() {
        assert_eq!(
            client_name_from(&words(&["run", "nightly", "--", "./job.sh"])),
            "leasehold run nightly -- ./job.sh"
        );
        assert_eq!(
            client_name_from(&words(&[
                "--url",
                "redis://:secret@db:6379",
                "run",
                "db",
                "--semaphore",
                "3",
                "--no-wait",
                "--hold-at-least",
                "10m",
                "--",
                "sh",
                "-c",
                "echo it's $HOME",
            ])),
            r#"leasehold run db --semaphore 3 --no-wait --hold-at-least 10m -- sh -c 'echo it'\''s $HOME'"#
        );
        assert_eq!(
            client_name_from(&words(&[
                "--url=redis://:pw@h:1",
                "acquire",
                "cfg",
                "--read"
            ])),
            "leasehold acquire cfg --read"
        );
    }

    #[test]
    fn a_long_client_name_is_cut_on_a_char_boundary() {
        let long = words(&["run", "job", "--write", "--", "echo", &"é".repeat(200)]);
        let name = client_name_from(&long);
        assert!(name.len() <= leasehold::MAX_CLIENT_NAME_LEN, "{name}");
        assert!(name.starts_with("leasehold run job --write -- echo '"));
        assert!(name.ends_with("..."), "{name}");
    }
}
