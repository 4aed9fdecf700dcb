//! The commands for shell scripts: acquire, release, extend, inspect, force-release.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;

use crate::cli::{AcquireArgs, Connection, ExtendArgs, InspectArgs, NameArgs, TokenArgs, WaitArgs};
use crate::exit::{self, Fail};

/// Takes the lock as `wait` says; a busy lock is an error that exits 75.
pub(crate) async fn take(
    mutex: &leasehold::Mutex,
    wait: &WaitArgs,
) -> anyhow::Result<leasehold::MutexGuard> {
    if wait.no_wait {
        return mutex.try_acquire().await?.ok_or_else(|| {
            Fail {
                code: exit::BUSY,
                message: format!("lock {:?} is held by someone else", mutex.name()),
            }
            .into()
        });
    }
    Ok(match wait.wait {
        Some(limit) => mutex.acquire_timeout(limit).await?,
        None => mutex.acquire().await?,
    })
}

pub(crate) async fn acquire(conn: &Connection, args: AcquireArgs) -> anyhow::Result<ExitCode> {
    let client = conn.client(args.lease, false)?;
    let mutex = client.mutex(&args.name)?;
    let taken = take(&mutex, &args.wait).await;
    // A failed attempt may have left a release running in the background.
    client.flush().await;
    let lease = taken?.detach();
    if args.json {
        println!(
            "{}",
            json!({
                "name": lease.name,
                "token": lease.token,
                "fence": lease.fence,
                "lease_ms": u64::try_from(args.lease.as_millis()).unwrap_or(u64::MAX),
            })
        );
    } else {
        println!("{} {}", lease.token, lease.fence);
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn release(conn: &Connection, args: TokenArgs) -> anyhow::Result<ExitCode> {
    let client = conn.client(leasehold::DEFAULT_LEASE, false)?;
    client.mutex(&args.name)?.release_token(&args.token).await?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn extend(conn: &Connection, args: ExtendArgs) -> anyhow::Result<ExitCode> {
    let client = conn.client(leasehold::DEFAULT_LEASE, false)?;
    client
        .mutex(&args.lock.name)?
        .extend_token(&args.lock.token, args.lease)
        .await?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn inspect(conn: &Connection, args: InspectArgs) -> anyhow::Result<ExitCode> {
    let client = conn.client(leasehold::DEFAULT_LEASE, false)?;
    let info = client.mutex(&args.name)?.inspect().await?;
    let remaining_ms = info
        .remaining
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    if args.json {
        println!(
            "{}",
            json!({
                "name": info.name,
                "held": info.held,
                "remaining_ms": remaining_ms,
                "last_fence": info.last_fence,
                "waiting_clients": info.waiting_clients,
            })
        );
        return Ok(ExitCode::SUCCESS);
    }
    let state = match (info.held, info.remaining) {
        (false, _) => "free".to_owned(),
        (true, Some(left)) => format!("held, {} of lease left", seconds(left)),
        (true, None) => "held, with no expiry (set by hand?)".to_owned(),
    };
    println!("lock:            {}", info.name);
    println!("state:           {state}");
    match info.last_fence {
        Some(fence) => println!("last fence:      {fence}"),
        None => println!("last fence:      none yet"),
    }
    println!("waiting clients: {}", info.waiting_clients);
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn force_release(conn: &Connection, args: NameArgs) -> anyhow::Result<ExitCode> {
    let client = conn.client(leasehold::DEFAULT_LEASE, false)?;
    let removed = client.mutex(&args.name)?.force_release().await?;
    if removed {
        println!("removed lock {:?}; its waiters were woken", args.name);
    } else {
        println!("lock {:?} was free", args.name);
    }
    Ok(ExitCode::SUCCESS)
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}
