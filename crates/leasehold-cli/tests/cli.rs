//! The `leasehold` binary against real redis-server processes.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use leasehold_testkit::{unreachable_url, RedisServer};

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

fn leasehold(server_url: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--url")
        .arg(server_url)
        .args(args)
        .env_remove("LEASEHOLD_URL")
        .env_remove("REDIS_URL")
        .output()
        .unwrap()
}

fn spawn(server_url: &str, args: &[&str]) -> Child {
    Command::new(BIN)
        .arg("--url")
        .arg(server_url)
        .args(args)
        // Never the harness's terminal: a runner at a terminal hands it over.
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

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

fn inspect(url: &str, name: &str) -> serde_json::Value {
    let out = leasehold(url, &["inspect", name, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn acquire(url: &str, name: &str, lease: &str) -> (String, u64) {
    let out = leasehold(url, &["acquire", name, "--lease", lease, "--no-wait"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let mut parts = text.split_whitespace();
    let token = parts.next().unwrap().to_owned();
    let fence = parts.next().unwrap().parse().unwrap();
    (token, fence)
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // A zombie has exited; only its parent's reaping is left.
        Ok(stat) => !stat.contains(") Z "),
        Err(_) => false,
    }
}

#[test]
fn run_passes_fence_and_name_and_returns_the_exit_code() {
    let server = RedisServer::start();
    let out = leasehold(
        &server.url(),
        &[
            "run",
            "job",
            "--",
            "sh",
            "-c",
            "echo \"$LEASEHOLD_NAME $LEASEHOLD_FENCE\"; exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let text = stdout(&out);
    let mut words = text.split_whitespace();
    assert_eq!(words.next(), Some("job"));
    let fence: u64 = words.next().unwrap().parse().unwrap();
    assert!(fence > 0);
    let state = inspect(&server.url(), "job");
    assert_eq!(state["held"], false);
    assert_eq!(state["last_fence"], fence);
}

#[test]
fn many_processes_running_under_one_lock_lose_no_update() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("counter");
    std::fs::write(&file, "0\n").unwrap();
    let script = format!(
        "n=$(cat '{0}'); sleep 0.02; echo $((n + 1)) > '{0}'",
        file.display()
    );
    let runners: Vec<Child> = (0..16)
        .map(|_| {
            spawn(
                &server.url(),
                &["run", "counter", "--wait", "5m", "--", "sh", "-c", &script],
            )
        })
        .collect();
    for runner in runners {
        let out = runner.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let count = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        count.trim(),
        "16",
        "an update was lost: two runners held the lock"
    );
}

#[test]
fn a_busy_lock_exits_75() {
    let server = RedisServer::start();
    let url = server.url();
    let (token, _) = acquire(&url, "job", "60s");
    let marker = tempfile::tempdir().unwrap();
    let ran = marker.path().join("ran");
    let touch = format!("touch '{}'", ran.display());
    for wait in [&["--no-wait"][..], &["--wait", "300ms"][..]] {
        let mut args = vec!["run", "job"];
        args.extend_from_slice(wait);
        args.extend_from_slice(&["--", "sh", "-c", &touch]);
        let out = leasehold(&url, &args);
        assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
        assert!(!ran.exists(), "the command ran without the lock");
    }
    let out = leasehold(&url, &["acquire", "job", "--no-wait"]);
    assert_eq!(out.status.code(), Some(75));
    let out = leasehold(&url, &["release", "job", &token]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn usage_errors_exit_2() {
    let url = unreachable_url();
    // Refused by the argument parser, whose whole message is kept.
    for args in [
        &["run", "job", "--lease", "30", "--", "true"][..],
        &["run", "job", "--lease", "0s", "--", "true"],
        &["run", "job", "--lease", "25h", "--", "true"],
        &["run", "job", "--wait", "25h", "--", "true"],
        &["run", "job"],
        &["run", "job", "--wait", "1s", "--no-wait", "--", "true"],
        &["run", "job", "--hold-at-least", "25h", "--", "true"],
        &["run", "job", "--max-hold", "0s", "--", "true"],
        &["acquire", "job", "--lease", "soon"],
        &["frobnicate"],
    ] {
        let out = leasehold(&url, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(err.contains("--help"), "{args:?}: {err}");
    }
    // Refused after parsing: one line.
    let long_name = "n".repeat(leasehold::MAX_NAME_LEN + 1);
    for args in [
        &["run", &long_name, "--", "true"][..],
        &["run", "", "--", "true"],
        &[
            "run",
            "job",
            "--hold-at-least",
            "2h",
            "--max-hold",
            "1h",
            "--",
            "true",
        ],
        &["release", "job", ""],
    ] {
        let out = leasehold(&url, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("leasehold: "), "{args:?}: {err}");
    }
}

#[test]
fn redis_out_of_reach_exits_69_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let out = leasehold(
        &unreachable_url(),
        &[
            "run",
            "job",
            "--wait",
            "1s",
            "--",
            "sh",
            "-c",
            &format!("touch '{}'", ran.display()),
        ],
    );
    // The wait rides out the outage and ends with it only when Redis stayed
    // out of reach for the whole wait.
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    assert!(stderr(&out).contains("redis"), "{}", stderr(&out));
    assert!(!ran.exists());
    for args in [
        &["acquire", "job", "--wait", "1s"][..],
        &["acquire", "job", "--no-wait"],
        &["inspect", "job"],
        &["force-release", "job"],
    ] {
        let out = leasehold(&unreachable_url(), args);
        assert_eq!(out.status.code(), Some(69), "{args:?}: {}", stderr(&out));
    }
    // A wait with no bound on a wrong address ends after the connect
    // timeout, with the reason, instead of waiting forever.
    for url in [
        unreachable_url(),
        "redis://nosuchhost.invalid:6379".to_owned(),
    ] {
        let out = leasehold(
            &url,
            &[
                "run",
                "job",
                "--connect-timeout",
                "1s",
                "--",
                "sh",
                "-c",
                "exit 3",
            ],
        );
        assert_eq!(out.status.code(), Some(69), "{url}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("without reaching redis once"), "{url}: {err}");
    }
}

#[test]
fn a_lease_lost_while_the_command_runs_ends_it_with_76() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let script = format!("touch '{}'; sleep 60", ready.display());
    let runner = spawn(
        &url,
        &["run", "job", "--lease", "600ms", "--", "sh", "-c", &script],
    );
    eventually("the command to start", || ready.exists());
    let out = leasehold(&url, &["force-release", "job"]);
    assert!(out.status.success());
    let out = runner.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    assert!(stderr(&out).contains("lost"), "{}", stderr(&out));
}

#[test]
fn on_lost_ignore_only_warns() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
    let script = format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.02; done; exit 4",
        ready.display(),
        go.display()
    );
    let runner = spawn(
        &url,
        &[
            "run",
            "job",
            "--lease",
            "600ms",
            "--on-lost",
            "ignore",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    eventually("the command to start", || ready.exists());
    assert!(leasehold(&url, &["force-release", "job"]).status.success());
    // Whether the watchdog or the final release sees the loss, it is only a warning.
    std::fs::write(&go, "").unwrap();
    let out = runner.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning"), "{}", stderr(&out));
}

#[test]
fn sigterm_is_forwarded_and_the_lock_released_after_the_command_exits() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let (ready, got) = (dir.path().join("ready"), dir.path().join("got-term"));
    let script = format!(
        "trap 'touch \"{}\"; exit 7' TERM; touch '{}'; while :; do sleep 0.05; done",
        got.display(),
        ready.display()
    );
    let runner = spawn(&url, &["run", "job", "--", "sh", "-c", &script]);
    eventually("the command to start", || ready.exists());
    send(runner.id(), libc::SIGTERM);
    let out = runner.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(got.exists(), "the command never saw SIGTERM");
    assert_eq!(inspect(&url, "job")["held"], false);
}

/// Sends `signal` to process `pid`.
fn send(pid: u32, signal: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(pid as i32, signal);
    }
}

/// Waits until the command has written its pid, one line, to `pidfile`.
fn written_pid(pidfile: &Path) -> u32 {
    eventually("the command to write its pid", || {
        std::fs::read_to_string(pidfile).is_ok_and(|s| s.ends_with('\n'))
    });
    std::fs::read_to_string(pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Starts `run` around a command that sleeps for a minute, and returns the
/// runner with the pid of the sleeping command once it runs.
fn run_sleeper(url: &str, dir: &Path) -> (Child, u32) {
    let pidfile = dir.join("pid");
    let script = format!("echo $$ > '{}'; exec sleep 60", pidfile.display());
    let runner = spawn(url, &["run", "job", "--", "sh", "-c", &script]);
    let pid = written_pid(&pidfile);
    (runner, pid)
}

#[test]
fn a_killed_runner_takes_its_command_with_it() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (mut runner, pid) = run_sleeper(&server.url(), dir.path());
    assert!(alive(pid));
    runner.kill().unwrap();
    runner.wait().unwrap();
    eventually("the orphaned command to die", || !alive(pid));
}

/// `sh -c 'sleep 60 & wait'`: PDEATHSIG reaches only the shell, so the
/// `sleep` it started must be taken down some other way.
#[test]
fn a_killed_runner_takes_what_its_command_started_with_it() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("sleep 60 & echo $! > '{}'; wait", pidfile.display());
    let mut runner = spawn(&server.url(), &["run", "job", "--", "sh", "-c", &script]);
    let pid = written_pid(&pidfile);
    assert!(alive(pid));
    runner.kill().unwrap();
    runner.wait().unwrap();
    eventually("the background job of the orphaned command to die", || {
        !alive(pid)
    });
}

/// GNU `timeout` (like `bash -i`) calls setpgid(0, 0). As the leader of
/// its group already, it stays in it, and stays guarded.
#[test]
fn a_command_that_makes_its_own_group_stays_guarded() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > '{}'; exec sleep 60", pidfile.display());
    let args = ["run", "job", "--", "timeout", "60", "sh", "-c", &script];
    let mut runner = spawn(&server.url(), &args);
    let pid = written_pid(&pidfile);
    runner.kill().unwrap();
    runner.wait().unwrap();
    eventually("the command's child to die", || !alive(pid));
}

#[test]
fn a_missing_command_exits_127_and_releases() {
    let server = RedisServer::start();
    let out = leasehold(&server.url(), &["run", "job", "--", "/nonexistent/command"]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    assert_eq!(inspect(&server.url(), "job")["held"], false);
}

#[test]
fn names_with_braces_are_locks_like_any_other() {
    let server = RedisServer::start();
    let url = server.url();
    let (token, fence) = acquire(&url, "deploy:{eu}", "1m");
    let state = inspect(&url, "deploy:{eu}");
    assert_eq!(state["name"], "deploy:{eu}");
    assert_eq!(state["held"], true);
    assert_eq!(state["last_fence"], fence);
    // The escaped spelling of the name is another lock.
    assert_eq!(inspect(&url, "deploy:%7Beu%7D")["held"], false);
    let out = leasehold(&url, &["run", "deploy:{eu}", "--no-wait", "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let out = leasehold(&url, &["release", "deploy:{eu}", &token]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = leasehold(
        &url,
        &["run", "}{", "--", "sh", "-c", "echo \"$LEASEHOLD_NAME\""],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "}{");
}

/// Lock names and command lines of multi-byte characters, long enough for
/// a server that quotes a command's first 128 bytes back to cut inside
/// one: the run releases its locks and exits with its command's code.
#[test]
fn multibyte_names_and_command_lines_run_and_release() {
    let server = RedisServer::start();
    let url = server.url();
    let report = ["user:{42}", "xyzw-锁"];
    let out = leasehold(
        &url,
        &["run", report[0], report[1], "--", "true", "xxxxxxxxxx"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    for shift in 0..3 {
        // Shifted by a byte each time: two of three cuts fall inside a
        // character.
        let wide = format!("{}{}", "x".repeat(shift), "锁".repeat(50));
        let out = leasehold(&url, &["run", &wide, "--no-wait", "--", "true", &wide]);
        assert!(out.status.success(), "{shift}: {}", stderr(&out));
        assert_eq!(inspect(&url, &wide)["held"], false);
    }
    for name in report {
        assert_eq!(inspect(&url, name)["held"], false);
    }
}

/// A command's arguments are bytes, as `exec` takes them: one that is not
/// UTF-8 (a Latin-1 file name) is passed on as it is.
#[test]
fn run_passes_arguments_that_are_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let server = RedisServer::start();
    let latin1 = std::ffi::OsStr::from_bytes(b"caf\xe9");
    let out = Command::new(BIN)
        .args(["--url", &server.url(), "run", "job", "--", "printf", "%s"])
        .arg(latin1)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, b"caf\xe9");
    assert_eq!(inspect(&server.url(), "job")["held"], false);
}

/// `watch --once` lines its columns up by the columns a name takes on a
/// terminal, not by its characters or bytes.
#[test]
fn watch_aligns_names_that_take_two_columns_a_character() {
    let server = RedisServer::start();
    let url = server.url();
    let names = ["job", "锁锁锁", "é-job"];
    let (_token, _fence) = acquire(&url, names[1], "1m");
    let out = leasehold(&url, &["watch", "--once", names[0], names[1], names[2]]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // Where the state column starts on each line, in terminal columns
    // (each 锁 takes two).
    let starts: Vec<usize> = text
        .lines()
        .map(|line| {
            let at = ["state", "held", "free"]
                .iter()
                .filter_map(|word| line.find(&format!("  {word}")))
                .min()
                .unwrap_or_else(|| panic!("no state on {line:?}"));
            line[..at]
                .chars()
                .map(|c| if c == '锁' { 2 } else { 1 })
                .sum()
        })
        .collect();
    assert_eq!(starts.len(), 4, "{text}");
    assert!(starts.iter().all(|s| *s == starts[0]), "{starts:?}\n{text}");
}

#[test]
fn acquire_extend_release_and_inspect_for_shell_scripts() {
    let server = RedisServer::start();
    let url = server.url();
    let out = leasehold(&url, &["acquire", "job", "--lease", "5s", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lease: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let token = lease["token"].as_str().unwrap().to_owned();
    assert_eq!(lease["lease_ms"], 5000);

    let state = inspect(&url, "job");
    assert_eq!(state["held"], true);
    assert_eq!(state["last_fence"], lease["fence"]);
    assert!(state["remaining_ms"].as_u64().unwrap() <= 5000);

    let out = leasehold(&url, &["extend", "job", &token, "--lease", "2m"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(inspect(&url, "job")["remaining_ms"].as_u64().unwrap() > 60_000);

    let text = leasehold(&url, &["inspect", "job"]);
    assert!(stdout(&text).contains("held"), "{}", stdout(&text));

    let out = leasehold(&url, &["release", "job", "wrong-token"]);
    assert_eq!(out.status.code(), Some(76));
    let out = leasehold(&url, &["release", "job", &token]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = leasehold(&url, &["release", "job", &token]);
    assert_eq!(out.status.code(), Some(76));
    let out = leasehold(&url, &["extend", "job", &token, "--lease", "1m"]);
    assert_eq!(out.status.code(), Some(76));
    assert!(stdout(&leasehold(&url, &["inspect", "job"])).contains("free"));
}

#[test]
fn force_release_wakes_a_waiting_runner() {
    let server = RedisServer::start();
    let url = server.url();
    let (_token, fence) = acquire(&url, "job", "10m");
    let runner = spawn(
        &url,
        &[
            "run",
            "job",
            "--wait",
            "5m",
            "--",
            "sh",
            "-c",
            "echo $LEASEHOLD_FENCE",
        ],
    );
    eventually("the runner to wait", || {
        inspect(&url, "job")["waiting_clients"] == 1
    });
    let out = leasehold(&url, &["force-release", "job"]);
    assert!(stdout(&out).contains("removed"), "{}", stdout(&out));
    let out = runner.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let next: u64 = stdout(&out).trim().parse().unwrap();
    assert!(next > fence);
    let out = leasehold(&url, &["force-release", "job"]);
    assert!(stdout(&out).contains("was free"), "{}", stdout(&out));
}

#[test]
fn url_comes_from_the_environment() {
    let server = RedisServer::start();
    for var in ["LEASEHOLD_URL", "REDIS_URL"] {
        let out = Command::new(BIN)
            .args(["inspect", "job"])
            .env_remove("LEASEHOLD_URL")
            .env_remove("REDIS_URL")
            .env(var, server.url())
            .output()
            .unwrap();
        assert!(out.status.success(), "{var}: {}", stderr(&out));
    }
    let out = Command::new(BIN)
        .args(["inspect", "job"])
        .env("LEASEHOLD_URL", unreachable_url())
        .env("REDIS_URL", server.url())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(69),
        "LEASEHOLD_URL must win over REDIS_URL"
    );
}

/// The fields of /proc/PID/stat after the name: state, ppid, pgrp, ...
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.rsplit_once(") ")?.1;
    Some(after_name.split(' ').map(str::to_owned).collect())
}

fn state(pid: u32) -> Option<char> {
    stat_fields(pid)?.first()?.chars().next()
}

fn group_of(pid: u32) -> u32 {
    stat_fields(pid).unwrap()[2].parse().unwrap()
}

/// The processes of process group `group` that have not exited, with their
/// names and states.
fn live_members(group: u32) -> Vec<(u32, String, char)> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let (Some(fields), Ok(name)) = (
            stat_fields(pid),
            std::fs::read_to_string(format!("/proc/{pid}/comm")),
        ) else {
            continue;
        };
        let state = fields[0].chars().next().unwrap_or('?');
        if fields[2] == group.to_string() && state != 'Z' {
            members.push((pid, name.trim().to_owned(), state));
        }
    }
    members
}

#[test]
fn what_the_command_leaves_running_is_killed_before_the_release() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("sleep 60 & echo $! > '{}'; exit 0", pidfile.display());
    let out = leasehold(&server.url(), &["run", "job", "--", "sh", "-c", &script]);
    assert!(out.status.success(), "{}", stderr(&out));
    let pid = written_pid(&pidfile);
    eventually("the leftover to die", || !alive(pid));
}

/// A lease that runs out while the job is stopped, with `--on-lost ignore`:
/// the command must be let go on when the job resumes, not left stopped.
#[test]
fn a_lease_lost_while_stopped_is_ignored_when_asked() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > '{}'; sleep 2; exit 7", pidfile.display());
    let args = ["run", "job", "--lease", "1s", "--on-lost", "ignore", "--"];
    let mut runner = spawn(&server.url(), &[&args[..], &["sh", "-c", &script]].concat());
    let child = written_pid(&pidfile);
    send(runner.id(), libc::SIGTSTP);
    eventually("both to stop", || {
        state(child) == Some('T') && state(runner.id()) == Some('T')
    });
    // Nothing renews while stopped: the 1 s lease runs out.
    std::thread::sleep(Duration::from_millis(1500));
    send(runner.id(), libc::SIGCONT);
    let status = (0..1500).find_map(|_| {
        let status = runner.try_wait().unwrap();
        if status.is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
        status
    });
    if status.is_none() {
        // Its warden takes the stopped command down with it.
        runner.kill().unwrap();
    }
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(7),
        "the run never ended"
    );
}

/// The command leads its group, which holds a warden while it runs and
/// nothing once the run is over; the warden does not pass for the runner.
#[test]
fn the_warden_guards_the_group_and_ends_with_the_run() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (runner, child) = run_sleeper(&server.url(), dir.path());
    let group = group_of(child);
    assert_eq!(group, child, "the command does not lead its group");
    let members = live_members(group);
    let warden = members
        .iter()
        .find(|(_, name, _)| name == "lh-warden")
        .unwrap_or_else(|| panic!("no warden in the group: {members:?}"));
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", warden.0)).unwrap();
    assert_eq!(
        cmdline, b"lh-warden\0",
        "its command line passes for the runner"
    );
    send(runner.id(), libc::SIGTERM);
    runner.wait_with_output().unwrap();
    eventually("the group to be empty", || live_members(group).is_empty());
}

#[test]
fn ctrl_z_stops_the_command_with_the_runner() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (runner, child) = run_sleeper(&server.url(), dir.path());
    send(runner.id(), libc::SIGTSTP);
    eventually("both to stop", || {
        state(child) == Some('T') && state(runner.id()) == Some('T')
    });
    // The warden is left running, to act if the runner dies while stopped.
    let members = live_members(group_of(child));
    assert!(
        members
            .iter()
            .any(|(_, name, state)| name == "lh-warden" && *state != 'T'),
        "no running warden in the stopped job: {members:?}"
    );
    send(runner.id(), libc::SIGCONT);
    eventually("the command to run again", || state(child) == Some('S'));
    send(runner.id(), libc::SIGTERM);
    let out = runner.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(128 + libc::SIGTERM),
        "{}",
        stderr(&out)
    );
}

/// A runner killed (and reaped) when the test ends, passed or not.
struct Running(Option<Child>);

impl Running {
    fn start(url: &str, args: &[&str]) -> Self {
        Running(Some(spawn(url, args)))
    }

    fn finish(mut self) -> Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits until `n` clients wait in line for lock `name`.
fn queued(server: &RedisServer, name: &str, n: u64) {
    let key = format!("leasehold:{{{name}}}:q");
    eventually(&format!("{n} clients in line for {name:?}"), || {
        server.command(&["ZCARD", &key]).unwrap() == n.to_string()
    });
}

fn acquire_fair(url: &str, name: &str, lease: &str) -> (String, u64) {
    let out = leasehold(
        url,
        &["acquire", name, "--fair", "--lease", lease, "--no-wait"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let mut parts = text.split_whitespace();
    let token = parts.next().unwrap().to_owned();
    let fence = parts.next().unwrap().parse().unwrap();
    assert_eq!(parts.next(), None, "{text}");
    (token, fence)
}

#[test]
fn fair_runners_take_the_lock_in_the_order_they_lined_up() {
    let server = RedisServer::start();
    let url = server.url();
    let (token, _) = acquire_fair(&url, "job", "10m");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("order");
    let tags = ["first", "second", "third", "fourth"];
    let mut runners = Vec::new();
    for (n, tag) in (1..).zip(tags) {
        let script = format!("echo {tag} >> '{}'", file.display());
        runners.push(Running::start(
            &url,
            &["run", "job", "--fair", "--", "sh", "-c", &script],
        ));
        queued(&server, "job", n);
    }
    let out = leasehold(&url, &["release", "job", &token]);
    assert!(out.status.success(), "{}", stderr(&out));
    for runner in runners {
        let out = runner.finish();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let order = std::fs::read_to_string(&file).unwrap();
    assert_eq!(order.lines().collect::<Vec<_>>(), tags);
    assert_eq!(inspect(&url, "job")["held"], false);
}

#[test]
fn release_hands_a_fair_lock_from_acquire_to_the_runner_in_line() {
    let server = RedisServer::start();
    let url = server.url();
    let (token, fence) = acquire_fair(&url, "job", "10m");
    let runner = Running::start(
        &url,
        &[
            "run",
            "job",
            "--fair",
            "--",
            "sh",
            "-c",
            "echo $LEASEHOLD_FENCE",
        ],
    );
    queued(&server, "job", 1);
    // No --fair: one release serves both kinds of lock.
    let out = leasehold(&url, &["release", "job", &token]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = runner.finish();
    assert!(out.status.success(), "{}", stderr(&out));
    let next: u64 = stdout(&out).trim().parse().unwrap();
    assert!(next > fence, "{next} after {fence}");
    assert_eq!(inspect(&url, "job")["held"], false);
}

#[test]
fn a_restart_grace_grants_nothing_from_a_young_server() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let touch = format!("touch '{}'", ran.display());
    // The server has been up for seconds, far less than an hour.
    for wait in [&["--no-wait"][..], &["--wait", "500ms"]] {
        let mut args = vec!["run", "job", "--restart-grace", "1h"];
        args.extend_from_slice(wait);
        args.extend_from_slice(&["--", "sh", "-c", &touch]);
        let out = leasehold(&url, &args);
        assert_eq!(out.status.code(), Some(75), "{wait:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("--restart-grace"), "{}", stderr(&out));
        assert!(!ran.exists(), "the command ran within the grace");
    }
    let out = leasehold(
        &url,
        &[
            "acquire",
            "job",
            "--fair",
            "--restart-grace",
            "1h",
            "--no-wait",
        ],
    );
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    // The status line says what holds the wait back, not "free".
    let out = leasehold(
        &url,
        &[
            "run",
            "job",
            "--restart-grace",
            "1h",
            "--wait",
            "1500ms",
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains(&format!("redis at {} grants no lock for ", server.addr()))
            && !said.contains("free this moment"),
        "{said}"
    );
    // A grace that ends within the wait: the lock comes once it is over.
    let out = leasehold(
        &url,
        &[
            "run",
            "job",
            "--restart-grace",
            "2s",
            "--wait",
            "1m",
            "--",
            "sh",
            "-c",
            &touch,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(ran.exists());
}

/// Runs a command that waits for a go-ahead and exits 4, stops Redis under
/// it once it runs, and returns what the runner said.
fn run_with_redis_gone_at_the_release(extra: &[&str]) -> Output {
    let mut server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
    let script = format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.02; done; exit 4",
        ready.display(),
        go.display()
    );
    let mut args = vec!["run", "job"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    let runner = Running::start(&server.url(), &args);
    eventually("the command to start", || ready.exists());
    // The 30 s lease outlives the release's tries: the loss is not what
    // ends the run.
    server.stop();
    std::fs::write(&go, "").unwrap();
    runner.finish()
}

#[test]
fn a_release_that_gets_no_answer_exits_76() {
    let out = run_with_redis_gone_at_the_release(&[]);
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    assert!(stderr(&out).contains("no answer"), "{}", stderr(&out));
}

#[test]
fn a_release_that_gets_no_answer_only_warns_when_losses_are_ignored() {
    let out = run_with_redis_gone_at_the_release(&["--on-lost", "ignore"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning"), "{}", stderr(&out));
    assert!(stderr(&out).contains("no answer"), "{}", stderr(&out));
}

#[test]
fn a_killed_fair_waiter_is_passed_over_after_its_heartbeat() {
    let server = RedisServer::start();
    let url = server.url();
    let (token, _) = acquire_fair(&url, "job", "10m");
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let mut first = Running::start(&url, &["run", "job", "--fair", "--", "true"]);
    queued(&server, "job", 1);
    let second = Running::start(
        &url,
        &[
            "run",
            "job",
            "--fair",
            "--",
            "sh",
            "-c",
            &format!("touch '{}'", ran.display()),
        ],
    );
    queued(&server, "job", 2);
    // SIGKILL: the first waiter cannot leave the line by itself.
    if let Some(child) = first.0.as_mut() {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    eventually("the killed waiter's heartbeat to run out", || {
        let waiters = server.command(&["KEYS", "leasehold:{job}:w:*"]).unwrap();
        waiters.lines().count() == 1
    });
    let out = leasehold(&url, &["release", "job", &token]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = second.finish();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(ran.exists(), "the live waiter did not run");
    assert_eq!(
        server.command(&["ZCARD", "leasehold:{job}:q"]).unwrap(),
        "0"
    );
}

/// `leasehold ARGS` with no `--url`: the demo brings its own server.
fn demo(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("LEASEHOLD_URL")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The pid of the demo's private server, from the line that announces it.
fn demo_server_pid(stderr: &str) -> u32 {
    let (_, rest) = stderr
        .split_once("redis-server (pid ")
        .unwrap_or_else(|| panic!("no server announced in: {stderr}"));
    rest.split(')').next().unwrap().parse().unwrap()
}

#[test]
fn demo_summary_as_json_counts_every_update() {
    for fair in [false, true] {
        let mut args = vec!["demo", "--seconds", "1", "--workers", "3", "--json"];
        if fair {
            args.push("--fair");
        }
        let out = demo(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(!alive(demo_server_pid(&stderr(&out))), "server left behind");
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["fair"], fair);
        let acquisitions = summary["acquisitions"].as_u64().unwrap();
        assert!(acquisitions > 0, "{summary}");
        assert_eq!(summary["counter"], acquisitions);
        assert_eq!(summary["lost_updates"], 0);
        let shares = summary["shares"].as_array().unwrap();
        assert_eq!(shares.len(), 3);
        let total: f64 = shares.iter().map(|s| s.as_f64().unwrap()).sum();
        assert!((total - 1.0).abs() < 0.01, "{summary}");
        for q in ["p50", "p99", "max"] {
            assert!(summary["wait_ms"][q].as_f64().unwrap() >= 0.0, "{summary}");
        }
        assert!(summary["calls_per_acquisition"].as_f64().unwrap() > 1.0);
    }
}

#[test]
fn demo_prints_plain_lines_and_a_summary_when_not_at_a_terminal() {
    let out = demo(&["demo", "--seconds", "2", "--workers", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!alive(demo_server_pid(&stderr(&out))), "server left behind");
    let text = stdout(&out);
    assert!(
        !text.contains('\x1b'),
        "escape codes off a terminal: {text:?}"
    );
    assert!(text.contains(" acquisitions ("), "{text}");
    assert!(text.contains("no update lost"), "{text}");
}

#[test]
fn demo_without_redis_server_says_how_to_install_it() {
    let out = Command::new(BIN)
        .args(["demo", "--seconds", "1"])
        .env("LEASEHOLD_REDIS_SERVER", "/nonexistent/redis-server")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("apt-get install redis-server"));
}

#[test]
fn watch_once_json_shows_a_held_and_a_free_lock() {
    let server = RedisServer::start();
    let (_, fence) = acquire(&server.url(), "held", "30s");
    let out = leasehold(
        &server.url(),
        &["watch", "--once", "--json", "held", "free"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let locks: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(locks.len(), 2);
    assert_eq!(locks[0]["name"], "held");
    assert_eq!(locks[0]["held"], true);
    assert_eq!(locks[0]["last_fence"], fence);
    assert!(locks[0]["remaining_ms"].as_u64().unwrap() > 0);
    assert_eq!(locks[1]["name"], "free");
    assert_eq!(locks[1]["held"], false);
    assert_eq!(locks[1]["last_fence"], serde_json::Value::Null);
    assert_eq!(locks[1]["waiting_clients"], 0);
}

/// The binary on a pseudo-terminal of its own, as at an interactive shell:
/// it leads a session whose controlling terminal is the pty, so a Ctrl-C
/// typed into the pty is a SIGINT to it.
struct OnTerminal {
    child: Child,
    master: std::fs::File,
    seen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl OnTerminal {
    fn start(args: &[String]) -> Self {
        use std::os::fd::FromRawFd;
        use std::os::unix::process::CommandExt;
        let (mut master, mut slave) = (0, 0);
        let size = libc::winsize {
            ws_row: 40,
            ws_col: 120,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty writes the two descriptors; the files own them from here.
        let (master, slave) = unsafe {
            let done = libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &size,
            );
            assert_eq!(done, 0, "openpty: {}", std::io::Error::last_os_error());
            (
                std::fs::File::from_raw_fd(master),
                std::fs::File::from_raw_fd(slave),
            )
        };
        let mut command = Command::new(BIN);
        command
            .args(args)
            .env_remove("LEASEHOLD_URL")
            .env_remove("REDIS_URL")
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        drop(command);
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut from = master.try_clone().unwrap();
        let into = std::sync::Arc::clone(&seen);
        let reader = std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            // EIO once the last holder of the pty's other side has gone.
            while let Ok(n @ 1..) = from.read(&mut buf) {
                into.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        OnTerminal {
            child,
            master,
            seen,
            reader: Some(reader),
        }
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().unwrap()).into_owned()
    }

    /// Types Ctrl-C and returns the exit code and everything drawn.
    fn ctrl_c(mut self) -> (Option<i32>, String) {
        use std::io::Write;
        self.master.write_all(b"\x03").unwrap();
        let status = self.child.wait().unwrap();
        self.reader.take().unwrap().join().unwrap();
        (status.code(), self.screen())
    }
}

impl Drop for OnTerminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The cursor, hidden while a view draws, is shown again at the end.
fn assert_terminal_restored(screen: &str) {
    let hidden = screen.rfind("\x1b[?25l").expect("the view never drew");
    let shown = screen.rfind("\x1b[?25h").expect("cursor left hidden");
    assert!(shown > hidden, "cursor left hidden: {screen:?}");
}

#[test]
fn the_waiting_status_line_is_redrawn_in_place_on_a_terminal() {
    let server = RedisServer::start();
    let url = server.url();
    acquire(&url, "job", "5m");
    let args = ["--url", &url, "run", "job", "--", "true"].map(String::from);
    let terminal = OnTerminal::start(&args);
    let drawn = "\r\x1b[2Kleasehold: waiting for lock \"job\"";
    eventually("the line to be drawn twice", || {
        terminal.screen().matches(drawn).count() >= 2
    });
    let (code, screen) = terminal.ctrl_c();
    assert_eq!(code, Some(128 + libc::SIGINT), "{screen:?}");
    // Erased before the message that the wait was ended.
    let last = screen.rfind(drawn).unwrap();
    let erased = screen.rfind("\r\x1b[2Kleasehold: SIGINT ended the wait");
    assert!(erased.is_some_and(|at| at > last), "{screen:?}");
}

#[test]
fn demo_draws_live_on_a_terminal_and_stops_everything_on_ctrl_c() {
    let args = ["demo", "--seconds", "600", "--workers", "2"].map(String::from);
    let terminal = OnTerminal::start(&args);
    eventually("the live view to show a holder", || {
        terminal.screen().contains("holds the lock")
    });
    let server = demo_server_pid(&terminal.screen());
    let (code, screen) = terminal.ctrl_c();
    assert_eq!(code, Some(128 + libc::SIGINT), "{screen}");
    assert_terminal_restored(&screen);
    // Ctrl-C reached the demo, not its server: the summary still read it.
    assert!(screen.contains("redis calls"), "{screen}");
    assert!(screen.contains("no update lost"), "{screen}");
    assert!(!alive(server), "server left behind");
}

#[test]
fn watch_draws_live_on_a_terminal_and_exits_cleanly_on_ctrl_c() {
    let server = RedisServer::start();
    acquire(&server.url(), "job", "30s");
    let args = ["--url", &server.url(), "watch", "job", "idle"].map(String::from);
    let terminal = OnTerminal::start(&args);
    eventually("the view to draw both locks", || {
        let screen = terminal.screen();
        screen.contains("job ") && screen.contains("held") && screen.contains("idle ")
    });
    let (code, screen) = terminal.ctrl_c();
    assert_eq!(code, Some(0), "{screen}");
    assert_terminal_restored(&screen);
}

/// At a terminal, Redis not answering is said under the last table read,
/// and the view goes on with the lock as Redis has it once it is back.
#[test]
fn watch_on_a_terminal_says_redis_is_not_answering_and_goes_on() {
    let mut server = RedisServer::start();
    acquire(&server.url(), "job", "1m");
    let args = ["--url", &server.url(), "watch", "job"].map(String::from);
    let terminal = OnTerminal::start(&args);
    eventually("the view to draw the lock", || {
        terminal.screen().contains("held")
    });
    server.stop();
    eventually("the view to say redis is not answering", || {
        let screen = terminal.screen();
        screen.contains("redis not answering since") && screen.contains("retrying")
    });
    server.restart();
    // Without persistence the restart lost the lock: free once read again.
    eventually("the view to show the lock free", || {
        let screen = terminal.screen();
        let after = screen.rfind("retrying").unwrap_or(0);
        screen[after..].contains("free")
    });
    let (code, screen) = terminal.ctrl_c();
    assert_eq!(code, Some(0), "{screen}");
    assert_terminal_restored(&screen);
}

/// The cron story: two hosts start the same job half a second apart; the
/// first runs it and ends at once, the second finds the lock held on.
#[test]
fn run_once_with_hold_at_least_runs_the_job_once() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ran");
    let job = format!("echo ran >> '{}'", log.display());
    let args = [
        "run",
        "nightly",
        "--hold-at-least",
        "3s",
        "--no-wait",
        "--",
        "sh",
        "-c",
        &job,
    ];
    let first = leasehold(&url, &args);
    std::thread::sleep(Duration::from_millis(500));
    let second = leasehold(&url, &args);
    let mut codes = [first.status.code(), second.status.code()];
    codes.sort();
    assert_eq!(
        codes,
        [Some(0), Some(75)],
        "{}\n{}",
        stderr(&first),
        stderr(&second)
    );
    let ran = std::fs::read_to_string(&log).unwrap();
    assert_eq!(ran.lines().count(), 1, "the job ran more than once");
    // Once the hold is over the lock is free again.
    eventually("the hold to end", || {
        inspect(&url, "nightly")["held"] == false
    });
}

#[test]
fn run_with_max_hold_ends_the_lease_at_the_cap_with_76() {
    let server = RedisServer::start();
    let out = leasehold(
        &server.url(),
        &[
            "run",
            "job",
            "--max-hold",
            "1s",
            "--lease",
            "300ms",
            "--",
            "sleep",
            "5",
        ],
    );
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    assert!(stderr(&out).contains("max hold of 1s"), "{}", stderr(&out));
    // The line that tells of the SIGTERM says why the lease ended.
    assert!(
        stderr(&out).contains("lost while the command ran (it reached its max hold"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn refused_credentials_exit_77_and_a_refused_database_78() {
    let server = RedisServer::start_with_args(&["--requirepass", "s3cret"]);
    let port = server.port();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let touch = format!("touch '{}'", ran.display());
    let cases = [
        (
            format!("redis://:wrong@127.0.0.1:{port}"),
            77,
            "credentials",
        ),
        (format!("redis://127.0.0.1:{port}"), 77, "password"),
        (
            format!("redis://:s3cret@127.0.0.1:{port}/99"),
            78,
            "database",
        ),
        // TLS asked of a port that speaks plain RESP.
        (
            format!("rediss://:s3cret@127.0.0.1:{port}/#insecure"),
            78,
            "redis:// URL",
        ),
    ];
    for (url, code, says) in cases {
        for args in [
            &["run", "job", "--", "sh", "-c", &touch][..],
            &["acquire", "job", "--wait", "30s"],
            &["inspect", "job"],
        ] {
            let out = leasehold(&url, args);
            assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
            assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
            assert!(!stderr(&out).contains("wrong"), "{}", stderr(&out));
            // What Redis said, in its words, without the client's dump of
            // a pipeline or the names of its error kinds.
            for noise in ["Pipeline", "Index 0", "AuthenticationFailed"] {
                assert!(!stderr(&out).contains(noise), "{}", stderr(&out));
            }
        }
    }
    let out = leasehold(&format!("redis://127.0.0.1:{port}"), &["acquire", "job"]);
    assert_eq!(
        stderr(&out),
        format!(
            "leasehold: redis at 127.0.0.1:{port} requires a password (connect): put it in the \
             URL, redis://:PASSWORD@host:port or redis://USER:PASSWORD@host:port: NOAUTH \
             Authentication required.\n"
        )
    );
    let out = leasehold(
        &format!("redis://:wrong@127.0.0.1:{port}"),
        &["acquire", "job"],
    );
    assert_eq!(
        stderr(&out),
        format!(
            "leasehold: redis at 127.0.0.1:{port} refused the credentials (connect): check the \
             user and password in the URL (redis://USER:PASSWORD@host:port): Password \
             authentication failed\n"
        )
    );
    assert!(!ran.exists(), "the command ran without the lock");
}

/// A URL that names a replica or a Sentinel is a setting to fix (78): the
/// message says what to point it at, and nothing runs.
#[test]
fn a_replica_or_a_sentinel_url_exits_78_and_runs_nothing() {
    // No wait for more replicas before the first sync.
    let master = RedisServer::start_with_args(&["--repl-diskless-sync-delay", "0"]);
    let replica =
        RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    // Until its first sync a replica may answer LOADING, which passes.
    eventually("the replica's first sync", || {
        replica
            .command(&["INFO", "replication"])
            .unwrap()
            .contains("master_link_status:up")
    });
    let sentinels = leasehold_testkit::Sentinels::start(0, 1);
    let sentinel = &sentinels.sentinels()[0];
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let touch = format!("touch '{}'", ran.display());
    let run = ["run", "job", "--", "sh", "-c", &touch];
    let acquire = ["acquire", "job", "--wait", "30s"];
    let cases = [
        (
            (replica.url(), replica.addr().to_string()),
            "is a read-only replica and refused acquire: point the URL at its master",
            &[&run[..], &acquire][..],
        ),
        (
            (sentinel.url(), sentinel.addr().to_string()),
            "is a Sentinel, not a data node: point the URL at the master it watches",
            &[&run[..], &acquire, &["inspect", "job"]],
        ),
    ];
    for ((url, addr), says, commands) in cases {
        for args in commands {
            let out = leasehold(&url, args);
            assert_eq!(out.status.code(), Some(78), "{args:?}: {}", stderr(&out));
            let expected = format!("leasehold: redis at {addr} {says}");
            assert!(stderr(&out).starts_with(&expected), "{}", stderr(&out));
            assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
        }
        let out = leasehold(&url, &["acquire", "job", "--json"]);
        assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
        let failure: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(failure["error"], "config", "{failure}");
    }
    assert!(!ran.exists(), "the command ran without the lock");
}

/// The demo brings its own server: its help offers no --url, and a --url
/// before or after `demo` is refused with the reason, before any server is
/// started.
#[test]
fn demo_takes_no_url_and_does_not_offer_one() {
    let help = demo(&["demo", "--help"]);
    assert!(help.status.success(), "{}", stderr(&help));
    assert!(stdout(&help).contains("--workers"), "{}", stdout(&help));
    assert!(!stdout(&help).contains("--url"), "{}", stdout(&help));
    let url = unreachable_url();
    for args in [&["demo", "--url", &url][..], &["--url", &url, "demo"]] {
        let out = demo(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert_eq!(
            stderr(&out),
            "leasehold: the demo starts a redis-server of its own and takes no --url: run it \
             without --url, and give --url to the other commands (run, acquire, ...) to use \
             your Redis\n"
        );
    }
}

/// `watch` off a terminal prints a line when a lock changes; its count of
/// waiters is in words.
#[test]
fn watch_lines_count_waiters_in_words() {
    use std::io::{BufRead, BufReader};

    let server = RedisServer::start();
    let url = server.url();
    let (token, _) = acquire(&url, "job", "1m");
    let waiter = spawn(&url, &["acquire", "job", "--wait", "2m", "--quiet"]);
    queued(&server, "job", 1);
    let mut watch = spawn(&url, &["watch", "job"]);
    let mut line = String::new();
    BufReader::new(watch.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    watch.kill().unwrap();
    watch.wait().unwrap();
    assert!(line.ends_with(", 1 waiter\n"), "{line:?}");
    let out = leasehold(&url, &["release", "job", &token]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = waiter.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Where the library's advice is a call or a setting of its Rust API, the
/// command names its own subcommand or flag instead.
#[test]
fn advice_names_the_commands_way_not_the_rust_api() {
    let server = RedisServer::start();
    let url = server.url();
    let out = leasehold(&url, &["acquire", "pool", "--semaphore", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for json in [false, true] {
        let mut args = vec!["acquire", "pool", "--semaphore", "3", "--no-wait"];
        if json {
            args.push("--json");
        }
        let out = leasehold(&url, &args);
        assert_eq!(out.status.code(), Some(65), "{}", stderr(&out));
        let said = if json { stdout(&out) } else { stderr(&out) };
        assert!(
            said.contains("has 2 permits, not 3")
                && said.contains("`leasehold semaphore set-permits NAME N`"),
            "{said}"
        );
        assert!(!said.contains("Semaphore::set_permits"), "{said}");
    }

    // Replies that come later than the command timeout.
    let proxy = leasehold_testkit::FaultProxy::start(server.addr());
    proxy.set_reply_latency(Duration::from_millis(300));
    let out = leasehold(
        &proxy.url(),
        &["--command-timeout", "100ms", "inspect", "pool"],
    );
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains("did not answer connect within 100ms"),
        "{said}"
    );
    assert!(
        said.contains("give it longer with --command-timeout"),
        "{said}"
    );
    assert!(!said.contains("ClientBuilder"), "{said}");
    let out = leasehold(
        &proxy.url(),
        &["--command-timeout", "5s", "inspect", "pool"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = leasehold(&url, &["--command-timeout", "0s", "inspect", "pool"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// A certificate the public roots do not know: the command says how it
/// trusts certificates, not the library's builder setting.
#[test]
fn an_untrusted_certificate_is_told_the_commands_way() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../leasehold/tests/fixtures");
    let tls_port = leasehold_testkit::free_port().to_string();
    let cert = format!("{fixtures}/server.pem");
    let key = format!("{fixtures}/server-key.pem");
    let started = RedisServer::try_start_with_args(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-auth-clients",
        "no",
    ]);
    let _server = match started {
        Ok(server) => server,
        Err(e) if e.is_tls_unsupported() => {
            eprintln!("skipped: this redis-server has no TLS support");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let out = leasehold(&url, &["inspect", "job"]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("TLS handshake"), "{said}");
    assert!(said.contains("#insecure"), "{said}");
    assert!(!said.contains("tls_root_certificate"), "{said}");
    let out = leasehold(&format!("{url}/#insecure"), &["inspect", "job"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A port where something else than Redis listens: every connection is
/// read from once and answered with `reply`, then closed. Returns
/// `127.0.0.1:PORT`.
fn not_redis(reply: &'static [u8]) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(reply);
        }
    });
    addr.to_string()
}

/// A URL that names a web server's port, or a port that answers bytes of
/// no protocol, is a setting to fix (78) named as such, at once: not a
/// TLS port, not a parse error, not a wait until the connect timeout.
#[test]
fn a_port_that_is_not_redis_exits_78_and_says_so() {
    let http = not_redis(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
    let garbage = not_redis(b"\x00\x01garbage\xff\xfe");
    let cases = [
        (format!("redis://{http}"), "it answered HTTP"),
        (format!("rediss://{http}/#insecure"), "it answered HTTP"),
        (format!("redis://{garbage}"), "not the Redis protocol"),
    ];
    for (url, says) in &cases {
        for args in [
            &["inspect", "job"][..],
            &["--connect-timeout", "1m", "acquire", "job", "--wait", "2m"],
            &["--connect-timeout", "1m", "watch", "--until-free", "job"],
        ] {
            let out = leasehold(url, args);
            let said = stderr(&out);
            assert_eq!(out.status.code(), Some(78), "{url} {args:?}: {said}");
            assert!(
                said.contains("is not a Redis server"),
                "{url} {args:?}: {said}"
            );
            assert!(said.contains(says), "{url} {args:?}: {said}");
            for wrong in ["TLS on this port", "Parse error", "Unexpected"] {
                assert!(!said.contains(wrong), "{url} {args:?}: {said}");
            }
        }
    }
}

/// `libraries` lists leasehold's Functions libraries and, with
/// `--remove-unused`, removes an older version's that no client calls,
/// keeping this version's.
#[test]
fn libraries_lists_and_removes_an_older_versions_library() {
    let server = RedisServer::start();
    if server
        .command(&["FUNCTION", "LIST"])
        .unwrap()
        .starts_with("(error)")
    {
        // Redis 6.2: no Functions, nothing to list.
        let out = leasehold(&server.url(), &["--json", "libraries"]);
        assert!(out.status.success(), "{}", stderr(&out));
        return;
    }
    let old = "leasehold_00000000000000aa";
    let code =
        format!("#!lua name={old}\nredis.register_function('{old}_x', function() return 1 end)");
    server.command(&["FUNCTION", "LOAD", &code]).unwrap();
    // This version's, loaded by a lock call.
    let out = leasehold(&server.url(), &["inspect", "job"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = leasehold(&server.url(), &["acquire", "job", "--lease", "1s"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = |out: &Output| -> Vec<(String, bool, bool)> {
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        value["libraries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["name"].as_str().unwrap().to_owned(),
                    l["this_version"].as_bool().unwrap(),
                    l["removed"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let out = leasehold(&server.url(), &["--json", "libraries"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let found = listed(&out);
    assert!(found.contains(&(old.to_owned(), false, false)), "{found:?}");
    assert_eq!(found.iter().filter(|l| l.1).count(), 1, "{found:?}");
    let out = leasehold(
        &server.url(),
        &["--json", "libraries", "--remove-unused", "--force"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let found = listed(&out);
    assert!(found.contains(&(old.to_owned(), false, true)), "{found:?}");
    assert!(found.iter().all(|l| !(l.1 && l.2)), "{found:?}");
    let out = leasehold(&server.url(), &["libraries"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains(old), "{}", stdout(&out));
    assert!(stdout(&out).contains("this version's"), "{}", stdout(&out));
}

/// `force-release --read` removes a read-write lock's readers alone, and
/// `--write` its writer alone.
#[test]
fn force_release_read_or_write_removes_one_side() {
    let server = RedisServer::start();
    let url = server.url();
    for _ in 0..2 {
        let out = leasehold(&url, &["acquire", "catalog", "--read", "--lease", "30s"]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let out = leasehold(&url, &["--json", "force-release", "catalog", "--write"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["removed"], false, "no writer: the readers stay");
    let out = leasehold(&url, &["acquire", "catalog", "--write", "--no-wait"]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let out = leasehold(&url, &["force-release", "catalog", "--read"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("removed the readers of lock"),
        "{}",
        stdout(&out)
    );
    let out = leasehold(
        &url,
        &[
            "acquire",
            "catalog",
            "--write",
            "--lease",
            "30s",
            "--no-wait",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = leasehold(&url, &["--json", "force-release", "catalog", "--read"]);
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["removed"], false, "no reader: the writer stays");
    let out = leasehold(&url, &["--json", "force-release", "catalog", "--write"]);
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["removed"], true);
    let out = leasehold(&url, &["force-release", "catalog", "--read", "--write"]);
    assert!(!out.status.success(), "one side at a time");
}

/// `semaphore set-permits --if-unset [--lifetime DUR]` sets a count only
/// where none is set, and the lifetime only with it.
#[test]
fn semaphore_set_permits_if_unset_with_a_lifetime() {
    let server = RedisServer::start();
    let url = server.url();
    let set = |permits: &str| -> serde_json::Value {
        let out = leasehold(
            &url,
            &[
                "--json",
                "semaphore",
                "set-permits",
                "pool",
                permits,
                "--if-unset",
                "--lifetime",
                "10m",
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let first = set("3");
    assert_eq!(first["set"], true, "{first}");
    assert_eq!(first["lifetime_ms"], 600_000, "{first}");
    assert_eq!(set("5")["set"], false);
    assert_eq!(inspect(&url, "pool")["permits"]["total"], 3);
    let pttl = server.command(&["PTTL", "leasehold:{pool}"]).unwrap();
    let pttl: i64 = pttl.parse().unwrap();
    assert!(pttl > 0 && pttl <= 600_000, "{pttl}");
    let out = leasehold(
        &url,
        &["semaphore", "set-permits", "pool", "2", "--lifetime", "1m"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "--lifetime needs --if-unset: {}",
        stderr(&out)
    );
}
