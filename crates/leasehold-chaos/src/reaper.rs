//! A helper process that kills the cluster's servers if the harness dies
//! without stopping them (SIGKILL). The harness starts the workers and a
//! single redis-server tied to its own life (`PR_SET_PDEATHSIG`); a
//! cluster's nodes are started by the test kit, which does not tie them.
//! So the harness hands every node's pid to this process over a pipe; when
//! the pipe closes, however the harness ended, it kills those of them that
//! still run, and exits. A pid is only killed if it still names the process
//! it was handed for (the same start time), never one that reused it.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, BufRead, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

use anyhow::{Context, Result};

/// The harness's end: the reaper process and the pipe to it.
pub(crate) struct Reaper {
    child: Child,
    pipe: Option<ChildStdin>,
}

impl Reaper {
    /// Starts `exe reaper`.
    pub(crate) fn start(exe: &Path) -> Result<Reaper> {
        let mut cmd = Command::new(exe);
        cmd.arg("reaper")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // SAFETY: setpgid is async-signal-safe; nothing else runs between
        // fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                // A Ctrl-C at the terminal reaches the harness alone, which
                // stops the servers itself.
                if libc::setpgid(0, 0) == -1 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().context("cannot start the reaper")?;
        let pipe = child.stdin.take();
        Ok(Reaper { child, pipe })
    }

    /// Has the reaper kill `pid` if the harness dies while it runs.
    pub(crate) fn watch(&mut self, pid: u32) -> Result<()> {
        let pipe = self.pipe.as_mut().context("the reaper is gone")?;
        writeln!(pipe, "{pid}").context("cannot reach the reaper")
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        drop(self.pipe.take());
        let _ = self.child.wait();
    }
}

/// When process `pid` started, in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`); `None` when there is no such process.
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid …: comm may hold spaces and parentheses.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    rest.split(' ').nth(19)?.parse().ok()
}

/// The reaper process: reads pids from standard input until it closes,
/// then kills those that are still the processes they were.
pub(crate) fn run() -> Result<()> {
    let mut watched = BTreeMap::new();
    for line in io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if let Ok(pid) = line.trim().parse::<u32>() {
            if let Some(started) = start_time(pid) {
                watched.insert(pid, started);
            }
        }
    }
    for (pid, started) in watched {
        if start_time(pid) == Some(started) {
            if let Ok(pid) = libc::pid_t::try_from(pid) {
                // SAFETY: a plain kill(2) of a process we were handed, that
                // has the start time it had then.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_known_by_its_start_time() {
        let me = std::process::id();
        let started = start_time(me).unwrap();
        assert_eq!(start_time(me), Some(started));
        assert_eq!(start_time(u32::MAX), None);
    }
}
