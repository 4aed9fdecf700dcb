//! The blocking election: campaign, read and follow the leader, and lead,
//! from synchronous code.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::runtime::{outside_async, Shared};
use crate::election::Leader;
use crate::engine::loss::LossReason;
use crate::error::{Error, ErrorKind, Result};

/// Leader election for synchronous code: the blocking face of
/// [`crate::Election`], on the same fair lock, record and announcements.
///
/// ```no_run
/// # fn demo(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let election = client.election("scheduler")?;
/// let leadership = election.campaign("host-a:8080")?;
/// while !leadership.is_lost() {
///     // lead, passing leadership.fence() to what the leader writes
/// #   break;
/// }
/// leadership.resign()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    inner: crate::Election,
    shared: Arc<Shared>,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

impl Election {
    pub(crate) fn new(inner: crate::Election, shared: Arc<Shared>) -> Self {
        Election { inner, shared }
    }

    /// The election's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// This election with another lease: see [`crate::Election::with_lease`].
    ///
    /// # Errors
    ///
    /// As [`crate::Election::with_lease`].
    pub fn with_lease(mut self, lease: Duration) -> Result<Self> {
        self.inner = self.inner.with_lease(lease)?;
        Ok(self)
    }

    /// This election with a cap on each term: see
    /// [`crate::Election::with_max_term`].
    ///
    /// # Errors
    ///
    /// As [`crate::Election::with_max_term`].
    pub fn with_max_term(mut self, max: Duration) -> Result<Self> {
        self.inner = self.inner.with_max_term(max)?;
        Ok(self)
    }

    /// Blocks until this candidate leads, in line behind the candidates
    /// that campaigned before, then records `value` as the leader's and
    /// announces it. It cannot be cancelled: use
    /// [`campaign_timeout`](Self::campaign_timeout) to bound the wait.
    ///
    /// # Errors
    ///
    /// As [`crate::Election::campaign`];
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        let won = self.shared.block_on(self.inner.campaign(value))??;
        Ok(Leadership::new(won, Arc::clone(&self.shared)))
    }

    /// As [`campaign`](Self::campaign), waiting at most `wait` to lead. A
    /// campaign that runs out of time leaves the line, and a leadership won
    /// at that moment is given up, as a dropped async campaign is.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when another
    /// still leads after `wait`; otherwise as [`campaign`](Self::campaign).
    pub fn campaign_timeout(&self, wait: Duration, value: impl Into<String>) -> Result<Leadership> {
        let campaign = self.inner.campaign(value);
        let won = self
            .shared
            .block_on(async { tokio::time::timeout(wait, campaign).await })?
            .map_err(|_| {
                Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "election {:?} still had another leader after {wait:?}: campaign \
                         again, or wait longer",
                        self.name()
                    ),
                )
            })??;
        Ok(Leadership::new(won, Arc::clone(&self.shared)))
    }

    /// The current leader, if any, as [`crate::Election::leader`].
    ///
    /// # Errors
    ///
    /// As [`crate::Election::leader`];
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn leader(&self) -> Result<Option<Leader>> {
        self.shared.block_on(self.inner.leader())?
    }

    /// Follows who leads, as [`crate::Election::observe`]: the returned
    /// [`LeaderWatch`] holds the current leader and blocks for changes.
    /// The task that follows the election runs on the blocking runtime
    /// until the watch is dropped.
    ///
    /// # Errors
    ///
    /// As [`crate::Election::observe`];
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn observe(&self) -> Result<LeaderWatch> {
        let rx = self.shared.block_on(self.inner.observe())??;
        Ok(LeaderWatch {
            rx,
            shared: Arc::clone(&self.shared),
        })
    }
}

/// Who leads an election, followed: see [`Election::observe`]. Like a
/// `tokio::sync::watch`, it holds the latest state, so a slow reader skips
/// states it did not look at in time.
pub struct LeaderWatch {
    rx: watch::Receiver<Option<Leader>>,
    shared: Arc<Shared>,
}

impl fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderWatch")
            .field("leader", &*self.rx.borrow())
            .finish_non_exhaustive()
    }
}

impl LeaderWatch {
    /// The leader as last seen (`None`: nobody leads). It does not block.
    #[must_use]
    pub fn current(&mut self) -> Option<Leader> {
        self.rx.borrow_and_update().clone()
    }

    /// Blocks until the leader changes from what [`current`](Self::current)
    /// or this call last returned, and returns the new state.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime;
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) if the task
    /// that follows the election has stopped (its runtime is shutting
    /// down).
    pub fn changed(&mut self) -> Result<Option<Leader>> {
        let rx = &mut self.rx;
        self.shared.block_on(rx.changed())?.map_err(|_| stopped())?;
        Ok(self.rx.borrow_and_update().clone())
    }

    /// As [`changed`](Self::changed), waiting at most `wait`: the new state
    /// if the leader changed within it, `None` otherwise.
    ///
    /// # Errors
    ///
    /// As [`changed`](Self::changed).
    pub fn changed_timeout(&mut self, wait: Duration) -> Result<Option<Option<Leader>>> {
        let rx = &mut self.rx;
        let changed = self
            .shared
            .block_on(async { tokio::time::timeout(wait, rx.changed()).await })?;
        match changed {
            Err(_) => Ok(None),
            Ok(Err(_)) => Err(stopped()),
            Ok(Ok(())) => Ok(Some(self.rx.borrow_and_update().clone())),
        }
    }
}

fn stopped() -> Error {
    Error::new(
        ErrorKind::Connection,
        "the task that follows the election stopped: observe it again",
    )
}

/// Leadership of a blocking [`Election`]: the blocking face of
/// [`crate::Leadership`], renewed on the blocking runtime's thread while it
/// lives. Dropped without [`resign`](Self::resign), it is given up in the
/// background and the resignation announced after it.
#[must_use = "dropping the leadership resigns at once"]
#[clippy::has_significant_drop]
pub struct Leadership {
    /// `None` only once resigned or dropped.
    inner: Option<crate::Leadership>,
    shared: Arc<Shared>,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.name())
            .field("value", &self.value())
            .field("fence", &self.fence())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl Leadership {
    fn new(inner: crate::Leadership, shared: Arc<Shared>) -> Self {
        Leadership {
            inner: Some(inner),
            shared,
        }
    }

    /// The election's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.inner.as_ref().map_or("", crate::Leadership::name)
    }

    /// The value this leader campaigned with.
    #[must_use]
    pub fn value(&self) -> &str {
        self.inner.as_ref().map_or("", crate::Leadership::value)
    }

    /// The fence of this leadership: larger than that of every leader before.
    #[must_use]
    pub fn fence(&self) -> u64 {
        self.inner.as_ref().map_or(0, crate::Leadership::fence)
    }

    /// Time left before the leadership's lease runs out by the local clock,
    /// if no renewal comes; zero once lost.
    #[must_use]
    pub fn valid_for(&self) -> Duration {
        self.inner
            .as_ref()
            .map_or(Duration::ZERO, crate::Leadership::valid_for)
    }

    /// The leadership was lost: act as the leader no more. Once true, stays
    /// true. It does not block.
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.inner.as_ref().is_none_or(crate::Leadership::is_lost)
    }

    /// Why the leadership was lost, once it is; `None` while it is held.
    #[must_use]
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.inner.as_ref().and_then(crate::Leadership::loss_reason)
    }

    /// Blocks the calling thread until the leadership is lost (at once if
    /// it already is).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime.
    pub fn wait_lost(&self) -> Result<()> {
        match &self.inner {
            Some(inner) => self.shared.block_on(inner.lost()),
            None => Ok(()),
        }
    }

    /// Blocks until the leadership is lost or `wait` has passed: whether it
    /// was lost.
    ///
    /// # Errors
    ///
    /// As [`wait_lost`](Self::wait_lost).
    pub fn lost_timeout(&self, wait: Duration) -> Result<bool> {
        match &self.inner {
            Some(inner) => Ok(self
                .shared
                .block_on(async { tokio::time::timeout(wait, inner.lost()).await })?
                .is_ok()),
            None => Ok(true),
        }
    }

    /// Gives up the leadership, blocking until Redis answers, and announces
    /// the change, as [`crate::Leadership::resign`].
    ///
    /// # Errors
    ///
    /// As [`crate::Leadership::resign`];
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// called inside an async runtime: the leadership is then dropped,
    /// which resigns in the background.
    pub fn resign(mut self) -> Result<()> {
        outside_async()?;
        match self.inner.take() {
            Some(inner) => self.shared.block_on(inner.resign())?,
            None => Ok(()),
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            // The async leadership resigns in the background on the runtime
            // it finds, which must be the blocking one.
            let _context = self.shared.runtime.handle().enter();
            drop(inner);
        }
    }
}
