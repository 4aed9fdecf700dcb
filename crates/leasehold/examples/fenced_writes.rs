//! A lock that guards correctness: the storage refuses a write whose fence is
//! older than one it has already accepted, so a holder that stalled past its
//! lease cannot overwrite its successor's work.
//!
//! Run against your Redis (default `redis://127.0.0.1:6379`, or `LEASEHOLD_URL`):
//!
//!     cargo run -p leasehold --example fenced_writes

use std::time::Duration;

use leasehold::redis::{self, AsyncCommands};

const RECORD: &str = "example:fenced:record";

/// The storage side: writes `value` only if `fence` is at least the largest
/// fence accepted so far. Returns whether the write was accepted.
static FENCED_SET: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
        local seen = tonumber(redis.call('HGET', KEYS[1], 'fence')) or 0
        if tonumber(ARGV[1]) < seen then return 0 end
        redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
        return 1",
    )
});

async fn write(
    redis: &mut redis::aio::MultiplexedConnection,
    fence: u64,
    value: &str,
) -> redis::RedisResult<bool> {
    FENCED_SET
        .key(RECORD)
        .arg(fence)
        .arg(value)
        .invoke_async(redis)
        .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("LEASEHOLD_URL").unwrap_or_else(|_| leasehold::DEFAULT_URL.into());
    let mut redis = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let _: () = redis.del(RECORD).await?;

    // Holder A takes a short fixed lease, then stalls past it (a GC pause, a frozen VM).
    let a = leasehold::Client::builder(url.as_str())
        .lease(Duration::from_millis(300))
        .watchdog(false)
        .build()?;
    let a_guard = a.mutex("record")?.acquire().await?;
    println!("A holds the lock with fence {}", a_guard.fence());

    // Meanwhile the lease runs out and B takes the lock and writes.
    let b = leasehold::Client::open(&url)?;
    let b_guard = b
        .mutex("record")?
        .acquire_timeout(Duration::from_secs(10))
        .await?;
    println!("B holds the lock with fence {}", b_guard.fence());
    assert!(write(&mut redis, b_guard.fence(), "written by B").await?);
    b_guard.release().await?;

    // A wakes up. Its guard knows the lease is gone, but suppose A writes anyway:
    println!("A's guard says lost: {}", a_guard.is_lost());
    let accepted = write(&mut redis, a_guard.fence(), "written by A (stale)").await?;
    println!("A's stale write accepted: {accepted}");
    let value: String = redis.hget(RECORD, "value").await?;
    println!("the record holds: {value:?}");
    if accepted || value != "written by B" {
        return Err("the fence did not stop the stale write".into());
    }
    if let Err(err) = a_guard.release().await {
        println!("A's release reports: {err}");
    }
    Ok(())
}
