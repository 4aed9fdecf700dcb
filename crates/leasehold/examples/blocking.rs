//! Locks in a program without async: four worker threads, each with a
//! client of its own as separate processes would have, add to a counter
//! kept in a file (read, pause, write: without the lock, updates are
//! lost); then a holder learns from a watching thread that an admin took
//! its lock away.
//!
//! Run against your Redis (default `redis://127.0.0.1:6379`, or `LEASEHOLD_URL`):
//!
//!     cargo run -p leasehold --example blocking

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leasehold::blocking::Client;

const WORKERS: u64 = 4;
const ROUNDS: u64 = 25;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), BoxError> {
    let url = std::env::var("LEASEHOLD_URL").unwrap_or_else(|_| leasehold::DEFAULT_URL.into());
    let dir = std::env::temp_dir().join(format!("leasehold-blocking-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let counter = dir.join("counter");
    std::fs::write(&counter, "0")?;

    std::thread::scope(|s| -> Result<(), BoxError> {
        let workers: Vec<_> = (0..WORKERS)
            .map(|_| s.spawn(|| work(&url, &counter)))
            .collect();
        for worker in workers {
            worker.join().map_err(|_| "a worker panicked")??;
        }
        Ok(())
    })?;
    let total: u64 = std::fs::read_to_string(&counter)?.parse()?;
    println!("{WORKERS} threads added {ROUNDS} each: the counter reads {total}");
    std::fs::remove_dir_all(&dir)?;
    if total != WORKERS * ROUNDS {
        return Err("an update was lost".into());
    }

    lose_a_lease(&url)
}

fn work(url: &str, counter: &Path) -> Result<(), BoxError> {
    let client = Client::open(url)?;
    let mutex = client.mutex("example:counter")?;
    for _ in 0..ROUNDS {
        let guard = mutex.acquire_timeout(Duration::from_secs(30))?;
        let seen: u64 = std::fs::read_to_string(counter)?.parse()?;
        std::thread::sleep(Duration::from_millis(1));
        std::fs::write(counter, (seen + 1).to_string())?;
        guard.release()?;
    }
    Ok(())
}

fn lose_a_lease(url: &str) -> Result<(), BoxError> {
    let client =
        Client::from_builder(leasehold::Client::builder(url).lease(Duration::from_secs(1)))?;
    let mutex = client.mutex("example:report")?;
    let guard = mutex.acquire()?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<(), BoxError> {
        // The watcher blocks until the lease is lost, then tells the worker.
        let watcher = s.spawn(|| -> leasehold::Result<()> {
            guard.wait_lost()?;
            stop.store(true, Ordering::SeqCst);
            Ok(())
        });
        let mut batches = 0;
        while !stop.load(Ordering::SeqCst) {
            batches += 1;
            if batches == 3 {
                // An admin removes the lock, say from `leasehold` on a shell.
                Client::open(url)?
                    .mutex("example:report")?
                    .force_release()?;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        watcher.join().map_err(|_| "the watcher panicked")??;
        Ok(())
    })?;
    if let Some(reason) = guard.loss_reason() {
        println!("the holder stopped writing: lease lost, {reason}");
    }
    match guard.release() {
        Err(e) if e.is_not_held() => println!("release says: {e}"),
        other => other?,
    }
    Ok(())
}
