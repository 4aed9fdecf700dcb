//! The `leasehold` binary as shell users meet it: usage errors, durations,
//! `--json` failures, the status line while waiting, completions and the
//! man page, and `acquire --hold-at-least`. Against real redis-server
//! processes.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

use leasehold_testkit::{unreachable_url, RedisServer};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

fn command(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("LEASEHOLD_URL")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null());
    command
}

fn leasehold(url: &str, args: &[&str]) -> Output {
    command(url, args).output().unwrap()
}

fn spawn(url: &str, args: &[&str]) -> Child {
    command(url, args)
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

/// The one JSON object a `--json` command printed on stdout.
fn json_out(out: &Output) -> Value {
    let text = stdout(out);
    let mut lines = text.lines();
    let line = lines.next().unwrap_or_else(|| {
        panic!("nothing on stdout; stderr: {}", stderr(out));
    });
    assert_eq!(lines.next(), None, "more than one line: {text}");
    serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}"))
}

fn assert_json_error(out: &Output, kind: &str, code: i32) -> Value {
    assert_eq!(out.status.code(), Some(code), "{}", stderr(out));
    let error = json_out(out);
    assert_eq!(error["error"], kind, "{error}");
    assert_eq!(error["exit"], code, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(!message.is_empty());
    // The failure on stderr too, for people (the argument parser's in its
    // own words, more than the one line of the JSON message).
    assert!(!stderr(out).is_empty());
    if kind != "usage" {
        assert!(stderr(out).contains(message), "{}", stderr(out));
    }
    error
}

fn inspect(url: &str, name: &str) -> Value {
    let out = leasehold(url, &["inspect", name, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    json_out(&out)
}

/// Takes `name` with `acquire --json` and returns its output.
fn acquire(url: &str, name: &str, extra: &[&str]) -> Value {
    let mut args = vec!["acquire", name, "--json", "--no-wait"];
    args.extend_from_slice(extra);
    let out = leasehold(url, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    json_out(&out)
}

#[test]
fn a_missing_argument_is_named_and_a_mistyped_subcommand_gets_a_suggestion() {
    let url = unreachable_url();
    let out = leasehold(&url, &["release", "onlyname"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("<TOKEN>"), "{err}");
    assert!(err.contains("Usage: leasehold release"), "{err}");

    let out = leasehold(&url, &["relase", "job", "token"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("'relase'"), "{err}");
    assert!(
        err.contains("similar subcommand exists: 'release'"),
        "{err}"
    );
    assert!(stdout(&out).is_empty());
}

#[test]
fn durations_are_read_in_the_forms_people_type() {
    let server = RedisServer::start();
    let url = server.url();
    for (lease, ms) in [
        ("1m30s", 90_000),
        ("1.5s", 1_500),
        ("500ms", 500),
        ("2h", 7_200_000),
    ] {
        let taken = acquire(&url, "job", &["--lease", lease]);
        assert_eq!(taken["lease_ms"], ms, "{lease}");
        let left = inspect(&url, "job")["remaining_ms"].as_u64().unwrap();
        assert!(left <= ms, "{lease}: {left}");
        let token = taken["token"].as_str().unwrap();
        let out = leasehold(&url, &["release", "job", token]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let out = leasehold(
        &url,
        &[
            "run", "job", "--lease", "1m30s", "--wait", "1.5s", "--", "true",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_refused_duration_is_echoed_as_it_was_typed() {
    let url = unreachable_url();
    let out = leasehold(&url, &["acquire", "job", "--lease", "25h"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("25h is longer than the maximum, 24h"), "{err}");
    assert!(!err.contains("90000"), "{err}");

    let out = leasehold(
        &url,
        &["run", "job", "--wait", "3 fortnights", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("\"3 fortnights\" is not a duration"), "{err}");
    assert!(err.contains("--wait <DUR>"), "{err}");

    let out = leasehold(&url, &["acquire", "job", "--lease", "30"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("\"30\" has no unit"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_wait_that_runs_out_says_how_long_as_it_was_typed() {
    let server = RedisServer::start();
    let url = server.url();
    acquire(&url, "job", &["--lease", "2m"]);
    let out = leasehold(&url, &["acquire", "job", "--wait", "0.5s", "--quiet"]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("could not be taken within 0.5s"),
        "{}",
        stderr(&out)
    );
    // Busy errors name the holder and its lease left.
    for args in [
        &["acquire", "job", "--wait", "0.5s", "--quiet"][..],
        &["acquire", "job", "--no-wait"],
    ] {
        let out = leasehold(&url, args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(75), "{err}");
        assert!(err.contains("held by pid "), "{err}");
        // The holder's whole command line, as typed (less the URL).
        assert!(
            err.contains("(leasehold acquire job --json --no-wait --lease 2m)"),
            "{err}"
        );
        assert!(err.contains("of lease left"), "{err}");
    }
}

#[test]
fn json_failures_are_one_object_on_stdout() {
    let server = RedisServer::start();
    let url = server.url();
    acquire(&url, "job", &["--lease", "2m"]);

    let out = leasehold(&url, &["acquire", "job", "--no-wait", "--json"]);
    let error = assert_json_error(&out, "busy", 75);
    assert!(error["message"].as_str().unwrap().contains("\"job\""));
    let out = leasehold(&url, &["--json", "run", "job", "--no-wait", "--", "true"]);
    assert_json_error(&out, "busy", 75);

    let out = leasehold(&url, &["release", "job", "not-the-token", "--json"]);
    assert_json_error(&out, "lost", 76);

    // Invalid input, refused by the library and by the argument parser.
    let out = leasehold(&url, &["acquire", "", "--json"]);
    assert_json_error(&out, "usage", 2);
    let out = leasehold(&url, &["acquire", "job", "--json", "--lease", "soon"]);
    let error = assert_json_error(&out, "usage", 2);
    assert!(
        error["message"].as_str().unwrap().contains("soon"),
        "{error}"
    );
    let out = leasehold(&url, &["--json", "release", "onlyname"]);
    let error = assert_json_error(&out, "usage", 2);
    assert!(
        error["message"].as_str().unwrap().contains("<TOKEN>"),
        "{error}"
    );
    // After `--` the words are the command's.
    let out = leasehold(&url, &["run", "job", "--no-wait", "--", "echo", "--json"]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));

    for args in [
        &["acquire", "job", "--no-wait", "--json"][..],
        &["inspect", "job", "--json"],
        // A wait rides out an outage: only a bounded one ends with it.
        &["--json", "run", "job", "--wait", "1s", "--", "true"],
    ] {
        let out = leasehold(&unreachable_url(), args);
        assert_json_error(&out, "unavailable", 69);
    }
}

#[test]
fn json_failures_for_refused_credentials() {
    let server = RedisServer::start_with_args(&["--requirepass", "s3cret"]);
    let url = format!("redis://:wrong@127.0.0.1:{}", server.port());
    for args in [
        &["acquire", "job", "--json"][..],
        &["release", "job", "token", "--json"],
        &["--json", "run", "job", "--", "true"],
    ] {
        let out = leasehold(&url, args);
        let error = assert_json_error(&out, "auth", 77);
        assert!(!error["message"].as_str().unwrap().contains("wrong"));
    }
}

#[test]
fn json_results_of_the_shell_commands() {
    let server = RedisServer::start();
    let url = server.url();
    let taken = acquire(&url, "job", &["--lease", "1m"]);
    assert_eq!(taken["name"], "job");
    let token = taken["token"].as_str().unwrap();

    let out = leasehold(&url, &["extend", "job", token, "--lease", "2m", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json_out(&out)["lease_ms"], 120_000);

    let out = leasehold(&url, &["release", "job", token, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let released = json_out(&out);
    assert_eq!(released["freed"], true);
    assert_eq!(released["kept_ms"], Value::Null);

    let out = leasehold(&url, &["force-release", "job", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json_out(&out)["removed"], false);
}

#[test]
fn run_json_prints_the_lock_after_the_commands_own_output() {
    let server = RedisServer::start();
    let url = server.url();
    let out = leasehold(
        &url,
        &[
            "--json",
            "run",
            "job",
            "--",
            "sh",
            "-c",
            "echo from-the-command; exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0], "from-the-command");
    let lock: Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(lock["name"], "job");
    assert_eq!(lock["exit"], 3);
    assert_eq!(lock["lease_held"], true);
    assert_eq!(lock["fence"], inspect(&url, "job")["last_fence"]);
}

/// Reads `child`'s stderr until a line contains `what`; the line, or a
/// panic with everything read once stderr closes.
fn stderr_line_with(child: &mut Child, what: &str) -> String {
    let mut err = BufReader::new(child.stderr.as_mut().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            panic!("stderr closed without {what:?}: {seen}");
        }
        if line.contains(what) {
            return line;
        }
        seen.push_str(&line);
    }
}

#[test]
fn a_waiter_shows_who_holds_the_lock_on_stderr() {
    let server = RedisServer::start();
    let url = server.url();
    for (name, args) in [
        ("a", &["acquire", "a", "--wait", "2m", "--lease", "1m"][..]),
        ("r", &["run", "r", "--wait", "2m", "--", "true"]),
    ] {
        let taken = acquire(&url, name, &["--lease", "5m"]);
        let fence = taken["fence"].as_u64().unwrap();
        let mut waiter = spawn(&url, args);
        let line = stderr_line_with(&mut waiter, "waiting for lock");
        assert!(
            line.starts_with(&format!("leasehold: waiting for lock \"{name}\" (")),
            "{line}"
        );
        // Who holds it: the process that ran `acquire`, by its command line.
        assert!(line.contains(" of 2m): held by pid "), "{line}");
        assert!(
            line.contains(&format!("(leasehold acquire {name}")),
            "{line}"
        );
        assert!(line.contains("of lease left"), "{line}");
        assert!(line.contains(&format!("last fence {fence}")), "{line}");
        assert!(line.contains("1 waiter"), "{line}");
        // Not redrawn in place: stderr is not a terminal.
        assert!(!line.contains('\r'), "{line:?}");
        // The waiter takes the lock once it is given back.
        let token = taken["token"].as_str().unwrap();
        let out = leasehold(&url, &["release", name, token]);
        assert!(out.status.success(), "{}", stderr(&out));
        let out = waiter.wait_with_output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn quiet_waits_in_silence() {
    let server = RedisServer::start();
    let url = server.url();
    acquire(&url, "job", &["--lease", "5m"]);
    // Long enough for the status line, which comes after a second.
    for args in [
        &["acquire", "job", "--wait", "3s", "--quiet"][..],
        &["run", "job", "--wait", "3s", "-q", "--", "true"],
    ] {
        let out = leasehold(&url, args);
        assert_eq!(out.status.code(), Some(75), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("could not be taken within 3s"), "{err}");
        assert!(!err.contains("waiting for lock"), "{args:?}: {err}");
    }
}

/// Whether `word` stands in `text` on its own: "man" in "command" or
/// "release" in "force-release" does not count.
fn has_word(text: &str, word: &str) -> bool {
    let part = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(part) && !after.is_some_and(part)
    })
}

#[test]
fn completions_and_the_man_page_cover_every_subcommand() {
    let url = unreachable_url();
    let subcommands = [
        "run",
        "acquire",
        "release",
        "extend",
        "inspect",
        "force-release",
        "watch",
        "demo",
        "leader",
        "completions",
        "man",
    ];
    for shell in ["bash", "zsh", "fish"] {
        let out = leasehold(&url, &["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains("leasehold"), "{shell}");
        for sub in subcommands {
            assert!(has_word(&script, sub), "{shell}: no {sub}");
        }
        for flag in ["hold-at-least", "semaphore", "read", "write"] {
            // fish writes a long flag as `-l NAME`.
            let written = if shell == "fish" {
                format!("-l {flag}")
            } else {
                format!("--{flag}")
            };
            assert!(script.contains(&written), "{shell}: no {written}");
        }
    }
    let out = leasehold(&url, &["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));

    let out = leasehold(&url, &["man"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = stdout(&out);
    assert!(
        page.starts_with(".ie") || page.contains(".TH leasehold"),
        "{page}"
    );
    for sub in subcommands {
        assert!(
            page.contains(&format!("leasehold\\-{}(1)", sub.replace('-', "\\-"))),
            "no {sub}: {page}"
        );
    }
    assert!(page.contains("Exit codes"), "{page}");

    let dir = tempfile::tempdir().unwrap();
    let out = leasehold(&url, &["man", "--out-dir", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run_page = std::fs::read_to_string(dir.path().join("leasehold-run.1")).unwrap();
    assert!(run_page.contains("hold\\-at\\-least"), "{run_page}");
}

#[test]
fn acquire_hold_at_least_keeps_the_lock_after_release() {
    let server = RedisServer::start();
    let url = server.url();
    let out = leasehold(
        &url,
        &["acquire", "job", "--lease", "1m", "--hold-at-least", "10m"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let words: Vec<&str> = text.split_whitespace().collect();
    let [token, fence, hold_until] = words[..] else {
        panic!("not TOKEN FENCE HOLD_UNTIL: {text}");
    };
    let out = leasehold(
        &url,
        &[
            "release",
            "job",
            token,
            "--hold-until",
            hold_until,
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let released = json_out(&out);
    assert_eq!(released["freed"], false);
    // Kept for the rest of the hold, past the lease of a minute.
    assert!(released["kept_ms"].as_u64().unwrap() > 60_000, "{released}");

    let state = inspect(&url, "job");
    assert_eq!(state["held"], true);
    assert_eq!(state["last_fence"].to_string(), fence);
    assert!(state["remaining_ms"].as_u64().unwrap() > 60_000, "{state}");
    // Shown as kept on purpose, with the command line that took it whole.
    let holder = &state["holders"][0];
    assert_eq!(holder["kept"], true, "{state}");
    assert_eq!(
        holder["client_name"], "leasehold acquire job --lease 1m --hold-at-least 10m",
        "{state}"
    );
    let out = leasehold(&url, &["inspect", "job"]);
    let text = stdout(&out);
    assert!(
        text.contains("released and kept until its hold-at-least is over"),
        "{text}"
    );
    let out = leasehold(&url, &["acquire", "job", "--no-wait"]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    // A moment no hold reaches is refused, and changes nothing.
    let out = leasehold(
        &url,
        &["release", "job", token, "--hold-until", "99999999999999"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("more than a hold can last"),
        "{}",
        stderr(&out)
    );
    assert_eq!(inspect(&url, "job")["held"], true);
    // The token still holds it, and a second release keeps it too.
    let out = leasehold(&url, &["release", "job", token, "--hold-until", hold_until]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(inspect(&url, "job")["held"], true);
}

#[test]
fn a_hold_that_is_over_lets_the_release_free_the_lock() {
    let server = RedisServer::start();
    let url = server.url();
    let before = unix_ms_now();
    let taken = acquire(&url, "job", &["--lease", "1m", "--hold-at-least", "10m"]);
    let token = taken["token"].as_str().unwrap();
    let hold_until = taken["hold_until_unix_ms"].as_u64().unwrap();
    // Counted from after the grant, never before the command started.
    assert!(
        hold_until >= before + 10 * 60_000,
        "{hold_until} vs {before}"
    );
    // A moment already past, as when the job ran longer than the hold.
    let out = leasehold(
        &url,
        &["release", "job", token, "--hold-until", "1", "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json_out(&out)["freed"], true);
    assert_eq!(inspect(&url, "job")["held"], false);
}

#[test]
fn a_hold_longer_than_the_max_hold_is_refused_as_typed() {
    let out = leasehold(
        &unreachable_url(),
        &[
            "run",
            "job",
            "--hold-at-least",
            "90m",
            "--max-hold",
            "1h",
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("--hold-at-least 90m is longer than --max-hold 1h"),
        "{err}"
    );
}

fn unix_ms_now() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(since.as_millis()).unwrap()
}
