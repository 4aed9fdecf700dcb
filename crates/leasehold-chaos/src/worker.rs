//! A worker: one OS process with its own `Client`, taking the run's locks
//! at random and doing fenced read-modify-writes on the resource while it
//! holds them, until its standard input closes. Every step is logged (see
//! `events`).

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use leasehold::{Client, Redlock};
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

use crate::events::{mono_ns, Answer, Event, Log, Mode, Op, Outcome};
use crate::resource::{Reply, ResourceClient};
use crate::rng::Rng;
use crate::workload::{Handle, Held, Workload};

/// What the orchestrator tells a worker on its command line.
#[derive(Debug, Clone)]
pub(crate) struct WorkerArgs {
    pub(crate) id: String,
    pub(crate) url: String,
    pub(crate) resource: SocketAddr,
    pub(crate) log: PathBuf,
    pub(crate) lease: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) restart_grace: Duration,
    /// The locks to take, by name (each name tells its workload).
    pub(crate) locks: Vec<String>,
    pub(crate) seed: u64,
    /// Replicas that must acknowledge each grant, and how long Redis
    /// waits for them.
    pub(crate) replica_ack: leasehold::ReplicaAck,
    /// `url` lists a Redlock's masters, separated by commas: the locks are
    /// Redlock mutexes over them.
    pub(crate) redlock: bool,
}

impl WorkerArgs {
    /// The longest a worker waits for a lock before it tries another.
    pub(crate) fn wait(&self) -> Duration {
        self.lease * 5
    }
}

pub(crate) fn run(args: &WorkerArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(work(args))
}

async fn work(args: &WorkerArgs) -> Result<()> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.log)
        .with_context(|| format!("cannot open {}", args.log.display()))?;
    let mut log = Log::new(file);
    // A Redlock's client makes its mutexes, as one deployment's does.
    let client = if args.redlock {
        Redlock::builder(args.url.split(','))
            .name(args.id.clone())
            .lease(args.lease)
            .command_timeout(args.command_timeout)
            .restart_grace(args.restart_grace)
            .build()?
            .client()
            .clone()
    } else {
        Client::builder(args.url.clone())
            .replica_ack(args.replica_ack)
            .name(args.id.clone())
            .lease(args.lease)
            .command_timeout(args.command_timeout)
            .restart_grace(args.restart_grace)
            .build()?
    };
    let mut locks = Vec::new();
    for name in &args.locks {
        let workload =
            Workload::of_lock(name).with_context(|| format!("lock {name:?} names no workload"))?;
        let handle = Handle::new(&client, workload, name)?;
        locks.push((name.clone(), workload, handle));
    }
    anyhow::ensure!(!locks.is_empty(), "no lock to take");
    let mut resource = ResourceClient::new(args.resource, &args.id);
    let mut rng = Rng::new(args.seed);

    // The orchestrator closes our standard input to stop us.
    let (stop_tx, mut stop) = watch::channel(false);
    tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 64];
        while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {}
        let _ = stop_tx.send(true);
    });

    while !*stop.borrow() {
        let (name, workload, handle) = &locks[rng.below(locks.len() as u64) as usize];
        let (mode, permits) = handle.mode(rng.next());
        let wait_start = mono_ns();
        let acquired = tokio::select! {
            r = handle.acquire(mode, permits, args.wait(), &args.id) => r,
            _ = stop.changed() => break,
        };
        let held = match acquired {
            Ok(held) => held,
            Err(e) => {
                log.write(&Event::WaitFailed {
                    lock: name.clone(),
                    wait_start,
                    at: mono_ns(),
                    kind: e.kind.clone(),
                    message: e.message.clone(),
                })?;
                if !e.is_timeout() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                continue;
            }
        };
        // `at` before `valid_for`, so that their sum is never past the
        // holder's deadline.
        let at = mono_ns();
        let valid = held.valid_for();
        let valid_until = if valid.is_zero() {
            0
        } else {
            at.saturating_add(u64::try_from(valid.as_nanos()).unwrap_or(u64::MAX))
        };
        log.write(&Event::Acquired {
            lock: name.clone(),
            mode,
            fence: held.fence(),
            permits,
            wait_start,
            at,
            valid_until,
        })?;
        let plan = Plan {
            hold: hold_time(&mut rng, args.lease),
            late_write: rng.chance(0.5),
            nest: rng.chance(0.3),
            wait: args.wait(),
        };
        let mut section = Section {
            register: name,
            workload: *workload,
            mode,
            handle,
            resource: &mut resource,
            log: &mut log,
        };
        let (outcome, left) = section.run(held, &plan).await?;
        if let Some(outcome) = outcome {
            log.write(&Event::Ended {
                at: mono_ns(),
                outcome,
            })?;
        }
        release(left, &mut log).await?;
        tokio::time::sleep(Duration::from_micros(rng.below(1000))).await;
    }
    client.flush().await;
    Ok(())
}

async fn release(held: Held, log: &mut Log) -> Result<()> {
    let result = match held.release().await {
        Ok(()) => "ok".to_owned(),
        Err(e) => format!("{:?}: {e}", e.kind()).to_lowercase(),
    };
    log.write(&Event::Released {
        at: mono_ns(),
        result,
    })?;
    Ok(())
}

/// Mostly 1 ms; a third a few ms; one in ten tens of ms (long enough for a
/// fault aimed at a holder to strike while it holds); now and then most of
/// a lease or more, so that the watchdog renews while faults strike.
fn hold_time(rng: &mut Rng, lease: Duration) -> Duration {
    match rng.below(1000) {
        0..=4 => lease.mul_f64(0.4 + rng.below(800) as f64 / 1000.0),
        5..=104 => Duration::from_millis(20 + rng.below(60)),
        105..=399 => Duration::from_millis(2 + rng.below(8)),
        _ => Duration::from_millis(1),
    }
}

/// What one critical section does, drawn before it starts.
#[derive(Debug)]
struct Plan {
    hold: Duration,
    /// Write even when the lease was lost during the hold.
    late_write: bool,
    /// Take a second level before the write: a reentrant lock again, or
    /// the read lock of a writer, which then downgrades to it.
    nest: bool,
    wait: Duration,
}

/// `fut`, unless the lease is lost first.
async fn unless_lost<T>(held: &Held, fut: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        () = held.lost() => None,
        v = fut => Some(v),
    }
}

/// The work under one lock, and its log.
struct Section<'a> {
    register: &'a str,
    workload: Workload,
    mode: Mode,
    handle: &'a Handle,
    resource: &'a mut ResourceClient,
    log: &'a mut Log,
}

impl Section<'_> {
    /// A request to the fenced resource, logged with its answer; raced
    /// against the loss of `race` when given (`None` in the result: the
    /// lease was lost first).
    async fn request(
        &mut self,
        race: Option<&Held>,
        op: Op,
        fence: u64,
        value: u64,
    ) -> Result<Option<Result<Reply>>> {
        let sent = mono_ns();
        let register = self.register;
        let resource = &mut *self.resource;
        let asked = async {
            match op {
                Op::Read => resource.read(register, fence).await,
                Op::Write => resource.write(register, fence, value).await,
            }
        };
        let reply = match race {
            Some(held) => unless_lost(held, asked).await,
            None => Some(asked.await),
        };
        let (answer, value) = match &reply {
            None => (Answer::Cut, value),
            Some(Ok(Reply::Accepted(v))) => (Answer::Accepted, *v),
            Some(Ok(Reply::Refused)) => (Answer::Refused, value),
            Some(Err(_)) => (Answer::Failed, value),
        };
        self.log.write(&Event::Request {
            register: register.to_owned(),
            op,
            fence,
            value,
            sent,
            answered: mono_ns(),
            answer,
        })?;
        Ok(reply)
    }

    /// Read the register, hold, write it back plus one, each with the
    /// lease's fence, each step raced against the lease's lost signal. A
    /// reader reads only; a semaphore's holder only holds. A reentrant
    /// holder sometimes takes a second level for the write; a writer of a
    /// read-write lock sometimes takes the read lock after its write and
    /// downgrades to it.
    ///
    /// A holder that learns during its hold that the lease is lost ends its
    /// section there; with `late_write` it still sends its write, as a
    /// holder would whose pause struck after it last looked: only the fence
    /// can stop that write. Returns the outcome to log (`None` when it was
    /// logged) and the lease left to release.
    async fn run(&mut self, held: Held, plan: &Plan) -> Result<(Option<Outcome>, Held)> {
        let held_on = |held: &Held, done: Option<()>| {
            if done.is_some() && !held.is_lost() {
                Outcome::Done
            } else {
                Outcome::Lost
            }
        };
        if !self.workload.uses_resource() {
            let done = unless_lost(&held, tokio::time::sleep(plan.hold)).await;
            return Ok((Some(held_on(&held, done)), held));
        }
        let fence = held.fence();
        let value = match self.request(Some(&held), Op::Read, fence, 0).await? {
            None => return Ok((Some(Outcome::Lost), held)),
            Some(Ok(Reply::Accepted(v))) => v,
            Some(Ok(Reply::Refused)) => return Ok((Some(Outcome::Done), held)),
            Some(Err(_)) => return Ok((Some(Outcome::Error), held)),
        };
        let done = unless_lost(&held, tokio::time::sleep(plan.hold)).await;
        if self.mode == Mode::Read {
            return Ok((Some(held_on(&held, done)), held));
        }
        if done.is_none() {
            self.log.write(&Event::Ended {
                at: mono_ns(),
                outcome: Outcome::Lost,
            })?;
            if plan.late_write {
                self.request(None, Op::Write, fence, value + 1).await?;
            }
            return Ok((None, held));
        }
        let inner = if plan.nest {
            match unless_lost(&held, self.handle.nest(self.mode, plan.wait)).await {
                None => {
                    self.log.write(&Event::Nested {
                        at: mono_ns(),
                        fence: 0,
                        lost: true,
                        result: "cut".into(),
                    })?;
                    return Ok((Some(Outcome::Lost), held));
                }
                Some(None) => None,
                Some(Some(Ok(inner))) => {
                    self.log.write(&Event::Nested {
                        at: mono_ns(),
                        fence: inner.fence(),
                        lost: held.is_lost(),
                        result: "ok".into(),
                    })?;
                    Some(Held::Lease(inner))
                }
                Some(Some(Err(e))) => {
                    self.log.write(&Event::Nested {
                        at: mono_ns(),
                        fence: 0,
                        lost: held.is_lost(),
                        result: format!("{:?}", e.kind()).to_lowercase(),
                    })?;
                    // The lock may not be this owner's any more: no write.
                    return Ok((Some(Outcome::Error), held));
                }
            }
        } else {
            None
        };
        let written = self
            .request(Some(&held), Op::Write, fence, value + 1)
            .await?;
        let outcome = match written {
            None => Outcome::Lost,
            Some(Ok(_)) => Outcome::Done,
            Some(Err(_)) => Outcome::Error,
        };
        let Some(inner) = inner else {
            return Ok((Some(outcome), held));
        };
        if self.mode != Mode::Write || outcome != Outcome::Done {
            release(inner, self.log).await?;
            return Ok((Some(outcome), held));
        }
        // A downgrade: the read lock taken, the write lock let go; no
        // writer can come between.
        self.log.write(&Event::Downgraded { at: mono_ns() })?;
        release(held, self.log).await?;
        let read_fence = inner.fence();
        let outcome = match self.request(Some(&inner), Op::Read, read_fence, 0).await? {
            None => Outcome::Lost,
            Some(Ok(_)) => {
                let done = unless_lost(&inner, tokio::time::sleep(plan.hold / 2)).await;
                held_on(&inner, done)
            }
            Some(Err(_)) => Outcome::Error,
        };
        Ok((Some(outcome), inner))
    }
}
