//! What watching a lock costs its holders: acquire+release cycles of one
//! client on a fresh redis-server from the test kit, on a lock nobody
//! watches and on one a `LockWatch` of another client watches, for a
//! `Mutex` and a one-permit `Semaphore`. On a busy mutex a watch marks
//! the holders its looks see, not the others, so a third case has a
//! second watch look between the acquire and the release of every cycle
//! (its look is in the cycle's figures, not in the release's). Prints, per case: cycles/s, the
//! release's p50 and p99 in µs, Redis commands per cycle (`INFO
//! commandstats`, counting the commands scripts run), PUBLISH/SPUBLISH per
//! cycle, Redis CPU µs per cycle, and the events the watch reported.
//!
//! `cargo bench -p leasehold --bench watch_cost` (`WATCH_COST_CYCLES`
//! sets the cycles per case, 2000 by default). Figures of one run only
//! compare with each other.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use leasehold::redis::aio::MultiplexedConnection;
use leasehold::{Client, LeaseEnd};
use leasehold_testkit::RedisServer;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("watch_cost: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Mutex,
    /// A mutex a second watch looks at between the acquire and the release
    /// of every cycle, so that every release is of a marked holder.
    MarkedMutex,
    Semaphore,
}

struct Stats {
    commands: u64,
    publishes: u64,
    cpu: f64,
}

async fn stats(conn: &mut MultiplexedConnection) -> Result<Stats> {
    let text: String = leasehold::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let mut commands = 0;
    let mut publishes = 0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(":calls=") else {
            continue;
        };
        let calls: u64 = fields.split(',').next().unwrap_or("0").parse()?;
        // INFO itself is the bench's, not the lock's.
        if name != "info" {
            commands += calls;
        }
        if name == "publish" || name == "spublish" {
            publishes += calls;
        }
    }
    let cpu_text: String = leasehold::redis::cmd("INFO")
        .arg("cpu")
        .query_async(conn)
        .await?;
    let mut cpu = 0.0;
    for line in cpu_text.lines() {
        for key in ["used_cpu_user:", "used_cpu_sys:"] {
            if let Some(v) = line.strip_prefix(key) {
                cpu += v.trim().parse::<f64>()?;
            }
        }
    }
    Ok(Stats {
        commands,
        publishes,
        cpu,
    })
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e6
}

async fn case(
    server: &RedisServer,
    stats_conn: &mut MultiplexedConnection,
    kind: Kind,
    watched: bool,
    cycles: usize,
) -> Result<()> {
    let name = match (kind, watched) {
        (Kind::Mutex, false) => "mutex-unwatched",
        (Kind::Mutex, true) => "mutex-watched",
        (Kind::MarkedMutex, _) => "mutex-marked",
        (Kind::Semaphore, false) => "semaphore-unwatched",
        (Kind::Semaphore, true) => "semaphore-watched",
    };
    let holder = Client::builder(server.url())
        .lease(Duration::from_secs(10))
        .watchdog(false)
        .build()?;
    let watcher = Client::open(&server.url())?;
    let mutex = holder.mutex(name)?;
    let semaphore = holder.semaphore(name, 1)?;
    // Warm up: connections, scripts, the function library.
    for _ in 0..100 {
        match kind {
            Kind::Mutex | Kind::MarkedMutex => mutex.acquire().await?.release().await?,
            Kind::Semaphore => semaphore.acquire().await?.release().await?,
        }
    }
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::<LeaseEnd>::new()));
    let watching = if watched {
        let mut watch = match kind {
            Kind::Mutex | Kind::MarkedMutex => watcher.mutex(name)?.watch()?,
            Kind::Semaphore => watcher.semaphore(name, 1)?.watch()?,
        };
        watch.holders().await?;
        let events = std::sync::Arc::clone(&events);
        Some(tokio::spawn(async move {
            while let Ok(event) = watch.next().await {
                if let Ok(mut events) = events.lock() {
                    events.push(event.ended);
                }
            }
        }))
    } else {
        None
    };
    let mut marker = watcher.mutex(name)?.watch()?;
    let before = stats(stats_conn).await?;
    let mut releases = Vec::with_capacity(cycles);
    let started = Instant::now();
    for _ in 0..cycles {
        match kind {
            Kind::Mutex | Kind::MarkedMutex => {
                let guard = mutex.acquire().await?;
                if kind == Kind::MarkedMutex {
                    marker.holders().await?;
                }
                let t = Instant::now();
                guard.release().await?;
                releases.push(t.elapsed());
            }
            Kind::Semaphore => {
                let guard = semaphore.acquire().await?;
                let t = Instant::now();
                guard.release().await?;
                releases.push(t.elapsed());
            }
        }
    }
    let elapsed = started.elapsed();
    let after = stats(stats_conn).await?;
    // Let the watch hear the last releases before counting its events.
    tokio::time::sleep(Duration::from_millis(200)).await;
    if let Some(task) = watching {
        task.abort();
    }
    releases.sort();
    #[allow(clippy::cast_precision_loss)]
    let n = cycles as f64;
    let (released, missed, other) = {
        let events = events.lock().map_err(|_| "poisoned")?;
        let released = events.iter().filter(|e| **e == LeaseEnd::Released).count();
        let missed = events.iter().filter(|e| **e == LeaseEnd::Missed).count();
        (released, missed, events.len() - released - missed)
    };
    #[allow(clippy::cast_precision_loss)]
    let commands = (after.commands - before.commands) as f64;
    #[allow(clippy::cast_precision_loss)]
    let publishes = (after.publishes - before.publishes) as f64;
    println!(
        "{name:<20} {:>9.0} {:>8.1} {:>8.1} {:>9.2} {:>9.3} {:>9.1}   released {released}, missed {missed}, other {other}",
        n / elapsed.as_secs_f64(),
        percentile(&releases, 0.50),
        percentile(&releases, 0.99),
        commands / n,
        publishes / n,
        (after.cpu - before.cpu) * 1e6 / n,
    );
    Ok(())
}

fn run() -> Result<()> {
    let cycles: usize = std::env::var("WATCH_COST_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let server = RedisServer::start();
    runtime.block_on(async {
        let redis = leasehold::redis::Client::open(server.url())?;
        let mut conn = redis.get_multiplexed_async_connection().await?;
        println!("{cycles} acquire+release cycles per case, one client, lease 10 s, watchdog off");
        println!(
            "{:<20} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9}   watch events",
            "case", "cycles/s", "rel p50", "rel p99", "cmds/cyc", "pubs/cyc", "cpu µs/c"
        );
        for (kind, watched) in [
            (Kind::Mutex, false),
            (Kind::Mutex, true),
            (Kind::MarkedMutex, true),
            (Kind::Semaphore, false),
            (Kind::Semaphore, true),
        ] {
            case(&server, &mut conn, kind, watched, cycles).await?;
        }
        Ok(())
    })
}
