//! The command line, as clap reads it.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::duration;

/// Distributed locks on Redis: run a command under a lock, or take and give
/// back locks from shell scripts.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) connection: Connection,
    #[command(subcommand)]
    pub(crate) command: Command,
}

const EXIT_CODES: &str = "Exit codes: the command's own for `run` when the lease held; \
0 done; 1 unexpected error, or `demo` lost an update; 2 usage; 69 Redis unreachable (or, \
for `demo`, redis-server not installed); 75 lock busy (wait ran out or \
--no-wait); 76 lease lost or its release unanswered (unless --on-lost ignore), lease ran out \
before the command could start, or token no longer holds the lock; 77 Redis refused the \
credentials; 78 Redis refused the connection settings (database number, TLS); 128+N a signal \
ended `run`'s wait or stopped `demo`.";

/// Where the locks live; shared by every subcommand.
#[derive(Debug, Args)]
pub(crate) struct Connection {
    /// Redis URL [default: $LEASEHOLD_URL, else $REDIS_URL, else redis://127.0.0.1:6379]
    #[arg(long, global = true)]
    url: Option<String>,
    /// First part of every key; processes that share locks use the same prefix
    #[arg(long, global = true, default_value = leasehold::DEFAULT_PREFIX)]
    pub(crate) prefix: String,
}

impl Connection {
    /// `--url` was on the command line (the environment does not count).
    pub(crate) fn url_given(&self) -> bool {
        self.url.is_some()
    }

    pub(crate) fn client(
        &self,
        lease: Duration,
        watchdog: bool,
        restart_grace: Option<Duration>,
    ) -> leasehold::Result<leasehold::Client> {
        let builder = match &self.url {
            Some(url) => leasehold::Client::builder(url.clone()),
            None => leasehold::ClientBuilder::from_env(),
        };
        let mut builder = builder
            .prefix(self.prefix.clone())
            .lease(lease)
            .watchdog(watchdog);
        if let Some(grace) = restart_grace {
            builder = builder.restart_grace(grace);
        }
        builder.build()
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Start here: workers contend for one lock on a private redis-server, live
    Demo(DemoArgs),
    /// Run a command while holding a lock; the lease is renewed while it runs
    Run(RunArgs),
    /// Take a lock with a fixed lease and print its token and fence (for shell scripts)
    Acquire(AcquireArgs),
    /// Release a lock taken with `acquire`
    Release(TokenArgs),
    /// Set the remaining lease of a lock taken with `acquire`
    Extend(ExtendArgs),
    /// Show whether a lock is held, its remaining lease and its last fence
    Inspect(InspectArgs),
    /// Remove a stuck lock whoever holds it, and wake its waiters (admin)
    ForceRelease(NameArgs),
    /// Show locks live: held or free, last fence, lease left, clients waiting
    Watch(WatchArgs),
    /// Show who leads an election: `FENCE VALUE`, or nothing when nobody does
    Leader(crate::leader::LeaderArgs),
}

/// How long to wait for a busy lock.
#[derive(Debug, Args)]
#[group(multiple = false)]
pub(crate) struct WaitArgs {
    /// Wait at most this long for the lock (e.g. 500ms, 30s, 5m) [default: forever]
    #[arg(long, value_name = "DUR", value_parser = duration::parse)]
    pub(crate) wait: Option<Duration>,
    /// Do not wait: exit 75 at once if the lock is held
    #[arg(long)]
    pub(crate) no_wait: bool,
}

/// How the lock is taken, for the commands that take one.
#[derive(Debug, Args)]
pub(crate) struct TakeArgs {
    /// Take the lock in turn: waiters are served in the order they arrived,
    /// across every process (a fair lock; `release` and `extend` need no flag)
    #[arg(long)]
    pub(crate) fair: bool,
    /// For Redis without persistence, where a restart forgets every lock:
    /// take no lock from a server that has been up for less than DUR, so
    /// that holders from before the restart have passed their deadline. Set
    /// it to at least the lease [default: off]
    #[arg(long, value_name = "DUR", value_parser = duration::parse)]
    pub(crate) restart_grace: Option<Duration>,
}

/// What to do to the command when its lease is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnLost {
    /// SIGTERM to the command's process group, SIGKILL 10 s later
    Term,
    /// SIGKILL to the command's process group at once
    Kill,
    /// Only warn; the command goes on unprotected
    Ignore,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The lock's name
    pub(crate) name: String,
    #[command(flatten)]
    pub(crate) wait: WaitArgs,
    #[command(flatten)]
    pub(crate) take: TakeArgs,
    /// Lease length, renewed at a third of it while the command runs
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration::parse)]
    pub(crate) lease: Duration,
    /// For run-once jobs: if the command ends sooner, keep the lock until
    /// DUR has passed since it was taken, so that a run started elsewhere
    /// within DUR (cron on every host) finds it busy [default: off]
    #[arg(long, value_name = "DUR", value_parser = duration::parse)]
    pub(crate) hold_at_least: Option<Duration>,
    /// Renew the lease no further than DUR after it was taken: a command
    /// still running then loses the lease (see --on-lost; exit 76) [default: no cap]
    #[arg(long, value_name = "DUR", value_parser = duration::parse)]
    pub(crate) max_hold: Option<Duration>,
    /// What to do to the command if the lease is lost
    #[arg(long, value_enum, default_value_t = OnLost::Term)]
    pub(crate) on_lost: OnLost,
    /// The command and its arguments; it gets LEASEHOLD_FENCE and LEASEHOLD_NAME
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct AcquireArgs {
    /// The lock's name
    pub(crate) name: String,
    /// Lease length; it is not renewed (use `extend`)
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration::parse)]
    pub(crate) lease: Duration,
    #[command(flatten)]
    pub(crate) wait: WaitArgs,
    #[command(flatten)]
    pub(crate) take: TakeArgs,
    /// Print JSON instead of `TOKEN FENCE`
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct TokenArgs {
    /// The lock's name
    pub(crate) name: String,
    /// The token printed by `acquire`
    pub(crate) token: String,
}

#[derive(Debug, Args)]
pub(crate) struct ExtendArgs {
    #[command(flatten)]
    pub(crate) lock: TokenArgs,
    /// The new remaining lease, from now
    #[arg(long, value_name = "DUR", value_parser = duration::parse)]
    pub(crate) lease: Duration,
}

#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// The lock's name
    pub(crate) name: String,
    /// Print JSON
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct NameArgs {
    /// The lock's name
    pub(crate) name: String,
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Workers, each with a client of its own, as separate processes would have
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) workers: u16,
    /// How long the workers run
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) seconds: u64,
    /// Use the fair lock (FairMutex): the workers are served in the order they lined up
    #[arg(long)]
    pub(crate) fair: bool,
    /// Print only the summary, as one JSON object
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// The locks' names
    #[arg(required = true, value_name = "NAME")]
    pub(crate) names: Vec<String>,
    /// Print one snapshot and exit
    #[arg(long)]
    pub(crate) once: bool,
    /// With --once: print one JSON object per lock, one a line
    #[arg(long, requires = "once")]
    pub(crate) json: bool,
}
