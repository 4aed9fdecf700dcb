//! The CPUs of a run, as BENCH.md asks: on a machine of two CPUs or more,
//! every redis-server the bench starts runs on CPU 0 and the bench itself
//! (its client side: every worker thread) on CPU 1, so that a round trip
//! costs the same from one run to the next and a CPU-bound workload shows
//! whose CPU binds it. `--no-pin` leaves both to the kernel. The figures
//! are printed with what `/proc` says each side may run on.

use std::sync::OnceLock;

use leasehold_testkit::{cpus_allowed, pin_current_thread_to, pin_servers_to};

use super::Result;

/// The CPU every redis-server is bound to.
const SERVER_CPU: usize = 0;
/// The CPU the bench is bound to.
const CLIENT_CPU: usize = 1;

/// Why the run is not pinned, once [`pin`] has run; `None` when it is.
static UNPINNED: OnceLock<Option<String>> = OnceLock::new();

/// Pins this process and the servers it will start, unless `no_pin` or
/// the machine has one CPU. Call it first, before any thread or server
/// starts: threads inherit the CPUs of the thread that starts them.
pub(crate) fn pin(no_pin: bool) -> Result<()> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let unpinned = if no_pin {
        Some("--no-pin".to_owned())
    } else if cpus < 2 {
        Some(format!("{cpus} CPU available"))
    } else {
        pin_servers_to(&[SERVER_CPU])
            .map_err(|e| format!("cannot pin the servers to CPU {SERVER_CPU}: {e}"))?;
        pin_current_thread_to(&[CLIENT_CPU])
            .map_err(|e| format!("cannot pin the bench to CPU {CLIENT_CPU}: {e}"))?;
        None
    };
    let _ = UNPINNED.set(unpinned);
    Ok(())
}

/// One line for the figures: where this process and the servers of
/// `server_pids` may run, as `/proc` says, and whether that is the pinning
/// BENCH.md asks for.
pub(crate) fn describe(server_pids: &[Option<u32>]) -> String {
    let own = cpus_allowed(std::process::id()).unwrap_or_else(|e| format!("unknown ({e})"));
    let mut servers: Vec<String> = server_pids
        .iter()
        .map(|pid| match pid {
            Some(pid) => cpus_allowed(*pid).unwrap_or_else(|e| format!("unknown ({e})")),
            None => "not running".to_owned(),
        })
        .collect();
    servers.sort();
    servers.dedup();
    let servers = servers.join(" / ");
    let verdict = match UNPINNED.get() {
        Some(None) if own == CLIENT_CPU.to_string() && servers == SERVER_CPU.to_string() => {
            "pinned".to_owned()
        }
        Some(None) => "NOT pinned as asked: figures move by a third between runs".to_owned(),
        Some(Some(why)) => format!("unpinned ({why}): figures move by a third between runs"),
        None => "unpinned: figures move by a third between runs".to_owned(),
    };
    format!("CPUs: bench on {own}, redis-server on {servers}: {verdict}")
}

/// Whether the run is pinned (for the JSON).
pub(crate) fn pinned() -> bool {
    matches!(UNPINNED.get(), Some(None))
}
