//! `--read`, `--write` and `--semaphore N` across real processes: many
//! `leasehold run` commands at once against a real redis-server, each
//! appending what it does to one log.
//!
//! Every command appends "S <who> <fence>" once it holds the lock and
//! "E <who>" before it lets go. Appends to one file are atomic and ordered,
//! so the log's order is the order in which the commands held the lock,
//! with no clock involved.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

mod common;

use common::{command, leasehold, stderr, stdout};
use leasehold_testkit::RedisServer;
use serde_json::Value;

/// Exit codes of the `leasehold` binary.
const CONFLICT: i32 = 65;
const LOST: i32 = 76;
const USAGE: i32 = 2;

/// Waits (bounded) for a condition that no signal announces.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..1500 {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("gave up waiting for {what}");
}

fn inspect(url: &str, name: &str) -> Value {
    let out = leasehold(url, &["inspect", name, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn waiting(url: &str, name: &str) -> u64 {
    inspect(url, name)["waiting_clients"].as_u64().unwrap()
}

/// Commands started by a test; any still running when it ends (a failed
/// test) are killed.
struct Runners {
    started: Vec<(String, Child)>,
}

impl Runners {
    fn new() -> Self {
        Runners {
            started: Vec::new(),
        }
    }

    /// `leasehold run NAME <flags> -- sh -c SCRIPT sh WHO LOG DIR`: the
    /// script reads who it is from $1, the log from $2 and the test's
    /// directory from $3. Returns the runner's pid.
    fn run(
        &mut self,
        url: &str,
        name: &str,
        flags: &[&str],
        who: &str,
        dir: &Dir,
        script: &str,
    ) -> u32 {
        let mut args = vec!["run", name, "--wait", "5m"];
        args.extend_from_slice(flags);
        let (log, root) = (dir.log.to_str().unwrap(), dir.root().to_str().unwrap());
        args.extend_from_slice(&["--", "sh", "-c", script, "sh", who, log, root]);
        let child = command(url, &args).spawn().unwrap();
        let pid = child.id();
        self.started.push((who.to_owned(), child));
        pid
    }

    /// Waits for every command; each must have exited 0.
    fn all_succeed(&mut self) {
        for (who, child) in self.started.drain(..) {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{who}: {:?} {}",
                out.status,
                stderr(&out)
            );
        }
    }
}

impl Drop for Runners {
    fn drop(&mut self) {
        for (_, child) in &mut self.started {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A test's directory: the log, and the `go` file that lets held commands end.
struct Dir {
    dir: tempfile::TempDir,
    log: PathBuf,
}

impl Dir {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        std::fs::write(&log, "").unwrap();
        Dir { dir, log }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn go(&self) {
        std::fs::write(self.root().join("go"), "").unwrap();
    }

    fn events(&self) -> Vec<Event> {
        read_log(&std::fs::read_to_string(&self.log).unwrap())
    }

    fn starts(&self, prefix: &str) -> usize {
        self.events()
            .iter()
            .filter(|e| e.start && e.who.starts_with(prefix))
            .count()
    }
}

/// Holds the lock until the test creates `go` (a minute at most, so that a
/// failed test leaves nothing behind for long).
const HOLD_UNTIL_GO: &str = r#"echo "S $1 $LEASEHOLD_FENCE" >> "$2"
n=0; while [ ! -e "$3/go" ] && [ $n -lt 3000 ]; do sleep 0.02; n=$((n + 1)); done
echo "E $1" >> "$2""#;

/// Holds the lock for a moment.
const BRIEFLY: &str = r#"echo "S $1 $LEASEHOLD_FENCE" >> "$2"; sleep 0.05; echo "E $1" >> "$2""#;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Event {
    start: bool,
    who: String,
    fence: Option<u64>,
}

fn read_log(text: &str) -> Vec<Event> {
    text.lines()
        .map(|line| {
            let mut words = line.split_whitespace();
            let start = match words.next() {
                Some("S") => true,
                Some("E") => false,
                _ => panic!("odd log line {line:?}"),
            };
            let who = words
                .next()
                .expect("a log line without its writer")
                .to_owned();
            let fence = words.next().map(|f| f.parse().expect("a fence"));
            Event { start, who, fence }
        })
        .collect()
}

/// What the log shows of a read-write lock's holders.
#[derive(Debug, Default)]
struct RwHistory {
    /// The most readers that held the lock at once.
    most_readers: usize,
    /// Writer fences, in the order the writers held the lock.
    write_fences: Vec<u64>,
}

/// Checks that no writer ("w…") held the lock together with anyone, and
/// that fences never went back: every reader ("r…") saw a fence past the
/// last write's and no smaller than the reader's before it, and every
/// writer one past every fence before it.
fn check_rw(events: &[Event]) -> RwHistory {
    let mut open: Vec<&str> = Vec::new();
    let mut history = RwHistory::default();
    let mut last_read = 0;
    for (i, event) in events.iter().enumerate() {
        let who = event.who.as_str();
        if !event.start {
            let at = open.iter().position(|o| *o == who);
            open.remove(at.unwrap_or_else(|| panic!("{who} ended without starting: {events:?}")));
            continue;
        }
        let writer = who.starts_with('w');
        assert!(
            !open.iter().any(|o| o.starts_with('w')),
            "event {i}: {who} started while a writer held the lock: {events:?}"
        );
        assert!(
            !writer || open.is_empty(),
            "event {i}: writer {who} started while {open:?} held the lock: {events:?}"
        );
        let fence = event.fence.expect("a fence");
        if writer {
            assert!(
                fence > last_read,
                "event {i}: writer {who} got {fence} after a reader's {last_read}"
            );
            history.write_fences.push(fence);
        } else {
            if let Some(last) = history.write_fences.last() {
                assert!(
                    fence > *last,
                    "event {i}: reader {who} saw {fence}, not past the last write's {last}"
                );
            }
            assert!(
                fence >= last_read,
                "event {i}: reader {who} saw {fence} after a reader's {last_read}"
            );
            last_read = fence;
        }
        open.push(who);
        history.most_readers = history.most_readers.max(open.len());
    }
    assert!(open.is_empty(), "{open:?} never ended: {events:?}");
    history
}

fn assert_increasing(fences: &[u64]) {
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "write fences did not strictly increase: {fences:?}"
    );
}

#[test]
fn readers_share_the_lock_and_a_waiting_writer_goes_before_later_readers() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = Dir::new();
    let mut runners = Runners::new();
    let mut reader_pids = Vec::new();
    for i in 1..=3 {
        reader_pids.push(runners.run(
            &url,
            "catalog",
            &["--read"],
            &format!("r{i}"),
            &dir,
            HOLD_UNTIL_GO,
        ));
    }
    // The three hold the lock at once: none of them can end before `go`.
    eventually("three readers to hold the lock", || dir.starts("r") == 3);

    let state = inspect(&url, "catalog");
    assert_eq!(state["kind"], "rwlock");
    let holders = state["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 3, "{state}");
    let mut pids: Vec<u64> = holders.iter().map(|h| h["pid"].as_u64().unwrap()).collect();
    pids.sort_unstable();
    let mut expected: Vec<u64> = reader_pids.iter().map(|p| u64::from(*p)).collect();
    expected.sort_unstable();
    assert_eq!(pids, expected, "the holders are not the runners: {state}");
    for holder in holders {
        assert_eq!(holder["mode"], "read");
        let name = holder["client_name"].as_str().unwrap();
        assert!(
            name.starts_with("leasehold run catalog --wait 5m --read -- sh -c "),
            "{name}"
        );
        assert!(holder["remaining_ms"].as_u64().unwrap() > 0);
    }

    for i in 1..=2 {
        runners.run(
            &url,
            "catalog",
            &["--write"],
            &format!("w{i}"),
            &dir,
            BRIEFLY,
        );
    }
    eventually("both writers to queue", || waiting(&url, "catalog") == 2);
    // Readers that come after a waiting writer wait behind it.
    for i in 4..=5 {
        runners.run(
            &url,
            "catalog",
            &["--read"],
            &format!("r{i}"),
            &dir,
            BRIEFLY,
        );
    }
    eventually("the late readers to queue", || {
        waiting(&url, "catalog") == 4
    });
    assert_eq!(
        dir.starts(""),
        3,
        "someone joined the readers: {:?}",
        dir.events()
    );
    dir.go();
    runners.all_succeed();

    let events = dir.events();
    let history = check_rw(&events);
    assert_eq!(history.most_readers, 3, "{events:?}");
    assert_eq!(history.write_fences.len(), 2);
    assert_increasing(&history.write_fences);
    let position = |start: bool, who: &str| {
        events
            .iter()
            .position(|e| e.start == start && e.who == who)
            .unwrap()
    };
    for late in ["r4", "r5"] {
        for writer in ["w1", "w2"] {
            assert!(
                position(true, late) > position(false, writer),
                "{late} went before the waiting {writer}: {events:?}"
            );
        }
    }
    assert!(!inspect(&url, "catalog")["held"].as_bool().unwrap());
}

#[test]
fn writers_mixed_with_readers_hold_alone_with_rising_fences() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = Dir::new();
    let mut runners = Runners::new();
    for i in 1..=5 {
        runners.run(
            &url,
            "ledger",
            &["--write"],
            &format!("w{i}"),
            &dir,
            BRIEFLY,
        );
        runners.run(&url, "ledger", &["--read"], &format!("r{i}"), &dir, BRIEFLY);
    }
    runners.all_succeed();
    let events = dir.events();
    assert_eq!(events.len(), 20, "{events:?}");
    let history = check_rw(&events);
    assert_eq!(history.write_fences.len(), 5);
    assert_increasing(&history.write_fences);
    // The last fence handed out: a write's, or a read phase's after it.
    let last = inspect(&url, "ledger")["last_fence"].as_u64().unwrap();
    assert_eq!(events.iter().filter_map(|e| e.fence).max(), Some(last));
}

/// `count` commands `p1`… on the semaphore `exports` of two permits, each
/// holding its permit until `go`.
fn semaphore_runners(url: &str, dir: &Dir, count: usize) -> Runners {
    let mut runners = Runners::new();
    for i in 1..=count {
        runners.run(
            url,
            "exports",
            &["--semaphore", "2"],
            &format!("p{i}"),
            dir,
            HOLD_UNTIL_GO,
        );
    }
    runners
}

#[test]
fn a_semaphore_of_two_never_runs_a_third_command() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = Dir::new();
    let mut runners = semaphore_runners(&url, &dir, 5);
    // Two hold their permit until `go`; the other three must wait for one.
    eventually("two commands to run and three to wait", || {
        dir.starts("p") == 2 && waiting(&url, "exports") == 3
    });
    let state = inspect(&url, "exports");
    assert_eq!(state["kind"], "semaphore");
    assert_eq!(state["permits"]["total"], 2);
    assert_eq!(state["permits"]["in_use"], 2);
    assert_eq!(state["holders"].as_array().unwrap().len(), 2, "{state}");
    dir.go();
    runners.all_succeed();

    let events = dir.events();
    assert_eq!(events.len(), 10, "{events:?}");
    let (mut running, mut most) = (0usize, 0usize);
    for event in &events {
        if event.start {
            running += 1;
            most = most.max(running);
            assert!(running <= 2, "a third command ran: {events:?}");
        } else {
            running -= 1;
        }
    }
    assert_eq!(most, 2, "{events:?}");
}

/// `inspect` shows the line of waiters with their places; raising a
/// semaphore's permits with `semaphore set-permits` while commands wait lets
/// the queued ones in; `semaphore delete` removes it.
#[test]
fn inspect_shows_the_line_and_raised_permits_admit_queued_commands() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = Dir::new();
    let mut runners = semaphore_runners(&url, &dir, 4);
    eventually("two commands to run and two to wait", || {
        dir.starts("p") == 2 && waiting(&url, "exports") == 2
    });
    let state = inspect(&url, "exports");
    let line = state["waiters"].as_array().unwrap();
    assert_eq!(line.len(), 2, "{state}");
    for (i, waiter) in line.iter().enumerate() {
        assert_eq!(waiter["position"], i + 1, "{state}");
        assert_eq!(waiter["wants"], "permits", "{state}");
        assert_eq!(waiter["permits"], 1, "{state}");
    }
    let out = leasehold(&url, &["inspect", "exports"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("#1 ") && text.contains("#2 "), "{text}");
    assert!(text.contains("wants 1 permit"), "{text}");
    let out = leasehold(&url, &["semaphore", "set-permits", "exports", "4"]);
    assert!(out.status.success(), "{}", stderr(&out));
    eventually("the queued commands to run", || dir.starts("p") == 4);
    dir.go();
    runners.all_succeed();
    let out = leasehold(&url, &["--json", "semaphore", "delete", "exports"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["deleted"], true, "{reply}");
    assert!(inspect(&url, "exports")["kind"].is_null());
    let out = leasehold(&url, &["semaphore", "set-permits", "exports", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// Permit counts written by hand that add up past `u32::MAX` are shown,
/// not a crash.
#[test]
fn inspect_reads_hand_written_permit_counts_without_overflow() {
    let server = RedisServer::start();
    let url = server.url();
    let time = server.command(&["TIME"]).unwrap();
    let secs: u64 = time.split_whitespace().next().unwrap().parse().unwrap();
    let lease = format!(
        "{} s - 4294967295 1 1700000000000000 1 host by-hand",
        (secs + 60) * 1000
    );
    let reply = server
        .command(&[
            "HSET",
            "leasehold:{s}",
            "kind",
            "semaphore",
            "permits",
            "2",
            "h:a",
            &lease,
            "h:b",
            &lease,
        ])
        .unwrap();
    assert_eq!(reply.trim(), "4", "{reply}");
    let state = inspect(&url, "s");
    assert_eq!(state["holders"].as_array().unwrap().len(), 2, "{state}");
    let out = leasehold(&url, &["inspect", "s"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("in use"), "{}", stdout(&out));
}

/// `acquire` with a kind flag, then `extend` and `release` with the token
/// alone: the scripts serve every kind by token.
#[test]
fn shared_leases_taken_by_acquire_are_extended_and_released_by_token() {
    let server = RedisServer::start();
    let url = server.url();
    for (name, flags, mode) in [
        ("shared", &["--read"][..], "read"),
        ("slots", &["--semaphore", "3"][..], "permits"),
        ("exclusive", &["--write"][..], "write"),
    ] {
        let mut args = vec!["acquire", name, "--lease", "60s", "--no-wait"];
        args.extend_from_slice(flags);
        let child = command(&url, &args).spawn().unwrap();
        let pid = u64::from(child.id());
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let text = stdout(&out);
        let token = text.split_whitespace().next().unwrap().to_owned();

        let state = inspect(&url, name);
        let holders = state["holders"].as_array().unwrap();
        assert_eq!(holders.len(), 1, "{state}");
        let holder = &holders[0];
        assert_eq!(holder["mode"], mode);
        assert_eq!(holder["pid"].as_u64(), Some(pid));
        assert!(holder["held_ms"].is_u64(), "{holder}");
        assert_eq!(
            holder["client_name"],
            format!("leasehold {}", args.join(" "))
        );
        assert!(holder["remaining_ms"].as_u64().unwrap() <= 60_000);
        let out = leasehold(&url, &["inspect", name]);
        let text = stdout(&out);
        assert!(text.contains(&format!("pid {pid} on ")), "{text}");
        assert!(
            text.contains(&format!("(leasehold acquire {name} ")),
            "{text}"
        );
        assert!(
            text.contains("kept by `leasehold acquire` until released or its lease runs out"),
            "{text}"
        );

        let out = leasehold(&url, &["extend", name, &token, "--lease", "1h"]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let state = inspect(&url, name);
        let left = state["holders"][0]["remaining_ms"].as_u64().unwrap();
        assert!(left > 60_000, "{name}: the extend did not take: {state}");

        let out = leasehold(&url, &["release", name, &token]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let state = inspect(&url, name);
        assert_eq!(state["held"], false, "{state}");
        assert!(state["holders"].as_array().unwrap().is_empty(), "{state}");
        for again in [
            &["release", name, &token][..],
            &["extend", name, &token, "--lease", "1h"],
        ] {
            let out = leasehold(&url, again);
            assert_eq!(out.status.code(), Some(LOST), "{again:?}: {}", stderr(&out));
        }
    }
}

#[test]
fn a_name_in_use_by_another_kind_exits_65_and_runs_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let touch = format!("touch '{}'", ran.display());
    for (name, first) in [
        ("plain", &[][..]),
        ("rw", &["--read"][..]),
        ("sem", &["--semaphore", "2"][..]),
    ] {
        let mut args = vec!["acquire", name, "--lease", "60s"];
        args.extend_from_slice(first);
        let out = leasehold(&url, &args);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
    }
    for (name, flags) in [
        ("plain", &["--read"][..]),
        ("plain", &["--write"]),
        ("plain", &["--semaphore", "2"]),
        ("rw", &[]),
        ("rw", &["--fair"]),
        ("sem", &["--write"]),
        // A semaphore of another size.
        ("sem", &["--semaphore", "3"]),
    ] {
        for wait in ["--no-wait", "--wait=1m"] {
            let mut args = vec!["run", name, wait];
            args.extend_from_slice(flags);
            args.extend_from_slice(&["--", "sh", "-c", &touch]);
            let out = leasehold(&url, &args);
            assert_eq!(
                out.status.code(),
                Some(CONFLICT),
                "{args:?}: {}",
                stderr(&out)
            );
            assert!(stderr(&out).contains(name), "{}", stderr(&out));
            assert!(!ran.exists(), "{args:?}: the command ran");
        }
        let mut args = vec!["--json", "acquire", name, "--no-wait"];
        args.extend_from_slice(flags);
        let out = leasehold(&url, &args);
        assert_eq!(
            out.status.code(),
            Some(CONFLICT),
            "{args:?}: {}",
            stderr(&out)
        );
        let failure: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(failure["error"], "conflict", "{failure}");
        assert_eq!(failure["exit"], CONFLICT, "{failure}");
    }
}

#[test]
fn kind_flags_are_exclusive_and_checked() {
    let server = RedisServer::start();
    let url = server.url();
    for flags in [
        &["--fair", "--read"][..],
        &["--read", "--write"],
        &["--write", "--semaphore", "2"],
        &["--fair", "--semaphore", "2"],
        &["--semaphore", "0"],
        &["--semaphore", "10001"],
        &["--semaphore", "many"],
    ] {
        let mut args = vec!["run", "job"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "true"]);
        let out = leasehold(&url, &args);
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {}", stderr(&out));
        let mut args = vec!["acquire", "job"];
        args.extend_from_slice(flags);
        let out = leasehold(&url, &args);
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(inspect(&url, "job")["kind"], Value::Null);
}

/// `release --hold-until` sets a shared lease to end soon; once it has, the
/// name is free for every kind: the lock's key goes with its last lease.
#[test]
fn a_shared_lease_kept_until_a_moment_frees_the_name_after_it() {
    let server = RedisServer::start();
    let url = server.url();
    let out = leasehold(&url, &["acquire", "cfg", "--read", "--lease", "30s"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let token = stdout(&out).split_whitespace().next().unwrap().to_owned();
    let soon = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 50;
    let out = leasehold(
        &url,
        &["release", "cfg", &token, "--hold-until", &soon.to_string()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    eventually("the kept lease to run out", || {
        inspect(&url, "cfg")["held"] == false
    });
    let out = leasehold(&url, &["acquire", "cfg", "--no-wait"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `force-release` removes locks only: a key leasehold did not write is
/// refused with exit 65 and left as it is.
#[test]
fn force_release_of_a_key_that_is_no_lock_exits_65() {
    let server = RedisServer::start();
    let url = server.url();
    assert_eq!(
        server.command(&["RPUSH", "leasehold:{jobs}", "a"]).unwrap(),
        "1"
    );
    let out = leasehold(&url, &["force-release", "jobs"]);
    assert_eq!(out.status.code(), Some(CONFLICT), "{}", stderr(&out));
    assert!(stderr(&out).contains("list"), "{}", stderr(&out));
    assert_eq!(server.command(&["LLEN", "leasehold:{jobs}"]).unwrap(), "1");
}

/// `inspect` shows a reentrant mutex's hold once, with its depth.
#[test]
fn inspect_shows_the_depth_of_a_reentrant_hold() {
    let server = RedisServer::start();
    let url = server.url();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = leasehold::Client::open(&url).unwrap();
    let lock = client.reentrant_mutex("cfg").unwrap();
    let (outer, inner) = runtime.block_on(async {
        let outer = lock.acquire().await.unwrap();
        (outer, lock.acquire().await.unwrap())
    });
    let state = inspect(&url, "cfg");
    let holders = state["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{state}");
    assert_eq!(holders[0]["levels"], 2, "{state}");
    assert_eq!(holders[0]["owner"], lock.owner().id(), "{state}");
    let text = stdout(&leasehold(&url, &["inspect", "cfg"]));
    assert!(text.contains("held, 2 levels deep"), "{text}");
    runtime.block_on(async {
        inner.release().await.unwrap();
        outer.release().await.unwrap();
    });
    assert_eq!(inspect(&url, "cfg")["held"], false);
}
