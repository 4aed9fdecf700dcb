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
use crate::kind::{self, Kind, Locker};
use crate::scripting::take;
use crate::{terminal, warden};

/// How long a child has between SIGTERM and SIGKILL after its lease is lost.
const TERM_GRACE: Duration = Duration::from_secs(10);

pub(crate) async fn run(conn: &Connection, args: RunArgs) -> anyhow::Result<ExitCode> {
    if let (Some(hold), Some(max)) = (&args.hold_at_least, &args.max_hold) {
        if hold.get() > max.get() {
            return Err(Fail {
                code: exit::USAGE,
                message: format!(
                    "--hold-at-least {hold} is longer than --max-hold {max}: the lock would be \
                     kept past its cap; make the hold shorter or the cap longer"
                ),
            }
            .into());
        }
    }
    let grace = args.take.restart_grace.as_ref().map(|g| g.get());
    let kind = Kind::from(&args.take.kind);
    let locker = conn.locker(args.lease.get(), true, grace, |builder| {
        builder
            .replica_ack(args.take.replicas.ack())
            .name(kind::client_name())
    })?;
    let result = run_locked(&locker, &args, kind).await;
    // Releases from cancelled acquisitions must finish before the runtime stops.
    locker.client.flush().await;
    result
}

async fn run_locked(locker: &Locker, args: &RunArgs, kind: Kind) -> anyhow::Result<ExitCode> {
    let holding = kind::Holding {
        at_least: args.hold_at_least.as_ref().map(|hold| hold.get()),
        at_most: args.max_hold.as_ref().map(|max| max.get()),
        replicas_given: args.take.replicas.given(),
    };
    let locks = kind::locks(locker, &args.names, kind, holding)?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;

    // A signal while waiting ends the wait: the acquire is cancel safe.
    let guard = tokio::select! {
        guard = take(&locks, &args.wait, &args.take) => guard?,
        _ = interrupt.recv() => return Err(wait_ended(&args.names, libc::SIGINT, "SIGINT").into()),
        _ = terminate.recv() => return Err(wait_ended(&args.names, libc::SIGTERM, "SIGTERM").into()),
        _ = hangup.recv() => return Err(wait_ended(&args.names, libc::SIGHUP, "SIGHUP").into()),
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
    // The wait, the warden and a stop may have taken the lease's last moments.
    if let Err(fail) = check_lease_left(&guard) {
        // Nothing ran: the release's outcome changes nothing.
        let _ = guard.release().await;
        return Err(fail.into());
    }
    let spawned = spawn(args, &guard.fences(), foreground, handover.as_ref());
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
                on_lost(args, group, guard.loss_reason());
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

    let lost_after = guard.is_lost();
    let fences = guard.fences();
    // Of several, the one whose lease was lost.
    let lost_name = guard.loss_reason().map(|loss| loss.name);
    let released = Released::from(guard.release().await);
    let name = lost_name.as_deref().unwrap_or(first_name(args));
    match ending(name, args.on_lost, lost, lost_after, released) {
        Ending::Code(warning) => {
            let code = status_code(status);
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "name": first_name(args),
                        "fence": fences.first(),
                        "names": args.names,
                        "fences": fences,
                        "exit": code,
                        "lease_held": warning.is_none() && !lost,
                    })
                );
            }
            if let Some(warning) = warning {
                eprintln!("leasehold: warning: {warning}");
            }
            Ok(ExitCode::from(code))
        }
        Ending::Fail(message) => Err(Fail {
            code: exit::LOST,
            message,
        }
        .into()),
    }
}

/// The first name given: the one `LEASEHOLD_NAME` and `--json`'s `name` give.
fn first_name(args: &RunArgs) -> &str {
    args.names.first().map_or("", String::as_str)
}

/// `Err` (exit 76) when a lease has no time left to start the command under.
fn check_lease_left(guard: &leasehold::MultiGuard) -> Result<(), Fail> {
    let out = guard
        .guards()
        .iter()
        .find(|lease| lease.is_lost() || lease.valid_for().is_zero());
    if let Some(name) = out.map(leasehold::LeaseGuard::name) {
        return Err(Fail {
            code: exit::LOST,
            message: format!(
                "the lease on {name:?} ran out before the command could start: nothing was run"
            ),
        });
    }
    Ok(())
}

/// What the release after the command said.
#[derive(Debug)]
enum Released {
    /// The lease held to the end.
    Done,
    /// The lease was lost before the release, for this reason.
    NotHeld(String),
    /// No answer (or an odd one): whether the lease held is unknown.
    Unknown(String),
}

impl From<leasehold::Result<()>> for Released {
    fn from(result: leasehold::Result<()>) -> Self {
        match result {
            Ok(()) => Released::Done,
            Err(err) if err.is_not_held() => Released::NotHeld(crate::exit::said(&err)),
            Err(err) => Released::Unknown(crate::exit::said(&err)),
        }
    }
}

/// How a run ends once the command has exited.
#[derive(Debug, PartialEq, Eq)]
enum Ending {
    /// The command's own exit code, after this warning if any.
    Code(Option<String>),
    /// Exit 76 with this message: the command's work may not have been
    /// protected.
    Fail(String),
}

/// `lost_seen`: the loss was noticed, and reported, while the command ran;
/// `lost_after`: the guard was lost by the time the command exited.
fn ending(
    name: &str,
    on_lost: OnLost,
    lost_seen: bool,
    lost_after: bool,
    released: Released,
) -> Ending {
    let ignore = on_lost == OnLost::Ignore;
    let lost_message = || match &released {
        // The library's message says why.
        Released::NotHeld(why) => format!("{why}; the command's work was not protected"),
        _ => {
            format!("lease on {name:?} was lost while the command ran: its work was not protected")
        }
    };
    if lost_seen || lost_after || matches!(released, Released::NotHeld(_)) {
        return match (ignore, lost_seen) {
            (false, _) => Ending::Fail(lost_message()),
            // `on_lost` has warned already.
            (true, true) => Ending::Code(None),
            (true, false) => Ending::Code(Some(lost_message())),
        };
    }
    match released {
        Released::Unknown(message) if ignore => Ending::Code(Some(message)),
        Released::Unknown(message) => Ending::Fail(message),
        Released::Done | Released::NotHeld(_) => Ending::Code(None),
    }
}

fn on_lost(args: &RunArgs, group: Option<i32>, loss: Option<leasehold::MultiLoss>) {
    // The guard has its loss once `lost()` resolves.
    let (name, why) = match &loss {
        Some(loss) => (loss.name.as_str(), format!(" ({})", loss.reason)),
        None => (first_name(args), String::new()),
    };
    let lost = format!("lease on {name:?} lost while the command ran{why}");
    match args.on_lost {
        OnLost::Term => {
            eprintln!(
                "leasehold: {lost}: sending SIGTERM, SIGKILL in {}s",
                TERM_GRACE.as_secs()
            );
            signal_group(group, libc::SIGTERM);
            // A stopped child must run to handle its SIGTERM.
            signal_group(group, libc::SIGCONT);
        }
        OnLost::Kill => {
            eprintln!("leasehold: {lost}: sending SIGKILL");
            signal_group(group, libc::SIGKILL);
        }
        OnLost::Ignore => {
            eprintln!("leasehold: warning: {lost}; the command goes on unprotected");
        }
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
fn suspend(job: &Job<'_>, guard: &leasehold::MultiGuard) {
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
/// it before it execs. `fences` are the names', in the order given.
fn spawn(
    args: &RunArgs,
    fences: &[u64],
    foreground: bool,
    warden: Option<&warden::Handover>,
) -> io::Result<tokio::process::Child> {
    let mut command = std::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]).process_group(0);
    for (i, (name, fence)) in args.names.iter().zip(fences).enumerate() {
        if i == 0 {
            command
                .env("LEASEHOLD_FENCE", fence.to_string())
                .env("LEASEHOLD_NAME", name);
        }
        command
            .env(format!("LEASEHOLD_FENCE_{}", i + 1), fence.to_string())
            .env(format!("LEASEHOLD_NAME_{}", i + 1), name);
    }
    let runner = std::process::id();
    let handover = warden.map(warden::Handover::raw);
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (prctl, getppid, raise, signal,
    // tcsetpgrp, getpid, and those of `warden::join`).
    unsafe {
        command.pre_exec(move || {
            die_with(runner)?;
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

/// In a forked child before exec: SIGKILL it when `parent` dies, and at once
/// if `parent` died already. Async-signal-safe (prctl, getppid, raise).
pub(crate) fn die_with(parent: u32) -> io::Result<()> {
    // SAFETY: prctl, getppid and raise have no memory-safety preconditions.
    unsafe {
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
        // The parent may have died before prctl took effect.
        if u32::try_from(libc::getppid()).ok() != Some(parent) {
            libc::raise(libc::SIGKILL);
        }
    }
    Ok(())
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

/// A signal ended the wait for the locks: exit 128 + its number, as shells do.
fn wait_ended(names: &[String], signal: libc::c_int, signal_name: &str) -> Fail {
    let locks = match names {
        [name] => format!("lock {name:?}"),
        names => format!(
            "locks {}",
            names
                .iter()
                .map(|name| format!("{name:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Fail {
        code: u8::try_from(128 + signal).unwrap_or(exit::FAILURE),
        message: format!("{signal_name} ended the wait for {locks}: nothing was run"),
    }
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

#[cfg(test)]
mod tests {
    use leasehold_testkit::RedisServer;

    use super::*;

    fn not_held() -> Released {
        Released::NotHeld("lease on lock \"job\" (fence 7) was lost".to_owned())
    }

    fn unknown() -> Released {
        Released::Unknown("release of lock \"job\" (fence 7) got no answer".to_owned())
    }

    #[test]
    fn an_unanswered_release_fails_the_run_unless_losses_are_ignored() {
        for on_lost in [OnLost::Term, OnLost::Kill] {
            assert_eq!(
                ending("job", on_lost, false, false, unknown()),
                Ending::Fail("release of lock \"job\" (fence 7) got no answer".to_owned())
            );
        }
        assert_eq!(
            ending("job", OnLost::Ignore, false, false, unknown()),
            Ending::Code(Some(
                "release of lock \"job\" (fence 7) got no answer".to_owned()
            ))
        );
    }

    #[test]
    fn a_lost_lease_fails_the_run_unless_ignored() {
        let cases = [
            (true, true, not_held()),
            (false, true, not_held()),
            (false, false, not_held()),
            (true, true, unknown()),
            (false, true, Released::Done),
        ];
        for (seen, after, released) in cases {
            let label = format!("{seen} {after} {released:?}");
            let Ending::Fail(message) = ending("job", OnLost::Term, seen, after, released) else {
                panic!("{label}: the run did not fail");
            };
            assert!(message.contains("was lost"), "{label}: {message}");
        }
    }

    #[test]
    fn an_ignored_loss_warns_once() {
        // Seen while the command ran: `on_lost` has warned already.
        assert_eq!(
            ending("job", OnLost::Ignore, true, true, not_held()),
            Ending::Code(None)
        );
        for (after, released) in [(true, not_held()), (false, not_held())] {
            let Ending::Code(Some(warning)) = ending("job", OnLost::Ignore, false, after, released)
            else {
                panic!("no warning");
            };
            assert!(warning.contains("was lost"), "{warning}");
        }
    }

    #[test]
    fn a_lease_that_held_keeps_the_commands_code() {
        for on_lost in [OnLost::Term, OnLost::Kill, OnLost::Ignore] {
            assert_eq!(
                ending("job", on_lost, false, false, Released::Done),
                Ending::Code(None)
            );
        }
    }

    fn multi(client: &leasehold::Client, name: &str) -> leasehold::MultiLock {
        leasehold::MultiLock::builder()
            .lock(client.mutex(name).unwrap())
            .build()
            .unwrap()
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn a_lease_with_time_left_lets_the_command_start() {
        let server = RedisServer::start();
        block_on(async {
            let client = leasehold::Client::builder(server.url()).build().unwrap();
            let guard = multi(&client, "job").acquire().await.unwrap();
            assert!(check_lease_left(&guard).is_ok());
            guard.release().await.unwrap();
        });
    }

    #[test]
    fn a_lease_run_out_before_the_start_starts_nothing() {
        let server = RedisServer::start();
        block_on(async {
            let client = leasehold::Client::builder(server.url())
                .lease(Duration::from_millis(20))
                .watchdog(false)
                .build()
                .unwrap();
            let guard = multi(&client, "job").acquire().await.unwrap();
            for _ in 0..1500 {
                if guard.valid_for().is_zero() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let fail = check_lease_left(&guard).expect_err("the command may start");
            assert_eq!(fail.code, exit::LOST);
            assert!(fail.message.contains("nothing was run"), "{}", fail.message);
        });
    }

    #[test]
    fn a_lease_lost_before_the_start_starts_nothing() {
        let server = RedisServer::start();
        block_on(async {
            let client = leasehold::Client::builder(server.url())
                .lease(Duration::from_millis(300))
                .build()
                .unwrap();
            let mutex = client.mutex("job").unwrap();
            let guard = multi(&client, "job").acquire().await.unwrap();
            assert!(mutex.force_release().await.unwrap());
            // The next renewal finds the lock gone.
            tokio::time::timeout(Duration::from_secs(30), guard.lost())
                .await
                .expect("the loss was never noticed");
            let fail = check_lease_left(&guard).expect_err("the command may start");
            assert_eq!(fail.code, exit::LOST);
            client.flush().await;
        });
    }
}
