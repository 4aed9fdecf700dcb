//! W4: Redlock over five independent masters started by the test kit, one
//! worker, acquire then release, 2,000 cycles (200 quick), lease 10 s,
//! watchdog off: leasehold's `Redlock` (two rounds, fences included) next
//! to rslock 0.10's `LockManager` over the same five URLs. Then the same
//! with one master's replies slowed by 20 ms (a fault proxy in front of
//! it), where the acquire p50 of each is printed next to its unslowed p50:
//! leasehold returns at a majority, rslock waits for every master. Last, W2
//! on Redlock: eight workers contend for one lock over the five masters
//! (leasehold alone; calls are the masters' EVALSHA and FCALL calls).
//!
//! Acquire and release latencies are printed for both libraries. A
//! leasehold release returns once a majority confirmed, rslock's unlock
//! once every master answered. Beside them, CPU per cycle: this process's
//! (the client's: the masters are processes of their own) and the
//! masters' summed (`INFO cpu`), which say whether a difference in
//! cycles/s comes from the client or from Redis.
//!
//! `cargo bench -p leasehold --bench workloads -- --only-w4 [--quick]` runs
//! W4 alone. With `W4_GAP_MS=n` every cycle is followed by an idle pause of
//! n ms (for both libraries): it shows what an idle gap between cycles
//! alone does to the next acquire's latency on this machine.

use std::time::{Duration, Instant};

use leasehold::Redlock;
use leasehold_testkit::{FaultProxy, Masters};
use rslock::LockManager;
use serde_json::json;

use super::{micros, per_second, round1, Latencies, Result};

const MASTERS: usize = 5;
const LEASE: Duration = Duration::from_secs(10);
const SLOWED_BY: Duration = Duration::from_millis(20);

/// One library's W4 figures.
struct Run {
    library: &'static str,
    cycles: usize,
    elapsed: Duration,
    acquire: Latencies,
    release: Latencies,
    /// This process's CPU time over the cycles (the client's alone: the
    /// masters are processes of their own).
    client_cpu: Duration,
    /// The masters' CPU time over the cycles, summed.
    masters_cpu: Duration,
}

impl Run {
    fn cycles_per_second(&self) -> f64 {
        per_second(self.cycles, self.elapsed)
    }

    fn client_cpu_us(&self) -> f64 {
        round1(self.client_cpu.as_secs_f64() * 1e6 / self.cycles.max(1) as f64)
    }

    fn masters_cpu_us(&self) -> f64 {
        round1(self.masters_cpu.as_secs_f64() * 1e6 / self.cycles.max(1) as f64)
    }

    /// The runs of `parts` (one library's blocks) as one.
    fn merge(parts: Vec<Run>) -> Result<Run> {
        let library = parts.first().map_or("", |part| part.library);
        let (mut acquire, mut release) = (Vec::new(), Vec::new());
        let (mut cycles, mut elapsed) = (0, Duration::ZERO);
        let (mut client_cpu, mut masters_cpu) = (Duration::ZERO, Duration::ZERO);
        for part in parts {
            cycles += part.cycles;
            elapsed += part.elapsed;
            client_cpu += part.client_cpu;
            masters_cpu += part.masters_cpu;
            acquire.extend(part.acquire.0);
            release.extend(part.release.0);
        }
        Ok(Run {
            library,
            cycles,
            elapsed,
            acquire: Latencies::new(acquire)?,
            release: Latencies::new(release)?,
            client_cpu,
            masters_cpu,
        })
    }
}

/// Blocks the unslowed W4 is cut into: the two libraries' blocks
/// alternate (and which goes first), so that both meet the machine as it
/// is in the same seconds (see W1's `w1_side_by_side`).
const BLOCKS: usize = 4;

/// CPU time so far: this process's, and the masters' summed (`INFO cpu`).
fn cpu_now(masters: &Masters) -> Result<(Duration, Duration)> {
    let mut seconds = 0.0;
    for server in masters.servers() {
        let info = server.command(&["INFO", "cpu"])?;
        for line in info.lines() {
            if let Some((name, value)) = line.trim().split_once(':') {
                if name == "used_cpu_user" || name == "used_cpu_sys" {
                    seconds += value.parse::<f64>()?;
                }
            }
        }
    }
    Ok((super::process_cpu()?, Duration::from_secs_f64(seconds)))
}

/// The CPU time spent since `before` (see `cpu_now`).
fn cpu_since(masters: &Masters, before: (Duration, Duration)) -> Result<(Duration, Duration)> {
    let now = cpu_now(masters)?;
    Ok((
        now.0.saturating_sub(before.0),
        now.1.saturating_sub(before.1),
    ))
}

async fn leasehold_cycles(
    masters: &Masters,
    urls: &[String],
    cycles: usize,
    warmup: usize,
) -> Result<Run> {
    let redlock = Redlock::builder(urls.iter().cloned())
        .lease(LEASE)
        .watchdog(false)
        .build()?;
    let mutex = redlock.mutex("w4:lock")?;
    for _ in 0..warmup {
        mutex.acquire().await?.release().await?;
    }
    let mut acquire = Vec::with_capacity(cycles);
    let mut release = Vec::with_capacity(cycles);
    let mut last_fence = 0;
    let gap = probe_gap();
    let cpu_before = cpu_now(masters)?;
    let started = Instant::now();
    for _ in 0..cycles {
        let t = Instant::now();
        let guard = mutex.acquire().await?;
        acquire.push(t.elapsed());
        if guard.fence() <= last_fence {
            return Err(format!(
                "W4: leasehold's fence went back: {} after {last_fence}",
                guard.fence()
            )
            .into());
        }
        last_fence = guard.fence();
        let t = Instant::now();
        guard.release().await?;
        release.push(t.elapsed());
        if let Some(gap) = gap {
            tokio::time::sleep(gap).await;
        }
    }
    let elapsed = started.elapsed();
    redlock.flush().await;
    let (client_cpu, masters_cpu) = cpu_since(masters, cpu_before)?;
    Ok(Run {
        library: "leasehold Redlock",
        cycles,
        elapsed,
        client_cpu,
        masters_cpu,
        acquire: Latencies::new(acquire)?,
        release: Latencies::new(release)?,
    })
}

async fn rslock_cycles(
    masters: &Masters,
    urls: &[String],
    cycles: usize,
    warmup: usize,
) -> Result<Run> {
    let manager = LockManager::new(urls.to_vec());
    for _ in 0..warmup {
        let lock = manager.lock("w4:rslock", LEASE).await?;
        manager.unlock(&lock).await;
    }
    let mut acquire = Vec::with_capacity(cycles);
    let mut release = Vec::with_capacity(cycles);
    let gap = probe_gap();
    let cpu_before = cpu_now(masters)?;
    let started = Instant::now();
    for _ in 0..cycles {
        let t = Instant::now();
        let lock = manager.lock("w4:rslock", LEASE).await?;
        acquire.push(t.elapsed());
        let t = Instant::now();
        manager.unlock(&lock).await;
        release.push(t.elapsed());
        if let Some(gap) = gap {
            tokio::time::sleep(gap).await;
        }
    }
    let elapsed = started.elapsed();
    let (client_cpu, masters_cpu) = cpu_since(masters, cpu_before)?;
    Ok(Run {
        library: "rslock 0.10",
        cycles,
        elapsed,
        client_cpu,
        masters_cpu,
        acquire: Latencies::new(acquire)?,
        release: Latencies::new(release)?,
    })
}

fn probe_gap() -> Option<Duration> {
    std::env::var("W4_GAP_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis)
}

/// Script calls (EVALSHA and FCALL) the masters have seen so far, summed.
fn evalsha_calls(masters: &Masters) -> Result<u64> {
    let mut total = 0;
    for server in masters.servers() {
        let stats = server.command(&["INFO", "commandstats"])?;
        for command in ["cmdstat_evalsha:calls=", "cmdstat_fcall:calls="] {
            total += stats
                .lines()
                .find_map(|l| l.strip_prefix(command))
                .and_then(|rest| rest.split(',').next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Ok(total)
}

/// W2 on Redlock: 8 workers, each with a Redlock of its own, contend for
/// one lock over the five masters, holding it 1 ms each time.
fn w2_redlock(masters: &Masters, run_for: Duration) -> Result<()> {
    const WORKERS: usize = 8;
    let urls = masters.urls();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let calls_before = evalsha_calls(masters)?;
    let results = rt.block_on(async {
        let mut workers: Vec<tokio::task::JoinHandle<leasehold::Result<(usize, Duration)>>> =
            Vec::new();
        for _ in 0..WORKERS {
            let redlock = Redlock::builder(urls.iter().cloned())
                .lease(LEASE)
                .watchdog(false)
                .build()?;
            workers.push(tokio::spawn(async move {
                let mutex = redlock.mutex("w2:redlock")?;
                let (mut taken, mut wait_max) = (0usize, Duration::ZERO);
                let until = Instant::now() + run_for;
                while Instant::now() < until {
                    let t = Instant::now();
                    let guard = mutex.acquire_timeout(Duration::from_secs(30)).await?;
                    wait_max = wait_max.max(t.elapsed());
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    guard.release().await?;
                    taken += 1;
                }
                redlock.flush().await;
                leasehold::Result::Ok((taken, wait_max))
            }));
        }
        let mut results = Vec::new();
        for worker in workers {
            results.push(worker.await??);
        }
        Result::<_>::Ok(results)
    })?;
    let calls = evalsha_calls(masters)?.saturating_sub(calls_before);
    let total: usize = results.iter().map(|(n, _)| n).sum();
    let wait_max = results.iter().map(|(_, w)| *w).max().unwrap_or_default();
    let shares: Vec<f64> = results
        .iter()
        .map(|(n, _)| round1(100.0 * *n as f64 / total.max(1) as f64))
        .collect();
    println!();
    println!(
        "W2 on Redlock: {MASTERS} masters, {WORKERS} workers, hold 1 ms, {} s",
        run_for.as_secs()
    );
    println!(
        "acquisitions/s {}  calls/acquisition {}  wait max {} ms  shares % {:?}",
        round1(per_second(total, run_for)),
        round1(calls as f64 / total.max(1) as f64),
        round1(wait_max.as_secs_f64() * 1000.0),
        shares
    );
    println!(
        "{}",
        json!({
            "workload": "W2-redlock",
            "masters": MASTERS,
            "workers": WORKERS,
            "acquisitions": total,
            "acquisitions_per_s": round1(per_second(total, run_for)),
            "calls_per_acquisition": round1(calls as f64 / total.max(1) as f64),
            "wait_max_ms": round1(wait_max.as_secs_f64() * 1000.0),
            "shares_percent": shares,
        })
    );
    Ok(())
}

/// Runs W4 (and W4 with one master slowed) and prints its table and JSON.
pub(crate) fn w4(quick: bool) -> Result<()> {
    let (cycles, slowed_cycles, warmup): (usize, usize, usize) = if quick {
        (200, 50, 10)
    } else {
        (2_000, 300, 50)
    };
    let masters = Masters::start(MASTERS);
    let urls = masters.urls();
    let rt = super::current_thread_runtime()?;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let block = cycles.div_ceil(BLOCKS);
    for i in 0..BLOCKS {
        let n = block.min(cycles.saturating_sub(block * i));
        if n == 0 {
            break;
        }
        for side in [i % 2, 1 - i % 2] {
            if side == 0 {
                ours.push(rt.block_on(leasehold_cycles(&masters, &urls, n, warmup))?);
            } else {
                theirs.push(rt.block_on(rslock_cycles(&masters, &urls, n, warmup))?);
            }
        }
    }
    let plain = [Run::merge(ours)?, Run::merge(theirs)?];
    let proxy = FaultProxy::start(masters.servers()[MASTERS - 1].addr());
    proxy.set_reply_latency(SLOWED_BY);
    let mut slowed_urls = urls.clone();
    slowed_urls[MASTERS - 1] = proxy.url();
    let slowed = [
        rt.block_on(leasehold_cycles(
            &masters,
            &slowed_urls,
            slowed_cycles,
            warmup,
        ))?,
        rt.block_on(rslock_cycles(&masters, &slowed_urls, slowed_cycles, warmup))?,
    ];
    proxy.heal();
    drop(proxy);

    println!();
    println!(
        "W4 Redlock: {MASTERS} masters, 1 worker, {cycles} cycles in {BLOCKS} blocks alternating with the peer's, lease {}s, watchdog off",
        LEASE.as_secs()
    );
    let pids: Vec<Option<u32>> = masters.servers().iter().map(|s| s.pid()).collect();
    println!("{}", super::pinning::describe(&pids));
    println!(
        "{:<20} {:>10} {:>22} {:>22} {:>12} {:>12}",
        "library",
        "cycles/s",
        "acquire p50 / p99 µs",
        "release p50 / p99 µs",
        "client CPU",
        "masters CPU"
    );
    for run in &plain {
        println!(
            "{:<20} {:>10} {:>22} {:>22} {:>12} {:>12}",
            run.library,
            round1(run.cycles_per_second()),
            run.acquire.p50_p99(),
            run.release.p50_p99(),
            run.client_cpu_us(),
            run.masters_cpu_us()
        );
    }
    let ratio = plain[0].cycles_per_second() / plain[1].cycles_per_second();
    println!(
        "leasehold / rslock cycles/s: {:.2}x (higher is better); CPU columns: µs per cycle",
        ratio
    );
    println!();
    println!(
        "W4 with one master's replies slowed by {} ms ({slowed_cycles} cycles)",
        SLOWED_BY.as_millis()
    );
    println!(
        "{:<20} {:>18} {:>18} {:>10} {:>16}",
        "library", "acquire p50 µs", "unslowed p50 µs", "slowed/un", "release p50 µs"
    );
    for (run, base) in slowed.iter().zip(&plain) {
        println!(
            "{:<20} {:>18} {:>18} {:>10.2} {:>16}",
            run.library,
            run.acquire.p50_us(),
            base.acquire.p50_us(),
            run.acquire.p50_us() / base.acquire.p50_us(),
            run.release.p50_us()
        );
    }
    println!(
        "{}",
        json!({
            "workload": "W4",
            "masters": MASTERS,
            "cycles": cycles,
            "runs": plain.iter().map(|run| json!({
                "library": run.library,
                "cycles_per_s": round1(run.cycles_per_second()),
                "acquire_p50_us": run.acquire.p50_us(),
                "acquire_p99_us": run.acquire.p99_us(),
                "release_p50_us": run.release.p50_us(),
                "release_p99_us": run.release.p99_us(),
                "client_cpu_us_per_cycle": run.client_cpu_us(),
                "masters_cpu_us_per_cycle": run.masters_cpu_us(),
            })).collect::<Vec<_>>(),
            "ratio_cycles_per_s": (ratio * 100.0).round() / 100.0,
            "slowed_ms": SLOWED_BY.as_millis() as u64,
            "slowed": slowed.iter().zip(&plain).map(|(run, base)| json!({
                "library": run.library,
                "cycles": run.cycles,
                "acquire_p50_us": run.acquire.p50_us(),
                "unslowed_acquire_p50_us": base.acquire.p50_us(),
                "release_p50_us": run.release.p50_us(),
                "acquire_max_us": micros(run.acquire.max()),
            })).collect::<Vec<_>>(),
        })
    );
    w2_redlock(
        &masters,
        if quick {
            Duration::from_secs(2)
        } else {
            Duration::from_secs(10)
        },
    )?;
    Ok(())
}
