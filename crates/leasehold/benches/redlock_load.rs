//! How often a Redlock acquisition fails with a quorum error on a busy host.
//! Starts three masters from the test kit, optionally loads the machine with
//! CPU hogs of its own (busy shell loops, killed by pid at the end), and runs
//! workers that each take and release a lock of their own (nothing contends,
//! so every failure is a master that did not answer in time), with
//! `try_acquire` (one try) and `acquire_timeout` (a wait). Prints, per mode:
//! cycles, how many were held, busy, quorum errors and other errors, and
//! the error rate.
//!
//! `cargo bench -p leasehold --bench redlock_load`, with `REDLOCK_LOAD_HOGS`
//! (CPU hogs, 0 by default), `REDLOCK_LOAD_LEASE_MS` (the lease, 1000 by
//! default), `REDLOCK_LOAD_SECS` (seconds per mode, 10 by default) and
//! `REDLOCK_LOAD_WORKERS` (8 by default). Figures of one run only compare
//! with each other; this is a measurement, not a test.

use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::Redlock;
use leasehold_testkit::Masters;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Busy loops of this bench's own, killed by pid when dropped.
struct Hogs(Vec<Child>);

impl Drop for Hogs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[derive(Default)]
struct Counts {
    cycles: AtomicU64,
    held: AtomicU64,
    busy: AtomicU64,
    quorum: AtomicU64,
    other: AtomicU64,
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("redlock_load: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let hogs = env("REDLOCK_LOAD_HOGS", 0);
    let lease = Duration::from_millis(env("REDLOCK_LOAD_LEASE_MS", 1000));
    let secs = Duration::from_secs(env("REDLOCK_LOAD_SECS", 10));
    let workers = env("REDLOCK_LOAD_WORKERS", 8);
    let masters = Masters::start(3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let redlock = Redlock::builder(masters.urls()).lease(lease).build()?;
    // Connected before the load starts.
    runtime.block_on(async {
        let mutex = redlock.mutex("warm-up")?;
        if let Some(guard) = mutex.try_acquire().await? {
            guard.release().await?;
        }
        Ok::<_, leasehold::Error>(())
    })?;
    let _hogs = Hogs(
        (0..hogs)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .stdout(Stdio::null())
                    .spawn()
            })
            .collect::<std::io::Result<_>>()?,
    );
    println!("lease {lease:?}, {workers} workers, {hogs} CPU hogs, {secs:?} per mode");
    println!("mode            cycles    held    busy  quorum   other  quorum/cycle");
    for wait in [None, Some(lease)] {
        let counts = Arc::new(Counts::default());
        let end = Instant::now() + secs;
        runtime.block_on(async {
            let mut tasks = Vec::new();
            for w in 0..workers {
                let mutex = redlock.mutex(&format!("load-{w}"))?;
                let counts = Arc::clone(&counts);
                tasks.push(tokio::spawn(async move {
                    while Instant::now() < end {
                        counts.cycles.fetch_add(1, Ordering::Relaxed);
                        let got = match wait {
                            None => mutex.try_acquire().await,
                            Some(wait) => mutex.acquire_timeout(wait).await.map(Some),
                        };
                        match got {
                            Ok(Some(guard)) => {
                                counts.held.fetch_add(1, Ordering::Relaxed);
                                let _ = guard.release().await;
                            }
                            Ok(None) => {
                                counts.busy.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) if e.kind() == leasehold::ErrorKind::Quorum => {
                                counts.quorum.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) if e.is_timeout() => {
                                counts.busy.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => {
                                counts.other.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }));
            }
            for task in tasks {
                task.await?;
            }
            Result::Ok(())
        })?;
        let cycles = counts.cycles.load(Ordering::Relaxed);
        let quorum = counts.quorum.load(Ordering::Relaxed);
        println!(
            "{:<14} {:>7} {:>7} {:>7} {:>7} {:>7}  {:>11.4}",
            if wait.is_none() {
                "try_acquire"
            } else {
                "acquire_timeout"
            },
            cycles,
            counts.held.load(Ordering::Relaxed),
            counts.busy.load(Ordering::Relaxed),
            quorum,
            counts.other.load(Ordering::Relaxed),
            quorum as f64 / cycles.max(1) as f64,
        );
    }
    Ok(())
}
