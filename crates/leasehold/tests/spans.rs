//! The tracing spans of lock operations, seen by a small subscriber that
//! keeps every span's name and fields.

mod common;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_testkit::RedisServer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

use common::client;

type Fields = HashMap<String, String>;

#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<(String, Fields)>>>);

struct Collect<'a>(&'a mut Fields);

impl Visit for Collect<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Spans {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == "leasehold"
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = Fields::new();
        span.record(&mut Collect(&mut fields));
        let mut spans = self.0.lock().unwrap();
        spans.push((span.metadata().name().to_owned(), fields));
        Id::from_u64(spans.len() as u64)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut spans = self.0.lock().unwrap();
        let index = usize::try_from(span.into_u64()).unwrap() - 1;
        values.record(&mut Collect(&mut spans[index].1));
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Spans {
    /// The fields of the spans called `name`, in the order they began.
    fn named(&self, name: &str) -> Vec<Fields> {
        let spans = self.0.lock().unwrap();
        spans
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
            .collect()
    }
}

fn field<'a>(fields: &'a Fields, name: &str) -> &'a str {
    fields.get(name).map_or("", String::as_str)
}

#[test]
fn every_operation_has_a_span_with_its_outcome() {
    let spans = Spans::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    let (fence, busy_fence) = tracing::subscriber::with_default(spans.clone(), || {
        runtime.block_on(async {
            let mutex = client(&server).mutex("job").unwrap();
            let other = client(&server).fair_mutex("job").unwrap();
            let guard = mutex.acquire().await.unwrap();
            assert!(other.try_acquire().await.unwrap().is_none());
            let timeout = other.acquire_timeout(Duration::from_millis(30)).await;
            assert!(timeout.unwrap_err().is_timeout());
            guard.extend(Duration::from_secs(10)).await.unwrap();
            let fence = guard.fence();
            guard.release().await.unwrap();
            let err = mutex.release_token("no-such-token").await.unwrap_err();
            assert!(err.is_not_held());
            mutex.inspect().await.unwrap();
            (fence, other.inspect().await.unwrap().last_fence)
        })
    });
    assert_eq!(busy_fence, Some(fence));

    let acquire = &spans.named("acquire");
    let [acquired, timed_out] = acquire.as_slice() else {
        panic!("two acquire spans expected: {acquire:?}");
    };
    assert_eq!(field(acquired, "name"), "job");
    assert_eq!(field(acquired, "primitive"), "mutex");
    assert_eq!(field(acquired, "outcome"), "acquired");
    assert_eq!(field(acquired, "fence"), fence.to_string());
    assert!(!field(acquired, "waited").is_empty());
    assert_eq!(field(timed_out, "primitive"), "fair_mutex");
    assert_eq!(field(timed_out, "outcome"), "timed_out");

    let tries = spans.named("try_acquire");
    assert_eq!(tries.len(), 1);
    assert_eq!(field(&tries[0], "outcome"), "busy");

    for (op, outcome) in [
        ("extend", "ok"),
        ("release", "ok"),
        ("release_token", "not_held"),
    ] {
        let found = spans.named(op);
        assert_eq!(found.len(), 1, "{op}: {found:?}");
        assert_eq!(field(&found[0], "outcome"), outcome, "{op}");
        assert_eq!(field(&found[0], "name"), "job", "{op}");
    }
    assert_eq!(
        field(&spans.named("release")[0], "fence"),
        fence.to_string()
    );
    assert_eq!(spans.named("inspect").len(), 2);
}

#[test]
fn family_operations_have_spans_with_their_primitive() {
    let spans = Spans::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    let (read_fence, permit_fence) = tracing::subscriber::with_default(spans.clone(), || {
        runtime.block_on(async {
            let client = client(&server);
            let lock = client.rw_lock("cat").unwrap();
            let other = client.rw_lock("cat").unwrap();
            let reading = lock.read().acquire().await.unwrap();
            assert!(other.write().try_acquire().await.unwrap().is_none());
            lock.inspect().await.unwrap();
            let err = lock.release_token("no-such-token").await.unwrap_err();
            assert!(err.is_not_held());
            let read_fence = reading.fence();
            reading.release().await.unwrap();
            assert!(!lock.force_release().await.unwrap());

            let sem = client.semaphore("slots", 2).unwrap();
            let permits = sem.acquire_many(2).await.unwrap();
            assert_eq!(sem.available().await.unwrap(), 0);
            sem.set_permits(2).await.unwrap();
            sem.inspect().await.unwrap();
            let err = sem.release_token("no-such-token").await.unwrap_err();
            assert!(err.is_not_held());
            assert!(sem.force_release().await.unwrap());
            let permit_fence = permits.fence();
            assert!(permits.release().await.unwrap_err().is_not_held());
            (read_fence, permit_fence)
        })
    });

    let acquire = spans.named("acquire");
    let [read, permits] = acquire.as_slice() else {
        panic!("two acquire spans expected: {acquire:?}");
    };
    assert_eq!(field(read, "primitive"), "rw_lock_read");
    assert_eq!(field(read, "outcome"), "acquired");
    assert_eq!(field(read, "fence"), read_fence.to_string());
    assert_eq!(field(permits, "primitive"), "semaphore");
    assert_eq!(field(permits, "name"), "slots");
    assert_eq!(field(permits, "outcome"), "acquired");
    assert_eq!(field(permits, "fence"), permit_fence.to_string());
    let tries = spans.named("try_acquire");
    assert_eq!(tries.len(), 1);
    assert_eq!(field(&tries[0], "primitive"), "rw_lock_write");
    assert_eq!(field(&tries[0], "outcome"), "busy");

    // Operations on a whole rw-lock, then on the semaphore.
    for (op, outcomes) in [
        ("inspect", ["ok", "ok"]),
        ("release_token", ["not_held", "not_held"]),
        ("force_release", ["ok", "ok"]),
        ("release", ["ok", "not_held"]),
    ] {
        let found = spans.named(op);
        assert_eq!(found.len(), 2, "{op}: {found:?}");
        for (fields, (name, outcome)) in found
            .iter()
            .zip([("cat", outcomes[0]), ("slots", outcomes[1])])
        {
            assert_eq!(field(fields, "name"), name, "{op}");
            assert_eq!(field(fields, "outcome"), outcome, "{op}");
        }
    }
    for op in ["inspect", "release_token", "force_release"] {
        let found = spans.named(op);
        assert_eq!(field(&found[0], "primitive"), "rw_lock", "{op}");
        assert_eq!(field(&found[1], "primitive"), "semaphore", "{op}");
    }
    let releases = spans.named("release");
    assert_eq!(field(&releases[0], "primitive"), "rw_lock_read");
    assert_eq!(field(&releases[1], "primitive"), "semaphore");
    for op in ["available", "set_permits"] {
        let found = spans.named(op);
        assert_eq!(found.len(), 1, "{op}: {found:?}");
        assert_eq!(field(&found[0], "primitive"), "semaphore", "{op}");
        assert_eq!(field(&found[0], "name"), "slots", "{op}");
        assert_eq!(field(&found[0], "outcome"), "ok", "{op}");
    }
}

#[test]
fn an_election_has_spans_for_its_own_operations() {
    let spans = Spans::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    let fence = tracing::subscriber::with_default(spans.clone(), || {
        runtime.block_on(async {
            let election = client(&server).election("scheduler").unwrap();
            assert!(election.leader().await.unwrap().is_none());
            let leadership = election.campaign("10.0.0.7:8080").await.unwrap();
            let fence = leadership.fence();
            assert_eq!(election.leader().await.unwrap().unwrap().fence, fence);
            leadership.resign().await.unwrap();
            fence
        })
    });
    let campaign = spans.named("campaign");
    assert_eq!(campaign.len(), 1, "{campaign:?}");
    assert_eq!(field(&campaign[0], "primitive"), "election");
    assert_eq!(field(&campaign[0], "name"), "scheduler");
    assert_eq!(field(&campaign[0], "outcome"), "ok");
    assert_eq!(field(&campaign[0], "fence"), fence.to_string());
    assert!(!field(&campaign[0], "waited").is_empty());
    let leader = spans.named("leader");
    assert_eq!(leader.len(), 2, "{leader:?}");
    assert_eq!(field(&leader[0], "fence"), "");
    assert_eq!(field(&leader[1], "fence"), fence.to_string());
    let resign = spans.named("resign");
    assert_eq!(resign.len(), 1, "{resign:?}");
    assert_eq!(field(&resign[0], "outcome"), "ok");
    assert_eq!(field(&resign[0], "fence"), fence.to_string());
}
