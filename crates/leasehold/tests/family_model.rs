//! Random sequences of ReentrantMutex, RwLock and Semaphore operations by
//! several clients and owners, checked step by step against a small
//! in-memory model of each primitive, on one real redis-server.
//!
//! Operations run one after another, except for one waiter at a time that
//! waits in the background: while it waits the model knows it is queued,
//! and the step that makes it grantable joins it before the next step runs.
//! Expiry is real: a lease taken with a short lease and no watchdog is
//! waited out on the spot, and its entry stays in the lock's hash until a
//! later script prunes it.
//!
//! A reentrant mutex has one lease per owner's hold, whatever its depth:
//! `inspect` shows one holder per hold with its level count, and a level
//! taken with a short lease into a hold that is already there adds a level
//! to the hold's lease instead of running out on its own.

mod common;

use std::time::Duration;

use common::eventually;
use leasehold::{Client, LeaseGuard, LockInfo, Owner};
use leasehold_testkit::RedisServer;
use proptest::prelude::*;
use tokio::task::JoinHandle;

const CLIENTS: usize = 3;
const OWNERS: usize = 3;
/// The semaphore's permit count.
const PERMITS: u32 = 3;
/// Long enough that nothing expires during a case unless it is meant to.
const LEASE: Duration = Duration::from_secs(120);
/// The lease of the operations that let a lease run out.
const SHORT: Duration = Duration::from_millis(250);
/// Waited after a short lease is granted: it has surely run out by then.
const OUTLIVE: Duration = Duration::from_millis(300);
/// The wait of a timed attempt that the model expects to find the lock busy.
const TIMED: Duration = Duration::from_millis(30);
/// The wait of the background waiter; it is granted well before.
const WAITER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prim {
    Reentrant,
    RwLock,
    Semaphore,
}

/// What one acquisition asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Exclusive,
    Read,
    Write,
    Permits(u32),
}

impl Mode {
    fn shown(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Read => "read",
            Mode::Write => "write",
            Mode::Permits(_) => "permits",
        }
    }

    fn permits(self) -> u32 {
        match self {
            Mode::Permits(n) => n,
            _ => 1,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Ask {
    client: usize,
    owner: usize,
    mode: Mode,
}

#[derive(Debug, Clone)]
enum Op {
    Try(Ask),
    Timed(Ask),
    /// A short lease, no watchdog, waited out.
    Expire(Ask),
    /// A waiter in the background, if the model says the lock is busy for it.
    Wait(Ask),
    Release(usize),
    Extend(usize),
    Drop(usize),
    ForceRelease,
    Inspect,
}

fn ask(prim: Prim) -> impl Strategy<Value = Ask> {
    let mode = match prim {
        Prim::Reentrant => Just(Mode::Exclusive).boxed(),
        Prim::RwLock => prop_oneof![Just(Mode::Read), Just(Mode::Write)].boxed(),
        Prim::Semaphore => (1..=PERMITS).prop_map(Mode::Permits).boxed(),
    };
    (0..CLIENTS, 0..OWNERS, mode).prop_map(|(client, owner, mode)| Ask {
        client,
        owner,
        mode,
    })
}

fn op(prim: Prim) -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => ask(prim).prop_map(Op::Try),
        2 => ask(prim).prop_map(Op::Timed),
        1 => ask(prim).prop_map(Op::Expire),
        2 => ask(prim).prop_map(Op::Wait),
        4 => (0..8usize).prop_map(Op::Release),
        1 => (0..8usize).prop_map(Op::Extend),
        1 => (0..8usize).prop_map(Op::Drop),
        1 => Just(Op::ForceRelease),
        2 => Just(Op::Inspect),
    ]
}

/// A lease the model believes held.
#[derive(Debug, Clone)]
struct Lease {
    id: usize,
    owner: usize,
    mode: Mode,
    fence: u64,
}

#[derive(Debug, PartialEq, Eq)]
enum Fence {
    /// Larger than every fence before.
    New,
    /// Exactly this one.
    Same(u64),
}

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Grant(Fence),
    Busy,
    /// A read-to-write upgrade.
    Conflict,
}

struct Model {
    prim: Prim,
    leases: Vec<Lease>,
    /// The last fence handed out (0: none yet).
    last_fence: u64,
    /// The semaphore has been used: its count outlives its leases.
    used: bool,
}

impl Model {
    /// What Redis must answer to `ask` now; `queued` says a waiter waits.
    fn verdict(&self, ask: &Ask, queued: Option<&Waiter>) -> Verdict {
        let mine: Vec<&Lease> = self
            .leases
            .iter()
            .filter(|l| l.owner == ask.owner)
            .collect();
        let others = self.leases.iter().filter(|l| l.owner != ask.owner);
        match self.prim {
            Prim::Reentrant => match (mine.first(), others.count()) {
                (Some(l), _) => Verdict::Grant(Fence::Same(l.fence)),
                (None, 0) => Verdict::Grant(Fence::New),
                _ => Verdict::Busy,
            },
            Prim::RwLock => {
                let held_others = self.leases.iter().any(|l| l.owner != ask.owner);
                let writer_others = self
                    .leases
                    .iter()
                    .any(|l| l.owner != ask.owner && l.mode == Mode::Write);
                if ask.mode == Mode::Write {
                    if let Some(w) = mine.iter().find(|l| l.mode == Mode::Write) {
                        Verdict::Grant(Fence::Same(w.fence))
                    } else if !mine.is_empty() {
                        Verdict::Conflict
                    } else if held_others || queued.is_some() {
                        Verdict::Busy
                    } else {
                        Verdict::Grant(Fence::New)
                    }
                } else if !mine.is_empty() {
                    Verdict::Grant(self.read_fence())
                } else if writer_others || queued.is_some_and(|w| w.ask.mode == Mode::Write) {
                    Verdict::Busy
                } else if held_others {
                    Verdict::Grant(self.read_fence())
                } else {
                    // The first reader of a read phase takes a new fence.
                    Verdict::Grant(Fence::New)
                }
            }
            Prim::Semaphore => {
                let used: u32 = self.leases.iter().map(|l| l.mode.permits()).sum();
                if queued.is_none() && used + ask.mode.permits() <= PERMITS {
                    Verdict::Grant(Fence::New)
                } else {
                    Verdict::Busy
                }
            }
        }
    }

    /// A reader that joins a held lock reports its fence (the write's it
    /// downgrades, or its read phase's); before any fence was handed out it
    /// takes a new one (0 would be refused by a fenced resource).
    fn read_fence(&self) -> Fence {
        if self.last_fence == 0 {
            Fence::New
        } else {
            Fence::Same(self.last_fence)
        }
    }

    fn check_fence(&mut self, fence: &Fence, got: u64) -> Result<(), TestCaseError> {
        match fence {
            Fence::New => {
                prop_assert!(
                    got > self.last_fence,
                    "fence {got} after {}",
                    self.last_fence
                );
                self.last_fence = got;
            }
            Fence::Same(expected) => prop_assert_eq!(got, *expected),
        }
        Ok(())
    }

    /// The levels `owner` holds of a reentrant mutex.
    fn levels(&self, owner: usize) -> usize {
        self.leases.iter().filter(|l| l.owner == owner).count()
    }

    /// Compares the model with what `inspect` saw.
    fn check(&self, info: &LockInfo, queued: bool) -> Result<(), TestCaseError> {
        type Seen = (String, Option<String>, u32, Option<u64>, u32);
        let mut seen: Vec<Seen> = info
            .holders
            .iter()
            .map(|h| {
                (
                    h.mode.as_str().to_owned(),
                    h.owner.clone(),
                    h.permits,
                    h.fence,
                    h.levels,
                )
            })
            .collect();
        let mut expected: Vec<Seen> = Vec::new();
        for l in &self.leases {
            let owner = (self.prim != Prim::Semaphore).then(|| owner_id(l.owner));
            if self.prim == Prim::Reentrant {
                // One lease for the owner's hold, counting its levels.
                if let Some(hold) = expected.iter_mut().find(|e| e.1 == owner) {
                    hold.4 += 1;
                    continue;
                }
            }
            expected.push((
                l.mode.shown().to_owned(),
                owner,
                l.mode.permits(),
                Some(l.fence),
                1,
            ));
        }
        seen.sort();
        expected.sort();
        prop_assert_eq!(seen, expected);
        prop_assert_eq!(info.held, !self.leases.is_empty());
        let kind = match self.prim {
            Prim::Reentrant => "reentrant",
            Prim::RwLock => "rwlock",
            Prim::Semaphore => "semaphore",
        };
        let present = !self.leases.is_empty() || (self.prim == Prim::Semaphore && self.used);
        prop_assert_eq!(info.kind.as_deref(), present.then_some(kind));
        if self.prim == Prim::Semaphore && self.used {
            prop_assert_eq!(info.permits, Some(PERMITS));
        }
        prop_assert_eq!(
            info.last_fence,
            (self.last_fence > 0).then_some(self.last_fence)
        );
        prop_assert_eq!(info.waiting_clients, u64::from(queued));
        Ok(())
    }

    /// Forgets the lease `id`: released, expired or removed.
    fn forget(&mut self, id: usize) {
        self.leases.retain(|l| l.id != id);
    }
}

fn owner_id(owner: usize) -> String {
    format!("owner-{owner}")
}

struct Slot {
    id: usize,
    guard: LeaseGuard,
    /// Still held per the model.
    current: bool,
}

/// The one background waiter.
struct Waiter {
    ask: Ask,
    task: JoinHandle<leasehold::Result<LeaseGuard>>,
}

struct Case {
    prim: Prim,
    name: String,
    clients: Vec<Client>,
    model: Model,
    slots: Vec<Slot>,
    waiter: Option<Waiter>,
    next_id: usize,
    raw: leasehold::redis::aio::MultiplexedConnection,
}

/// How an acquisition is made.
#[derive(Clone, Copy)]
enum How {
    Try,
    Timed,
    Short,
}

impl Case {
    async fn take(&self, ask: &Ask, how: How) -> leasehold::Result<Option<LeaseGuard>> {
        let client = &self.clients[ask.client];
        let owner = Owner::from_id(owner_id(ask.owner))?;
        let (lease, watchdog) = match how {
            How::Short => (SHORT, false),
            _ => (LEASE, true),
        };
        macro_rules! run {
            ($side:expr, $timed:expr) => {
                match how {
                    How::Try | How::Short => $side.try_acquire().await,
                    How::Timed => match $timed.await {
                        Ok(guard) => Ok(Some(guard)),
                        Err(e) if e.is_timeout() => Ok(None),
                        Err(e) => Err(e),
                    },
                }
            };
        }
        match (self.prim, ask.mode) {
            (Prim::Reentrant, _) => {
                let lock = client
                    .reentrant_mutex(&self.name)?
                    .with_owner(owner)
                    .with_lease(lease)?
                    .with_watchdog(watchdog);
                run!(lock, lock.acquire_timeout(TIMED))
            }
            (Prim::RwLock, Mode::Read) => {
                let lock = client
                    .rw_lock(&self.name)?
                    .with_owner(owner)
                    .with_lease(lease)?
                    .with_watchdog(watchdog)
                    .read();
                run!(lock, lock.acquire_timeout(TIMED))
            }
            (Prim::RwLock, _) => {
                let lock = client
                    .rw_lock(&self.name)?
                    .with_owner(owner)
                    .with_lease(lease)?
                    .with_watchdog(watchdog)
                    .write();
                run!(lock, lock.acquire_timeout(TIMED))
            }
            (Prim::Semaphore, mode) => {
                let sem = client
                    .semaphore(&self.name, PERMITS)?
                    .with_lease(lease)?
                    .with_watchdog(watchdog);
                let n = mode.permits();
                match how {
                    How::Try | How::Short => sem.try_acquire_many(n).await,
                    How::Timed => match sem.acquire_many_timeout(n, TIMED).await {
                        Ok(guard) => Ok(Some(guard)),
                        Err(e) if e.is_timeout() => Ok(None),
                        Err(e) => Err(e),
                    },
                }
            }
        }
    }

    fn spawn_waiter(&self, ask: Ask) -> JoinHandle<leasehold::Result<LeaseGuard>> {
        let client = self.clients[ask.client].clone();
        let name = self.name.clone();
        let prim = self.prim;
        tokio::spawn(async move {
            let owner = Owner::from_id(owner_id(ask.owner))?;
            match (prim, ask.mode) {
                (Prim::Reentrant, _) => {
                    let lock = client.reentrant_mutex(&name)?.with_owner(owner);
                    lock.acquire_timeout(WAITER).await
                }
                (Prim::RwLock, Mode::Read) => {
                    let lock = client.rw_lock(&name)?.with_owner(owner);
                    lock.read().acquire_timeout(WAITER).await
                }
                (Prim::RwLock, _) => {
                    let lock = client.rw_lock(&name)?.with_owner(owner);
                    lock.write().acquire_timeout(WAITER).await
                }
                (Prim::Semaphore, mode) => {
                    let sem = client.semaphore(&name, PERMITS)?;
                    sem.acquire_many_timeout(mode.permits(), WAITER).await
                }
            }
        })
    }

    async fn inspect(&self) -> LockInfo {
        let client = &self.clients[0];
        match self.prim {
            Prim::Reentrant => client.reentrant_mutex(&self.name).unwrap().inspect().await,
            Prim::RwLock => client.rw_lock(&self.name).unwrap().inspect().await,
            Prim::Semaphore => {
                client
                    .semaphore(&self.name, PERMITS)
                    .unwrap()
                    .inspect()
                    .await
            }
        }
        .unwrap()
    }

    async fn force_release(&self) -> bool {
        let client = &self.clients[1];
        match self.prim {
            Prim::Reentrant => {
                client
                    .reentrant_mutex(&self.name)
                    .unwrap()
                    .force_release()
                    .await
            }
            Prim::RwLock => client.rw_lock(&self.name).unwrap().force_release().await,
            Prim::Semaphore => {
                client
                    .semaphore(&self.name, PERMITS)
                    .unwrap()
                    .force_release()
                    .await
            }
        }
        .unwrap()
    }

    /// Records a grant the model expected as `fence`.
    fn granted(
        &mut self,
        ask: &Ask,
        fence: &Fence,
        guard: LeaseGuard,
    ) -> Result<usize, TestCaseError> {
        self.model.check_fence(fence, guard.fence())?;
        prop_assert_eq!(guard.permits(), ask.mode.permits());
        let id = self.next_id;
        self.next_id += 1;
        self.model.leases.push(Lease {
            id,
            owner: ask.owner,
            mode: ask.mode,
            fence: guard.fence(),
        });
        self.model.used = true;
        self.slots.push(Slot {
            id,
            guard,
            current: true,
        });
        Ok(id)
    }

    /// One acquisition checked against the model's verdict.
    async fn acquire(&mut self, ask: &Ask, how: How) -> Result<Option<usize>, TestCaseError> {
        let verdict = self.model.verdict(ask, self.waiter.as_ref());
        let got = self.take(ask, how).await;
        match (verdict, got) {
            (Verdict::Grant(fence), Ok(Some(guard))) => Ok(Some(self.granted(ask, &fence, guard)?)),
            (Verdict::Busy, Ok(None)) => Ok(None),
            (Verdict::Conflict, Err(e)) if e.is_conflict() => Ok(None),
            (verdict, got) => Err(TestCaseError::fail(format!(
                "{ask:?} by {:?}: the model says {verdict:?}, redis {:?}",
                self.prim,
                got.map(|g| g.map(|g| g.fence()))
            ))),
        }
    }

    /// Joins the background waiter if the model says it can have the lock now.
    async fn settle_waiter(&mut self) -> Result<(), TestCaseError> {
        let Some(waiter) = self.waiter.take() else {
            return Ok(());
        };
        let verdict = self.model.verdict(&waiter.ask, None);
        let Verdict::Grant(fence) = verdict else {
            self.waiter = Some(waiter);
            return Ok(());
        };
        let joined = tokio::time::timeout(Duration::from_secs(30), waiter.task).await;
        let guard = match joined {
            Ok(Ok(Ok(guard))) => guard,
            other => {
                return Err(TestCaseError::fail(format!(
                    "the waiter {:?} was not granted: {other:?}",
                    waiter.ask
                )))
            }
        };
        self.granted(&waiter.ask, &fence, guard)?;
        Ok(())
    }

    async fn queued(&mut self) -> u64 {
        let key = format!("leasehold:{{{}}}:q", self.name);
        leasehold::redis::cmd("ZCARD")
            .arg(key)
            .query_async(&mut self.raw)
            .await
            .unwrap()
    }

    async fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Try(ask) => {
                self.acquire(ask, How::Try).await?;
            }
            Op::Timed(ask) => {
                self.acquire(ask, How::Timed).await?;
                // A timed-out waiter left the queue before it returned.
                let queued = self.queued().await;
                prop_assert_eq!(queued, u64::from(self.waiter.is_some()));
            }
            Op::Expire(ask) => {
                // A reentry joins the hold's lease: it runs out with the hold.
                let joins = self.prim == Prim::Reentrant && self.model.levels(ask.owner) > 0;
                let Some(id) = self.acquire(ask, How::Short).await? else {
                    return Ok(());
                };
                tokio::time::sleep(OUTLIVE).await;
                let slot = self.slots.iter_mut().find(|s| s.id == id).unwrap();
                if joins {
                    prop_assert!(!slot.guard.is_lost(), "a reentry ran out on its own");
                    return Ok(());
                }
                self.model.forget(id);
                slot.current = false;
                prop_assert!(slot.guard.valid_for().is_zero());
                self.settle_waiter().await?;
            }
            Op::Wait(ask) => {
                if self.waiter.is_some() || self.model.verdict(ask, None) != Verdict::Busy {
                    return Ok(());
                }
                let task = self.spawn_waiter(*ask);
                let key = format!("leasehold:{{{}}}:q", self.name);
                let raw = self.raw.clone();
                eventually("the waiter to queue", || {
                    let (key, mut raw) = (key.clone(), raw.clone());
                    async move {
                        let n: u64 = leasehold::redis::cmd("ZCARD")
                            .arg(key)
                            .query_async(&mut raw)
                            .await
                            .unwrap();
                        n == 1
                    }
                })
                .await;
                self.waiter = Some(Waiter { ask: *ask, task });
            }
            Op::Extend(i) => {
                if self.slots.is_empty() {
                    return Ok(());
                }
                let slot = &self.slots[i % self.slots.len()];
                let result = slot.guard.extend(LEASE).await;
                match (&result, slot.current) {
                    (Ok(()), true) => {}
                    (Err(e), false) if e.is_not_held() => prop_assert!(slot.guard.is_lost()),
                    _ => {
                        return Err(TestCaseError::fail(format!(
                            "extend of a lease {} held: {result:?}",
                            if slot.current { "still" } else { "no longer" }
                        )))
                    }
                }
            }
            Op::Release(i) | Op::Drop(i) => {
                if self.slots.is_empty() {
                    return Ok(());
                }
                let slot = self.slots.swap_remove(i % self.slots.len());
                self.model.forget(slot.id);
                if let Op::Release(_) = op {
                    let result = slot.guard.release().await;
                    match (&result, slot.current) {
                        (Ok(()), true) => {}
                        (Err(e), false) if e.is_not_held() => {}
                        _ => {
                            return Err(TestCaseError::fail(format!(
                                "release of a lease {} held: {result:?}",
                                if slot.current { "still" } else { "no longer" }
                            )))
                        }
                    }
                } else {
                    drop(slot.guard);
                    for client in &self.clients {
                        client.flush().await;
                    }
                }
                self.settle_waiter().await?;
            }
            Op::ForceRelease => {
                let removed = self.force_release().await;
                prop_assert_eq!(removed, !self.model.leases.is_empty());
                self.model.leases.clear();
                for slot in &mut self.slots {
                    slot.current = false;
                }
                self.settle_waiter().await?;
            }
            Op::Inspect => {
                let info = self.inspect().await;
                self.model.check(&info, self.waiter.is_some())?;
                if self.prim == Prim::Reentrant {
                    for owner in 0..OWNERS {
                        let lock = self.clients[owner % CLIENTS]
                            .reentrant_mutex(&self.name)
                            .unwrap()
                            .with_owner(Owner::from_id(owner_id(owner)).unwrap());
                        prop_assert_eq!(
                            lock.hold_count().await.unwrap(),
                            self.model.levels(owner),
                            "levels of owner {}",
                            owner
                        );
                    }
                }
                // Every lease the model holds is held: the guards of one
                // reentrant hold agree with it.
                for slot in self.slots.iter().filter(|s| s.current) {
                    prop_assert!(!slot.guard.is_lost(), "{:?}", slot.guard);
                }
            }
        }
        Ok(())
    }

    /// Releases everything; the lock must end free with nobody queued.
    async fn finish(mut self) -> Result<(), TestCaseError> {
        while let Some(slot) = self.slots.pop() {
            self.model.forget(slot.id);
            let result = slot.guard.release().await;
            prop_assert_eq!(result.is_ok(), slot.current, "{:?}", result);
            self.settle_waiter().await?;
        }
        prop_assert!(self.waiter.is_none(), "a waiter was never granted");
        while let Some(slot) = self.slots.pop() {
            slot.guard.release().await.unwrap();
        }
        self.model.leases.clear();
        let info = self.inspect().await;
        self.model.check(&info, false)?;
        Ok(())
    }
}

async fn run_case(url: &str, prim: Prim, case: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let clients: Vec<Client> = (0..CLIENTS)
        .map(|_| Client::builder(url).lease(LEASE).build().unwrap())
        .collect();
    let raw = leasehold::redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut case = Case {
        prim,
        name: format!("{prim:?}-{case}"),
        clients,
        model: Model {
            prim,
            leases: Vec::new(),
            last_fence: 0,
            used: false,
        },
        slots: Vec::new(),
        waiter: None,
        next_id: 0,
        raw,
    };
    for op in ops {
        case.step(op).await?;
        // Every step leaves the queue as the model has it.
        let queued = case.queued().await;
        prop_assert_eq!(queued, u64::from(case.waiter.is_some()), "after {:?}", op);
    }
    case.finish().await
}

fn run(prim: Prim, cases: u32) {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let case = std::sync::atomic::AtomicU64::new(0);
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in proptest::collection::vec(op(prim), 1..24))| {
        let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        runtime.block_on(run_case(&server.url(), prim, case, &ops))?;
    });
}

#[test]
fn the_reentrant_mutex_behaves_like_its_model() {
    run(Prim::Reentrant, 48);
}

#[test]
fn the_rw_lock_behaves_like_its_model() {
    run(Prim::RwLock, 96);
}

#[test]
fn the_semaphore_behaves_like_its_model() {
    run(Prim::Semaphore, 48);
}
