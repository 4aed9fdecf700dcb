//! The Functions libraries of older leasehold versions: listed, removed when
//! no connected client may call them, kept while one may, and the current
//! version's never; on one server and on every master of a Redis Cluster.

mod common;

use std::time::Duration;

use leasehold::redis::aio::MultiplexedConnection;
use leasehold::redis::{self, Value};
use leasehold::{Client, ScriptLibrary};
use leasehold_testkit::{RedisCluster, RedisServer};

/// A bound on things that must not hang; never a measure of speed.
const NO_HANG: Duration = Duration::from_secs(30);

/// The library an older leasehold would have loaded: another hash.
const OLD: &str = "leasehold_00000000000000aa";

fn old_library_code() -> String {
    format!(
        "#!lua name={OLD}\nredis.register_function('{OLD}_acquire', function(KEYS, ARGV) \
         return 1 end)\n"
    )
}

async fn query<T: redis::FromRedisValue>(conn: &mut MultiplexedConnection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(conn).await.unwrap()
}

/// A connection of a tool that is not a lock client: named so, where the
/// server takes names (Redis 7.2+, Valkey). Whether it took it.
async fn tool(url: &str, lib_name: &str, lib_ver: &str) -> (MultiplexedConnection, bool) {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let named = redis::pipe()
        .cmd("CLIENT")
        .arg("SETINFO")
        .arg("LIB-NAME")
        .arg(lib_name)
        .cmd("CLIENT")
        .arg("SETINFO")
        .arg("LIB-VER")
        .arg(lib_ver)
        .query_async::<Value>(&mut conn)
        .await
        .is_ok();
    (conn, named)
}

async fn libraries_on(conn: &mut MultiplexedConnection) -> Vec<String> {
    let text: Value = query(conn, &["FUNCTION", "LIST", "LIBRARYNAME", "leasehold_*"]).await;
    let Value::Array(libraries) = text else {
        panic!("FUNCTION LIST answered {text:?}");
    };
    let mut names = Vec::new();
    for library in libraries {
        let fields = match library {
            Value::Array(items) => items,
            Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            other => panic!("a library as {other:?}"),
        };
        for pair in fields.chunks(2) {
            if let [key, value] = pair {
                let key: String = redis::from_redis_value_ref(key).unwrap();
                if key == "library_name" {
                    names.push(redis::from_redis_value_ref(value).unwrap());
                }
            }
        }
    }
    names
}

fn old(found: &[ScriptLibrary]) -> &ScriptLibrary {
    found
        .iter()
        .find(|library| library.name == OLD)
        .expect("the old library is listed")
}

/// Asks until `done` holds of the libraries found: a closed connection
/// leaves `CLIENT LIST` a moment later.
async fn until(client: &Client, done: impl Fn(&ScriptLibrary) -> bool) {
    tokio::time::timeout(NO_HANG, async {
        loop {
            if done(old(&client.script_libraries().await.unwrap())) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the clients were never as expected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_library_is_removed_once_no_client_may_call_it() {
    let server = RedisServer::start();
    if !common::has_functions(&server).await {
        // Redis 6.2: scripts alone, no library to pile up.
        let client = common::client(&server);
        let guard = client.mutex("job").unwrap().acquire().await.unwrap();
        guard.release().await.unwrap();
        assert_eq!(client.script_libraries().await.unwrap(), Vec::new());
        return;
    }
    let client = common::client(&server);
    // The current library, loaded by a lock call.
    let guard = client.mutex("job").unwrap().acquire().await.unwrap();
    guard.release().await.unwrap();
    let (mut admin, named) = tool(&server.url(), "test-tool", "1").await;
    let _: Value = query(&mut admin, &["FUNCTION", "LOAD", &old_library_code()]).await;
    let found = client.script_libraries().await.unwrap();
    let current: Vec<&ScriptLibrary> = found.iter().filter(|l| l.this_version).collect();
    assert_eq!(current.len(), 1, "{found:?}");
    if named {
        assert!(
            current[0].clients >= 1,
            "this client says it calls its own: {found:?}"
        );
    }
    assert!(!old(&found).this_version);
    if named {
        // A connected client of the old version says it calls it.
        let (announcer, _) = tool(
            &server.url(),
            "leasehold",
            "0.0.1-00000000000000aa-00000000000000bb",
        )
        .await;
        until(&client, |old| {
            old.clients == 1 && old.unknown_clients == Some(0)
        })
        .await;
        let found = client.remove_unused_script_libraries(true).await.unwrap();
        assert!(
            !old(&found).removed,
            "a library a client calls is kept, even forced"
        );
        drop(announcer);
        // A client that names the redis crate alone may be an older leasehold.
        let (maybe_old, _) = tool(&server.url(), "redis-rs", "1.8.1").await;
        until(&client, |old| {
            old.clients == 0 && old.unknown_clients == Some(1)
        })
        .await;
        let found = client.remove_unused_script_libraries(false).await.unwrap();
        assert!(!old(&found).removed, "kept while a client may call it");
        drop(maybe_old);
        until(&client, ScriptLibrary::is_unused).await;
        let found = client.remove_unused_script_libraries(false).await.unwrap();
        assert!(old(&found).removed, "{found:?}");
    } else {
        // Redis 7.0 and 7.1 show no library names: nobody can be told.
        let found = client.script_libraries().await.unwrap();
        assert_eq!(old(&found).unknown_clients, None);
        let found = client.remove_unused_script_libraries(false).await.unwrap();
        assert!(!old(&found).removed, "kept unless forced");
        let found = client.remove_unused_script_libraries(true).await.unwrap();
        assert!(old(&found).removed, "{found:?}");
    }
    let left = libraries_on(&mut admin).await;
    assert!(!left.iter().any(|name| name == OLD), "{left:?}");
    assert_eq!(left.len(), 1, "the current library stays: {left:?}");
    // A client whose library was removed anyway loads it again.
    let _: Value = query(&mut admin, &["FUNCTION", "DELETE", &left[0]]).await;
    let guard = client.mutex("job").unwrap().acquire().await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(libraries_on(&mut admin).await, left);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_of_a_cluster_is_cleaned() {
    let cluster = RedisCluster::start(3, 0);
    if !common::has_functions(cluster.master(0)).await {
        return;
    }
    let client = Client::open(&cluster.urls()[0]).unwrap();
    let mut admins = Vec::new();
    for shard in 0..cluster.shards() {
        let (mut admin, _) = tool(&cluster.master(shard).url(), "test-tool", "1").await;
        let _: Value = query(&mut admin, &["FUNCTION", "LOAD", &old_library_code()]).await;
        admins.push(admin);
    }
    let found = client.script_libraries().await.unwrap();
    let olds = found.iter().filter(|library| library.name == OLD).count();
    assert_eq!(olds, cluster.shards(), "listed on every master: {found:?}");
    let found = client.remove_unused_script_libraries(true).await.unwrap();
    let removed = found.iter().filter(|library| library.removed).count();
    assert_eq!(removed, cluster.shards(), "{found:?}");
    for admin in &mut admins {
        let left = libraries_on(admin).await;
        assert!(!left.iter().any(|name| name == OLD), "{left:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_of_a_redlock_is_cleaned() {
    let masters = leasehold_testkit::Masters::start(3);
    if !common::has_functions(&masters.servers()[0]).await {
        return;
    }
    let redlock = leasehold::Redlock::builder(masters.urls()).build().unwrap();
    let mut admins = Vec::new();
    for url in masters.urls() {
        let (mut admin, _) = tool(&url, "test-tool", "1").await;
        let _: Value = query(&mut admin, &["FUNCTION", "LOAD", &old_library_code()]).await;
        admins.push(admin);
    }
    let found = redlock
        .client()
        .remove_unused_script_libraries(true)
        .await
        .unwrap();
    let removed = found.iter().filter(|library| library.removed).count();
    assert_eq!(removed, masters.len(), "{found:?}");
    for admin in &mut admins {
        let left = libraries_on(admin).await;
        assert!(!left.iter().any(|name| name == OLD), "{left:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_the_sentinels_name_is_cleaned() {
    let group = leasehold_testkit::Sentinels::start(1, 1);
    if !common::has_functions(group.master()).await {
        return;
    }
    let client = Client::open(&group.url()).unwrap();
    let (mut admin, _) = tool(&group.master().url(), "test-tool", "1").await;
    let _: Value = query(&mut admin, &["FUNCTION", "LOAD", &old_library_code()]).await;
    let found = client.remove_unused_script_libraries(true).await.unwrap();
    assert!(old(&found).removed, "{found:?}");
    assert_eq!(old(&found).server, group.master().addr().to_string());
    let left = libraries_on(&mut admin).await;
    assert!(!left.iter().any(|name| name == OLD), "{left:?}");
}
