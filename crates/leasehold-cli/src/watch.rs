//! `leasehold watch NAME...`: the state of named locks, live.
//!
//! A release publishes only to the one waiter it wakes, so there is no
//! lock-wide channel to listen on, and keyspace notifications would need a
//! `CONFIG SET` on the user's Redis. The view is refreshed every 250 ms
//! instead: one read-only script per lock per refresh.
//!
//! `--until-free` is no poll: it watches each lock with a
//! [`leasehold::LockWatch`], which hears a release at once and looks when
//! a lease can have run out.
//!
//! Each lock is shown with the server that keeps it: on a Redis Cluster,
//! the master of its hash slot; through Sentinel, the master the sentinels
//! name (a failover shows as a change of server).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::json;
use unicode_width::UnicodeWidthStr;

use crate::cli::{Connection, WatchArgs};
use crate::duration::seconds;
use crate::exit::{self, Fail};
use crate::outage::Outages;
use crate::plural;
use crate::screen::{self, LiveView};
use crate::scripting::{info_json, server_label};
use crate::signals::Stop;
use crate::state;

const REFRESH: Duration = Duration::from_millis(250);

/// What a line off a terminal says of a lock: held, last fence, waiters,
/// server. A new line is printed when it changes.
type Seen = (bool, Option<u64>, u64, String);

pub(crate) async fn watch(conn: &Connection, args: WatchArgs) -> anyhow::Result<ExitCode> {
    if args.until_free {
        return until_free(conn, args).await;
    }
    // On a Redlock, each lock as a majority of its masters sees it.
    let client = conn
        .locker(leasehold::DEFAULT_LEASE, false, None, |builder| builder)?
        .client;
    let locks: Vec<Box<dyn leasehold::Lock>> = args
        .names
        .iter()
        .map(|name| Ok(Box::new(client.mutex(name)?) as Box<dyn leasehold::Lock>))
        .collect::<leasehold::Result<Vec<_>>>()?;
    let master = conn.sentinel_master();
    let master = master.as_deref();
    if args.once {
        let infos = snapshot(&locks).await?;
        if args.json {
            for info in &infos {
                println!("{}", info_json(info, master));
            }
        } else {
            for line in table(&infos, master) {
                println!("{line}");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }

    let mut stop = Stop::listen()?;
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut view = if screen::stdout_is_terminal() {
        Some(LiveView::start()?)
    } else {
        None
    };
    let started = Instant::now();
    let mut last: Vec<Option<Seen>> = vec![None; locks.len()];
    let mut outages = Outages::new(conn.connect_timeout());
    // At a terminal: the last table Redis answered, and what is said
    // under it while Redis does not answer.
    let mut table_shown: Vec<String> = Vec::new();
    let mut trouble: Option<String> = None;
    loop {
        tokio::select! {
            _ = stop.recv() => break,
            _ = tick.tick() => {}
        }
        let infos = tokio::select! {
            _ = stop.recv() => break,
            infos = snapshot(&locks) => infos,
        };
        let infos = match infos {
            Ok(infos) => {
                if let Some(line) = outages.answered() {
                    if view.is_none() {
                        eprintln!("leasehold: {line}");
                    }
                }
                trouble = None;
                infos
            }
            Err(error) => {
                if let Some(line) = outages.failed(error)? {
                    if view.is_none() {
                        eprintln!("leasehold: {line}");
                    }
                    trouble = Some(line);
                }
                if let (Some(view), Some(line)) = (&mut view, &trouble) {
                    let mut lines = table_shown.clone();
                    lines.push(String::new());
                    lines.push(line.clone());
                    view.draw(&lines)?;
                }
                continue;
            }
        };
        match &mut view {
            Some(view) => {
                table_shown = table(&infos, master);
                let mut lines = table_shown.clone();
                lines.push(String::new());
                lines.push(format!(
                    "refreshed every {} ms; Ctrl-C to stop",
                    REFRESH.as_millis()
                ));
                view.draw(&lines)?;
            }
            // Not a terminal: a line when a lock changes hands or its queue
            // changes, not for every tick of its lease.
            None => {
                for (info, seen) in infos.iter().zip(&mut last) {
                    let now = (
                        info.held,
                        info.last_fence,
                        info.waiting_clients,
                        info.server.clone(),
                    );
                    if seen.as_ref() != Some(&now) {
                        *seen = Some(now);
                        println!(
                            "{:>6.1}s  {:?} on {}: {}",
                            started.elapsed().as_secs_f64(),
                            info.name,
                            server_label(info, master),
                            describe(info)
                        );
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn snapshot(
    locks: &[Box<dyn leasehold::Lock>],
) -> leasehold::Result<Vec<leasehold::LockInfo>> {
    let mut infos = Vec::with_capacity(locks.len());
    for lock in locks {
        infos.push(lock.inspect().await?);
    }
    Ok(infos)
}

fn table(infos: &[leasehold::LockInfo], master: Option<&str>) -> Vec<String> {
    // In terminal columns: a name's characters may take two each.
    let width = infos
        .iter()
        .map(|info| info.name.width())
        .max()
        .unwrap_or(0)
        .max(4);
    let mut lines = vec![format!(
        "{}  {:5}  {:>18}  {:>10}  {:>7}  server",
        screen::pad("lock", width),
        "state",
        "last fence",
        "lease left",
        "waiting"
    )];
    for info in infos {
        let fence = info
            .last_fence
            .map_or_else(|| "none yet".to_owned(), |f| f.to_string());
        let left = match (info.held, state::lease_left(info)) {
            (false, _) => "-".to_owned(),
            (true, Some(left)) => seconds(left),
            (true, None) => "no expiry".to_owned(),
        };
        lines.push(format!(
            "{}  {:5}  {fence:>18}  {left:>10}  {:>7}  {}",
            screen::pad(&info.name, width),
            if info.held { "held" } else { "free" },
            info.waiting_clients,
            server_label(info, master)
        ));
    }
    lines
}

fn describe(info: &leasehold::LockInfo) -> String {
    let fence = info
        .last_fence
        .map_or_else(|| "no fence yet".to_owned(), |f| format!("last fence {f}"));
    let state = match (info.held, state::lease_left(info)) {
        (false, _) => "free".to_owned(),
        (true, Some(left)) => format!("held, {} of lease left", seconds(left)),
        (true, None) => "held, with no expiry".to_owned(),
    };
    format!(
        "{state}, {fence}, {}",
        plural::count(info.waiting_clients, "waiter", "waiters")
    )
}

/// What a lock's watch task tells the printer.
enum Heard {
    Ended(String, Box<leasehold::LockEvent>),
    Free(String),
    /// Redis does not answer the watch of the lock: the line to say, the
    /// fault, and whether Redis ever answered this watch.
    Down {
        name: String,
        line: String,
        reason: String,
        reached: bool,
    },
    /// Redis answers again.
    Up(String, String),
}

/// `watch --until-free`: each lock is watched by a task of its own, which
/// reports every lease it sees end and is done once it sees the lock free.
async fn until_free(conn: &Connection, args: WatchArgs) -> anyhow::Result<ExitCode> {
    if conn.redlock_given() {
        return Err(Fail {
            code: exit::USAGE,
            message: "watch --until-free watches one deployment, not Redlock masters: \
                      give --url instead of --redlock"
                .to_owned(),
        }
        .into());
    }
    let client = conn.client(leasehold::DEFAULT_LEASE, false, None)?;
    let started = Instant::now();
    let deadline = args
        .wait
        .as_ref()
        .map(|wait| tokio::time::Instant::now() + wait.get());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    let names: std::collections::BTreeSet<&String> = args.names.iter().collect();
    for name in &names {
        let watch = client.mutex(name)?.watch()?;
        let outages = Outages::new(conn.connect_timeout());
        tasks.push(tokio::spawn(watch_one(
            watch,
            outages,
            tx.clone(),
            stop_rx.clone(),
        )));
    }
    drop(tx);
    let mut stop = Stop::listen()?;
    let mut freed = std::collections::HashSet::new();
    // By lock, while Redis does not answer its watch: the fault, and
    // whether Redis ever answered it.
    let mut down: std::collections::HashMap<String, (String, bool)> =
        std::collections::HashMap::new();
    let outcome: anyhow::Result<ExitCode> = loop {
        let heard = tokio::select! {
            signal = stop.recv() => break Ok(ExitCode::from(signal_code(signal))),
            () = sleep_until(deadline) => {
                let waited = seconds(args.wait.as_ref().map_or(Duration::ZERO, |w| w.get()));
                let busy: Vec<&String> = args
                    .names
                    .iter()
                    .filter(|name| !freed.contains(*name))
                    .collect();
                // As a lock's wait: one that never reached Redis ends with
                // why, not as busy.
                if let Some((reason, _)) = busy
                    .iter()
                    .find_map(|name| down.get(*name).filter(|(_, reached)| !reached))
                {
                    break Err(Fail {
                        code: exit::UNAVAILABLE,
                        message: format!("no answer from redis within {waited}: {reason}"),
                    }
                    .into());
                }
                let busy: Vec<String> = busy
                    .iter()
                    .map(|name| match down.get(*name) {
                        Some(_) => format!("{name:?} (redis not answering)"),
                        None => format!("{name:?}"),
                    })
                    .collect();
                break Err(Fail {
                    code: exit::BUSY,
                    message: format!(
                        "not every lock was free within {waited}: {}",
                        busy.join(", ")
                    ),
                }
                .into());
            }
            heard = rx.recv() => heard,
        };
        match heard {
            Some(Ok(Heard::Ended(name, event))) => {
                if args.json {
                    println!("{}", event_json(&name, &event));
                } else {
                    println!(
                        "{:>6.1}s  {name:?}: {}",
                        started.elapsed().as_secs_f64(),
                        describe_event(&event)
                    );
                }
            }
            Some(Ok(Heard::Free(name))) => {
                if args.json {
                    println!("{}", json!({"name": name, "free": true}));
                } else {
                    println!("{:>6.1}s  {name:?}: free", started.elapsed().as_secs_f64());
                }
                freed.insert(name);
                if freed.len() == names.len() {
                    break Ok(ExitCode::SUCCESS);
                }
            }
            Some(Ok(Heard::Down {
                name,
                line,
                reason,
                reached,
            })) => {
                eprintln!("leasehold: lock {name:?}: {line}");
                down.insert(name, (reason, reached));
            }
            Some(Ok(Heard::Up(name, said))) => {
                eprintln!("leasehold: lock {name:?}: {said}");
                down.remove(&name);
            }
            Some(Err(error)) => break Err(error),
            None => break Ok(ExitCode::SUCCESS),
        }
    };
    // Each task unregisters its watcher before it ends.
    let _ = stop_tx.send(true);
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
    }
    outcome
}

fn signal_code(signal: libc::c_int) -> u8 {
    u8::try_from(128 + signal).unwrap_or(exit::FAILURE)
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Watches one lock until it is seen free (or told to stop), then ends
/// the watch. A look that fails on a passing fault (Redis restarting, a
/// failover) is tried again, as waits ride out outages: until the end of
/// the wait, or, if Redis never answered this watch, the connect timeout.
async fn watch_one(
    mut watch: leasehold::LockWatch,
    mut outages: Outages,
    tx: tokio::sync::mpsc::UnboundedSender<anyhow::Result<Heard>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let name = watch.name().to_owned();
    loop {
        // At the start, after each end, and after a failed look: is it
        // free now, or taken by the next holder?
        let holders = tokio::select! {
            _ = stop.changed() => break,
            holders = watch.holders() => holders,
        };
        let result = match holders {
            Ok(holders) => {
                if let Some(said) = outages.answered() {
                    let _ = tx.send(Ok(Heard::Up(name.clone(), said)));
                }
                if holders.is_empty() {
                    // The look that found it free may have read ends too.
                    while let Some(event) = watch.try_next().await {
                        let _ = tx.send(Ok(Heard::Ended(name.clone(), Box::new(event))));
                    }
                    let _ = tx.send(Ok(Heard::Free(name.clone())));
                    break;
                }
                tokio::select! {
                    _ = stop.changed() => break,
                    event = watch.next() => event,
                }
            }
            Err(error) => Err(error),
        };
        match result {
            Ok(event) => {
                let _ = tx.send(Ok(Heard::Ended(name.clone(), Box::new(event))));
            }
            Err(error) => match outages.failed(error) {
                Ok(said) => {
                    if let Some(line) = said {
                        let _ = tx.send(Ok(Heard::Down {
                            name: name.clone(),
                            line,
                            reason: outages.reason().unwrap_or_default().to_owned(),
                            reached: outages.reached(),
                        }));
                    }
                    tokio::select! {
                        _ = stop.changed() => break,
                        () = tokio::time::sleep(outages.pause()) => {}
                    }
                }
                Err(error) => {
                    let _ = tx.send(Err(error));
                    break;
                }
            },
        }
    }
    let _ = watch.close().await;
}

fn describe_event(event: &leasehold::LockEvent) -> String {
    let how = match event.ended {
        leasehold::LeaseEnd::Released => "released",
        leasehold::LeaseEnd::ForceReleased => "force-released",
        leasehold::LeaseEnd::Expired => "expired",
        leasehold::LeaseEnd::Vanished => "gone before its lease ran out (lost by the server)",
        leasehold::LeaseEnd::Missed => "taken and ended between two looks",
        _ => "ended",
    };
    let mut line = format!("lease with fence {} {how}", event.fence);
    if let Some(holder) = &event.holder {
        line.push_str(&format!(" (held by {})", holder.describe()));
    }
    if let Some(next) = &event.taken_by {
        let fence = next
            .fence
            .map_or_else(String::new, |f| format!(", fence {f}"));
        line.push_str(&format!("; now held by {}{fence}", next.describe()));
    }
    line
}

fn end_name(ended: leasehold::LeaseEnd) -> &'static str {
    match ended {
        leasehold::LeaseEnd::Released => "released",
        leasehold::LeaseEnd::ForceReleased => "force_released",
        leasehold::LeaseEnd::Expired => "expired",
        leasehold::LeaseEnd::Vanished => "vanished",
        leasehold::LeaseEnd::Missed => "missed",
        _ => "ended",
    }
}

fn event_json(name: &str, event: &leasehold::LockEvent) -> serde_json::Value {
    let who = |holder: &leasehold::Holder| {
        json!({
            "pid": holder.pid,
            "host": holder.host,
            "client_name": holder.client_name,
            "fence": holder.fence,
        })
    };
    json!({
        "name": name,
        "ended": end_name(event.ended),
        "fence": event.fence,
        "holder": event.holder.as_ref().map(who),
        "taken_by": event.taken_by.as_ref().map(who),
    })
}
