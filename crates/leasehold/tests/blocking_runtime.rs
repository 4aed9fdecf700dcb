//! The blocking runtime's life: started by the first blocking client,
//! stopped by the last drop once the releases left in the background are
//! done. Alone in its test binary, so that no other test keeps it alive.

use leasehold::blocking::Client;
use leasehold_testkit::RedisServer;

/// Threads of this process named as the blocking runtime's.
fn runtime_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "leasehold-block")
        .count()
}

#[test]
fn the_last_drop_flushes_and_stops_the_runtime() {
    let server = RedisServer::start();
    assert_eq!(runtime_threads(), 0);
    for round in 0..2 {
        let client = Client::open(&server.url()).unwrap();
        let other = Client::open(&server.url()).unwrap();
        assert_eq!(
            runtime_threads(),
            1,
            "round {round}: one runtime for every client"
        );
        let guard = client.mutex("job").unwrap().acquire().unwrap();
        let permit = other.semaphore("slots", 2).unwrap().acquire().unwrap();
        drop(client);
        drop(other);
        // The guards keep the runtime; dropping them releases in the background.
        assert_eq!(runtime_threads(), 1);
        drop(guard);
        drop(permit);
        assert_eq!(runtime_threads(), 0, "round {round}: the runtime stopped");
        // Its releases were done before it stopped.
        assert_eq!(server.command(&["EXISTS", "leasehold:{job}"]).unwrap(), "0");
        let checker = Client::open(&server.url()).unwrap();
        let slots = checker.semaphore("slots", 2).unwrap();
        assert_eq!(slots.available().unwrap(), 2, "round {round}");
        drop(slots);
        drop(checker);
        assert_eq!(runtime_threads(), 0);
    }
}
