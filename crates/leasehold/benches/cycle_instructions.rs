//! Uncontended acquire+release cycles (W1 of the workload bench) of one
//! client, made to be counted by a profiler on the Redis side: leasehold's
//! `Mutex`, rslock 0.10's lock, and the bare floor (SET NX PX and a Lua
//! compare-and-delete over one connection).
//!
//! Each library connects and warms up first; then `--before` runs (a shell
//! command), the timed cycles run, and `--after` runs. With a redis-server
//! run under `valgrind --tool=callgrind`, `--before 'callgrind_control -z
//! PID'` and `--after 'callgrind_control -d PID'` leave a dump of what the
//! server did during the cycles alone, whose instruction total over the
//! cycles (less what the idle server does in as long) is the server's
//! instructions per cycle: a figure that does not move with the machine's
//! load. Redis commands per cycle (`INFO commandstats`, the commands
//! scripts run included) are read outside that window and printed too.
//!
//! `cycle_instructions.sh` beside this file does all of that and prints
//! the figure.
//!
//! ```text
//! cargo bench -p leasehold --bench cycle_instructions                   a server of its own, every library
//! cargo bench -p leasehold --bench cycle_instructions -- --url redis://127.0.0.1:PORT \
//!     --library leasehold --cycles 2000 --before 'callgrind_control -z PID' --after 'callgrind_control -d PID'
//! ```
//!
//! Prints one line per library: cycles, seconds, Redis commands per cycle
//! by name, and the commands per cycle in all.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use leasehold::redis::{self, aio::MultiplexedConnection};
use leasehold::Client;
use leasehold_testkit::RedisServer;
use rslock::LockManager;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const LOCK: &str = "w1:lock";
const LEASE: Duration = Duration::from_secs(10);
const WAIT: Duration = Duration::from_secs(30);
/// The floor's release, as in the workload bench.
const FLOOR_RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
const LIBRARIES: [&str; 3] = ["leasehold", "rslock", "floor"];

struct Args {
    url: Option<String>,
    libraries: Vec<String>,
    cycles: usize,
    warmup: usize,
    before: Option<String>,
    after: Option<String>,
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cycle_instructions: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        url: None,
        libraries: LIBRARIES.iter().map(|l| (*l).to_owned()).collect(),
        cycles: 1_000,
        warmup: 100,
        before: None,
        after: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            // cargo bench passes --bench to every harness = false target.
            "--bench" => {}
            "--url" => args.url = Some(value()?),
            "--library" => {
                let library = value()?;
                if library != "all" && !LIBRARIES.contains(&library.as_str()) {
                    return Err(format!(
                        "unknown library {library:?}: leasehold, rslock, floor or all"
                    )
                    .into());
                }
                if library != "all" {
                    args.libraries = vec![library];
                }
            }
            "--cycles" => args.cycles = value()?.parse()?,
            "--warmup" => args.warmup = value()?.parse()?,
            "--before" => args.before = Some(value()?),
            "--after" => args.after = Some(value()?),
            other => {
                return Err(format!(
                    "unknown argument {other:?}: the options are --url, --library, \
                     --cycles, --warmup, --before and --after"
                )
                .into())
            }
        }
    }
    if args.cycles == 0 {
        return Err("--cycles must be at least 1".into());
    }
    Ok(args)
}

fn run() -> Result<()> {
    let args = parse_args()?;
    // A server of its own unless one is named; it lives until the end.
    let mut own = None;
    let url = match &args.url {
        Some(url) => url.clone(),
        None => own.insert(RedisServer::start()).url(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut stats = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        for library in &args.libraries {
            let cycles = match library.as_str() {
                "leasehold" => leasehold_cycles(&url, &args, &mut stats).await?,
                "rslock" => rslock_cycles(&url, &args, &mut stats).await?,
                _ => floor_cycles(&url, &args, &mut stats).await?,
            };
            cycles.print(library, args.cycles);
        }
        Ok(())
    })
}

/// What the timed cycles did on the server.
struct Cycles {
    elapsed: Duration,
    commands: BTreeMap<String, u64>,
}

impl Cycles {
    fn print(&self, library: &str, n: usize) {
        let n_f = n as f64;
        let total: u64 = self.commands.values().sum();
        let by_name: Vec<String> = self
            .commands
            .iter()
            .map(|(command, k)| format!("{command} {:.3}", *k as f64 / n_f))
            .collect();
        println!(
            "{library}: {n} cycles in {:.3} s; Redis commands per cycle {:.3} ({})",
            self.elapsed.as_secs_f64(),
            total as f64 / n_f,
            by_name.join(", ")
        );
    }
}

/// `INFO commandstats`: calls by command.
async fn commandstats(conn: &mut MultiplexedConnection) -> Result<BTreeMap<String, u64>> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let mut calls = BTreeMap::new();
    for line in text.lines() {
        let Some((name, value)) = line.trim().split_once(':') else {
            continue;
        };
        let Some(command) = name.strip_prefix("cmdstat_") else {
            continue;
        };
        let count = value
            .split(',')
            .find_map(|field| field.strip_prefix("calls="))
            .ok_or_else(|| format!("INFO commandstats line without calls: {line:?}"))?;
        calls.insert(command.to_owned(), count.parse()?);
    }
    Ok(calls)
}

fn hook(command: Option<&str>) -> Result<()> {
    let Some(command) = command else {
        return Ok(());
    };
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .status()?;
    if !status.success() {
        return Err(format!("{command:?} failed: {status}").into());
    }
    Ok(())
}

/// Runs `args.cycles` cycles between the hooks, with a commandstats
/// snapshot on either side of them.
async fn timed(
    args: &Args,
    stats: &mut MultiplexedConnection,
    mut cycle: impl AsyncFnMut() -> Result<()>,
) -> Result<Cycles> {
    let before = commandstats(stats).await?;
    hook(args.before.as_deref())?;
    let start = Instant::now();
    for _ in 0..args.cycles {
        cycle().await?;
    }
    let elapsed = start.elapsed();
    hook(args.after.as_deref())?;
    let after = commandstats(stats).await?;
    let commands = after
        .into_iter()
        .filter(|(command, _)| command != "info")
        .map(|(command, n)| {
            let was = before.get(&command).copied().unwrap_or(0);
            (command, n.saturating_sub(was))
        })
        .filter(|&(_, n)| n > 0)
        .collect();
    Ok(Cycles { elapsed, commands })
}

async fn leasehold_cycles(
    url: &str,
    args: &Args,
    stats: &mut MultiplexedConnection,
) -> Result<Cycles> {
    let client = Client::builder(url).lease(LEASE).watchdog(false).build()?;
    let lock = client.mutex(LOCK)?;
    let cycle = async || -> Result<()> {
        let guard = lock.acquire_timeout(WAIT).await?;
        guard.release().await?;
        Ok(())
    };
    for _ in 0..args.warmup {
        cycle().await?;
    }
    let cycles = timed(args, stats, cycle).await?;
    client.flush().await;
    Ok(cycles)
}

async fn rslock_cycles(
    url: &str,
    args: &Args,
    stats: &mut MultiplexedConnection,
) -> Result<Cycles> {
    // LockManager::new panics on a URL it cannot parse.
    redis::Client::open(url)?;
    let manager = LockManager::new(vec![url]);
    let cycle = async || -> Result<()> {
        let held = manager.acquire(LOCK, LEASE).await?;
        held.lock.release().await;
        Ok(())
    };
    for _ in 0..args.warmup {
        cycle().await?;
    }
    timed(args, stats, cycle).await
}

async fn floor_cycles(url: &str, args: &Args, stats: &mut MultiplexedConnection) -> Result<Cycles> {
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let release = redis::Script::new(FLOOR_RELEASE);
    let pid = std::process::id();
    let mut n = 0u64;
    let mut cycle = async || -> Result<()> {
        n += 1;
        let token = format!("{pid:016x}{n:016x}");
        let set: Option<String> = redis::cmd("SET")
            .arg(LOCK)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(LEASE.as_millis() as u64)
            .query_async(&mut conn)
            .await?;
        if set.is_none() {
            return Err(format!("{LOCK} was held when the floor set it").into());
        }
        let released: i64 = release
            .key(LOCK)
            .arg(&token)
            .invoke_async(&mut conn)
            .await?;
        if released != 1 {
            return Err(format!("{LOCK} was gone when the floor released it").into());
        }
        Ok(())
    };
    for _ in 0..args.warmup {
        cycle().await?;
    }
    timed(args, stats, cycle).await
}
