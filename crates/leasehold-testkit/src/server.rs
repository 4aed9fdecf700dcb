use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::error::{StartError, NOT_FOUND_MESSAGE};
use crate::port::{release_port, reserve_port, reserve_port_pair};
use crate::resp::{self, Value};
use crate::version::version_of;

const ENV_BINARY: &str = "LEASEHOLD_REDIS_SERVER";
const LOG_FILE: &str = "redis.log";
/// Config errors are printed to stderr before the log file is opened, so keep
/// stderr for error messages instead of discarding it.
const STDERR_FILE: &str = "redis.stderr";
/// Written by redis-server (6.x, 7.x) once its listeners are bound.
const READY_MARKER: &str = "Ready to accept connections";
/// Written by a sentinel once its listeners are bound.
const SENTINEL_READY_MARKER: &str = "Sentinel ID is";
const PORT_IN_USE_MARKER: &str = "Address already in use";
/// Logged by a server built without TLS (Redis 7+, Valkey) given `tls-port`.
const NO_TLS_MARKER: &str = "Failed finding TLS support";
/// Printed by Redis 6 built without TLS for its unknown `tls-*` directives.
const NO_TLS_DIRECTIVE_MARKER: &str = ">>> 'tls-";

const READY_TIMEOUT: Duration = Duration::from_secs(10);
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Fresh ports tried by `start` when the chosen one was taken meanwhile.
const START_PORT_ATTEMPTS: usize = 5;
/// `restart` must keep its port, so it waits for it instead of moving.
const RESTART_BIND_ATTEMPTS: usize = 50;
const RESTART_BIND_BACKOFF: Duration = Duration::from_millis(100);

/// Read and write timeout of [`RedisServer::command`].
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
const CLUSTER_CONFIG_FILE: &str = "nodes.conf";
/// A cluster node without `cluster-port` (Redis 6) binds its bus on its port
/// plus this.
const CLUSTER_BUS_OFFSET: u16 = 10_000;
pub(crate) const LAST_SLOT: u16 = 16_383;
const CLUSTER_OK: &str = "cluster_state:ok";
const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(10);
/// The config file of a server started with one, in its directory.
const CONFIG_FILE: &str = "redis.conf";
const SENTINEL_CONFIG_FILE: &str = "sentinel.conf";

/// Locates the `redis-server` binary.
///
/// Uses `$LEASEHOLD_REDIS_SERVER` if it is set and non-empty (a path, or a
/// bare name looked up on `PATH`), otherwise searches `PATH` for
/// `redis-server`. The error for a missing binary is a single line saying how
/// to install it; [`StartError::is_not_found`] is true for it.
pub fn redis_server_path() -> Result<PathBuf, StartError> {
    resolve_binary(
        std::env::var_os(ENV_BINARY).filter(|v| !v.is_empty()),
        std::env::var_os("PATH"),
    )
}

fn resolve_binary(
    env_value: Option<OsString>,
    path_var: Option<OsString>,
) -> Result<PathBuf, StartError> {
    let Some(value) = env_value else {
        return search_path(OsStr::new("redis-server"), path_var.as_deref())
            .ok_or_else(|| StartError::not_found(NOT_FOUND_MESSAGE));
    };
    let candidate = PathBuf::from(&value);
    if candidate.components().count() > 1 {
        if is_executable_file(&candidate) {
            Ok(candidate)
        } else {
            Err(StartError::not_found(format!(
                "{ENV_BINARY}={} is not an executable file",
                candidate.display()
            )))
        }
    } else {
        search_path(&value, path_var.as_deref()).ok_or_else(|| {
            StartError::not_found(format!(
                "{ENV_BINARY}={} was not found on PATH",
                candidate.display()
            ))
        })
    }
}

fn search_path(name: &OsStr, path_var: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path_var?)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable_file(candidate))
}

fn is_executable_file(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A real `redis-server` process listening on `127.0.0.1` on a port of its
/// own, with its own temporary directory (working dir and log file).
///
/// Persistence is off by default (`--save "" --appendonly no`). Dropping it
/// kills the process, reaps it and removes the directory.
pub struct RedisServer {
    port: u16,
    /// The cluster bus port of a cluster node, reserved with `port`.
    bus_port: Option<u16>,
    child: Option<Child>,
    spec: Spec,
    // Last field: removed only after the process is gone.
    dir: TempDir,
}

/// How a server is run, but for its port and directory: the same on every
/// restart.
#[derive(Debug, Clone)]
struct Spec {
    binary: PathBuf,
    mode: Mode,
    /// A config file in the server's directory, given as the first
    /// argument; the server may rewrite it (`CONFIG REWRITE`, a sentinel's
    /// own state), and a restart reads it back.
    conf: Option<PathBuf>,
    /// Everything after the defaults: the mode's, then the caller's.
    args: Vec<String>,
    die_with_parent: bool,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("bus_port", &self.bus_port)
            .field("pid", &self.pid())
            .field("dir", &self.dir.path())
            .field("mode", &self.spec.mode)
            .field("extra_args", &self.spec.args)
            .finish()
    }
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers `PING`.
    ///
    /// Panics if it cannot be started; the message includes the server's log
    /// (or is a single install hint if `redis-server` is missing).
    pub fn start() -> RedisServer {
        Self::start_with_args(&[])
    }

    /// Like [`start`](Self::start), but returns the failure instead of
    /// panicking.
    pub fn try_start() -> Result<RedisServer, StartError> {
        Self::try_start_with_args(&[])
    }

    /// Starts a server with extra `redis-server` arguments appended after the
    /// defaults, e.g. `&["--requirepass", "pw"]` or `&["--appendonly", "yes"]`.
    ///
    /// Later arguments win in redis, so the extras may override the
    /// persistence defaults; overriding `--port`, `--bind`, `--dir`,
    /// `--logfile` or `--daemonize` breaks readiness detection.
    ///
    /// Panics like [`start`](Self::start).
    pub fn start_with_args(extra: &[&str]) -> RedisServer {
        Self::try_start_with_args(extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start_with_args`](Self::start_with_args), but returns the
    /// failure instead of panicking.
    pub fn try_start_with_args(extra: &[&str]) -> Result<RedisServer, StartError> {
        Self::launch(Mode::Standalone, None, extra, false)
    }

    /// Like [`try_start_with_args`](Self::try_start_with_args), but on
    /// Linux the kernel kills the server (SIGKILL) when the thread that
    /// started it exits, even when this process is killed and cannot drop
    /// it (`PR_SET_PDEATHSIG`). The same holds for the server that
    /// [`restart`](Self::restart) starts, tied to the thread that calls it:
    /// start and restart it from a thread that lives as long as the server
    /// should, such as the main thread of a program.
    pub fn try_start_dying_with_parent(extra: &[&str]) -> Result<RedisServer, StartError> {
        Self::launch(Mode::Standalone, None, extra, true)
    }

    /// Starts a server in cluster mode (`--cluster-enabled yes`, its
    /// `nodes.conf` in its directory) that holds all 16384 slots alone, and
    /// waits until `CLUSTER INFO` reports `cluster_state:ok`.
    ///
    /// It is a real one-node cluster: keys of different slots cannot meet in
    /// one command (`CROSSSLOT`), and cluster clients can connect to it.
    /// [`restart`](Self::restart) waits for `cluster_state:ok` again.
    ///
    /// Panics if it cannot be started or never reports `cluster_state:ok`;
    /// the message includes the server's log.
    pub fn start_cluster_node() -> RedisServer {
        Self::try_start_cluster_node().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start_cluster_node`](Self::start_cluster_node), but returns the
    /// failure instead of panicking.
    pub fn try_start_cluster_node() -> Result<RedisServer, StartError> {
        let server = Self::launch(Mode::ClusterNode, None, &[], false)?;
        server.claim_slots(0, LAST_SLOT)?;
        server.wait_cluster_ok()?;
        Ok(server)
    }

    /// Starts a server of `mode` on a free port in a new directory.
    ///
    /// `conf` is written to a config file there and given as the first
    /// argument; `extra` follows the defaults and the mode's arguments. A
    /// cluster node gets a bus port of its own, with `--cluster-port` where
    /// the server has it.
    pub(crate) fn launch(
        mode: Mode,
        conf: Option<&str>,
        extra: &[&str],
        die_with_parent: bool,
    ) -> Result<RedisServer, StartError> {
        let binary = redis_server_path()?;
        let dir = tempfile::Builder::new()
            .prefix("leasehold-redis-")
            .tempdir()
            .map_err(|e| StartError::io("cannot create a temporary directory for redis", e))?;
        let conf = match conf {
            None => None,
            Some(text) => {
                let path = dir.path().join(mode.config_file_name());
                fs::write(&path, text)
                    .map_err(|e| StartError::io(format!("cannot write {}", path.display()), e))?;
                Some(path)
            }
        };
        let explicit_bus = mode == Mode::ClusterNode && version_of(&binary)?.has_cluster_port();
        let mode_args = mode.args(dir.path())?;

        let mut last_error = None;
        for _ in 0..START_PORT_ATTEMPTS {
            let (port, bus_port) = mode.reserve_ports(explicit_bus)?;
            let mut args = mode_args.clone();
            if let (true, Some(bus_port)) = (explicit_bus, bus_port) {
                args.extend(["--cluster-port".to_owned(), bus_port.to_string()]);
            }
            args.extend(extra.iter().map(|s| (*s).to_owned()));
            let spec = Spec {
                binary: binary.clone(),
                mode,
                conf: conf.clone(),
                args,
                die_with_parent,
            };
            match spawn_ready(&spec, port, dir.path()) {
                Ok(child) => {
                    return Ok(RedisServer {
                        port,
                        bus_port,
                        child: Some(child),
                        spec,
                        dir,
                    })
                }
                Err(e) => {
                    release_port(port);
                    if let Some(bus_port) = bus_port {
                        release_port(bus_port);
                    }
                    if !e.is_port_in_use() {
                        return Err(e);
                    }
                    // The next try is a new node on new ports, not this one.
                    let _ = fs::remove_file(dir.path().join(CLUSTER_CONFIG_FILE));
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| StartError::other("redis-server was never started")))
    }

    /// Sends one command over a fresh raw RESP connection and returns the
    /// reply as text: simple and bulk strings as they are, integers in
    /// decimal, nil as `(nil)`, an error reply as `(error) MESSAGE` (e.g.
    /// `(error) CROSSSLOT Keys in request don't hash to the same slot`), and
    /// array elements one per line.
    ///
    /// Meant for setting up and inspecting a server in tests, e.g.
    /// `server.command(&["CONFIG", "SET", "maxmemory", "1mb"])`.
    ///
    /// # Errors
    ///
    /// An error reply is not an error here, only a failure to talk: the
    /// server does not accept the connection, does not answer within 5 s, or
    /// answers something that is not RESP2.
    pub fn command(&self, args: &[&str]) -> Result<String, StartError> {
        resp::command(self.addr(), args, COMMAND_TIMEOUT).map_err(|e| {
            StartError::io(
                format!(
                    "command {} to redis on 127.0.0.1:{} failed",
                    args.first().copied().unwrap_or("(empty)"),
                    self.port
                ),
                e,
            )
        })
    }

    /// Like [`command`](Self::command), but returns the reply as it came
    /// (nested arrays stay nested).
    pub(crate) fn value(&self, args: &[&str]) -> Result<Value, StartError> {
        let mut replies = self.pipeline(&[args])?;
        replies
            .pop()
            .ok_or_else(|| StartError::other(format!("redis on {} sent no reply", self.addr())))
    }

    /// Sends several commands on one connection and returns their replies
    /// in order.
    pub(crate) fn pipeline(&self, commands: &[&[&str]]) -> Result<Vec<Value>, StartError> {
        resp::pipeline(self.addr(), commands, COMMAND_TIMEOUT).map_err(|e| {
            let names: Vec<&str> = commands
                .iter()
                .map(|args| args.first().copied().unwrap_or("(empty)"))
                .collect();
            StartError::io(
                format!(
                    "command {} to redis on 127.0.0.1:{} failed",
                    names.join(", "),
                    self.port
                ),
                e,
            )
        })
    }

    /// Assigns slots `first..=last` to this cluster node.
    pub(crate) fn claim_slots(&self, first: u16, last: u16) -> Result<(), StartError> {
        let has_range = version_of(&self.spec.binary)?.has_addslotsrange();
        let reply = if has_range {
            let (first, last) = (first.to_string(), last.to_string());
            self.setup_command(&["CLUSTER", "ADDSLOTSRANGE", &first, &last])?
        } else {
            let slots: Vec<String> = (first..=last).map(|slot| slot.to_string()).collect();
            let mut args = vec!["CLUSTER", "ADDSLOTS"];
            args.extend(slots.iter().map(String::as_str));
            self.setup_command(&args)?
        };
        if reply == "OK" {
            Ok(())
        } else {
            Err(self.failure(&format!("refused to take slots {first}-{last}: {reply}")))
        }
    }

    fn wait_cluster_ok(&self) -> Result<(), StartError> {
        let deadline = Instant::now() + CLUSTER_READY_TIMEOUT;
        loop {
            let info = self.setup_command(&["CLUSTER", "INFO"])?;
            if info.lines().any(|line| line.trim_end() == CLUSTER_OK) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(self.failure(&format!(
                    "did not report {CLUSTER_OK} within {} s; CLUSTER INFO said:\n{}",
                    CLUSTER_READY_TIMEOUT.as_secs(),
                    info.trim_end()
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// [`command`](Self::command), failing with the server's log attached.
    fn setup_command(&self, args: &[&str]) -> Result<String, StartError> {
        self.command(args)
            .map_err(|e| self.failure(&format!("could not be set up: {e}")))
    }

    /// An error about this running server, with its log attached.
    fn failure(&self, what: &str) -> StartError {
        let dir = self.dir.path();
        StartError::other(failure_message(
            &self.spec.binary,
            self.port,
            what,
            &read_log(&dir.join(STDERR_FILE), 0),
            &dir.join(LOG_FILE),
            &self.log(),
        ))
    }

    /// The TCP port the server listens on (on `127.0.0.1`); never 6379.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The cluster bus port of a cluster node (set with `cluster-port`, or
    /// the port plus 10000 on Redis 6); `None` for other servers.
    pub fn cluster_bus_port(&self) -> Option<u16> {
        self.bus_port
    }

    /// The server's temporary directory (its `--dir`, holding `redis.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills the process with SIGKILL (a crash: nothing is flushed) and waits
    /// for it. Does nothing if it is not running. The port stays reserved for
    /// [`restart`](Self::restart).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Errors only mean it already exited; wait() still reaps it.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, directory and arguments
    /// (killing it first if it is still running) and waits until it answers
    /// `PING`. With `--appendonly yes` it reloads its data from the directory.
    ///
    /// Retries for a few seconds while the port is still in use; panics with
    /// the server's log if it cannot be restarted. A cluster node keeps its
    /// slots (they are in its `nodes.conf`) and is waited for until it
    /// reports `cluster_state:ok` again.
    pub fn restart(&mut self) {
        self.stop();
        let mut attempts = 0;
        loop {
            attempts += 1;
            match spawn_ready(&self.spec, self.port, self.dir.path()) {
                Ok(child) => {
                    self.child = Some(child);
                    break;
                }
                Err(e) if e.is_port_in_use() && attempts < RESTART_BIND_ATTEMPTS => {
                    thread::sleep(RESTART_BIND_BACKOFF);
                }
                Err(e) => panic!("restart after {attempts} attempt(s): {e}"),
            }
        }
        if self.spec.mode == Mode::ClusterNode {
            if let Err(e) = self.wait_cluster_ok() {
                panic!("restart: {e}");
            }
        }
    }

    /// True if the process is alive. A process found to have exited is reaped
    /// and forgotten, so [`pid`](Self::pid) becomes `None`.
    pub fn is_running(&mut self) -> bool {
        let Some(child) = &mut self.child else {
            return false;
        };
        match child.try_wait() {
            Ok(None) => true,
            Ok(Some(_)) | Err(_) => {
                self.child = None;
                false
            }
        }
    }

    /// Contents of the server's log file (all runs, including restarts);
    /// empty if there is none yet.
    pub fn log(&self) -> String {
        read_log(&self.dir.path().join(LOG_FILE), 0)
    }

    /// The last `lines` lines of [`log`](Self::log), for failure messages
    /// about several servers.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The config file the server was started with, if any.
    pub(crate) fn config_file(&self) -> Option<&Path> {
        self.spec.conf.as_deref()
    }

    /// The process id, or `None` after [`stop`](Self::stop) or once
    /// [`is_running`](Self::is_running) has seen it exit.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        release_port(self.port);
        if let Some(bus_port) = self.bus_port {
            release_port(bus_port);
        }
    }
}

/// What kind of server [`RedisServer::launch`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Standalone,
    ClusterNode,
    /// `--sentinel`; needs a config file, which it rewrites.
    Sentinel,
}

impl Mode {
    /// Arguments that go before the caller's extras.
    fn args(self, dir: &Path) -> Result<Vec<String>, StartError> {
        match self {
            Mode::Standalone => Ok(Vec::new()),
            Mode::Sentinel => Ok(vec!["--sentinel".to_owned()]),
            Mode::ClusterNode => {
                let config = dir.join(CLUSTER_CONFIG_FILE);
                let config = config.to_str().ok_or_else(|| {
                    StartError::other(format!(
                        "the temporary directory {} is not valid UTF-8",
                        dir.display()
                    ))
                })?;
                Ok(
                    ["--cluster-enabled", "yes", "--cluster-config-file", config]
                        .map(str::to_owned)
                        .to_vec(),
                )
            }
        }
    }

    /// The client port, and for a cluster node its bus port: any free port
    /// where it is set `explicitly` (`--cluster-port`), else the client port
    /// plus 10000.
    fn reserve_ports(self, explicit: bool) -> Result<(u16, Option<u16>), StartError> {
        match self {
            Mode::Standalone | Mode::Sentinel => Ok((reserve_port(), None)),
            Mode::ClusterNode if explicit => Ok((reserve_port(), Some(reserve_port()))),
            Mode::ClusterNode => {
                let (port, bus_port) = reserve_port_pair(CLUSTER_BUS_OFFSET)?;
                Ok((port, Some(bus_port)))
            }
        }
    }

    fn config_file_name(self) -> &'static str {
        match self {
            Mode::Sentinel => SENTINEL_CONFIG_FILE,
            Mode::Standalone | Mode::ClusterNode => CONFIG_FILE,
        }
    }

    /// What the server logs once its listeners are bound.
    fn ready_marker(self) -> &'static str {
        match self {
            Mode::Sentinel => SENTINEL_READY_MARKER,
            Mode::Standalone | Mode::ClusterNode => READY_MARKER,
        }
    }
}

/// Spawns redis-server on `port` and waits until it is ready.
///
/// Ready means this run logged that it accepts connections (so the listener
/// is ours, not some other process on a reused port) and `PING` is answered.
fn spawn_ready(spec: &Spec, port: u16, dir: &Path) -> Result<Child, StartError> {
    let binary = &spec.binary;
    let log_path = dir.join(LOG_FILE);
    let stderr_path = dir.join(STDERR_FILE);
    // The log is appended to across restarts; only this run's part counts.
    let log_offset = fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0);
    let stderr = File::create(&stderr_path)
        .map_err(|e| StartError::io(format!("cannot create {}", stderr_path.display()), e))?;

    let mut command = Command::new(binary);
    if let Some(conf) = &spec.conf {
        command.arg(conf);
    }
    command
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log_path)
        .args(["--daemonize", "no"])
        .args(&spec.args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    if spec.die_with_parent {
        tie_to_parent(&mut command);
    }
    if let Some(cpus) = crate::pin::server_cpu_set() {
        bind_to(&mut command, cpus);
    }
    let mut child = command
        .spawn()
        .map_err(|e| StartError::io(format!("cannot run {}", binary.display()), e))?;

    let describe = |what: &str| {
        failure_message(
            binary,
            port,
            what,
            &read_log(&stderr_path, 0),
            &log_path,
            &read_log(&log_path, 0),
        )
    };
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(None) => {}
            Ok(Some(status)) => {
                let message = describe(&format!("exited early ({status})"));
                let log = read_log(&log_path, log_offset);
                let stderr = read_log(&stderr_path, 0);
                return Err(if log.contains(PORT_IN_USE_MARKER) {
                    StartError::port_in_use(message)
                } else if log.contains(NO_TLS_MARKER)
                    || stderr.contains(NO_TLS_MARKER)
                    || stderr.contains(NO_TLS_DIRECTIVE_MARKER)
                {
                    StartError::tls_unsupported(message)
                } else {
                    StartError::other(message)
                });
            }
            Err(e) => {
                kill_and_reap(&mut child);
                return Err(StartError::io(describe("could not be polled"), e));
            }
        }
        if read_log(&log_path, log_offset).contains(spec.mode.ready_marker()) && answers_ping(port)
        {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            kill_and_reap(&mut child);
            return Err(StartError::other(describe(&format!(
                "did not answer PING within {} s",
                READY_TIMEOUT.as_secs()
            ))));
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// Has the kernel kill the child when the thread that spawns it exits.
#[cfg(target_os = "linux")]
fn tie_to_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    // SAFETY: only prctl and getppid run between fork and exec, both
    // async-signal-safe; nothing allocates.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // A parent that died before the prctl sends no signal.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn tie_to_parent(_command: &mut Command) {}

/// Has the child run on the CPUs of `cpus` alone (see
/// [`crate::pin_servers_to`]).
fn bind_to(command: &mut Command, cpus: libc::cpu_set_t) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only sched_setaffinity runs between fork and exec, on a set
    // copied into the closure before the fork; nothing allocates.
    unsafe {
        command.pre_exec(move || crate::pin::set_affinity(&cpus));
    }
}

fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn failure_message(
    binary: &Path,
    port: u16,
    what: &str,
    stderr: &str,
    log_path: &Path,
    log: &str,
) -> String {
    let mut message = format!(
        "redis-server ({}) on 127.0.0.1:{port} {what}",
        binary.display()
    );
    if !stderr.trim().is_empty() {
        message.push_str("\n--- stderr ---\n");
        message.push_str(stderr.trim_end());
    }
    message.push_str(&format!("\n--- log {} ---\n", log_path.display()));
    if log.trim().is_empty() {
        message.push_str("(empty)");
    } else {
        message.push_str(log.trim_end());
    }
    message
}

/// Reads a file from `offset`; missing or unreadable files read as empty.
fn read_log(path: &Path, offset: u64) -> String {
    let mut bytes = Vec::new();
    let read = File::open(path).and_then(|mut file| {
        file.seek(SeekFrom::Start(offset))?;
        file.read_to_end(&mut bytes)
    });
    match read {
        Ok(_) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => String::new(),
    }
}

/// Sends a RESP `PING`. A `-NOAUTH` reply also counts: the server is up, it
/// just wants a password (`--requirepass`).
pub(crate) fn answers_ping(port: u16) -> bool {
    ping_reply(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        .is_some_and(|reply| reply.starts_with("+PONG") || reply.starts_with("-NOAUTH"))
}

/// First reply line to a RESP `PING`, or `None` if there is no answer.
fn ping_reply(addr: SocketAddr) -> Option<String> {
    let timeout = Duration::from_millis(500);
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").ok()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 128];
    while !reply.windows(2).any(|w| w == b"\r\n") {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        reply.extend_from_slice(&buf[..n]);
    }
    Some(String::from_utf8_lossy(&reply).into_owned())
}

/// `N` independent redis masters (no replication between them), as used by
/// Redlock.
#[derive(Debug)]
pub struct Masters {
    servers: Vec<RedisServer>,
}

impl Masters {
    /// Starts `n` servers, each on its own port and directory. Panics like
    /// [`RedisServer::start`].
    pub fn start(n: usize) -> Masters {
        Self::start_with_args(n, &[])
    }

    /// Starts `n` servers, each with the same extra arguments (see
    /// [`RedisServer::start_with_args`]).
    pub fn start_with_args(n: usize, extra: &[&str]) -> Masters {
        Masters {
            servers: (0..n)
                .map(|_| RedisServer::start_with_args(extra))
                .collect(),
        }
    }

    /// The servers' URLs, in index order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// Number of servers.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// True if there are no servers.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Server `i`, e.g. to stop or restart it. Panics if `i >= len()`.
    pub fn server(&mut self, i: usize) -> &mut RedisServer {
        let len = self.servers.len();
        self.servers
            .get_mut(i)
            .unwrap_or_else(|| panic!("Masters::server({i}) out of range: there are {len}"))
    }

    /// All servers, in index order.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }
}

#[cfg(test)]
mod tests;
