//! The status line on stderr while `run` and `acquire` wait for a busy lock:
//! how long this wait has lasted, and the lock's state as Redis sees it.
//!
//! At a terminal it is one line, redrawn in place and erased when the wait
//! ends; otherwise (a log, a pipe) a plain line every few seconds.

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use tokio::time::Instant;

use crate::duration::{human, seconds, Dur};
use crate::kind::Lock;

/// A wait shorter than this shows nothing.
const FIRST_AFTER: Duration = Duration::from_secs(1);
/// How often the line is redrawn at a terminal.
const REDRAW_EVERY: Duration = Duration::from_secs(1);
/// How often a plain line is printed elsewhere.
const PRINT_EVERY: Duration = Duration::from_secs(5);

/// Runs `wait` (the acquisition) and, unless `quiet`, shows the status line
/// while it lasts more than a second.
pub(crate) async fn while_waiting<F: Future>(
    lock: &Lock,
    limit: Option<&Dur>,
    quiet: bool,
    wait: F,
) -> F::Output {
    if quiet {
        return wait.await;
    }
    tokio::pin!(wait);
    // Erased when dropped: when the wait ends, and when it is cancelled.
    let mut line = Line::new(std::io::stderr().is_terminal());
    let started = Instant::now();
    let shown = tokio::select! {
        out = &mut wait => Some(out),
        () = show(lock, limit, started, &mut line) => None,
    };
    drop(line);
    match shown {
        Some(out) => out,
        // `show` ends only if stderr is gone; the wait goes on silently.
        None => wait.await,
    }
}

async fn show(lock: &Lock, limit: Option<&Dur>, started: Instant, line: &mut Line) {
    tokio::time::sleep_until(started + FIRST_AFTER).await;
    loop {
        let state = match lock.inspect().await {
            Ok(info) => describe(&info),
            Err(err) => format!("its state is unknown: {}", crate::exit::said(&err)),
        };
        let waited = human(Duration::from_secs(started.elapsed().as_secs()));
        let waited = match limit {
            Some(limit) => format!("{waited} of {limit}"),
            None => waited,
        };
        let text = format!("waiting for lock {:?} ({waited}): {state}", lock.name());
        if line.show(&text).is_err() {
            return;
        }
        tokio::time::sleep(line.every()).await;
    }
}

/// The lock's state, in parts joined by commas: first what holds this
/// wait back on the client's side (a grace, replicas that do not
/// acknowledge), then what Redis says of the lock.
fn describe(info: &leasehold::LockInfo) -> String {
    let mut parts = Vec::new();
    if let Some(left) = info.grace_left {
        parts.push(format!(
            "redis at {} grants no lock for {} yet: it restarted, or took over from another \
             master, less than --restart-grace ago",
            info.server,
            seconds(left)
        ));
    }
    let shortfall = info
        .replicas
        .as_ref()
        .and_then(|r| r.last_shortfall.map(|short| (short, r)));
    if let Some(((acked, asked), replicas)) = shortfall {
        // Those cut off from the master say whether they are waited for.
        let named: Vec<String> = replicas
            .online
            .iter()
            .cloned()
            .chain(replicas.cut_off.iter().map(ToString::to_string))
            .collect();
        let listed = if named.is_empty() {
            String::new()
        } else {
            format!(" ({})", named.join(", "))
        };
        parts.push(format!(
            "the replicas do not acknowledge grants: {acked} of {asked}{listed} did in time, so \
             each grant is undone (exit 74 if they do not catch up)"
        ));
    }
    // This wait's own grant, still waiting for the replicas' acknowledgement
    // or being undone for want of it, is no holder to wait for.
    let replicated = info
        .replicas
        .as_ref()
        .is_some_and(|r| !r.online.is_empty() || r.last_shortfall.is_some());
    let holders: Vec<&leasehold::Holder> = info
        .holders
        .iter()
        .filter(|h| !(replicated && h.is_this_process()))
        .collect();
    if holders.len() < info.holders.len() && holders.is_empty() {
        parts.push("taken by this wait, not yet acknowledged by the replicas".to_owned());
    } else if !info.held {
        // Between a release and the next grant: the waiter is trying.
        if info.grace_left.is_none() && shortfall.is_none() {
            parts.push("free this moment".to_owned());
        } else {
            parts.push("free".to_owned());
        }
    } else {
        let by =
            |holder: &leasehold::Holder| match info.read_at.and_then(|now| holder.held_for(now)) {
                Some(held) => format!("{} for {}", holder.describe(), seconds(held)),
                None => holder.describe(),
            };
        parts.push(match holders.as_slice() {
            [] => "held".to_owned(),
            [one] => format!("held by {}", by(one)),
            [first, rest @ ..] => format!("held by {} and {} more", by(first), rest.len()),
        });
        parts.push(match crate::state::lease_left(info) {
            Some(left) => format!("{} of lease left", seconds(left)),
            None => "with no expiry (set by hand?)".to_owned(),
        });
    }
    if let Some(fence) = info.last_fence {
        parts.push(format!("last fence {fence}"));
    }
    parts.push(crate::plural::count(
        info.waiting_clients,
        "waiter",
        "waiters",
    ));
    parts.join(", ")
}

/// Where the status goes: a line redrawn in place at a terminal, plain
/// lines elsewhere. The terminal's line is erased on drop.
#[derive(Debug)]
struct Line {
    terminal: bool,
    drawn: bool,
}

impl Line {
    fn new(terminal: bool) -> Self {
        Line {
            terminal,
            drawn: false,
        }
    }

    fn every(&self) -> Duration {
        if self.terminal {
            REDRAW_EVERY
        } else {
            PRINT_EVERY
        }
    }

    fn show(&mut self, text: &str) -> std::io::Result<()> {
        let mut err = std::io::stderr().lock();
        if self.terminal {
            err.write_all(redrawn(text, crate::screen::width()).as_bytes())?;
            self.drawn = true;
        } else {
            writeln!(err, "leasehold: {text}")?;
        }
        err.flush()
    }
}

/// The status line redrawn in place of the last one at a terminal of
/// `columns`: carriage return and erase-line, and no more than fits on the
/// row (erase-line clears one row: a line that wrapped would leave its
/// first rows behind at every redraw).
fn redrawn(text: &str, columns: usize) -> String {
    let line = format!("leasehold: {text}");
    format!(
        "\r\x1b[2K{}",
        crate::screen::fit(&line, columns.saturating_sub(1))
    )
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redrawn_line_never_wraps() {
        let text = format!(
            "waiting for lock {:?} (3s): held by pid 1 on vm",
            "锁".repeat(30)
        );
        let line = redrawn(&text, 40);
        let shown = line.strip_prefix("\r\x1b[2K").unwrap();
        assert!(shown.starts_with("leasehold: waiting for lock"), "{line}");
        let columns: usize = shown.chars().map(|c| if c == '锁' { 2 } else { 1 }).sum();
        assert!(columns < 40, "{columns} columns: {shown}");
        assert_eq!(redrawn("short", 40), "\r\x1b[2Kleasehold: short");
    }

    #[test]
    fn describes_a_held_lock() {
        let server = leasehold_testkit::RedisServer::start();
        let info = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let client = leasehold::Client::builder(server.url())
                    .watchdog(false)
                    .name("nightly")
                    .build()
                    .unwrap();
                let mutex = client.mutex("job").unwrap();
                let guard = mutex.try_acquire().await.unwrap().unwrap();
                let info = mutex.inspect().await.unwrap();
                let _ = guard.detach();
                info
            });
        let text = describe(&info);
        let by = format!("held by pid {} on ", std::process::id());
        assert!(text.starts_with(&by), "{text}");
        // How long it has been held, by Redis's clock alone (however long
        // this test took to get here).
        let held_for = text
            .split("(nightly) for ")
            .nth(1)
            .and_then(|rest| rest.split(',').next());
        assert!(
            held_for
                .is_some_and(|d| d.ends_with('s') && d.starts_with(|c: char| c.is_ascii_digit())),
            "{text}"
        );
        assert!(text.contains("of lease left"), "{text}");
        assert!(text.contains("last fence "), "{text}");
        assert!(text.ends_with("0 waiters"), "{text}");
    }
}
