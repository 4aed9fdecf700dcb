//! A `redis-server` of the demo's own: a free loopback port (never 6379), a
//! temporary directory, no persistence. It lives in a process group of its
//! own, so a Ctrl-C at the terminal reaches the demo and not the server (the
//! summary still needs it), and dies with the demo even if the demo is killed
//! with SIGKILL (`PR_SET_PDEATHSIG`). Dropping it kills and reaps it.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::exit::{self, Fail};

/// The user's own Redis usually listens here; the demo never takes it.
const USERS_PORT: u16 = 6379;
const BINARY_ENV: &str = "LEASEHOLD_REDIS_SERVER";
const LOG_FILE: &str = "redis.log";
const READY_MARKER: &str = "Ready to accept connections";
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);
/// A port found free can be taken by someone else before the server binds it.
const PORT_ATTEMPTS: usize = 5;

#[derive(Debug)]
pub(crate) struct PrivateRedis {
    child: Child,
    port: u16,
    // Last: removed once the process is gone.
    _dir: TempDir,
}

impl PrivateRedis {
    /// Starts the server and waits until it answers `PING`.
    pub(crate) fn start() -> anyhow::Result<Self> {
        let binary = std::env::var_os(BINARY_ENV)
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from("redis-server"), PathBuf::from);
        let dir = tempfile::Builder::new()
            .prefix("leasehold-demo-")
            .tempdir()
            .map_err(|e| anyhow::anyhow!("cannot create a temporary directory for redis: {e}"))?;
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            let mut child = spawn(&binary, port, &dir).map_err(|e| not_started(&binary, e))?;
            match wait_ready(&mut child, port, &dir.path().join(LOG_FILE)) {
                Ok(()) => {
                    return Ok(PrivateRedis {
                        child,
                        port,
                        _dir: dir,
                    })
                }
                Err(why) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let log =
                        std::fs::read_to_string(dir.path().join(LOG_FILE)).unwrap_or_default();
                    last = format!("{why}; its log ends with:\n{}", tail(&log, 10));
                    if !log.contains("Address already in use") {
                        break;
                    }
                }
            }
        }
        anyhow::bail!("the demo's redis-server did not start: {last}")
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        // Errors only mean it has exited already; wait() still reaps it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn not_started(binary: &std::path::Path, err: io::Error) -> anyhow::Error {
    if err.kind() == io::ErrorKind::NotFound {
        Fail {
            code: exit::UNAVAILABLE,
            message: format!(
                "{} not found: the demo runs its own Redis; install it (Debian/Ubuntu: \
                 apt-get install redis-server, macOS: brew install redis) or set {BINARY_ENV}",
                binary.display()
            ),
        }
        .into()
    } else {
        anyhow::anyhow!("cannot run {}: {err}", binary.display())
    }
}

fn free_port() -> anyhow::Result<u16> {
    for _ in 0..PORT_ATTEMPTS {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| anyhow::anyhow!("cannot bind a loopback port: {e}"))?;
        let port = listener.local_addr()?.port();
        if port != USERS_PORT {
            return Ok(port);
        }
    }
    anyhow::bail!("found no free loopback port")
}

fn spawn(binary: &std::path::Path, port: u16, dir: &TempDir) -> io::Result<Child> {
    let mut command = Command::new(binary);
    command
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--daemonize", "no", "--protected-mode", "yes"])
        .arg("--dir")
        .arg(dir.path())
        .arg("--logfile")
        .arg(dir.path().join(LOG_FILE))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let demo = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (prctl, getppid, raise).
    unsafe {
        command.pre_exec(move || crate::runner::die_with(demo));
    }
    command.spawn()
}

/// Ready is this server having logged that it accepts connections (so the
/// listener is its own, not another process's on a reused port) and `PING`
/// being answered.
fn wait_ready(child: &mut Child, port: u16, log: &std::path::Path) -> Result<(), String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(None) => {}
            Ok(Some(status)) => return Err(format!("it exited at start ({status})")),
            Err(e) => return Err(format!("it could not be polled: {e}")),
        }
        let logged = std::fs::read_to_string(log).is_ok_and(|l| l.contains(READY_MARKER));
        if logged && answers_ping(port) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "it did not answer PING within {} s",
                READY_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(POLL);
    }
}

fn answers_ping(port: u16) -> bool {
    let timeout = Duration::from_millis(500);
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let mut reply = [0u8; 7];
    stream.set_read_timeout(Some(timeout)).is_ok()
        && stream.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
