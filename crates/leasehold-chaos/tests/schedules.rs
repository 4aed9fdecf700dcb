//! Every fault schedule, briefly, through the binary against its own
//! servers: the figures that must be 0 are 0, and the run reports every
//! field it promises. One run at a time: each starts a redis-server and
//! five worker processes on a 2-core machine.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const MUST_BE_ZERO: [&str; 5] = [
    "unsafe_overlaps",
    "stale_writes_accepted",
    "lost_updates",
    "fence_regressions",
    "keys_without_ttl",
];

const FIELDS: [&str; 12] = [
    "schedule",
    "seed",
    "seconds",
    "acquisitions",
    "unsafe_overlaps",
    "faulted_overlaps",
    "stale_writes_accepted",
    "fence_regressions",
    "lost_updates",
    "keys_without_ttl",
    "wait_errors_while_reachable",
    "loss_detection_ms_max",
];

fn chaos(args: &[&str], dir: &Path) -> (Output, Vec<Value>) {
    let json = dir.join("runs.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold-chaos"))
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let runs = fs::read_to_string(&json)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (out, runs)
}

fn schedule(name: &str) -> Value {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--schedule",
        name,
        "--seed",
        "11",
        "--seconds",
        "6",
        "--workers",
        "5",
    ];
    let (out, runs) = chaos(&args, dir.path());
    let said = format!(
        "{name}: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(runs.len(), 1, "{said}");
    let run = runs.into_iter().next().unwrap();
    for field in FIELDS {
        assert!(run.get(field).is_some(), "no {field} in {run}");
    }
    for field in MUST_BE_ZERO {
        assert_eq!(run[field], 0, "{field} in {said}");
    }
    assert!(out.status.success(), "{said}");
    assert_eq!(run["schedule"], name);
    assert!(run["acquisitions"].as_u64().unwrap() > 0, "{said}");
    assert!(run["faults"].as_u64().unwrap() > 0, "{said}");
    run
}

/// The kinds of fault a run injected.
fn kinds(run: &Value) -> BTreeSet<String> {
    run["faults_by_kind"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

#[test]
fn pause() {
    let run = schedule("pause");
    assert_eq!(kinds(&run), BTreeSet::from(["pause".to_owned()]));
}

#[test]
fn kill() {
    let run = schedule("kill");
    assert_eq!(kinds(&run), BTreeSet::from(["kill".to_owned()]));
}

#[test]
fn restart() {
    schedule("restart");
}

#[test]
fn client_pause() {
    schedule("client-pause");
}

#[test]
fn latency() {
    schedule("latency");
}

#[test]
fn blackhole() {
    schedule("blackhole");
}

#[test]
fn reset() {
    schedule("reset");
}

#[test]
fn half_open() {
    schedule("half-open");
}

#[test]
fn mixed() {
    schedule("mixed");
}

fn redis_servers() -> BTreeSet<u32> {
    let mut pids = BTreeSet::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if fs::read(entry.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains("redis-server"))
            .unwrap_or(false)
        {
            pids.insert(pid);
        }
    }
    pids
}

fn workers_of(dir: &Path) -> usize {
    // The workers' logs are below it; the harness's own argument is it alone.
    let dir = format!("{}/", dir.to_string_lossy());
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&dir))
                .unwrap_or(false)
        })
        .count()
}

/// Ctrl-C in the middle of a run stops its workers and its redis-server
/// before the harness exits.
#[test]
fn an_interrupted_run_leaves_nothing_running() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let before = redis_servers();
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold-chaos"))
        .args(["--schedule", "pause", "--seconds", "60", "--workers", "3"])
        .arg("--keep-logs")
        .arg(dir.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while workers_of(dir.path()) < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the workers never started"
        );
        thread::sleep(Duration::from_millis(50));
    }
    assert!(redis_servers().len() > before.len());
    thread::sleep(Duration::from_secs(2));
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: a plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(2), "{status}");
    assert_eq!(workers_of(dir.path()), 0, "workers outlived the run");
    let left: Vec<u32> = redis_servers().difference(&before).copied().collect();
    assert!(left.is_empty(), "redis-server {left:?} outlived the run");
}
