//! Names and client names of multi-byte characters. A server quotes the
//! first 128 bytes of an unknown command's arguments back in its error,
//! cut inside a character as often as not: a lock that goes through with
//! such a name proves the client sent no command the server lacks with it.

mod common;

use leasehold::Client;
use leasehold_testkit::RedisServer;

use common::{cmd, command_calls, on_both_topologies, Servers};

/// A three-byte character.
const WIDE: &str = "锁";

/// `prefix` followed by `count` of [`WIDE`], shifted by zero, one and two
/// bytes: wherever a server cuts inside the run, it cuts inside a
/// character for at least two of the three.
fn shifted_runs(prefix: &str, count: usize) -> Vec<String> {
    (0..3)
        .map(|shift| format!("{prefix}{}{}", "x".repeat(shift), WIDE.repeat(count)))
        .collect()
}

/// Takes, inspects and releases each name with one client.
async fn take_and_release_each(client: &Client, names: &[&str]) {
    let mut guards = Vec::new();
    for name in names {
        let mutex = client.mutex(name).unwrap();
        guards.push(mutex.acquire().await.unwrap());
        let info = mutex.inspect().await.unwrap();
        assert_eq!(info.name, *name);
        assert!(info.held, "{name}");
    }
    for (guard, name) in guards.into_iter().zip(names) {
        guard
            .release()
            .await
            .unwrap_or_else(|e| panic!("release of {name}: {e}"));
        let info = client.mutex(name).unwrap().inspect().await.unwrap();
        assert!(!info.held, "{name}");
    }
}

async fn a_lock_named_in_multibyte_characters_is_taken_and_released(servers: Servers) {
    // Longer than what a server quotes of a key.
    for name in shifted_runs("", 50) {
        // A client of its own: what one learns of a server, another does not.
        let client = servers.client();
        take_and_release_each(&client, &[&name]).await;
        // And again on the connection the first round left.
        take_and_release_each(&client, &[&name]).await;
    }
}

/// Two locks held by one client whose name is a command line with a
/// multi-byte character where the server cuts the lock's value.
async fn a_client_named_in_multibyte_characters_releases_its_locks(servers: Servers) {
    // Within the longest client name a lease records.
    for client_name in shifted_runs("leasehold run ", 30) {
        let client = Client::builder(servers.url())
            .name(client_name.clone())
            .build()
            .unwrap();
        take_and_release_each(&client, &["user:{42}", "xyzw-锁"]).await;
        let holder = {
            let mutex = client.mutex("job").unwrap();
            let guard = mutex.acquire().await.unwrap();
            let info = mutex.inspect().await.unwrap();
            guard.release().await.unwrap();
            info.holders.into_iter().next().expect("a holder")
        };
        assert_eq!(holder.client_name, client_name);
    }
}

/// Whether `server` has `command`, as COMMAND INFO says.
async fn has(server: &RedisServer, command: &str) -> bool {
    let info: Vec<leasehold::redis::Value> = cmd(server, &["COMMAND", "INFO", command]).await;
    !matches!(info.first(), None | Some(leasehold::redis::Value::Nil))
}

/// A server whose optional commands are renamed away (FCALL, and DELIFEQ
/// or DELEX where it has them) takes and releases locks with scripts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_its_optional_commands_takes_multibyte_names() {
    let plain = RedisServer::start();
    let mut renames = Vec::new();
    for command in ["FCALL", "DELIFEQ", "DELEX"] {
        if has(&plain, command).await {
            renames.extend(["--rename-command", command, ""]);
        }
    }
    drop(plain);
    let server = RedisServer::start_with_args(&renames);
    for command in ["FCALL", "DELIFEQ", "DELEX"] {
        assert!(!has(&server, command).await, "{command} is there");
    }
    for name in shifted_runs("", 50) {
        let client = common::client(&server);
        take_and_release_each(&client, &[&name]).await;
    }
    let named = Client::builder(server.url())
        .name(WIDE.repeat(40))
        .build()
        .unwrap();
    take_and_release_each(&named, &["job"]).await;
    assert!(common::evalsha_calls(&server).await > 0);
}

/// A server without Lua scripting is refused as such, whatever the name: it
/// is never sent a script it would answer by quoting the name.
#[tokio::test]
async fn a_server_without_scripting_is_refused_as_such() {
    let plain = RedisServer::start();
    let mut renames = Vec::new();
    for command in ["EVALSHA", "EVAL", "FCALL", "DELIFEQ", "DELEX"] {
        if has(&plain, command).await {
            renames.extend(["--rename-command", command, ""]);
        }
    }
    drop(plain);
    let server = RedisServer::start_with_args(&renames);
    let client = common::client(&server);
    for name in shifted_runs("", 50) {
        let err = client
            .mutex(&name)
            .unwrap()
            .try_acquire()
            .await
            .unwrap_err();
        assert_eq!(err.kind(), leasehold::ErrorKind::Config, "{err}");
        assert!(err.to_string().contains("does not know EVALSHA"), "{err}");
    }
}

/// A user that may not run COMMAND, so that the client cannot ask which
/// commands the server has: FCALL goes by the server's version, and the
/// compare-and-delete is left to a script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_refused_command_takes_multibyte_names() {
    let server = RedisServer::start();
    let _: () = cmd(
        &server,
        &[
            "ACL",
            "SETUSER",
            "locker",
            "on",
            ">pw",
            "~leasehold:*",
            "resetchannels",
            "&leasehold:*",
            "+@all",
            "-command",
        ],
    )
    .await;
    let url = format!("redis://locker:pw@127.0.0.1:{}", server.port());
    for name in shifted_runs("", 50) {
        let client = Client::open(&url).unwrap();
        take_and_release_each(&client, &[&name]).await;
    }
    let named = Client::builder(&url).name(WIDE.repeat(40)).build().unwrap();
    take_and_release_each(&named, &["job"]).await;
    let deletes = command_calls(&server, "delifeq").await + command_calls(&server, "delex").await;
    assert_eq!(deletes, 0);
    let fcalls = command_calls(&server, "fcall").await;
    assert_eq!(
        fcalls > 0,
        common::has_functions(&server).await,
        "{fcalls} FCALLs"
    );
}

on_both_topologies!(
    a_lock_named_in_multibyte_characters_is_taken_and_released: multi_thread,
    a_client_named_in_multibyte_characters_releases_its_locks: multi_thread,
);
