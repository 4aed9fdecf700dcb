//! One held lease: its token and fence, its local deadline, and the signal
//! that fires when it is lost.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::deploy::quorum::count::Clocks;
use crate::engine::loss::LossReason;
use crate::engine::Request;
use crate::keys::{LockKeys, MIN_LEASE};

#[derive(Debug)]
struct Timing {
    lease: Duration,
    /// On the monotonic clock: `sent_at + lease − drift` of the last
    /// successful acquire, renewal or extend.
    deadline: Instant,
    next_renewal: Instant,
    /// The renewal time the watchdog's queue holds for this lease; entries
    /// with another time are stale.
    scheduled: Option<Instant>,
    /// Renewals in a row that got no usable answer.
    failures: u32,
    /// The lease runs to its max hold and is renewed no more.
    capped: bool,
    /// When the latest renewal or extend whose effect Redis may have applied
    /// was sent: an older request's reply must not undo it.
    latest_sent: Option<Instant>,
    loss: Option<LossReason>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) id: u64,
    pub(crate) keys: LockKeys,
    pub(crate) token: String,
    pub(crate) fence: u64,
    /// Semaphore permits (1 for the other kinds).
    pub(crate) permits: u32,
    pub(crate) renew: bool,
    /// Replicas that must acknowledge an extend (the acquisition's).
    pub(crate) replica_ack: crate::conn::replicas::ReplicaAck,
    /// How the time it can be trusted is reckoned (see [`Lease::new`]).
    clocks: Option<Clocks>,
    /// The identity of the server that granted it (see
    /// [`ServerInfo`](crate::conn::ServerInfo)); 0 until known.
    granted_on: AtomicU64,
    /// A release before this keeps the lock until then: at least the
    /// hold-at-least after the moment the grant was known here, which is
    /// after Redis granted it. Local monotonic time only, so no clock of
    /// another machine is trusted.
    pub(crate) hold_until: Option<Instant>,
    /// Nothing renews the lease past this (`sent_at` of the acquisition,
    /// which came before Redis granted it, plus the max hold).
    cap: Option<Instant>,
    max_hold: Option<Duration>,
    timing: Mutex<Timing>,
    /// Bumped when the lease is lost and when its deadline moves earlier,
    /// so that `lost()` never sleeps past the deadline.
    lost_tx: watch::Sender<u64>,
    /// Held while a renewal or extend is in flight: one at a time, so their
    /// replies cannot be applied out of order and move the deadline past
    /// the expiry Redis really has.
    pub(crate) renewing: Arc<tokio::sync::Mutex<()>>,
    /// Released or detached: the watchdog forgets it.
    finished: AtomicBool,
    /// Guards on this lease: the levels of a reentrant hold that this
    /// client took (1 for the other kinds). The lease is finished with the
    /// last of them.
    levels: AtomicUsize,
    /// The tokens of those levels, for a reentrant hold: each level has an
    /// expiry of its own in Redis, which only the renewals and extends of
    /// the client that holds it refresh, so that a level nobody holds any
    /// more (its release failed, or an abandoned attempt was applied late)
    /// runs out by itself instead of keeping the hold forever.
    level_tokens: Mutex<Vec<String>>,
}

/// Clock drift allowed for: 1% of the lease plus 2 ms (the Redlock figure).
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// Until when a lease that Redis set to `ttl` by a request sent at
/// `sent_at` can be trusted by the local monotonic clock.
pub(crate) fn local_deadline(sent_at: Instant, ttl: Duration) -> Instant {
    sent_at + ttl.saturating_sub(drift(ttl))
}

/// As [`local_deadline`], with a quorum's `clocks` where given.
fn trusted_until(clocks: Option<Clocks>, sent_at: Instant, ttl: Duration) -> Instant {
    match clocks {
        Some(clocks) => sent_at + clocks.trusted_for(ttl),
        None => local_deadline(sent_at, ttl),
    }
}

impl Lease {
    /// A lease for `request` that Redis granted with `granted` left, by a
    /// request sent at `sent_at`; called as soon as the grant is known.
    /// `clocks` says how the time a lease can be trusted is reckoned:
    /// the quorum's drift for a lease over several masters, else the
    /// default ([`drift`]).
    pub(crate) fn new(
        request: &Request<'_>,
        token: String,
        fence: u64,
        sent_at: Instant,
        granted: Duration,
        clocks: Option<Clocks>,
    ) -> Self {
        let (lost_tx, _) = watch::channel(0);
        let cap = request.max_hold.map(|max| sent_at + max);
        Lease {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            keys: request.keys.clone(),
            token,
            fence,
            permits: request.permits,
            renew: request.renew,
            replica_ack: request.replica_ack,
            clocks,
            granted_on: AtomicU64::new(0),
            hold_until: request.hold_at_least.map(|hold| Instant::now() + hold),
            cap,
            max_hold: request.max_hold,
            timing: Mutex::new(Timing {
                lease: request.lease,
                deadline: cap.map_or(trusted_until(clocks, sent_at, granted), |cap| {
                    trusted_until(clocks, sent_at, granted).min(cap)
                }),
                next_renewal: sent_at + granted / 3,
                scheduled: None,
                failures: 0,
                capped: cap.is_some_and(|cap| sent_at + granted >= cap),
                latest_sent: None,
                loss: None,
            }),
            renewing: Arc::new(tokio::sync::Mutex::new(())),
            lost_tx,
            finished: AtomicBool::new(false),
            levels: AtomicUsize::new(1),
            level_tokens: Mutex::new(Vec::new()),
        }
    }

    fn level_tokens(&self) -> MutexGuard<'_, Vec<String>> {
        self.level_tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A reentrant level this client holds on this lease.
    pub(crate) fn add_level_token(&self, token: &str) {
        self.level_tokens().push(token.to_owned());
    }

    /// A reentrant level this client no longer holds.
    pub(crate) fn remove_level_token(&self, token: &str) {
        self.level_tokens().retain(|t| t != token);
    }

    /// The live reentrant levels this client holds on this lease, as the
    /// acquire script takes them: tokens separated by spaces.
    pub(crate) fn live_levels(&self) -> String {
        self.level_tokens().join(" ")
    }

    /// What a renewal or extend sends for this lease: its token, followed
    /// for a reentrant hold by this client's live levels, whose own
    /// expiries it refreshes too.
    pub(crate) fn renewal_token(&self) -> Cow<'_, str> {
        let levels = self.level_tokens();
        if levels.is_empty() {
            Cow::Borrowed(&self.token)
        } else {
            Cow::Owned(format!("{} {}", self.token, levels.join(" ")))
        }
    }

    /// One more guard on this lease; false once its last guard is gone.
    pub(crate) fn add_level(&self) -> bool {
        self.levels
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 0).then_some(n + 1)
            })
            .is_ok()
    }

    /// One guard fewer; true when it was the last.
    pub(crate) fn drop_level(&self) -> bool {
        self.levels.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// This lease is for a level joining a reentrant hold begun elsewhere,
    /// granted `granted` by a request sent at `sent_at`: the hold's max
    /// hold, `cap_left` at the grant, bounds it too, and the hold-at-least
    /// is the one Redis recorded with the hold (released with none of its
    /// own, the level is kept until then).
    pub(crate) fn joining(
        mut self,
        sent_at: Instant,
        granted: Duration,
        cap_left: Option<Duration>,
    ) -> Self {
        self.hold_until = None;
        if let Some(left) = cap_left {
            let cap = sent_at + left;
            let cap = self.cap.map_or(cap, |own| own.min(cap));
            self.cap = Some(cap);
            let timing = self
                .timing
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner);
            timing.deadline = timing.deadline.min(cap);
            timing.capped = sent_at + granted >= cap;
        }
        self
    }

    fn timing(&self) -> MutexGuard<'_, Timing> {
        // A panic while holding this lock cannot leave `Timing` half-written.
        self.timing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn max_hold(&self) -> Option<Duration> {
        self.max_hold
    }

    /// `length` from `now`, cut short at the max hold. `None` once the max
    /// hold leaves nothing to renew: the lease then runs out, lost as having
    /// reached its max hold.
    pub(crate) fn cut_at_cap(&self, length: Duration, now: Instant) -> Option<Duration> {
        let mut timing = self.timing();
        Self::cut(&mut timing, self.cap, length, now)
    }

    /// The length to renew the lease to from `now`: the lease, cut short
    /// at the max hold, as [`cut_at_cap`](Self::cut_at_cap).
    pub(crate) fn renewal_length(&self, now: Instant) -> Option<Duration> {
        let mut timing = self.timing();
        if timing.capped {
            return None;
        }
        let length = timing.lease;
        Self::cut(&mut timing, self.cap, length, now)
    }

    fn cut(
        timing: &mut Timing,
        cap: Option<Instant>,
        length: Duration,
        now: Instant,
    ) -> Option<Duration> {
        let Some(cap) = cap else {
            return Some(length);
        };
        let left = cap.saturating_duration_since(now);
        if left < MIN_LEASE {
            timing.capped = true;
            return None;
        }
        Some(length.min(left))
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.timing().deadline
    }

    /// The length the lease is renewed to now.
    pub(crate) fn length(&self) -> Duration {
        self.timing().lease
    }

    /// How far ahead of its renewal time a round may take this lease
    /// along: a sixth of the lease normally, so leases taken at different
    /// moments settle into shared rounds; nothing while retrying, so a
    /// failing renewal backs off instead of spinning.
    pub(crate) fn renewal_ahead(&self) -> Duration {
        let timing = self.timing();
        if timing.failures == 0 {
            timing.lease / 6
        } else {
            Duration::ZERO
        }
    }

    /// Looks at the lease again at `at` (its extend or release is in flight).
    pub(crate) fn retry_renewal_at(&self, at: Instant) {
        self.timing().next_renewal = at;
    }

    /// The reason the lease was lost, if it was; passing the deadline counts.
    pub(crate) fn loss(&self) -> Option<LossReason> {
        let mut timing = self.timing();
        if timing.loss.is_none() && Instant::now() >= timing.deadline {
            let reason = if timing.capped {
                LossReason::MaxHoldReached
            } else {
                LossReason::DeadlinePassed
            };
            timing.loss = Some(reason);
            drop(timing);
            crate::engine::metrics::lease_lost(&self.keys.name, reason);
            self.signal();
            return Some(reason);
        }
        timing.loss
    }

    /// The server `server` (its identity) granted this lease, unless
    /// another was known to before.
    pub(crate) fn granted_on(&self, server: u64) {
        let _ = self
            .granted_on
            .compare_exchange(0, server, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The server `server` (its identity) no longer has the token: the
    /// lease is lost, to a change of master if it is another server than
    /// the one that granted it.
    pub(crate) fn mark_gone(&self, server: u64) {
        let granted_on = self.granted_on.load(Ordering::Relaxed);
        self.mark_lost(if granted_on != 0 && granted_on != server {
            LossReason::MasterChanged
        } else {
            LossReason::TokenGone
        });
    }

    pub(crate) fn mark_lost(&self, reason: LossReason) {
        let mut timing = self.timing();
        if timing.loss.is_none() {
            timing.loss = Some(reason);
            drop(timing);
            crate::engine::metrics::lease_lost(&self.keys.name, reason);
            self.signal();
        }
    }

    fn signal(&self) {
        self.lost_tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Records that the watchdog's queue holds this lease at its next
    /// renewal time, and returns that time.
    pub(crate) fn schedule(&self) -> Instant {
        let mut timing = self.timing();
        timing.scheduled = Some(timing.next_renewal);
        timing.next_renewal
    }

    /// Whether a queue entry for `at` is the current one.
    pub(crate) fn is_scheduled_at(&self, at: Instant) -> bool {
        self.timing().scheduled == Some(at)
    }

    /// A renewal or extend sent at `sent_at` found the token and set `lease`.
    /// A lease already lost stays lost: it is never reported held again.
    pub(crate) fn renewed(&self, sent_at: Instant, lease: Duration) {
        let mut timing = self.timing();
        timing.latest_sent = timing.latest_sent.max(Some(sent_at));
        if timing.loss.is_some() || Instant::now() >= timing.deadline {
            return;
        }
        let mut deadline = trusted_until(self.clocks, sent_at, lease);
        if let Some(cap) = self.cap {
            // Whatever Redis was told, this holder never claims past its cap.
            deadline = deadline.min(cap);
        }
        let earlier = deadline < timing.deadline;
        if self.cap.is_some_and(|cap| sent_at + lease >= cap) {
            // Cut short at the max hold: the lease ends there.
            timing.capped = true;
        } else {
            timing.lease = lease;
        }
        timing.deadline = deadline;
        timing.next_renewal = sent_at + lease / 3;
        timing.failures = 0;
        drop(timing);
        if earlier {
            self.signal();
        }
    }

    /// A reentry sent at `sent_at` left the hold's lease at `ttl`, which is
    /// never less than Redis had before: the deadline moves later if that
    /// says so. Skipped while a renewal or extend is in flight, whose reply
    /// sets the deadline as Redis has it; when one was sent after the
    /// reentry, which Redis applied after it (an extend that shortened the
    /// lease wins); and for a lease already lost.
    pub(crate) fn refreshed(&self, sent_at: Instant, ttl: Duration) {
        let Ok(_turn) = self.renewing.try_lock() else {
            return;
        };
        let mut timing = self.timing();
        if timing.loss.is_some()
            || Instant::now() >= timing.deadline
            || timing.latest_sent.is_some_and(|latest| latest >= sent_at)
        {
            return;
        }
        let mut deadline = trusted_until(self.clocks, sent_at, ttl);
        if let Some(cap) = self.cap {
            deadline = deadline.min(cap);
        }
        timing.deadline = timing.deadline.max(deadline);
    }

    /// An extend to `lease` is about to be sent at `sent_at`. Until Redis
    /// confirms it, the lease is trusted only as long as the shorter of the
    /// old and the new length allows: an extend that shortens the lease may
    /// take effect even if its reply never arrives.
    pub(crate) fn extending(&self, sent_at: Instant, lease: Duration) {
        let mut timing = self.timing();
        timing.latest_sent = timing.latest_sent.max(Some(sent_at));
        let deadline = trusted_until(self.clocks, sent_at, lease);
        let earlier = deadline < timing.deadline;
        timing.deadline = timing.deadline.min(deadline);
        timing.next_renewal = timing.next_renewal.min(sent_at + lease / 3);
        drop(timing);
        if earlier {
            self.signal();
        }
    }

    /// A renewal got no usable answer: try again after a backoff that starts
    /// at a tenth of the lease and doubles, at most a second, so several
    /// tries fit before the deadline.
    pub(crate) fn retry_renewal_later(&self) {
        crate::engine::metrics::renewal_failed();
        let mut timing = self.timing();
        let doublings = timing.failures.min(4);
        timing.failures = timing.failures.saturating_add(1);
        let step = (timing.lease / 10 * (1u32 << doublings))
            .min(Duration::from_secs(1))
            .max(Duration::from_millis(1));
        timing.next_renewal = Instant::now() + step;
    }

    /// Marks the lease released or detached; true the first time only.
    pub(crate) fn finish(&self) -> bool {
        let first = !self.finished.swap(true, Ordering::AcqRel);
        if first {
            // A lease that ran out while nobody looked is reported now.
            self.loss();
        }
        first
    }

    /// Reports the loss when a lease that nothing renews any more reaches
    /// its deadline, even if nobody looks, unless it is finished first.
    pub(crate) async fn report_loss_at_deadline(self: Arc<Self>) {
        loop {
            tokio::time::sleep_until(self.deadline()).await;
            if self.is_finished() || self.loss().is_some() {
                return;
            }
        }
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Resolves once the lease is lost (now or later).
    pub(crate) async fn lost(&self) {
        let mut rx = self.lost_tx.subscribe();
        loop {
            rx.borrow_and_update();
            if self.loss().is_some() {
                return;
            }
            let deadline = self.deadline();
            tokio::select! {
                // The sender lives in `self`: it cannot close while `self` is borrowed.
                _ = rx.changed() => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}
