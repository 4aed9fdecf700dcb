//! Running the `leasehold` binary from the tests: one way for every test
//! file that has no older helpers of its own.
#![allow(dead_code)]

use std::process::{Child, Command, Output, Stdio};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// `leasehold --url URL ARGS…`, with the environment's URLs removed and
/// never the harness's terminal as input (a runner at a terminal hands it
/// over).
pub(crate) fn command(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("LEASEHOLD_URL")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

pub(crate) fn leasehold(url: &str, args: &[&str]) -> Output {
    command(url, args).output().unwrap()
}

pub(crate) fn spawn(url: &str, args: &[&str]) -> Child {
    command(url, args).spawn().unwrap()
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The lines a child writes on one of its pipes, read by a thread of their
/// own, so that a test can wait for a line while the child goes on.
pub(crate) struct Lines {
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Lines {
    pub(crate) fn of(pipe: impl std::io::Read + Send + 'static) -> Lines {
        use std::io::BufRead;
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Lines {
            lines,
            seen: Vec::new(),
        }
    }

    /// The next line that `wanted` accepts, skipping the others; panics
    /// with every line seen if the pipe closes first, or after a minute.
    pub(crate) fn until(&mut self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let patience = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let left = patience.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if wanted(&line) {
                        return line;
                    }
                }
                Err(_) => panic!("no line {what}; saw: {:#?}", self.seen),
            }
        }
    }

    /// Every line read so far, and those still coming until the pipe
    /// closes.
    pub(crate) fn rest(mut self) -> Vec<String> {
        while let Ok(line) = self.lines.recv() {
            self.seen.push(line);
        }
        self.seen
    }
}

/// Ctrl-C to a child this test started.
pub(crate) fn interrupt(child: &Child) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on a child of this process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
}
