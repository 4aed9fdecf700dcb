//! The signals that end `demo` and `watch`: Ctrl-C, SIGTERM, SIGHUP.

use std::io;

use tokio::signal::unix::{signal, Signal, SignalKind};

#[derive(Debug)]
pub(crate) struct Stop {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Stop {
    pub(crate) fn listen() -> io::Result<Self> {
        Ok(Stop {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits for one of them and returns its number.
    ///
    /// Cancel safe: a signal that arrives while nobody waits is kept for the
    /// next call.
    pub(crate) async fn recv(&mut self) -> libc::c_int {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
        }
    }
}
