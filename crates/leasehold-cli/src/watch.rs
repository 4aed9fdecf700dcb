//! `leasehold watch NAME...`: the state of named locks, live.
//!
//! A release publishes only to the one waiter it wakes, so there is no
//! lock-wide channel to listen on, and keyspace notifications would need a
//! `CONFIG SET` on the user's Redis. The view is refreshed every 250 ms
//! instead: one read-only script per lock per refresh.
//!
//! Each lock is shown with the server that keeps it: on a Redis Cluster,
//! the master of its hash slot; through Sentinel, the master the sentinels
//! name (a failover shows as a change of server).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::cli::{Connection, WatchArgs};
use crate::plural;
use crate::screen::{self, LiveView};
use crate::scripting::{info_json, seconds, server_label};
use crate::signals::Stop;
use crate::state;

const REFRESH: Duration = Duration::from_millis(250);

/// What a line off a terminal says of a lock: held, last fence, waiters,
/// server. A new line is printed when it changes.
type Seen = (bool, Option<u64>, u64, String);

pub(crate) async fn watch(conn: &Connection, args: WatchArgs) -> anyhow::Result<ExitCode> {
    // On a Redlock, each lock as a majority of its masters sees it.
    let locks: Vec<Box<dyn leasehold::Lock>> =
        match conn.redlock(leasehold::DEFAULT_LEASE, false, None)? {
            Some(redlock) => args
                .names
                .iter()
                .map(|name| Ok(Box::new(redlock.mutex(name)?) as Box<dyn leasehold::Lock>))
                .collect::<leasehold::Result<Vec<_>>>()?,
            None => {
                let client = conn.client(leasehold::DEFAULT_LEASE, false, None)?;
                args.names
                    .iter()
                    .map(|name| Ok(Box::new(client.mutex(name)?) as Box<dyn leasehold::Lock>))
                    .collect::<leasehold::Result<Vec<_>>>()?
            }
        };
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
    loop {
        tokio::select! {
            _ = stop.recv() => break,
            _ = tick.tick() => {}
        }
        let infos = tokio::select! {
            _ = stop.recv() => break,
            infos = snapshot(&locks) => infos?,
        };
        match &mut view {
            Some(view) => {
                let mut lines = table(&infos, master);
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
    let width = infos
        .iter()
        .map(|info| info.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let mut lines = vec![format!(
        "{:width$}  {:5}  {:>18}  {:>10}  {:>7}  server",
        "lock", "state", "last fence", "lease left", "waiting"
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
            "{:width$}  {:5}  {fence:>18}  {left:>10}  {:>7}  {}",
            info.name,
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
