//! The warden: a small process that leads the command's process group and
//! outlives the runner by a moment, so that nothing the command started goes
//! on working after the runner is gone.
//!
//! `PR_SET_PDEATHSIG` takes down the command itself when the runner dies,
//! but not what the command started: `sh -c 'work & wait'` would leave
//! `work` running without the lock. So before the command starts, the runner
//! forks a warden that opens a new process group, and the command joins it.
//! The runner keeps the write end of a pipe; the warden blocks reading the
//! other end. However the runner dies, SIGKILL included, the kernel closes
//! the write end, the read returns end-of-file, and the warden SIGKILLs its
//! group, itself included. As the group's leader it also keeps the group's ID
//! from being reused while it waits.
//!
//! The warden blocks every signal it can (those sent to the command's group
//! are not for it), keeps no descriptor but its end of the pipe, and runs as
//! `lh-warden` (the binary re-executed), so that neither `ps` nor
//! `pkill -f 'leasehold run'` takes it for the runner. When the runner ends
//! normally it kills the group itself, warden and all.

use std::ffi::CStr;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// The name the warden runs under.
const ARGV0: &CStr = c"lh-warden";

/// This process was started as a warden: `main` hands over to [`main`].
pub(crate) fn is_warden() -> bool {
    std::env::args_os()
        .next()
        .is_some_and(|arg| arg.as_bytes() == ARGV0.to_bytes())
}

/// A running warden; dropping it (or the runner dying) sets it off.
#[derive(Debug)]
pub(crate) struct Warden {
    pid: libc::pid_t,
    _alive: OwnedFd,
}

impl Warden {
    /// The process group the warden leads, for the command to join.
    pub(crate) fn group(&self) -> libc::pid_t {
        self.pid
    }

    /// Lets the warden run on after its group was stopped (Ctrl-Z): a
    /// stopped warden could not act if the runner died meanwhile.
    pub(crate) fn resume(&self) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(self.pid, libc::SIGCONT);
        }
    }
}

/// Forks a warden into a new process group of its own.
pub(crate) fn start() -> io::Result<Warden> {
    // Everything the child uses is made before the fork: it may not allocate.
    let exe = c"/proc/self/exe";
    let argv = [ARGV0.as_ptr(), std::ptr::null()];
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`. Close-on-exec keeps
    // the write end out of every program spawned later: only this process
    // may hold it.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let [read_end, write_end] = fds;
    // SAFETY: after fork the child runs only `become_warden`, which calls
    // async-signal-safe functions and never returns; the parent goes on.
    match unsafe { libc::fork() } {
        -1 => {
            let err = io::Error::last_os_error();
            // SAFETY: both descriptors were just made here and are closed once.
            unsafe {
                libc::close(read_end);
                libc::close(write_end);
            }
            Err(err)
        }
        // SAFETY: this is the forked child; see `become_warden`.
        0 => unsafe { become_warden(read_end, write_end, exe.as_ptr(), argv.as_ptr()) },
        pid => {
            // SAFETY: setpgid on our own child (it does the same; whichever
            // runs first wins, so the group exists when this returns). The
            // read end belongs to the warden; the write end is owned by the
            // returned value alone.
            unsafe {
                libc::setpgid(pid, pid);
                libc::close(read_end);
                Ok(Warden {
                    pid,
                    _alive: OwnedFd::from_raw_fd(write_end),
                })
            }
        }
    }
}

/// The forked child: sets itself up and re-executes the binary as
/// `lh-warden`; if that fails it waits right here.
///
/// # Safety
///
/// Call only in a child just forked from a possibly multi-threaded process:
/// it uses async-signal-safe functions only (setpgid, sigfillset,
/// sigprocmask, close, dup2, fcntl, syscall(close_range), execv, prctl,
/// read, kill, _exit) and never returns.
unsafe fn become_warden(
    read_end: libc::c_int,
    write_end: libc::c_int,
    exe: *const libc::c_char,
    argv: *const *const libc::c_char,
) -> ! {
    // SAFETY: see the function's contract; every pointer was made by the
    // parent before the fork and stays valid in the child's copy.
    unsafe {
        libc::setpgid(0, 0);
        // The mask survives exec. SIGKILL and SIGSTOP cannot be blocked;
        // SIGCONT still resumes.
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        libc::close(write_end);
        // The read end becomes standard input, without close-on-exec.
        if read_end == 0 {
            libc::fcntl(0, libc::F_SETFD, 0);
        } else {
            libc::dup2(read_end, 0);
        }
        // Keep nothing else: not the caller's terminal or pipes (a shell
        // reading the runner's output must not wait on the warden), not the
        // runner's sockets.
        if libc::syscall(libc::SYS_close_range, 1u32, u32::MAX, 0u32) != 0 {
            for fd in 1..=2 {
                libc::close(fd);
            }
            if read_end > 2 {
                libc::close(read_end);
            }
        }
        libc::execv(exe, argv);
        watch()
    }
}

/// The warden's whole life, once set up: wait for end-of-file on standard
/// input, then SIGKILL its own process group.
pub(crate) fn main() -> ! {
    // SAFETY: async-signal-safe calls only, so this is also fine in a
    // forked child that could not exec.
    unsafe { watch() }
}

/// # Safety
///
/// Async-signal-safe (prctl, read, kill, _exit); callable in a forked child.
unsafe fn watch() -> ! {
    // SAFETY: prctl reads the name up to its NUL; read writes at most one
    // byte into `byte`; kill and _exit have no memory-safety preconditions.
    unsafe {
        // The name `ps` and `top` show; exec named it after /proc/self/exe.
        libc::prctl(libc::PR_SET_NAME, ARGV0.as_ptr(), 0, 0, 0);
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
