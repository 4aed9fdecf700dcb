//! Which kind of lock `run` and `acquire` take, and taking it with the right
//! face of the library.
//!
//! Every kind hands out the same `LeaseGuard`, and the release and renew
//! scripts serve every kind by token, so the rest of the CLI does not care
//! which kind it holds.

use std::time::Duration;

use clap::Args;

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
    /// LEASEHOLD_FENCE is the fence of the last write
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

impl Kind {
    /// The flag that asks for this kind, as the user would type it.
    fn flag(self) -> Option<String> {
        match self {
            Kind::Mutex => None,
            Kind::Fair => Some("--fair".to_owned()),
            Kind::Read => Some("--read".to_owned()),
            Kind::Write => Some("--write".to_owned()),
            Kind::Semaphore(n) => Some(format!("--semaphore {n}")),
        }
    }
}

/// The lock `run` and `acquire` take, through the face of its kind.
#[derive(Debug)]
pub(crate) enum Lock {
    Plain(leasehold::Mutex),
    Fair(leasehold::FairMutex),
    /// The side is chosen at each acquisition: the settings live on the
    /// whole lock.
    Rw(leasehold::RwLock, Side),
    Semaphore(leasehold::Semaphore),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Read,
    Write,
}

/// `$body` with `$face` bound to the face that takes `$lock`.
macro_rules! on_face {
    ($lock:expr, $face:ident => $body:expr) => {
        match $lock {
            Lock::Plain($face) => $body,
            Lock::Fair($face) => $body,
            Lock::Rw(rw, Side::Read) => {
                let $face = rw.read();
                $body
            }
            Lock::Rw(rw, Side::Write) => {
                let $face = rw.write();
                $body
            }
            Lock::Semaphore($face) => $body,
        }
    };
}

impl Lock {
    pub(crate) fn new(
        client: &leasehold::Client,
        name: &str,
        kind: Kind,
    ) -> leasehold::Result<Self> {
        Ok(match kind {
            Kind::Mutex => Lock::Plain(client.mutex(name)?),
            Kind::Fair => Lock::Fair(client.fair_mutex(name)?),
            // Each process is an owner of its own.
            Kind::Read => Lock::Rw(client.rw_lock(name)?, Side::Read),
            Kind::Write => Lock::Rw(client.rw_lock(name)?, Side::Write),
            Kind::Semaphore(n) => Lock::Semaphore(client.semaphore(name, n)?),
        })
    }

    /// The same lock, kept until `hold` has passed since it was taken
    /// when released sooner.
    pub(crate) fn with_hold_at_least(self, hold: Duration) -> leasehold::Result<Self> {
        Ok(match self {
            Lock::Plain(mutex) => Lock::Plain(mutex.with_hold_at_least(hold)?),
            Lock::Fair(mutex) => Lock::Fair(mutex.with_hold_at_least(hold)?),
            Lock::Rw(rw, side) => Lock::Rw(rw.with_hold_at_least(hold)?, side),
            Lock::Semaphore(sem) => Lock::Semaphore(sem.with_hold_at_least(hold)?),
        })
    }

    /// The same lock, renewed no further than `max` after it was taken.
    pub(crate) fn with_max_hold(self, max: Duration) -> leasehold::Result<Self> {
        Ok(match self {
            Lock::Plain(mutex) => Lock::Plain(mutex.with_max_hold(max)?),
            Lock::Fair(mutex) => Lock::Fair(mutex.with_max_hold(max)?),
            Lock::Rw(rw, side) => Lock::Rw(rw.with_max_hold(max)?, side),
            Lock::Semaphore(sem) => Lock::Semaphore(sem.with_max_hold(max)?),
        })
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            Lock::Plain(mutex) => mutex.name(),
            Lock::Fair(mutex) => mutex.name(),
            Lock::Rw(rw, _) => rw.name(),
            Lock::Semaphore(sem) => sem.name(),
        }
    }

    /// The lock's state as Redis sees it now.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub(crate) async fn inspect(&self) -> leasehold::Result<leasehold::LockInfo> {
        match self {
            Lock::Plain(mutex) => mutex.inspect().await,
            Lock::Fair(mutex) => mutex.inspect().await,
            Lock::Rw(rw, _) => rw.inspect().await,
            Lock::Semaphore(sem) => sem.inspect().await,
        }
    }

    /// One attempt.
    ///
    /// # Errors
    ///
    /// As the face's `try_acquire`: `Conflict` when the name is in use by
    /// another kind of lock or a semaphore of another size.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as every face's `try_acquire`.
    pub(crate) async fn try_acquire(&self) -> leasehold::Result<Option<leasehold::LeaseGuard>> {
        on_face!(self, face => face.try_acquire().await)
    }

    /// Waits as long as it takes.
    ///
    /// # Errors
    ///
    /// As the face's `acquire`: `Conflict` when the name is in use by
    /// another kind of lock or a semaphore of another size.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as every face's `acquire`.
    pub(crate) async fn acquire(&self) -> leasehold::Result<leasehold::LeaseGuard> {
        on_face!(self, face => face.acquire().await)
    }

    /// Waits at most `wait`.
    ///
    /// # Errors
    ///
    /// As the face's `acquire_timeout`: `Conflict` when the name is in use by
    /// another kind of lock or a semaphore of another size.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as every face's `acquire_timeout`.
    pub(crate) async fn acquire_timeout(
        &self,
        wait: Duration,
    ) -> leasehold::Result<leasehold::LeaseGuard> {
        on_face!(self, face => face.acquire_timeout(wait).await)
    }
}

/// The client name a command's leases carry, so that `inspect` shows who
/// holds a lock: "leasehold run nightly --read -- ./job.sh --full", cut to
/// the longest name a lease records. Only the lock's name, the kind flag and
/// the command are kept: the connection flags may carry a password.
pub(crate) fn client_name(subcommand: &str, name: &str, kind: Kind, command: &[String]) -> String {
    let mut words = vec!["leasehold".to_owned(), subcommand.to_owned(), quote(name)];
    words.extend(kind.flag());
    if !command.is_empty() {
        words.push("--".to_owned());
        words.extend(command.iter().map(|arg| quote(arg)));
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
            client_name("run", "nightly", Kind::Mutex, &words(&["./job.sh"])),
            "leasehold run nightly -- ./job.sh"
        );
        assert_eq!(
            client_name(
                "run",
                "db",
                Kind::Semaphore(3),
                &words(&["sh", "-c", "echo it's $HOME"])
            ),
            r#"leasehold run db --semaphore 3 -- sh -c 'echo it'\''s $HOME'"#
        );
        assert_eq!(
            client_name("acquire", "cfg", Kind::Read, &[]),
            "leasehold acquire cfg --read"
        );
    }

    #[test]
    fn a_long_client_name_is_cut_on_a_char_boundary() {
        let long = words(&["echo", &"é".repeat(200)]);
        let name = client_name("run", "job", Kind::Write, &long);
        assert!(name.len() <= leasehold::MAX_CLIENT_NAME_LEN, "{name}");
        assert!(name.starts_with("leasehold run job --write -- echo '"));
        assert!(name.ends_with("..."), "{name}");
    }
}
