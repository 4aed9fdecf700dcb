//! The command line, as clap reads it.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::duration::{self, Dur};
use crate::kind::{KindArgs, Locker};

/// Distributed locks on Redis: run a command under a lock, or take and give
/// back locks from shell scripts.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) connection: Connection,
    /// Print JSON on stdout: the result as one object (`watch --once`: one
    /// per lock, a line each; `watch --until-free`: one per ended lease and
    /// per free lock, a line each; `run`: one about the lock, after the
    /// command's own output), or on failure {"error", "message", "exit"}
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

const EXIT_CODES: &str = "Exit codes: the command's own for `run` when the lease held; \
0 done; 1 unexpected error, or `demo` lost an update; 2 usage; 65 the name is in use by \
another kind of lock, or by a semaphore of another size; 69 Redis unreachable or not \
ready (or, for `demo`, redis-server not installed); 75 lock busy (wait ran out or \
--no-wait); 76 lease lost or its release unanswered (unless --on-lost ignore), lease ran out \
before the command could start, or token no longer holds the lock; 77 Redis refused the \
credentials; 78 Redis refused the connection settings (database number, TLS), or the URL names a \
replica, a Sentinel or a port where no Redis listens; 128+N a signal \
ended `run`'s wait or stopped `demo`. With --json a failure also prints {\"error\", \"message\", \
\"exit\"} on stdout.";

/// Where the locks live; shared by every subcommand.
#[derive(Debug, Args)]
pub(crate) struct Connection {
    /// Redis URL [default: $LEASEHOLD_URL, else $REDIS_URL, else redis://127.0.0.1:6379]. A
    /// node of a Redis Cluster is found out as one; repeat --url (or separate URLs with commas)
    /// to give several seeds of a cluster, tried in turn
    #[arg(long, global = true, value_delimiter = ',')]
    url: Vec<String>,
    /// First part of every key; processes that share locks use the same prefix
    #[arg(long, global = true, default_value = leasehold::DEFAULT_PREFIX)]
    pub(crate) prefix: String,
    /// How long a wait goes on while Redis has never been reached (a wrong host or port, a
    /// server not started) before it ends with exit 69 and the reason; once Redis has
    /// answered, waits ride out outages [default: 10s]
    #[arg(long, global = true, value_name = "DUR", value_parser = duration::up_to_a_day)]
    connect_timeout: Option<Dur>,
    /// How long one command to Redis may take before Redis counts as not answering it (10ms
    /// to 60s): raise it for a Redis that is slow or far away, and keep it well below a third
    /// of the lease, so that a renewal that gets no answer is noticed in time [default: 2s]
    #[arg(long, global = true, value_name = "DUR", value_parser = duration::command_timeout)]
    command_timeout: Option<Dur>,
    /// Take the lock on N independent Redis masters (Redlock) instead of one deployment: their
    /// URLs, at least 3, separated by commas [default: $LEASEHOLD_REDLOCK unless --url is
    /// given]. The lock is held while a majority of the masters hold it; only the mutex is
    /// offered (no --fair, --read, --write, --semaphore or --replicas)
    #[arg(long, global = true, value_delimiter = ',', value_name = "URL,URL,...")]
    redlock: Vec<String>,
}

impl Connection {
    /// The Redlock masters, from `--redlock`, else from `$LEASEHOLD_REDLOCK`
    /// when `--url` is not given; `None` for one deployment.
    pub(crate) fn redlock(
        &self,
        lease: Duration,
        watchdog: bool,
        restart_grace: Option<Duration>,
    ) -> anyhow::Result<Option<leasehold::Redlock>> {
        let urls: Vec<String> = if !self.redlock.is_empty() {
            if self.url_given() {
                return Err(crate::exit::Fail {
                    code: crate::exit::USAGE,
                    message: "give --url (one deployment) or --redlock (several independent \
                              masters), not both"
                        .to_owned(),
                }
                .into());
            }
            self.redlock.clone()
        } else if self.url_given() {
            return Ok(None);
        } else {
            match std::env::var(leasehold::REDLOCK_ENV_VAR) {
                Ok(urls) if !urls.trim().is_empty() => {
                    urls.split(',').map(|url| url.trim().to_owned()).collect()
                }
                _ => return Ok(None),
            }
        };
        let mut builder = leasehold::Redlock::builder(urls)
            .prefix(self.prefix.clone())
            .lease(lease)
            .watchdog(watchdog)
            .name(crate::kind::client_name());
        if let Some(grace) = restart_grace {
            builder = builder.restart_grace(grace);
        }
        if let Some(timeout) = &self.command_timeout {
            builder = builder.command_timeout(timeout.get());
        }
        Ok(Some(builder.build()?))
    }

    /// The client locks are taken through: a Redlock's when masters are
    /// given (`--redlock`, or `$LEASEHOLD_REDLOCK` without `--url`), else
    /// the one deployment's that `one` builds.
    pub(crate) fn locker(
        &self,
        lease: Duration,
        watchdog: bool,
        restart_grace: Option<Duration>,
        one: impl FnOnce(leasehold::ClientBuilder) -> leasehold::ClientBuilder,
    ) -> anyhow::Result<Locker> {
        Ok(match self.redlock(lease, watchdog, restart_grace)? {
            Some(redlock) => Locker {
                client: redlock.client().clone(),
                masters: Some(redlock.addresses().len()),
            },
            None => Locker {
                client: one(self.builder(lease, watchdog, restart_grace)).build()?,
                masters: None,
            },
        })
    }

    /// How long a loop that has never reached Redis goes on (`watch`), as a
    /// wait does.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
            .as_ref()
            .map_or(leasehold::DEFAULT_CONNECT_TIMEOUT, Dur::get)
    }

    /// `--redlock` was on the command line.
    pub(crate) fn redlock_given(&self) -> bool {
        !self.redlock.is_empty()
    }

    /// `--url` was on the command line (the environment does not count).
    pub(crate) fn url_given(&self) -> bool {
        !self.url.is_empty()
    }

    /// The master name of a `redis+sentinel://` (or `rediss+sentinel://`)
    /// URL, from `--url` or the environment; `None` for another URL. What
    /// `inspect` and `watch` print says the server they read is that
    /// master, as its sentinels name it.
    pub(crate) fn sentinel_master(&self) -> Option<String> {
        let url = if self.url.is_empty() {
            leasehold::URL_ENV_VARS
                .iter()
                .find_map(|name| std::env::var(name).ok().filter(|url| !url.is_empty()))?
        } else {
            self.url.join(",")
        };
        let rest = url
            .trim()
            .strip_prefix("redis+sentinel://")
            .or_else(|| url.trim().strip_prefix("rediss+sentinel://"))?;
        let path = rest.split(['?', '#']).next()?.split_once('/')?.1;
        let name = path.split('/').next()?;
        (!name.is_empty()).then(|| name.to_owned())
    }

    pub(crate) fn client(
        &self,
        lease: Duration,
        watchdog: bool,
        restart_grace: Option<Duration>,
    ) -> leasehold::Result<leasehold::Client> {
        self.builder(lease, watchdog, restart_grace).build()
    }

    /// The client's settings, for a caller that adds its own.
    pub(crate) fn builder(
        &self,
        lease: Duration,
        watchdog: bool,
        restart_grace: Option<Duration>,
    ) -> leasehold::ClientBuilder {
        let builder = if self.url.is_empty() {
            leasehold::ClientBuilder::from_env()
        } else {
            leasehold::Client::builder(self.url.join(","))
        };
        let mut builder = builder
            .prefix(self.prefix.clone())
            .lease(lease)
            .watchdog(watchdog);
        if let Some(grace) = restart_grace {
            builder = builder.restart_grace(grace);
        }
        if let Some(timeout) = &self.connect_timeout {
            builder = builder.connect_timeout(timeout.get());
        }
        if let Some(timeout) = &self.command_timeout {
            builder = builder.command_timeout(timeout.get());
        }
        builder
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Start here: workers contend for one lock on a private redis-server (or cluster), live
    Demo(DemoArgs),
    /// Run a command while holding a lock, or several (all or none); the lease is renewed while
    /// it runs
    Run(RunArgs),
    /// Take a lock with a fixed lease and print its token and fence (for shell scripts)
    Acquire(AcquireArgs),
    /// Release a lock taken with `acquire`
    Release(ReleaseArgs),
    /// Set the remaining lease of a lock taken with `acquire`
    Extend(ExtendArgs),
    /// Show whether a lock is held, its remaining lease and its last fence
    Inspect(InspectArgs),
    /// Remove a stuck lock whoever holds it, and wake its waiters (admin);
    /// of a read-write lock, --read or --write removes one side alone
    ForceRelease(ForceReleaseArgs),
    /// Show locks live: held or free, last fence, lease left, waiters; or
    /// wait until others let go of them (--until-free)
    Watch(WatchArgs),
    /// Print a shell completion script: `leasehold completions bash > /etc/bash_completion.d/leasehold`
    Completions(CompletionsArgs),
    /// Print the manual page (roff): `leasehold man > leasehold.1`
    Man(ManArgs),
    /// Show who leads an election: `FENCE VALUE`, or nothing when nobody does
    Leader(LeaderArgs),
    /// Change a semaphore's permit count, or delete it (admin)
    Semaphore(SemaphoreArgs),
    /// List leasehold's Redis Functions libraries on every master, and
    /// remove those of older versions no connected client calls (admin)
    Libraries(LibrariesArgs),
}

/// How long to wait for a busy lock.
#[derive(Debug, Args)]
#[group(multiple = false)]
pub(crate) struct WaitArgs {
    /// Wait at most this long for the lock (e.g. 500ms, 1.5s, 1m30s, 2h; at
    /// most 24h) [default: forever]
    #[arg(long, value_name = "DUR", value_parser = duration::up_to_a_day)]
    pub(crate) wait: Option<Dur>,
    /// Do not wait: exit 75 at once if the lock is held
    #[arg(long)]
    pub(crate) no_wait: bool,
}

/// How the lock is taken, for the commands that take one.
#[derive(Debug, Args)]
pub(crate) struct TakeArgs {
    /// Which kind of lock: a mutex unless a kind flag says otherwise
    #[command(flatten)]
    pub(crate) kind: KindArgs,
    /// For Redis without persistence, where a restart forgets every lock:
    /// take no lock from a server that has been up for less than DUR, so
    /// that holders from before the restart have passed their deadline. Set
    /// it to at least the lease [default: off]
    #[arg(long, value_name = "DUR", value_parser = duration::up_to_a_day)]
    pub(crate) restart_grace: Option<Dur>,
    #[command(flatten)]
    pub(crate) replicas: ReplicaArgs,
    /// Print no status line while waiting for the lock (by default, after
    /// a second, one on stderr says how long the wait has lasted and what
    /// Redis says of the lock: held, lease left, last fence, waiters)
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

/// Replica acknowledgement of a grant or an extend.
#[derive(Debug, Args)]
pub(crate) struct ReplicaArgs {
    /// Wait for N replicas to acknowledge each grant (WAIT, in the same
    /// round trip); fewer undo it, and a wait tries again until its end
    /// (without --wait, for the connect timeout) and exits 74. 0 turns it
    /// off: faster on a replicated master, but a failover to a replica that
    /// missed a grant can give the lock to a second holder. Best effort, not
    /// consensus [default: every replica of the master, those it lists and
    /// those that could take over from it; a master without replicas is
    /// sent no WAIT]
    #[arg(long, value_name = "N")]
    pub(crate) replicas: Option<u32>,
    /// How long Redis waits for the replicas (10ms to 60s)
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = duration::replica_timeout)]
    pub(crate) replica_timeout: Dur,
}

impl ReplicaArgs {
    /// The replicas to wait for, and how long.
    pub(crate) fn ack(&self) -> leasehold::ReplicaAck {
        let timeout = self.replica_timeout.get();
        match self.replicas {
            None => leasehold::ReplicaAck::Connected { timeout },
            Some(0) => leasehold::ReplicaAck::Off,
            Some(replicas) => leasehold::ReplicaAck::AtLeast { replicas, timeout },
        }
    }

    /// `--replicas` was on the command line.
    pub(crate) fn given(&self) -> bool {
        self.replicas.is_some()
    }
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
    /// The lock's name; several names take several locks, all or none, each
    /// of the kind the flags say. They are taken in the order of their keys,
    /// not the order given, so runs that name the same locks in any order
    /// never deadlock; a lease lost on any of them is a lost lease (76)
    #[arg(required = true, value_name = "NAME")]
    pub(crate) names: Vec<String>,
    #[command(flatten)]
    pub(crate) wait: WaitArgs,
    #[command(flatten)]
    pub(crate) take: TakeArgs,
    /// Lease length (10ms to 24h), renewed at a third of it while the command runs
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration::lease)]
    pub(crate) lease: Dur,
    /// For run-once jobs: if the command ends sooner, keep the lock until
    /// DUR has passed since it was taken, so that a run started elsewhere
    /// within DUR (cron on every host) finds it busy [default: off]
    #[arg(long, value_name = "DUR", value_parser = duration::up_to_a_day)]
    pub(crate) hold_at_least: Option<Dur>,
    /// Renew the lease no further than DUR after it was taken: a command
    /// still running then loses the lease (see --on-lost; exit 76) [default: no cap]
    #[arg(long, value_name = "DUR", value_parser = duration::lease)]
    pub(crate) max_hold: Option<Dur>,
    /// What to do to the command if the lease is lost
    #[arg(long, value_enum, default_value_t = OnLost::Term)]
    pub(crate) on_lost: OnLost,
    /// The command and its arguments; it gets LEASEHOLD_FENCE and LEASEHOLD_NAME (of the first
    /// name), and LEASEHOLD_FENCE_1, LEASEHOLD_NAME_1, LEASEHOLD_FENCE_2, ... for each name in
    /// the order given
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<std::ffi::OsString>,
    /// From the global --json: after the command, one JSON object about the
    /// lock on stdout
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct AcquireArgs {
    /// The lock's name
    pub(crate) name: String,
    /// Lease length (10ms to 24h); it is not renewed (use `extend`)
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration::lease)]
    pub(crate) lease: Dur,
    #[command(flatten)]
    pub(crate) wait: WaitArgs,
    #[command(flatten)]
    pub(crate) take: TakeArgs,
    /// For run-once jobs: a third word is printed, the moment (Unix time in
    /// ms) DUR after the lock was taken; pass it to `release --hold-until`
    /// and the lock stays held until then [default: off]
    #[arg(long, value_name = "DUR", value_parser = duration::up_to_a_day)]
    pub(crate) hold_at_least: Option<Dur>,
    /// From the global --json: print JSON instead of `TOKEN FENCE`
    #[arg(skip)]
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
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    pub(crate) lock: TokenArgs,
    /// The third word `acquire --hold-at-least` printed: until then (Unix
    /// time in ms, by this host's clock) the lock is kept held, not freed,
    /// and then expires
    #[arg(long, value_name = "UNIX_MS")]
    pub(crate) hold_until: Option<u64>,
    /// From the global --json
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ExtendArgs {
    #[command(flatten)]
    pub(crate) lock: TokenArgs,
    /// The new remaining lease, from now (10ms to 24h)
    #[arg(long, value_name = "DUR", value_parser = duration::lease)]
    pub(crate) lease: Dur,
    #[command(flatten)]
    pub(crate) replicas: ReplicaArgs,
    /// From the global --json
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// The lock's name
    pub(crate) name: String,
    /// From the global --json
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SemaphoreArgs {
    #[command(subcommand)]
    pub(crate) action: SemaphoreAction,
    /// From the global --json
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SemaphoreAction {
    /// Set the permit count for every user and wake the waiters that now
    /// fit; queued waiters keep their place and take the new count
    SetPermits {
        /// The semaphore's name
        name: String,
        /// The new permit count
        #[arg(value_parser = clap::value_parser!(u32).range(1..=i64::from(leasehold::MAX_PERMITS)))]
        permits: u32,
        /// Set it only if no count is set yet (no semaphore of this name, or
        /// one whose --lifetime ended); exit 0 either way and say which
        #[arg(long)]
        if_unset: bool,
        /// With --if-unset: the count goes after DUR (e.g. 10m, 2h, 7d; 1ms to
        /// 365d), or with the last permit lease held then; permits held at
        /// the end run on until released, and the next acquisition sets the
        /// count again [default: no end]
        #[arg(long, value_name = "DUR", requires = "if_unset", value_parser = duration::permit_lifetime)]
        lifetime: Option<Dur>,
    },
    /// Delete the semaphore: its permit count and every permit lease,
    /// whoever holds it; its waiters are woken, and the next acquisition
    /// makes it anew with its own count
    Delete {
        /// The semaphore's name
        name: String,
    },
}

#[derive(Debug, Args)]
pub(crate) struct LibrariesArgs {
    /// Remove the libraries no connected client may call: never this
    /// version's, nor one a connected client says it calls
    #[arg(long)]
    pub(crate) remove_unused: bool,
    /// With --remove-unused: also remove libraries while clients that cannot
    /// say which library they call are connected (leasehold from before
    /// clients said it, or any client of Redis older than 7.2); a client
    /// whose library is removed loads it again on its next call
    #[arg(long, requires = "remove_unused")]
    pub(crate) force: bool,
    /// From the global --json
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ForceReleaseArgs {
    /// The lock's name
    pub(crate) name: String,
    /// Of a read-write lock: remove every reader and nothing else (a
    /// waiting writer then gets the lock)
    #[arg(long, conflicts_with = "write")]
    pub(crate) read: bool,
    /// Of a read-write lock: remove the writer and nothing else (its
    /// readers, after a downgrade, stay)
    #[arg(long)]
    pub(crate) write: bool,
    /// From the global --json
    #[arg(skip)]
    pub(crate) json: bool,
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
    /// Run on a private Redis Cluster of 3 masters instead of one server:
    /// the same run, on the master that serves the lock's hash slot
    #[arg(long)]
    pub(crate) cluster: bool,
    // Declared here, hidden, so that the demo's help and manual page do not
    // offer the global --url: clap gives a subcommand that has an argument
    // of the same name its own instead of the global one.
    /// Refused: the demo starts a redis-server of its own
    #[arg(long, hide = true)]
    pub(crate) url: Option<String>,
    /// Refused, as --url
    #[arg(long, hide = true, value_delimiter = ',')]
    pub(crate) redlock: Vec<String>,
    /// From the global --json: print only the summary, as one JSON object
    #[arg(skip)]
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
    /// Wait until each lock is free: print a line as each lease ends
    /// (released, force-released, expired: heard from the release itself,
    /// or looked for when the lease runs out) and exit 0 once every lock
    /// has been seen free; a lock free at the start is done at once. Redis
    /// not answering (a restart, a failover) is said on stderr and ridden
    /// out until --wait ends it
    #[arg(long, conflicts_with = "once")]
    pub(crate) until_free: bool,
    /// With --until-free: give up after this long and exit 75 (e.g. 30s,
    /// 5m; at most 24h) [default: forever]
    #[arg(long, value_name = "DUR", value_parser = duration::up_to_a_day,
          requires = "until_free")]
    pub(crate) wait: Option<Dur>,
    /// From the global --json, which needs --once or --until-free: one JSON
    /// object per lock (--until-free: per ended lease, and per lock when it
    /// is free), one a line
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Write leasehold.1 and a page per subcommand (leasehold-run.1, ...)
    /// into DIR instead of printing leasehold.1
    #[arg(long, value_name = "DIR")]
    pub(crate) out_dir: Option<std::path::PathBuf>,
}

/// `leasehold leader NAME`: who leads an election now.
#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    /// The election's name
    pub(crate) name: String,
    /// From the global --json: print {"name", "leader": {"value", "fence"} or null}
    #[arg(skip)]
    pub(crate) json: bool,
}
