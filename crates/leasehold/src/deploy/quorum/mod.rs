//! A quorum of independent masters (Redlock) as a store the engine leases
//! from: each master a [`Store`] over one standalone server, with its own
//! healing connection and restart grace; what this client last read of
//! each master's clock; and requests fanned out to the masters in parallel
//! and counted as they answer (the arithmetic is in [`count`]).
//!
//! Every request to a master runs in a future of its own, so a master that
//! is slow or out of reach costs the caller no more than the per-node
//! deadline, while the request itself runs on to its connection's command
//! timeout (which replaces a connection that stopped answering).

pub(crate) mod count;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use crate::background::{Background, Tracked};
use crate::conn::ClockReading;
use crate::deploy::quorum::count::{Clocks, RoundOneLimit, Tally};
use crate::deploy::store::Store;
use crate::error::{Error, Result};

/// The default per-node deadline is never shorter than this (unless a
/// quarter of the lease is): a host with several times more runnable
/// threads than cores schedules a client or a master tens of
/// milliseconds late, and a deadline below that fails tries whose masters
/// are well (see docs/SAFETY.md, "Redlock on a loaded host").
pub(crate) const NODE_DEADLINE_FLOOR: Duration = Duration::from_millis(50);

/// How the masters of one quorum are asked and counted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QuorumConfig {
    pub(crate) clocks: Clocks,
    /// The per-node deadline; a hundredth of the lease when not set.
    pub(crate) node_timeout: Option<Duration>,
    /// Validity a grant must have left to be reported; a tenth of the
    /// lease when not set.
    pub(crate) validity_floor: Option<Duration>,
    /// The pause between tries of a wait, before jitter.
    pub(crate) retry_delay: Duration,
}

/// The independent masters of one quorum.
#[derive(Debug)]
pub(crate) struct Quorum {
    pub(crate) masters: Vec<Arc<Store>>,
    pub(crate) config: QuorumConfig,
    /// What this client last read of each master's clock, by master.
    pub(crate) clocks: Vec<Arc<MasterClock>>,
}

impl Quorum {
    pub(crate) fn new(masters: Vec<Arc<Store>>, config: QuorumConfig) -> Self {
        Quorum {
            clocks: masters.iter().map(|_| Arc::default()).collect(),
            masters,
            config,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.masters.len()
    }

    /// How many masters must hold a lock for it to be held.
    pub(crate) fn majority(&self) -> usize {
        count::majority(self.len())
    }

    pub(crate) fn node_timeout(&self, lease: Duration) -> Duration {
        self.config
            .node_timeout
            .unwrap_or_else(|| count::node_deadline(lease, NODE_DEADLINE_FLOOR))
    }

    pub(crate) fn validity_floor(&self, lease: Duration) -> Duration {
        self.config.validity_floor.unwrap_or(lease / 10)
    }

    pub(crate) fn command_timeout(&self) -> Duration {
        self.masters
            .first()
            .map_or(Duration::from_secs(2), |master| master.command_timeout())
    }

    /// Runs `op` on the masters `which` picks, all at once; the answers
    /// arrive as they come. Requests still in flight when the caller stops
    /// listening run on in a task of their own, counted on `background`
    /// (see [`Fanned`]).
    pub(crate) fn fan_out<T, F, Fut>(
        &self,
        background: &Arc<Background>,
        which: impl Fn(usize) -> bool,
        op: F,
    ) -> Fanned<T>
    where
        F: Fn(usize, Arc<Store>) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let futures = FuturesUnordered::new();
        for (i, master) in self.masters.iter().enumerate() {
            if !which(i) {
                continue;
            }
            // Unconstrained by the task's budget: a request that is ready
            // to go leaves at the first poll. Held back by the budget, it
            // could be sent after the caller's next request to the same
            // master (a release after the next acquire).
            let request = tokio::task::unconstrained(op(i, Arc::clone(master)));
            futures.push(Box::pin(async move { (i, request.await) }) as Pending<T>);
        }
        Fanned {
            futures,
            background: Arc::clone(background),
        }
    }
}

/// What a client last read of one master's clock: the master's time in a
/// round-one reply, and when (and how long) that request was out. Every
/// round-one request carries the instant on the master's clock past which
/// it is too late to take the lock ([`RoundOneLimit`]).
#[derive(Debug, Default)]
pub(crate) struct MasterClock {
    sample: Mutex<Option<ClockReading>>,
}

impl MasterClock {
    /// The limit of a round-one request sent now, once the master's clock
    /// was read; `window` is how long after sending it may still take the
    /// lock.
    pub(crate) fn limit(&self, now: Instant, window: Duration) -> Option<RoundOneLimit> {
        let sample = (*self.sample())?;
        Some(RoundOneLimit::new(
            sample.server_us,
            sample.loose,
            now.saturating_duration_since(sample.sent),
            window,
        ))
    }

    /// The master's clock as read when this client's connection to it
    /// was made, until a reply is read: so that the client's first round
    /// one there carries a limit too.
    pub(crate) fn first(&self, reading: Option<ClockReading>) {
        let mut sample = self.sample();
        if sample.is_none() {
            *sample = reading;
        }
    }

    /// The master ran a request sent at `sent` at `master_us` on its
    /// clock, and its reply came now.
    pub(crate) fn read(&self, master_us: u64, sent: Instant) {
        *self.sample() = Some(ClockReading {
            server_us: master_us,
            sent,
            loose: sent.elapsed(),
        });
    }

    pub(crate) fn sample(&self) -> std::sync::MutexGuard<'_, Option<ClockReading>> {
        self.sample.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

type Pending<T> = Pin<Box<dyn Future<Output = (usize, Result<T>)> + Send>>;

/// Requests to several masters in flight, polled together by whoever
/// listens for their answers. Dropped with requests still in flight (the
/// round was decided, or its caller gave up), it hands them to a task of
/// their own, so that each runs on to its answer or its connection's
/// command timeout: a grant that comes late is released by its request,
/// and a connection that stopped answering is replaced.
pub(crate) struct Fanned<T: Send + 'static> {
    futures: FuturesUnordered<Pending<T>>,
    /// Counts the task that runs on what is left, for a flush.
    background: Arc<Background>,
}

/// When a count of yes/no answers stops listening before every master
/// answered (it never listens past its `until`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stop {
    /// Once the count is decided either way.
    Decided,
    /// Once a majority said yes; otherwise as `After`.
    Won(Duration),
    /// Once decided, no longer than this after the count began.
    After(Duration),
}

impl Fanned<bool> {
    /// Counts the answers of `n` masters (yes, no, failed) until `until`,
    /// or earlier as `stop` says; the masters that did not answer by then
    /// count as failed. With the last error seen.
    pub(crate) async fn tally(
        mut self,
        n: usize,
        until: Instant,
        stop: Stop,
    ) -> (Tally, Option<Error>) {
        let began = Instant::now();
        let mut tally = Tally::new(n);
        let mut last = None;
        while tally.pending() > 0 {
            let by = match stop {
                Stop::Decided if tally.decided() => break,
                Stop::Won(_) if tally.won() => break,
                Stop::Won(patience) | Stop::After(patience) if tally.decided() => {
                    until.min(began.checked_add(patience).unwrap_or(until))
                }
                _ => until,
            };
            match self.recv_until(by).await {
                Ok(Some((_, Ok(true)))) => tally.yes += 1,
                Ok(Some((_, Ok(false)))) => tally.no += 1,
                Ok(Some((_, Err(error)))) => {
                    tally.failed += 1;
                    last = Some(error);
                }
                Ok(None) | Err(_) => {
                    tally.failed += tally.pending();
                    break;
                }
            }
        }
        (tally, last)
    }
}

impl<T: Send + 'static> Fanned<T> {
    /// The next answer, `Ok(None)` when all came, `Err` past `until`.
    pub(crate) async fn recv_until(
        &mut self,
        until: Instant,
    ) -> std::result::Result<Option<(usize, Result<T>)>, tokio::time::error::Elapsed> {
        tokio::time::timeout_at(until, self.futures.next()).await
    }
}

impl<T: Send + 'static> Drop for Fanned<T> {
    fn drop(&mut self) {
        if self.futures.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut futures = std::mem::take(&mut self.futures);
        let tracked = Tracked::new(&self.background);
        runtime.spawn(async move {
            let _tracked = tracked;
            while futures.next().await.is_some() {}
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    /// Answers of three masters: each after `ms` milliseconds.
    fn answers(replies: [(u64, Result<bool>); 3]) -> Fanned<bool> {
        let futures = FuturesUnordered::new();
        for (i, (ms, reply)) in replies.into_iter().enumerate() {
            futures.push(Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                (i, reply)
            }) as Pending<bool>);
        }
        Fanned {
            futures,
            background: Arc::default(),
        }
    }

    fn gone() -> Error {
        Error::new(ErrorKind::Connection, "reset").transient()
    }

    #[tokio::test(start_paused = true)]
    async fn a_count_stops_as_told() {
        let far = Instant::now() + Duration::from_secs(60);
        let slow_third = || answers([(1, Ok(true)), (2, Ok(true)), (10_000, Ok(true))]);
        // Decided, or won: the third is not waited for.
        for stop in [Stop::Decided, Stop::Won(Duration::from_secs(30))] {
            let (tally, last) = slow_third().tally(3, far, stop).await;
            assert_eq!((tally.yes, tally.no, tally.failed), (2, 0, 0));
            assert!(last.is_none());
        }
        // With patience, until it runs out: the third counts as failed.
        let (tally, _) = slow_third()
            .tally(3, far, Stop::After(Duration::from_millis(100)))
            .await;
        assert_eq!((tally.yes, tally.failed), (2, 1));
        // With patience enough, every answer.
        let (tally, _) = slow_third()
            .tally(3, far, Stop::After(Duration::from_secs(30)))
            .await;
        assert_eq!(tally.yes, 3);
        // Not won: a quick count waits as a patient one does, and says
        // what failed.
        let (tally, last) = answers([(1, Ok(false)), (2, Err(gone())), (3, Ok(true))])
            .tally(3, far, Stop::Won(Duration::from_secs(1)))
            .await;
        assert_eq!((tally.yes, tally.no, tally.failed), (1, 1, 1));
        assert!(last.is_some_and(|e| e.is_transient()));
        // Never past `until`.
        let soon = Instant::now() + Duration::from_millis(5);
        let (tally, _) = answers([(1, Ok(true)), (50, Ok(true)), (50, Ok(true))])
            .tally(3, soon, Stop::After(Duration::from_secs(30)))
            .await;
        assert_eq!((tally.yes, tally.failed), (1, 2));
    }
}
