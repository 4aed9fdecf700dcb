//! A lock over independent Redis masters (Redlock): held while a majority
//! of them hold it, with a fence that keeps growing whichever majority
//! grants it. Two workers take turns on a ledger; each passes its fence
//! along, and the ledger keeps the largest it has seen.
//!
//! Run against three (or five) masters of your own, given as URLs separated
//! by commas:
//!
//!     LEASEHOLD_REDLOCK=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379 \
//!         cargo run -p leasehold --example redlock

use std::sync::Arc;
use std::time::Duration;

use leasehold::Redlock;
use tokio::sync::Mutex;

#[tokio::main]
async fn main() -> leasehold::Result<()> {
    let redlock = Redlock::builder(
        std::env::var(leasehold::REDLOCK_ENV_VAR)
            .unwrap_or_default()
            .split(',')
            .filter(|url| !url.is_empty()),
    )
    .lease(Duration::from_secs(10))
    .build()?;
    println!(
        "{} masters, a lock is held on {} of them",
        redlock.addresses().len(),
        redlock.quorum()
    );
    let ledger = Arc::new(Mutex::new((0u64, Vec::<String>::new())));
    let mut workers = Vec::new();
    for worker in ["worker-a", "worker-b"] {
        let mutex = redlock.mutex("ledger")?;
        let ledger = Arc::clone(&ledger);
        workers.push(tokio::spawn(async move {
            for entry in 0..3 {
                mutex
                    .with_lock(async |guard| {
                        let mut ledger = ledger.lock().await;
                        // The ledger refuses a fence older than one it saw.
                        assert!(guard.fence() > ledger.0, "a fence went back");
                        ledger.0 = guard.fence();
                        ledger.1.push(format!("{worker} #{entry}"));
                    })
                    .await?;
            }
            leasehold::Result::Ok(())
        }));
    }
    for worker in workers {
        worker.await.expect("a worker panicked")?;
    }
    let ledger = ledger.lock().await;
    println!(
        "{} entries, every fence larger than the last",
        ledger.1.len()
    );

    let mutex = redlock.mutex("ledger")?;
    let guard = mutex.acquire().await?;
    // Another handle is another taker (the same handle in the same task
    // would be told at once that it holds the lock already).
    let other = redlock.mutex("ledger")?;
    println!(
        "a second taker finds it busy: {}",
        other.try_acquire().await?.is_none()
    );
    let held_on = guard.release_counted().await?;
    println!("released; it was held on {held_on} masters");
    Ok(())
}
