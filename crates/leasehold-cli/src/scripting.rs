//! The commands for shell scripts: acquire, release, extend, inspect, force-release.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;

use crate::cli::{
    AcquireArgs, Connection, ExtendArgs, InspectArgs, NameArgs, TakeArgs, TokenArgs, WaitArgs,
};
use crate::exit::{self, Fail};
use crate::kind::{self, Kind, Lock};
use crate::state;

/// Takes the lock as `wait` says; a busy lock is an error that exits 75.
pub(crate) async fn take(
    lock: &Lock,
    wait: &WaitArgs,
    how: &TakeArgs,
) -> anyhow::Result<leasehold::MutexGuard> {
    // Under a restart grace a young server grants nothing, and says so
    // only as a busy lock.
    let grace = if how.restart_grace.is_some() {
        " (or Redis has been up for less than --restart-grace)"
    } else {
        ""
    };
    let busy = |message: String| Fail {
        code: exit::BUSY,
        message: format!("{message}{grace}"),
    };
    if wait.no_wait {
        return lock
            .try_acquire()
            .await?
            .ok_or_else(|| busy(format!("lock {:?} is held by someone else", lock.name())).into());
    }
    let taken = match wait.wait {
        Some(limit) => lock.acquire_timeout(limit).await,
        None => lock.acquire().await,
    };
    match taken {
        Ok(guard) => Ok(guard),
        Err(err) if err.is_timeout() => Err(busy(err.to_string()).into()),
        Err(err) => Err(err.into()),
    }
}

pub(crate) async fn acquire(conn: &Connection, args: AcquireArgs) -> anyhow::Result<ExitCode> {
    let kind = Kind::from(&args.take.kind);
    let client = conn
        .builder(args.lease, false, args.take.restart_grace)
        .name(kind::client_name("acquire", &args.name, kind, &[]))
        .build()?;
    let lock = Lock::new(&client, &args.name, kind)?;
    let taken = take(&lock, &args.wait, &args.take).await;
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
    let client = conn.client(leasehold::DEFAULT_LEASE, false, None)?;
    client.mutex(&args.name)?.release_token(&args.token).await?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn extend(conn: &Connection, args: ExtendArgs) -> anyhow::Result<ExitCode> {
    let client = conn.client(leasehold::DEFAULT_LEASE, false, None)?;
    client
        .mutex(&args.lock.name)?
        .extend_token(&args.lock.token, args.lease)
        .await?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn inspect(conn: &Connection, args: InspectArgs) -> anyhow::Result<ExitCode> {
    let client = conn.client(leasehold::DEFAULT_LEASE, false, None)?;
    let info = client.mutex(&args.name)?.inspect().await?;
    if args.json {
        println!("{}", info_json(&info));
        return Ok(ExitCode::SUCCESS);
    }
    let state = match (info.held, info.remaining) {
        (false, _) => "free".to_owned(),
        (true, Some(left)) => format!("held, {} of lease left", seconds(left)),
        (true, None) => "held, with no expiry (set by hand?)".to_owned(),
    };
    println!("lock:            {}", info.name);
    for line in state::lines(&info, state) {
        println!("{line}");
    }
    match info.last_fence {
        Some(fence) => println!("last fence:      {fence}"),
        None => println!("last fence:      none yet"),
    }
    println!("waiting clients: {}", info.waiting_clients);
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn force_release(conn: &Connection, args: NameArgs) -> anyhow::Result<ExitCode> {
    let client = conn.client(leasehold::DEFAULT_LEASE, false, None)?;
    let removed = client.mutex(&args.name)?.force_release().await?;
    if removed {
        println!("removed lock {:?}; its waiters were woken", args.name);
    } else {
        println!("lock {:?} was free", args.name);
    }
    Ok(ExitCode::SUCCESS)
}

/// A lock's state as `inspect --json` and `watch --once --json` print it.
pub(crate) fn info_json(info: &leasehold::LockInfo) -> serde_json::Value {
    let remaining_ms =
        state::lease_left(info).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut value = json!({
        "name": info.name,
        "held": info.held,
        "remaining_ms": remaining_ms,
        "last_fence": info.last_fence,
        "waiting_clients": info.waiting_clients,
    });
    if let Some(object) = value.as_object_mut() {
        object.extend(state::json_fields(info).map(|(k, v)| (k.to_owned(), v)));
    }
    value
}

pub(crate) fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}
