//! The commands for shell scripts: acquire, release, extend, inspect, force-release.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::cli::{
    AcquireArgs, Connection, ExtendArgs, ForceReleaseArgs, InspectArgs, LibrariesArgs, ReleaseArgs,
    SemaphoreAction, SemaphoreArgs, TakeArgs, WaitArgs,
};
use crate::duration::{self, seconds};
use crate::exit::{self, Fail};
use crate::kind::{self, Kind, Lock, Take};
use crate::{state, status};

/// Takes the lock (or locks) as `wait` says, with the status line while it
/// waits (unless `--quiet`); a busy lock is an error that exits 75.
pub(crate) async fn take<T: Take>(
    lock: &T,
    wait: &WaitArgs,
    how: &TakeArgs,
) -> anyhow::Result<T::Guard> {
    status::while_waiting(
        lock.shown(),
        wait.wait.as_ref(),
        how.quiet,
        take_quietly(lock, wait, how),
    )
    .await
}

async fn take_quietly<T: Take>(
    lock: &T,
    wait: &WaitArgs,
    how: &TakeArgs,
) -> anyhow::Result<T::Guard> {
    // Under a restart grace a young server grants nothing, and says so
    // only as a busy lock.
    let grace = match &how.restart_grace {
        Some(grace) => format!(
            " (or Redis has been up for less than --restart-grace {grace}, and grants no lock \
             until then)"
        ),
        None => String::new(),
    };
    if wait.no_wait {
        if let Some(guard) = lock.try_take().await? {
            return Ok(guard);
        }
        // Of several, the one that was busy.
        let busy = lock.shown();
        let name = busy.name();
        let holder = holder_of(busy).await;
        return Err(Fail {
            code: exit::BUSY,
            message: format!("lock {name:?} is held by {holder}{grace}"),
        }
        .into());
    }
    let taken = lock.take(wait.wait.as_ref().map(|limit| limit.get())).await;
    match (taken, &wait.wait) {
        (Ok(guard), _) => Ok(guard),
        // The bound as it was typed, not as the library prints it.
        (Err(err), Some(limit)) if err.is_timeout() => {
            let busy = lock.shown();
            let name = busy.name();
            let holder = holder_of(busy).await;
            Err(Fail {
                code: exit::BUSY,
                message: format!(
                    "lock {name:?} could not be taken within {limit}: it is held by \
                     {holder}{grace}; wait longer, or see `leasehold inspect {name}`"
                ),
            }
            .into())
        }
        (Err(err), _) => Err(err.into()),
    }
}

/// Who holds the lock and for how long, for a busy error: "pid 4242 on
/// build-7 (leasehold run nightly -- ./job.sh), 27.0s of lease left", or
/// "someone else" when that cannot be read.
async fn holder_of(lock: &Lock) -> String {
    let Ok(info) = lock.inspect().await else {
        return "someone else".to_owned();
    };
    let who = match info.holders.as_slice() {
        [] => return "someone else".to_owned(),
        [one] => one.describe(),
        [first, rest @ ..] => format!("{} and {} more", first.describe(), rest.len()),
    };
    match state::lease_left(&info) {
        Some(left) => format!("{who}, {} of lease left", seconds(left)),
        None => who,
    }
}

pub(crate) async fn acquire(conn: &Connection, args: AcquireArgs) -> anyhow::Result<ExitCode> {
    let grace = args.take.restart_grace.as_ref().map(|g| g.get());
    let kind = Kind::from(&args.take.kind);
    let locker = conn.locker(args.lease.get(), false, grace, |builder| {
        builder
            .replica_ack(args.take.replicas.ack())
            .name(kind::client_name())
    })?;
    locker.refuse_on_redlock(
        args.hold_at_least.is_some(),
        "--hold-at-least does not apply to `acquire --redlock` (its release --hold-until is for \
         one deployment): use `run --redlock --hold-at-least`, which holds the lock itself",
    )?;
    let holding = kind::Holding {
        at_least: args.hold_at_least.as_ref().map(|hold| hold.get()),
        at_most: None,
        replicas_given: args.take.replicas.given(),
    };
    let lock = kind::taken_lock(&locker, &args.name, kind, holding)?;
    let taken = take(&lock, &args.wait, &args.take).await;
    // A failed attempt may have left a release running in the background.
    locker.client.flush().await;
    let lease = taken?.detach();
    // Counted from when the grant arrived, which is after Redis made it, and
    // rounded up to the next millisecond: the hold can only come out longer
    // than asked, never shorter.
    let hold_until = args
        .hold_at_least
        .as_ref()
        .map(|hold| unix_ms(SystemTime::now() + hold.get() + Duration::from_millis(1)));
    if args.json {
        let mut out = json!({
            "name": lease.name,
            "token": lease.token,
            "fence": lease.fence,
            "lease_ms": millis(args.lease.get()),
        });
        if let Some(until) = hold_until {
            out["hold_until_unix_ms"] = until.into();
        }
        println!("{out}");
    } else if let Some(until) = hold_until {
        println!("{} {} {until}", lease.token, lease.fence);
    } else {
        println!("{} {}", lease.token, lease.fence);
    }
    Ok(ExitCode::SUCCESS)
}

/// Releases the lock; before `--hold-until` the lock is kept until then
/// instead, marked as kept, and nobody is woken, as a release within the
/// library's hold-at-least does. The moment travels with the token, in the
/// script.
pub(crate) async fn release(conn: &Connection, args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    let locker = conn.locker(leasehold::DEFAULT_LEASE, false, None, |builder| builder)?;
    locker.refuse_on_redlock(
        args.hold_until.is_some(),
        "--hold-until does not apply to --redlock: release the token alone",
    )?;
    let mutex = locker.client.mutex(&args.lock.name)?;
    let now = unix_ms(SystemTime::now());
    let keep = args
        .hold_until
        .filter(|&until| until > now)
        // Never shorter than asked: the shortest lease Redis is given is
        // longer than what is left.
        .map(|until| Duration::from_millis(until - now).max(leasehold::MIN_LEASE));
    if let (Some(keep), Some(until)) = (keep, args.hold_until) {
        if keep > leasehold::MAX_LEASE {
            return Err(Fail {
                code: exit::USAGE,
                message: format!(
                    "--hold-until {until} is {} from now by this host's clock, more than a \
                     hold can last (24h): pass the third word `acquire --hold-at-least` printed",
                    duration::human(keep)
                ),
            }
            .into());
        }
    }
    let held_on = match keep {
        Some(keep) => {
            mutex.release_token_keeping(&args.lock.token, keep).await?;
            None
        }
        None => Some(mutex.release_token_counted(&args.lock.token).await?),
    };
    if args.json {
        let mut out = json!({
            "name": args.lock.name,
            "freed": keep.is_none(),
            "kept_ms": keep.map(millis),
        });
        if let (Some(masters), Some(held_on)) = (locker.masters, held_on) {
            out["held_on"] = held_on.into();
            out["masters"] = masters.into();
        }
        println!("{out}");
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn extend(conn: &Connection, args: ExtendArgs) -> anyhow::Result<ExitCode> {
    let locker = conn.locker(leasehold::DEFAULT_LEASE, false, None, |builder| {
        builder.replica_ack(args.replicas.ack())
    })?;
    locker.refuse_on_redlock(
        args.replicas.given(),
        "--replicas does not apply to --redlock: a majority of its masters stands for the \
         replicas",
    )?;
    locker
        .client
        .mutex(&args.lock.name)?
        .extend_token(&args.lock.token, args.lease.get())
        .await?;
    if args.json {
        println!(
            "{}",
            json!({"name": args.lock.name, "lease_ms": millis(args.lease.get())})
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn inspect(conn: &Connection, args: InspectArgs) -> anyhow::Result<ExitCode> {
    let master = conn.sentinel_master();
    let locker = conn.locker(leasehold::DEFAULT_LEASE, false, None, |builder| builder)?;
    let lock = locker.client.mutex(&args.name)?;
    // On a Redlock, each master's view beside the majority's.
    let masters = match locker.masters {
        Some(_) => Some(lock.inspect_masters().await),
        None => None,
    };
    let info = lock.inspect().await?;
    let waiters = lock.waiters().await?;
    if args.json {
        let mut out = info_json(&info, master.as_deref());
        if let Some(object) = out.as_object_mut() {
            object.insert("waiters".to_owned(), state::waiters_json(&info, &waiters));
        }
        if let Some(masters) = &masters {
            out["masters"] = masters
                .iter()
                .map(|master| match &master.info {
                    Ok(info) => info_json(info, None),
                    Err(err) => json!({"server": master.address, "error": err.to_string()}),
                })
                .collect();
        }
        println!("{out}");
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
    println!("waiters:         {}", info.waiting_clients);
    for line in state::waiter_lines(&info, &waiters) {
        println!("{line}");
    }
    println!(
        "server:          {}",
        server_label(&info, master.as_deref())
    );
    let holders_fence = info.held.then_some(info.last_fence).flatten();
    for master in masters.iter().flatten() {
        let what = match &master.info {
            Ok(info) if info.held => {
                let fence = match (info.last_fence, holders_fence) {
                    (Some(own), Some(holders)) if own > holders => format!(
                        ", its own fence {own}: it granted after the majority had, and kept \
                         the fence it counted, past the holder's"
                    ),
                    (Some(own), Some(holders)) if own < holders => {
                        format!(", fence {own}: the holder's is not written here yet")
                    }
                    (Some(own), _) => format!(", last fence {own}"),
                    (None, _) => String::new(),
                };
                match (info.holders.first(), state::lease_left(info)) {
                    (Some(holder), Some(left)) => format!(
                        "held by {}, {} of lease left{fence}",
                        holder.describe(),
                        seconds(left)
                    ),
                    (Some(holder), None) => format!("held by {}{fence}", holder.describe()),
                    (None, _) => format!("held{fence}"),
                }
            }
            Ok(info) => match info.last_fence {
                Some(fence) => format!("free, last fence {fence}"),
                None => "free".to_owned(),
            },
            Err(err) => format!("unreadable: {err}"),
        };
        println!("  master {}: {what}", master.address);
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn force_release(
    conn: &Connection,
    args: ForceReleaseArgs,
) -> anyhow::Result<ExitCode> {
    let locker = conn.locker(leasehold::DEFAULT_LEASE, false, None, |builder| builder)?;
    let (removed, what) = if args.read {
        let rw = locker.client.rw_lock(&args.name)?;
        (rw.force_release_readers().await?, "the readers of ")
    } else if args.write {
        let rw = locker.client.rw_lock(&args.name)?;
        (rw.force_release_writer().await?, "the writer of ")
    } else {
        let removed = locker.client.mutex(&args.name)?.force_release().await?;
        (removed, "")
    };
    if args.json {
        println!("{}", json!({"name": args.name, "removed": removed}));
    } else if removed {
        println!("removed {what}lock {:?}; its waiters were woken", args.name);
    } else if args.read {
        println!("lock {:?} had no reader", args.name);
    } else if args.write {
        println!("lock {:?} had no writer", args.name);
    } else {
        println!("lock {:?} was free", args.name);
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn semaphore(conn: &Connection, args: SemaphoreArgs) -> anyhow::Result<ExitCode> {
    let client = conn.client(leasehold::DEFAULT_LEASE, false, None)?;
    match args.action {
        SemaphoreAction::SetPermits {
            name,
            permits,
            if_unset: false,
            ..
        } => {
            client
                .semaphore(&name, permits)?
                .set_permits(permits)
                .await?;
            if args.json {
                println!("{}", json!({"name": name, "permits": permits}));
            } else {
                println!("semaphore {name:?} has {permits} permits now; its waiters were woken");
            }
        }
        SemaphoreAction::SetPermits {
            name,
            permits,
            lifetime,
            ..
        } => {
            let semaphore = client.semaphore(&name, permits)?;
            let set = match &lifetime {
                Some(lifetime) => {
                    semaphore
                        .try_set_permits_for(permits, lifetime.get())
                        .await?
                }
                None => semaphore.try_set_permits(permits).await?,
            };
            if args.json {
                println!(
                    "{}",
                    json!({
                        "name": name,
                        "permits": permits,
                        "set": set,
                        "lifetime_ms": lifetime.as_ref().map(|l| millis(l.get())),
                    })
                );
            } else if set {
                match &lifetime {
                    Some(lifetime) => println!(
                        "semaphore {name:?} has {permits} permits now, for {}",
                        duration::human(lifetime.get())
                    ),
                    None => println!("semaphore {name:?} has {permits} permits now"),
                }
            } else {
                println!("semaphore {name:?} has a permit count already; it was left as it is");
            }
        }
        SemaphoreAction::Delete { name } => {
            // The count of a handle does not matter to a delete.
            let deleted = client.semaphore(&name, 1)?.delete().await?;
            if args.json {
                println!("{}", json!({"name": name, "deleted": deleted}));
            } else if deleted {
                println!("deleted semaphore {name:?}; its waiters were woken");
            } else {
                println!("there was no semaphore {name:?}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn libraries(conn: &Connection, args: LibrariesArgs) -> anyhow::Result<ExitCode> {
    let locker = conn.locker(leasehold::DEFAULT_LEASE, false, None, |builder| builder)?;
    let found = if args.remove_unused {
        locker
            .client
            .remove_unused_script_libraries(args.force)
            .await?
    } else {
        locker.client.script_libraries().await?
    };
    if args.json {
        let libraries: Vec<serde_json::Value> = found
            .iter()
            .map(|library| {
                json!({
                    "server": library.server,
                    "name": library.name,
                    "this_version": library.this_version,
                    "clients": library.clients,
                    "unknown_clients": library.unknown_clients,
                    "removed": library.removed,
                })
            })
            .collect();
        println!("{}", json!({ "libraries": libraries }));
        return Ok(ExitCode::SUCCESS);
    }
    if found.is_empty() {
        println!("no leasehold library on the server (Redis 6.2 has no Functions: scripts alone)");
    }
    for library in &found {
        let unknown = match library.unknown_clients {
            Some(0) => String::new(),
            Some(n) => format!(", {n} clients that cannot say which library they call"),
            None => {
                ", the server cannot tell which library clients call (older than 7.2)".to_owned()
            }
        };
        let state = if library.removed {
            "removed"
        } else if library.this_version {
            "this version's"
        } else if library.is_unused() {
            "unused"
        } else {
            "kept"
        };
        println!(
            "{}  {}  {state}: {} clients call it{unknown}",
            library.server, library.name, library.clients
        );
    }
    let kept_for_unknown = found
        .iter()
        .any(|l| !l.removed && !l.this_version && l.clients == 0);
    if args.remove_unused && !args.force && kept_for_unknown {
        println!(
            "some were kept for clients that cannot say which library they call: --force \
             removes them"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The server that keeps a lock, as `inspect` and `watch` print it: its
/// `host:port`, and through Sentinel that it is the master of `master`.
pub(crate) fn server_label(info: &leasehold::LockInfo, master: Option<&str>) -> String {
    match master {
        Some(name) => format!(
            "{} (master {name:?}, as its sentinels name it)",
            info.server
        ),
        None => info.server.clone(),
    }
}

/// A lock's state as `inspect --json` and `watch --once --json` print it;
/// `server` is the one that keeps the lock (on a cluster, its slot's
/// master; through Sentinel, the master they read, whose name is
/// `sentinel_master`).
pub(crate) fn info_json(info: &leasehold::LockInfo, master: Option<&str>) -> serde_json::Value {
    let remaining_ms = state::lease_left(info).map(millis);
    let mut value = json!({
        "name": info.name,
        "held": info.held,
        "remaining_ms": remaining_ms,
        "last_fence": info.last_fence,
        "waiting_clients": info.waiting_clients,
        "server": info.server,
    });
    if let (Some(name), Some(object)) = (master, value.as_object_mut()) {
        object.insert("sentinel_master".to_owned(), json!(name));
    }
    if let Some(object) = value.as_object_mut() {
        object.extend(state::json_fields(info).map(|(k, v)| (k.to_owned(), v)));
    }
    value
}

/// Milliseconds since the Unix epoch; 0 for a clock set before 1970.
fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, millis)
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
