#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

/// What every sentinel answers to `SENTINEL GET-MASTER-ADDR-BY-NAME`.
fn reported(group: &Sentinels) -> Vec<SocketAddr> {
    group
        .sentinels()
        .iter()
        .map(|s| group.reported_master(s).unwrap())
        .collect()
}

fn follows(server: &RedisServer, master: &RedisServer) -> bool {
    let role = server.command(&["ROLE"]).unwrap();
    role.starts_with(&format!("slave\n127.0.0.1\n{}\nconnected", master.port()))
}

#[test]
fn start_refuses_an_impossible_quorum() {
    for (sentinels, quorum) in [(0, 1), (3, 0), (3, 4)] {
        let err = Sentinels::builder(1, sentinels)
            .quorum(quorum)
            .try_start()
            .unwrap_err();
        assert!(err.to_string().contains("quorum"), "{err}");
    }
    let err = Sentinels::builder(1, 1)
        .master_name("two words")
        .try_start()
        .unwrap_err();
    assert!(err.to_string().contains("one word"), "{err}");
}

/// `SENTINEL FAILOVER`: the sentinels report the replica as master, it
/// has the data, and the old master follows it.
#[test]
fn a_failover_by_command_switches_the_master_the_sentinels_report() {
    let mut group = Sentinels::builder(1, 3).master_name("leasehold").start();
    assert_eq!(group.master_name(), "leasehold");
    assert_eq!(group.quorum(), 2);
    let ports: Vec<String> = group
        .sentinels()
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port()))
        .collect();
    assert_eq!(
        group.url(),
        format!("redis+sentinel://{}/leasehold", ports.join(","))
    );
    assert_eq!(group.sentinel_addrs().len(), 3);
    assert_eq!(group.sentinel_urls()[1], group.sentinels()[1].url());
    assert_eq!(group.master_index(), 0);
    assert_eq!(reported(&group), vec![group.servers()[0].addr(); 3]);
    assert!(follows(group.replicas()[0], group.master()));
    let master = group.master();
    assert_eq!(master.command(&["SET", "k", "v"]).unwrap(), "OK");
    assert_eq!(master.command(&["WAIT", "1", "5000"]).unwrap(), "1");

    let new = group.failover();
    assert_eq!(new, 1);
    assert_eq!(group.master_index(), 1);
    let new_addr = group.servers()[1].addr();
    assert_eq!(group.master_addr(), new_addr);
    assert_eq!(reported(&group), vec![new_addr; 3]);
    assert!(group
        .master()
        .command(&["ROLE"])
        .unwrap()
        .starts_with("master\n"));
    assert_eq!(group.master().command(&["GET", "k"]).unwrap(), "v");
    assert!(follows(&group.servers()[0], group.master()));
    let refused = group.servers()[0].command(&["SET", "k", "w"]).unwrap();
    assert!(refused.starts_with("(error) READONLY"), "{refused}");
}

/// A killed master: the sentinels promote a replica, the other replica
/// follows it, and the killed server and a stopped replica come back as
/// replicas.
#[test]
fn a_killed_master_is_replaced_and_the_sentinels_report_the_new_one() {
    let mut group = Sentinels::start(2, 3);
    assert_eq!(group.master_name(), DEFAULT_MASTER_NAME);
    let old_addr = group.master().addr();
    assert_eq!(group.master().command(&["SET", "k", "v"]).unwrap(), "OK");
    assert_eq!(group.master().command(&["WAIT", "2", "5000"]).unwrap(), "2");

    let killed = group.kill_master();
    assert_eq!(killed, 0);
    assert!(group.servers()[0].pid().is_none());
    let new = group.master_index();
    assert_ne!(new, 0);
    let new_addr = group.master().addr();
    assert_ne!(new_addr, old_addr);
    assert_eq!(reported(&group), vec![new_addr; 3]);
    assert_eq!(group.master().command(&["GET", "k"]).unwrap(), "v");
    let other = 3 - new;
    assert!(follows(&group.servers()[other], group.master()));

    group.restart(killed);
    assert_eq!(group.master_index(), new);
    assert!(follows(&group.servers()[0], group.master()));
    assert_eq!(group.servers()[0].command(&["GET", "k"]).unwrap(), "v");

    let stopped = group.stop_replica(1);
    assert!(group.servers()[stopped].pid().is_none());
    assert_eq!(group.master().command(&["SET", "k", "w"]).unwrap(), "OK");
    group.restart(stopped);
    assert!(follows(&group.servers()[stopped], group.master()));
    assert_eq!(
        group.servers()[stopped].command(&["GET", "k"]).unwrap(),
        "w"
    );
    assert_eq!(group.master_addr(), new_addr);
}

/// `failover_unaided`: the sentinels report the replica as master while
/// the old master still takes writes the new one never sees; once the
/// sentinels have made it a replica, `wait_settled` returns and it follows.
#[test]
fn an_unaided_failover_leaves_the_old_master_writable_until_the_sentinels_demote_it() {
    let mut group = Sentinels::start(1, 3);
    let old = group.master_index();
    let new = group.failover_unaided();
    assert_ne!(new, old);
    assert_eq!(group.master_index(), new);
    assert_eq!(reported(&group), vec![group.servers()[new].addr(); 3]);
    let stale = &group.servers()[old];
    // Right after the switch the sentinels have not demoted it yet.
    assert_eq!(stale.command(&["SET", "lost", "1"]).unwrap(), "OK");
    group.wait_settled();
    assert_eq!(group.master_index(), new);
    assert!(follows(&group.servers()[old], &group.servers()[new]));
    assert_eq!(
        group.servers()[new].command(&["EXISTS", "lost"]).unwrap(),
        "0",
        "the new master never saw the old one's last write"
    );
}
