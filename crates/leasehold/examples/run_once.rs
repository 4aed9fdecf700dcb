//! A run-once job across five processes: cron starts the nightly draw on
//! five hosts, one of them a little late, and exactly one host draws.
//!
//! Four processes start together; one takes the lock and draws, the others
//! find it busy. The fifth starts only after all four have exited, when the
//! winner has long released the lock: it still finds the lock busy, because
//! the lock has a hold-at-least and a release before it keeps the lock.
//!
//! Run against your Redis (default `redis://127.0.0.1:6379`, or `LEASEHOLD_URL`):
//!
//!     cargo run -p leasehold --example run_once

use std::process::{Command, Stdio};
use std::time::Duration;

use leasehold::redis::AsyncCommands;

const DRAWS: &str = "example:lottery:draws";
/// Longer than the spread of the hosts' start times, shorter than the job's period.
const HOLD: Duration = Duration::from_secs(30);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var("LEASEHOLD_URL").unwrap_or_else(|_| leasehold::DEFAULT_URL.into());
    let args: Vec<String> = std::env::args().collect();
    if let [_, role, host] = args.as_slice() {
        if role == "host" {
            return host_runs_the_job(&url, host).await;
        }
    }

    let client = leasehold::Client::open(&url)?;
    // A fresh start: no draw yet, and no hold left from an earlier run.
    let mut redis = leasehold::redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let _: () = redis.del(DRAWS).await?;
    client.mutex("lottery:nightly")?.force_release().await?;

    let exe = std::env::current_exe()?;
    let start = |host: &str| {
        Command::new(&exe)
            .args(["host", host])
            .stdin(Stdio::null())
            .spawn()
    };
    let on_time: Vec<_> = ["host-1", "host-2", "host-3", "host-4"]
        .into_iter()
        .map(start)
        .collect::<Result<_, _>>()?;
    for mut host in on_time {
        if !host.wait()?.success() {
            return Err("a host failed".into());
        }
    }
    println!("the four hosts on time are done; host-5 starts late");
    if !start("host-5")?.wait()?.success() {
        return Err("the late host failed".into());
    }

    let draws: u32 = redis.get::<_, Option<u32>>(DRAWS).await?.unwrap_or(0);
    println!("5 hosts ran the job; the draw was made {draws} time(s)");
    if draws != 1 {
        return Err("the draw was not made exactly once".into());
    }
    Ok(())
}

/// What cron starts on each host.
async fn host_runs_the_job(url: &str, host: &str) -> Result<(), BoxError> {
    let client = leasehold::Client::open(url)?;
    let nightly = client.mutex("lottery:nightly")?.with_hold_at_least(HOLD)?;
    match nightly.try_acquire().await? {
        Some(guard) => {
            let mut redis = leasehold::redis::Client::open(url)?
                .get_multiplexed_async_connection()
                .await?;
            let _: () = redis.incr(DRAWS, 1).await?;
            println!("{host} drew the numbers (fence {})", guard.fence());
            // Done in moments, but the lock is kept until HOLD has passed.
            guard.release().await?;
        }
        None => println!("{host}: already drawn tonight, nothing to do"),
    }
    client.flush().await;
    Ok(())
}
