//! One run of one schedule: a fresh redis-server, the fenced resource, a
//! fault proxy and a worker process per worker slot, faults on the seeded
//! schedule, then the checker over what they logged.
//!
//! Every process the run starts is its child: the workers die with it
//! (`PR_SET_PDEATHSIG`), and on SIGINT, SIGTERM or SIGHUP the run stops its
//! faults, workers and servers before it returns.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use leasehold::redis;
use leasehold_testkit::{FaultProxy, RedisServer};
use serde_json::{json, Value};

use crate::check::{self, Findings, Inputs, WorkerLog};
use crate::events::{mono_ns, parse_log};
use crate::faults::{Fault, Injected, Schedule};
use crate::resource::Resource;
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
    pub(crate) keep_logs: Option<PathBuf>,
}

impl RunConfig {
    fn command_timeout(&self) -> Duration {
        self.lease / 4
    }

    /// Longer than any lease: no lock is granted through a server younger
    /// than this, so a restart that lost the locks grants none of them again
    /// while their old holders may still think they hold them.
    fn restart_grace(&self) -> Duration {
        self.lease + self.lease / 10
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

/// A worker process and the proxy its Redis traffic goes through.
struct Slot {
    id: String,
    child: Child,
    proxy: FaultProxy,
    log: PathBuf,
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

struct Run<'a> {
    config: &'a RunConfig,
    exe: PathBuf,
    server: RedisServer,
    resource: Resource,
    logs: PathBuf,
    slots: Vec<Slot>,
    retired: Vec<Slot>,
    next_id: usize,
    rng: Rng,
    faults: Vec<Injected>,
    no_ttl: BTreeSet<String>,
    rt: tokio::runtime::Runtime,
    client: leasehold::Client,
    last_scan: Instant,
    /// Acquisitions counted so far, and how far each log was read.
    counted: u64,
    read_to: std::collections::HashMap<PathBuf, u64>,
}

pub(crate) fn run(config: &RunConfig) -> Result<RunReport> {
    let scratch = tempfile::Builder::new()
        .prefix("leasehold-chaos-")
        .tempdir()
        .context("cannot make a directory for the logs")?;
    let logs = match &config.keep_logs {
        Some(dir) => {
            let dir = dir.join(format!("{}-{}", config.schedule.name(), config.seed));
            fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
            dir
        }
        None => scratch.path().to_owned(),
    };
    let server = if config.schedule.restarts() {
        RedisServer::try_start_with_args(&["--appendonly", "yes", "--appendfsync", "always"])
    } else {
        RedisServer::try_start()
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = leasehold::Client::builder(server.url())
        .name("leasehold-chaos")
        .command_timeout(Duration::from_millis(300))
        .build()?;
    let mut run = Run {
        config,
        exe: std::env::current_exe().context("cannot find this program to start workers")?,
        resource: Resource::start(config.fenced)?,
        server,
        logs,
        slots: Vec::new(),
        retired: Vec::new(),
        next_id: 1,
        rng: Rng::new(config.seed),
        faults: Vec::new(),
        no_ttl: BTreeSet::new(),
        rt,
        client,
        last_scan: Instant::now(),
        counted: 0,
        read_to: std::collections::HashMap::new(),
    };
    for _ in 0..config.workers {
        let slot = run.spawn()?;
        run.slots.push(slot);
    }
    let started = mono_ns();
    let until = Instant::now() + Duration::from_secs_f64(config.seconds);
    run.nap(config.lease);
    while (Instant::now() < until || run.count_acquisitions() < config.acquisitions)
        && !interrupted()
    {
        let fault = config.schedule.draw(&mut run.rng, config.lease);
        run.inject(fault)?;
        let gap = config
            .lease
            .mul_f64(fault.gap_factor() * (0.5 + run.rng.below(1000) as f64 / 1000.0));
        run.nap(gap);
    }
    let run_end = run.stop()?;
    if interrupted() {
        bail!("interrupted: the run was stopped and cleaned up");
    }
    run.scan_ttls(true);
    let inputs = run.inputs(run_end)?;
    let findings = check::check(&inputs);
    Ok(RunReport {
        config: config.clone(),
        seconds: (run_end - started) as f64 / 1e9,
        faults: run.faults,
        findings,
    })
}

impl Run<'_> {
    fn spawn(&mut self) -> Result<Slot> {
        let id = format!("w{}", self.next_id);
        self.next_id += 1;
        let proxy =
            FaultProxy::try_start(self.server.addr()).map_err(|e| anyhow::anyhow!("{e}"))?;
        let log = self.logs.join(format!("{id}.log"));
        let workloads: Vec<&str> = self.config.workloads.iter().map(|w| w.name()).collect();
        let mut cmd = Command::new(&self.exe);
        cmd.arg("worker")
            .args(["--id", &id])
            .args(["--url", &proxy.url()])
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
                &self.config.restart_grace().as_millis().to_string(),
            ])
            .args(["--workloads", &workloads.join(",")])
            .args(["--locks", &self.config.locks.to_string()])
            .args(["--seed", &self.rng.next().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(
                fs::File::create(self.logs.join(format!("{id}.stderr")))
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null()),
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
            killed_at: None,
        })
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
            self.counted += text[..whole]
                .split(|&b| b == b'\n')
                .filter(|line| line.starts_with(b"acq\t"))
                .count() as u64;
            self.read_to.insert(s.log.clone(), from + whole as u64);
        }
        self.counted
    }

    /// Sleeps until `d` has passed or the run is interrupted, checking the
    /// keys' TTLs on the way.
    fn nap(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while !interrupted() {
            let now = Instant::now();
            if now >= until {
                return;
            }
            if self.last_scan.elapsed() >= Duration::from_secs(1) {
                self.scan_ttls(false);
            }
            thread::sleep((until - now).min(Duration::from_millis(20)));
        }
    }

    /// Records every `leasehold:` key without a TTL. A scan that Redis does
    /// not answer (it is down or paused) is skipped, unless it is the last.
    fn scan_ttls(&mut self, last: bool) {
        self.last_scan = Instant::now();
        let attempts = if last { 20 } else { 1 };
        for _ in 0..attempts {
            match scan(&self.server.url()) {
                Ok(keys) => {
                    self.no_ttl.extend(keys);
                    return;
                }
                Err(_) if last => thread::sleep(Duration::from_millis(250)),
                Err(_) => return,
            }
        }
    }

    /// A worker that holds a lock now, most of the time; a random one
    /// otherwise (or when nobody holds a lock that we can see).
    fn target(&mut self) -> (usize, bool) {
        if self.rng.chance(0.8) {
            let names: Vec<String> = self
                .config
                .workloads
                .iter()
                .flat_map(|w| (0..self.config.locks).map(|i| w.lock_name(i)))
                .collect();
            let client = &self.client;
            let pids: Vec<u32> = self.rt.block_on(async {
                let mut pids = Vec::new();
                for name in &names {
                    let Ok(mutex) = client.mutex(name) else {
                        continue;
                    };
                    if let Ok(Ok(info)) =
                        tokio::time::timeout(Duration::from_millis(300), mutex.inspect()).await
                    {
                        pids.extend(info.holders.iter().filter_map(|h| h.pid));
                    }
                }
                pids
            });
            let holding: Vec<usize> = (0..self.slots.len())
                .filter(|&i| pids.contains(&self.slots[i].child.id()))
                .collect();
            if !holding.is_empty() {
                return (*self.rng.pick(&holding), true);
            }
        }
        (self.rng.below(self.slots.len() as u64) as usize, false)
    }

    fn inject(&mut self, fault: Fault) -> Result<()> {
        let (slot, at_holder) = if fault.targets_worker() {
            let (i, h) = self.target();
            (Some(i), h)
        } else {
            (None, false)
        };
        let start = mono_ns();
        let lease = self.config.lease;
        match fault {
            Fault::Pause(d) => {
                let i = slot.unwrap_or(0);
                self.slots[i].signal(libc::SIGSTOP);
                self.nap(d);
                self.slots[i].signal(libc::SIGCONT);
            }
            Fault::Kill => {
                let i = slot.unwrap_or(0);
                self.slots[i].signal(libc::SIGKILL);
                let _ = self.slots[i].child.wait();
                self.slots[i].killed_at = Some(mono_ns());
                let fresh = self.spawn()?;
                let old = std::mem::replace(&mut self.slots[i], fresh);
                self.retired.push(old);
            }
            Fault::Restart { aof, down } => {
                self.server.stop();
                if !aof {
                    let dir = self.server.dir().join("appendonlydir");
                    if dir.exists() {
                        fs::remove_dir_all(&dir)
                            .with_context(|| format!("cannot remove {}", dir.display()))?;
                    }
                }
                self.nap(down);
                self.server.restart();
            }
            Fault::ClientPause(d) => {
                let ms = d.as_millis().to_string();
                self.server
                    .command(&["CLIENT", "PAUSE", &ms, "ALL"])
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                self.nap(d);
            }
            Fault::Latency {
                replies_only,
                latency,
                lasting,
            } => {
                let proxy = &self.slots[slot.unwrap_or(0)].proxy;
                if replies_only {
                    proxy.set_reply_latency(latency);
                } else {
                    proxy.set_latency(latency);
                }
                self.nap(lasting);
                self.slots[slot.unwrap_or(0)].proxy.heal();
            }
            Fault::Blackhole(d) => {
                self.slots[slot.unwrap_or(0)].proxy.blackhole(true);
                self.nap(d);
                self.slots[slot.unwrap_or(0)].proxy.heal();
            }
            Fault::Reset => {
                self.slots[slot.unwrap_or(0)].proxy.reset();
            }
            Fault::HalfOpen => {
                self.slots[slot.unwrap_or(0)].proxy.freeze_existing();
                self.nap(lease);
            }
        }
        let target = slot.map(|i| match fault {
            Fault::Kill => self
                .retired
                .last()
                .map(|s| s.id.clone())
                .unwrap_or_default(),
            _ => self.slots[i].id.clone(),
        });
        self.faults.push(Injected {
            fault,
            target,
            at_holder,
            start,
            end: mono_ns(),
        });
        Ok(())
    }

    /// Heals every fault, lets every worker finish its section and
    /// release, and waits for them. Returns the moment the workers were
    /// told to stop.
    fn stop(&mut self) -> Result<u64> {
        for s in &self.slots {
            s.proxy.heal();
            s.signal(libc::SIGCONT);
        }
        if !self.server.is_running() && !interrupted() {
            self.server.restart();
        }
        let end = mono_ns();
        for s in &mut self.slots {
            drop(s.child.stdin.take());
        }
        let deadline = Instant::now() + self.config.lease * 6 + Duration::from_secs(5);
        for s in &mut self.slots {
            loop {
                match s.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = s.child.kill();
                        let _ = s.child.wait();
                        break;
                    }
                    Ok(None) => thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        Ok(end)
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
            fault_slack: (self.config.lease + self.config.command_timeout() * 2).as_nanos() as u64,
        })
    }
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
            for k in &keys {
                pipe.cmd("PTTL").arg(k);
            }
            let ttls: Vec<i64> = pipe.query(&mut conn)?;
            without.extend(
                keys.into_iter()
                    .zip(ttls)
                    .filter(|(_, ttl)| *ttl == -1)
                    .map(|(k, _)| k),
            );
        }
        if next == 0 {
            return Ok(without);
        }
        cursor = next;
    }
}
