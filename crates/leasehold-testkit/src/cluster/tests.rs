#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::resp::Value;

/// Sends `commands` on one connection (`READONLY` and `ASKING` hold for
/// the connection only) and renders each reply.
fn on_one_connection(server: &RedisServer, commands: &[&[&str]]) -> Vec<String> {
    server
        .pipeline(commands)
        .unwrap()
        .iter()
        .map(Value::render)
        .collect()
}

/// A key of a slot that shard `shard` of `shards` owns at the start.
fn key_of_shard(shard: usize, shards: usize) -> String {
    let slots = slot_bound(shard, shards)..slot_bound(shard + 1, shards);
    (0..)
        .map(|n| format!("key-{n}"))
        .find(|key| slots.contains(&key_slot(key)))
        .unwrap()
}

fn info(server: &RedisServer) -> String {
    server.command(&["CLUSTER", "INFO"]).unwrap()
}

#[test]
fn key_slot_follows_hash_tags() {
    assert_eq!(key_slot("foo"), 12182);
    assert_eq!(key_slot(""), 0);
    assert_eq!(key_slot("123456789"), 0x31C3 % SLOTS);
    assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
    assert_eq!(key_slot("a{b}c{d}"), key_slot("b"));
    // An empty tag, or an unclosed one, hashes the whole key.
    assert_eq!(key_slot("{}b"), crc16(b"{}b") % SLOTS);
    assert_ne!(key_slot("{}b"), key_slot("b"));
    assert_eq!(key_slot("x{y"), crc16(b"x{y") % SLOTS);
    assert_eq!(key_slot(b"{\xff}z"), key_slot(b"\xff"));
}

#[test]
fn cluster_nodes_lines_are_parsed() {
    let text = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host slave \
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 \
connected 5461-10922 [5460-<-e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca]
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 \
connected 0-5460 [5460->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 master,fail - 1 1 5 \
disconnected
";
    let view = View::parse(text);
    assert_eq!(view.entries.len(), 4);
    let replica = &view.entries[0];
    assert_eq!(replica.port, 30004);
    assert!(!replica.is_master());
    assert_eq!(
        replica.master.as_deref(),
        Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
    );
    assert_eq!(view.entries[1].slots, vec![(5461, 10922)]);
    assert_eq!(view.myself().unwrap().port, 30001);
    assert_eq!(view.owner(5460).unwrap().port, 30001);
    assert_eq!(view.owner(5461).unwrap().port, 30002);
    assert!(!view.entries[3].is_working());
    assert_eq!(view.working().count(), 3);
    assert_eq!(view.layout().len(), 3);
}

#[test]
fn start_refuses_zero_masters() {
    let err = RedisCluster::builder(0, 1).try_start().unwrap_err();
    assert!(err.to_string().contains("1 to 16384 masters"), "{err}");
}

/// Three shards of a master and a replica: every node reports the whole
/// slot map, keys are served by the master of their slot and redirected
/// elsewhere, and each replica holds its master's writes.
#[test]
fn a_three_master_cluster_routes_keys_to_the_owner_of_their_slot() {
    let cluster = RedisCluster::start(3, 1);
    assert_eq!(cluster.shards(), 3);
    assert_eq!(cluster.nodes().len(), 6);
    assert_eq!(cluster.masters().len(), 3);
    assert_eq!(cluster.replicas().len(), 3);
    let version = server_version().unwrap();
    for node in cluster.nodes() {
        assert_ne!(node.port(), 6379);
        let bus = node.cluster_bus_port().unwrap();
        if !version.has_cluster_port() {
            assert_eq!(bus, node.port() + 10_000, "{version}");
        }
        assert!(
            node.command(&["CLUSTER", "NODES"])
                .unwrap()
                .contains(&format!("127.0.0.1:{}@{bus}", node.port())),
            "{version}"
        );
        let info = info(node);
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
        assert!(info.contains("cluster_known_nodes:6"), "{info}");
        assert!(info.contains("cluster_size:3"), "{info}");
    }
    let urls = cluster.urls();
    assert_eq!(urls.len(), 6);
    assert_eq!(
        urls[..3],
        cluster
            .masters()
            .iter()
            .map(|m| m.url())
            .collect::<Vec<_>>()[..]
    );
    assert_eq!(cluster.addr_of_slot(0), cluster.master(0).addr());
    assert_eq!(cluster.addr_of_slot(SLOTS - 1), cluster.master(2).addr());

    let keys = ["job", "lease:7", "{tenant}a", "{tenant}b", "fence", "x"];
    for key in keys {
        let slot = key_slot(key);
        assert_eq!(
            cluster
                .master(0)
                .command(&["CLUSTER", "KEYSLOT", key])
                .unwrap(),
            slot.to_string()
        );
        let owner = cluster.master_for_key(key);
        assert_eq!(owner.command(&["SET", key, "v"]).unwrap(), "OK");
        let moved = format!("(error) MOVED {slot} 127.0.0.1:{}", owner.port());
        for other in cluster.masters() {
            if other.port() != owner.port() {
                assert_eq!(other.command(&["GET", key]).unwrap(), moved);
            }
        }
        let shard = cluster.shard_of_slot(slot);
        assert_eq!(owner.port(), cluster.master(shard).port());
        assert_eq!(owner.command(&["WAIT", "1", "5000"]).unwrap(), "1");
        let replica = cluster.replicas_of(shard)[0];
        assert_eq!(
            on_one_connection(replica, &[&["READONLY"], &["GET", key]]),
            ["OK", "v"]
        );
    }
}

/// A slot moved in steps: a moved key is asked for at the target, a key
/// not yet moved is still served by the source, and once the slot is
/// handed over every node sends clients to the target.
#[test]
fn a_slot_migration_moves_keys_and_answers_ask_in_between() {
    let cluster = RedisCluster::start(2, 0);
    let (moved, staying) = ("{m}moved", "{m}staying");
    let slot = key_slot(moved);
    let from = cluster.shard_of_slot(slot);
    let to = 1 - from;
    let source_port = cluster.master(from).port();
    let target_port = cluster.master(to).port();
    for key in [moved, staying] {
        assert_eq!(
            cluster
                .master_for_key(key)
                .command(&["SET", key, key])
                .unwrap(),
            "OK"
        );
    }

    let migration = cluster.begin_migration(slot, to);
    assert_eq!(migration.slot(), slot);
    assert_eq!(migration.source().port(), source_port);
    assert_eq!(migration.target().port(), target_port);
    assert!(migration.move_key(moved));
    assert!(!migration.move_key(moved), "a key moved twice");

    let source = migration.source();
    let target = migration.target();
    assert_eq!(
        source.command(&["GET", moved]).unwrap(),
        format!("(error) ASK {slot} 127.0.0.1:{target_port}")
    );
    assert_eq!(source.command(&["GET", staying]).unwrap(), staying);
    assert_eq!(
        target.command(&["GET", moved]).unwrap(),
        format!("(error) MOVED {slot} 127.0.0.1:{source_port}")
    );
    assert_eq!(
        on_one_connection(target, &[&["ASKING"], &["GET", moved]]),
        ["OK", moved]
    );
    assert_eq!(cluster.addr_of_slot(slot).port(), source_port);

    assert_eq!(migration.move_keys(), 1);
    migration.finish();
    assert_eq!(cluster.addr_of_slot(slot).port(), target_port);
    for node in cluster.nodes() {
        let owner = node.command(&["CLUSTER", "NODES"]).unwrap();
        assert_eq!(View::parse(&owner).owner(slot).unwrap().port, target_port);
    }
    let target = cluster.master(to);
    for key in [moved, staying] {
        assert_eq!(target.command(&["GET", key]).unwrap(), key);
        assert_eq!(
            cluster.master(from).command(&["GET", key]).unwrap(),
            format!("(error) MOVED {slot} 127.0.0.1:{target_port}")
        );
    }

    // And back in one go.
    cluster.migrate_slot(slot, from);
    assert_eq!(cluster.addr_of_slot(slot).port(), source_port);
    assert_eq!(
        cluster.master(from).command(&["GET", staying]).unwrap(),
        staying
    );
    assert_eq!(
        cluster
            .master(from)
            .command(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()])
            .unwrap(),
        "2"
    );
}

/// `CLUSTER FAILOVER` on a replica: it takes the shard's slots and its
/// data, and the old master follows it.
#[test]
fn a_graceful_failover_promotes_the_replica() {
    let mut cluster = RedisCluster::start(3, 1);
    let old = cluster.master_index(0);
    let old_port = cluster.master(0).port();
    let replica_port = cluster.replicas_of(0)[0].port();
    let key = key_of_shard(0, 3);
    let slot = key_slot(&key);
    assert_eq!(
        cluster.master(0).command(&["SET", &key, "before"]).unwrap(),
        "OK"
    );

    let new = cluster.failover(0);
    assert_ne!(new, old);
    assert_eq!(cluster.master(0).port(), replica_port);
    assert_eq!(cluster.master_index(0), new);
    assert_eq!(cluster.replicas_of(0)[0].port(), old_port);
    assert_eq!(cluster.addr_of_slot(0).port(), replica_port);
    let role = cluster.nodes()[old].command(&["ROLE"]).unwrap();
    assert!(
        role.starts_with(&format!("slave\n127.0.0.1\n{replica_port}\nconnected")),
        "{role}"
    );
    let new_master = cluster.master(0);
    assert_eq!(new_master.command(&["GET", &key]).unwrap(), "before");
    assert_eq!(new_master.command(&["SET", &key, "after"]).unwrap(), "OK");
    assert_eq!(
        cluster.nodes()[old].command(&["GET", &key]).unwrap(),
        format!("(error) MOVED {slot} 127.0.0.1:{replica_port}")
    );
}

/// A master killed with SIGKILL: its replica takes over with the data it
/// had, and the killed node, restarted, rejoins as the new master's
/// replica.
#[test]
fn a_killed_master_is_replaced_by_its_replica_and_rejoins_as_one() {
    let mut cluster = RedisCluster::start(3, 1);
    let key = "{kill}k";
    let shard = cluster.shard_of_slot(key_slot(key));
    let owner = cluster.master(shard);
    assert_eq!(owner.command(&["SET", key, "kept"]).unwrap(), "OK");
    assert_eq!(owner.command(&["WAIT", "1", "5000"]).unwrap(), "1");
    let replica_port = cluster.replicas_of(shard)[0].port();

    let killed = cluster.kill_master(shard);
    assert!(cluster.nodes()[killed].pid().is_none());
    assert_eq!(cluster.master(shard).port(), replica_port);
    assert_eq!(cluster.master_for_key(key).port(), replica_port);
    assert_eq!(
        cluster.master(shard).command(&["GET", key]).unwrap(),
        "kept"
    );
    assert_eq!(cluster.urls().len(), 5);
    for node in cluster.nodes().iter().filter(|n| n.pid().is_some()) {
        assert!(info(node).contains("cluster_state:ok"));
    }

    cluster.restart_node(killed);
    assert_eq!(cluster.master(shard).port(), replica_port);
    let role = cluster.nodes()[killed].command(&["ROLE"]).unwrap();
    assert!(
        role.starts_with(&format!("slave\n127.0.0.1\n{replica_port}\nconnected")),
        "{role}"
    );
    assert_eq!(
        on_one_connection(&cluster.nodes()[killed], &[&["READONLY"], &["GET", key]]),
        ["OK", "kept"]
    );
}
