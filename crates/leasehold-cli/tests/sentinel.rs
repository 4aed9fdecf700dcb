//! The `leasehold` binary against a master watched by sentinels:
//! `redis+sentinel://` URLs and `--replicas`.

use leasehold_testkit::Sentinels;

mod common;

use common::{leasehold, spawn, stderr, Lines};

#[test]
fn replicas_acknowledge_or_the_grant_is_undone_with_74() {
    let mut group = Sentinels::start(1, 1);
    let url = group.url();
    let out = leasehold(&url, &["run", "job", "--replicas", "1", "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = leasehold(&url, &["acquire", "job", "--replicas", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let token = printed.split_whitespace().next().unwrap().to_owned();
    let extend = ["extend", "job", &token, "--lease", "20s", "--replicas", "1"];
    let out = leasehold(&url, &extend);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = leasehold(&url, &["release", "job", &token]);
    assert!(out.status.success(), "{}", stderr(&out));

    group.stop_replica(0);
    let out = leasehold(
        &url,
        &[
            "acquire",
            "job",
            "--no-wait",
            "--replicas",
            "1",
            "--replica-timeout",
            "200ms",
        ],
    );
    assert_eq!(out.status.code(), Some(74), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("only 0 of the 1 replica asked for acknowledged it within 200ms"),
        "{}",
        stderr(&out)
    );
    let out = leasehold(
        &url,
        &[
            "run",
            "job",
            "--wait",
            "1s",
            "--replicas",
            "1",
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(74), "{}", stderr(&out));
    // Without --wait too: replicas that cannot be had are an outage to
    // report within the connect timeout, not a lock to wait for.
    let out = leasehold(
        &url,
        &[
            "--connect-timeout",
            "2s",
            "run",
            "job",
            "--replicas",
            "1",
            "--replica-timeout",
            "200ms",
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(74), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the replicas do not acknowledge grants: 0 of 1"),
        "{}",
        stderr(&out)
    );
    let out = leasehold(&url, &["inspect", "job", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["held"], false, "nothing is left held: {info}");
}

/// `host:port` of the master the sentinels name now.
fn master_addr(group: &Sentinels) -> String {
    format!("127.0.0.1:{}", group.master_addr().port())
}

fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    assert!(out.status.success(), "{}", stderr(out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// `inspect` and `watch` say which master they read, by address and by
/// name, in text and in JSON; after a failover, the new one.
#[test]
fn inspect_and_watch_name_the_master_they_read() {
    let mut group = Sentinels::start(1, 3);
    let url = group.url();
    let out = leasehold(&url, &["acquire", "job", "--lease", "60s"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for failed_over in [false, true] {
        let master = master_addr(&group);
        let info = json_lines(&leasehold(&url, &["inspect", "job", "--json"]));
        assert_eq!(info[0]["server"], master, "{info:?}");
        assert_eq!(info[0]["sentinel_master"], "mymaster", "{info:?}");
        let out = leasehold(&url, &["inspect", "job"]);
        let line =
            format!("server:          {master} (master \"mymaster\", as its sentinels name it)\n");
        assert!(
            common::stdout(&out).contains(&line),
            "{}",
            common::stdout(&out)
        );
        let watched = json_lines(&leasehold(
            &url,
            &["watch", "--once", "--json", "job", "other"],
        ));
        assert_eq!(watched.len(), 2);
        for lock in &watched {
            assert_eq!(lock["server"], master, "{lock}");
            assert_eq!(lock["sentinel_master"], "mymaster", "{lock}");
        }
        let out = leasehold(&url, &["watch", "--once", "job"]);
        assert!(
            common::stdout(&out).contains(&format!("{master} (master \"mymaster\"")),
            "{}",
            common::stdout(&out)
        );
        if !failed_over {
            group.failover();
            assert_ne!(master_addr(&group), master, "the failover moved the master");
        }
    }
    // Elsewhere than through Sentinel, no master name is printed.
    let direct = group.master().url();
    let info = json_lines(&leasehold(&direct, &["inspect", "job", "--json"]));
    assert!(info[0].get("sentinel_master").is_none(), "{info:?}");
}

/// With no flag, a grant waits for the replica the master has connected:
/// a replica that acknowledges nothing ends a wait without a bound with
/// 74 within the connect timeout, the status line says why (and names no
/// holder: the grant was this process's own, undone), and `--replicas 0`
/// turns the acknowledgement off.
#[test]
fn by_default_a_replica_that_does_not_acknowledge_ends_the_wait_with_74() {
    let group = Sentinels::start(1, 1);
    let url = group.url();
    let replica = group.replicas()[0];
    let out = leasehold(&url, &["run", "job", "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));

    // The replica stays connected but applies nothing: as one cut off.
    assert_eq!(
        replica
            .command(&["CLIENT", "PAUSE", "30000", "WRITE"])
            .unwrap(),
        "OK"
    );
    let out = leasehold(
        &url,
        &[
            "--connect-timeout",
            "3s",
            "run",
            "job",
            "--replica-timeout",
            "200ms",
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(74), "{}", stderr(&out));
    let err = stderr(&out);
    let listed = format!("127.0.0.1:{}", replica.port());
    assert!(
        err.contains("only 0 of its 1 replica (") && err.contains(&listed),
        "{err}"
    );
    assert!(
        err.contains("the replicas do not acknowledge grants: 0 of 1"),
        "the status line says why: {err}"
    );
    assert!(
        !err.contains(&format!("held by pid {}", std::process::id())),
        "{err}"
    );
    let out = leasehold(&url, &["inspect", "job", "--json"]);
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["held"], false, "nothing is left held: {info}");

    let out = leasehold(&url, &["run", "job", "--replicas", "0", "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(replica.command(&["CLIENT", "UNPAUSE"]).unwrap(), "OK");
}

/// The master killed (SIGKILL) while `watch` and `watch --until-free`
/// look at a lock through the sentinels: both follow them to the promoted
/// replica, and see the release that comes after the failover.
#[test]
fn watch_rides_out_the_kill_of_the_master() {
    let mut group = Sentinels::start(1, 3);
    let url = group.url();
    let out = leasehold(
        &url,
        &[
            "acquire",
            "job",
            "--lease",
            "2m",
            "--replicas",
            "1",
            "--no-wait",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut words = printed.split_whitespace();
    let token = words.next().unwrap().to_owned();
    let fence: u64 = words.next().unwrap().parse().unwrap();
    let mut until_free = spawn(
        &url,
        &["--json", "watch", "--until-free", "--wait", "5m", "job"],
    );
    let mut ends = Lines::of(until_free.stdout.take().unwrap());
    let until_free_err = Lines::of(until_free.stderr.take().unwrap());
    let mut live = spawn(&url, &["watch", "job"]);
    let mut view = Lines::of(live.stdout.take().unwrap());
    let live_err = Lines::of(live.stderr.take().unwrap());
    let held = view.until("about the lock", |_| true);
    assert!(held.contains(": held"), "{held}");
    for _ in 0..1500 {
        let registered = group
            .master()
            .command(&["EXISTS", "leasehold:{job}:watch"])
            .unwrap();
        if registered.trim() == "1" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    group.kill_master();
    assert!(
        until_free.try_wait().unwrap().is_none(),
        "watch --until-free ended in the failover: {:#?}",
        until_free_err.rest()
    );
    assert!(
        live.try_wait().unwrap().is_none(),
        "watch ended in the failover: {:#?}",
        live_err.rest()
    );
    let out = leasehold(&url, &["release", "job", &token]);
    assert!(out.status.success(), "{}", stderr(&out));

    let ended: serde_json::Value =
        serde_json::from_str(&ends.until("with the end", |_| true)).unwrap();
    assert_eq!(
        (ended["ended"].as_str(), ended["fence"].as_u64()),
        (Some("released"), Some(fence)),
        "{ended}"
    );
    let free: serde_json::Value = serde_json::from_str(&ends.until("when free", |_| true)).unwrap();
    assert_eq!(free["free"], true, "{free}");
    let status = until_free.wait().unwrap();
    assert!(status.success(), "{:#?}", until_free_err.rest());

    let promoted = master_addr(&group);
    let free = view.until("with the lock free", |line| line.contains(": free"));
    assert!(free.contains(&promoted), "on the promoted master: {free}");
    common::interrupt(&live);
    let status = live.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{:#?}", live_err.rest());
}
