//! A semaphore's count set only where none is set, and with a lifetime
//! (Redisson's `trySetPermits(permits)` and `trySetPermits(permits,
//! timeToLive)`): set once, gone at its end, permits held then run on and
//! count against the next count. On one server and on a Redis Cluster.

mod common;

use std::time::Duration;

use common::{eventually, Servers};

const LONG: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(300);

common::on_both_topologies!(
    a_count_is_set_only_where_none_is: multi_thread,
    a_count_with_a_lifetime_goes_at_its_end: multi_thread,
    permits_held_at_the_end_run_on_and_count_against_the_next_count: multi_thread,
    set_permits_drops_the_lifetime,
);

/// The server's clock has passed the end of the count of `key`.
async fn ended(servers: &Servers, key: &str) -> bool {
    const PASSED: &str = "local d = tonumber(redis.call('HGET', KEYS[1], 'd')) \
        local t = redis.call('TIME') \
        return (d and tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) >= d) and 1 or 0";
    common::cmd::<i64>(servers.server_for(key), &["EVAL", PASSED, "1", key]).await == 1
}

async fn a_count_is_set_only_where_none_is(servers: Servers) {
    let c = servers.client();
    let sem = c.semaphore("s", 3).unwrap();
    assert!(sem.try_set_permits(3).await.unwrap());
    assert!(!sem.try_set_permits(5).await.unwrap());
    assert!(!sem.try_set_permits_for(5, LONG).await.unwrap());
    assert_eq!(sem.inspect().await.unwrap().permits, Some(3));
    // A count set by the first acquisition is set too.
    let other = c.semaphore("t", 2).unwrap();
    let held = other.acquire().await.unwrap();
    assert!(!other.try_set_permits(4).await.unwrap());
    assert_eq!(other.inspect().await.unwrap().permits, Some(2));
    held.release().await.unwrap();
    assert!(sem.try_set_permits_for(3, Duration::ZERO).await.is_err());
    let error = c.mutex("m").unwrap().acquire().await.unwrap();
    let refused = c.semaphore("m", 1).unwrap().try_set_permits(1).await;
    assert!(refused.unwrap_err().is_conflict());
    error.release().await.unwrap();
}

async fn a_count_with_a_lifetime_goes_at_its_end(servers: Servers) {
    let sem = servers.client().semaphore("s", 2).unwrap();
    assert!(sem.try_set_permits_for(2, SHORT).await.unwrap());
    assert_eq!(sem.inspect().await.unwrap().permits, Some(2));
    let pttl: i64 = servers.cmd(&["PTTL", "leasehold:{s}"]).await;
    assert!(
        pttl > 0 && pttl <= 300,
        "the key goes with the count: {pttl}"
    );
    eventually("the count to go", || async {
        !servers.cmd::<bool>(&["EXISTS", "leasehold:{s}"]).await
    })
    .await;
    // Unset again: a new count, of any size, may be set.
    assert!(sem.try_set_permits_for(5, LONG).await.unwrap());
    assert_eq!(sem.inspect().await.unwrap().permits, Some(5));
}

async fn permits_held_at_the_end_run_on_and_count_against_the_next_count(servers: Servers) {
    let c = servers.client_with(LONG, true);
    let two = c.semaphore("s", 2).unwrap();
    let one = c.semaphore("s", 1).unwrap();
    assert!(two.try_set_permits_for(2, SHORT).await.unwrap());
    let held = two.acquire().await.unwrap();
    // Before the end, the count is 2: a handle of another count is refused.
    assert!(one.try_acquire().await.unwrap_err().is_conflict());
    eventually("the count's end", || ended(&servers, "leasehold:{s}")).await;
    assert!(!held.is_lost());
    // The next acquisition sets the count to its handle's, 1, and the
    // permit still held counts against it.
    assert!(one.try_acquire().await.unwrap().is_none());
    assert_eq!(one.inspect().await.unwrap().permits, Some(1));
    assert!(
        !servers
            .cmd::<bool>(&["HEXISTS", "leasehold:{s}", "d"])
            .await
    );
    held.release().await.unwrap();
    let taken = one
        .try_acquire()
        .await
        .unwrap()
        .expect("the permit is free");
    taken.release().await.unwrap();
}

async fn set_permits_drops_the_lifetime(servers: Servers) {
    let sem = servers.client().semaphore("s", 2).unwrap();
    assert!(sem.try_set_permits_for(2, LONG).await.unwrap());
    assert!(
        servers
            .cmd::<bool>(&["HEXISTS", "leasehold:{s}", "d"])
            .await
    );
    sem.set_permits(2).await.unwrap();
    assert!(
        !servers
            .cmd::<bool>(&["HEXISTS", "leasehold:{s}", "d"])
            .await
    );
    let pttl: i64 = servers.cmd(&["PTTL", "leasehold:{s}"]).await;
    assert!(
        pttl > LONG.as_millis() as i64,
        "kept for the retention: {pttl}"
    );
}
