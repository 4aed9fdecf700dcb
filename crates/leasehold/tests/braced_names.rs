//! Names with braces: every primitive takes them, every key of such a lock
//! stays in one cluster slot, and a name never shares keys with another.

use std::time::Duration;

use leasehold::Client;
use leasehold_testkit::RedisServer;

const NAMES: [&str; 6] = ["{", "}", "a{b}c", "{user}:42", "}{%", "ü{ñ}"];

/// Takes and releases `name` with every primitive, with a waiter queued
/// behind each holder for a moment, so that every kind of key is written.
async fn every_primitive(client: &Client, waiter: &Client, name: &str) {
    let short = Duration::from_millis(100);

    let mutex = client.mutex(name).unwrap();
    let guard = mutex.acquire().await.unwrap();
    assert_eq!(guard.name(), name);
    let info = mutex.inspect().await.unwrap();
    assert!(info.held, "{name}");
    let waited = waiter.mutex(name).unwrap().acquire_timeout(short).await;
    assert!(waited.unwrap_err().is_timeout(), "{name}");
    guard.release().await.unwrap();
    assert!(!mutex.inspect().await.unwrap().held);

    let fair_name = format!("{name}:fair");
    let fair = client.fair_mutex(&fair_name).unwrap();
    let turn = fair.acquire().await.unwrap();
    let waited = waiter
        .fair_mutex(&fair_name)
        .unwrap()
        .acquire_timeout(short)
        .await;
    assert!(waited.unwrap_err().is_timeout(), "{name}");
    turn.release().await.unwrap();

    let reentrant = client.reentrant_mutex(&format!("{name}:re")).unwrap();
    let outer = reentrant.acquire().await.unwrap();
    let inner = reentrant.acquire().await.unwrap();
    assert_eq!(inner.fence(), outer.fence());
    assert_eq!(reentrant.hold_count().await.unwrap(), 2);
    inner.release().await.unwrap();
    outer.release().await.unwrap();

    let rw_name = format!("{name}:rw");
    let rw = client.rw_lock(&rw_name).unwrap();
    let writing = rw.write().acquire().await.unwrap();
    let waited = waiter
        .rw_lock(&rw_name)
        .unwrap()
        .read()
        .acquire_timeout(short)
        .await;
    assert!(waited.unwrap_err().is_timeout(), "{name}");
    writing.release().await.unwrap();
    let reading = rw.read().acquire().await.unwrap();
    reading.release().await.unwrap();

    let sem_name = format!("{name}:sem");
    let slots = client.semaphore(&sem_name, 2).unwrap();
    let both = slots.acquire_many(2).await.unwrap();
    let waited = waiter
        .semaphore(&sem_name, 2)
        .unwrap()
        .acquire_timeout(short)
        .await;
    assert!(waited.unwrap_err().is_timeout(), "{name}");
    both.release().await.unwrap();
    assert_eq!(slots.available().await.unwrap(), 2);

    let election = client.election(&format!("{name}:leader")).unwrap();
    let leadership = election.campaign("here").await.unwrap();
    let leader = election.leader().await.unwrap().expect("a leader");
    assert_eq!(leader.value, "here");
    leadership.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_takes_a_braced_name() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let waiter = Client::open(&server.url()).unwrap();
    for name in NAMES {
        every_primitive(&client, &waiter, name).await;
    }
    let guard = client.mutex("user:{42}").unwrap().acquire().await.unwrap();
    assert_eq!(
        server
            .command(&["EXISTS", "leasehold:%{user:%7B42%7D}"])
            .unwrap(),
        "1"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_differ_only_in_escapes_are_different_locks() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    // Each spelling is held at once: none of them shares a key with another.
    let names = [
        "a{b", "a%7Bb", "a%257Bb", "a%{b", "a}b", "a%7Db", "{}", "%7B%7D",
    ];
    let mut guards = Vec::new();
    for name in names {
        let guard = client.mutex(name).unwrap().try_acquire().await.unwrap();
        guards.push(guard.unwrap_or_else(|| panic!("{name} is held by another name")));
    }
    for (name, guard) in names.iter().zip(&guards) {
        let info = client.mutex(name).unwrap().inspect().await.unwrap();
        assert_eq!(info.holders.len(), 1, "{name}");
        assert_eq!(info.last_fence, Some(guard.fence()), "{name}");
    }
    for guard in guards {
        guard.release().await.unwrap();
    }
    let keys = server.command(&["DBSIZE"]).unwrap();
    // One fence counter per name is all that is left.
    assert_eq!(keys, names.len().to_string());
}

/// The tag of `name`'s keys, as the crate docs describe it.
fn escaped(name: &str) -> String {
    name.replace('%', "%25")
        .replace('{', "%7B")
        .replace('}', "%7D")
}

/// The hash tag of `key`: what Redis Cluster hashes.
fn tag_of(key: &str) -> &str {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .unwrap_or_else(|| panic!("{key} has no hash tag"))
}

/// A cluster-mode server refuses a script whose keys span slots, and
/// `CLUSTER KEYSLOT` says where every key the locks wrote lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_of_a_braced_name_is_in_one_slot() {
    let node = RedisServer::start_cluster_node();
    let client = Client::open(&node.url()).unwrap();
    let waiter = Client::open(&node.url()).unwrap();
    let slot = |key: &str| node.command(&["CLUSTER", "KEYSLOT", key]).unwrap();
    let check_keys = || {
        let keys = node.command(&["KEYS", "*"]).unwrap();
        for key in keys.lines() {
            let tag = tag_of(key);
            let name = NAMES
                .iter()
                .find(|name| tag.starts_with(&escaped(name)))
                .unwrap_or_else(|| panic!("{key}: its tag is no escaped name"));
            assert!(key.contains(&format!("%{{{}", escaped(name))), "{key}");
            assert_eq!(slot(key), slot(tag), "{key}");
            assert_eq!(slot(key), leasehold_testkit::key_slot(key).to_string());
        }
        keys.lines().count()
    };
    for name in NAMES {
        // Held, with a waiter in the queue: the lock, its fence, the queue,
        // the waiter's heartbeat.
        let guard = client.mutex(name).unwrap().acquire().await.unwrap();
        let queued = {
            let waiter = waiter.clone();
            let name = name.to_owned();
            tokio::spawn(async move {
                let mutex = waiter.mutex(&name).unwrap();
                mutex.acquire_timeout(Duration::from_secs(30)).await
            })
        };
        let queue = format!("leasehold:%{{{}}}:q", escaped(name));
        for _ in 0..1000 {
            if node.command(&["EXISTS", &queue]).unwrap() == "1" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(check_keys() >= 4, "{name}");
        guard.release().await.unwrap();
        queued.await.unwrap().unwrap().release().await.unwrap();
        every_primitive(&client, &waiter, name).await;
    }
    assert!(check_keys() >= NAMES.len());
}
