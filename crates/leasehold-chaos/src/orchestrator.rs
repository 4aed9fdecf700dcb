//! One run of one schedule: a fresh redis-server, the fenced resource, a
//! fault proxy and a worker process per worker slot, faults on the seeded
//! schedule, then the checker over what they logged. A cluster schedule
//! runs on a fresh Redis Cluster of three masters with a replica each
//! instead, without proxies: its workers are given the nodes as seeds, its
//! locks are spread over the shards, and its faults strike the shard of a
//! lock that is held. A sentinel schedule runs on a master with one
//! replica under three sentinels, all fresh too; its workers reach the
//! master through the sentinels (`redis+sentinel://`), and its faults fail
//! the master over. A Redlock schedule runs on N independent masters, each
//! behind one fault proxy that every worker goes through; its workers take
//! Redlock mutexes over the proxies, and its faults strike one master at a
//! time, most of the time one that holds a grant of a held lock.
//!
//! Every process the run starts is its child and dies with it, even when
//! the harness is killed with SIGKILL: the workers and the redis-server (or
//! a Redlock's masters) get `PR_SET_PDEATHSIG`, a cluster's nodes and a
//! sentinel group's servers are killed by the reaper (see `reaper`), and the fault proxies and the resource are threads of the
//! harness. On SIGINT, SIGTERM or SIGHUP the run stops its faults, workers
//! and servers before it returns.
//!
//! A run's directory holds all the checker reads, so that `check DIR` can
//! read it again: `w<N>.log` and `w<N>.stderr` of each worker, `faults.log`
//! (the faults as injected), `resource.log` (every request the resource
//! served) and `run.json` (the run's settings, and what only the harness
//! saw: kills, keys without a TTL, failed workers).

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use leasehold::{redis, Lock};
use leasehold_testkit::{key_slot, FaultProxy, RedisCluster, RedisServer, Sentinels};
use serde_json::{json, Value};

use crate::check::{self, Findings, Inputs, WorkerLog};
use crate::events::{mono_ns, one_line, parse_log, Event};
use crate::faults::{Fault, Injected, Schedule};
use crate::reaper::Reaper;
use crate::resource::{Resource, Served};
use crate::rng::Rng;
use crate::workload::Workload;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT, SIGTERM and SIGHUP end the run early, cleanly.
pub(crate) fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe.
        unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
}

pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// How a run is set up.
#[derive(Debug, Clone)]
pub(crate) struct RunConfig {
    pub(crate) schedule: Schedule,
    pub(crate) seed: u64,
    pub(crate) seconds: f64,
    /// Runs on past `seconds` until the workers have logged this many
    /// acquisitions.
    pub(crate) acquisitions: u64,
    pub(crate) workers: usize,
    pub(crate) lease: Duration,
    pub(crate) workloads: Vec<Workload>,
    pub(crate) locks: usize,
    pub(crate) fenced: bool,
    /// No lock is granted through a server younger than this, or by a
    /// master that took over the lock's slot less than this ago.
    pub(crate) restart_grace: Duration,
    /// The cluster's `cluster-node-timeout` (cluster schedules only).
    pub(crate) node_timeout: Duration,
    /// Replicas that must acknowledge each grant (`WAIT`), 0 for none;
    /// `None`: every replica the master has connected (the library's
    /// default).
    pub(crate) replicas: Option<u32>,
    /// How long Redis waits for them.
    pub(crate) replica_timeout: Duration,
    /// The independent masters of a Redlock schedule.
    pub(crate) masters: usize,
    pub(crate) keep_logs: Option<PathBuf>,
}

/// How long ago a section that a kill aims at began: long enough that it
/// is a long one, soon enough that most of it is still ahead.
const FRESH_HOLD: (Duration, Duration) = (Duration::from_millis(150), Duration::from_millis(600));

/// The shards of a cluster run, each a master and one replica.
const CLUSTER_SHARDS: usize = 3;
/// A sentinel run's replicas and sentinels: the fewest that fail over
/// by a majority.
const SENTINEL_REPLICAS: usize = 1;
const SENTINELS: usize = 3;
/// The cluster's node timeout unless the run says otherwise: the test
/// kit's, long enough that a busy 2-core machine does not fail a master
/// that is only slow (at 1 s, a loaded machine did).
pub(crate) const DEFAULT_NODE_TIMEOUT: Duration = leasehold_testkit::DEFAULT_NODE_TIMEOUT;

/// A Redlock's masters unless the run says otherwise: the usual five.
pub(crate) const DEFAULT_MASTERS: usize = 5;

/// How long Redis waits for the replicas to acknowledge a grant, unless
/// the run says otherwise: the library's default.
pub(crate) const DEFAULT_REPLICA_TIMEOUT: Duration = leasehold::DEFAULT_REPLICA_TIMEOUT;

/// The library's setting for `replicas` (see [`RunConfig::replicas`]).
pub(crate) fn replica_ack(replicas: Option<u32>, timeout: Duration) -> leasehold::ReplicaAck {
    match replicas {
        None => leasehold::ReplicaAck::Connected { timeout },
        Some(0) => leasehold::ReplicaAck::Off,
        Some(replicas) => leasehold::ReplicaAck::AtLeast { replicas, timeout },
    }
}

/// How a run's JSON names its `replicas`: a number, or "connected".
fn replicas_json(replicas: Option<u32>) -> Value {
    replicas.map_or_else(|| Value::from("connected"), Value::from)
}

/// Longer than any lease: a restart that lost the locks grants none of
/// them again while their old holders may still think they hold them.
pub(crate) fn default_restart_grace(lease: Duration) -> Duration {
    lease + lease / 10
}

impl RunConfig {
    fn command_timeout(&self) -> Duration {
        self.lease / 4
    }

    /// Where `--keep-logs` keeps this run.
    pub(crate) fn kept_dir(&self) -> Option<PathBuf> {
        self.keep_logs
            .as_ref()
            .map(|dir| dir.join(format!("{}-{}", self.schedule.name(), self.seed)))
    }
}

/// Makes `dir` ready for one run's logs: a run never writes into a
/// directory that holds another's.
pub(crate) fn claim_dir(dir: &Path) -> Result<()> {
    match fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!(
                    "{} is not empty: it holds an earlier run (read it again with `check`); \
                     remove it or keep the logs elsewhere",
                    dir.display()
                );
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", dir.display())),
    }
}

/// What a run found, with how it was set up.
#[derive(Debug, Clone)]
pub(crate) struct RunReport {
    pub(crate) config: RunConfig,
    pub(crate) seconds: f64,
    pub(crate) faults: Vec<Injected>,
    pub(crate) findings: Findings,
}

impl RunReport {
    pub(crate) fn to_json(&self) -> Value {
        let mut v = json!({
            "schedule": self.config.schedule.name(),
            "seed": self.config.seed,
            "seconds": (self.seconds * 10.0).round() / 10.0,
            "workers": self.config.workers,
            "lease_ms": self.config.lease.as_millis() as u64,
            "restart_grace_ms": self.config.restart_grace.as_millis() as u64,
            "node_timeout_ms": self.config.schedule.on_cluster()
                .then_some(self.config.node_timeout.as_millis() as u64),
            "replicas": replicas_json(self.config.replicas),
            "replica_timeout_ms": (self.config.replicas != Some(0))
                .then_some(self.config.replica_timeout.as_millis() as u64),
            "masters": self.config.schedule.on_redlock().then_some(self.config.masters),
            "masters_persist": self.config.schedule.on_redlock()
                .then_some(self.config.schedule.persists_masters()),
            "workloads": self.config.workloads.iter().map(|w| w.name()).collect::<Vec<_>>(),
            "fenced_resource": self.config.fenced,
            "faults": self.faults.len(),
            "faults_at_holders": self.faults.iter().filter(|f| f.at_holder).count(),
            "faults_by_kind": self.faults.iter().fold(serde_json::Map::new(), |mut m, f| {
                let n = m.get(f.fault.kind()).and_then(Value::as_u64).unwrap_or(0);
                m.insert(f.fault.kind().to_owned(), json!(n + 1));
                m
            }),
            "fault_strengths": self.faults.iter().map(|f| f.fault.to_string()).collect::<BTreeSet<_>>(),
        });
        if let (Value::Object(out), Value::Object(found)) = (&mut v, self.findings.to_json()) {
            out.extend(found);
        }
        v
    }
}

/// A worker process and the proxy its Redis traffic goes through (none on
/// a cluster, behind sentinels or on a Redlock, whose proxies are the
/// masters').
struct Slot {
    id: String,
    child: Child,
    proxy: Option<FaultProxy>,
    log: PathBuf,
    stderr: PathBuf,
    /// When it was killed, or found dead.
    killed_at: Option<u64>,
}

impl Slot {
    fn pid(&self) -> libc::pid_t {
        libc::pid_t::try_from(self.child.id()).unwrap_or(0)
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = self.pid();
        if pid > 0 {
            // SAFETY: a plain kill(2) of our own child.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the workers take their locks from.
enum Redis {
    Server(RedisServer),
    Cluster(Box<RedisCluster>),
    Sentinel(Box<Sentinels>),
    /// A Redlock's masters, each behind the proxy every worker reaches it
    /// through.
    Masters {
        servers: Vec<RedisServer>,
        proxies: Vec<FaultProxy>,
    },
}

impl Redis {
    fn start(config: &RunConfig) -> Result<Redis> {
        let redis = if config.schedule.on_cluster() {
            Redis::Cluster(Box::new(
                RedisCluster::builder(CLUSTER_SHARDS, 1)
                    .node_timeout(config.node_timeout)
                    .try_start()
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            ))
        } else if config.schedule.on_sentinel() {
            Redis::Sentinel(Box::new(
                Sentinels::builder(SENTINEL_REPLICAS, SENTINELS)
                    .try_start()
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            ))
        } else if config.schedule.on_redlock() {
            let persist: &[&str] = if config.schedule.persists_masters() {
                &["--appendonly", "yes", "--appendfsync", "always"]
            } else {
                &[]
            };
            let mut servers = Vec::new();
            let mut proxies = Vec::new();
            for _ in 0..config.masters {
                let server = RedisServer::try_start_dying_with_parent(persist)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                proxies.push(
                    FaultProxy::try_start(server.addr()).map_err(|e| anyhow::anyhow!("{e}"))?,
                );
                servers.push(server);
            }
            Redis::Masters { servers, proxies }
        } else if config.schedule.restarts() {
            Redis::Server(
                RedisServer::try_start_dying_with_parent(&[
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "always",
                ])
                .map_err(|e| anyhow::anyhow!("{e}"))?,
            )
        } else {
            Redis::Server(
                RedisServer::try_start_dying_with_parent(&[])
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            )
        };
        Ok(redis)
    }

    /// The URL the harness's own client reaches it by: the server, every
    /// node of the cluster as seeds, or every master (not through its
    /// proxy: the harness looks past the faults it injects).
    fn url(&self) -> String {
        match self {
            Redis::Server(server) => server.url(),
            Redis::Cluster(cluster) => cluster.urls().join(","),
            Redis::Sentinel(group) => group.url(),
            Redis::Masters { servers, .. } => servers
                .iter()
                .map(RedisServer::url)
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// The servers whose keys are scanned: the server, every master, or
    /// the sentinels' master.
    fn scanned(&self) -> Vec<String> {
        match self {
            Redis::Server(server) => vec![server.url()],
            Redis::Cluster(cluster) => cluster.masters().iter().map(|m| m.url()).collect(),
            Redis::Sentinel(group) => vec![group.master().url()],
            Redis::Masters { servers, .. } => servers.iter().map(RedisServer::url).collect(),
        }
    }

    fn server(&mut self) -> Result<&mut RedisServer> {
        match self {
            Redis::Server(server) => Ok(server),
            _ => bail!("a fault of one server struck a cluster or a sentinel group"),
        }
    }

    fn cluster(&mut self) -> Result<&mut RedisCluster> {
        match self {
            Redis::Cluster(cluster) => Ok(cluster),
            _ => bail!("a cluster fault struck something else than a cluster"),
        }
    }

    fn sentinels(&mut self) -> Result<&mut Sentinels> {
        match self {
            Redis::Sentinel(group) => Ok(group),
            _ => bail!("a sentinel fault struck something else than a sentinel group"),
        }
    }

    fn masters(&mut self) -> Result<(&mut [RedisServer], &[FaultProxy])> {
        match self {
            Redis::Masters { servers, proxies } => Ok((servers, proxies)),
            _ => bail!("a Redlock fault struck something else than a Redlock's masters"),
        }
    }

    /// The pids of the cluster's running nodes, or of the sentinel group's
    /// servers and sentinels (none for a server or a Redlock's masters,
    /// which die with the harness on their own).
    fn node_pids(&self) -> Vec<u32> {
        match self {
            Redis::Server(_) | Redis::Masters { .. } => Vec::new(),
            Redis::Cluster(cluster) => cluster
                .nodes()
                .iter()
                .filter_map(RedisServer::pid)
                .collect(),
            Redis::Sentinel(group) => group
                .servers()
                .iter()
                .chain(group.sentinels())
                .filter_map(RedisServer::pid)
                .collect(),
        }
    }
}

/// The harness's own view of the locks, to aim its faults: a client of
/// the deployment, or a Redlock over the masters.
enum Inspector {
    Client(leasehold::Client),
    Redlock(leasehold::Redlock),
}

impl Inspector {
    /// Lock `name` as a mutex, whose `inspect` tells its holders (of any
    /// primitive: a mutex of the same name reads the same key).
    fn mutex(&self, name: &str) -> leasehold::Result<Box<dyn Lock>> {
        Ok(match self {
            Inspector::Client(client) => Box::new(client.mutex(name)?),
            Inspector::Redlock(redlock) => Box::new(redlock.mutex(name)?),
        })
    }
}

struct Run<'a> {
    config: &'a RunConfig,
    exe: PathBuf,
    redis: Redis,
    /// Kills the cluster's nodes if the harness dies without dropping
    /// them; after `redis`, so that a clean run stops them itself.
    reaper: Option<Reaper>,
    /// The locks the workers take.
    lock_names: Vec<String>,
    resource: Resource,
    logs: PathBuf,
    slots: Vec<Slot>,
    retired: Vec<Slot>,
    next_id: usize,
    rng: Rng,
    faults: Vec<Injected>,
    no_ttl: BTreeSet<String>,
    /// Workers that exited when the schedule did not stop them, or would
    /// not stop.
    failures: Vec<String>,
    rt: tokio::runtime::Runtime,
    client: Inspector,
    last_scan: Instant,
    last_reap: Instant,
    /// Acquisitions counted so far, and how far each log was read.
    counted: u64,
    read_to: HashMap<PathBuf, u64>,
    /// The section each log has open, as far as it was read: its lock and
    /// when it was granted.
    open: HashMap<PathBuf, (String, u64)>,
    /// The lock whose master the last kill of a Redlock's master struck.
    pursued: Option<String>,
}

pub(crate) fn run(config: &RunConfig) -> Result<RunReport> {
    // Removed when the run ends, unless the logs are kept.
    let mut scratch = None;
    let logs = match config.kept_dir() {
        Some(dir) => {
            claim_dir(&dir)?;
            dir
        }
        None => scratch
            .insert(
                tempfile::Builder::new()
                    .prefix("leasehold-chaos-")
                    .tempdir()
                    .context("cannot make a directory for the logs")?,
            )
            .path()
            .to_owned(),
    };
    let exe = std::env::current_exe().context("cannot find this program to start workers")?;
    let mut reaper = if config.schedule.on_cluster() || config.schedule.on_sentinel() {
        Some(Reaper::start(&exe)?)
    } else {
        None
    };
    let redis = Redis::start(config)?;
    if let Some(reaper) = &mut reaper {
        for pid in redis.node_pids() {
            reaper.watch(pid)?;
        }
    }
    let lock_names = match &redis {
        Redis::Server(_) | Redis::Sentinel(_) | Redis::Masters { .. } => {
            Workload::lock_names(&config.workloads, config.locks, 1, |_| 0)
        }
        Redis::Cluster(cluster) => {
            let shard_of = |name: &str| {
                panic::catch_unwind(AssertUnwindSafe(|| cluster.shard_of_slot(key_slot(name))))
                    .unwrap_or(usize::MAX)
            };
            Workload::lock_names(&config.workloads, config.locks, cluster.shards(), shard_of)
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = if config.schedule.on_redlock() {
        Inspector::Redlock(
            leasehold::Redlock::builder(redis.scanned())
                .name("leasehold-chaos")
                .command_timeout(Duration::from_millis(300))
                .build()?,
        )
    } else {
        Inspector::Client(
            leasehold::Client::builder(redis.url())
                .name("leasehold-chaos")
                .command_timeout(Duration::from_millis(300))
                .build()?,
        )
    };
    let mut run = Run {
        config,
        exe,
        resource: Resource::start(config.fenced)?,
        redis,
        reaper,
        lock_names,
        logs,
        slots: Vec::new(),
        retired: Vec::new(),
        next_id: 1,
        rng: Rng::new(config.seed),
        faults: Vec::new(),
        no_ttl: BTreeSet::new(),
        failures: Vec::new(),
        rt,
        client,
        last_scan: Instant::now(),
        last_reap: Instant::now(),
        counted: 0,
        read_to: HashMap::new(),
        open: HashMap::new(),
        pursued: None,
    };
    for _ in 0..config.workers {
        let slot = run.spawn()?;
        run.slots.push(slot);
    }
    let started = mono_ns();
    let until = Instant::now() + Duration::from_secs_f64(config.seconds);
    let ran = run.schedule(until);
    let run_end = run.stop();
    ran?;
    if interrupted() {
        bail!("interrupted: the run was stopped and cleaned up");
    }
    run.scan_ttls(true);
    let inputs = run.inputs(run_end)?;
    run.save(&inputs, started)?;
    let findings = check::check(&inputs);
    Ok(RunReport {
        config: config.clone(),
        seconds: (run_end - started) as f64 / 1e9,
        faults: run.faults,
        findings,
    })
}

impl Run<'_> {
    /// Faults on the schedule until `until` and the acquisitions asked for.
    fn schedule(&mut self, until: Instant) -> Result<()> {
        let config = self.config;
        self.nap(config.lease)?;
        while (Instant::now() < until || self.count_acquisitions() < config.acquisitions)
            && !interrupted()
        {
            let fault = config.schedule.draw(&mut self.rng, config.lease);
            self.inject(fault)?;
            let gap = config
                .lease
                .mul_f64(fault.gap_factor() * (0.5 + self.rng.below(1000) as f64 / 1000.0));
            self.nap(gap)?;
        }
        Ok(())
    }

    fn spawn(&mut self) -> Result<Slot> {
        let id = format!("w{}", self.next_id);
        self.next_id += 1;
        let (proxy, url) = match &self.redis {
            Redis::Server(server) => {
                let proxy =
                    FaultProxy::try_start(server.addr()).map_err(|e| anyhow::anyhow!("{e}"))?;
                let url = proxy.url();
                (Some(proxy), url)
            }
            Redis::Cluster(cluster) => (None, cluster.urls().join(",")),
            Redis::Sentinel(group) => (None, group.url()),
            Redis::Masters { proxies, .. } => (
                None,
                proxies
                    .iter()
                    .map(FaultProxy::url)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        };
        let log = self.logs.join(format!("{id}.log"));
        let stderr = self.logs.join(format!("{id}.stderr"));
        let mut cmd = Command::new(&self.exe);
        cmd.arg("worker")
            .args(["--id", &id])
            .args(["--url", &url])
            .args(["--resource", &self.resource.addr().to_string()])
            .arg("--log")
            .arg(&log)
            .args(["--lease-ms", &self.config.lease.as_millis().to_string()])
            .args([
                "--command-timeout-ms",
                &self.config.command_timeout().as_millis().to_string(),
            ])
            .args([
                "--restart-grace-ms",
                &self.config.restart_grace.as_millis().to_string(),
            ])
            .args(["--locks", &self.lock_names.join(",")])
            .args(
                self.config
                    .replicas
                    .map(|n| ["--replicas".to_owned(), n.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .args([
                "--replica-timeout-ms",
                &self.config.replica_timeout.as_millis().to_string(),
            ])
            .args(["--seed", &self.rng.next().to_string()])
            .args(self.config.schedule.on_redlock().then_some("--redlock"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(
                fs::File::create(&stderr)
                    .with_context(|| format!("cannot create {}", stderr.display()))?,
            );
        // SAFETY: prctl is async-signal-safe; nothing else runs between
        // fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                // Its own process group: a Ctrl-C at the terminal reaches
                // the harness alone, which stops the workers in order.
                if libc::setpgid(0, 0) == -1
                    || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1
                {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().context("cannot start a worker")?;
        Ok(Slot {
            id,
            child,
            proxy,
            log,
            stderr,
            killed_at: None,
        })
    }

    /// Notes a worker as failed, with the end of its standard error.
    fn fail(&mut self, slot: usize, what: &str) {
        let s = &self.slots[slot];
        let text = fs::read(&s.stderr).unwrap_or_default();
        let tail = String::from_utf8_lossy(&text[text.len().saturating_sub(STDERR_TAIL)..]);
        self.failures.push(format!(
            "{} {what}; its standard error ends: {}",
            s.id,
            one_line(tail.trim())
        ));
    }

    /// Replaces the workers that exited when nothing stopped them, noting
    /// them as failed; their sections end where they were found dead.
    fn reap(&mut self) -> Result<()> {
        self.last_reap = Instant::now();
        for i in 0..self.slots.len() {
            let status = match self.slots[i].child.try_wait() {
                Ok(Some(status)) => status.to_string(),
                Ok(None) => continue,
                Err(e) => format!("cannot be waited for ({e})"),
            };
            self.slots[i].killed_at = Some(mono_ns());
            self.fail(i, &format!("exited on its own ({status})"));
            let fresh = self.spawn()?;
            let old = std::mem::replace(&mut self.slots[i], fresh);
            self.retired.push(old);
        }
        Ok(())
    }

    /// A lock that a running worker took between `from` and `to` ago and
    /// holds still, as the logs tell: a long section (most end within
    /// 80 ms), that has most of its hold ahead of it. The youngest.
    fn fresh_long_hold(&mut self, from: Duration, to: Duration) -> Option<String> {
        self.count_acquisitions();
        let now = mono_ns();
        self.slots
            .iter()
            .filter_map(|s| self.open.get(&s.log))
            .filter(|(_, at)| (nanos(from)..=nanos(to)).contains(&now.saturating_sub(*at)))
            .max_by_key(|(_, at)| *at)
            .map(|(lock, _)| lock.clone())
    }

    /// The acquisitions the workers have logged so far (read on from where
    /// the last count stopped).
    fn count_acquisitions(&mut self) -> u64 {
        for s in self.retired.iter().chain(&self.slots) {
            let from = self.read_to.get(&s.log).copied().unwrap_or(0);
            let Ok(mut file) = fs::File::open(&s.log) else {
                continue;
            };
            let mut text = Vec::new();
            if file.seek(SeekFrom::Start(from)).is_err() || file.read_to_end(&mut text).is_err() {
                continue;
            }
            let whole = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let marks = |line: &&[u8]| line.starts_with(b"acq\t") || line.starts_with(b"end\t");
            for line in text[..whole].split(|&b| b == b'\n').filter(marks) {
                match String::from_utf8_lossy(line).parse::<Event>() {
                    Ok(Event::Acquired { lock, at, .. }) => {
                        self.counted += 1;
                        self.open.insert(s.log.clone(), (lock, at));
                    }
                    Ok(Event::Ended { .. }) => {
                        self.open.remove(&s.log);
                    }
                    _ => {}
                }
            }
            self.read_to.insert(s.log.clone(), from + whole as u64);
        }
        self.counted
    }

    /// Sleeps until `d` has passed or the run is interrupted, checking the
    /// keys' TTLs and the workers on the way.
    fn nap(&mut self, d: Duration) -> Result<()> {
        let until = Instant::now() + d;
        while !interrupted() {
            let now = Instant::now();
            if now >= until {
                return Ok(());
            }
            if self.last_scan.elapsed() >= Duration::from_secs(1) {
                self.scan_ttls(false);
            }
            if self.last_reap.elapsed() >= Duration::from_millis(100) {
                self.reap()?;
            }
            thread::sleep((until - now).min(Duration::from_millis(20)));
        }
        Ok(())
    }

    /// Records every `leasehold:` key without a TTL. A scan that Redis does
    /// not answer (it is down or paused) is skipped, unless it is the last.
    fn scan_ttls(&mut self, last: bool) {
        self.last_scan = Instant::now();
        let attempts = if last { 20 } else { 1 };
        for url in self.redis.scanned() {
            for _ in 0..attempts {
                match scan(&url) {
                    Ok(keys) => {
                        self.no_ttl.extend(keys);
                        break;
                    }
                    Err(_) if last => thread::sleep(Duration::from_millis(250)),
                    Err(_) => break,
                }
            }
        }
    }

    /// The run's locks that someone holds now, with the pids of their
    /// holders, as `inspect` sees them.
    fn held(&self) -> Vec<(String, Vec<u32>)> {
        let client = &self.client;
        let names = &self.lock_names;
        self.rt.block_on(async {
            let mut held = Vec::new();
            for name in names {
                let Ok(mutex) = client.mutex(name) else {
                    continue;
                };
                if let Ok(Ok(info)) =
                    tokio::time::timeout(Duration::from_millis(300), mutex.inspect()).await
                {
                    if !info.holders.is_empty() {
                        let pids = info.holders.iter().filter_map(|h| h.pid).collect();
                        held.push((name.clone(), pids));
                    }
                }
            }
            held
        })
    }

    /// A worker that holds a lock now, most of the time; a random one
    /// otherwise (or when nobody holds a lock that we can see).
    fn target(&mut self) -> (usize, bool) {
        if self.rng.chance(0.8) {
            let pids: Vec<u32> = self.held().into_iter().flat_map(|(_, p)| p).collect();
            let holding: Vec<usize> = (0..self.slots.len())
                .filter(|&i| pids.contains(&self.slots[i].child.id()))
                .collect();
            if !holding.is_empty() {
                return (*self.rng.pick(&holding), true);
            }
        }
        (self.rng.below(self.slots.len() as u64) as usize, false)
    }

    /// A lock that is held now, most of the time; any of the run's locks
    /// otherwise (or when none is held that we can see).
    fn target_lock(&mut self) -> (String, bool) {
        if self.rng.chance(0.8) {
            let held: Vec<String> = self.held().into_iter().map(|(name, _)| name).collect();
            if !held.is_empty() {
                return (self.rng.pick(&held).clone(), true);
            }
        }
        (self.rng.pick(&self.lock_names).clone(), false)
    }

    /// Runs `op` on what the workers take their locks from. The test kit
    /// panics when a cluster or a sentinel group does not settle, or a
    /// server does not start again; that ends the run with its message, as
    /// an error. The nodes that run afterwards (a restarted one has a new
    /// pid) are handed to the reaper.
    fn caught<T>(&mut self, what: &str, op: impl FnOnce(&mut Redis) -> Result<T>) -> Result<T> {
        let redis = &mut self.redis;
        let done = panic::catch_unwind(AssertUnwindSafe(|| op(redis))).map_err(|payload| {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            anyhow::anyhow!("{what}: {message}")
        });
        if let Some(reaper) = &mut self.reaper {
            for pid in self.redis.node_pids() {
                reaper.watch(pid)?;
            }
        }
        done?
    }

    /// Runs `op` on the cluster (see [`caught`](Self::caught)).
    fn on_cluster<T>(&mut self, what: &str, op: impl FnOnce(&mut RedisCluster) -> T) -> Result<T> {
        self.caught(what, |redis| Ok(op(redis.cluster()?)))
    }

    /// Most of the time, waits (a lease at most) for a lock that a worker
    /// took a moment ago for a long hold, and returns it: a fault that
    /// takes seconds (a failover) or that needs several strikes within
    /// one hold (restarts of a Redlock's masters) can only meet a holder
    /// whose section outlives it.
    fn long_hold(&mut self) -> Result<Option<String>> {
        let mut fresh = None;
        if self.rng.chance(0.8) {
            let until = Instant::now() + self.config.lease;
            while fresh.is_none() && Instant::now() < until && !interrupted() {
                fresh = self.fresh_long_hold(FRESH_HOLD.0, FRESH_HOLD.1);
                if fresh.is_none() {
                    self.nap(Duration::from_millis(20))?;
                }
            }
        }
        Ok(fresh)
    }

    /// A cluster fault aimed at the shard (or the slot) of a lock that is
    /// held now, most of the time; whether it was.
    fn aim(&mut self, fault: Fault) -> Result<(Fault, bool)> {
        let (lock, at_holder) = self.target_lock();
        let slot = key_slot(&lock);
        let (shard, shards) = self.on_cluster("finding a slot's shard", |c| {
            (c.shard_of_slot(slot), c.shards())
        })?;
        let aimed = match fault {
            Fault::Failover { .. } => Fault::Failover { shard },
            Fault::KillMaster { lag, .. } => Fault::KillMaster { shard, lag },
            Fault::Migrate { step, .. } => {
                let to = (shard + 1 + self.rng.below(shards as u64 - 1) as usize) % shards;
                Fault::Migrate { slot, to, step }
            }
            other => other,
        };
        Ok((aimed, at_holder))
    }

    /// The slot of worker `id`, though it was retired meanwhile (the first
    /// slot for none).
    fn by_id(&self, id: Option<&str>) -> &Slot {
        self.slots
            .iter()
            .chain(&self.retired)
            .find(|s| Some(s.id.as_str()) == id)
            .unwrap_or(&self.slots[0])
    }

    /// The proxy of worker `id`'s slot (see [`by_id`](Self::by_id)).
    fn proxy_of(&self, id: Option<&str>) -> Result<&FaultProxy> {
        self.by_id(id)
            .proxy
            .as_ref()
            .context("a network fault struck a worker without a proxy")
    }

    fn inject(&mut self, fault: Fault) -> Result<()> {
        if fault.strikes_cluster() {
            return self.strike_cluster(fault);
        }
        if fault.strikes_sentinels() {
            return self.strike_sentinels(fault);
        }
        if fault.strikes_masters() {
            return self.strike_masters(fault);
        }
        let (slot, at_holder) = if fault.targets_worker() {
            self.target()
        } else {
            (0, false)
        };
        let target = fault.targets_worker().then(|| self.slots[slot].id.clone());
        let start = mono_ns();
        let lease = self.config.lease;
        match fault {
            Fault::Pause(d) => {
                self.slots[slot].signal(libc::SIGSTOP);
                let napped = self.nap(d);
                self.by_id(target.as_deref()).signal(libc::SIGCONT);
                napped?;
            }
            Fault::Kill => {
                self.slots[slot].signal(libc::SIGKILL);
                let _ = self.slots[slot].child.wait();
                self.slots[slot].killed_at = Some(mono_ns());
                let fresh = self.spawn()?;
                let old = std::mem::replace(&mut self.slots[slot], fresh);
                self.retired.push(old);
            }
            Fault::Restart { aof, down } => {
                let server = self.redis.server()?;
                server.stop();
                if !aof {
                    // Redis 7 keeps its AOF in a directory, 6.2 in one file.
                    let dir = server.dir().join("appendonlydir");
                    if dir.exists() {
                        fs::remove_dir_all(&dir)
                            .with_context(|| format!("cannot remove {}", dir.display()))?;
                    }
                    let file = server.dir().join("appendonly.aof");
                    if file.exists() {
                        fs::remove_file(&file)
                            .with_context(|| format!("cannot remove {}", file.display()))?;
                    }
                }
                self.nap(down)?;
                self.redis.server()?.restart();
            }
            Fault::ClientPause(d) => {
                let ms = d.as_millis().to_string();
                self.redis
                    .server()?
                    .command(&["CLIENT", "PAUSE", &ms, "ALL"])
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                self.nap(d)?;
            }
            Fault::Latency {
                replies_only,
                latency,
                lasting,
            } => {
                let proxy = self.proxy_of(target.as_deref())?;
                if replies_only {
                    proxy.set_reply_latency(latency);
                } else {
                    proxy.set_latency(latency);
                }
                let napped = self.nap(lasting);
                self.proxy_of(target.as_deref())?.heal();
                napped?;
            }
            Fault::Blackhole(d) => {
                self.proxy_of(target.as_deref())?.blackhole(true);
                let napped = self.nap(d);
                self.proxy_of(target.as_deref())?.heal();
                napped?;
            }
            Fault::Reset => {
                self.proxy_of(target.as_deref())?.reset();
            }
            Fault::HalfOpen => {
                self.proxy_of(target.as_deref())?.freeze_existing();
                self.nap(lease)?;
            }
            Fault::Failover { .. }
            | Fault::KillMaster { .. }
            | Fault::Migrate { .. }
            | Fault::SentinelFailover { .. }
            | Fault::SentinelKill { .. }
            | Fault::MasterKill { .. }
            | Fault::MasterPause { .. }
            | Fault::MasterLatency { .. }
            | Fault::MasterBlackhole { .. } => {
                bail!(
                    "a fault of a cluster, of sentinels or of a Redlock's masters was injected as \
                     a fault of one server"
                )
            }
        }
        self.record(fault, target, at_holder, start);
        Ok(())
    }

    /// A fault of the cluster, aimed when it strikes.
    fn strike_cluster(&mut self, fault: Fault) -> Result<()> {
        let start = mono_ns();
        let (fault, at_holder) = match fault {
            Fault::KillMaster { lag, .. } => self.kill_master(lag)?,
            _ => {
                let (fault, at_holder) = self.aim(fault)?;
                match fault {
                    Fault::Failover { shard } => {
                        self.on_cluster(&format!("{fault}"), |c| c.failover(shard))?;
                    }
                    Fault::Migrate { slot, to, step } => {
                        self.on_cluster(&format!("{fault}"), |c| migrate(c, slot, to, step))??;
                    }
                    _ => bail!("{fault} is not a fault of the cluster"),
                }
                (fault, at_holder)
            }
        };
        self.record(fault, None, at_holder, start);
        Ok(())
    }

    /// Kills the master of a held lock's shard, waits until its replica
    /// has taken over, and starts the killed node again, which rejoins as
    /// a replica. With a `lag`, every replica stops applying its master's
    /// writes (`CLIENT PAUSE WRITE`) that long before the kill, and starts
    /// again once the replica has taken over: what the master did
    /// meanwhile is lost, as with a replica that lags behind. The shard is
    /// chosen after the lag, so that the kill strikes whoever holds a
    /// lock then: most of the time, a lock just taken for a long hold
    /// (granted while the replicas lagged, so the new master will not know
    /// of it). Returns the fault as aimed, and whether it was.
    fn kill_master(&mut self, lag: Duration) -> Result<(Fault, bool)> {
        let unpause = |c: &mut RedisCluster| -> Result<()> {
            for node in c.nodes() {
                if node.pid().is_some() {
                    node.command(&["CLIENT", "UNPAUSE"])
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                }
            }
            Ok(())
        };
        if !lag.is_zero() {
            // Lifted below; the servers lift it on their own at the latest.
            let pause = (lag + Duration::from_secs(120)).as_millis().to_string();
            self.on_cluster("pausing the replicas", |c| {
                for replica in c.replicas() {
                    if replica.pid().is_some() {
                        replica
                            .command(&["CLIENT", "PAUSE", &pause, "WRITE"])
                            .map_err(|e| anyhow::anyhow!("{e}"))?;
                    }
                }
                Ok::<_, anyhow::Error>(())
            })??;
            let napped = self.nap(lag);
            if napped.is_err() || interrupted() {
                self.on_cluster("unpausing the replicas", unpause)??;
                napped?;
            }
        }
        // A kill can only meet a holder whose section outlives the
        // failover.
        let fresh = self.long_hold()?;
        let (shard, at_holder) = match fresh {
            Some(lock) => {
                let slot = key_slot(&lock);
                (
                    self.on_cluster("finding a slot's shard", |c| c.shard_of_slot(slot))?,
                    true,
                )
            }
            None => match self.aim(Fault::KillMaster { shard: 0, lag })? {
                (Fault::KillMaster { shard, .. }, at_holder) => (shard, at_holder),
                (fault, _) => bail!("{fault} is not a kill"),
            },
        };
        let fault = Fault::KillMaster { shard, lag };
        let what = fault.to_string();
        let killed = self.on_cluster(&what, |c| c.kill_master(shard))?;
        if !lag.is_zero() {
            self.on_cluster(&what, unpause)??;
        }
        self.on_cluster(&what, |c| c.restart_node(killed))?;
        Ok((fault, at_holder))
    }

    /// Runs `op` on the sentinel group (see [`caught`](Self::caught)).
    fn on_sentinels<T>(&mut self, what: &str, op: impl FnOnce(&mut Sentinels) -> T) -> Result<T> {
        self.caught(what, |redis| Ok(op(redis.sentinels()?)))
    }

    /// A failover of the sentinels' master, by `SENTINEL FAILOVER` or by
    /// a kill. With a lag, the replica is cut off from the master that long
    /// before (see [`cut_replicas`]) and the master runs on alone: what it
    /// grants meanwhile is lost. As a kill on a cluster, it waits most of
    /// the time (a lease at most) for a lock just taken for a long hold, so
    /// that it strikes a holder whose section outlives the failover. A
    /// failover by command leaves the old master to the sentinels, which
    /// make it a replica some ten seconds later; the fault ends when they
    /// have.
    fn strike_sentinels(&mut self, fault: Fault) -> Result<()> {
        let start = mono_ns();
        let lag = fault.lag();
        if !lag.is_zero() {
            self.on_sentinels("cutting the replica off", |g| {
                cut_replicas(g.master(), true)
            })??;
            let napped = self.nap(lag);
            if napped.is_err() || interrupted() {
                self.on_sentinels("letting the replica back", |g| {
                    cut_replicas(g.master(), false)
                })??;
                napped?;
            }
        }
        let fresh = self.long_hold()?;
        let at_holder = fresh.is_some() || !self.held().is_empty();
        let what = fault.to_string();
        match fault {
            Fault::SentinelKill { .. } => {
                // The killed server comes back with its config file, where
                // no ACL was written: nothing to let back.
                let killed = self.on_sentinels(&what, Sentinels::kill_master)?;
                self.on_sentinels(&what, |g| g.restart(killed))?;
            }
            Fault::SentinelFailover { .. } => {
                let old = self.on_sentinels(&what, |g| g.master_index())?;
                self.on_sentinels(&what, Sentinels::failover_unaided)?;
                if !lag.is_zero() {
                    // Before the sentinels make it a replica (and rewrite
                    // its config file), some ten seconds later.
                    self.on_sentinels(&what, |g| cut_replicas(&g.servers()[old], false))??;
                }
                self.on_sentinels(&what, Sentinels::wait_settled)?;
            }
            _ => bail!("{fault} is not a fault of sentinels"),
        }
        self.record(fault, None, at_holder, start);
        Ok(())
    }

    /// Notes `fault`, struck at `start` on `target` (`None`: Redis), as
    /// ended now.
    fn record(&mut self, fault: Fault, target: Option<String>, at_holder: bool, start: u64) {
        self.faults.push(Injected {
            fault,
            target,
            at_holder,
            start,
            end: mono_ns(),
        });
    }

    /// The masters that hold a grant of one of `locks` now, as each master
    /// tells (a master that does not answer within the harness's command
    /// timeout counts as holding none).
    fn masters_holding(&self, locks: &[String]) -> Vec<usize> {
        let Inspector::Redlock(redlock) = &self.client else {
            return Vec::new();
        };
        self.rt.block_on(async {
            let mut holding = BTreeSet::new();
            for name in locks {
                let Ok(mutex) = redlock.mutex(name) else {
                    continue;
                };
                let Ok(masters) =
                    tokio::time::timeout(Duration::from_millis(500), mutex.inspect_masters()).await
                else {
                    continue;
                };
                for (i, master) in masters.iter().enumerate() {
                    if master.info.as_ref().is_ok_and(|info| info.held) {
                        holding.insert(i);
                    }
                }
            }
            holding.into_iter().collect()
        })
    }

    /// The master a Redlock fault strikes: one that holds a grant of
    /// `lock` (a long hold just taken) when given; else, most of the time,
    /// one that holds a grant of a lock held now; else any. Whether it
    /// held a grant.
    fn aim_master(&mut self, lock: Option<String>) -> Result<(usize, bool)> {
        let n = self.redis.masters()?.0.len();
        if let Some(lock) = lock {
            let holding = self.masters_holding(&[lock]);
            if !holding.is_empty() {
                return Ok((*self.rng.pick(&holding), true));
            }
        }
        if self.rng.chance(0.8) {
            let held: Vec<String> = self.held().into_iter().map(|(name, _)| name).collect();
            let holding = self.masters_holding(&held);
            if !holding.is_empty() {
                return Ok((*self.rng.pick(&holding), true));
            }
        }
        Ok((self.rng.below(n as u64) as usize, false))
    }

    /// Whether a running worker holds `lock` now, as the logs tell.
    fn still_held(&mut self, lock: &str) -> bool {
        self.count_acquisitions();
        self.slots
            .iter()
            .filter_map(|s| self.open.get(&s.log))
            .any(|(held, _)| held == lock)
    }

    /// A fault of one of a Redlock's masters, aimed when it strikes. A
    /// kill (with or without the AOF) strikes a master that holds a grant
    /// of the lock the last kill struck, while that lock is held still;
    /// else it waits most of the time for a long hold and strikes one of
    /// its masters. Restarts without the AOF follow each other closely
    /// (see `Fault::gap_factor`), so that a majority of a long hold's
    /// masters can forget it while its holder holds on.
    fn strike_masters(&mut self, fault: Fault) -> Result<()> {
        let start = mono_ns();
        let fresh = match (fault, self.pursued.take()) {
            (Fault::MasterKill { .. }, Some(lock)) if self.still_held(&lock) => Some(lock),
            (Fault::MasterKill { .. }, _) => self.long_hold()?,
            _ => None,
        };
        if matches!(fault, Fault::MasterKill { .. }) {
            self.pursued.clone_from(&fresh);
        }
        let (master, at_holder) = self.aim_master(fresh)?;
        let fault = fault.at_master(master);
        let what = fault.to_string();
        match fault {
            Fault::MasterKill { down, .. } => {
                // Without the AOF the master keeps nothing (no RDB either):
                // it comes back empty.
                self.redis.masters()?.0[master].stop();
                let napped = self.nap(down);
                self.caught(&what, |redis| {
                    redis.masters()?.0[master].restart();
                    Ok(())
                })?;
                napped?;
            }
            Fault::MasterPause { stop, .. } => {
                let pid = self.redis.masters()?.0[master].pid();
                signal_pid(pid, libc::SIGSTOP);
                let napped = self.nap(stop);
                signal_pid(pid, libc::SIGCONT);
                napped?;
            }
            Fault::MasterLatency {
                replies_only,
                latency,
                lasting,
                ..
            } => {
                let proxy = &self.redis.masters()?.1[master];
                if replies_only {
                    proxy.set_reply_latency(latency);
                } else {
                    proxy.set_latency(latency);
                }
                let napped = self.nap(lasting);
                self.redis.masters()?.1[master].heal();
                napped?;
            }
            Fault::MasterBlackhole { held, .. } => {
                self.redis.masters()?.1[master].blackhole(true);
                let napped = self.nap(held);
                self.redis.masters()?.1[master].heal();
                napped?;
            }
            _ => bail!("{fault} is not a fault of a Redlock's masters"),
        }
        self.record(fault, None, at_holder, start);
        Ok(())
    }

    /// Heals every fault, lets every worker finish its section and
    /// release, and waits for them; a worker that fails to stop, or stops
    /// with an error, is noted as failed. Returns the moment the workers
    /// were told to stop.
    fn stop(&mut self) -> u64 {
        for s in &self.slots {
            if let Some(proxy) = &s.proxy {
                proxy.heal();
            }
            s.signal(libc::SIGCONT);
        }
        match &mut self.redis {
            Redis::Server(server) => {
                if !server.is_running() && !interrupted() {
                    server.restart();
                }
            }
            Redis::Masters { servers, proxies } => {
                for proxy in proxies.iter() {
                    proxy.heal();
                }
                for server in servers.iter_mut() {
                    signal_pid(server.pid(), libc::SIGCONT);
                    if !server.is_running() && !interrupted() {
                        server.restart();
                    }
                }
            }
            Redis::Cluster(_) | Redis::Sentinel(_) => {}
        }
        let end = mono_ns();
        for s in &mut self.slots {
            drop(s.child.stdin.take());
        }
        let grace = self.config.lease * 6 + Duration::from_secs(5);
        let deadline = Instant::now() + grace;
        for i in 0..self.slots.len() {
            loop {
                match self.slots[i].child.try_wait() {
                    Ok(Some(status)) if status.success() => break,
                    Ok(Some(status)) => {
                        self.fail(i, &format!("stopped with {status}"));
                        break;
                    }
                    Err(e) => {
                        self.fail(i, &format!("cannot be waited for ({e})"));
                        break;
                    }
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = self.slots[i].child.kill();
                        let _ = self.slots[i].child.wait();
                        self.fail(i, &format!("did not stop within {} s", grace.as_secs()));
                        break;
                    }
                    Ok(None) => thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        end
    }

    fn inputs(&self, run_end: u64) -> Result<Inputs> {
        let mut workers = Vec::new();
        for s in self.retired.iter().chain(&self.slots) {
            workers.push(WorkerLog {
                id: s.id.clone(),
                events: read_log(&s.log)?,
                killed_at: s.killed_at,
            });
        }
        Ok(Inputs {
            workers,
            faults: self.faults.clone(),
            served: self.resource.log(),
            keys_without_ttl: self.no_ttl.clone(),
            run_end,
            fault_slack: nanos(self.config.lease + self.config.command_timeout() * 2),
            lease: nanos(self.config.lease),
            worker_failures: self.failures.clone(),
        })
    }

    /// Writes what the checker reads beside the workers' logs.
    fn save(&self, inputs: &Inputs, started: u64) -> Result<()> {
        let mut faults = String::new();
        for f in &inputs.faults {
            writeln!(faults, "{f}")?;
        }
        write_file(&self.logs.join(FAULTS_FILE), &faults)?;
        let mut served = String::new();
        for s in &inputs.served {
            writeln!(served, "{s}")?;
        }
        write_file(&self.logs.join(RESOURCE_FILE), &served)?;
        let c = self.config;
        let record = json!({
            "schedule": c.schedule.name(),
            "seed": c.seed,
            "seconds": c.seconds,
            "acquisitions": c.acquisitions,
            "workers": c.workers,
            "lease_ms": c.lease.as_millis() as u64,
            "restart_grace_ms": c.restart_grace.as_millis() as u64,
            "node_timeout_ms": c.node_timeout.as_millis() as u64,
            "replicas": replicas_json(c.replicas),
            "replica_timeout_ms": c.replica_timeout.as_millis() as u64,
            "masters": c.masters,
            "workloads": c.workloads.iter().map(|w| w.name()).collect::<Vec<_>>().join(","),
            "locks": c.locks,
            "fenced": c.fenced,
            "started": started,
            "run_end": inputs.run_end,
            "fault_slack": inputs.fault_slack,
            "keys_without_ttl": inputs.keys_without_ttl,
            "worker_failures": inputs.worker_failures,
            "logs": inputs.workers.iter().map(|w| json!({
                "id": w.id,
                "killed_at": w.killed_at,
            })).collect::<Vec<_>>(),
        });
        write_file(&self.logs.join(RUN_FILE), &format!("{record:#}\n"))
    }
}

const FAULTS_FILE: &str = "faults.log";
const RESOURCE_FILE: &str = "resource.log";
const RUN_FILE: &str = "run.json";
/// How much of a failed worker's standard error a report shows.
const STDERR_TAIL: usize = 2000;

/// Cuts `master`'s replicas off from it (`on`), or lets them back: its
/// default user may no longer run `PSYNC` and `SYNC`, and their links are
/// closed, so they ask again every second and are refused. They answer
/// the sentinels meanwhile, which still count them fit to take over (a
/// replica under `CLIENT PAUSE WRITE`, as on a cluster, would not answer
/// a sentinel's ping queued behind its paused `PUBLISH`).
fn cut_replicas(master: &RedisServer, on: bool) -> Result<()> {
    let (acl, close) = if on {
        (["ACL", "SETUSER", "default", "-psync", "-sync"], true)
    } else {
        (["ACL", "SETUSER", "default", "+psync", "+sync"], false)
    };
    let reply = master.command(&acl).map_err(|e| anyhow::anyhow!("{e}"))?;
    anyhow::ensure!(reply == "OK", "{} answered {reply}", acl.join(" "));
    if close {
        master
            .command(&["CLIENT", "KILL", "TYPE", "replica"])
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}

/// Moves `slot` to shard `to` in steps: its keys one by one, `step`
/// apart, while clients meet ASK and TRYAGAIN; then what is left (keys
/// made meanwhile), and the slot itself.
fn migrate(cluster: &RedisCluster, slot: u16, to: usize, step: Duration) -> Result<()> {
    let migration = cluster.begin_migration(slot, to);
    let keys = migration
        .source()
        .command(&["CLUSTER", "GETKEYSINSLOT", &slot.to_string(), "1000"])
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for key in keys.lines().filter(|k| !k.is_empty()) {
        if interrupted() {
            break;
        }
        migration.move_key(key);
        let until = Instant::now() + step;
        while Instant::now() < until && !interrupted() {
            thread::sleep((until - Instant::now()).min(Duration::from_millis(20)));
        }
    }
    migration.finish();
    Ok(())
}

/// Sends `sig` to the process `pid` (a server the run started), if any.
fn signal_pid(pid: Option<u32>, sig: libc::c_int) {
    if let Some(pid) = pid.and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: a plain kill(2) of a process this run started.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Whether `dir` holds a kept run.
pub(crate) fn is_run_dir(dir: &Path) -> bool {
    dir.join(RUN_FILE).is_file()
}

/// The checker, again, over a run kept with `--keep-logs`.
pub(crate) fn recheck(dir: &Path) -> Result<RunReport> {
    let path = dir.join(RUN_FILE);
    let text =
        fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let record: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a run record", path.display()))?;
    let field = |name: &str| -> Result<&Value> {
        record
            .get(name)
            .ok_or_else(|| anyhow::anyhow!("{} has no {name}", path.display()))
    };
    let number = |name: &str| -> Result<u64> {
        field(name)?
            .as_u64()
            .ok_or_else(|| anyhow::anyhow!("{name} in {} is not a number", path.display()))
    };
    let text_of = |name: &str| -> Result<&str> {
        field(name)?
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("{name} in {} is not text", path.display()))
    };
    let strings = |name: &str| -> Result<Vec<String>> {
        field(name)?
            .as_array()
            .ok_or_else(|| anyhow::anyhow!("{name} in {} is not a list", path.display()))?
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| anyhow::anyhow!("{name} in {} holds a non-text", path.display()))
            })
            .collect()
    };
    let schedule = *Schedule::parse_list(text_of("schedule")?)?
        .first()
        .ok_or_else(|| anyhow::anyhow!("{} names no schedule", path.display()))?;
    let lease = Duration::from_millis(number("lease_ms")?);
    let config = RunConfig {
        schedule,
        seed: number("seed")?,
        seconds: field("seconds")?.as_f64().unwrap_or(0.0),
        acquisitions: number("acquisitions")?,
        workers: usize::try_from(number("workers")?)?,
        lease,
        workloads: Workload::parse_list(text_of("workloads")?)?,
        locks: usize::try_from(number("locks")?)?,
        fenced: field("fenced")?.as_bool().unwrap_or(true),
        restart_grace: Duration::from_millis(number("restart_grace_ms")?),
        // Kept since the cluster schedules; a run kept before ran on one server.
        node_timeout: record
            .get("node_timeout_ms")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_NODE_TIMEOUT, Duration::from_millis),
        // Kept since the sentinel schedules; a run kept before asked none,
        // and "connected" since every grant waits for the replicas by default.
        replicas: match record.get("replicas") {
            Some(Value::String(s)) if s == "connected" => None,
            other => Some(other.and_then(Value::as_u64).map_or(Ok(0), u32::try_from)?),
        },
        replica_timeout: record
            .get("replica_timeout_ms")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_REPLICA_TIMEOUT, Duration::from_millis),
        // Kept since the Redlock schedules.
        masters: record
            .get("masters")
            .and_then(Value::as_u64)
            .map_or(Ok(DEFAULT_MASTERS), usize::try_from)?,
        keep_logs: None,
    };
    let mut workers = Vec::new();
    for w in field("logs")?
        .as_array()
        .ok_or_else(|| anyhow::anyhow!("logs in {} is not a list", path.display()))?
    {
        let id = w
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| anyhow::anyhow!("a log in {} has no id", path.display()))?;
        workers.push(WorkerLog {
            id: id.to_owned(),
            events: read_log(&dir.join(format!("{id}.log")))?,
            killed_at: w.get("killed_at").and_then(Value::as_u64),
        });
    }
    let faults = read_lines(&dir.join(FAULTS_FILE))?
        .iter()
        .map(|l| l.parse::<Injected>())
        .collect::<Result<Vec<_>>>()?;
    let served = read_lines(&dir.join(RESOURCE_FILE))?
        .iter()
        .map(|l| l.parse::<Served>().map_err(|e| anyhow::anyhow!("{e}")))
        .collect::<Result<Vec<_>>>()?;
    let started = number("started")?;
    let inputs = Inputs {
        workers,
        faults,
        served,
        keys_without_ttl: strings("keys_without_ttl")?.into_iter().collect(),
        run_end: number("run_end")?,
        fault_slack: number("fault_slack")?,
        lease: nanos(lease),
        worker_failures: strings("worker_failures")?,
    };
    let findings = check::check(&inputs);
    Ok(RunReport {
        config,
        seconds: inputs.run_end.saturating_sub(started) as f64 / 1e9,
        faults: inputs.faults,
        findings,
    })
}

fn read_lines(path: &Path) -> Result<Vec<String>> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(text
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

fn read_log(path: &Path) -> Result<Vec<crate::events::Event>> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        // A worker killed before it logged anything leaves no file.
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    parse_log(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The `leasehold:` keys that have no TTL.
fn scan(url: &str) -> redis::RedisResult<Vec<String>> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_connection_with_timeout(Duration::from_millis(300))?;
    conn.set_read_timeout(Some(Duration::from_millis(500)))?;
    conn.set_write_timeout(Some(Duration::from_millis(500)))?;
    let mut cursor: u64 = 0;
    let mut without = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("leasehold:*")
            .arg("COUNT")
            .arg(1000)
            .query(&mut conn)?;
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            // On a cluster node, a key of a slot on its way to another node
            // may be answered with a redirect: that node is scanned too.
            pipe.ignore_errors();
            for k in &keys {
                pipe.cmd("PTTL").arg(k);
            }
            let ttls: Vec<redis::RedisResult<i64>> = pipe.query(&mut conn)?;
            without.extend(
                keys.into_iter()
                    .zip(ttls)
                    .filter(|(_, ttl)| matches!(ttl, Ok(-1)))
                    .map(|(k, _)| k),
            );
        }
        if next == 0 {
            return Ok(without);
        }
        cursor = next;
    }
}
