//! Job control for `leasehold run` at an interactive terminal: the child
//! lives in its own process group, so the terminal has to be handed to it
//! and taken back, and a stop of either must stop both.

/// Standard input is a terminal.
pub(crate) fn interactive() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(libc::STDIN_FILENO) == 1 }
}

/// The runner's process group owns the terminal on standard input.
pub(crate) fn runner_is_foreground() -> bool {
    // SAFETY: plain queries with no memory-safety preconditions.
    unsafe { interactive() && libc::tcgetpgrp(libc::STDIN_FILENO) == libc::getpgrp() }
}

/// Makes `group` the terminal's foreground group. Async-signal-safe, so the
/// child can call it between fork and exec.
pub(crate) fn hand_to(group: libc::pid_t) {
    // SAFETY: signal and tcsetpgrp are async-signal-safe. SIGTTOU is ignored
    // around the call because a background group changing the foreground
    // group would otherwise be stopped by it.
    unsafe {
        let previous = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        libc::tcsetpgrp(libc::STDIN_FILENO, group);
        libc::signal(libc::SIGTTOU, previous);
    }
}

/// Gives the terminal back to the runner's group if `group` has it; if the
/// shell has it, it stays with the shell.
pub(crate) fn take_back(group: libc::pid_t) {
    // SAFETY: see `hand_to`.
    unsafe {
        if interactive() && libc::tcgetpgrp(libc::STDIN_FILENO) == group {
            hand_to(libc::getpgrp());
        }
    }
}

/// Stops the runner until a SIGCONT, as Ctrl-Z would have.
pub(crate) fn stop_self() {
    // SAFETY: raise has no memory-safety preconditions.
    unsafe {
        libc::raise(libc::SIGSTOP);
    }
}

/// The child `pid` reports a job-control stop. Consumes that report; exits
/// are left for the process reaper.
pub(crate) fn child_stopped(pid: libc::pid_t) -> bool {
    // SAFETY: waitid writes only into `info`, which lives on this stack.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WSTOPPED | libc::WNOHANG;
        libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) == 0
            && info.si_pid() == pid
            && info.si_code == libc::CLD_STOPPED
    }
}
