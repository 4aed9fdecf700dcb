//! `leasehold run`: `flock` for a fleet.
//!
//! The child leads a process group of its own and dies with the runner
//! (`PR_SET_PDEATHSIG`); a warden in that group (see [`warden`]) takes down
//! what the child started, so a runner killed with SIGKILL never leaves
//! anything writing without a lock. Whatever the child leaves behind in its
//! group is killed before the lock is released.

use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

use crate::cli::{Connection, OnLost, RunArgs};
use crate::exit::{self, Fail};
use crate::scripting::take;
use crate::{terminal, warden};

/// How long a child has between SIGTERM and SIGKILL after its lease is lost.
const TERM_GRACE: Duration = Duration::from_secs(10);

pub(crate) async fn run(conn: &Connection, args: RunArgs) -> anyhow::Result<ExitCode> {
    let client = conn.client(args.lease, true)?;
    let result = run_locked(&client, &args).await;
    // Releases from cancelled acquisitions must finish before the runtime stops.
    client.flush().await;
    result
}

async fn run_locked(client: &leasehold::Client, args: &RunArgs) -> anyhow::Result<ExitCode> {
    let mutex = client.mutex(&args.name)?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;

    // A signal while waiting ends the wait: the acquire is cancel safe.
    let guard = tokio::select! {
        guard = take(&mutex, &args.wait) => guard?,
        _ = interrupt.recv() => return Ok(signal_exit(libc::SIGINT)),
        _ = terminate.recv() => return Ok(signal_exit(libc::SIGTERM)),
        _ = hangup.recv() => return Ok(signal_exit(libc::SIGHUP)),
    };

    // Decided before the spawn: the child takes the terminal itself, before
    // exec, so that it never reads from it as a background job.
    let foreground = terminal::runner_is_foreground();
    // Registered only now: while the lock is awaited, Ctrl-Z stops the runner
    // as usual. Registered before the spawn, so that a SIGTSTP arriving as
    // the child starts is caught and stops both.
    let mut stop = signal(SignalKind::from_raw(libc::SIGTSTP))?;
    // Started before the command, which lets it into its group before it
    // execs: nothing the command starts can slip out first. Kept to the end.
    let (warden, handover) = match warden::start() {
        Ok((warden, handover)) => (Some(warden), Some(handover)),
        Err(err) => {
            warn_unguarded(&err.to_string());
            (None, None)
        }
    };
    let spawned = spawn(args, guard.fence(), foreground, handover.as_ref());
    if let Some(handover) = handover {
        if spawned.is_ok() && !handover.confirmed() {
            warn_unguarded("it did not answer");
        }
    }
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => {
            let code = if err.kind() == io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            };
            let released = guard.release().await;
            let mut message = format!("cannot run {:?}: {err}", args.command[0]);
            if let Err(release_err) = released {
                message.push_str(&format!("; and the lock release failed: {release_err}"));
            }
            return Err(Fail { code, message }.into());
        }
    };
    // The command leads its group.
    let group = child.id().and_then(|pid| i32::try_from(pid).ok());
    let job = Job {
        group,
        foreground,
        warden: warden.as_ref(),
        on_lost: args.on_lost,
    };
    let mut child_changed = signal(SignalKind::child())?;

    let mut lost = false;
    let kill_timer = tokio::time::sleep(TERM_GRACE);
    tokio::pin!(kill_timer);
    let mut kill_armed = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            () = guard.lost(), if !lost => {
                lost = true;
                on_lost(args, group);
                if args.on_lost == OnLost::Term {
                    kill_timer.as_mut().reset(tokio::time::Instant::now() + TERM_GRACE);
                    kill_armed = true;
                }
            }
            () = &mut kill_timer, if kill_armed => {
                kill_armed = false;
                signal_group(group, libc::SIGKILL);
            }
            _ = interrupt.recv() => signal_group(group, libc::SIGINT),
            _ = terminate.recv() => signal_group(group, libc::SIGTERM),
            _ = hangup.recv() => signal_group(group, libc::SIGHUP),
            _ = stop.recv() => suspend(&job, &guard),
            _ = child_changed.recv() => {
                // A job-control stop of the child (Ctrl-Z at its terminal, or a
                // read from the terminal while in the background) stops the
                // runner too, so the shell sees the job stopped.
                if terminal::interactive() && group.is_some_and(terminal::child_stopped) {
                    suspend(&job, &guard);
                }
            }
        }
    };
    // Nothing the command started may go on working once the lock is released.
    signal_group(group, libc::SIGKILL);
    if let (true, Some(group)) = (foreground, group) {
        terminal::take_back(group);
    }
    let status = status?;

    let lost_while_running = lost || guard.is_lost();
    let released = guard.release().await;
    let lost = lost_while_running || released.as_ref().is_err_and(|e| e.is_not_held());
    if let Err(err) = &released {
        if !err.is_not_held() {
            eprintln!(
                "leasehold: warning: could not release {:?}: {err}; it expires within {:?}",
                args.name, args.lease
            );
        }
    }
    if lost && args.on_lost == OnLost::Ignore {
        if !lost_while_running {
            eprintln!(
                "leasehold: warning: lease on {:?} was lost while the command ran: its work was \
                 not protected",
                args.name
            );
        }
    } else if lost {
        return Err(Fail {
            code: exit::LOST,
            message: format!(
                "lease on {:?} was lost while the command ran: its work was not protected",
                args.name
            ),
        }
        .into());
    }
    Ok(ExitCode::from(status_code(status)))
}

fn on_lost(args: &RunArgs, group: Option<i32>) {
    match args.on_lost {
        OnLost::Term => {
            eprintln!(
                "leasehold: lease on {:?} lost while the command ran: sending SIGTERM, SIGKILL \
                 in {}s",
                args.name,
                TERM_GRACE.as_secs()
            );
            signal_group(group, libc::SIGTERM);
            // A stopped child must run to handle its SIGTERM.
            signal_group(group, libc::SIGCONT);
        }
        OnLost::Kill => {
            eprintln!(
                "leasehold: lease on {:?} lost while the command ran: sending SIGKILL",
                args.name
            );
            signal_group(group, libc::SIGKILL);
        }
        OnLost::Ignore => eprintln!(
            "leasehold: warning: lease on {:?} lost; the command goes on unprotected",
            args.name
        ),
    }
}

/// The command's process group as the runner drives it.
struct Job<'a> {
    group: Option<i32>,
    foreground: bool,
    warden: Option<&'a warden::Warden>,
    on_lost: OnLost,
}

/// Stops the child's group and then the runner, as one job; on resume gives
/// the child back the terminal (if the job is in the foreground) and wakes it.
/// While stopped nothing renews the lease: a lease lost meanwhile is handled
/// before the child may run again, unless it is to be ignored.
fn suspend(job: &Job<'_>, guard: &leasehold::MutexGuard) {
    let Job {
        group, foreground, ..
    } = *job;
    signal_group(group, libc::SIGSTOP);
    // The warden stays awake, to act if the runner dies while stopped.
    if let Some(warden) = job.warden {
        warden.resume();
    }
    if let (true, Some(group)) = (foreground, group) {
        terminal::take_back(group);
    }
    terminal::stop_self();
    if guard.is_lost() && job.on_lost != OnLost::Ignore {
        return;
    }
    if let Some(group) = group {
        if foreground && terminal::runner_is_foreground() {
            terminal::hand_to(group);
        }
    }
    signal_group(group, libc::SIGCONT);
}

fn warn_unguarded(why: &str) {
    eprintln!(
        "leasehold: warning: no warden for the command ({why}): if this runner is killed, \
         what the command starts in the background keeps running"
    );
}

/// Starts the command in a new process group it leads, with the warden in
/// it before it execs.
fn spawn(
    args: &RunArgs,
    fence: u64,
    foreground: bool,
    warden: Option<&warden::Handover>,
) -> io::Result<tokio::process::Child> {
    let mut command = std::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("LEASEHOLD_FENCE", fence.to_string())
        .env("LEASEHOLD_NAME", &args.name)
        .process_group(0);
    let runner = std::process::id();
    let handover = warden.map(warden::Handover::raw);
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (prctl, getppid, raise, signal,
    // tcsetpgrp, getpid, and those of `warden::join`).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The runner may have died before prctl took effect.
            if u32::try_from(libc::getppid()).ok() != Some(runner) {
                libc::raise(libc::SIGKILL);
            }
            if let Some(handover) = handover {
                // Without an answer the command runs unguarded; the runner
                // warns.
                warden::join(handover);
            }
            if foreground {
                terminal::hand_to(libc::getpid());
            }
            Ok(())
        });
    }
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(true);
    command.spawn()
}

fn signal_group(group: Option<i32>, signal: libc::c_int) {
    if let Some(group) = group {
        // SAFETY: kill has no memory-safety preconditions; a group that is
        // already gone only yields ESRCH.
        unsafe {
            libc::kill(-group, signal);
        }
    }
}

fn signal_exit(signal: libc::c_int) -> ExitCode {
    ExitCode::from(u8::try_from(128 + signal).unwrap_or(exit::FAILURE))
}

/// The child's exit code, or 128 + the signal that killed it (as shells report).
fn status_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code).unwrap_or(exit::FAILURE);
    }
    status
        .signal()
        .and_then(|s| u8::try_from(128 + s).ok())
        .unwrap_or(exit::FAILURE)
}
