//! The admin calls of the blocking faces: a read-write lock's sides
//! released by force apart, a semaphore's count set once with a lifetime,
//! and the Functions libraries of older versions removed.

use std::time::Duration;

use leasehold::blocking::Client;
use leasehold_testkit::RedisServer;

#[test]
fn a_side_of_a_rw_lock_is_released_by_force() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let rw = client.rw_lock("rw").unwrap();
    let reader = std::thread::scope(|s| {
        s.spawn(|| {
            Client::open(&server.url())
                .unwrap()
                .rw_lock("rw")
                .unwrap()
                .read()
                .acquire()
                .unwrap()
        })
        .join()
        .unwrap()
    });
    assert!(!rw.force_release_writer().unwrap());
    assert!(rw.force_release_readers().unwrap());
    assert!(!rw.inspect().unwrap().held);
    assert!(reader.release().unwrap_err().is_not_held());
}

#[test]
fn a_semaphore_count_is_set_once_with_a_lifetime() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let sem = client.semaphore("s", 2).unwrap();
    assert!(sem
        .try_set_permits_for(2, Duration::from_secs(600))
        .unwrap());
    assert!(!sem.try_set_permits(3).unwrap());
    let pttl: i64 = server
        .command(&["PTTL", "leasehold:{s}"])
        .unwrap()
        .parse()
        .unwrap();
    assert!(pttl > 0 && pttl <= 600_000, "{pttl}");
}

#[test]
fn an_old_library_is_removed() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    if server
        .command(&["FUNCTION", "LIST"])
        .unwrap()
        .starts_with("(error)")
    {
        assert!(client.script_libraries().unwrap().is_empty());
        return;
    }
    let old = "leasehold_00000000000000aa";
    let code =
        format!("#!lua name={old}\nredis.register_function('{old}_x', function() return 1 end)");
    server.command(&["FUNCTION", "LOAD", &code]).unwrap();
    let found = client.script_libraries().unwrap();
    assert!(
        found.iter().any(|l| l.name == old && !l.removed),
        "{found:?}"
    );
    let found = client.remove_unused_script_libraries(true).unwrap();
    assert!(
        found.iter().any(|l| l.name == old && l.removed),
        "{found:?}"
    );
    assert!(!server.command(&["FUNCTION", "LIST"]).unwrap().contains(old));
}
