//! `--per-script`: which script ran, how often and for how long, per
//! acquisition (or attempt), in a pass of W1, W2 and W3 of its own.
//!
//! `INFO commandstats` counts every FCALL (or EVALSHA) under one name,
//! whichever script it ran. This pass logs every command the server runs
//! (`SLOWLOG` with `slowlog-log-slower-than 0`), reads and clears the log
//! every few milliseconds from a thread of its own (`SLOWLOG GET` and
//! `SLOWLOG RESET` in one transaction, so that no entry falls between
//! them), and names each script: a function by its name in leasehold's
//! library, a script sent by hash by the file of `src/scripts/` it was
//! built from (its hash is computed here the way the library builds it),
//! rslock's unlock by its text. A hash nobody here built is shown as such.
//! Every server snapshot of the pass reads the log's totals, so a run's
//! figures cover exactly what its `INFO` figures cover.
//!
//! Logging every command costs the server time of its own: the pass's
//! rates and CPU are its own, not the bench's; its calls are the same, and
//! its µs per call are what `SLOWLOG` measured around each command (a
//! script's include the commands it ran).

use std::path::Path;
use std::sync::{Mutex as StdMutex, OnceLock};

use super::*;

/// The log, while the pass runs; [`snapshot`] reads it.
static LOG: OnceLock<ScriptLog> = OnceLock::new();
/// How long the log may fill before it is read.
const READ_EVERY: Duration = Duration::from_millis(5);
/// `slowlog-max-len` for the pass: far more than a few milliseconds of
/// commands.
const MAX_LEN: u64 = 100_000;
/// The name of the log's own connection, whose commands are left out.
const READER_NAME: &str = "bench-slowlog-reader";
/// The line of `lib.lua` a cluster's scripts send with SPUBLISH instead.
const PUBLISH_LINE: &str = "redis.pcall('PUBLISH', channel, message)";
/// The address `SLOWLOG` gives a command a script ran.
const SCRIPT_ADDR: &str = "?:0";
/// What the table adds to the name of a command a script ran.
const IN_SCRIPT: &str = " (in a script)";
/// rslock 0.10's release (`UNLOCK_SCRIPT` in its `lock.rs`).
const RSLOCK_UNLOCK: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
else
  return 0
end
"#;

/// One script's (or command's) calls and the µs `SLOWLOG` measured.
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct ScriptStat {
    pub(super) calls: u64,
    pub(super) usec: u64,
}

/// What the log read, by script or command.
#[derive(Clone, Default, Debug)]
pub(super) struct Totals {
    pub(super) stats: BTreeMap<String, ScriptStat>,
    /// Entries that fell out of the log before it was read (a gap in
    /// their ids).
    pub(super) lost: u64,
}

impl Totals {
    /// What `after` read that `before` had not.
    pub(super) fn between(before: Option<&Totals>, after: Option<&Totals>) -> Totals {
        let (Some(before), Some(after)) = (before, after) else {
            return Totals::default();
        };
        let stats = after
            .stats
            .iter()
            .map(|(name, s)| {
                let was = before.stats.get(name).copied().unwrap_or_default();
                let stat = ScriptStat {
                    calls: s.calls.saturating_sub(was.calls),
                    usec: s.usec.saturating_sub(was.usec),
                };
                (name.clone(), stat)
            })
            .filter(|(_, s)| s.calls > 0)
            .collect();
        Totals {
            stats,
            lost: after.lost.saturating_sub(before.lost),
        }
    }

    pub(super) fn add(&mut self, other: &Totals) {
        for (name, s) in &other.stats {
            let sum = self.stats.entry(name.clone()).or_default();
            sum.calls += s.calls;
            sum.usec += s.usec;
        }
        self.lost += other.lost;
    }
}

type Reply = mpsc::Sender<Result<Totals, String>>;

struct ScriptLog {
    ask: StdMutex<mpsc::Sender<Reply>>,
}

/// The log's totals so far, while the pass runs (`None` otherwise).
pub(super) fn snapshot() -> Result<Option<Totals>> {
    let Some(log) = LOG.get() else {
        return Ok(None);
    };
    let (tx, rx) = mpsc::channel();
    log.ask
        .lock()
        .map_err(|_| "the slowlog reader's lock is poisoned")?
        .send(tx)
        .map_err(|_| "the slowlog reader stopped")?;
    let totals = rx
        .recv_timeout(SETUP_TIMEOUT)
        .map_err(|_| "the slowlog reader did not answer")??;
    Ok(Some(totals))
}

/// Starts logging every command of the server at `url`, read by a thread
/// of its own until the program ends.
fn start(url: &str) -> Result<()> {
    let names = script_names()?;
    let (ask, asked) = mpsc::channel::<Reply>();
    let (ready_tx, ready) = mpsc::channel::<Result<(), String>>();
    let url = url.to_owned();
    thread::Builder::new()
        .name("slowlog-reader".to_owned())
        .spawn(move || {
            let started = current_thread_runtime().and_then(|rt| {
                let reader = rt.block_on(Reader::connect(&url, names))?;
                Ok((rt, reader))
            });
            let (rt, mut reader) = match started {
                Ok(started) => started,
                Err(e) => {
                    let _ = ready_tx.send(Err(chain(&*e)));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(()));
            // An error while nobody asks is kept for the next question.
            let mut failed: Option<String> = None;
            loop {
                match asked.recv_timeout(READ_EVERY) {
                    Ok(reply) => {
                        let read = rt.block_on(reader.read()).map_err(|e| chain(&*e));
                        let answer = match (failed.take(), read) {
                            (Some(e), _) | (None, Err(e)) => Err(e),
                            (None, Ok(())) => Ok(reader.totals.clone()),
                        };
                        let _ = reply.send(answer);
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if let Err(e) = rt.block_on(reader.read()) {
                            failed.get_or_insert(chain(&*e));
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            }
        })?;
    ready
        .recv_timeout(SETUP_TIMEOUT)
        .map_err(|_| "the slowlog reader did not start")??;
    LOG.set(ScriptLog {
        ask: StdMutex::new(ask),
    })
    .map_err(|_| "the slowlog reader was started twice")?;
    Ok(())
}

struct Reader {
    conn: MultiplexedConnection,
    /// Script name by hash.
    names: BTreeMap<String, String>,
    totals: Totals,
    /// The id the next entry logged should have: each read's own `SLOWLOG
    /// GET` takes one that its `SLOWLOG RESET` then clears.
    next_id: Option<u64>,
}

impl Reader {
    async fn connect(url: &str, names: BTreeMap<String, String>) -> Result<Reader> {
        let mut conn = connect(url).await?;
        redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(READER_NAME)
            .query_async::<()>(&mut conn)
            .await?;
        for (setting, value) in [("slowlog-max-len", MAX_LEN), ("slowlog-log-slower-than", 0)] {
            redis::cmd("CONFIG")
                .arg("SET")
                .arg(setting)
                .arg(value)
                .query_async::<()>(&mut conn)
                .await?;
        }
        redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async::<()>(&mut conn)
            .await?;
        Ok(Reader {
            conn,
            names,
            totals: Totals::default(),
            next_id: None,
        })
    }

    /// Reads and clears the log, adding its entries to the totals.
    async fn read(&mut self) -> Result<()> {
        let (entries, ()): (redis::Value, ()) = redis::pipe()
            .atomic()
            .cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .cmd("SLOWLOG")
            .arg("RESET")
            .query_async(&mut self.conn)
            .await?;
        let redis::Value::Array(entries) = entries else {
            return Err(format!("SLOWLOG GET answered {entries:?}").into());
        };
        let mut ids = Vec::with_capacity(entries.len());
        for entry in &entries {
            let Some(entry) = Entry::of(entry) else {
                return Err(format!("unexpected SLOWLOG entry {entry:?}").into());
            };
            ids.push(entry.id);
            if entry.client_name == READER_NAME {
                continue;
            }
            let Some(command) = entry.args.first() else {
                continue;
            };
            if command.eq_ignore_ascii_case("info") {
                // The bench's own snapshots.
                continue;
            }
            let mut name = label(&entry.args, &self.names);
            if entry.addr == SCRIPT_ADDR {
                name.push_str(IN_SCRIPT);
            }
            let stat = self.totals.stats.entry(name).or_default();
            stat.calls += 1;
            stat.usec += entry.usec;
        }
        // Entries come newest first; ids count every entry ever logged.
        ids.sort_unstable();
        let mut next = self.next_id;
        for id in ids {
            if let Some(next) = next {
                self.totals.lost += id.saturating_sub(next);
            }
            next = Some(id + 1);
        }
        // This read's SLOWLOG GET took the next id, and its RESET cleared it.
        self.next_id = next.map(|id| id + 1);
        Ok(())
    }
}

/// One `SLOWLOG GET` entry: id, time, µs, arguments, address, client name.
struct Entry {
    id: u64,
    usec: u64,
    args: Vec<String>,
    addr: String,
    client_name: String,
}

impl Entry {
    fn of(value: &redis::Value) -> Option<Entry> {
        let redis::Value::Array(fields) = value else {
            return None;
        };
        let int = |v: Option<&redis::Value>| match v {
            Some(redis::Value::Int(n)) => u64::try_from(*n).ok(),
            _ => None,
        };
        let args = match fields.get(3) {
            Some(redis::Value::Array(args)) => args.iter().filter_map(text).collect(),
            _ => return None,
        };
        Some(Entry {
            id: int(fields.first())?,
            usec: int(fields.get(2))?,
            args,
            addr: fields.get(4).and_then(text).unwrap_or_default(),
            client_name: fields.get(5).and_then(text).unwrap_or_default(),
        })
    }
}

/// A command's name in the table: a script by the name it was built
/// under, anything else by its command (and subcommand).
fn label(args: &[String], names: &BTreeMap<String, String>) -> String {
    let command = args[0].to_ascii_uppercase();
    let second = args.get(1).map(String::as_str).unwrap_or("");
    match command.as_str() {
        "EVALSHA" | "EVALSHA_RO" => match names.get(&second.to_ascii_lowercase()) {
            Some(name) => format!("{name} ({command})"),
            None => format!("{command} {}", second.get(..12).unwrap_or(second)),
        },
        "EVAL" | "EVAL_RO" => {
            let hash = redis::Script::new(second).get_hash().to_owned();
            match names.get(&hash) {
                Some(name) => format!("{name} ({command})"),
                None => format!("{command} (a script not known here)"),
            }
        }
        "FCALL" | "FCALL_RO" => {
            // leasehold_<16 hex digits>_<script>
            let name = second
                .strip_prefix("leasehold_")
                .and_then(|rest| rest.get(17..))
                .filter(|_| second.as_bytes().get(26) == Some(&b'_'));
            match name {
                Some(name) => format!("{name} ({command})"),
                None => format!("{command} {second}"),
            }
        }
        "SCRIPT" | "FUNCTION" | "CLIENT" | "CONFIG" => {
            format!("{command} {}", second.to_ascii_uppercase())
        }
        _ => command,
    }
}

/// The hash of every script leasehold can build from `src/scripts/` (its
/// operation after `lib.lua`, `watched.lua` and `family.lua` as
/// `conn/scripts.rs` puts them together, publishing either way), and of
/// rslock's unlock and the floor's release.
fn script_names() -> Result<BTreeMap<String, String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/scripts");
    let read = |name: &str| -> Result<String> {
        std::fs::read_to_string(dir.join(name))
            .map_err(|e| format!("cannot read {}: {e}", dir.join(name).display()).into())
    };
    let lib = read("lib.lua")?;
    let family = read("family.lua")?;
    let watched = read("watched.lua")?;
    let libs = [
        lib.clone(),
        lib.replace(PUBLISH_LINE, "redis.pcall('SPUBLISH', channel, message)"),
    ];
    let middles = [
        String::new(),
        family.clone(),
        watched.clone(),
        format!("{watched}{family}"),
    ];
    let mut names = BTreeMap::new();
    for file in std::fs::read_dir(&dir)? {
        let path = file?.path();
        let Some(op) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".lua"))
        else {
            continue;
        };
        if ["lib", "family", "watched"].contains(&op) {
            continue;
        }
        let body = std::fs::read_to_string(&path)?;
        for lib in &libs {
            for middle in &middles {
                let hash = redis::Script::new(&format!("{lib}{middle}{body}"))
                    .get_hash()
                    .to_owned();
                names.insert(hash, op.to_owned());
            }
        }
    }
    for (name, body) in [
        ("rslock unlock", RSLOCK_UNLOCK),
        ("floor release", FLOOR_RELEASE),
    ] {
        names.insert(redis::Script::new(body).get_hash().to_owned(), name.into());
    }
    Ok(names)
}

/// One run of the pass: its workload, library, count and what the log
/// read during it.
struct PassRun {
    workload: &'static str,
    library: &'static str,
    per: &'static str,
    n: usize,
    cost_cpu_us: f64,
    scripts: Totals,
}

/// Runs the pass on the bench's server: W1, W2 and W3 as in the full run,
/// each leasehold primitive next to rslock, and prints the table and one
/// JSON line.
pub(super) fn per_script(bench: &Bench, single: &Servers) -> Result<()> {
    start(&bench.url)?;
    let plan = &bench.plan;
    let mut runs = Vec::new();
    for w1 in [w1::<LeaseholdMutex>(bench)?, w1::<Rslock>(bench)?] {
        runs.push(PassRun {
            workload: "W1",
            library: w1.library,
            per: "cycle",
            n: plan.cycles,
            cost_cpu_us: w1.run.cost.cpu_us,
            scripts: w1.run.cost.scripts.clone(),
        });
    }
    let mut w2_runs = Vec::new();
    for run in LEASEHOLD_W2 {
        w2_runs.push(run(bench, single)?);
    }
    w2_runs.push(w2::<Rslock>(bench, single)?);
    for r in &w2_runs {
        runs.push(PassRun {
            workload: "W2",
            library: r.library,
            per: "acquisition",
            n: r.acquisitions.len(),
            cost_cpu_us: r.cost.cpu_us,
            scripts: r.cost.scripts.clone(),
        });
    }
    for &shared in w2_shared::SHARED_W2 {
        let r = w2_shared::w2_shared(bench, shared)?;
        let (library, n, cost) = r.per_script();
        runs.push(PassRun {
            workload: "W2",
            library,
            per: "acquisition",
            n,
            cost_cpu_us: cost.cpu_us,
            scripts: cost.scripts.clone(),
        });
    }
    for r in [
        w3::<LeaseholdMutex>(bench, single)?,
        w3::<Rslock>(bench, single)?,
    ] {
        runs.push(PassRun {
            workload: "W3",
            library: r.library,
            per: "attempt",
            n: r.attempts,
            cost_cpu_us: r.cost.cpu_us,
            scripts: r.cost.scripts.clone(),
        });
    }
    print(plan, &runs);
    println!();
    println!("{}", json(plan, &runs));
    Ok(())
}

fn print(plan: &Plan, runs: &[PassRun]) {
    println!(
        "leasehold lock workloads ({} run), per script: every command logged by SLOWLOG \
         (slowlog-log-slower-than 0), a pass of its own",
        if plan.quick { "quick" } else { "full" },
    );
    println!(
        "  µs are SLOWLOG's, around each command: a script's include the commands it ran \
         (listed \"in a script\" after the commands clients sent); W2's GET and SET sent by \
         clients include the critical section's own (1 each per acquisition)"
    );
    for run in runs {
        let n = run.n.max(1) as f64;
        println!();
        println!(
            "{} {}: {} {}s{}",
            run.workload,
            run.library,
            run.n,
            run.per,
            if run.scripts.lost > 0 {
                format!(
                    "; {} log entries lost before they were read: the figures below miss them",
                    run.scripts.lost
                )
            } else {
                String::new()
            }
        );
        println!(
            "  {:<36} {:>10} {:>12} {:>12} {:>10} {:>12}",
            "script or command",
            "calls",
            format!("calls/{}", short(run.per)),
            "Redis µs",
            "µs/call",
            format!("µs/{}", short(run.per)),
        );
        let mut rows: Vec<(&String, &ScriptStat)> = run.scripts.stats.iter().collect();
        rows.sort_by(|a, b| b.1.usec.cmp(&a.1.usec).then(a.0.cmp(b.0)));
        let (inner, sent): (Vec<_>, Vec<_>) = rows
            .into_iter()
            .partition(|(name, _)| name.ends_with(IN_SCRIPT));
        for (rows, all) in [(sent, "all sent by clients"), (inner, "all run by scripts")] {
            let mut sum = ScriptStat::default();
            for (name, s) in rows {
                sum.calls += s.calls;
                sum.usec += s.usec;
                print_row(name, s, n);
            }
            print_row(all, &sum, n);
        }
        println!(
            "  {:<36} {:>62}",
            format!("Redis CPU µs/{} (INFO cpu)", short(run.per)),
            number(round1(run.cost_cpu_us / n)),
        );
    }
}

fn short(per: &str) -> &str {
    match per {
        "acquisition" => "acq",
        other => other,
    }
}

fn print_row(name: &str, s: &ScriptStat, n: f64) {
    println!(
        "  {name:<36} {:>10} {:>12} {:>12} {:>10} {:>12}",
        s.calls,
        number(round3(s.calls as f64 / n)),
        s.usec,
        number(round3(s.usec as f64 / s.calls.max(1) as f64)),
        number(round3(s.usec as f64 / n)),
    );
}

fn json(plan: &Plan, runs: &[PassRun]) -> Value {
    let runs: Vec<Value> = runs
        .iter()
        .map(|run| {
            let scripts: Map<String, Value> = run
                .scripts
                .stats
                .iter()
                .map(|(name, s)| (name.clone(), json!({"calls": s.calls, "usec": s.usec})))
                .collect();
            json!({
                "workload": run.workload,
                "library": run.library,
                "per": run.per,
                "n": run.n,
                "redis_cpu_us": round1(run.cost_cpu_us),
                "slowlog_entries_lost": run.scripts.lost,
                "scripts": scripts,
            })
        })
        .collect();
    json!({
        "workload": "per_script",
        "quick": plan.quick,
        "cycles": plan.cycles,
        "w2_seconds": plan.w2_run.as_secs_f64(),
        "w3_seconds": plan.w3_run.as_secs_f64(),
        "runs": runs,
    })
}
