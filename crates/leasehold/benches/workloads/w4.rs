//! W4: Redlock over five independent masters started by the test kit, one
//! worker, acquire then release, 2,000 cycles (200 quick), lease 10 s,
//! watchdog off: leasehold's `Redlock` (two rounds, fences included) next
//! to rslock 0.10's `LockManager` over the same five URLs. Then the same
//! with one master's replies slowed by 20 ms (a fault proxy in front of
//! it), where the acquire p50 of each is printed next to its unslowed p50:
//! leasehold returns at a majority, rslock waits for every master.
//!
//! `cargo bench -p leasehold --bench workloads -- --only-w4 [--quick]` runs
//! W4 alone.

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
}

impl Run {
    fn cycles_per_second(&self) -> f64 {
        per_second(self.cycles, self.elapsed)
    }
}

async fn leasehold_cycles(urls: &[String], cycles: usize, warmup: usize) -> Result<Run> {
    let redlock = Redlock::builder(urls.iter().cloned())
        .lease(LEASE)
        .watchdog(false)
        .build()?;
    let mutex = redlock.mutex("w4:lock")?;
    for _ in 0..warmup {
        mutex.acquire().await?.release().await?;
    }
    let mut acquire = Vec::with_capacity(cycles);
    let mut last_fence = 0;
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
        guard.release().await?;
    }
    let elapsed = started.elapsed();
    redlock.flush().await;
    Ok(Run {
        library: "leasehold Redlock",
        cycles,
        elapsed,
        acquire: Latencies::new(acquire)?,
    })
}

async fn rslock_cycles(urls: &[String], cycles: usize, warmup: usize) -> Result<Run> {
    let manager = LockManager::new(urls.to_vec());
    for _ in 0..warmup {
        let lock = manager.lock("w4:rslock", LEASE).await?;
        manager.unlock(&lock).await;
    }
    let mut acquire = Vec::with_capacity(cycles);
    let started = Instant::now();
    for _ in 0..cycles {
        let t = Instant::now();
        let lock = manager.lock("w4:rslock", LEASE).await?;
        acquire.push(t.elapsed());
        manager.unlock(&lock).await;
    }
    Ok(Run {
        library: "rslock 0.10",
        cycles,
        elapsed: started.elapsed(),
        acquire: Latencies::new(acquire)?,
    })
}

/// Runs W4 (and W4 with one master slowed) and prints its table and JSON.
pub(crate) fn w4(quick: bool) -> Result<()> {
    let (cycles, slowed_cycles, warmup) = if quick {
        (200, 50, 10)
    } else {
        (2_000, 300, 50)
    };
    let masters = Masters::start(MASTERS);
    let urls = masters.urls();
    let rt = super::current_thread_runtime()?;
    let plain = [
        rt.block_on(leasehold_cycles(&urls, cycles, warmup))?,
        rt.block_on(rslock_cycles(&urls, cycles, warmup))?,
    ];
    let proxy = FaultProxy::start(masters.servers()[MASTERS - 1].addr());
    proxy.set_reply_latency(SLOWED_BY);
    let mut slowed_urls = urls.clone();
    slowed_urls[MASTERS - 1] = proxy.url();
    let slowed = [
        rt.block_on(leasehold_cycles(&slowed_urls, slowed_cycles, warmup))?,
        rt.block_on(rslock_cycles(&slowed_urls, slowed_cycles, warmup))?,
    ];
    proxy.heal();

    println!();
    println!(
        "W4 Redlock: {MASTERS} masters, 1 worker, {cycles} cycles, lease {}s, watchdog off",
        LEASE.as_secs()
    );
    println!(
        "{:<20} {:>12} {:>22}",
        "library", "cycles/s", "acquire p50 / p99 µs"
    );
    for run in &plain {
        println!(
            "{:<20} {:>12} {:>22}",
            run.library,
            round1(run.cycles_per_second()),
            run.acquire.p50_p99()
        );
    }
    let ratio = plain[0].cycles_per_second() / plain[1].cycles_per_second();
    println!(
        "leasehold / rslock cycles/s: {:.2}x (higher is better)",
        ratio
    );
    println!();
    println!(
        "W4 with one master's replies slowed by {} ms ({slowed_cycles} cycles)",
        SLOWED_BY.as_millis()
    );
    println!(
        "{:<20} {:>18} {:>18} {:>10}",
        "library", "acquire p50 µs", "unslowed p50 µs", "slowed/un"
    );
    for (run, base) in slowed.iter().zip(&plain) {
        println!(
            "{:<20} {:>18} {:>18} {:>10.2}",
            run.library,
            run.acquire.p50_us(),
            base.acquire.p50_us(),
            run.acquire.p50_us() / base.acquire.p50_us()
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
            })).collect::<Vec<_>>(),
            "ratio_cycles_per_s": (ratio * 100.0).round() / 100.0,
            "slowed_ms": SLOWED_BY.as_millis() as u64,
            "slowed": slowed.iter().zip(&plain).map(|(run, base)| json!({
                "library": run.library,
                "cycles": run.cycles,
                "acquire_p50_us": run.acquire.p50_us(),
                "unslowed_acquire_p50_us": base.acquire.p50_us(),
                "acquire_max_us": micros(run.acquire.max()),
            })).collect::<Vec<_>>(),
        })
    );
    Ok(())
}
