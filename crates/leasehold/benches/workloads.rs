//! leasehold's lock benchmark, against its peer rslock 0.10 in the same run:
//! W1 (uncontended), W2 (contended), W3 (many keys) for both, W5 (renewal
//! load) for leasehold, and the floor (bare redis-rs on one connection), all
//! against one fresh redis-server started by the test kit; then W3 and W2
//! (`Mutex`) for leasehold on a fresh three-master Redis Cluster. The
//! workloads are defined in the project's BENCH.md.
//!
//! ```text
//! cargo bench -p leasehold --bench workloads              full run (W2, W3 10 s; W5 30 s per K)
//! cargo bench -p leasehold --bench workloads -- --quick   short counts and durations, small K
//! cargo bench -p leasehold --bench workloads -- --skip-w5 all but W5 (its targets: not run)
//! cargo bench -p leasehold --bench workloads -- --sentinel-only   the Sentinel figures alone
//! cargo bench -p leasehold --bench workloads -- --only-w1 the floor and W1 alone, with W1's targets
//! cargo bench -p leasehold --bench workloads -- --only-w4 W4 (Redlock, five masters) alone
//! cargo bench -p leasehold --bench workloads -- --per-script  calls and Redis µs per script, a pass of its own
//! ```
//!
//! W4 runs leasehold's `Redlock` next to rslock's over five masters of
//! its own, and once more with one master slowed (see `workloads/w4.rs`).
//!
//! `LEASEHOLD_BENCH_QUICK=1` does what `--quick` does. Run without cargo
//! bench's `--bench` flag (as `cargo test --benches` does), it makes the quick
//! run: a smoke test.
//!
//! In W1–W3 every lock client has a 10 s lease, the watchdog off, and its own
//! connections; each is connected and warmed up before its clock starts.
//! rslock's blocking acquire is its own (retries with its default count and
//! delay, bounded here at 30 s); its W3 attempt is one try (retry count 1).
//! Latencies are on the monotonic clock, percentiles by nearest rank.
//!
//! W2 runs for every leasehold primitive that can serve it (`Mutex`,
//! `FairMutex`), each next to rslock; then for the primitives with shared
//! holders (`RwLock` with 6 readers and 2 writers, `Semaphore` of 2
//! permits), printed next to the mutexes, each with the check that fits
//! it (see `workloads/w2_shared.rs`).
//!
//! W3 and W2 (`Mutex`) run once more on a Redis Cluster of three masters
//! started by the test kit, for leasehold alone (rslock 0.10 has no cluster
//! support), next to the same run's single-node figures, with Redis calls
//! and CPU summed over the masters (see `workloads/cluster.rs`).
//!
//! W1 and W2 (`Mutex`) run through Redis Sentinel next to a direct
//! connection to the same master, both with the default acknowledgement
//! of every grant by the master's replica, and W1 once more with it off
//! (see `workloads/sentinel.rs`).
//!
//! Prints a table per workload, each leasehold primitive's figures next to
//! rslock's with their ratio (leasehold / rslock, and which way is better),
//! then the targets (met, missed, or not run, judged on this run's figures
//! alone), then one JSON object per workload per line and one for the
//! targets. A missed target does not change the exit code.
//!
//! Exit codes: 0 the run is done; 1 it could not run; 2 a W2 run (the
//! cluster's too) lost an update (its counter is not the number of
//! acquisitions) or failed its shared-holder check.

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error as StdError;
use std::process::ExitCode;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use leasehold::redis::{self, aio::MultiplexedConnection};
use leasehold::{Client, Mutex, MutexGuard};
use leasehold_testkit::RedisServer;
use rslock::{LockError, LockManager};
use serde_json::{json, Map, Value};

#[path = "workloads/cluster.rs"]
mod cluster;
#[path = "workloads/per_script.rs"]
mod per_script;
#[path = "workloads/pinning.rs"]
mod pinning;
#[path = "workloads/sentinel.rs"]
mod sentinel;
#[path = "workloads/w2_shared.rs"]
mod w2_shared;
#[path = "workloads/w4.rs"]
mod w4;

type BoxError = Box<dyn StdError + Send + Sync>;
type Result<T, E = BoxError> = std::result::Result<T, E>;

const LEASE: Duration = Duration::from_secs(10);
const WAIT: Duration = Duration::from_secs(30);
const W1_LOCK: &str = "w1:lock";
const W2_LOCK: &str = "w2:lock";
const W2_COUNTER: &str = "w2:counter";
const W2_WORKERS: usize = 8;
const W2_HOLD: Duration = Duration::from_millis(1);
const W3_WORKERS: usize = 8;
const W3_KEYS: usize = 1_000;
const W5_LEASE: Duration = Duration::from_secs(3);
/// Leases taken at once while W5 builds up its K held leases.
const W5_BATCH: usize = 500;
/// How often W5 reads `INFO commandstats` to see renewal rounds go by.
const W5_SAMPLE: Duration = Duration::from_millis(50);
/// One probe acquire+release this often while W5 measures latency.
const W5_PROBE_EVERY: Duration = Duration::from_millis(2);
const W5_PROBE_LOCK: &str = "w5:probe";
/// Leases per renew script in leasehold's watchdog (its `LEASES_PER_SCRIPT`).
const RENEWALS_PER_SCRIPT: usize = 256;
/// rslock's default retry delay, kept for its single-try manager.
const RSLOCK_RETRY_DELAY: Duration = Duration::from_millis(200);
const FLOOR_KEY: &str = "floor:lock";
const FLOOR_LEASE_MS: u64 = 10_000;
/// The compare-and-delete every Redis lock releases with, without leasehold's
/// fence and notification.
const FLOOR_RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
const EXIT_LOST_UPDATE: u8 = 2;

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("workloads: {}", chain(&*e));
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<ExitCode> {
    pinning::pin(std::env::args().any(|arg| arg == "--no-pin"))?;
    if std::env::args().any(|arg| arg == "--only-w4") {
        let quick = std::env::args().any(|arg| arg == "--quick")
            || !std::env::args().any(|arg| arg == "--bench");
        w4::w4(quick)?;
        return Ok(ExitCode::SUCCESS);
    }
    let plan = Plan::from_env()?;
    let server = RedisServer::start();
    let url = server.url();
    let rt = current_thread_runtime()?;
    let mut stats = rt.block_on(connect(&url))?;
    let kinds = rt.block_on(CommandKinds::of(&mut stats))?;
    let bench = Bench {
        url,
        plan,
        rt,
        stats,
        kinds,
    };
    let plan = &bench.plan;
    let single = Servers::single(&bench);
    if plan.per_script {
        per_script::per_script(&bench, &single)?;
        return Ok(ExitCode::SUCCESS);
    }
    if plan.only_w1 {
        let ping = bench.rt.block_on(floor_ping(&bench))?;
        let bare = bench.rt.block_on(floor_bare(&bench))?;
        let w1 = w1_side_by_side(&bench)?;
        println!(
            "leasehold lock workloads ({} run), the floor and W1 alone, redis-server on port {}",
            if plan.quick { "quick" } else { "full" },
            server.port()
        );
        println!("{}", pinning::describe(&[server.pid()]));
        print_floor(plan, &ping, &bare);
        print_w1(plan, &w1, true);
        let targets = w1_targets(plan, &bare, &w1)?;
        print_targets(plan, &targets);
        println!();
        for line in [
            floor_json(plan, &ping, &bare),
            w1_json(plan, &w1),
            targets_json(plan, &targets),
        ] {
            println!("{line}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if plan.sentinel_only {
        let runs = sentinel::sentinel_runs(&bench)?;
        println!(
            "leasehold lock workloads ({} run), the Sentinel figures alone",
            if plan.quick { "quick" } else { "full" },
        );
        sentinel::print_sentinel(plan, &runs);
        println!();
        println!("{}", sentinel::w1_sentinel_json(plan, &runs));
        println!("{}", sentinel::w2_sentinel_json(plan, &runs));
        return Ok(if sentinel::lost_updates(&runs) {
            ExitCode::from(EXIT_LOST_UPDATE)
        } else {
            ExitCode::SUCCESS
        });
    }

    let ping = bench.rt.block_on(floor_ping(&bench))?;
    let bare = bench.rt.block_on(floor_bare(&bench))?;
    let w1 = w1_side_by_side(&bench)?;
    let mut w2_runs = Vec::new();
    for run in LEASEHOLD_W2 {
        w2_runs.push(run(&bench, &single)?);
    }
    w2_runs.push(w2::<Rslock>(&bench, &single)?);
    let mut shared_runs = Vec::new();
    for &shared in w2_shared::SHARED_W2 {
        shared_runs.push(w2_shared::w2_shared(&bench, shared)?);
    }
    let w3 = w3_side_by_side(&bench, &single)?;
    let on_cluster = cluster::cluster_runs(&bench)?;
    let on_sentinel = sentinel::sentinel_runs(&bench)?;
    let w5 = w5(&bench)?;

    println!(
        "leasehold lock workloads ({} run), redis-server on port {}",
        if plan.quick { "quick" } else { "full" },
        server.port()
    );
    println!("{}", pinning::describe(&[server.pid()]));
    print_floor(plan, &ping, &bare);
    print_w1(plan, &w1, true);
    print_w2(plan, &w2_runs);
    w2_shared::print_w2_shared(plan, &w2_runs, &shared_runs);
    print_w3(plan, &w3);
    cluster::print_cluster(plan, &w2_runs, &w3, &on_cluster)?;
    sentinel::print_sentinel(plan, &on_sentinel);
    print_w5(plan, &w5);
    w4::w4(plan.quick)?;
    let mut targets = targets(plan, &bare, &w1, &w2_runs, &w3, &w5)?;
    targets.extend(cluster::targets(&w2_runs, &w3, &on_cluster)?);
    print_targets(plan, &targets);
    println!();
    for line in [
        floor_json(plan, &ping, &bare),
        w1_json(plan, &w1),
        w2_json(plan, &w2_runs),
        w2_shared::w2_shared_json(plan, &shared_runs),
        w3_json(plan, &w3),
        cluster::w3_cluster_json(plan, &w3, &on_cluster)?,
        cluster::w2_cluster_json(plan, &w2_runs, &on_cluster)?,
        sentinel::w1_sentinel_json(plan, &on_sentinel),
        sentinel::w2_sentinel_json(plan, &on_sentinel),
        w5_json(plan, &w5),
        targets_json(plan, &targets),
    ] {
        println!("{line}");
    }

    let mut lost = sentinel::lost_updates(&on_sentinel);
    for (run, on) in w2_runs
        .iter()
        .map(|run| (run, single.name))
        .chain([(&on_cluster.w2, on_cluster.name)])
    {
        if run.counter != run.acquisitions.len() as u64 {
            eprintln!(
                "workloads: W2 {} on the {on} lost updates: the counter is {} after {} acquisitions",
                run.library,
                run.counter,
                run.acquisitions.len()
            );
            lost = true;
        }
    }
    for run in &shared_runs {
        if let Some(failure) = run.failure() {
            eprintln!("workloads: W2 {failure}");
            lost = true;
        }
    }
    Ok(if lost {
        ExitCode::from(EXIT_LOST_UPDATE)
    } else {
        ExitCode::SUCCESS
    })
}

/// What every workload runs against.
struct Bench {
    /// The single redis-server's.
    url: String,
    plan: Plan,
    /// The main thread's runtime: W1, the floor, W5, and the snapshots.
    rt: tokio::runtime::Runtime,
    /// A connection of the benchmark's own to the single redis-server, for
    /// INFO and the W2 counter.
    stats: MultiplexedConnection,
    kinds: CommandKinds,
}

/// The Redis that W2 and W3 run on: the single redis-server, or the
/// masters of a cluster (see `workloads/cluster.rs`).
struct Servers {
    /// Its name in the tables and messages.
    name: &'static str,
    /// What lock clients are given: a URL, or a cluster's seeds joined by
    /// commas.
    url: String,
    /// The server that holds W2's counter (on a cluster, the master of its
    /// slot), for the workers' plain GET and SET.
    data_url: String,
    /// A connection of the benchmark's own to `data_url`, for W2's counter.
    data: MultiplexedConnection,
    /// A connection of the benchmark's own to each master, for INFO; server
    /// cost is summed over them.
    masters: Vec<MultiplexedConnection>,
}

impl Servers {
    fn single(bench: &Bench) -> Servers {
        Servers {
            name: "single node",
            url: bench.url.clone(),
            data_url: bench.url.clone(),
            data: bench.stats.clone(),
            masters: vec![bench.stats.clone()],
        }
    }

    /// `INFO commandstats` and `INFO cpu` of each master, one after another.
    async fn snapshot(&self) -> Result<Vec<ServerSnapshot>> {
        let mut out = Vec::with_capacity(self.masters.len());
        for master in &self.masters {
            out.push(server_snapshot(&mut master.clone()).await?);
        }
        Ok(out)
    }
}

struct Plan {
    quick: bool,
    /// `--skip-w5`: W5 does not run (its targets are "not run").
    skip_w5: bool,
    /// `--sentinel-only`: the Sentinel figures alone.
    sentinel_only: bool,
    /// `--only-w1`: the floor and W1 alone.
    only_w1: bool,
    /// `--per-script`: W1, W2 and W3 once more with every command logged,
    /// for calls and Redis µs per script (see `workloads/per_script.rs`).
    per_script: bool,
    warmup: usize,
    cycles: usize,
    w2_run: Duration,
    w3_run: Duration,
    /// The numbers of leases W5 holds; 0 is the reference.
    w5_leases: Vec<usize>,
    w5_hold: Duration,
    w5_probe: Duration,
}

impl Plan {
    fn from_env() -> Result<Plan> {
        let mut quick =
            std::env::var("LEASEHOLD_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let mut bench = false;
        let mut skip_w5 = false;
        let mut sentinel_only = false;
        let mut only_w1 = false;
        let mut per_script = false;
        for arg in std::env::args().skip(1) {
            match arg.as_str() {
                "--bench" => bench = true,
                "--quick" => quick = true,
                "--skip-w5" => skip_w5 = true,
                "--sentinel-only" => sentinel_only = true,
                "--only-w1" => only_w1 = true,
                "--per-script" => per_script = true,
                // Read by `pinning::pin`, first thing.
                "--no-pin" => {}
                other => {
                    return Err(format!(
                        "unknown argument {other:?}: the options are --quick \
                         (or LEASEHOLD_BENCH_QUICK=1), --skip-w5, --sentinel-only, \
                         --only-w1, --only-w4, --per-script and --no-pin"
                    )
                    .into())
                }
            }
        }
        // Without --bench, cargo runs this as a test: a smoke run is enough.
        Ok(if quick || !bench {
            Plan {
                quick: true,
                skip_w5,
                sentinel_only,
                only_w1,
                per_script,
                warmup: 10,
                cycles: 500,
                w2_run: Duration::from_secs(1),
                w3_run: Duration::from_secs(1),
                w5_leases: vec![0, 100, 1_000, 2_000],
                w5_hold: Duration::from_secs(3),
                w5_probe: Duration::from_secs(1),
            }
        } else {
            Plan {
                quick: false,
                skip_w5,
                sentinel_only,
                only_w1,
                per_script,
                warmup: 100,
                cycles: 5_000,
                w2_run: Duration::from_secs(10),
                w3_run: Duration::from_secs(10),
                w5_leases: vec![0, 100, 1_000, 10_000, 20_000],
                w5_hold: Duration::from_secs(30),
                w5_probe: Duration::from_secs(5),
            }
        })
    }
}

fn current_thread_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}").into())
}

/// A connection of the benchmark's own (INFO, W2's counter, the
/// per-script pass's log reader): its replies may wait behind eight busy
/// workers on the bench's one CPU, so it waits as long as the setup may,
/// not redis-rs's default half second.
async fn connect(url: &str) -> Result<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(SETUP_TIMEOUT))
        .set_response_timeout(Some(SETUP_TIMEOUT));
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

fn lock_client(url: &str) -> Result<Client> {
    Ok(Client::builder(url).lease(LEASE).watchdog(false).build()?)
}

/// A lock library under test, seen through one client of it with its own
/// connections, as a separate process would have.
trait Library: Sized + 'static {
    /// Its name in the table and the JSON.
    const NAME: &'static str;
    /// The commands it sends outside Lua that no script of its runs (see
    /// [`ServerCost::client_issued`]).
    const PLAIN_COMMANDS: &'static [&'static str];
    type Lock;
    type Guard;

    fn connect(url: &str) -> Result<Self>;
    fn lock(&self, name: &str) -> Result<Self::Lock>;
    /// Waits for the lock the library's own way, at most [`WAIT`]; `None`
    /// when that ran out.
    async fn acquire(lock: &Self::Lock) -> Result<Option<Self::Guard>>;
    /// One attempt that does not wait.
    async fn try_acquire(lock: &Self::Lock) -> Result<Option<Self::Guard>>;
    /// How many clients wait for the lock, if the library can tell.
    async fn waiting(lock: &Self::Lock) -> Result<Option<u64>>;
    fn fence(guard: &Self::Guard) -> Option<u64>;
    async fn release(guard: Self::Guard) -> Result<()>;
}

/// Runs W2 for one library.
type W2Fn = fn(&Bench, &Servers) -> Result<W2Run>;

/// Makes each listed leasehold primitive a [`Library`] and runs W2 for each,
/// in order (`LEASEHOLD_W2`). A primitive with `Mutex`'s methods (`inspect`
/// too, for W2's gate) and guard shape joins W2 with one line in the
/// invocation below, naming its lock and guard types (a `FairMutex`'s guard
/// is a `MutexGuard`).
macro_rules! leasehold_primitives {
    ($($library:ident: $name:literal = Client::$open:ident -> $lock:ident, $guard:ident;)*) => {
        $(
            struct $library(Client);

            impl Library for $library {
                const NAME: &'static str = $name;
                // PING keeps its quiet subscriber connection checked.
                const PLAIN_COMMANDS: &'static [&'static str] = &["ping"];
                type Lock = leasehold::$lock;
                type Guard = leasehold::$guard;

                fn connect(url: &str) -> Result<Self> {
                    Ok($library(lock_client(url)?))
                }

                fn lock(&self, name: &str) -> Result<Self::Lock> {
                    Ok(self.0.$open(name)?)
                }

                async fn acquire(lock: &Self::Lock) -> Result<Option<Self::Guard>> {
                    match lock.acquire_timeout(WAIT).await {
                        Ok(guard) => Ok(Some(guard)),
                        Err(e) if e.is_timeout() => Ok(None),
                        Err(e) => Err(e.into()),
                    }
                }

                async fn try_acquire(lock: &Self::Lock) -> Result<Option<Self::Guard>> {
                    Ok(lock.try_acquire().await?)
                }

                async fn waiting(lock: &Self::Lock) -> Result<Option<u64>> {
                    Ok(Some(lock.inspect().await?.waiting_clients))
                }

                fn fence(guard: &Self::Guard) -> Option<u64> {
                    Some(guard.fence())
                }

                async fn release(guard: Self::Guard) -> Result<()> {
                    Ok(guard.release().await?)
                }
            }
        )*

        const LEASEHOLD_W2: &[W2Fn] = &[$(w2::<$library>),*];
    };
}

leasehold_primitives! {
    LeaseholdMutex: "leasehold Mutex" = Client::mutex -> Mutex, MutexGuard;
    LeaseholdFairMutex: "leasehold FairMutex" = Client::fair_mutex -> FairMutex, MutexGuard;
}

/// rslock 0.10 on one server: a lock manager with its default retries for
/// the blocking acquire, and a clone of it (same connection) that tries once.
struct Rslock {
    blocking: LockManager,
    once: LockManager,
}

struct RslockLock {
    blocking: LockManager,
    once: LockManager,
    resource: String,
}

impl Library for Rslock {
    const NAME: &'static str = "rslock 0.10";
    // Its lock is a plain SET NX PX; its unlock script runs GET and DEL.
    const PLAIN_COMMANDS: &'static [&'static str] = &["set"];
    type Lock = RslockLock;
    type Guard = rslock::Lock;

    fn connect(url: &str) -> Result<Self> {
        // LockManager::new panics on a URL it cannot parse.
        redis::Client::open(url)?;
        let blocking = LockManager::new(vec![url]);
        let mut once = blocking.clone();
        once.set_retry(1, RSLOCK_RETRY_DELAY);
        Ok(Rslock { blocking, once })
    }

    fn lock(&self, name: &str) -> Result<Self::Lock> {
        Ok(RslockLock {
            blocking: self.blocking.clone(),
            once: self.once.clone(),
            resource: name.to_owned(),
        })
    }

    async fn acquire(lock: &Self::Lock) -> Result<Option<Self::Guard>> {
        let acquire = lock.blocking.acquire(lock.resource.as_str(), LEASE);
        match tokio::time::timeout(WAIT, acquire).await {
            Ok(guard) => Ok(Some(guard?.lock)),
            Err(_) => Ok(None),
        }
    }

    async fn try_acquire(lock: &Self::Lock) -> Result<Option<Self::Guard>> {
        match lock.once.lock(lock.resource.as_str(), LEASE).await {
            Ok(held) => Ok(Some(held)),
            Err(LockError::Unavailable) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn waiting(_: &Self::Lock) -> Result<Option<u64>> {
        Ok(None)
    }

    fn fence(_: &Self::Guard) -> Option<u64> {
        None
    }

    async fn release(guard: Self::Guard) -> Result<()> {
        // rslock's release is best effort and reports nothing.
        guard.release().await;
        Ok(())
    }
}

/// Latencies, sorted, read by nearest rank.
struct Latencies(Vec<Duration>);

impl Latencies {
    fn new(mut samples: Vec<Duration>) -> Result<Latencies> {
        if samples.is_empty() {
            return Err("no latency samples were taken".into());
        }
        samples.sort_unstable();
        Ok(Latencies(samples))
    }

    fn percentile(&self, p: usize) -> Duration {
        let rank = (p * self.0.len()).div_ceil(100).max(1);
        self.0[rank - 1]
    }

    fn max(&self) -> Duration {
        self.0[self.0.len() - 1]
    }

    fn p50_us(&self) -> f64 {
        micros(self.percentile(50))
    }

    fn p99_us(&self) -> f64 {
        micros(self.percentile(99))
    }

    /// `"p50 / p99"` in microseconds, for the table.
    fn p50_p99(&self) -> String {
        format!("{} / {}", self.p50_us(), self.p99_us())
    }
}

fn micros(d: Duration) -> f64 {
    round1(d.as_nanos() as f64 / 1_000.0)
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round3(x: f64) -> f64 {
    (x * 1_000.0).round() / 1_000.0
}

fn per_second(n: usize, elapsed: Duration) -> f64 {
    round1(n as f64 / elapsed.as_secs_f64())
}

/// The commands, subcommands included (`script|load`), that Redis refuses to
/// run from a script: each call of one was sent by a client.
struct CommandKinds {
    noscript: BTreeSet<String>,
}

impl CommandKinds {
    async fn of(conn: &mut MultiplexedConnection) -> Result<CommandKinds> {
        let reply: redis::Value = redis::cmd("COMMAND").query_async(conn).await?;
        let mut noscript = BTreeSet::new();
        let redis::Value::Array(commands) = reply else {
            return Err("COMMAND did not answer with a list".into());
        };
        for command in &commands {
            collect_noscript(command, &mut noscript)?;
        }
        if !noscript.contains("evalsha") {
            return Err("COMMAND does not flag EVALSHA noscript: cannot tell round trips".into());
        }
        Ok(CommandKinds { noscript })
    }
}

/// One `COMMAND` entry: name, arity, flags, first key, last key, step,
/// ACL categories, tips, key specs, subcommands (each an entry).
fn collect_noscript(entry: &redis::Value, into: &mut BTreeSet<String>) -> Result<()> {
    let redis::Value::Array(fields) = entry else {
        return Err(format!("unexpected COMMAND entry {entry:?}").into());
    };
    let name = fields
        .first()
        .and_then(text)
        .ok_or("COMMAND entry without a name")?;
    let flags = match fields.get(2) {
        Some(redis::Value::Array(flags) | redis::Value::Set(flags)) => flags.as_slice(),
        _ => &[],
    };
    if flags.iter().filter_map(text).any(|f| f == "noscript") {
        into.insert(name.to_ascii_lowercase());
    }
    if let Some(redis::Value::Array(subcommands)) = fields.get(9) {
        for subcommand in subcommands {
            collect_noscript(subcommand, into)?;
        }
    }
    Ok(())
}

fn text(value: &redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::Okay => Some("OK".to_owned()),
        _ => None,
    }
}

/// What `INFO commandstats` and `INFO cpu` said at one moment.
struct ServerSnapshot {
    calls: BTreeMap<String, u64>,
    /// Microseconds Redis spent in each command (a script's own include
    /// the commands it ran, which are counted under their names too).
    usec: BTreeMap<String, u64>,
    cpu_seconds: f64,
    /// What the per-script pass's log had read by then (`None` outside it).
    scripts: Option<per_script::Totals>,
}

async fn server_snapshot(conn: &mut MultiplexedConnection) -> Result<ServerSnapshot> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .arg("cpu")
        .query_async(conn)
        .await?;
    let mut calls = BTreeMap::new();
    let mut usec = BTreeMap::new();
    let mut cpu_seconds = 0.0;
    for line in text.lines() {
        let Some((name, value)) = line.trim().split_once(':') else {
            continue;
        };
        if let Some(command) = name.strip_prefix("cmdstat_") {
            let count = value
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))
                .ok_or_else(|| format!("INFO commandstats line without calls: {line:?}"))?;
            calls.insert(command.to_owned(), count.parse()?);
            if let Some(us) = value
                .split(',')
                .find_map(|field| field.strip_prefix("usec="))
            {
                usec.insert(command.to_owned(), us.parse()?);
            }
        } else if name == "used_cpu_user" || name == "used_cpu_sys" {
            cpu_seconds += value.parse::<f64>()?;
        }
    }
    Ok(ServerSnapshot {
        calls,
        usec,
        cpu_seconds,
        scripts: per_script::snapshot()?,
    })
}

/// What Redis did between two snapshots, leaving out this program's own INFO.
struct ServerCost {
    calls: BTreeMap<String, u64>,
    usec: BTreeMap<String, u64>,
    cpu_us: f64,
    /// By script, in the per-script pass (empty outside it).
    scripts: per_script::Totals,
}

impl ServerCost {
    fn between(before: &ServerSnapshot, after: &ServerSnapshot) -> ServerCost {
        let calls = after
            .calls
            .iter()
            .filter(|(command, _)| command.as_str() != "info")
            .map(|(command, &n)| {
                let was = before.calls.get(command).copied().unwrap_or(0);
                (command.clone(), n.saturating_sub(was))
            })
            .filter(|&(_, n)| n > 0)
            .collect();
        let usec = after
            .usec
            .iter()
            .filter(|(command, _)| command.as_str() != "info")
            .map(|(command, &n)| {
                let was = before.usec.get(command).copied().unwrap_or(0);
                (command.clone(), n.saturating_sub(was))
            })
            .collect();
        ServerCost {
            calls,
            usec,
            cpu_us: (after.cpu_seconds - before.cpu_seconds) * 1e6,
            scripts: per_script::Totals::between(before.scripts.as_ref(), after.scripts.as_ref()),
        }
    }

    /// What each master did between its two snapshots, and the sum.
    fn of_masters(
        before: &[ServerSnapshot],
        after: &[ServerSnapshot],
    ) -> (ServerCost, Vec<ServerCost>) {
        let each: Vec<ServerCost> = before
            .iter()
            .zip(after)
            .map(|(before, after)| ServerCost::between(before, after))
            .collect();
        (ServerCost::sum(&each), each)
    }

    /// The costs of `parts` together (of several masters, or of several
    /// stretches of time).
    fn sum(parts: &[ServerCost]) -> ServerCost {
        let mut sum = ServerCost {
            calls: BTreeMap::new(),
            usec: BTreeMap::new(),
            cpu_us: 0.0,
            scripts: per_script::Totals::default(),
        };
        for cost in parts {
            for (command, &n) in &cost.calls {
                *sum.calls.entry(command.clone()).or_default() += n;
            }
            for (command, &n) in &cost.usec {
                *sum.usec.entry(command.clone()).or_default() += n;
            }
            sum.cpu_us += cost.cpu_us;
            sum.scripts.add(&cost.scripts);
        }
        sum
    }

    fn get(&self, command: &str) -> u64 {
        self.calls.get(command).copied().unwrap_or(0)
    }

    /// Every command Redis ran, those run by scripts included.
    fn commands(&self) -> u64 {
        self.calls.values().sum()
    }

    /// The commands clients sent, each a round trip unless pipelined.
    ///
    /// Redis (checked on 7.0) counts a command a script runs in `INFO
    /// commandstats` under its own name and in `INFO stats`
    /// `total_commands_processed` as well: an EVAL that runs SET, GET and DEL
    /// adds 4 to both, and MULTI/SET/GET/EXEC adds 4. Neither tells
    /// client-issued commands apart, so they are counted by kind: a command
    /// Redis flags `noscript` (EVAL, EVALSHA, SCRIPT LOAD, SUBSCRIBE and the
    /// rest of pub/sub but PUBLISH, MULTI, EXEC, HELLO, CLIENT SETINFO, ...)
    /// can only come from a client; of the others, `plain` are the ones the
    /// library sends outside Lua and no script of its runs, and `own` are the
    /// benchmark's own commands, known by count, which are left out.
    fn client_issued(&self, kinds: &CommandKinds, plain: &[&str], own: &[(&str, u64)]) -> u64 {
        let noscript: u64 = self
            .calls
            .iter()
            // REPLCONF comes from a replica (its acknowledgements), never
            // from a lock client.
            .filter(|(command, _)| *command != "replconf")
            .filter(|(command, _)| kinds.noscript.contains(command.as_str()))
            .map(|(_, &n)| n)
            .sum();
        let plain: u64 = plain
            .iter()
            .map(|&command| {
                let own: u64 = own
                    .iter()
                    .filter(|(c, _)| *c == command)
                    .map(|(_, n)| n)
                    .sum();
                self.get(command).saturating_sub(own)
            })
            .sum();
        noscript + plain
    }

    fn calls_json(&self) -> Value {
        json!(self.calls)
    }
}

/// Lock cost per acquisition (or attempt): every Redis call, the client's
/// round trips, and Redis CPU.
struct LockCost {
    calls: f64,
    round_trips: f64,
    /// Redis's CPU (every master's, summed).
    cpu_us: f64,
    /// This process's CPU (user and system, every thread) over the same
    /// part: the lock library's client side (W2's: its critical section's
    /// GET and SET too).
    client_cpu_us: f64,
}

impl LockCost {
    /// `own` are the benchmark's own commands in the delta (W2's data);
    /// `client_cpu` this process's CPU time over the timed part.
    fn of<L: Library>(
        bench: &Bench,
        cost: &ServerCost,
        own: &[(&str, u64)],
        client_cpu: Duration,
        n: usize,
    ) -> Self {
        let own_total: u64 = own.iter().map(|(_, k)| k).sum();
        let n = n.max(1) as f64;
        LockCost {
            calls: round3(cost.commands().saturating_sub(own_total) as f64 / n),
            round_trips: round3(
                cost.client_issued(&bench.kinds, L::PLAIN_COMMANDS, own) as f64 / n,
            ),
            cpu_us: round1(cost.cpu_us / n),
            client_cpu_us: round1(client_cpu.as_secs_f64() * 1e6 / n),
        }
    }
}

/// User plus system CPU time of this process so far.
fn process_cpu() -> Result<Duration> {
    // SAFETY: rusage is plain data, for which all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills in the rusage it is pointed at, which lives
    // through the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.try_into().unwrap_or(0))
            + Duration::from_micros(t.tv_usec.try_into().unwrap_or(0))
    };
    Ok(time(usage.ru_utime) + time(usage.ru_stime))
}

struct PingFloor {
    latencies: Latencies,
    elapsed: Duration,
}

async fn floor_ping(bench: &Bench) -> Result<PingFloor> {
    let plan = &bench.plan;
    let mut conn = connect(&bench.url).await?;
    let ping = redis::cmd("PING");
    for _ in 0..plan.warmup {
        ping.query_async::<()>(&mut conn).await?;
    }
    let mut samples = Vec::with_capacity(plan.cycles);
    let start = Instant::now();
    for _ in 0..plan.cycles {
        let sent = Instant::now();
        ping.query_async::<()>(&mut conn).await?;
        samples.push(sent.elapsed());
    }
    let elapsed = start.elapsed();
    Ok(PingFloor {
        latencies: Latencies::new(samples)?,
        elapsed,
    })
}

struct CycleRun {
    acquire: Latencies,
    release: Latencies,
    elapsed: Duration,
    cost: ServerCost,
    /// This process's CPU time over the cycles.
    client_cpu: Duration,
}

async fn floor_bare(bench: &Bench) -> Result<CycleRun> {
    let plan = &bench.plan;
    let mut stats = bench.stats.clone();
    let mut conn = connect(&bench.url).await?;
    let release_script = redis::Script::new(FLOOR_RELEASE);
    let pid = std::process::id();
    let mut cycle = 0u64;
    let mut bare_cycle = async |conn: &mut MultiplexedConnection| -> Result<(Duration, Duration)> {
        cycle += 1;
        let token = format!("{pid:016x}{cycle:016x}");
        let sent = Instant::now();
        let set: Option<String> = redis::cmd("SET")
            .arg(FLOOR_KEY)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(FLOOR_LEASE_MS)
            .query_async(conn)
            .await?;
        let taken = Instant::now();
        if set.is_none() {
            return Err(format!("{FLOOR_KEY} was held when the floor loop set it").into());
        }
        let released: i64 = release_script
            .key(FLOOR_KEY)
            .arg(&token)
            .invoke_async(conn)
            .await?;
        let done = Instant::now();
        if released != 1 {
            return Err(format!("{FLOOR_KEY} was gone when the floor loop released it").into());
        }
        Ok((taken - sent, done - taken))
    };
    for _ in 0..plan.warmup {
        bare_cycle(&mut conn).await?;
    }
    timed_cycles(plan.cycles, &mut stats, async || {
        bare_cycle(&mut conn).await
    })
    .await
}

/// Runs `cycles` acquire+release cycles, each timed by `cycle` as
/// (acquire, release), between two server snapshots.
async fn timed_cycles(
    cycles: usize,
    stats: &mut MultiplexedConnection,
    mut cycle: impl AsyncFnMut() -> Result<(Duration, Duration)>,
) -> Result<CycleRun> {
    let before = server_snapshot(stats).await?;
    let mut acquire = Vec::with_capacity(cycles);
    let mut release = Vec::with_capacity(cycles);
    let cpu_before = process_cpu()?;
    let start = Instant::now();
    for _ in 0..cycles {
        let (a, r) = cycle().await?;
        acquire.push(a);
        release.push(r);
    }
    let elapsed = start.elapsed();
    let client_cpu = process_cpu()?.saturating_sub(cpu_before);
    let after = server_snapshot(stats).await?;
    Ok(CycleRun {
        acquire: Latencies::new(acquire)?,
        release: Latencies::new(release)?,
        elapsed,
        cost: ServerCost::between(&before, &after),
        client_cpu,
    })
}

impl CycleRun {
    /// The runs of `parts` as one: their cycles, times and costs together.
    fn merge(parts: Vec<CycleRun>) -> Result<CycleRun> {
        let mut acquire = Vec::new();
        let mut release = Vec::new();
        let mut elapsed = Duration::ZERO;
        let mut client_cpu = Duration::ZERO;
        let mut costs = Vec::with_capacity(parts.len());
        for part in parts {
            acquire.extend(part.acquire.0);
            release.extend(part.release.0);
            elapsed += part.elapsed;
            client_cpu += part.client_cpu;
            costs.push(part.cost);
        }
        Ok(CycleRun {
            acquire: Latencies::new(acquire)?,
            release: Latencies::new(release)?,
            elapsed,
            cost: ServerCost::sum(&costs),
            client_cpu,
        })
    }
}

/// Worker threads for W2 and W3. Each has an OS thread and a runtime of its
/// own, as a separate process would (so W2's blocking 1 ms hold stalls only
/// itself); each warms up, says so, and starts its timed part when told.
struct Workers<T> {
    label: &'static str,
    handles: Vec<thread::JoinHandle<Result<Option<T>>>>,
    starts: Vec<mpsc::Sender<Instant>>,
    ready: mpsc::Receiver<Result<(), String>>,
    ready_seen: usize,
}

/// A worker's side of the start line.
struct StartLine {
    ready: mpsc::Sender<Result<(), String>>,
    start: mpsc::Receiver<Instant>,
}

impl StartLine {
    /// Warms up on a runtime of the worker's own, reports ready, waits for
    /// the start, then runs `timed`; `None` when the run was called off.
    fn run<S, T>(
        self,
        warm_up: impl AsyncFnOnce() -> Result<S>,
        timed: impl AsyncFnOnce(S, Instant) -> Result<T>,
    ) -> Result<Option<T>> {
        let warmed = current_thread_runtime().and_then(|rt| {
            let state = rt.block_on(warm_up())?;
            Ok((rt, state))
        });
        let (rt, state) = match warmed {
            Ok(warmed) => warmed,
            Err(e) => {
                let _ = self.ready.send(Err(chain(&*e)));
                return Err(e);
            }
        };
        let _ = self.ready.send(Ok(()));
        let Ok(start) = self.start.recv() else {
            return Ok(None);
        };
        rt.block_on(timed(state, start)).map(Some)
    }
}

impl<T: Send + 'static> Workers<T> {
    fn spawn(
        label: &'static str,
        n: usize,
        work: impl Fn(usize, StartLine) -> Result<Option<T>> + Send + Clone + 'static,
    ) -> Result<Workers<T>> {
        let (ready_tx, ready) = mpsc::channel();
        let mut handles = Vec::with_capacity(n);
        let mut starts = Vec::with_capacity(n);
        for id in 0..n {
            let (start_tx, start) = mpsc::channel();
            let line = StartLine {
                ready: ready_tx.clone(),
                start,
            };
            let work = work.clone();
            handles.push(
                thread::Builder::new()
                    .name(format!("{label}-worker-{id}"))
                    .spawn(move || work(id, line))?,
            );
            starts.push(start_tx);
        }
        Ok(Workers {
            label,
            handles,
            starts,
            ready,
            ready_seen: 0,
        })
    }

    /// Fails if a worker failed to warm up; does not wait.
    fn check(&mut self) -> Result<()> {
        while let Ok(report) = self.ready.try_recv() {
            report.map_err(|e| format!("{} worker warm-up: {e}", self.label))?;
            self.ready_seen += 1;
        }
        Ok(())
    }

    fn wait_ready(&mut self) -> Result<()> {
        while self.ready_seen < self.handles.len() {
            match self.ready.recv_timeout(SETUP_TIMEOUT) {
                Ok(Ok(())) => self.ready_seen += 1,
                Ok(Err(e)) => return Err(format!("{} worker warm-up: {e}", self.label).into()),
                Err(_) => {
                    return Err(
                        format!("{} workers did not all warm up within 60 s", self.label).into(),
                    )
                }
            }
        }
        Ok(())
    }

    fn start(&self) -> Result<Instant> {
        let start = Instant::now();
        for tx in &self.starts {
            tx.send(start)
                .map_err(|_| format!("a {} worker stopped before the start", self.label))?;
        }
        Ok(start)
    }

    fn join(self) -> Result<Vec<T>> {
        let mut results = Vec::with_capacity(self.handles.len());
        for (id, handle) in self.handles.into_iter().enumerate() {
            let result = handle
                .join()
                .map_err(|_| format!("{} worker {id} panicked", self.label))?
                .map_err(|e| format!("{} worker {id}: {}", self.label, chain(&*e)))?
                .ok_or_else(|| format!("{} worker {id} did not run", self.label))?;
            results.push(result);
        }
        Ok(results)
    }
}

struct W1Run {
    library: &'static str,
    run: CycleRun,
    lock: LockCost,
}

fn w1<L: Library>(bench: &Bench) -> Result<W1Run> {
    w1_on::<L>(bench, &bench.url, &bench.stats)
}

/// Blocks W1 is cut into when two libraries run it side by side.
const W1_BLOCKS: usize = 10;

/// W1 for leasehold's `Mutex` and rslock in one pass: their timed cycles
/// run in alternating blocks (which one goes first alternates too), so
/// that both meet the machine as it is in the same seconds; a library's
/// figures are those of its blocks together. This machine's speed moves
/// by a third from one minute to the next: run one after the other, the
/// two libraries' ratio moved with it.
fn w1_side_by_side(bench: &Bench) -> Result<[W1Run; 2]> {
    let plan = &bench.plan;
    bench.rt.block_on(async {
        let ours = LeaseholdMutex::connect(&bench.url)?;
        let ours = ours.lock(W1_LOCK)?;
        let theirs = Rslock::connect(&bench.url)?;
        let theirs = theirs.lock(W1_LOCK)?;
        for _ in 0..plan.warmup {
            w1_cycle::<LeaseholdMutex>(&ours).await?;
            w1_cycle::<Rslock>(&theirs).await?;
        }
        let mut stats = bench.stats.clone();
        let block = plan.cycles.div_ceil(W1_BLOCKS);
        let (mut ours_runs, mut theirs_runs) = (Vec::new(), Vec::new());
        for i in 0..W1_BLOCKS {
            let cycles = block.min(plan.cycles - block * i);
            if cycles == 0 {
                break;
            }
            for side in [i % 2, 1 - i % 2] {
                if side == 0 {
                    ours_runs.push(
                        timed_cycles(cycles, &mut stats, async || {
                            w1_cycle::<LeaseholdMutex>(&ours).await
                        })
                        .await?,
                    );
                } else {
                    theirs_runs.push(
                        timed_cycles(cycles, &mut stats, async || {
                            w1_cycle::<Rslock>(&theirs).await
                        })
                        .await?,
                    );
                }
            }
        }
        let (ours, theirs) = (CycleRun::merge(ours_runs)?, CycleRun::merge(theirs_runs)?);
        Ok([
            W1Run {
                library: LeaseholdMutex::NAME,
                lock: LockCost::of::<LeaseholdMutex>(
                    bench,
                    &ours.cost,
                    &[],
                    ours.client_cpu,
                    plan.cycles,
                ),
                run: ours,
            },
            W1Run {
                library: Rslock::NAME,
                lock: LockCost::of::<Rslock>(
                    bench,
                    &theirs.cost,
                    &[],
                    theirs.client_cpu,
                    plan.cycles,
                ),
                run: theirs,
            },
        ])
    })
}

/// One W1 cycle: (acquire, release) times.
async fn w1_cycle<L: Library>(lock: &L::Lock) -> Result<(Duration, Duration)> {
    let sent = Instant::now();
    let guard = L::acquire(lock)
        .await?
        .ok_or_else(|| BoxError::from("W1 waited 30 s for its own lock"))?;
    let taken = Instant::now();
    L::release(guard).await?;
    Ok((taken - sent, Instant::now() - taken))
}

/// W1 with lock clients of `url`, server cost read through `stats`.
fn w1_on<L: Library>(bench: &Bench, url: &str, stats: &MultiplexedConnection) -> Result<W1Run> {
    let plan = &bench.plan;
    bench.rt.block_on(async {
        let library = L::connect(url)?;
        let lock = library.lock(W1_LOCK)?;
        for _ in 0..plan.warmup {
            w1_cycle::<L>(&lock).await?;
        }
        let mut stats = stats.clone();
        let run =
            timed_cycles(plan.cycles, &mut stats, async || w1_cycle::<L>(&lock).await).await?;
        Ok(W1Run {
            library: L::NAME,
            lock: LockCost::of::<L>(bench, &run.cost, &[], run.client_cpu, plan.cycles),
            run,
        })
    })
}

/// One W2 acquisition; times are since a start shared by all workers.
struct Acquisition {
    worker: usize,
    fence: Option<u64>,
    started: Duration,
    acquired: Duration,
    released: Duration,
}

#[derive(Default)]
struct W2Log {
    acquisitions: Vec<Acquisition>,
    /// Acquires that waited out the 30 s bound.
    timeouts: usize,
}

struct W2Run {
    library: &'static str,
    /// In lock order: by fence, or by the time of acquisition for a library
    /// without fences.
    acquisitions: Vec<Acquisition>,
    per_worker: Vec<usize>,
    timeouts: usize,
    elapsed: Duration,
    counter: u64,
    cost: ServerCost,
    lock: LockCost,
    figures: W2Figures,
}

fn w2<L: Library>(bench: &Bench, on: &Servers) -> Result<W2Run> {
    let rt = &bench.rt;
    let mut data = on.data.clone();
    let gate_library = L::connect(&on.url)?;
    let gate = gate_library.lock(W2_LOCK)?;
    let held = rt.block_on(async {
        redis::cmd("SET")
            .arg(W2_COUNTER)
            .arg(0)
            .query_async::<()>(&mut data)
            .await?;
        L::try_acquire(&gate)
            .await?
            .ok_or_else(|| BoxError::from("w2:lock was held before W2"))
    })?;

    let origin = Instant::now();
    let (url, data_url) = (on.url.clone(), on.data_url.clone());
    let run_for = bench.plan.w2_run;
    let mut workers = Workers::spawn("W2", W2_WORKERS, move |id, line| {
        w2_worker::<L>(id, &url, &data_url, origin, run_for, line)
    })?;
    // The workers' warm-up acquire waits behind the gate, which opens their
    // notification connections too; it opens once all of them wait.
    rt.block_on(wait_for_waiters::<L>(&gate, &mut workers))?;
    rt.block_on(L::release(held))?;
    workers.wait_ready()?;

    let before = rt.block_on(on.snapshot())?;
    let cpu_before = process_cpu()?;
    let start = workers.start()?;
    let logs = workers.join()?;
    let client_cpu = process_cpu()?.saturating_sub(cpu_before);
    let after = rt.block_on(on.snapshot())?;
    let counter: Option<u64> =
        rt.block_on(redis::cmd("GET").arg(W2_COUNTER).query_async(&mut data))?;

    let per_worker: Vec<usize> = logs.iter().map(|log| log.acquisitions.len()).collect();
    let timeouts = logs.iter().map(|log| log.timeouts).sum();
    let mut acquisitions: Vec<Acquisition> =
        logs.into_iter().flat_map(|log| log.acquisitions).collect();
    if acquisitions.iter().all(|a| a.fence.is_some()) {
        acquisitions.sort_unstable_by_key(|a| a.fence);
    } else {
        acquisitions.sort_unstable_by_key(|a| a.acquired);
    }
    let last_release = acquisitions
        .iter()
        .map(|a| a.released)
        .max()
        .ok_or("W2 made no acquisition")?;
    let elapsed = last_release.saturating_sub(start - origin);
    let n = acquisitions.len();
    let figures = W2Figures::of(&acquisitions, &per_worker, elapsed)?;
    let (cost, _) = ServerCost::of_masters(&before, &after);
    let data = [("get", n as u64), ("set", n as u64)];
    Ok(W2Run {
        library: L::NAME,
        lock: LockCost::of::<L>(bench, &cost, &data, client_cpu, n),
        acquisitions,
        per_worker,
        timeouts,
        elapsed,
        counter: counter.unwrap_or(0),
        cost,
        figures,
    })
}

async fn wait_for_waiters<L: Library>(gate: &L::Lock, workers: &mut Workers<W2Log>) -> Result<()> {
    let n = W2_WORKERS as u64;
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        workers.check()?;
        let Some(waiting) = L::waiting(gate).await? else {
            // The library cannot tell: its warm-up runs as the gate opens.
            return Ok(());
        };
        if waiting >= n {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(
                format!("only {waiting} of {n} W2 workers waited for w2:lock within 60 s").into(),
            );
        }
        // Redis has no signal for a new subscriber; poll its count.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn w2_worker<L: Library>(
    id: usize,
    url: &str,
    data_url: &str,
    origin: Instant,
    run_for: Duration,
    line: StartLine,
) -> Result<Option<W2Log>> {
    line.run(
        async || {
            let library = L::connect(url)?;
            let lock = library.lock(W2_LOCK)?;
            let mut data = connect(data_url).await?;
            redis::cmd("GET")
                .arg(W2_COUNTER)
                .query_async::<Option<u64>>(&mut data)
                .await?;
            let guard = L::acquire(&lock)
                .await?
                .ok_or("the warm-up acquire waited 30 s")?;
            L::release(guard).await?;
            Ok((library, lock, data))
        },
        async |state: (L, L::Lock, MultiplexedConnection), start| {
            let (_library, lock, mut data) = state;
            let end = start + run_for;
            let mut log = W2Log::default();
            while Instant::now() < end {
                let started = Instant::now();
                let Some(guard) = L::acquire(&lock).await? else {
                    log.timeouts += 1;
                    continue;
                };
                let acquired = Instant::now();
                let value: Option<u64> = redis::cmd("GET")
                    .arg(W2_COUNTER)
                    .query_async(&mut data)
                    .await?;
                thread::sleep(W2_HOLD);
                redis::cmd("SET")
                    .arg(W2_COUNTER)
                    .arg(value.unwrap_or(0) + 1)
                    .query_async::<()>(&mut data)
                    .await?;
                let fence = L::fence(&guard);
                L::release(guard).await?;
                let released = Instant::now();
                log.acquisitions.push(Acquisition {
                    worker: id,
                    fence,
                    started: started - origin,
                    acquired: acquired - origin,
                    released: released - origin,
                });
            }
            Ok(log)
        },
    )
}

struct W2Figures {
    acquisitions_per_s: f64,
    share_min: f64,
    share_max: f64,
    wait: Latencies,
    mean_idle_gap_us: f64,
    handoffs: usize,
    taken_back: usize,
}

impl W2Figures {
    /// `acquisitions` in lock order.
    fn of(
        acquisitions: &[Acquisition],
        per_worker: &[usize],
        elapsed: Duration,
    ) -> Result<W2Figures> {
        let n = acquisitions.len();
        let share = |count: usize| round3(count as f64 / n as f64);
        let wait = Latencies::new(
            acquisitions
                .iter()
                .map(|a| a.acquired - a.started)
                .collect(),
        )?;
        let pairs = acquisitions.windows(2);
        let handoffs = pairs.len();
        let gaps_ns: i128 = pairs
            .clone()
            .map(|w| w[1].acquired.as_nanos() as i128 - w[0].released.as_nanos() as i128)
            .sum();
        let taken_back = pairs.filter(|w| w[0].worker == w[1].worker).count();
        Ok(W2Figures {
            acquisitions_per_s: per_second(n, elapsed),
            share_min: share(per_worker.iter().copied().min().unwrap_or(0)),
            share_max: share(per_worker.iter().copied().max().unwrap_or(0)),
            wait,
            mean_idle_gap_us: if handoffs == 0 {
                0.0
            } else {
                round1(gaps_ns as f64 / handoffs as f64 / 1_000.0)
            },
            handoffs,
            taken_back,
        })
    }
}

/// A small deterministic generator (splitmix64), so that both libraries'
/// W3 workers try the same keys in the same order.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z % n as u64) as usize
    }
}

#[derive(Default)]
struct W3Log {
    attempts: usize,
    successes: usize,
    /// Of each attempt (the release after a success is not in it).
    latencies: Vec<Duration>,
    finished: Option<Instant>,
}

struct W3Run {
    library: &'static str,
    attempts: usize,
    successes: usize,
    attempt: Latencies,
    elapsed: Duration,
    /// Summed over the masters.
    cost: ServerCost,
    /// Each master's, in the order of [`Servers::masters`].
    per_master: Vec<ServerCost>,
    /// Per attempt.
    lock: LockCost,
    /// This process's CPU time while the workers ran.
    client_cpu: Duration,
}

/// Slices W3 is cut into when two libraries run it side by side.
const W3_SLICES: u32 = 5;

/// W3 for leasehold's `Mutex` and rslock: each runs `W3_SLICES` slices of
/// the run (workers started, warmed up and timed anew each time), the two
/// libraries' slices alternating (and which goes first), so that both meet
/// the machine as it is in the same seconds (see `w1_side_by_side`).
fn w3_side_by_side(bench: &Bench, on: &Servers) -> Result<[W3Run; 2]> {
    let slice = bench.plan.w3_run / W3_SLICES;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..W3_SLICES {
        for side in [i % 2, 1 - i % 2] {
            if side == 0 {
                ours.push(w3_for::<LeaseholdMutex>(bench, on, slice)?);
            } else {
                theirs.push(w3_for::<Rslock>(bench, on, slice)?);
            }
        }
    }
    Ok([
        merge_w3::<LeaseholdMutex>(bench, ours)?,
        merge_w3::<Rslock>(bench, theirs)?,
    ])
}

/// The W3 runs of `parts` (one library's slices) as one.
fn merge_w3<L: Library>(bench: &Bench, parts: Vec<W3Run>) -> Result<W3Run> {
    let (mut attempts, mut successes) = (0, 0);
    let (mut elapsed, mut client_cpu) = (Duration::ZERO, Duration::ZERO);
    let mut latencies = Vec::new();
    let mut costs = Vec::new();
    let mut per_master: Vec<Vec<ServerCost>> = Vec::new();
    for part in parts {
        attempts += part.attempts;
        successes += part.successes;
        elapsed += part.elapsed;
        client_cpu += part.client_cpu;
        latencies.extend(part.attempt.0);
        costs.push(part.cost);
        per_master.resize_with(part.per_master.len().max(per_master.len()), Vec::new);
        for (i, cost) in part.per_master.into_iter().enumerate() {
            per_master[i].push(cost);
        }
    }
    let cost = ServerCost::sum(&costs);
    Ok(W3Run {
        library: L::NAME,
        attempts,
        successes,
        attempt: Latencies::new(latencies)?,
        elapsed,
        lock: LockCost::of::<L>(bench, &cost, &[], client_cpu, attempts),
        cost,
        per_master: per_master
            .iter()
            .map(|each| ServerCost::sum(each))
            .collect(),
        client_cpu,
    })
}

fn w3<L: Library>(bench: &Bench, on: &Servers) -> Result<W3Run> {
    w3_for::<L>(bench, on, bench.plan.w3_run)
}

/// W3 for `run_for`.
fn w3_for<L: Library>(bench: &Bench, on: &Servers, run_for: Duration) -> Result<W3Run> {
    let url = on.url.clone();
    let warmup = bench.plan.warmup;
    let mut workers = Workers::spawn("W3", W3_WORKERS, move |id, line| {
        w3_worker::<L>(id, &url, warmup, run_for, line)
    })?;
    workers.wait_ready()?;
    let before = bench.rt.block_on(on.snapshot())?;
    let cpu_before = process_cpu()?;
    let start = workers.start()?;
    let logs = workers.join()?;
    let client_cpu = process_cpu()?.saturating_sub(cpu_before);
    let after = bench.rt.block_on(on.snapshot())?;

    let finished = logs
        .iter()
        .filter_map(|log| log.finished)
        .max()
        .ok_or("W3 made no attempt")?;
    let attempts = logs.iter().map(|log| log.attempts).sum();
    let successes = logs.iter().map(|log| log.successes).sum();
    let (cost, per_master) = ServerCost::of_masters(&before, &after);
    Ok(W3Run {
        library: L::NAME,
        attempts,
        successes,
        attempt: Latencies::new(logs.into_iter().flat_map(|log| log.latencies).collect())?,
        elapsed: finished - start,
        lock: LockCost::of::<L>(bench, &cost, &[], client_cpu, attempts),
        cost,
        per_master,
        client_cpu,
    })
}

fn w3_worker<L: Library>(
    id: usize,
    url: &str,
    warmup: usize,
    run_for: Duration,
    line: StartLine,
) -> Result<Option<W3Log>> {
    let attempt = async |locks: &[L::Lock], keys: &mut SplitMix| -> Result<bool> {
        let Some(guard) = L::try_acquire(&locks[keys.below(W3_KEYS)]).await? else {
            return Ok(false);
        };
        L::release(guard).await?;
        Ok(true)
    };
    line.run(
        async || {
            let library = L::connect(url)?;
            let locks = (0..W3_KEYS)
                .map(|k| library.lock(&format!("w3:{k}")))
                .collect::<Result<Vec<_>>>()?;
            let mut keys = SplitMix(id as u64 + 1);
            for _ in 0..warmup {
                attempt(&locks, &mut keys).await?;
            }
            Ok((library, locks, keys))
        },
        async |state: (L, Vec<L::Lock>, SplitMix), start| {
            let (_library, locks, mut keys) = state;
            let end = start + run_for;
            let mut log = W3Log::default();
            while Instant::now() < end {
                let lock = &locks[keys.below(W3_KEYS)];
                let sent = Instant::now();
                let guard = L::try_acquire(lock).await?;
                log.latencies.push(sent.elapsed());
                log.attempts += 1;
                if let Some(guard) = guard {
                    L::release(guard).await?;
                    log.successes += 1;
                }
            }
            log.finished = Some(Instant::now());
            Ok(log)
        },
    )
}

/// W5 with K leases held by one client.
struct W5Row {
    leases: usize,
    /// Taking the K leases, `W5_BATCH` at a time.
    build: Duration,
    /// The part with nothing but the K leases (and the sampling).
    hold: Duration,
    cost: ServerCost,
    client_cpu: Duration,
    /// Bursts of EVALSHA seen in `W5_SAMPLE` samples: renewal rounds.
    bursts: usize,
    lost: usize,
    release_failed: usize,
    /// acquire+release of another lock on the same client, while K are held.
    probe: Latencies,
}

impl W5Row {
    /// Renewal rounds the leases call for: one per third of a lease.
    fn rounds_expected(&self) -> f64 {
        self.hold.as_secs_f64() / (W5_LEASE.as_secs_f64() / 3.0)
    }

    fn renew_evalsha(&self) -> u64 {
        self.cost.get("evalsha")
    }
}

fn w5(bench: &Bench) -> Result<Vec<W5Row>> {
    if bench.plan.skip_w5 {
        return Ok(Vec::new());
    }
    bench
        .plan
        .w5_leases
        .iter()
        .map(|&k| bench.rt.block_on(w5_row(bench, k)))
        .collect()
}

async fn w5_row(bench: &Bench, k: usize) -> Result<W5Row> {
    let plan = &bench.plan;
    let mut stats = bench.stats.clone();
    let client = Client::builder(&bench.url).watchdog(true).build()?;
    let probe = client.mutex(W5_PROBE_LOCK)?.with_lease(W5_LEASE)?;
    for _ in 0..plan.warmup {
        probe.acquire_timeout(WAIT).await?.release().await?;
    }

    let building = Instant::now();
    let mut guards = Vec::with_capacity(k);
    for first in (0..k).step_by(W5_BATCH) {
        let mutexes = (first..k.min(first + W5_BATCH))
            .map(|i| Ok(client.mutex(&format!("w5:{i}"))?.with_lease(W5_LEASE)?))
            .collect::<Result<Vec<Mutex>>>()?;
        for taken in join_all(mutexes.iter().map(Mutex::try_acquire)).await {
            guards.push(taken?.ok_or("a W5 lease was held before W5 took it")?);
        }
    }
    let build = building.elapsed();

    let before = server_snapshot(&mut stats).await?;
    let cpu_before = process_cpu()?;
    let held_from = Instant::now();
    let mut bursts = 0;
    let mut last = before.calls.get("evalsha").copied().unwrap_or(0);
    let mut rising = false;
    let mut tick = tokio::time::interval(W5_SAMPLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while held_from.elapsed() < plan.w5_hold {
        tick.tick().await;
        let now = server_snapshot(&mut stats).await?;
        let evalsha = now.calls.get("evalsha").copied().unwrap_or(0);
        if evalsha > last && !rising {
            bursts += 1;
        }
        rising = evalsha > last;
        last = evalsha;
    }
    let hold = held_from.elapsed();
    let after = server_snapshot(&mut stats).await?;
    let client_cpu = process_cpu()?.saturating_sub(cpu_before);

    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(W5_PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let probing = Instant::now();
    while probing.elapsed() < plan.w5_probe {
        tick.tick().await;
        let sent = Instant::now();
        probe.acquire_timeout(WAIT).await?.release().await?;
        samples.push(sent.elapsed());
    }

    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    let mut release_failed = 0;
    while !guards.is_empty() {
        let batch: Vec<MutexGuard> = guards.drain(..guards.len().min(W5_BATCH)).collect();
        for released in join_all(batch.into_iter().map(MutexGuard::release)).await {
            release_failed += usize::from(released.is_err());
        }
    }
    client.flush().await;
    Ok(W5Row {
        leases: k,
        build,
        hold,
        cost: ServerCost::between(&before, &after),
        client_cpu,
        bursts,
        lost,
        release_failed,
        probe: Latencies::new(samples)?,
    })
}

fn row(label: &str, value: impl std::fmt::Display) {
    println!("  {label:<44} {value}");
}

fn print_floor(plan: &Plan, ping: &PingFloor, bare: &CycleRun) {
    println!();
    println!(
        "floor: bare redis-rs, one connection, {} cycles after {} warm-up",
        plan.cycles, plan.warmup
    );
    row(
        "PING ops/s",
        format!("{:.0}", plan.cycles as f64 / ping.elapsed.as_secs_f64()),
    );
    row("PING p50 / p99 µs", ping.latencies.p50_p99());
    row(
        "SET NX PX + Lua release cycles/s",
        format!("{:.0}", plan.cycles as f64 / bare.elapsed.as_secs_f64()),
    );
    row("SET NX PX p50 / p99 µs", bare.acquire.p50_p99());
    row("Lua release p50 / p99 µs", bare.release.p50_p99());
    row(
        "redis calls / cycle",
        round3(bare.cost.commands() as f64 / plan.cycles as f64),
    );
    row(
        "redis CPU µs / cycle",
        round1(bare.cost.cpu_us / plan.cycles as f64),
    );
}

/// Which way a figure is better.
#[derive(Clone, Copy)]
enum Better {
    Higher,
    Lower,
    Neither,
}

impl Better {
    fn word(self) -> &'static str {
        match self {
            Better::Higher => "higher",
            Better::Lower => "lower",
            Better::Neither => "-",
        }
    }
}

/// A comparison table: one column per library, rslock's last, then one
/// column per leasehold library with its ratio to rslock, and which way is
/// better.
struct Table {
    columns: usize,
}

/// Width of a library's column (`leasehold FairMutex` fits).
const COLUMN: usize = 20;
/// Width of a ratio column (`FairMutex/rslock` fits).
const RATIO_COLUMN: usize = 16;

impl Table {
    fn new(libraries: &[&str]) -> Table {
        let mut header = format!("  {:<44}", "");
        for library in libraries {
            header.push_str(&format!(" {library:>COLUMN$}"));
        }
        if let Some((peer, ours)) = libraries.split_last() {
            let peer = peer.split(' ').next().unwrap_or(peer);
            for library in ours {
                let short = library.strip_prefix("leasehold ").unwrap_or(library);
                let ratio = format!("{short}/{peer}");
                header.push_str(&format!(" {ratio:>RATIO_COLUMN$}"));
            }
        }
        header.push_str("  better");
        println!("{header}");
        Table {
            columns: libraries.len(),
        }
    }

    fn num(&self, label: &str, values: &[f64], better: Better) {
        debug_assert_eq!(values.len(), self.columns);
        let Some((&peer, ours)) = values.split_last() else {
            return;
        };
        let mut line = format!("  {label:<44}");
        for &value in values {
            line.push_str(&format!(" {:>COLUMN$}", number(value)));
        }
        for &value in ours {
            let ratio = if peer == 0.0 {
                "-".to_owned()
            } else {
                format!("{:.2}", value / peer)
            };
            line.push_str(&format!(" {ratio:>RATIO_COLUMN$}"));
        }
        line.push_str(&format!("  {}", better.word()));
        println!("{line}");
    }

    fn text(&self, label: &str, values: &[String]) {
        let mut line = format!("  {label:<44}");
        for value in values {
            line.push_str(&format!(" {value:>COLUMN$}"));
        }
        println!("{line}");
    }
}

/// A figure for the table: whole numbers as such, others to a sensible
/// number of digits.
fn number(x: f64) -> String {
    if x.fract() == 0.0 || x.abs() >= 1_000.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    }
}

/// W1's table; `side_by_side` when the runs' cycles alternated in blocks
/// (see `w1_side_by_side`).
fn print_w1(plan: &Plan, runs: &[W1Run], side_by_side: bool) {
    println!();
    println!(
        "W1 uncontended: 1 worker, {W1_LOCK}, {} cycles after {} warm-up, blocking acquire (30 s bound) + release{}",
        plan.cycles,
        plan.warmup,
        if side_by_side {
            format!("; the libraries' cycles alternate in {W1_BLOCKS} blocks each")
        } else {
            "; one run after the other".to_owned()
        }
    );
    let table = Table::new(&runs.iter().map(|r| r.library).collect::<Vec<_>>());
    let num = |label, better, f: &dyn Fn(&W1Run) -> f64| {
        table.num(label, &runs.iter().map(f).collect::<Vec<_>>(), better);
    };
    num("ops/s", Better::Higher, &|r| {
        per_second(plan.cycles, r.run.elapsed)
    });
    num("acquire p50 µs", Better::Lower, &|r| {
        r.run.acquire.p50_us()
    });
    num("acquire p99 µs", Better::Lower, &|r| {
        r.run.acquire.p99_us()
    });
    num("release p50 µs", Better::Lower, &|r| {
        r.run.release.p50_us()
    });
    num("release p99 µs", Better::Lower, &|r| {
        r.run.release.p99_us()
    });
    print_lock_cost(
        &table,
        "acquisition",
        &runs.iter().map(|r| &r.lock).collect::<Vec<_>>(),
    );
    print_commands(
        "W1",
        "cycle",
        &runs
            .iter()
            .map(|r| (r.library, &r.run.cost, plan.cycles))
            .collect::<Vec<_>>(),
    );
}

fn print_lock_cost(table: &Table, per: &str, costs: &[&LockCost]) {
    let num = |label: String, f: &dyn Fn(&LockCost) -> f64| {
        table.num(
            &label,
            &costs.iter().map(|c| f(c)).collect::<Vec<_>>(),
            Better::Lower,
        );
    };
    num(format!("redis calls / {per} (scripts' too)"), &|c| c.calls);
    num(format!("round trips / {per} (client-issued)"), &|c| {
        c.round_trips
    });
    num(format!("redis CPU µs / {per}"), &|c| c.cpu_us);
    num(format!("client CPU µs / {per} (this process)"), &|c| {
        c.client_cpu_us
    });
}

fn print_w2(plan: &Plan, runs: &[W2Run]) {
    println!();
    println!(
        "W2 contended: {W2_WORKERS} workers, {W2_LOCK}, {} s, blocking acquire (30 s bound), {} ms hold",
        plan.w2_run.as_secs(),
        W2_HOLD.as_millis()
    );
    let table = Table::new(&runs.iter().map(|r| r.library).collect::<Vec<_>>());
    w2_rows(&table, &runs.iter().collect::<Vec<_>>());
    print_commands(
        "W2 (with the critical section's GET and SET)",
        "acquisition",
        &runs
            .iter()
            .map(|r| (r.library, &r.cost, r.acquisitions.len()))
            .collect::<Vec<_>>(),
    );
}

/// W2's rows of `table`, a column per run.
fn w2_rows(table: &Table, runs: &[&W2Run]) {
    let num = |label, better, f: &dyn Fn(&W2Run) -> f64| {
        table.num(
            label,
            &runs.iter().map(|r| f(r)).collect::<Vec<_>>(),
            better,
        );
    };
    num("acquisitions", Better::Higher, &|r| {
        r.acquisitions.len() as f64
    });
    num("acquisitions/s", Better::Higher, &|r| {
        r.figures.acquisitions_per_s
    });
    num("share per worker min (fair 0.125)", Better::Higher, &|r| {
        r.figures.share_min
    });
    num("share per worker max (fair 0.125)", Better::Lower, &|r| {
        r.figures.share_max
    });
    num("wait to acquire p50 µs", Better::Lower, &|r| {
        r.figures.wait.p50_us()
    });
    num("wait to acquire p99 µs", Better::Lower, &|r| {
        r.figures.wait.p99_us()
    });
    num("wait to acquire max µs", Better::Lower, &|r| {
        micros(r.figures.wait.max())
    });
    num(
        "mean idle gap, release to next acquire µs",
        Better::Lower,
        &|r| r.figures.mean_idle_gap_us,
    );
    num(
        "releaser took the lock straight back %",
        Better::Neither,
        &|r| round1(percent(r.figures.taken_back, r.figures.handoffs)),
    );
    num("acquires that waited out 30 s", Better::Lower, &|r| {
        r.timeouts as f64
    });
    table.text(
        "counter / acquisitions",
        &runs
            .iter()
            .map(|r| {
                let n = r.acquisitions.len() as u64;
                if r.counter == n {
                    "ok".to_owned()
                } else {
                    format!("LOST {}", n as i64 - r.counter as i64)
                }
            })
            .collect::<Vec<_>>(),
    );
    print_lock_cost(
        table,
        "acquisition",
        &runs.iter().map(|r| &r.lock).collect::<Vec<_>>(),
    );
    row(
        "",
        "calls and round trips leave out the critical section's GET and SET \
         (2 calls, 2 round trips per acquisition); CPU includes them",
    );
}

/// Where the Redis calls and time of each run go, per acquisition (or
/// attempt), from `INFO commandstats`: the scripts (FCALL, EVALSHA), whose
/// time includes that of the commands they ran, and every command under its
/// own name, run by a script or sent by a client.
fn print_commands(title: &str, per: &str, runs: &[(&str, &ServerCost, usize)]) {
    let mut commands: Vec<&String> = runs
        .iter()
        .flat_map(|(_, cost, _)| cost.calls.keys())
        .collect();
    commands.sort();
    commands.dedup();
    // Scripts first, then by name.
    commands.sort_by_key(|c| !matches!(c.as_str(), "fcall" | "evalsha" | "eval" | "fcall_ro"));
    println!("  {title}: calls / {per} and Redis µs / {per} by command (INFO commandstats; a script's µs include its commands')");
    let header: String = runs
        .iter()
        .map(|(library, _, _)| format!("{library:>28}"))
        .collect();
    println!("  {:<16}{header}", "command");
    for command in commands {
        let cells: String = runs
            .iter()
            .map(|(_, cost, n)| {
                let n = (*n).max(1) as f64;
                let calls = cost.get(command) as f64 / n;
                let us = cost.usec.get(command).copied().unwrap_or(0) as f64 / n;
                if calls == 0.0 {
                    format!("{:>28}", "-")
                } else {
                    format!("{:>28}", format!("{} / {}", round3(calls), round3(us)))
                }
            })
            .collect();
        println!("  {command:<16}{cells}");
    }
}

fn print_w3(plan: &Plan, runs: &[W3Run]) {
    println!();
    println!(
        "W3 many keys: {W3_WORKERS} workers, {W3_KEYS} keys, {} s, one non-waiting attempt on a random key, release on success; \
         the libraries' runs alternate in {W3_SLICES} slices each",
        plan.w3_run.as_secs()
    );
    let table = Table::new(&runs.iter().map(|r| r.library).collect::<Vec<_>>());
    w3_rows(&table, &runs.iter().collect::<Vec<_>>());
    print_commands(
        "W3",
        "attempt",
        &runs
            .iter()
            .map(|r| (r.library, &r.cost, r.attempts))
            .collect::<Vec<_>>(),
    );
}

/// W3's rows of `table`, a column per run.
fn w3_rows(table: &Table, runs: &[&W3Run]) {
    let num = |label, better, f: &dyn Fn(&W3Run) -> f64| {
        table.num(
            label,
            &runs.iter().map(|r| f(r)).collect::<Vec<_>>(),
            better,
        );
    };
    num("attempts", Better::Higher, &|r| r.attempts as f64);
    num("attempts/s", Better::Higher, &|r| {
        per_second(r.attempts, r.elapsed)
    });
    num("success ratio", Better::Higher, &|r| {
        round3(r.successes as f64 / r.attempts as f64)
    });
    num("attempt p50 µs", Better::Lower, &|r| r.attempt.p50_us());
    num("attempt p99 µs", Better::Lower, &|r| r.attempt.p99_us());
    print_lock_cost(
        table,
        "attempt",
        &runs.iter().map(|r| &r.lock).collect::<Vec<_>>(),
    );
}

fn print_w5(plan: &Plan, rows: &[W5Row]) {
    println!();
    if plan.skip_w5 {
        println!("W5 renewal load (leasehold): not run (--skip-w5)");
        return;
    }
    println!(
        "W5 renewal load (leasehold): one client holds K leases of {} s, watchdog on, {} s; \
         then acquire+release of {W5_PROBE_LOCK} on the same client every {} ms for {} s",
        W5_LEASE.as_secs(),
        plan.w5_hold.as_secs(),
        W5_PROBE_EVERY.as_millis(),
        plan.w5_probe.as_secs()
    );
    let line = |label: &str, f: &dyn Fn(&W5Row) -> String| {
        let mut text = format!("  {label:<44}");
        for r in rows {
            text.push_str(&format!(" {:>12}", f(r)));
        }
        println!("{text}");
    };
    line("K leases held", &|r| r.leases.to_string());
    line("taking the K leases s", &|r| {
        format!("{:.2}", r.build.as_secs_f64())
    });
    line("renewal rounds expected (hold / (lease/3))", &|r| {
        format!("{:.1}", r.rounds_expected())
    });
    line("EVALSHA bursts seen (50 ms samples)", &|r| {
        r.bursts.to_string()
    });
    line("round trips / round (bursts / expected)", &|r| {
        number(round3(r.bursts as f64 / r.rounds_expected()))
    });
    line("renew EVALSHA / round (ideal ⌈K/256⌉)", &|r| {
        number(round3(r.renew_evalsha() as f64 / r.rounds_expected()))
    });
    line("redis calls/s (scripts' too)", &|r| {
        number(round1(r.cost.commands() as f64 / r.hold.as_secs_f64()))
    });
    line("redis CPU ms/s", &|r| {
        number(round3(r.cost.cpu_us / 1e3 / r.hold.as_secs_f64()))
    });
    line("client CPU ms/s", &|r| {
        number(round3(
            r.client_cpu.as_secs_f64() * 1e3 / r.hold.as_secs_f64(),
        ))
    });
    line("leases lost / releases failed", &|r| {
        format!("{} / {}", r.lost, r.release_failed)
    });
    line("probe acquire+release p50 µs", &|r| {
        number(r.probe.p50_us())
    });
    line("probe acquire+release p99 µs", &|r| {
        number(r.probe.p99_us())
    });
    line("probe acquire+release max µs", &|r| {
        number(micros(r.probe.max()))
    });
    if let Some(none) = rows.iter().find(|r| r.leases == 0) {
        line("probe p99 / p99 with none held", &|r| {
            format!("{:.2}", r.probe.p99_us() / none.probe.p99_us())
        });
    }
    row(
        "",
        "CPU and calls are over the hold alone, INFO sampling included (K = 0 shows its cost)",
    );
}

fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// `{"libraries": {name: figures}, "ratio_leasehold_over_rslock": {name:
/// {figure: ratio}}}`, rslock being the last library.
fn compared(libraries: Vec<(&str, Value)>) -> Map<String, Value> {
    compared_as(libraries, "libraries", "ratio_leasehold_over_rslock")
}

/// [`compared`] under other keys: `{group_key: {name: figures}, ratio_key:
/// {name: {figure: ratio}}}`, each ratio over the last column's figure.
fn compared_as(
    libraries: Vec<(&str, Value)>,
    group_key: &str,
    ratio_key: &str,
) -> Map<String, Value> {
    let mut out = Map::new();
    let mut ratios = Map::new();
    if let Some(((_, peer), ours)) = libraries.split_last() {
        for (name, figures) in ours {
            let mut ratio = Map::new();
            for (key, value) in figures.as_object().into_iter().flatten() {
                let (Some(a), Some(b)) = (value.as_f64(), peer.get(key).and_then(Value::as_f64))
                else {
                    continue;
                };
                if b != 0.0 {
                    ratio.insert(key.clone(), json!(round3(a / b)));
                }
            }
            ratios.insert((*name).to_owned(), Value::Object(ratio));
        }
    }
    let libraries: Map<String, Value> = libraries
        .into_iter()
        .map(|(name, figures)| (name.to_owned(), figures))
        .collect();
    out.insert(group_key.to_owned(), Value::Object(libraries));
    out.insert(ratio_key.to_owned(), Value::Object(ratios));
    out
}

fn with(mut head: Value, rest: Map<String, Value>) -> Value {
    if let Some(object) = head.as_object_mut() {
        object.extend(rest);
    }
    head
}

fn lock_cost_json(cost: &LockCost, per: &str, calls: &ServerCost) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert(format!("redis_calls_per_{per}"), json!(cost.calls));
    out.insert(format!("round_trips_per_{per}"), json!(cost.round_trips));
    out.insert(format!("redis_cpu_us_per_{per}"), json!(cost.cpu_us));
    out.insert(
        format!("client_cpu_us_per_{per}"),
        json!(cost.client_cpu_us),
    );
    out.insert("redis_calls".to_owned(), calls.calls_json());
    out
}

fn floor_json(plan: &Plan, ping: &PingFloor, bare: &CycleRun) -> Value {
    json!({
        "workload": "floor",
        "quick": plan.quick,
        "pinned": pinning::pinned(),
        "cycles": plan.cycles,
        "warmup": plan.warmup,
        "ping_ops_per_s": per_second(plan.cycles, ping.elapsed),
        "ping_p50_us": ping.latencies.p50_us(),
        "ping_p99_us": ping.latencies.p99_us(),
        "bare_cycles_per_s": per_second(plan.cycles, bare.elapsed),
        "bare_set_nx_p50_us": bare.acquire.p50_us(),
        "bare_set_nx_p99_us": bare.acquire.p99_us(),
        "bare_release_p50_us": bare.release.p50_us(),
        "bare_release_p99_us": bare.release.p99_us(),
        "bare_redis_calls_per_cycle": round3(bare.cost.commands() as f64 / plan.cycles as f64),
        "bare_redis_cpu_us_per_cycle": round1(bare.cost.cpu_us / plan.cycles as f64),
        "bare_redis_calls": bare.cost.calls_json(),
    })
}

fn w1_json(plan: &Plan, runs: &[W1Run]) -> Value {
    let libraries = runs
        .iter()
        .map(|r| {
            let figures = with(
                json!({
                    "ops_per_s": per_second(plan.cycles, r.run.elapsed),
                    "acquire_p50_us": r.run.acquire.p50_us(),
                    "acquire_p99_us": r.run.acquire.p99_us(),
                    "release_p50_us": r.run.release.p50_us(),
                    "release_p99_us": r.run.release.p99_us(),
                }),
                lock_cost_json(&r.lock, "acquisition", &r.run.cost),
            );
            (r.library, figures)
        })
        .collect();
    with(
        json!({
            "workload": "W1",
            "quick": plan.quick,
            "workers": 1,
            "cycles": plan.cycles,
            "warmup": plan.warmup,
        }),
        compared(libraries),
    )
}

/// One W2 run's figures, for the JSON.
fn w2_figures(r: &W2Run) -> Value {
    let n = r.acquisitions.len();
    let f = &r.figures;
    with(
        json!({
            "elapsed_s": round3(r.elapsed.as_secs_f64()),
            "acquisitions": n,
            "acquisitions_per_s": f.acquisitions_per_s,
            "share_min": f.share_min,
            "share_max": f.share_max,
            "acquisitions_per_worker": r.per_worker,
            "wait_p50_us": f.wait.p50_us(),
            "wait_p99_us": f.wait.p99_us(),
            "wait_max_us": micros(f.wait.max()),
            "mean_idle_gap_us": f.mean_idle_gap_us,
            "handoffs": f.handoffs,
            "taken_straight_back": f.taken_back,
            "acquires_timed_out": r.timeouts,
            "counter": r.counter,
            "lost_updates": n as i64 - r.counter as i64,
            "data_round_trips_per_acquisition": 2,
        }),
        lock_cost_json(&r.lock, "acquisition", &r.cost),
    )
}

fn w2_json(plan: &Plan, runs: &[W2Run]) -> Value {
    let libraries = runs.iter().map(|r| (r.library, w2_figures(r))).collect();
    with(
        json!({
            "workload": "W2",
            "quick": plan.quick,
            "workers": W2_WORKERS,
            "seconds": plan.w2_run.as_secs_f64(),
            "hold_ms": W2_HOLD.as_secs_f64() * 1e3,
            "calls_and_round_trips_exclude": "the critical section's GET and SET",
        }),
        compared(libraries),
    )
}

/// One W3 run's figures, for the JSON.
fn w3_figures(r: &W3Run) -> Value {
    with(
        json!({
            "elapsed_s": round3(r.elapsed.as_secs_f64()),
            "attempts": r.attempts,
            "successes": r.successes,
            "attempts_per_s": per_second(r.attempts, r.elapsed),
            "success_ratio": round3(r.successes as f64 / r.attempts as f64),
            "attempt_p50_us": r.attempt.p50_us(),
            "attempt_p99_us": r.attempt.p99_us(),
        }),
        lock_cost_json(&r.lock, "attempt", &r.cost),
    )
}

fn w3_json(plan: &Plan, runs: &[W3Run]) -> Value {
    let libraries = runs.iter().map(|r| (r.library, w3_figures(r))).collect();
    with(
        json!({
            "workload": "W3",
            "quick": plan.quick,
            "workers": W3_WORKERS,
            "keys": W3_KEYS,
            "seconds": plan.w3_run.as_secs_f64(),
        }),
        compared(libraries),
    )
}

fn w5_json(plan: &Plan, rows: &[W5Row]) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            let hold = r.hold.as_secs_f64();
            json!({
                "leases": r.leases,
                "take_all_s": round3(r.build.as_secs_f64()),
                "hold_s": round3(hold),
                "renewal_rounds_expected": round3(r.rounds_expected()),
                "evalsha_bursts_seen": r.bursts,
                "round_trips_per_round": round3(r.bursts as f64 / r.rounds_expected()),
                "renew_evalsha_per_round": round3(r.renew_evalsha() as f64 / r.rounds_expected()),
                "renew_evalsha_per_round_ideal": r.leases.div_ceil(RENEWALS_PER_SCRIPT),
                "redis_calls_per_s": round1(r.cost.commands() as f64 / hold),
                "redis_cpu_ms_per_s": round3(r.cost.cpu_us / 1e3 / hold),
                "client_cpu_ms_per_s": round3(r.client_cpu.as_secs_f64() * 1e3 / hold),
                "leases_lost": r.lost,
                "releases_failed": r.release_failed,
                "probes": r.probe.0.len(),
                "probe_p50_us": r.probe.p50_us(),
                "probe_p99_us": r.probe.p99_us(),
                "probe_max_us": micros(r.probe.max()),
                "redis_calls": r.cost.calls_json(),
            })
        })
        .collect();
    json!({
        "workload": "W5",
        "quick": plan.quick,
        "skipped": plan.skip_w5,
        "lease_s": W5_LEASE.as_secs_f64(),
        "hold_s": plan.w5_hold.as_secs_f64(),
        "probe_s": plan.w5_probe.as_secs_f64(),
        "probe_every_ms": W5_PROBE_EVERY.as_secs_f64() * 1e3,
        "sample_ms": W5_SAMPLE.as_secs_f64() * 1e3,
        "rounds_expected_as": "hold / (lease / 3): the watchdog renews at a third of the lease",
        "round_trips_per_round_as": "bursts of EVALSHA in INFO commandstats samples / rounds expected",
        "rows": rows,
    })
}

/// How a target's measured value must compare with its bound.
#[derive(Clone, Copy)]
enum Bound {
    AtLeast(f64),
    AtMost(f64),
    Within(f64, f64),
}

impl Bound {
    fn holds(self, x: f64) -> bool {
        match self {
            Bound::AtLeast(b) => x >= b,
            Bound::AtMost(b) => x <= b,
            Bound::Within(lo, hi) => lo <= x && x <= hi,
        }
    }

    fn text(self) -> String {
        match self {
            Bound::AtLeast(b) => format!("≥ {}", number(b)),
            Bound::AtMost(b) => format!("≤ {}", number(b)),
            Bound::Within(lo, hi) => format!("{} – {}", number(lo), number(hi)),
        }
    }

    fn json(self) -> Value {
        match self {
            Bound::AtLeast(b) => json!({ "at_least": round3(b) }),
            Bound::AtMost(b) => json!({ "at_most": round3(b) }),
            Bound::Within(lo, hi) => json!({ "within": [round3(lo), round3(hi)] }),
        }
    }
}

/// A goal for a figure of this run, judged on the same run's figures.
struct Target {
    workload: &'static str,
    goal: String,
    /// `None` when this run did not measure it (a quick run has no K = 10,000).
    measured: Option<f64>,
    bound: Bound,
    /// What the bound was worked out from, or how the figure was measured.
    note: String,
}

impl Target {
    fn new(
        workload: &'static str,
        goal: impl Into<String>,
        measured: Option<f64>,
        bound: Bound,
        note: impl Into<String>,
    ) -> Target {
        Target {
            workload,
            goal: goal.into(),
            measured,
            bound,
            note: note.into(),
        }
    }

    fn status(&self) -> &'static str {
        match self.measured {
            None => "not run",
            Some(x) if self.bound.holds(x) => "met",
            Some(_) => "missed",
        }
    }
}

fn w2_run<'a>(runs: &'a [W2Run], library: &str) -> Result<&'a W2Run> {
    runs.iter()
        .find(|r| r.library == library)
        .ok_or_else(|| format!("no W2 run of {library}").into())
}

fn w3_run<'a>(runs: &'a [W3Run], library: &str) -> Result<&'a W3Run> {
    runs.iter()
        .find(|r| r.library == library)
        .ok_or_else(|| format!("no W3 run of {library}").into())
}

fn cycles_per_s(plan: &Plan, run: &CycleRun) -> f64 {
    plan.cycles as f64 / run.elapsed.as_secs_f64()
}

/// The targets leasehold is held to, from this run's figures.
fn targets(
    plan: &Plan,
    bare: &CycleRun,
    w1: &[W1Run],
    w2: &[W2Run],
    w3: &[W3Run],
    w5: &[W5Row],
) -> Result<Vec<Target>> {
    let mut out = w1_targets(plan, bare, w1)?;
    let peer = Rslock::NAME;

    let rslock = w2_run(w2, peer)?;
    let mutex = w2_run(w2, LeaseholdMutex::NAME)?;
    out.push(Target::new(
        "W2",
        "Mutex acquisitions/s ≥ rslock's",
        Some(mutex.figures.acquisitions_per_s),
        Bound::AtLeast(rslock.figures.acquisitions_per_s),
        "rslock's",
    ));
    out.push(Target::new(
        "W2",
        "Mutex redis calls / acquisition ≤ 8",
        Some(mutex.lock.calls),
        Bound::AtMost(8.0),
        "the lock's calls (scripts' too), not the data GET/SET",
    ));
    out.push(Target::new(
        "W2",
        "Mutex wait to acquire max ≤ 25 ms (µs)",
        Some(micros(mutex.figures.wait.max())),
        Bound::AtMost(25_000.0),
        format!("p99 {} µs", number(mutex.figures.wait.p99_us())),
    ));
    out.push(share_target("Mutex", mutex));

    let fair = w2_run(w2, LeaseholdFairMutex::NAME)?;
    out.push(share_target("FairMutex", fair));
    out.push(Target::new(
        "W2",
        "FairMutex redis calls / acquisition ≤ 8",
        Some(fair.lock.calls),
        Bound::AtMost(8.0),
        "the lock's calls (scripts' too), not the data GET/SET",
    ));
    out.push(Target::new(
        "W2",
        "FairMutex wait to acquire max ≤ 25 ms (µs)",
        Some(micros(fair.figures.wait.max())),
        Bound::AtMost(25_000.0),
        format!("p99 {} µs", number(fair.figures.wait.p99_us())),
    ));
    out.push(Target::new(
        "W2",
        "FairMutex acquisitions/s ≥ rslock's",
        Some(fair.figures.acquisitions_per_s),
        Bound::AtLeast(rslock.figures.acquisitions_per_s),
        format!("rslock {}/s", number(rslock.figures.acquisitions_per_s)),
    ));
    out.push(Target::new(
        "W2",
        "FairMutex round trips / acquisition ≤ 2.2",
        Some(fair.lock.round_trips),
        Bound::AtMost(2.2),
        "client-issued lock commands, not the data GET/SET",
    ));

    let (ours, theirs) = (w3_run(w3, LeaseholdMutex::NAME)?, w3_run(w3, peer)?);
    let theirs_per_s = per_second(theirs.attempts, theirs.elapsed);
    out.push(Target::new(
        "W3",
        "Mutex attempts/s ≥ rslock's",
        Some(per_second(ours.attempts, ours.elapsed)),
        Bound::AtLeast(theirs_per_s),
        format!("rslock {}/s", number(theirs_per_s)),
    ));
    out.push(Target::new(
        "W3",
        "Mutex redis CPU µs / attempt ≤ 1.25 × rslock's",
        Some(ours.lock.cpu_us),
        Bound::AtMost(1.25 * theirs.lock.cpu_us),
        format!("rslock {} µs", number(theirs.lock.cpu_us)),
    ));
    out.push(Target::new(
        "W3",
        "Mutex client CPU µs / attempt ≤ 1.2 × rslock's",
        Some(ours.lock.client_cpu_us),
        Bound::AtMost(1.2 * theirs.lock.client_cpu_us),
        format!(
            "rslock {} µs; this process's CPU time while the workers ran",
            number(theirs.lock.client_cpu_us)
        ),
    ));

    let w5_row = |k: usize| w5.iter().find(|r| r.leases == k);
    let cpu_ms = |r: &W5Row| round3(r.client_cpu.as_secs_f64() * 1e3 / r.hold.as_secs_f64());
    let not_run = if plan.skip_w5 {
        "W5 not run (--skip-w5)"
    } else {
        "no K = 0 row"
    };
    let baseline = w5_row(0).map_or_else(
        || not_run.to_owned(),
        |r| format!("K = 0: {} ms/s (INFO sampling)", number(cpu_ms(r))),
    );
    out.push(Target::new(
        "W5",
        "client CPU at K = 10,000 ≤ 2 % of a core (ms/s)",
        w5_row(10_000).map(cpu_ms),
        Bound::AtMost(20.0),
        baseline,
    ));
    for r in w5.iter().filter(|r| r.leases > 0) {
        let ideal = r.leases.div_ceil(RENEWALS_PER_SCRIPT);
        let per_round = if r.bursts == 0 {
            f64::INFINITY
        } else {
            round3(r.renew_evalsha() as f64 / r.bursts as f64)
        };
        out.push(Target::new(
            "W5",
            format!("round trips / renewal round at K = {} ≤ {ideal}", r.leases),
            Some(per_round),
            Bound::AtMost(ideal as f64),
            format!(
                "renew EVALSHA / round seen ({} rounds), pipelined: an upper bound",
                r.bursts
            ),
        ));
    }
    let none = w5_row(0);
    let full = w5_row(20_000);
    out.push(Target::new(
        "W5",
        "probe p50 at K = 20,000 ≤ 1.2 × with none held (µs)",
        full.map(|r| r.probe.p50_us()),
        Bound::AtMost(1.2 * none.map_or(0.0, |r| r.probe.p50_us())),
        none.map_or_else(
            || not_run.to_owned(),
            |r| format!("none held: p50 {} µs", number(r.probe.p50_us())),
        ),
    ));
    Ok(out)
}

/// W1's targets, from this run's floor and W1 figures.
/// W2's fairness target for `run`: every worker's share within
/// 0.12–0.13 (a fair share is 1/8).
fn share_target(primitive: &str, run: &W2Run) -> Target {
    let n = run.acquisitions.len().max(1) as f64;
    let fair_share = 1.0 / W2_WORKERS as f64;
    let worst = run
        .per_worker
        .iter()
        .map(|&k| k as f64 / n)
        .max_by(|a, b| (a - fair_share).abs().total_cmp(&(b - fair_share).abs()))
        .unwrap_or(0.0);
    Target::new(
        "W2",
        format!("{primitive} every worker's share within 0.12–0.13"),
        Some(round3(worst)),
        Bound::Within(0.12, 0.13),
        format!(
            "the share farthest from 0.125; min {} max {}",
            number(run.figures.share_min),
            number(run.figures.share_max)
        ),
    )
}

fn w1_targets(plan: &Plan, bare: &CycleRun, w1: &[W1Run]) -> Result<Vec<Target>> {
    let mut out = Vec::new();
    let peer = Rslock::NAME;
    let floor = cycles_per_s(plan, bare);
    let w1_ours = w1
        .iter()
        .find(|r| r.library == LeaseholdMutex::NAME)
        .ok_or("no W1 run of leasehold")?;
    out.push(Target::new(
        "W1",
        "Mutex ops/s ≥ 0.9 × floor (SET NX PX + Lua release)",
        Some(cycles_per_s(plan, &w1_ours.run)),
        Bound::AtLeast(0.9 * floor),
        format!("floor {}/s", number(round1(floor))),
    ));
    let w1_peer = w1
        .iter()
        .find(|r| r.library == peer)
        .ok_or("no W1 run of rslock")?;
    out.push(Target::new(
        "W1",
        "Mutex ops/s ≥ rslock's",
        Some(cycles_per_s(plan, &w1_ours.run)),
        Bound::AtLeast(cycles_per_s(plan, &w1_peer.run)),
        "rslock's",
    ));
    Ok(out)
}

fn print_targets(plan: &Plan, targets: &[Target]) {
    println!();
    println!(
        "targets, judged on this {} run's figures",
        if plan.quick { "quick" } else { "full" }
    );
    println!(
        "  {:<4} {:<54} {:>12} {:>18}  {:<8} how",
        "", "target", "measured", "bound", "status"
    );
    for t in targets {
        println!(
            "  {:<4} {:<54} {:>12} {:>18}  {:<8} {}",
            t.workload,
            t.goal,
            t.measured.map_or_else(|| "-".to_owned(), number),
            t.bound.text(),
            t.status(),
            t.note
        );
    }
    let count = |status: &str| targets.iter().filter(|t| t.status() == status).count();
    row(
        "",
        format!(
            "{} met, {} missed, {} not run",
            count("met"),
            count("missed"),
            count("not run")
        ),
    );
}

fn targets_json(plan: &Plan, targets: &[Target]) -> Value {
    let list: Vec<Value> = targets
        .iter()
        .map(|t| {
            with(
                json!({
                    "workload": t.workload,
                    "target": t.goal,
                    "measured": t.measured.filter(|x| x.is_finite()).map(round3),
                    "status": t.status(),
                    "note": t.note,
                }),
                t.bound.json().as_object().cloned().unwrap_or_default(),
            )
        })
        .collect();
    let count = |status: &str| targets.iter().filter(|t| t.status() == status).count();
    json!({
        "workload": "targets",
        "quick": plan.quick,
        "pinned": pinning::pinned(),
        "w2_redis_calls_are": "the lock's calls (scripts' commands too), without the critical section's GET and SET",
        "w5_round_trips_are": "renew EVALSHA per renewal round seen; the watchdog pipelines a round's scripts, so an upper bound",
        "met": count("met"),
        "missed": count("missed"),
        "not_run": count("not run"),
        "targets": list,
    })
}

fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
