//! leasehold's lock benchmark: workloads W1 (uncontended) and W2 (contended),
//! with the floor (bare redis-rs on one connection) measured in the same run,
//! against one fresh redis-server started by the test kit.
//!
//! ```text
//! cargo bench -p leasehold --bench workloads              full run (W2 runs 10 s)
//! cargo bench -p leasehold --bench workloads -- --quick   a tenth of the counts and durations
//! ```
//!
//! `LEASEHOLD_BENCH_QUICK=1` does what `--quick` does. Run without cargo
//! bench's `--bench` flag (as `cargo test --benches` does), it makes the quick
//! run: a smoke test.
//!
//! Every lock client has a 10 s lease, the watchdog off, and its own
//! connections; each is connected and warmed up before its clock starts.
//! Latencies are on the monotonic clock, percentiles by nearest rank.
//!
//! Prints a table per workload, then one JSON object per workload per line.
//!
//! Exit codes: 0 the run is done; 1 it could not run; 2 W2 lost an update
//! (its counter is not the number of acquisitions).

use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::process::ExitCode;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use leasehold::redis::{self, aio::MultiplexedConnection};
use leasehold::{Client, Mutex};
use leasehold_testkit::RedisServer;
use serde_json::{json, Value};

type BoxError = Box<dyn StdError + Send + Sync>;
type Result<T, E = BoxError> = std::result::Result<T, E>;

const LEASE: Duration = Duration::from_secs(10);
const WAIT: Duration = Duration::from_secs(30);
const W1_LOCK: &str = "w1:lock";
const W2_LOCK: &str = "w2:lock";
const W2_COUNTER: &str = "w2:counter";
const W2_WORKERS: usize = 8;
const W2_HOLD: Duration = Duration::from_millis(1);
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
    let plan = Plan::from_env()?;
    let server = RedisServer::start();
    let url = server.url();
    let rt = current_thread_runtime()?;
    let mut stats = rt.block_on(connect(&url))?;

    let ping = rt.block_on(floor_ping(&url, &plan))?;
    let bare = rt.block_on(floor_bare(&url, &plan, &mut stats))?;
    let w1 = rt.block_on(w1(&url, &plan, &mut stats))?;
    let w2 = w2(&url, &plan, &rt, &mut stats)?;

    println!(
        "leasehold lock workloads ({} run), redis-server on port {}",
        if plan.quick { "quick" } else { "full" },
        server.port()
    );
    print_floor(&plan, &ping, &bare);
    print_w1(&plan, &w1);
    print_w2(&plan, &w2);
    println!();
    for line in [
        floor_json(&plan, &ping, &bare),
        w1_json(&plan, &w1),
        w2_json(&plan, &w2),
    ] {
        println!("{line}");
    }

    if w2.counter != w2.acquisitions.len() as u64 {
        eprintln!(
            "workloads: W2 lost updates: the counter is {} after {} acquisitions",
            w2.counter,
            w2.acquisitions.len()
        );
        return Ok(ExitCode::from(EXIT_LOST_UPDATE));
    }
    Ok(ExitCode::SUCCESS)
}

struct Plan {
    quick: bool,
    warmup: usize,
    cycles: usize,
    w2_run: Duration,
}

impl Plan {
    fn from_env() -> Result<Plan> {
        let mut quick =
            std::env::var("LEASEHOLD_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let mut bench = false;
        for arg in std::env::args().skip(1) {
            match arg.as_str() {
                "--bench" => bench = true,
                "--quick" => quick = true,
                other => {
                    return Err(format!(
                        "unknown argument {other:?}: the only option is --quick \
                         (or LEASEHOLD_BENCH_QUICK=1)"
                    )
                    .into())
                }
            }
        }
        // Without --bench, cargo runs this as a test: a smoke run is enough.
        Ok(if quick || !bench {
            Plan {
                quick: true,
                warmup: 10,
                cycles: 500,
                w2_run: Duration::from_secs(1),
            }
        } else {
            Plan {
                quick: false,
                warmup: 100,
                cycles: 5_000,
                w2_run: Duration::from_secs(10),
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

async fn connect(url: &str) -> Result<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    Ok(client.get_multiplexed_async_connection().await?)
}

fn lock_client(url: &str) -> Result<Client> {
    Ok(Client::builder(url).lease(LEASE).watchdog(false).build()?)
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

    /// `"p50 / p99"` in microseconds, for the table.
    fn p50_p99(&self) -> String {
        format!(
            "{} / {}",
            micros(self.percentile(50)),
            micros(self.percentile(99))
        )
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

/// What `INFO commandstats` and `INFO cpu` said at one moment.
struct ServerSnapshot {
    calls: BTreeMap<String, u64>,
    cpu_seconds: f64,
}

async fn server_snapshot(conn: &mut MultiplexedConnection) -> Result<ServerSnapshot> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .arg("cpu")
        .query_async(conn)
        .await?;
    let mut calls = BTreeMap::new();
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
        } else if name == "used_cpu_user" || name == "used_cpu_sys" {
            cpu_seconds += value.parse::<f64>()?;
        }
    }
    Ok(ServerSnapshot { calls, cpu_seconds })
}

/// What Redis did between two snapshots, leaving out this program's own INFO.
struct ServerCost {
    calls: BTreeMap<String, u64>,
    cpu_us: f64,
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
        ServerCost {
            calls,
            cpu_us: (after.cpu_seconds - before.cpu_seconds) * 1e6,
        }
    }

    fn commands(&self) -> u64 {
        self.calls.values().sum()
    }

    fn per(&self, command: &str, acquisitions: usize) -> f64 {
        let n = self.calls.get(command).copied().unwrap_or(0);
        round3(n as f64 / acquisitions as f64)
    }

    fn commands_per(&self, acquisitions: usize) -> f64 {
        round3(self.commands() as f64 / acquisitions as f64)
    }

    fn cpu_us_per(&self, acquisitions: usize) -> f64 {
        round1(self.cpu_us / acquisitions as f64)
    }

    fn calls_json(&self) -> Value {
        json!(self.calls)
    }
}

struct PingFloor {
    latencies: Latencies,
    elapsed: Duration,
}

async fn floor_ping(url: &str, plan: &Plan) -> Result<PingFloor> {
    let mut conn = connect(url).await?;
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
}

async fn floor_bare(url: &str, plan: &Plan, stats: &mut MultiplexedConnection) -> Result<CycleRun> {
    let mut conn = connect(url).await?;
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
    timed_cycles(plan, stats, async || bare_cycle(&mut conn).await).await
}

/// Runs `plan.cycles` acquire+release cycles, each timed by `cycle` as
/// (acquire, release), between two server snapshots.
async fn timed_cycles(
    plan: &Plan,
    stats: &mut MultiplexedConnection,
    mut cycle: impl AsyncFnMut() -> Result<(Duration, Duration)>,
) -> Result<CycleRun> {
    let before = server_snapshot(stats).await?;
    let mut acquire = Vec::with_capacity(plan.cycles);
    let mut release = Vec::with_capacity(plan.cycles);
    let start = Instant::now();
    for _ in 0..plan.cycles {
        let (a, r) = cycle().await?;
        acquire.push(a);
        release.push(r);
    }
    let elapsed = start.elapsed();
    let after = server_snapshot(stats).await?;
    Ok(CycleRun {
        acquire: Latencies::new(acquire)?,
        release: Latencies::new(release)?,
        elapsed,
        cost: ServerCost::between(&before, &after),
    })
}

async fn w1(url: &str, plan: &Plan, stats: &mut MultiplexedConnection) -> Result<CycleRun> {
    let mutex = lock_client(url)?.mutex(W1_LOCK)?;
    for _ in 0..plan.warmup {
        mutex.acquire_timeout(WAIT).await?.release().await?;
    }
    timed_cycles(plan, stats, async || {
        let sent = Instant::now();
        let guard = mutex.acquire_timeout(WAIT).await?;
        let taken = Instant::now();
        guard.release().await?;
        Ok((taken - sent, Instant::now() - taken))
    })
    .await
}

/// One W2 acquisition; times are since a start shared by all workers.
struct Acquisition {
    worker: usize,
    fence: u64,
    started: Duration,
    acquired: Duration,
    released: Duration,
}

struct W2Run {
    /// In lock order (by fence).
    acquisitions: Vec<Acquisition>,
    per_worker: Vec<usize>,
    elapsed: Duration,
    counter: u64,
    cost: ServerCost,
    figures: W2Figures,
}

fn w2(
    url: &str,
    plan: &Plan,
    rt: &tokio::runtime::Runtime,
    stats: &mut MultiplexedConnection,
) -> Result<W2Run> {
    let gate = lock_client(url)?.mutex(W2_LOCK)?;
    let held = rt.block_on(async {
        redis::cmd("SET")
            .arg(W2_COUNTER)
            .arg(0)
            .query_async::<()>(&mut *stats)
            .await?;
        gate.try_acquire()
            .await?
            .ok_or_else(|| BoxError::from("w2:lock was held before W2"))
    })?;

    let origin = Instant::now();
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut workers = Vec::with_capacity(W2_WORKERS);
    let mut starts = Vec::with_capacity(W2_WORKERS);
    for id in 0..W2_WORKERS {
        let (start_tx, start_rx) = mpsc::channel();
        let ready = ready_tx.clone();
        let url = url.to_owned();
        let run_for = plan.w2_run;
        // Each worker gets an OS thread and a runtime of its own, as separate
        // processes would, so that its blocking 1 ms hold stalls only itself.
        let handle = thread::Builder::new()
            .name(format!("w2-worker-{id}"))
            .spawn(move || w2_worker(id, &url, origin, run_for, &ready, &start_rx))?;
        workers.push(handle);
        starts.push(start_tx);
    }
    drop(ready_tx);

    // The workers' warm-up acquire waits behind the gate, which opens their
    // notification connections too; it opens once all of them wait.
    rt.block_on(wait_for_waiters(&gate, W2_WORKERS, &ready_rx))?;
    rt.block_on(held.release())?;
    for _ in 0..W2_WORKERS {
        match ready_rx.recv_timeout(SETUP_TIMEOUT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("W2 worker warm-up: {e}").into()),
            Err(_) => return Err("W2 workers did not all warm up within 60 s".into()),
        }
    }

    let before = rt.block_on(server_snapshot(stats))?;
    let start = Instant::now();
    for tx in &starts {
        tx.send(start)
            .map_err(|_| "a W2 worker stopped before the start")?;
    }
    let mut acquisitions = Vec::new();
    let mut per_worker = vec![0; W2_WORKERS];
    for (id, handle) in workers.into_iter().enumerate() {
        let log = handle
            .join()
            .map_err(|_| format!("W2 worker {id} panicked"))?
            .map_err(|e| format!("W2 worker {id}: {}", chain(&*e)))?;
        per_worker[id] = log.len();
        acquisitions.extend(log);
    }
    let after = rt.block_on(server_snapshot(stats))?;
    let counter: Option<u64> = rt.block_on(redis::cmd("GET").arg(W2_COUNTER).query_async(stats))?;

    acquisitions.sort_unstable_by_key(|a| a.fence);
    let last_release = acquisitions
        .iter()
        .map(|a| a.released)
        .max()
        .ok_or("W2 made no acquisition")?;
    let elapsed = last_release.saturating_sub(start - origin);
    let figures = W2Figures::of(&acquisitions, &per_worker, elapsed)?;
    Ok(W2Run {
        acquisitions,
        per_worker,
        elapsed,
        counter: counter.unwrap_or(0),
        cost: ServerCost::between(&before, &after),
        figures,
    })
}

async fn wait_for_waiters(
    gate: &Mutex,
    n: usize,
    ready: &mpsc::Receiver<Result<(), String>>,
) -> Result<()> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        if let Ok(Err(e)) = ready.try_recv() {
            return Err(format!("W2 worker warm-up: {e}").into());
        }
        let waiting = gate.inspect().await?.waiting_clients;
        if waiting >= n as u64 {
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

fn w2_worker(
    id: usize,
    url: &str,
    origin: Instant,
    run_for: Duration,
    ready: &mpsc::Sender<Result<(), String>>,
    start: &mpsc::Receiver<Instant>,
) -> Result<Vec<Acquisition>> {
    let warmed = current_thread_runtime().and_then(|rt| {
        let (mutex, data) = rt.block_on(async {
            let mutex = lock_client(url)?.mutex(W2_LOCK)?;
            let mut data = connect(url).await?;
            redis::cmd("GET")
                .arg(W2_COUNTER)
                .query_async::<Option<u64>>(&mut data)
                .await?;
            mutex.acquire_timeout(WAIT).await?.release().await?;
            Ok::<_, BoxError>((mutex, data))
        })?;
        Ok((rt, mutex, data))
    });
    let (rt, mutex, mut data) = match warmed {
        Ok(warmed) => warmed,
        Err(e) => {
            let _ = ready.send(Err(chain(&*e)));
            return Err(e);
        }
    };
    let _ = ready.send(Ok(()));
    let Ok(start) = start.recv() else {
        return Ok(Vec::new());
    };
    let end = start + run_for;
    rt.block_on(async {
        let mut log = Vec::new();
        while Instant::now() < end {
            let started = Instant::now();
            let guard = mutex.acquire_timeout(WAIT).await?;
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
            let fence = guard.fence();
            guard.release().await?;
            let released = Instant::now();
            log.push(Acquisition {
                worker: id,
                fence,
                started: started - origin,
                acquired: acquired - origin,
                released: released - origin,
            });
        }
        Ok(log)
    })
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
            acquisitions_per_s: round1(n as f64 / elapsed.as_secs_f64()),
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

const ROUND_TRIPS_COUNTED_AS: &str =
    "one per awaited lock call: acquire_timeout and release; retries inside \
     acquire_timeout are not visible from outside the library";

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
    print_cycle_latencies("SET NX PX", "Lua release", bare);
    row(
        "redis commands / cycle",
        bare.cost.commands_per(plan.cycles),
    );
    row("redis CPU µs / cycle", bare.cost.cpu_us_per(plan.cycles));
}

fn print_cycle_latencies(acquire: &str, release: &str, run: &CycleRun) {
    row(&format!("{acquire} p50 / p99 µs"), run.acquire.p50_p99());
    row(&format!("{release} p50 / p99 µs"), run.release.p50_p99());
}

fn print_w1(plan: &Plan, w1: &CycleRun) {
    println!();
    println!(
        "W1 uncontended: 1 worker, {W1_LOCK}, {} cycles after {} warm-up, acquire_timeout(30 s) + release",
        plan.cycles, plan.warmup
    );
    row(
        "ops/s",
        format!("{:.0}", plan.cycles as f64 / w1.elapsed.as_secs_f64()),
    );
    print_cycle_latencies("acquire", "release", w1);
    row(
        "redis commands / acquisition",
        format!(
            "{} (EVALSHA {}; script commands count too)",
            w1.cost.commands_per(plan.cycles),
            w1.cost.per("evalsha", plan.cycles)
        ),
    );
    row(
        "redis CPU µs / acquisition",
        w1.cost.cpu_us_per(plan.cycles),
    );
    row(
        "round trips / acquisition (client)",
        "2: acquire_timeout, release",
    );
}

fn print_w2(plan: &Plan, w2: &W2Run) {
    let n = w2.acquisitions.len();
    let f = &w2.figures;
    println!();
    println!(
        "W2 contended: {W2_WORKERS} workers, {W2_LOCK}, {} s, acquire_timeout(30 s), {} ms hold",
        plan.w2_run.as_secs(),
        W2_HOLD.as_millis()
    );
    row("acquisitions", n);
    row("acquisitions/s", f.acquisitions_per_s);
    row(
        "share per worker min / max (fair 0.125)",
        format!("{} / {}", f.share_min, f.share_max),
    );
    row(
        "wait to acquire p50 / p99 / max µs",
        format!("{} / {}", f.wait.p50_p99(), micros(f.wait.max())),
    );
    row(
        "mean idle gap, release to next acquire µs",
        f.mean_idle_gap_us,
    );
    row(
        "releaser took the lock straight back",
        format!(
            "{} of {} handoffs ({:.1}%)",
            f.taken_back,
            f.handoffs,
            percent(f.taken_back, f.handoffs)
        ),
    );
    row(
        "counter / acquisitions",
        format!(
            "{} / {} {}",
            w2.counter,
            n,
            if w2.counter == n as u64 {
                "ok"
            } else {
                "LOST UPDATES"
            }
        ),
    );
    row(
        "redis commands / acquisition",
        format!(
            "{} (EVALSHA {}, SUBSCRIBE {}, UNSUBSCRIBE {}; script commands and the critical section's GET and SET count too)",
            w2.cost.commands_per(n),
            w2.cost.per("evalsha", n),
            w2.cost.per("subscribe", n),
            w2.cost.per("unsubscribe", n)
        ),
    );
    row("redis CPU µs / acquisition", w2.cost.cpu_us_per(n));
    row(
        "round trips / acquisition (client)",
        "2 lock calls (acquire_timeout, release) + 2 data (GET, SET); \
         retries inside acquire_timeout are not visible from outside",
    );
}

fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

fn floor_json(plan: &Plan, ping: &PingFloor, bare: &CycleRun) -> Value {
    json!({
        "workload": "floor",
        "quick": plan.quick,
        "cycles": plan.cycles,
        "warmup": plan.warmup,
        "ping_ops_per_s": round1(plan.cycles as f64 / ping.elapsed.as_secs_f64()),
        "ping_p50_us": micros(ping.latencies.percentile(50)),
        "ping_p99_us": micros(ping.latencies.percentile(99)),
        "bare_cycles_per_s": round1(plan.cycles as f64 / bare.elapsed.as_secs_f64()),
        "bare_set_nx_p50_us": micros(bare.acquire.percentile(50)),
        "bare_set_nx_p99_us": micros(bare.acquire.percentile(99)),
        "bare_release_p50_us": micros(bare.release.percentile(50)),
        "bare_release_p99_us": micros(bare.release.percentile(99)),
        "bare_redis_commands_per_cycle": bare.cost.commands_per(plan.cycles),
        "bare_redis_cpu_us_per_cycle": bare.cost.cpu_us_per(plan.cycles),
        "bare_redis_calls": bare.cost.calls_json(),
    })
}

fn w1_json(plan: &Plan, w1: &CycleRun) -> Value {
    json!({
        "workload": "W1",
        "quick": plan.quick,
        "workers": 1,
        "cycles": plan.cycles,
        "warmup": plan.warmup,
        "ops_per_s": round1(plan.cycles as f64 / w1.elapsed.as_secs_f64()),
        "acquire_p50_us": micros(w1.acquire.percentile(50)),
        "acquire_p99_us": micros(w1.acquire.percentile(99)),
        "release_p50_us": micros(w1.release.percentile(50)),
        "release_p99_us": micros(w1.release.percentile(99)),
        "redis_commands_per_acquisition": w1.cost.commands_per(plan.cycles),
        "redis_cpu_us_per_acquisition": w1.cost.cpu_us_per(plan.cycles),
        "round_trips_per_acquisition": 2,
        "round_trips_counted_as": ROUND_TRIPS_COUNTED_AS,
        "redis_calls": w1.cost.calls_json(),
    })
}

fn w2_json(plan: &Plan, w2: &W2Run) -> Value {
    let n = w2.acquisitions.len();
    let f = &w2.figures;
    json!({
        "workload": "W2",
        "quick": plan.quick,
        "workers": W2_WORKERS,
        "seconds": plan.w2_run.as_secs_f64(),
        "hold_ms": W2_HOLD.as_secs_f64() * 1e3,
        "elapsed_s": round3(w2.elapsed.as_secs_f64()),
        "acquisitions": n,
        "acquisitions_per_s": f.acquisitions_per_s,
        "share_min": f.share_min,
        "share_max": f.share_max,
        "acquisitions_per_worker": w2.per_worker,
        "wait_p50_us": micros(f.wait.percentile(50)),
        "wait_p99_us": micros(f.wait.percentile(99)),
        "wait_max_us": micros(f.wait.max()),
        "mean_idle_gap_us": f.mean_idle_gap_us,
        "handoffs": f.handoffs,
        "taken_straight_back": f.taken_back,
        "counter": w2.counter,
        "lost_updates": n as i64 - w2.counter as i64,
        "redis_commands_per_acquisition": w2.cost.commands_per(n),
        "redis_cpu_us_per_acquisition": w2.cost.cpu_us_per(n),
        "round_trips_per_acquisition": 2,
        "round_trips_counted_as": ROUND_TRIPS_COUNTED_AS,
        "data_round_trips_per_acquisition": 2,
        "redis_calls": w2.cost.calls_json(),
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
