//! Random sequences of mutex operations by several clients, checked step by
//! step against a small in-memory model, on one real redis-server.

use std::time::Duration;

use leasehold::{Client, MutexGuard};
use leasehold_testkit::RedisServer;
use proptest::prelude::*;

const CLIENTS: usize = 3;
/// Long enough that nothing expires during a case: expiry has its own tests.
const LEASE: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
enum Op {
    TryAcquire(usize),
    AcquireTimeout(usize),
    Release(usize),
    Extend(usize),
    DropGuard(usize),
    ForceRelease,
    Inspect,
    LoseFenceCounter,
    FlushScripts,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..CLIENTS).prop_map(Op::TryAcquire),
        1 => (0..CLIENTS).prop_map(Op::AcquireTimeout),
        3 => (0..8usize).prop_map(Op::Release),
        2 => (0..8usize).prop_map(Op::Extend),
        1 => (0..8usize).prop_map(Op::DropGuard),
        1 => Just(Op::ForceRelease),
        2 => Just(Op::Inspect),
        1 => Just(Op::LoseFenceCounter),
        1 => Just(Op::FlushScripts),
    ]
}

/// What the lock should look like: which guard (if any) holds it.
#[derive(Default)]
struct Model {
    holder: Option<u64>,
    last_fence: Option<u64>,
}

struct Held {
    guard: MutexGuard,
    /// Still the holder per the model.
    current: bool,
}

async fn run_case(url: &str, case: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let name = format!("case-{case}");
    let clients: Vec<Client> = (0..CLIENTS)
        .map(|_| Client::builder(url).lease(LEASE).build().unwrap())
        .collect();
    let mut raw = leasehold::redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut model = Model::default();
    let mut held: Vec<Held> = Vec::new();
    let mut fences_in_order: Vec<u64> = Vec::new();

    for op in ops {
        match op {
            Op::TryAcquire(c) | Op::AcquireTimeout(c) => {
                let mutex = clients[*c].mutex(&name).unwrap();
                let got = match op {
                    Op::TryAcquire(_) => mutex.try_acquire().await.unwrap(),
                    _ => match mutex.acquire_timeout(Duration::from_millis(20)).await {
                        Ok(guard) => Some(guard),
                        Err(e) if e.is_timeout() => None,
                        Err(e) => return Err(TestCaseError::fail(format!("{e:?}"))),
                    },
                };
                match got {
                    Some(guard) => {
                        prop_assert!(model.holder.is_none(), "two holders at once");
                        fences_in_order.push(guard.fence());
                        model.holder = Some(guard.fence());
                        model.last_fence = Some(guard.fence());
                        held.push(Held {
                            guard,
                            current: true,
                        });
                    }
                    None => prop_assert!(model.holder.is_some(), "a free lock was refused"),
                }
            }
            Op::Release(i) | Op::Extend(i) | Op::DropGuard(i) => {
                if held.is_empty() {
                    continue;
                }
                let index = i % held.len();
                if let Op::Extend(_) = op {
                    let entry = &held[index];
                    let result = entry.guard.extend(LEASE).await;
                    prop_assert_eq!(result.is_ok(), entry.current, "{:?}", result);
                    if !entry.current {
                        prop_assert!(entry.guard.is_lost());
                    }
                    continue;
                }
                let entry = held.swap_remove(index);
                if entry.current {
                    model.holder = None;
                }
                if let Op::Release(_) = op {
                    let result = entry.guard.release().await;
                    prop_assert_eq!(result.is_ok(), entry.current, "{:?}", result);
                    if let Err(e) = result {
                        prop_assert!(e.is_not_held());
                    }
                } else {
                    // The release happens in the background; wait for it
                    // before the next step relies on the model.
                    drop(entry.guard);
                    if entry.current {
                        let probe = clients[0].mutex(&name).unwrap();
                        let guard = probe.acquire_timeout(LEASE / 4).await.unwrap();
                        fences_in_order.push(guard.fence());
                        model.last_fence = Some(guard.fence());
                        guard.release().await.unwrap();
                    }
                }
            }
            Op::ForceRelease => {
                let removed = clients[1]
                    .mutex(&name)
                    .unwrap()
                    .force_release()
                    .await
                    .unwrap();
                prop_assert_eq!(removed, model.holder.is_some());
                model.holder = None;
                for entry in &mut held {
                    entry.current = false;
                }
            }
            Op::Inspect => {
                let info = clients[2].mutex(&name).unwrap().inspect().await.unwrap();
                prop_assert_eq!(info.held, model.holder.is_some());
                if model.last_fence.is_some() {
                    prop_assert_eq!(info.last_fence, model.last_fence);
                }
            }
            Op::LoseFenceCounter => {
                let key = format!("leasehold:{{{name}}}:fence");
                let _: i64 = leasehold::redis::cmd("DEL")
                    .arg(key)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                model.last_fence = None;
            }
            Op::FlushScripts => {
                let _: () = leasehold::redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut raw)
                    .await
                    .unwrap();
            }
        }
    }
    prop_assert!(
        fences_in_order.windows(2).all(|w| w[0] < w[1]),
        "fences went backwards: {:?}",
        fences_in_order
    );
    for entry in held {
        let _ = entry.guard.release().await;
    }
    Ok(())
}

#[test]
fn the_mutex_behaves_like_its_model() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let case = std::sync::atomic::AtomicU64::new(0);
    let config = ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in proptest::collection::vec(op(), 1..24))| {
        let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        runtime.block_on(run_case(&server.url(), case, &ops))?;
    });
}
