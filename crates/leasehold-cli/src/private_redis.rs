//! A `redis-server` of the demo's own: a free loopback port (never 6379), a
//! temporary directory, no persistence. It lives in a process group of its
//! own, so a Ctrl-C at the terminal reaches the demo and not the server (the
//! summary still needs it), and dies with the demo even if the demo is killed
//! with SIGKILL (`PR_SET_PDEATHSIG`). Dropping it kills and reaps it, then
//! removes its directory.
//!
//! The same server in cluster mode is a node of the demo's private Redis
//! Cluster (see `private_cluster.rs`).

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::exit::{self, Fail};

/// The user's own Redis usually listens here; the demo never takes it.
const USERS_PORT: u16 = 6379;
const BINARY_ENV: &str = "LEASEHOLD_REDIS_SERVER";
const LOG_FILE: &str = "redis.log";
const READY_MARKER: &str = "Ready to accept connections";
const PORT_IN_USE: &str = "Address already in use";
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);
/// A port found free can be taken by someone else before the server binds it.
const PORT_ATTEMPTS: usize = 5;
/// A cluster node listens for its peers on its port plus this (the
/// default of every server version).
pub(crate) const CLUSTER_BUS_OFFSET: u16 = 10_000;
/// Ports tried for one whose bus port is free as well.
const PAIR_ATTEMPTS: usize = 200;
/// How long a node of the private cluster may be silent before its peers
/// call it failed: nothing fails over in a cluster without replicas, so
/// only a busy machine's stalls matter here.
const CLUSTER_NODE_TIMEOUT_MS: &str = "5000";

#[derive(Debug)]
pub(crate) struct PrivateRedis {
    child: Child,
    port: u16,
    // Last: removed once the process is gone.
    dir: TempDir,
}

impl PrivateRedis {
    /// Starts the server and waits until it answers `PING`.
    pub(crate) async fn start() -> anyhow::Result<Self> {
        Self::launch(&[], None).await
    }

    /// Starts a server in cluster mode that holds no slot yet, on a port
    /// whose cluster bus port ([`CLUSTER_BUS_OFFSET`] above it) is free too,
    /// neither of them among `taken`, and waits until it answers `PING`.
    pub(crate) async fn start_cluster_node(taken: &[u16]) -> anyhow::Result<Self> {
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            CLUSTER_NODE_TIMEOUT_MS,
        ];
        Self::launch(&args, Some(taken)).await
    }

    /// Starts a server with `extra` arguments; with `bus`, on a port whose
    /// bus port is free too and neither among `bus`. Every attempt has a
    /// directory of its own: a cluster node that could not bind has written
    /// its node file there already.
    async fn launch(extra: &[&str], bus: Option<&[u16]>) -> anyhow::Result<Self> {
        let binary = std::env::var_os(BINARY_ENV)
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from("redis-server"), PathBuf::from);
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let dir = tempfile::Builder::new()
                .prefix("leasehold-demo-")
                .tempdir()
                .map_err(|e| {
                    anyhow::anyhow!("cannot create a temporary directory for redis: {e}")
                })?;
            let port = match bus {
                Some(taken) => free_port_with_bus(taken)?,
                None => free_port()?,
            };
            let child = spawn(&binary, port, &dir, extra).map_err(|e| not_started(&binary, e))?;
            // Killed and reaped if the start fails or is given up.
            let mut server = PrivateRedis { child, port, dir };
            let log = server.dir.path().join(LOG_FILE);
            match wait_ready(&mut server.child, port, &log).await {
                Ok(()) => return Ok(server),
                Err(why) => {
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    drop(server);
                    last = format!("{why}; its log ends with:\n{}", tail(&text, 10));
                    if !text.contains(PORT_IN_USE) {
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

    /// `127.0.0.1:PORT`, as a cluster names its nodes.
    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
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

fn not_started(binary: &Path, err: io::Error) -> anyhow::Error {
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

/// A free port `p` whose cluster bus port `p + 10000` is free as well,
/// neither of them 6379 nor among `taken`.
fn free_port_with_bus(taken: &[u16]) -> anyhow::Result<u16> {
    for _ in 0..PAIR_ATTEMPTS {
        let port = free_port()?;
        let Some(bus) = port.checked_add(CLUSTER_BUS_OFFSET) else {
            continue;
        };
        if bus == USERS_PORT || taken.contains(&port) || taken.contains(&bus) {
            continue;
        }
        if TcpListener::bind((Ipv4Addr::LOCALHOST, bus)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!(
        "found no free loopback port p with p+{CLUSTER_BUS_OFFSET} free as well (a cluster \
         node's bus port) in {PAIR_ATTEMPTS} tries"
    )
}

fn spawn(binary: &Path, port: u16, dir: &TempDir, extra: &[&str]) -> io::Result<Child> {
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
        .args(extra)
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
/// being answered. Sleeps between looks without holding the thread, so a
/// signal can end the start.
async fn wait_ready(child: &mut Child, port: u16, log: &Path) -> Result<(), String> {
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
        tokio::time::sleep(POLL).await;
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
