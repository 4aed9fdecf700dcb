//! Lock metrics exported for Prometheus: leasehold reports through the
//! `metrics` facade, and `metrics-exporter-prometheus` renders them.
//!
//! A service serves `handle.render()` at `/metrics` from its own HTTP
//! server (or turns on the exporter's `http-listener` feature); this example
//! takes a few locks and prints what a scrape would see.
//!
//! Run against your Redis (default `redis://127.0.0.1:6379`, or `LEASEHOLD_URL`):
//!
//!     cargo run -p leasehold --example prometheus

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let handle = PrometheusBuilder::new().install_recorder()?;
    leasehold::observe::describe_metrics();
    let url = std::env::var("LEASEHOLD_URL").unwrap_or_else(|_| leasehold::DEFAULT_URL.into());
    let client = leasehold::Client::builder(url.clone())
        .lease(Duration::from_millis(300))
        .build()?;

    // Work under a lock, long enough for the watchdog to renew it.
    let mutex = client.mutex("example:metrics")?;
    mutex
        .run_locked(tokio::time::sleep(Duration::from_millis(400)))
        .await?;

    // A busy lock: a try that finds it held, and a wait that runs out.
    let fair = client.fair_mutex("example:metrics:fair")?;
    let guard = fair.acquire().await?;
    // Another process's view of the same lock.
    let other = leasehold::Client::open(&url)?.fair_mutex("example:metrics:fair")?;
    if other.try_acquire().await?.is_some() {
        return Err("the lock was free while held".into());
    }
    match other.acquire_timeout(Duration::from_millis(50)).await {
        Err(e) if e.is_timeout() => {}
        other => return Err(format!("the wait should have run out: {other:?}").into()),
    }
    guard.release().await?;

    let scrape = handle.render();
    println!("{scrape}");
    for name in [
        leasehold::observe::ACQUISITIONS,
        leasehold::observe::TIMEOUTS,
        leasehold::observe::RENEWALS,
        leasehold::observe::HOLD_SECONDS,
    ] {
        if !scrape.contains(name) {
            return Err(format!("{name} is missing from the scrape").into());
        }
    }
    Ok(())
}
