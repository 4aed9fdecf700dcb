//! `leasehold-chaos`: breaks leasehold's locks on purpose and checks what
//! they promised.
//!
//! Worker processes, each with its own client, contend for a few locks of
//! every primitive and do fenced read-modify-writes on a small resource
//! server while faults strike on a seeded schedule: holders paused and
//! killed, Redis restarted (with and without its AOF) and paused, and the
//! network between a worker and Redis slowed, cut, reset or frozen. A checker
//! then reads every log and counts double grants, stale writes accepted,
//! lost updates, fence regressions and keys left without a TTL.
//!
//! ```text
//! leasehold-chaos --schedule pause --seed 7 --seconds 30 --json run.jsonl
//! leasehold-chaos --schedule all --seconds 60 --acquisitions 22000 --workers 12 --locks 3
//! leasehold-chaos --schedule pause --keep-logs runs && leasehold-chaos check runs
//! ```
//!
//! The `cluster` schedules run on a Redis Cluster of three masters with a
//! replica each: shards failed over gracefully, masters killed (with their
//! replica up to date or lagging behind) and slots of held locks migrated.
//!
//! ```text
//! leasehold-chaos --schedule cluster --seed 1 --seconds 60 --lease-ms 3000
//! leasehold-chaos --schedule cluster-kill --lease-ms 3000 --restart-grace-ms 0
//! ```
//!
//! The `sentinel` schedules run on a master with one replica under three
//! sentinels, reached through them (`redis+sentinel://`): the master failed
//! over by `SENTINEL FAILOVER` (the old master left taking writes until the
//! sentinels demote it) and killed, with the replica up to date or lagging
//! behind. By default every grant waits for the replicas the master has
//! connected, as the library does; `--replicas 0` turns that off,
//! `--replicas N` asks N whatever is connected, and `--restart-grace-ms 0`
//! turns the grace on a change of master off (the library's default): the
//! protections are compared from the same seed.
//!
//! ```text
//! leasehold-chaos --schedule sentinel --lease-ms 5000 --workloads mutex,fair,reentrant,rwlock,semaphore \
//!     --replicas 1 --restart-grace-ms 0
//! ```
//!
//! The `redlock` schedules run on N independent masters (`--masters`, 5 by
//! default), each behind a fault proxy that every worker goes through, and
//! the workers take Redlock mutexes over them (the only primitive a
//! Redlock offers). One master at a time is struck, most of the time one
//! that holds a grant of a held lock: killed (SIGKILL) and started again
//! from its AOF (`redlock-kill`) or empty (`redlock-restart`, where the
//! restart grace is the protection: `--restart-grace-ms 0` shows what it
//! buys), stopped (SIGSTOP), slowed or cut off through its proxy.
//!
//! ```text
//! leasehold-chaos --schedule redlock --seed 1 --seconds 120 --lease-ms 2000
//! leasehold-chaos --schedule redlock-restart --lease-ms 2000 --restart-grace-ms 0
//! ```
//!
//! Two controls show that the checker can fail: `--unfenced` (the resource
//! accepts stale writes, which the checker must find) and
//! `--restart-grace-ms 0` with `--schedule restart` (locks lost in a
//! restart are granted again at once, while their old holders still hold
//! them: unsafe overlaps).
//!
//! Exit codes: 0 every run's must-be-zero figures are 0; 1 some are not;
//! 2 a run could not be made (bad arguments, no `redis-server`, …) or was
//! interrupted.

mod check;
mod events;
mod faults;
mod orchestrator;
mod reaper;
mod resource;
mod rng;
mod worker;
mod workload;

use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use crate::faults::Schedule;
use crate::orchestrator::{RunConfig, RunReport};
use crate::workload::Workload;

#[derive(Debug, Parser)]
#[command(
    name = "leasehold-chaos",
    about = "Break leasehold's locks with faults on a seeded schedule and check what they promised",
    after_help = "Exit codes: 0 every must-be-zero figure is 0; 1 one is not; 2 the run could not be made or was interrupted."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// pause, kill, restart, client-pause, latency, blackhole, reset,
    /// half-open, mixed, or all (each of those in turn, on one server);
    /// cluster-failover, cluster-kill, cluster-migrate, or cluster (each of
    /// those in turn, on a cluster of 3 masters with a replica each);
    /// sentinel-failover, sentinel-kill, or sentinel (either at random, on
    /// a master with a replica under 3 sentinels); redlock-kill,
    /// redlock-restart, redlock-pause, redlock-latency, redlock-blackhole,
    /// or redlock (each of those in turn, on --masters independent masters).
    #[arg(long, default_value = "mixed")]
    schedule: String,
    /// Seeds the faults, their targets and the workers' choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How long each schedule runs, at least.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Runs each schedule on past --seconds until the workers have taken
    /// locks this many times.
    #[arg(long, default_value_t = 0)]
    acquisitions: u64,
    /// Worker processes (a killed one is replaced).
    #[arg(long, default_value_t = 6)]
    workers: usize,
    /// Every lease, in milliseconds; fault strengths scale with it.
    #[arg(long, default_value_t = 1000)]
    lease_ms: u64,
    /// Primitives to run, comma-separated: mutex, fair, reentrant, rwlock,
    /// semaphore, election, or all (the default; mutex on a Redlock, which
    /// offers no other).
    #[arg(long)]
    workloads: Option<String>,
    /// The independent masters of a Redlock schedule (at least 3).
    #[arg(long, value_name = "N", default_value_t = orchestrator::DEFAULT_MASTERS)]
    masters: usize,
    /// Locks per primitive.
    #[arg(long, default_value_t = 1)]
    locks: usize,
    /// The resource accepts every request, whatever its fence (to see what
    /// the checker finds when nothing refuses a stale holder).
    #[arg(long)]
    unfenced: bool,
    /// How long after Redis starts no lock is granted (default: a lease
    /// and a tenth). 0 shows what the grace prevents: after a restart
    /// without the AOF, locks granted again while their holders hold them.
    #[arg(long, value_name = "MS")]
    restart_grace_ms: Option<u64>,
    /// The cluster's cluster-node-timeout: how long a master may not answer
    /// before its replica takes over (cluster schedules only). A killed
    /// master is replaced about a second after it; a lease shorter than
    /// that runs out first, grace or not.
    #[arg(long, value_name = "MS", default_value_t = orchestrator::DEFAULT_NODE_TIMEOUT.as_millis() as u64)]
    node_timeout_ms: u64,
    /// Replicas that must acknowledge every grant (WAIT, behind the
    /// acquiring script), else it is undone and the wait goes on; 0 for
    /// none [default: every replica the master has connected, as the
    /// library does]. Other than 0, cluster and sentinel schedules only
    /// (one server has no replica).
    #[arg(long, value_name = "N")]
    replicas: Option<u32>,
    /// How long Redis waits for those replicas.
    #[arg(long, value_name = "MS", default_value_t = orchestrator::DEFAULT_REPLICA_TIMEOUT.as_millis() as u64)]
    replica_timeout_ms: u64,
    /// Appends one JSON object per run to FILE: the run's settings
    /// (schedule, seed, seconds, workers, lease_ms, …), the faults
    /// (faults, faults_at_holders as inspect saw them, faults_by_kind) and
    /// the figures of the table. unsafe_overlaps and faulted_overlaps count
    /// pairs of sections (or, for a semaphore, sections too many).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Keeps everything the checker reads under DIR/<schedule>-<seed>/,
    /// which must be empty or absent; `check DIR` reads it again.
    #[arg(long, value_name = "DIR")]
    keep_logs: Option<PathBuf>,
}

/// The longest run asked for: a month.
const MAX_SECONDS: f64 = 30.0 * 86_400.0;
const MAX_WORKERS: usize = 64;
const MAX_LOCKS: usize = 64;
const MAX_RESTART_GRACE_MS: u64 = 3_600_000;
/// More than the cluster's and the sentinel group's replica each.
const MAX_REPLICAS: u32 = 16;
/// More masters than a 2-core machine runs well beside the workers.
const MAX_MASTERS: usize = 15;

#[derive(Debug, Subcommand)]
enum Sub {
    /// Runs the checker again over runs kept with --keep-logs: DIR is one
    /// run's directory, or the --keep-logs directory with several.
    Check {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// One worker process (started by the harness itself).
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        id: String,
        #[arg(long)]
        url: String,
        #[arg(long)]
        resource: SocketAddr,
        #[arg(long)]
        log: PathBuf,
        #[arg(long)]
        lease_ms: u64,
        #[arg(long)]
        command_timeout_ms: u64,
        #[arg(long)]
        restart_grace_ms: u64,
        /// The lock names, comma-separated.
        #[arg(long)]
        locks: String,
        #[arg(long)]
        seed: u64,
        /// Absent: every replica the master has connected.
        #[arg(long)]
        replicas: Option<u32>,
        #[arg(long, default_value_t = 1000)]
        replica_timeout_ms: u64,
        /// --url lists a Redlock's masters.
        #[arg(long)]
        redlock: bool,
    },
    /// Kills the cluster's servers when the harness dies (started by the
    /// harness itself).
    #[command(hide = true)]
    Reaper,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leasehold-chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    if let Some(Sub::Check { dir }) = &cli.command {
        return check_kept(dir);
    }
    if let Some(Sub::Reaper) = &cli.command {
        reaper::run()?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(Sub::Worker {
        id,
        url,
        resource,
        log,
        lease_ms,
        command_timeout_ms,
        restart_grace_ms,
        locks,
        seed,
        replicas,
        replica_timeout_ms,
        redlock,
    }) = cli.command
    {
        worker::run(&worker::WorkerArgs {
            id,
            url,
            resource,
            log,
            lease: Duration::from_millis(lease_ms),
            command_timeout: Duration::from_millis(command_timeout_ms),
            restart_grace: Duration::from_millis(restart_grace_ms),
            locks: locks.split(',').map(str::to_owned).collect(),
            seed,
            replica_ack: orchestrator::replica_ack(
                replicas,
                Duration::from_millis(replica_timeout_ms),
            ),
            redlock,
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let args = cli.run;
    let schedules = Schedule::parse_list(&args.schedule)?;
    let on_redlock = schedules.iter().any(|s| s.on_redlock());
    let workloads = match (&args.workloads, on_redlock) {
        (Some(list), _) => Workload::parse_list(list)?,
        (None, false) => Workload::ALL.to_vec(),
        (None, true) => vec![Workload::Mutex],
    };
    if on_redlock {
        anyhow::ensure!(
            workloads == [Workload::Mutex],
            "a Redlock offers mutexes only: use --workloads mutex with a redlock schedule"
        );
        anyhow::ensure!(
            (leasehold::MIN_MASTERS..=MAX_MASTERS).contains(&args.masters),
            "--masters must be between {} and {MAX_MASTERS}",
            leasehold::MIN_MASTERS
        );
    }
    anyhow::ensure!(
        (2..=MAX_WORKERS).contains(&args.workers),
        "--workers must be between 2 (a lock needs contenders) and {MAX_WORKERS}"
    );
    anyhow::ensure!(
        (1..=MAX_LOCKS).contains(&args.locks),
        "--locks must be between 1 and {MAX_LOCKS}"
    );
    anyhow::ensure!(
        (100..=60_000).contains(&args.lease_ms),
        "--lease-ms must be between 100 and 60000"
    );
    anyhow::ensure!(
        args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= MAX_SECONDS,
        "--seconds must be a number above 0 and at most {MAX_SECONDS} (30 days); \
         --acquisitions makes a run longer by what it does"
    );
    anyhow::ensure!(
        (100..=60_000).contains(&args.node_timeout_ms),
        "--node-timeout-ms must be between 100 and 60000"
    );
    if let Some(replicas) = args.replicas.filter(|&n| n > 0) {
        anyhow::ensure!(
            schedules.iter().all(|s| s.on_cluster() || s.on_sentinel()),
            "--replicas needs replicas: use it with a cluster- or sentinel schedule"
        );
        anyhow::ensure!(
            replicas <= MAX_REPLICAS,
            "--replicas must be at most {MAX_REPLICAS}"
        );
    }
    anyhow::ensure!(
        (10..=60_000).contains(&args.replica_timeout_ms),
        "--replica-timeout-ms must be between 10 and 60000"
    );
    let lease = Duration::from_millis(args.lease_ms);
    let restart_grace = match args.restart_grace_ms {
        Some(ms) if ms > MAX_RESTART_GRACE_MS => {
            anyhow::bail!("--restart-grace-ms must be at most {MAX_RESTART_GRACE_MS}")
        }
        Some(ms) => Duration::from_millis(ms),
        None => orchestrator::default_restart_grace(lease),
    };
    let configs: Vec<RunConfig> = schedules
        .into_iter()
        .map(|schedule| RunConfig {
            schedule,
            seed: args.seed,
            seconds: args.seconds,
            acquisitions: args.acquisitions,
            workers: args.workers,
            lease,
            workloads: workloads.clone(),
            locks: args.locks,
            fenced: !args.unfenced,
            restart_grace,
            node_timeout: Duration::from_millis(args.node_timeout_ms),
            replicas: args.replicas,
            replica_timeout: Duration::from_millis(args.replica_timeout_ms),
            masters: args.masters,
            keep_logs: args.keep_logs.clone(),
        })
        .collect();
    // Refused before any run starts, not after the first.
    for dir in configs.iter().filter_map(RunConfig::kept_dir) {
        orchestrator::claim_dir(&dir)?;
    }
    orchestrator::install_signal_handlers();
    let mut json = match &args.json {
        Some(path) => Some(
            File::options()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open {}", path.display()))?,
        ),
        None => None,
    };
    let mut failed = false;
    for config in configs {
        let report = orchestrator::run(&config)
            .with_context(|| format!("schedule {}", config.schedule.name()))?;
        print_report(&report);
        if let Some(file) = &mut json {
            writeln!(file, "{}", report.to_json())?;
        }
        failed |= !report.findings.failures().is_empty();
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `check DIR`: the checker over kept runs.
fn check_kept(dir: &std::path::Path) -> Result<ExitCode> {
    let dirs = if orchestrator::is_run_dir(dir) {
        vec![dir.to_owned()]
    } else {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| orchestrator::is_run_dir(p))
            .collect();
        dirs.sort();
        dirs
    };
    anyhow::ensure!(
        !dirs.is_empty(),
        "{} holds no kept run (a run.json from --keep-logs)",
        dir.display()
    );
    let mut failed = false;
    for d in dirs {
        let report = orchestrator::recheck(&d).with_context(|| format!("{}", d.display()))?;
        print_report(&report);
        failed |= !report.findings.failures().is_empty();
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print_report(r: &RunReport) {
    let f = &r.findings;
    let must = |n: u64| if n == 0 { "ok" } else { "MUST BE 0" };
    let cluster = if r.config.schedule.on_cluster() {
        format!(
            ", cluster node timeout {} ms",
            r.config.node_timeout.as_millis()
        )
    } else {
        String::new()
    };
    let cluster = if r.config.schedule.on_redlock() {
        format!(
            ", {} masters{}",
            r.config.masters,
            if r.config.schedule.persists_masters() {
                " with AOF (appendfsync always)"
            } else {
                " without persistence"
            }
        )
    } else {
        cluster
    };
    let acked = match r.config.replicas {
        Some(0) => ", no replica ack".to_owned(),
        Some(n) => format!(
            ", {n} replica ack within {} ms",
            r.config.replica_timeout.as_millis()
        ),
        None => format!(
            ", ack by every replica of the master within {} ms",
            r.config.replica_timeout.as_millis()
        ),
    };
    println!(
        "schedule {} seed {}: {:.1} s, {} workers, lease {} ms, restart grace {} ms{cluster}{acked}{}, \
         {} faults ({} aimed at a holder)",
        r.config.schedule.name(),
        r.config.seed,
        r.seconds,
        r.config.workers,
        r.config.lease.as_millis(),
        r.config.restart_grace.as_millis(),
        if r.config.fenced { "" } else { ", unfenced" },
        r.faults.len(),
        r.faults.iter().filter(|x| x.at_holder).count()
    );
    let rows: [(&str, String, &str); 17] = [
        ("acquisitions", f.acquisitions.to_string(), ""),
        (
            "unsafe overlaps (pairs)",
            f.unsafe_overlaps.to_string(),
            must(f.unsafe_overlaps),
        ),
        (
            "faulted overlaps (pairs)",
            f.faulted_overlaps.to_string(),
            "a stopped holder's lease ran out: only fences cover them",
        ),
        (
            "fenced requests accepted / refused",
            format!("{} / {}", f.fenced_accepted, f.fenced_refused),
            "",
        ),
        (
            "stale writes accepted",
            f.stale_writes_accepted.to_string(),
            must(f.stale_writes_accepted),
        ),
        (
            "lost updates",
            f.lost_updates.to_string(),
            must(f.lost_updates),
        ),
        (
            "fence regressions",
            f.fence_regressions.to_string(),
            must(f.fence_regressions),
        ),
        (
            "nested levels (mismatches)",
            format!("{} ({})", f.nested, f.nested_mismatches),
            must(f.nested_mismatches),
        ),
        ("leases lost", f.lost_leases.to_string(), ""),
        (
            "loss detection after a new holder, max",
            format!("{:.1} ms", f.loss_detection_ms_max),
            "",
        ),
        (
            "  of it after the holder resumed, max",
            format!("{:.1} ms", f.loss_detection_after_resume_ms_max),
            "",
        ),
        (
            "faults that struck a section",
            f.faults_struck_sections.to_string(),
            "",
        ),
        (
            "wait errors (while reachable)",
            format!("{} ({})", f.wait_errors, f.wait_errors_while_reachable),
            "",
        ),
        ("wait timeouts", f.wait_timeouts.to_string(), ""),
        ("release errors", f.release_errors.to_string(), ""),
        (
            "keys without a TTL",
            f.keys_without_ttl.to_string(),
            must(f.keys_without_ttl),
        ),
        (
            "workers failed",
            f.workers_failed.to_string(),
            must(f.workers_failed),
        ),
    ];
    for (label, value, note) in rows {
        println!("  {label:<40} {value:>14}  {note}");
    }
    for example in &f.examples {
        println!("  ! {example}");
    }
}
