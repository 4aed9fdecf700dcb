//! W2 for the primitives that admit more than one holder at a time: an
//! `RwLock` taken by 6 readers and 2 writers, and a `Semaphore` of 2
//! permits taken by all 8 workers, printed next to the `Mutex` and
//! `FairMutex` runs. Workers, lease, hold and the 30 s bound are W2's.
//!
//! A read-modify-write counter cannot check them as it checks a mutex, so
//! each role checks what its lock promises:
//! - a writer reads the counter, holds 1 ms, and writes it plus one: the
//!   counter must end equal to the writes (no two writers overlapped);
//! - a reader reads the counter, holds 1 ms, and reads it again: the two
//!   must be equal (no writer wrote during a read);
//! - a semaphore holder INCRs a count of holders inside, holds 1 ms, and
//!   DECRs it: no INCR may return more than the permits (two holders at
//!   once is the point, so a read-modify-write counter would lose updates
//!   legitimately).

use super::*;

use leasehold::LeaseGuard;

const RW_LOCK: &str = "w2:rwlock";
const SEMAPHORE: &str = "w2:semaphore";
const RW_READERS: usize = 6;
const SEM_PERMITS: u32 = 2;
const W2_INSIDE: &str = "w2:inside";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Reader,
    Writer,
    Permit,
}

impl Role {
    fn word(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Writer => "writer",
            Role::Permit => "holder",
        }
    }
}

/// A primitive W2 runs with shared holders.
#[derive(Debug, Clone, Copy)]
pub(super) enum Shared {
    RwLock,
    Semaphore,
}

pub(super) const SHARED_W2: &[Shared] = &[Shared::RwLock, Shared::Semaphore];

impl Shared {
    fn name(self) -> &'static str {
        match self {
            Shared::RwLock => "leasehold RwLock",
            Shared::Semaphore => "leasehold Semaphore",
        }
    }

    fn role(self, worker: usize) -> Role {
        match self {
            Shared::RwLock if worker < RW_READERS => Role::Reader,
            Shared::RwLock => Role::Writer,
            Shared::Semaphore => Role::Permit,
        }
    }

    fn roles(self) -> &'static [Role] {
        match self {
            Shared::RwLock => &[Role::Reader, Role::Writer],
            Shared::Semaphore => &[Role::Permit],
        }
    }
}

enum Handle {
    Rw(leasehold::RwLock),
    Sem(leasehold::Semaphore),
}

impl Handle {
    fn open(client: &Client, shared: Shared) -> Result<Handle> {
        Ok(match shared {
            Shared::RwLock => Handle::Rw(client.rw_lock(RW_LOCK)?),
            Shared::Semaphore => Handle::Sem(client.semaphore(SEMAPHORE, SEM_PERMITS)?),
        })
    }

    /// Waits at most [`WAIT`]; `None` when that ran out.
    async fn acquire(&self, role: Role) -> Result<Option<LeaseGuard>> {
        let got = match (self, role) {
            (Handle::Rw(lock), Role::Reader) => lock.read().acquire_timeout(WAIT).await,
            (Handle::Rw(lock), _) => lock.write().acquire_timeout(WAIT).await,
            (Handle::Sem(sem), _) => sem.acquire_timeout(WAIT).await,
        };
        match got {
            Ok(guard) => Ok(Some(guard)),
            Err(e) if e.is_timeout() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The whole lock (the write lock, every permit): the gate.
    async fn take_all(&self) -> Result<Option<LeaseGuard>> {
        Ok(match self {
            Handle::Rw(lock) => lock.write().try_acquire().await?,
            Handle::Sem(sem) => sem.try_acquire_many(SEM_PERMITS).await?,
        })
    }

    async fn waiting(&self) -> Result<u64> {
        let info = match self {
            Handle::Rw(lock) => lock.inspect().await?,
            Handle::Sem(sem) => sem.inspect().await?,
        };
        Ok(info.waiting_clients)
    }
}

struct Entry {
    role: Role,
    started: Duration,
    acquired: Duration,
    released: Duration,
}

#[derive(Default)]
struct Log {
    entries: Vec<Entry>,
    timeouts: usize,
    /// Reads that saw the counter change, or holders over the permits.
    violations: usize,
    /// The most holders inside at once, as INCR counted them.
    most_inside: u64,
}

struct RoleFigures {
    role: Role,
    acquisitions: usize,
    per_s: f64,
    wait: Option<Latencies>,
}

pub(super) struct SharedRun {
    shared: Shared,
    acquisitions: usize,
    per_s: f64,
    wait: Latencies,
    roles: Vec<RoleFigures>,
    per_worker: Vec<usize>,
    timeouts: usize,
    elapsed: Duration,
    writes: usize,
    counter: u64,
    violations: usize,
    most_inside: u64,
    cost: ServerCost,
    lock: LockCost,
}

impl SharedRun {
    /// What the run's check found: `None` when it held.
    pub(super) fn failure(&self) -> Option<String> {
        let lost = self.writes as i64 - self.counter as i64;
        match self.shared {
            Shared::RwLock if lost != 0 || self.violations > 0 => Some(format!(
                "{} lost {lost} writes and saw {} reads change under them",
                self.shared.name(),
                self.violations
            )),
            Shared::Semaphore if self.violations > 0 => Some(format!(
                "{} let more than {SEM_PERMITS} holders in {} times (at most {} at once)",
                self.shared.name(),
                self.violations,
                self.most_inside
            )),
            _ => None,
        }
    }

    fn check_text(&self) -> String {
        match (self.failure(), self.shared) {
            (Some(_), Shared::RwLock) => format!(
                "LOST {} TORN {}",
                self.writes as i64 - self.counter as i64,
                self.violations
            ),
            (Some(_), Shared::Semaphore) => format!("OVER {}", self.violations),
            (None, _) => "ok".to_owned(),
        }
    }

    /// Its name, acquisitions and server cost, for the per-script pass.
    pub(super) fn per_script(&self) -> (&'static str, usize, &ServerCost) {
        (self.shared.name(), self.acquisitions, &self.cost)
    }

    fn role(&self, role: Role) -> Option<&RoleFigures> {
        self.roles.iter().find(|r| r.role == role)
    }
}

pub(super) fn w2_shared(bench: &Bench, shared: Shared) -> Result<SharedRun> {
    let rt = &bench.rt;
    let mut stats = bench.stats.clone();
    let gate_client = lock_client(&bench.url)?;
    let gate = Handle::open(&gate_client, shared)?;
    let held = rt.block_on(async {
        for key in [W2_COUNTER, W2_INSIDE] {
            redis::cmd("SET")
                .arg(key)
                .arg(0)
                .query_async::<()>(&mut stats)
                .await?;
        }
        gate.take_all()
            .await?
            .ok_or_else(|| BoxError::from("the W2 lock was held before W2"))
    })?;

    let origin = Instant::now();
    let url = bench.url.clone();
    let run_for = bench.plan.w2_run;
    let mut workers = Workers::spawn("W2", W2_WORKERS, move |id, line| {
        worker(shared, id, &url, origin, run_for, line)
    })?;
    rt.block_on(async {
        let deadline = Instant::now() + SETUP_TIMEOUT;
        loop {
            workers.check()?;
            let waiting = gate.waiting().await?;
            if waiting >= W2_WORKERS as u64 {
                return Ok::<(), BoxError>(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "only {waiting} of {W2_WORKERS} W2 workers waited within 60 s"
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })?;
    rt.block_on(held.release())?;
    workers.wait_ready()?;

    let before = rt.block_on(server_snapshot(&mut stats))?;
    let cpu_before = process_cpu()?;
    let start = workers.start()?;
    let logs = workers.join()?;
    let client_cpu = process_cpu()?.saturating_sub(cpu_before);
    let after = rt.block_on(server_snapshot(&mut stats))?;
    let counter: Option<u64> =
        rt.block_on(redis::cmd("GET").arg(W2_COUNTER).query_async(&mut stats))?;

    let per_worker: Vec<usize> = logs.iter().map(|log| log.entries.len()).collect();
    let timeouts = logs.iter().map(|log| log.timeouts).sum();
    let violations = logs.iter().map(|log| log.violations).sum();
    let most_inside = logs.iter().map(|log| log.most_inside).max().unwrap_or(0);
    let entries: Vec<Entry> = logs.into_iter().flat_map(|log| log.entries).collect();
    let last_release = entries
        .iter()
        .map(|e| e.released)
        .max()
        .ok_or("W2 made no acquisition")?;
    let elapsed = last_release.saturating_sub(start - origin);
    let waits = |role: Option<Role>| -> Vec<Duration> {
        entries
            .iter()
            .filter(|e| role.is_none_or(|r| e.role == r))
            .map(|e| e.acquired - e.started)
            .collect()
    };
    let roles = shared
        .roles()
        .iter()
        .map(|&role| {
            let samples = waits(Some(role));
            RoleFigures {
                role,
                acquisitions: samples.len(),
                per_s: per_second(samples.len(), elapsed),
                wait: Latencies::new(samples).ok(),
            }
        })
        .collect();
    let count = |role| entries.iter().filter(|e| e.role == role).count() as u64;
    let (reads, writes, permits) = (
        count(Role::Reader),
        count(Role::Writer),
        count(Role::Permit),
    );
    let data = [
        ("get", 2 * reads + writes),
        ("set", writes),
        ("incr", permits),
        ("decr", permits),
    ];
    let cost = ServerCost::between(&before, &after);
    let n = entries.len();
    let own_total: u64 = data.iter().map(|(_, k)| k).sum();
    let lock = LockCost {
        calls: round3(cost.commands().saturating_sub(own_total) as f64 / n.max(1) as f64),
        round_trips: round3(
            cost.client_issued(&bench.kinds, &["ping"], &data) as f64 / n.max(1) as f64,
        ),
        cpu_us: round1(cost.cpu_us / n.max(1) as f64),
        client_cpu_us: round1(client_cpu.as_secs_f64() * 1e6 / n.max(1) as f64),
    };
    Ok(SharedRun {
        shared,
        acquisitions: n,
        per_s: per_second(n, elapsed),
        wait: Latencies::new(waits(None))?,
        roles,
        per_worker,
        timeouts,
        elapsed,
        writes: writes as usize,
        counter: counter.unwrap_or(0),
        violations,
        most_inside,
        cost,
        lock,
    })
}

fn worker(
    shared: Shared,
    id: usize,
    url: &str,
    origin: Instant,
    run_for: Duration,
    line: StartLine,
) -> Result<Option<Log>> {
    let role = shared.role(id);
    line.run(
        async || {
            let client = lock_client(url)?;
            let handle = Handle::open(&client, shared)?;
            let mut data = connect(url).await?;
            redis::cmd("GET")
                .arg(W2_COUNTER)
                .query_async::<Option<u64>>(&mut data)
                .await?;
            let guard = handle
                .acquire(role)
                .await?
                .ok_or("the warm-up acquire waited 30 s")?;
            guard.release().await?;
            Ok((client, handle, data))
        },
        async |state: (Client, Handle, MultiplexedConnection), start| {
            let (_client, handle, mut data) = state;
            let end = start + run_for;
            let mut log = Log::default();
            while Instant::now() < end {
                let started = Instant::now();
                let Some(guard) = handle.acquire(role).await? else {
                    log.timeouts += 1;
                    continue;
                };
                let acquired = Instant::now();
                critical_section(role, &mut data, &mut log).await?;
                guard.release().await?;
                let released = Instant::now();
                log.entries.push(Entry {
                    role,
                    started: started - origin,
                    acquired: acquired - origin,
                    released: released - origin,
                });
            }
            Ok(log)
        },
    )
}

async fn critical_section(
    role: Role,
    data: &mut MultiplexedConnection,
    log: &mut Log,
) -> Result<()> {
    match role {
        Role::Reader => {
            let first: Option<u64> = redis::cmd("GET").arg(W2_COUNTER).query_async(data).await?;
            thread::sleep(W2_HOLD);
            let second: Option<u64> = redis::cmd("GET").arg(W2_COUNTER).query_async(data).await?;
            if first != second {
                log.violations += 1;
            }
        }
        Role::Writer => {
            let value: Option<u64> = redis::cmd("GET").arg(W2_COUNTER).query_async(data).await?;
            thread::sleep(W2_HOLD);
            redis::cmd("SET")
                .arg(W2_COUNTER)
                .arg(value.unwrap_or(0) + 1)
                .query_async::<()>(data)
                .await?;
        }
        Role::Permit => {
            let inside: u64 = redis::cmd("INCR").arg(W2_INSIDE).query_async(data).await?;
            log.most_inside = log.most_inside.max(inside);
            if inside > u64::from(SEM_PERMITS) {
                log.violations += 1;
            }
            thread::sleep(W2_HOLD);
            redis::cmd("DECR")
                .arg(W2_INSIDE)
                .query_async::<()>(data)
                .await?;
        }
    }
    Ok(())
}

/// The shared runs beside the Mutex and FairMutex runs of W2.
pub(super) fn print_w2_shared(plan: &Plan, exclusive: &[W2Run], shared: &[SharedRun]) {
    println!();
    println!(
        "W2 shared holders: {W2_WORKERS} workers, {} s, {} ms hold; RwLock {RW_READERS} readers + \
         {} writers, Semaphore of {SEM_PERMITS} permits",
        plan.w2_run.as_secs(),
        W2_HOLD.as_millis(),
        W2_WORKERS - RW_READERS
    );
    let mutexes: Vec<&W2Run> = exclusive
        .iter()
        .filter(|r| r.library.starts_with("leasehold "))
        .collect();
    let mut header = format!("  {:<44}", "");
    for name in mutexes
        .iter()
        .map(|r| r.library)
        .chain(shared.iter().map(|r| r.shared.name()))
    {
        header.push_str(&format!(" {name:>COLUMN$}"));
    }
    println!("{header}");
    let line =
        |label: &str, ours: &dyn Fn(&W2Run) -> String, theirs: &dyn Fn(&SharedRun) -> String| {
            let mut text = format!("  {label:<44}");
            for cell in mutexes
                .iter()
                .map(|r| ours(r))
                .chain(shared.iter().map(theirs))
            {
                text.push_str(&format!(" {cell:>COLUMN$}"));
            }
            println!("{text}");
        };
    let none = |_: &W2Run| "-".to_owned();
    let of_role = |role: Role, f: fn(&RoleFigures) -> String| {
        move |r: &SharedRun| r.role(role).map_or("-".to_owned(), f)
    };
    let wait_max = |f: &RoleFigures| {
        f.wait
            .as_ref()
            .map_or("-".to_owned(), |w| number(micros(w.max())))
    };
    let wait_p99 = |f: &RoleFigures| {
        f.wait
            .as_ref()
            .map_or("-".to_owned(), |w| number(w.p99_us()))
    };
    line(
        "acquisitions",
        &|r| number(r.acquisitions.len() as f64),
        &|r| number(r.acquisitions as f64),
    );
    line(
        "acquisitions/s",
        &|r| number(r.figures.acquisitions_per_s),
        &|r| number(r.per_s),
    );
    line(
        "reader acquisitions/s",
        &none,
        &of_role(Role::Reader, |f| number(f.per_s)),
    );
    line(
        "writer acquisitions/s",
        &none,
        &of_role(Role::Writer, |f| number(f.per_s)),
    );
    line(
        "wait to acquire p50 µs",
        &|r| number(r.figures.wait.p50_us()),
        &|r| number(r.wait.p50_us()),
    );
    line(
        "wait to acquire p99 µs",
        &|r| number(r.figures.wait.p99_us()),
        &|r| number(r.wait.p99_us()),
    );
    line(
        "wait to acquire max µs",
        &|r| number(micros(r.figures.wait.max())),
        &|r| number(micros(r.wait.max())),
    );
    line(
        "reader wait p99 µs",
        &none,
        &of_role(Role::Reader, wait_p99),
    );
    line(
        "reader wait max µs",
        &none,
        &of_role(Role::Reader, wait_max),
    );
    line(
        "writer wait p99 µs",
        &none,
        &of_role(Role::Writer, wait_p99),
    );
    line(
        "writer wait max µs",
        &none,
        &of_role(Role::Writer, wait_max),
    );
    line(
        "most holders at once",
        &|_| "1".to_owned(),
        &|r| match r.shared {
            Shared::Semaphore => r.most_inside.to_string(),
            Shared::RwLock => "-".to_owned(),
        },
    );
    line(
        "share per worker min / max",
        &|r| format!("{} / {}", r.figures.share_min, r.figures.share_max),
        &|r| {
            let n = r.acquisitions.max(1) as f64;
            let min = r.per_worker.iter().copied().min().unwrap_or(0) as f64 / n;
            let max = r.per_worker.iter().copied().max().unwrap_or(0) as f64 / n;
            format!("{} / {}", round3(min), round3(max))
        },
    );
    line(
        "acquires that waited out 30 s",
        &|r| r.timeouts.to_string(),
        &|r| r.timeouts.to_string(),
    );
    line(
        "check",
        &|r| {
            if r.counter == r.acquisitions.len() as u64 {
                "ok".to_owned()
            } else {
                "LOST".to_owned()
            }
        },
        &SharedRun::check_text,
    );
    line(
        "redis calls / acquisition",
        &|r| number(r.lock.calls),
        &|r| number(r.lock.calls),
    );
    line(
        "round trips / acquisition",
        &|r| number(r.lock.round_trips),
        &|r| number(r.lock.round_trips),
    );
    line(
        "redis CPU µs / acquisition",
        &|r| number(r.lock.cpu_us),
        &|r| number(r.lock.cpu_us),
    );
    row(
        "",
        "checks: mutex counter = acquisitions; RwLock counter = writes and no \
         read saw it change; Semaphore no INCR of the holders inside > permits",
    );
    row(
        "",
        "calls and round trips leave out the critical section's data commands \
         (2 per acquisition); CPU includes them",
    );
    print_commands(
        "W2 shared holders (with the critical section's data commands)",
        "acquisition",
        &shared
            .iter()
            .map(|r| (r.shared.name(), &r.cost, r.acquisitions))
            .collect::<Vec<_>>(),
    );
}

pub(super) fn w2_shared_json(plan: &Plan, runs: &[SharedRun]) -> Value {
    let libraries: Map<String, Value> = runs
        .iter()
        .map(|r| {
            let mut figures = json!({
                "elapsed_s": round3(r.elapsed.as_secs_f64()),
                "acquisitions": r.acquisitions,
                "acquisitions_per_s": r.per_s,
                "acquisitions_per_worker": r.per_worker,
                "wait_p50_us": r.wait.p50_us(),
                "wait_p99_us": r.wait.p99_us(),
                "wait_max_us": micros(r.wait.max()),
                "acquires_timed_out": r.timeouts,
                "check_ok": r.failure().is_none(),
                "data_round_trips_per_acquisition": 2,
            });
            if let Some(object) = figures.as_object_mut() {
                for f in &r.roles {
                    let role = f.role.word();
                    object.insert(format!("{role}_acquisitions"), json!(f.acquisitions));
                    object.insert(format!("{role}_acquisitions_per_s"), json!(f.per_s));
                    if let Some(wait) = &f.wait {
                        object.insert(format!("{role}_wait_p50_us"), json!(wait.p50_us()));
                        object.insert(format!("{role}_wait_p99_us"), json!(wait.p99_us()));
                        object.insert(format!("{role}_wait_max_us"), json!(micros(wait.max())));
                    }
                }
                match r.shared {
                    Shared::RwLock => {
                        object.insert("writes".to_owned(), json!(r.writes));
                        object.insert("counter".to_owned(), json!(r.counter));
                        object.insert("reads_changed_under_them".to_owned(), json!(r.violations));
                    }
                    Shared::Semaphore => {
                        object.insert("permits".to_owned(), json!(SEM_PERMITS));
                        object.insert("most_holders_at_once".to_owned(), json!(r.most_inside));
                        object.insert("over_permits".to_owned(), json!(r.violations));
                    }
                }
            }
            let figures = with(figures, lock_cost_json(&r.lock, "acquisition", &r.cost));
            (r.shared.name().to_owned(), figures)
        })
        .collect();
    json!({
        "workload": "W2-shared",
        "quick": plan.quick,
        "workers": W2_WORKERS,
        "rwlock_readers": RW_READERS,
        "rwlock_writers": W2_WORKERS - RW_READERS,
        "semaphore_permits": SEM_PERMITS,
        "seconds": plan.w2_run.as_secs_f64(),
        "hold_ms": W2_HOLD.as_secs_f64() * 1e3,
        "checks": {
            "rwlock": "the counter equals the writes (read, hold, write + 1 by writers), and no reader saw it change between its two reads",
            "semaphore": "an INCR of the holders inside never returned more than the permits",
        },
        "calls_and_round_trips_exclude": "the critical section's data commands",
        "libraries": libraries,
    })
}
