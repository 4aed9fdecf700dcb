//! The warden: a small process that outlives the runner by a moment, so that
//! nothing the command started goes on working after the runner is gone.
//!
//! `PR_SET_PDEATHSIG` takes down the command itself when the runner dies,
//! but not what the command started: `sh -c 'work & wait'` would leave
//! `work` running without the lock. So the runner forks a warden into the
//! command's process group. The runner keeps the write end of a pipe; the
//! warden blocks reading the other end. However the runner dies, SIGKILL
//! included, the kernel closes the write end, the read returns end-of-file,
//! and the warden SIGKILLs the group, itself included.
//!
//! Being a member of the group also keeps the group's ID from being reused
//! while the warden waits. When the runner ends normally it kills the group
//! itself, warden and all.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// Keeps the warden waiting; dropping it (or the runner dying) sets it off.
#[derive(Debug)]
pub(crate) struct Warden {
    _alive: OwnedFd,
}

/// Forks a warden into process group `group`.
pub(crate) fn start(group: libc::pid_t) -> io::Result<Warden> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`. Close-on-exec keeps
    // the write end out of every program spawned later: only this process
    // may hold it.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let [read_end, write_end] = fds;
    // SAFETY: after fork the child runs only `watch`, which calls
    // async-signal-safe functions and never returns; the parent goes on as
    // before.
    match unsafe { libc::fork() } {
        -1 => {
            let err = io::Error::last_os_error();
            // SAFETY: both descriptors were just created here and are closed once.
            unsafe {
                libc::close(read_end);
                libc::close(write_end);
            }
            Err(err)
        }
        // SAFETY: this is the forked child; see `watch`.
        0 => unsafe { watch(group, read_end, write_end) },
        _ => {
            // SAFETY: the read end belongs to the warden now; the write end
            // is owned by the returned value alone.
            unsafe {
                libc::close(read_end);
                Ok(Warden {
                    _alive: OwnedFd::from_raw_fd(write_end),
                })
            }
        }
    }
}

/// The warden's whole life.
///
/// # Safety
///
/// Call only in a child just forked from a possibly multi-threaded process:
/// it uses async-signal-safe functions only (setpgid, prctl, signal, close,
/// read, kill, _exit) and never returns.
unsafe fn watch(group: libc::pid_t, read_end: libc::c_int, write_end: libc::c_int) -> ! {
    // SAFETY: async-signal-safe calls on descriptors and IDs this function
    // was handed; see the function's contract.
    unsafe {
        if libc::setpgid(0, group) != 0 {
            // The group is gone already: nothing left to guard.
            libc::_exit(0);
        }
        // Its arguments are the runner's; the name tells `ps` and `top` apart.
        libc::prctl(libc::PR_SET_NAME, c"lh-warden".as_ptr(), 0, 0, 0);
        // Signals aimed at the command's group (Ctrl-C, a forwarded SIGTERM,
        // terminal job control) are not for the warden.
        for signal in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGPIPE,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            libc::signal(signal, libc::SIG_IGN);
        }
        libc::close(write_end);
        // Let go of the caller's terminal and pipes: a shell reading the
        // runner's output must not wait on the warden.
        for fd in 0..=2 {
            if fd != read_end {
                libc::close(fd);
            }
        }
        let mut byte = 0u8;
        loop {
            let n = libc::read(read_end, (&raw mut byte).cast(), 1);
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                break;
            }
        }
        libc::kill(-group, libc::SIGKILL);
        libc::_exit(0)
    }
}
