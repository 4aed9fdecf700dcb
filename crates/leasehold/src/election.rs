//! Leader election: one leader at a time among the campaigners of an
//! election, on a [`FairMutex`], with a record of who leads and a channel
//! that announces each change.
//!
//! Built on the fair mutex rather than the plain one so that leadership
//! passes in the order the candidates started to campaign: a leader that
//! resigns and campaigns again goes to the back of the line instead of
//! winning again at once, and a standby that has waited longest takes over.

use std::fmt;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::Client;
use crate::conn::notify::Subscription;
use crate::engine::ops::{self, ElectionKeys};
use crate::error::{Error, Result};
use crate::fair_mutex::FairMutex;
use crate::guard::MutexGuard;
use crate::observe::{self, Op};

/// The longest value a candidate may campaign with, in bytes.
pub const MAX_LEADER_VALUE_LEN: usize = 64 * 1024;

/// An observer reads the record again at least this often, even when no
/// announcement comes and the lease cannot have run out: a lost
/// announcement only delays it.
const RECHECK: Duration = Duration::from_secs(5);

/// Past the lock's expiry, so that the re-read finds it gone.
const EXPIRY_MARGIN: Duration = Duration::from_millis(10);

impl Client {
    /// The election called `name`: candidates [`campaign`](Election::campaign)
    /// to lead, anyone can ask who leads ([`leader`](Election::leader)) or
    /// follow the changes ([`observe`](Election::observe)).
    ///
    /// An election is a [`FairMutex`] of the same name with a record of the
    /// leader's value beside it (`<prefix>:{name}:leader`) and a channel on
    /// which each new leader and each resignation is announced
    /// (`<prefix>:{name}:leader:ch`). Do not use a lock of the same name for
    /// anything else.
    ///
    /// # Errors
    ///
    /// As [`mutex`](Client::mutex).
    pub fn election(&self, name: &str) -> Result<Election> {
        let lock = self.fair_mutex(name)?;
        Ok(Election {
            keys: ElectionKeys::new(&lock.core.keys),
            lock,
        })
    }
}

/// One election: at most one leader at a time among the processes that
/// campaign in it, each leadership with its fence. Made by
/// [`Client::election`]; cheap to clone.
///
/// Leadership is a lease on a [`FairMutex`]: a leader whose process dies
/// or loses Redis is replaced once its lease runs out, by the candidate
/// that has waited longest. Choose the lease ([`with_lease`](Election::with_lease))
/// as the longest time the service may go without a leader after a crash.
///
/// ```no_run
/// # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
/// let election = client.election("scheduler")?;
/// let leadership = election.campaign("host-a:8080").await?; // waits to win
/// tokio::select! {
///     () = leadership.lost() => eprintln!("no longer the leader: stop scheduling"),
///     () = schedule(leadership.fence()) => {}
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// # async fn schedule(_fence: u64) {}
/// ```
#[derive(Clone)]
pub struct Election {
    lock: FairMutex,
    keys: ElectionKeys,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.lock.name())
            .field("lock", &self.lock)
            .finish_non_exhaustive()
    }
}

/// Who leads an election, as [`Election::leader`] and
/// [`Election::observe`] report it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// What the leader campaigned with (an address, a host name).
    pub value: String,
    /// The fence of its leadership: larger than that of every leader before.
    pub fence: u64,
}

impl Election {
    /// The election's name.
    pub fn name(&self) -> &str {
        &self.lock.core.keys.name
    }

    /// This election with another lease (the client's by default): how long
    /// a leader that died, or lost Redis, keeps the leadership before the
    /// next candidate takes over. A live leader's lease is renewed by the
    /// watchdog.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a zero
    /// lease, one under 10 ms, or one over 24 h.
    pub fn with_lease(mut self, lease: Duration) -> Result<Self> {
        self.lock = self.lock.with_lease(lease)?;
        Ok(self)
    }

    /// This election with a cap on each leadership's term (off by default):
    /// the watchdog renews a leader's lease no further than `max` after it
    /// won, so a leader stuck in an endless loop, but alive enough to renew,
    /// cannot lead forever. At the cap the leadership is lost
    /// ([`Leadership::lost`] resolves) and, once its lease has run out, the
    /// candidate that has waited longest leads. A leader that wants to lead
    /// again campaigns again, behind the line.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a cap
    /// under 10 ms or over 24 h.
    pub fn with_max_term(mut self, max: Duration) -> Result<Self> {
        self.lock = self.lock.with_max_hold(max)?;
        Ok(self)
    }

    /// Waits as long as it takes to lead, in line behind the candidates that
    /// campaigned before, then records `value` as the leader's and announces
    /// it to the observers.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// value over [`MAX_LEADER_VALUE_LEN`] bytes;
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the lease was
    /// lost before the value could be recorded;
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when the
    /// record could not be written (the leadership is then given up);
    /// otherwise as [`FairMutex::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves the line, and a leadership
    /// won meanwhile is given up in the background, as
    /// [`FairMutex::acquire`].
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        let span = observe::election_span(Op::Campaign, &self.lock.core.keys.name, None);
        let started = std::time::Instant::now();
        let won = observe::traced(span.clone(), self.run_for(value.into())).await;
        span.record("waited", tracing::field::debug(started.elapsed()));
        if let Ok(leadership) = &won {
            span.record("fence", leadership.fence());
        }
        won
    }

    async fn run_for(&self, value: String) -> Result<Leadership> {
        if value.len() > MAX_LEADER_VALUE_LEN {
            return Err(Error::invalid(format!(
                "leader value is {} bytes long: the limit is {MAX_LEADER_VALUE_LEN} bytes; \
                 campaign with an address or a name, not a payload",
                value.len()
            )));
        }
        let guard = self.lock.acquire().await?;
        if !self
            .write_record(guard.token(), guard.fence(), &value)
            .await?
        {
            // Dropping the guard releases what is left of it.
            return Err(Error::not_held(format!(
                "leadership of election {:?} (fence {}) was lost before it could be announced",
                self.lock.core.keys.name,
                guard.fence()
            )));
        }
        let refresh = tokio::spawn(refresh_record(
            self.clone(),
            guard.token().to_owned(),
            guard.fence(),
            value.clone(),
        ));
        Ok(Leadership {
            guard: Some(guard),
            value,
            election: self.clone(),
            refresh,
        })
    }

    /// Writes the record of the leadership that `token` holds, with its TTL,
    /// and announces it; false when the token no longer holds the lock.
    async fn write_record(&self, token: &str, fence: u64, value: &str) -> Result<bool> {
        let core = &self.lock.core;
        let ttl = self.record_ttl();
        ops::write_leader(
            core.engine(),
            &core.keys,
            &self.keys,
            token,
            fence,
            value,
            ttl,
        )
        .await
    }

    /// How long the record lives unless rewritten: the fence retention, so
    /// that it outlives every lease; the leader rewrites it at a quarter.
    fn record_ttl(&self) -> Duration {
        self.lock.core.engine().config.fence_retention
    }

    /// Who leads now: the recorded value and fence while the lock is held by
    /// the leadership that recorded them; `None` when nobody leads, and in
    /// the moment between a new leader's win and its record.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
    /// [`ErrorKind::Server`](crate::ErrorKind::Server).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let span = observe::election_span(Op::Leader, &self.lock.core.keys.name, None);
        let leader = observe::traced(span.clone(), async { Ok(self.read().await?.0) }).await;
        if let Ok(Some(leader)) = &leader {
            span.record("fence", leader.fence);
        }
        leader
    }

    /// The leader, and how long until it must be looked at again: when the
    /// lock's lease can have run out, at most [`RECHECK`].
    async fn read(&self) -> Result<(Option<Leader>, Duration)> {
        let core = &self.lock.core;
        let (record, pttl) = ops::read_leader(core.engine(), &core.keys, &self.keys).await?;
        let recheck = u64::try_from(pttl)
            .map_or(RECHECK, |ms| Duration::from_millis(ms) + EXPIRY_MARGIN)
            .min(RECHECK);
        let leader = record.map(|record| Leader {
            value: record.value,
            fence: record.fence,
        });
        Ok((leader, recheck))
    }

    /// Follows who leads: a [`watch::Receiver`] that holds the current
    /// leader (`None`: nobody) and is updated on each change. Await
    /// [`changed`](watch::Receiver::changed) and read
    /// [`borrow_and_update`](watch::Receiver::borrow_and_update); wrap it in
    /// `tokio_stream::wrappers::WatchStream` for a `Stream`. Like every
    /// `watch`, it holds the latest state, so a slow reader skips states it
    /// did not look at in time (a leader that came and went between two
    /// looks).
    ///
    /// A background task listens on the election's channel, where each win
    /// and each resignation is announced, and reads the record again on
    /// each announcement, when the leader's lease can have run out (a leader
    /// that dies announces nothing), and at least every 5 s. While Redis is
    /// out of reach the last state stays, and the task tries again. The
    /// task ends when the last receiver is dropped.
    ///
    /// ```no_run
    /// # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
    /// let mut leader = client.election("scheduler")?.observe().await?;
    /// loop {
    ///     match &*leader.borrow_and_update() {
    ///         Some(now) => println!("{} leads (fence {})", now.value, now.fence),
    ///         None => println!("nobody leads"),
    ///     }
    ///     if leader.changed().await.is_err() {
    ///         break;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`leader`](Election::leader), for the first read: the receiver is
    /// returned only once it holds a state read from Redis.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is started before it returns.
    pub async fn observe(&self) -> Result<watch::Receiver<Option<Leader>>> {
        // Listening first, so that no announcement after the read is missed.
        let core = &self.lock.core;
        let subscription = core
            .engine()
            .one()?
            .notifier(&core.keys)
            .await?
            .subscribe(&self.keys.channel, None)
            .await;
        let (leader, recheck) = self.read().await?;
        let (tx, rx) = watch::channel(leader);
        tokio::spawn(follow(self.clone(), subscription, tx, recheck));
        Ok(rx)
    }

    /// Tells the observers to read the record again.
    async fn announce(&self) -> Result<()> {
        let core = &self.lock.core;
        ops::announce(core.engine(), &core.keys, &self.keys).await
    }
}

/// Keeps `tx` up to date until every receiver is gone.
async fn follow(
    election: Election,
    mut subscription: Subscription,
    tx: watch::Sender<Option<Leader>>,
    mut recheck: Duration,
) {
    let mut listening = true;
    let mut pause = Duration::from_millis(100);
    loop {
        let at = Instant::now() + recheck;
        tokio::select! {
            () = tx.closed() => return,
            message = subscription.inbox.recv(), if listening => {
                listening = message.is_some();
            }
            () = tokio::time::sleep_until(at) => {}
        }
        match election.read().await {
            Ok((leader, next)) => {
                tx.send_if_modified(|current| {
                    let changed = *current != leader;
                    *current = leader;
                    changed
                });
                recheck = next;
                pause = Duration::from_millis(100);
            }
            Err(_) => {
                recheck = pause;
                pause = (pause * 2).min(RECHECK);
            }
        }
    }
}

/// Rewrites the record of a leadership before it expires, for as long as
/// the token holds the lock.
async fn refresh_record(election: Election, token: String, fence: u64, value: String) {
    let every = election.record_ttl() / 4;
    loop {
        tokio::time::sleep(every).await;
        let mut pause = Duration::from_secs(1);
        loop {
            match election.write_record(&token, fence, &value).await {
                Ok(true) => break,
                Ok(false) => return,
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(60));
                }
            }
        }
    }
}

/// Leadership of an [`Election`], won by [`Election::campaign`].
///
/// It is a held lease: renewed while it lives, and lost when a renewal
/// finds it gone or none succeeds in time. [`lost`](Leadership::lost)
/// resolves then: stop acting as the leader. Pass [`fence`](Leadership::fence)
/// to the resources the leader writes, so that a leader that stalled past
/// its lease cannot overwrite its successor's work.
///
/// Give it up with [`resign`](Leadership::resign). Dropped, it is released
/// in the background and the resignation is announced after it.
#[must_use = "dropping the leadership resigns at once"]
#[clippy::has_significant_drop]
pub struct Leadership {
    /// `None` only once resigned or dropped.
    guard: Option<MutexGuard>,
    value: String,
    election: Election,
    refresh: JoinHandle<()>,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.election.lock.core.keys.name)
            .field("value", &self.value)
            .field("fence", &self.fence())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// The election's name.
    pub fn name(&self) -> &str {
        &self.election.lock.core.keys.name
    }

    /// The value this leader campaigned with.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The fence of this leadership: larger than that of every leader before.
    pub fn fence(&self) -> u64 {
        self.guard.as_ref().map_or(0, MutexGuard::fence)
    }

    /// Time left before the leadership's lease runs out by the local clock,
    /// if no renewal comes (as [`LeaseGuard::valid_for`](crate::LeaseGuard::valid_for));
    /// zero once lost.
    pub fn valid_for(&self) -> Duration {
        self.guard
            .as_ref()
            .map_or(Duration::ZERO, MutexGuard::valid_for)
    }

    /// The leadership was lost: act as the leader no more. Once true, stays true.
    pub fn is_lost(&self) -> bool {
        self.guard.as_ref().is_none_or(MutexGuard::is_lost)
    }

    /// Why the leadership was lost, once it is (as
    /// [`LeaseGuard::loss_reason`](crate::LeaseGuard::loss_reason)); `None`
    /// while it is held.
    pub fn loss_reason(&self) -> Option<crate::engine::loss::LossReason> {
        self.guard.as_ref().and_then(MutexGuard::loss_reason)
    }

    /// Resolves when the leadership is lost (at once if it already is).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub async fn lost(&self) {
        if let Some(guard) = &self.guard {
            guard.lost().await;
        }
    }

    /// Gives up the leadership: releases the lock, which hands it to the
    /// candidate that has waited longest, and announces the change to the
    /// observers.
    ///
    /// # Errors
    ///
    /// As [`MutexGuard::release`]: [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld)
    /// when the leadership had been lost before, and
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when the
    /// release got no answer. An announcement that fails is not an error:
    /// observers then learn of the change on their own timer.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the release finishes in the background,
    /// and the announcement may not be made.
    pub async fn resign(mut self) -> Result<()> {
        self.refresh.abort();
        let Some(guard) = self.guard.take() else {
            return Ok(());
        };
        let span = observe::election_span(
            Op::Resign,
            &self.election.lock.core.keys.name,
            Some(guard.fence()),
        );
        let election = self.election.clone();
        observe::traced(span, async move {
            let released = guard.release().await;
            let _ = election.announce().await;
            released
        })
        .await
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.refresh.abort();
        let Some(guard) = self.guard.take() else {
            return;
        };
        // Released in the background; announced once that is done.
        drop(guard);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let election = self.election.clone();
            runtime.spawn(async move {
                election.lock.core.engine().flush().await;
                let _ = election.announce().await;
            });
        }
    }
}
