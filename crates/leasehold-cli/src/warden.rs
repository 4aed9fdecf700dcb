//! The warden: a small process in the command's process group that outlives
//! the runner by a moment, so that nothing the command started goes on
//! working after the runner is gone.
//!
//! `PR_SET_PDEATHSIG` takes down the command itself when the runner dies,
//! but not what the command started: `sh -c 'work & wait'` would leave
//! `work` running without the lock. So before the command starts, the runner
//! forks a warden. The command, between fork and exec, makes its own process
//! group, tells the warden to join it, and waits until the warden runs; only
//! then does it exec. The runner keeps the write end of a pipe whose read end
//! the warden blocks on: however the runner dies, SIGKILL included, the
//! kernel closes the write end, the read returns end-of-file, and the warden
//! SIGKILLs its group, itself included. As a member it also keeps the group's
//! ID from being reused while it waits.
//!
//! The warden blocks every signal it can (those sent to the command's group
//! are not for it), keeps no descriptor but the ones it needs, and runs as
//! `lh-warden` (the binary re-executed), so that neither `ps` nor
//! `pkill -f 'leasehold run'` takes it for the runner. When the runner ends
//! normally it kills the group itself, warden and all.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

/// The name the warden runs under.
const ARGV0: &CStr = c"lh-warden";
/// The whole environment of the warden; with `ARGV0` it marks the process.
const MARK: &CStr = c"LEASEHOLD_WARDEN=1";
/// How long the command waits for the warden before it runs without one.
const READY_WAIT: Duration = Duration::from_secs(5);
/// The warden says it runs by sending this byte, once to the command and
/// once to the runner.
const READY: u8 = b'W';
const READY_TWICE: [u8; 2] = [READY, READY];

/// This process was started as a warden: `main` hands over to [`main`].
pub(crate) fn is_warden() -> bool {
    let named = std::env::args_os()
        .next()
        .is_some_and(|arg| arg.as_bytes() == ARGV0.to_bytes());
    named && std::env::var_os("LEASEHOLD_WARDEN").is_some_and(|v| v == "1")
}

/// A warden, started or still waiting for the command's group; dropping it
/// (or the runner dying) sets it off.
#[derive(Debug)]
pub(crate) struct Warden {
    pid: libc::pid_t,
    _alive: OwnedFd,
}

impl Warden {
    /// Lets the warden run on after its group was stopped (Ctrl-Z): a
    /// stopped warden could not act if the runner died meanwhile.
    pub(crate) fn resume(&self) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(self.pid, libc::SIGCONT);
        }
    }
}

/// The command's end of the hand-over, used between fork and exec by
/// [`join`]; dropped by the runner once the command is spawned.
#[derive(Debug)]
pub(crate) struct Handover(OwnedFd);

impl Handover {
    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// After the spawn: the warden joined the command's group and runs. It
    /// sends its ready byte twice, one for the command and one for this.
    pub(crate) fn confirmed(self) -> bool {
        let mut byte = 0u8;
        // SAFETY: recv writes at most one byte into `byte`.
        let n = unsafe { libc::recv(self.raw(), (&raw mut byte).cast(), 1, libc::MSG_DONTWAIT) };
        n == 1 && byte == READY
    }
}

/// Forks a warden that waits for the command to name its group.
pub(crate) fn start() -> io::Result<(Warden, Handover)> {
    // Everything the child uses is made before the fork: it may not allocate.
    let exe = c"/proc/self/exe";
    let argv = [ARGV0.as_ptr(), std::ptr::null()];
    let envp = [MARK.as_ptr(), std::ptr::null()];
    let (alive_read, alive_write) = pipe()?;
    let (command_end, warden_end) = socket_pair()?;
    // SAFETY: after fork the child runs only `become_warden`, which calls
    // async-signal-safe functions and never returns; the parent goes on.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            let fds = WardenFds {
                alive_read: alive_read.as_raw_fd(),
                alive_write: alive_write.as_raw_fd(),
                command_end: command_end.as_raw_fd(),
                warden_end: warden_end.as_raw_fd(),
            };
            // SAFETY: this is the forked child; see `become_warden`.
            unsafe { become_warden(&fds, exe.as_ptr(), argv.as_ptr(), envp.as_ptr()) }
        }
        pid => {
            // The warden's ends close here, so that the command sees
            // end-of-file if the warden dies before it answers.
            drop((alive_read, warden_end));
            Ok((
                Warden {
                    pid,
                    _alive: alive_write,
                },
                Handover(command_end),
            ))
        }
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds`, owned from here
    // on. Close-on-exec keeps them out of every program spawned later.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

/// A socket pair rather than a pipe: `send` with MSG_NOSIGNAL cannot raise
/// SIGPIPE in a child that has not yet exec'd.
fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: socketpair writes two new descriptors into `fds`, owned from
    // here on.
    unsafe {
        let kind = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
        if libc::socketpair(libc::AF_UNIX, kind, 0, fds.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

struct WardenFds {
    alive_read: RawFd,
    alive_write: RawFd,
    command_end: RawFd,
    warden_end: RawFd,
}

/// The forked child: waits for the command's group, joins it, and
/// re-executes the binary as `lh-warden` with the pipe on standard input
/// and the hand-over socket on standard output. If exec fails it does the
/// warden's work right here.
///
/// # Safety
///
/// Call only in a child just forked from a possibly multi-threaded process:
/// it uses async-signal-safe functions only (syscall(rt_sigprocmask,
/// close_range), close, recv, setpgid, fcntl, dup2, execve, write, prctl,
/// read, kill, _exit) and never returns.
unsafe fn become_warden(
    fds: &WardenFds,
    exe: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> ! {
    // SAFETY: see the function's contract; every pointer was made by the
    // parent before the fork and stays valid in the child's copy.
    unsafe {
        // Every signal, 32 and 33 included (glibc's sigprocmask would leave
        // those out). The mask survives exec; SIGKILL and SIGSTOP cannot be
        // blocked, and SIGCONT still resumes.
        let all: u64 = !0;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &all,
            std::ptr::null_mut::<u64>(),
            std::mem::size_of::<u64>(),
        );
        libc::close(fds.alive_write);
        libc::close(fds.command_end);
        let mut group: libc::pid_t = 0;
        let want = std::mem::size_of::<libc::pid_t>();
        let got = loop {
            let n = libc::recv(
                fds.warden_end,
                (&raw mut group).cast(),
                want,
                libc::MSG_WAITALL,
            );
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            break n;
        };
        if got != want as isize || libc::setpgid(0, group) != 0 {
            // No command, or no group to join: nothing to guard.
            libc::_exit(0);
        }
        // Out of the way of 0 and 1 first, then onto them without
        // close-on-exec; nothing else is kept: not the caller's terminal or
        // pipes (a shell reading the runner's output must not wait on the
        // warden), not the runner's sockets.
        let alive = libc::fcntl(fds.alive_read, libc::F_DUPFD, 3);
        let answer = libc::fcntl(fds.warden_end, libc::F_DUPFD, 3);
        libc::dup2(alive, 0);
        libc::dup2(answer, 1);
        if libc::syscall(libc::SYS_close_range, 2u32, u32::MAX, 0u32) != 0 {
            for fd in [2, alive, answer, fds.alive_read, fds.warden_end] {
                if fd > 1 {
                    libc::close(fd);
                }
            }
        }
        libc::execve(exe, argv, envp);
        // No exec (no /proc, say): be the warden right here.
        say_ready();
        watch()
    }
}

/// Takes the warden's name, then sends the ready bytes on standard output
/// and closes it.
///
/// # Safety
///
/// Async-signal-safe (prctl, write, close).
unsafe fn say_ready() {
    // SAFETY: prctl reads the name up to its NUL; write reads two bytes
    // from a constant.
    unsafe {
        // The name `ps` and `top` show; exec named it after /proc/self/exe.
        libc::prctl(libc::PR_SET_NAME, ARGV0.as_ptr(), 0, 0, 0);
        libc::write(libc::STDOUT_FILENO, READY_TWICE.as_ptr().cast(), 2);
        libc::close(libc::STDOUT_FILENO);
    }
}

/// In the command, between fork and exec: makes the command's own process
/// group, has the warden join it, and waits (at most a few seconds) until
/// the warden runs. False if no warden answered; the command then runs
/// without one.
///
/// # Safety
///
/// Call only between fork and exec: async-signal-safe (getpid, setpgid,
/// send, poll, recv).
pub(crate) unsafe fn join(handover: RawFd) -> bool {
    // SAFETY: see the function's contract; the buffers live on this stack.
    unsafe {
        let pid = libc::getpid();
        if libc::setpgid(0, 0) != 0 {
            return false;
        }
        let size = std::mem::size_of::<libc::pid_t>();
        let sent = libc::send(handover, (&raw const pid).cast(), size, libc::MSG_NOSIGNAL);
        if sent != size as isize {
            return false;
        }
        let mut ready = libc::pollfd {
            fd: handover,
            events: libc::POLLIN,
            revents: 0,
        };
        let wait = READY_WAIT.as_millis() as libc::c_int;
        loop {
            let n = libc::poll(&mut ready, 1, wait);
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if n != 1 {
                return false;
            }
            break;
        }
        let mut byte = 0u8;
        libc::recv(handover, (&raw mut byte).cast(), 1, 0) == 1 && byte == READY
    }
}

/// The warden, re-executed: says it runs, then does its work.
pub(crate) fn main() -> ! {
    // SAFETY: a fresh single-threaded process; see both functions.
    unsafe {
        say_ready();
        watch()
    }
}

/// Waits for end-of-file on standard input, then SIGKILLs its own process
/// group.
///
/// # Safety
///
/// Async-signal-safe (read, kill, _exit); callable in a forked child.
unsafe fn watch() -> ! {
    // SAFETY: read writes at most one byte into `byte`; kill and _exit have
    // no memory-safety preconditions.
    unsafe {
        let mut byte = 0u8;
        loop {
            let n = libc::read(libc::STDIN_FILENO, (&raw mut byte).cast(), 1);
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                break;
            }
        }
        // Process group 0 is the caller's own.
        libc::kill(0, libc::SIGKILL);
        libc::_exit(0)
    }
}
