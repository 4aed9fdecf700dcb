//! A lock that saves duplicate work: six instances find the same cache entry
//! missing at once, and only one of them rebuilds it.
//!
//! Run against your Redis (default `redis://127.0.0.1:6379`, or `LEASEHOLD_URL`):
//!
//!     cargo run -p leasehold --example cache_rebuild

use std::time::Duration;

use leasehold::redis::AsyncCommands;

const ENTRY: &str = "example:cache:report";
const REBUILDS: &str = "example:cache:rebuilds";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url = std::env::var("LEASEHOLD_URL").unwrap_or_else(|_| leasehold::DEFAULT_URL.into());
    let mut redis = leasehold::redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let _: () = redis.del(&[ENTRY, REBUILDS]).await?;

    let mut instances = Vec::new();
    for instance in 0..6 {
        // Separate clients, as separate processes would have.
        let client = leasehold::Client::open(&url)?;
        let mut redis = redis.clone();
        instances.push(tokio::spawn(async move {
            get_report(instance, &client, &mut redis).await
        }));
    }
    for instance in instances {
        instance.await??;
    }
    let rebuilds: u32 = redis.get(REBUILDS).await?;
    println!("6 instances read the report; it was rebuilt {rebuilds} time(s)");
    if rebuilds != 1 {
        return Err("the entry was rebuilt more than once".into());
    }
    Ok(())
}

async fn get_report(
    instance: u32,
    client: &leasehold::Client,
    redis: &mut leasehold::redis::aio::MultiplexedConnection,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    if let Some(report) = redis.get::<_, Option<String>>(ENTRY).await? {
        return Ok(report);
    }
    let guard = client
        .mutex("cache:report")?
        .acquire_timeout(Duration::from_secs(30))
        .await?;
    // Someone may have rebuilt it while we waited for the lock.
    let report = match redis.get::<_, Option<String>>(ENTRY).await? {
        Some(report) => report,
        None => {
            tokio::time::sleep(Duration::from_millis(200)).await; // the expensive part
            let report = format!("report built by instance {instance}");
            let _: () = redis.set_ex(ENTRY, &report, 60).await?;
            let _: () = redis.incr(REBUILDS, 1).await?;
            println!(
                "instance {instance} rebuilt the entry (fence {})",
                guard.fence()
            );
            report
        }
    };
    guard.release().await?;
    Ok(report)
}
