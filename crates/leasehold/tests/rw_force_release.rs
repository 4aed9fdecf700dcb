//! A read-write lock's readers, or its writer, released by force apart
//! (Redisson's `readLock().forceUnlock()` and `writeLock().forceUnlock()`):
//! the other side's leases stay, the waiters that can go are woken, and a
//! holder whose lease was removed finds its guard lost. On one server and
//! on a Redis Cluster.

mod common;

use std::time::Duration;

use common::{eventually, Servers};
use leasehold::{HoldMode, LossReason, Owner};

const LONG: Duration = Duration::from_secs(30);

common::on_both_topologies!(
    forcing_the_readers_out_lets_a_waiting_writer_in: multi_thread,
    forcing_the_writer_out_leaves_the_readers: multi_thread,
    a_holder_forced_out_finds_its_guard_lost: multi_thread,
    one_side_of_another_kind_is_refused,
);

async fn modes(servers: &Servers, name: &str) -> Vec<HoldMode> {
    let info = servers
        .client()
        .rw_lock(name)
        .unwrap()
        .inspect()
        .await
        .unwrap();
    info.holders.iter().map(|h| h.mode).collect()
}

async fn forcing_the_readers_out_lets_a_waiting_writer_in(servers: Servers) {
    let admin = servers.client().rw_lock("rw").unwrap();
    let readers = [
        servers
            .client()
            .rw_lock("rw")
            .unwrap()
            .read()
            .acquire()
            .await
            .unwrap(),
        servers
            .client()
            .rw_lock("rw")
            .unwrap()
            .read()
            .acquire()
            .await
            .unwrap(),
    ];
    let writer = servers.client().rw_lock("rw").unwrap();
    let waiting = tokio::spawn(async move { writer.write().acquire_timeout(LONG).await });
    eventually("the writer to queue", || async {
        servers.cmd::<u64>(&["ZCARD", "leasehold:{rw}:q"]).await == 1
    })
    .await;
    assert!(admin.force_release_readers().await.unwrap());
    let written = waiting.await.unwrap().unwrap();
    assert!(written.fence() > readers[0].fence());
    assert_eq!(modes(&servers, "rw").await, vec![HoldMode::Write]);
    // No reader left: the writer is not touched.
    assert!(!admin.force_release_readers().await.unwrap());
    assert_eq!(modes(&servers, "rw").await, vec![HoldMode::Write]);
    for reader in readers {
        assert!(reader.release().await.unwrap_err().is_not_held());
    }
    written.release().await.unwrap();
}

async fn forcing_the_writer_out_leaves_the_readers(servers: Servers) {
    let admin = servers.client().rw_lock("rw").unwrap();
    // A writer that took the read lock too (a downgrade under way).
    let lock = servers
        .client()
        .rw_lock("rw")
        .unwrap()
        .with_owner(Owner::from_id("downgrader").unwrap());
    let written = lock.write().acquire().await.unwrap();
    let read = lock.read().acquire().await.unwrap();
    let mut held = modes(&servers, "rw").await;
    held.sort_by_key(|m| m.as_str());
    assert_eq!(held, vec![HoldMode::Read, HoldMode::Write]);
    assert!(admin.force_release_writer().await.unwrap());
    assert_eq!(modes(&servers, "rw").await, vec![HoldMode::Read]);
    assert!(!admin.force_release_writer().await.unwrap());
    // Another reader may join now that no writer holds.
    let joined = servers
        .client()
        .rw_lock("rw")
        .unwrap()
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("a reader joins once the writer is gone");
    assert!(written.release().await.unwrap_err().is_not_held());
    read.release().await.unwrap();
    joined.release().await.unwrap();
    assert!(modes(&servers, "rw").await.is_empty());
}

async fn a_holder_forced_out_finds_its_guard_lost(servers: Servers) {
    let admin = servers.client().rw_lock("rw").unwrap();
    // A short lease, renewed every 300 ms: the loss is seen at a renewal.
    let holder = servers.client_with(Duration::from_millis(900), true);
    let reader = holder
        .rw_lock("rw")
        .unwrap()
        .read()
        .acquire()
        .await
        .unwrap();
    assert!(admin.force_release_readers().await.unwrap());
    tokio::time::timeout(LONG, reader.lost()).await.unwrap();
    assert_eq!(reader.loss_reason(), Some(LossReason::TokenGone));
    let writer = holder
        .rw_lock("w")
        .unwrap()
        .write()
        .acquire()
        .await
        .unwrap();
    assert!(servers
        .client()
        .rw_lock("w")
        .unwrap()
        .force_release_writer()
        .await
        .unwrap());
    tokio::time::timeout(LONG, writer.lost()).await.unwrap();
    assert_eq!(writer.loss_reason(), Some(LossReason::TokenGone));
}

async fn one_side_of_another_kind_is_refused(servers: Servers) {
    let c = servers.client();
    let free = c.rw_lock("nothing").unwrap();
    assert!(!free.force_release_readers().await.unwrap());
    assert!(!free.force_release_writer().await.unwrap());
    let held = c.mutex("m").unwrap().acquire().await.unwrap();
    let error = c
        .rw_lock("m")
        .unwrap()
        .force_release_readers()
        .await
        .unwrap_err();
    assert!(error.is_conflict(), "{error}");
    // The mutex is left as it was.
    held.release().await.unwrap();
}
