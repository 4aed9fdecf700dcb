//! A worker: one OS process with its own `Client`, taking the run's locks
//! at random and doing fenced read-modify-writes on the resource while it
//! holds them, until its standard input closes. Every step is logged (see
//! `events`).

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use leasehold::{Client, LeaseGuard};
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

use crate::events::{mono_ns, Event, Log, Mode, Outcome};
use crate::resource::{Reply, ResourceClient};
use crate::rng::Rng;
use crate::workload::{Handle, Workload};

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
    pub(crate) workloads: Vec<Workload>,
    pub(crate) locks: usize,
    pub(crate) seed: u64,
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
    let client = Client::builder(args.url.clone())
        .name(args.id.clone())
        .lease(args.lease)
        .command_timeout(args.command_timeout)
        .restart_grace(args.restart_grace)
        .build()?;
    let mut locks = Vec::new();
    for &workload in &args.workloads {
        for i in 0..args.locks {
            let name = workload.lock_name(i);
            locks.push((
                name.clone(),
                workload,
                Handle::new(&client, workload, &name)?,
            ));
        }
    }
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
        let mode = handle.mode(rng.next());
        let wait_start = mono_ns();
        let acquired = tokio::select! {
            r = handle.acquire(mode, args.wait()) => r,
            _ = stop.changed() => break,
        };
        let guard = match acquired {
            Ok(guard) => guard,
            Err(e) => {
                log.write(&Event::WaitFailed {
                    lock: name.clone(),
                    wait_start,
                    at: mono_ns(),
                    kind: format!("{:?}", e.kind()).to_lowercase(),
                    message: e.to_string(),
                })?;
                if !e.is_timeout() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                continue;
            }
        };
        log.write(&Event::Acquired {
            lock: name.clone(),
            mode,
            fence: guard.fence(),
            wait_start,
            at: mono_ns(),
        })?;
        let plan = Plan {
            hold: hold_time(&mut rng, args.lease),
            late_write: rng.chance(0.5),
            reenter: rng.chance(0.3),
            wait: args.wait(),
        };
        let outcome = critical(
            &guard,
            name,
            *workload,
            mode,
            handle,
            &mut resource,
            &plan,
            &mut log,
        )
        .await?;
        if let Some(outcome) = outcome {
            log.write(&Event::Ended {
                at: mono_ns(),
                outcome,
            })?;
        }
        let result = match guard.release().await {
            Ok(()) => "ok".to_owned(),
            Err(e) => format!("{:?}: {e}", e.kind()).to_lowercase(),
        };
        log.write(&Event::Released {
            at: mono_ns(),
            result,
        })?;
        tokio::time::sleep(Duration::from_micros(rng.below(1000))).await;
    }
    client.flush().await;
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
    /// Take a reentrant lock a second time for the write.
    reenter: bool,
    wait: Duration,
}

/// `fut`, unless the lease is lost first.
async fn unless_lost<T>(
    guard: &LeaseGuard,
    fut: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        biased;
        () = guard.lost() => None,
        v = fut => Some(v),
    }
}

/// The work under the lock: read the register, hold, write it back plus
/// one, each with the lease's fence, each step raced against the lease's
/// lost signal. A reader reads only; a semaphore's holder only holds. A
/// reentrant holder sometimes takes a second level for the write.
///
/// A holder that learns during its hold that the lease is lost ends its
/// section there; with `late_write` it still sends its write, as a holder
/// would whose pause struck after it last looked: only the fence can stop
/// that write. Returns the outcome to log, or `None` when it was logged.
#[allow(clippy::too_many_arguments)]
async fn critical(
    guard: &LeaseGuard,
    register: &str,
    workload: Workload,
    mode: Mode,
    handle: &Handle,
    resource: &mut ResourceClient,
    plan: &Plan,
    log: &mut Log,
) -> Result<Option<Outcome>> {
    if !workload.uses_resource() {
        let held = unless_lost(guard, tokio::time::sleep(plan.hold)).await;
        return Ok(Some(if held.is_some() {
            Outcome::Done
        } else {
            Outcome::Lost
        }));
    }
    let fence = guard.fence();
    let value = match unless_lost(guard, resource.read(register, fence)).await {
        None => return Ok(Some(Outcome::Lost)),
        Some(Ok(Reply::Accepted(v))) => v,
        Some(Ok(Reply::Refused)) => return Ok(Some(Outcome::Done)),
        Some(Err(_)) => return Ok(Some(Outcome::Error)),
    };
    let held = unless_lost(guard, tokio::time::sleep(plan.hold))
        .await
        .is_some();
    if mode == Mode::Read {
        return Ok(Some(if held { Outcome::Done } else { Outcome::Lost }));
    }
    if !held {
        log.write(&Event::Ended {
            at: mono_ns(),
            outcome: Outcome::Lost,
        })?;
        if plan.late_write {
            let _ = resource.write(register, fence, value + 1).await;
        }
        return Ok(None);
    }
    let inner = if plan.reenter {
        match unless_lost(guard, handle.reenter(plan.wait)).await {
            None => return Ok(Some(Outcome::Lost)),
            Some(inner) => inner,
        }
    } else {
        None
    };
    let written = unless_lost(guard, resource.write(register, fence, value + 1)).await;
    if let Some(Ok(inner)) = inner {
        let _ = unless_lost(guard, inner.release()).await;
    }
    Ok(Some(match written {
        None => Outcome::Lost,
        Some(Ok(_)) => Outcome::Done,
        Some(Err(_)) => Outcome::Error,
    }))
}
