//! The metrics leasehold reports, counted by a test recorder against a real
//! server. One test: the recorder is global to this binary.

mod common;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use leasehold::observe::{
    ACQUISITIONS, HELD_LEASES, HOLD_SECONDS, LOSSES, RENEWALS, RENEWAL_FAILURES, TIMEOUTS,
    WAITING_TASKS, WAIT_SECONDS,
};
use leasehold::Client;
use leasehold_testkit::{FaultProxy, RedisServer};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

use common::{client, client_with, eventually};

/// Everything recorded so far. The recorder's snapshots drain counters and
/// gauges (a gauge starts again from zero), so the sums of all snapshots are
/// the values.
struct Recorded {
    snapshotter: Snapshotter,
    values: HashMap<(String, Vec<(String, String)>), f64>,
    samples: HashMap<(String, Vec<(String, String)>), usize>,
}

impl Recorded {
    fn install() -> Recorded {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this binary");
        Recorded {
            snapshotter,
            values: HashMap::new(),
            samples: HashMap::new(),
        }
    }

    fn take(&mut self) {
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let (_, key) = key.into_parts();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let id = (key.name().to_owned(), labels);
            match value {
                DebugValue::Counter(n) => *self.values.entry(id).or_default() += n as f64,
                DebugValue::Gauge(g) => *self.values.entry(id).or_default() += g.into_inner(),
                DebugValue::Histogram(samples) => {
                    *self.samples.entry(id).or_default() += samples.len();
                }
            }
        }
    }

    fn id(name: &str, labels: &[(&str, &str)]) -> (String, Vec<(String, String)>) {
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        labels.sort();
        (name.to_owned(), labels)
    }

    fn value(&mut self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.take();
        self.values
            .get(&Self::id(name, labels))
            .copied()
            .unwrap_or(0.0)
    }

    fn samples(&mut self, name: &str, labels: &[(&str, &str)]) -> usize {
        self.take();
        self.samples
            .get(&Self::id(name, labels))
            .copied()
            .unwrap_or(0)
    }
}

const MUTEX: &[(&str, &str)] = &[("primitive", "mutex")];
const FAIR: &[(&str, &str)] = &[("primitive", "fair_mutex")];
const READ: &[(&str, &str)] = &[("primitive", "rw_lock_read")];
const WRITE: &[(&str, &str)] = &[("primitive", "rw_lock_write")];
const SEMAPHORE: &[(&str, &str)] = &[("primitive", "semaphore")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_operations_are_counted() {
    let recorded = Mutex::new(Recorded::install());
    let m = || recorded.lock().unwrap();
    let server = RedisServer::start();

    // Acquisitions, held leases, hold and wait times.
    let holder = client(&server).mutex("job").unwrap();
    let guard = holder.acquire().await.unwrap();
    assert_eq!(m().value(ACQUISITIONS, MUTEX), 1.0);
    assert_eq!(m().value(HELD_LEASES, MUTEX), 1.0);
    assert_eq!(m().samples(WAIT_SECONDS, MUTEX), 1);

    // A busy try is no acquisition; a wait that runs out is a timeout.
    let other = client(&server).mutex("job").unwrap();
    assert!(other.try_acquire().await.unwrap().is_none());
    let err = other
        .acquire_timeout(Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(err.is_timeout());
    assert_eq!(m().value(ACQUISITIONS, MUTEX), 1.0);
    assert_eq!(m().value(TIMEOUTS, MUTEX), 1.0);
    assert_eq!(m().value(WAITING_TASKS, MUTEX), 0.0);

    // A task in acquire() counts as waiting until it has the lock.
    let waiter = tokio::spawn({
        let other = other.clone();
        async move { other.acquire().await }
    });
    eventually("the waiter to be counted", || async {
        m().value(WAITING_TASKS, MUTEX) == 1.0
    })
    .await;
    guard.release().await.unwrap();
    let second = waiter.await.unwrap().unwrap();
    assert_eq!(m().value(WAITING_TASKS, MUTEX), 0.0);
    assert_eq!(m().value(ACQUISITIONS, MUTEX), 2.0);
    assert_eq!(m().value(HELD_LEASES, MUTEX), 1.0);
    assert_eq!(m().samples(HOLD_SECONDS, MUTEX), 1);
    drop(second); // a dropped guard stops counting too
    assert_eq!(m().value(HELD_LEASES, MUTEX), 0.0);
    assert_eq!(m().samples(HOLD_SECONDS, MUTEX), 2);

    // Renewals, and a loss found by one: the lock was removed by force.
    let short = client_with(&server, Duration::from_millis(300), true);
    let fair = short.fair_mutex("fair").unwrap();
    let guard = fair.acquire().await.unwrap();
    assert_eq!(m().value(ACQUISITIONS, FAIR), 1.0);
    eventually("a renewal", || async { m().value(RENEWALS, &[]) >= 1.0 }).await;
    assert!(fair.force_release().await.unwrap());
    guard.lost().await;
    assert_eq!(m().value(LOSSES, &[("reason", "token_gone")]), 1.0);
    assert_eq!(m().value(HELD_LEASES, FAIR), 1.0);
    assert!(guard.release().await.unwrap_err().is_not_held());
    assert_eq!(m().value(HELD_LEASES, FAIR), 0.0);

    // Renewals that get no answer, and the loss when the deadline passes.
    let proxy = FaultProxy::start(server.addr());
    let cut_off = Client::builder(proxy.url())
        .command_timeout(Duration::from_millis(100))
        .lease(Duration::from_millis(600))
        .build()
        .unwrap();
    let guard = cut_off.mutex("cut-off").unwrap().acquire().await.unwrap();
    proxy.blackhole(true);
    guard.lost().await;
    assert!(m().value(RENEWAL_FAILURES, &[]) >= 1.0);
    assert_eq!(m().value(LOSSES, &[("reason", "deadline_passed")]), 1.0);
    drop(guard);
    proxy.heal();

    // A lease at its max hold is counted lost when it ends, though nobody
    // looks at its guard.
    let capped = short
        .mutex("capped")
        .unwrap()
        .with_max_hold(Duration::from_millis(500))
        .unwrap();
    let unwatched = capped.acquire().await.unwrap();
    eventually("the capped lease to be counted lost", || async {
        m().value(LOSSES, &[("reason", "max_hold_reached")]) == 1.0
    })
    .await;
    drop(unwatched);
    assert_eq!(m().value(LOSSES, &[("reason", "max_hold_reached")]), 1.0);

    // A fixed lease that ran out unwatched is counted when its guard goes.
    let fixed = client_with(&server, Duration::from_millis(300), false);
    let unwatched = fixed.mutex("fixed").unwrap().acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(m().value(LOSSES, &[("reason", "deadline_passed")]), 1.0);
    drop(unwatched);
    assert_eq!(m().value(LOSSES, &[("reason", "deadline_passed")]), 2.0);

    // The read and write sides of an rw-lock, and a semaphore, are counted
    // under their own primitive.
    let rw = client(&server).rw_lock("cat").unwrap();
    let reading = rw.read().acquire().await.unwrap();
    let other = client(&server).rw_lock("cat").unwrap();
    assert!(other.write().try_acquire().await.unwrap().is_none());
    let err = other
        .write()
        .acquire_timeout(Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(err.is_timeout());
    assert_eq!(m().value(ACQUISITIONS, READ), 1.0);
    assert_eq!(m().value(HELD_LEASES, READ), 1.0);
    assert_eq!(m().value(ACQUISITIONS, WRITE), 0.0);
    assert_eq!(m().value(TIMEOUTS, WRITE), 1.0);
    reading.release().await.unwrap();
    assert_eq!(m().value(HELD_LEASES, READ), 0.0);
    assert_eq!(m().samples(HOLD_SECONDS, READ), 1);
    let writing = other.write().acquire().await.unwrap();
    assert_eq!(m().value(ACQUISITIONS, WRITE), 1.0);
    assert_eq!(m().samples(WAIT_SECONDS, WRITE), 1);
    writing.release().await.unwrap();

    let sem = client(&server).semaphore("slots", 2).unwrap();
    let permits = sem.acquire_many(2).await.unwrap();
    let err = sem
        .acquire_timeout(Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(err.is_timeout());
    assert_eq!(m().value(ACQUISITIONS, SEMAPHORE), 1.0);
    assert_eq!(m().value(TIMEOUTS, SEMAPHORE), 1.0);
    assert_eq!(m().value(HELD_LEASES, SEMAPHORE), 1.0);
    assert_eq!(m().value(WAITING_TASKS, SEMAPHORE), 0.0);
    permits.release().await.unwrap();
    assert_eq!(m().value(HELD_LEASES, SEMAPHORE), 0.0);
}
