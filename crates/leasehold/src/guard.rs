//! The guard every primitive hands out for a held lease.

use std::fmt;
use std::time::Duration;

use crate::engine::held::Held;
use crate::engine::loss::LossReason;
use crate::error::Result;
use crate::observe::{self, Op};

/// A held lease on a [`Mutex`](crate::Mutex) or a [`FairMutex`](crate::FairMutex).
pub type MutexGuard = LeaseGuard;

/// A held lease on any leasehold lock: a [`Mutex`](crate::Mutex) or
/// [`FairMutex`](crate::FairMutex) (as [`MutexGuard`]), one level of a
/// [`ReentrantMutex`](crate::ReentrantMutex), a read or write share of an
/// [`RwLock`](crate::RwLock), or permits of a [`Semaphore`](crate::Semaphore).
///
/// Release it with [`release`](MutexGuard::release) to learn whether the
/// lease held to the end. Dropped without it, the lock is released in the
/// background (see [`Client::flush`](crate::Client::flush)); outside a runtime it expires after its
/// lease.
///
/// While the guard lives the watchdog renews the lease (unless turned off).
/// If a renewal finds the lock gone, or no renewal succeeds before the lease
/// runs out, the lease is lost: [`lost`](MutexGuard::lost) resolves,
/// [`is_lost`](MutexGuard::is_lost) turns true, and it never turns back.
#[must_use = "dropping the guard releases the lock at once"]
#[clippy::has_significant_drop]
pub struct LeaseGuard {
    held: Held,
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("name", &self.name())
            .field("fence", &self.fence())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl LeaseGuard {
    pub(crate) fn new(held: Held) -> Self {
        LeaseGuard { held }
    }

    /// Semaphore permits this lease holds (1 for the other locks).
    pub fn permits(&self) -> u32 {
        self.held.lease().permits
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.held.lease().keys.name
    }

    /// How many servers the lease is taken on: the masters of a
    /// [`Redlock`](crate::Redlock) (it is held while a majority of them
    /// hold it), 1 for the other locks.
    pub fn servers(&self) -> usize {
        self.held.servers()
    }

    /// The fence of this acquisition. A mutex's lease, a write lease and
    /// semaphore permits get a new fence, larger than every fence handed
    /// out before for this lock. A read lease that starts a read phase gets
    /// one too, and the readers that join it share it (see
    /// [`RwLock`](crate::RwLock)). A nested level
    /// of a [`ReentrantMutex`](crate::ReentrantMutex), or an owner's second
    /// write lease, reports the fence the owner holds already.
    pub fn fence(&self) -> u64 {
        self.held.lease().fence
    }

    /// The random token that identifies this acquisition in Redis (for a
    /// [`ReentrantMutex`](crate::ReentrantMutex), this level of the hold).
    pub fn token(&self) -> &str {
        self.held.token()
    }

    /// The lease was lost: the work done under it from here on is not
    /// protected. Once true, stays true.
    pub fn is_lost(&self) -> bool {
        self.loss_reason().is_some()
    }

    /// Why the lease was lost, once it is: Redis no longer had its token,
    /// no renewal came before its deadline, or it reached its max hold (for
    /// a [`Redlock`](crate::Redlock): a renewal reached fewer than a
    /// majority of the masters). `None` while it is held.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.held.lease().loss()
    }

    /// Resolves when the lease is lost (at once if it already is). Race it
    /// against the work with `tokio::select!`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub async fn lost(&self) {
        self.held.lost().await
    }

    /// Time left before the lease runs out by the local clock, if no renewal
    /// comes; zero once lost.
    pub fn valid_for(&self) -> Duration {
        self.held.valid_for()
    }

    /// Sets the lease to `lease` from now; the watchdog, if on, renews with
    /// this length from then on.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the lease is
    /// lost (and it is then marked lost);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a lease
    /// out of range;
    /// [`ErrorKind::ReplicasMissing`](crate::ErrorKind::ReplicasMissing)
    /// when fewer replicas acknowledged it than the lock asks for (see
    /// [`ReplicaAck`](crate::ReplicaAck)): the lease is extended all the
    /// same, on the master and in this guard; connection and server errors
    /// as elsewhere. An extend
    /// that gets no answer is sent again within the lease, for a few
    /// command timeouts: it sets the same length from a later moment, so a
    /// retry reports what the first try did (extended), and since no extend
    /// removes a token, a retry that finds it gone found a real loss.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not change the lease in Redis. The
    /// guard assumes the worst until told otherwise: from the moment the
    /// request is sent it trusts the lease only as long as the shorter of
    /// the old and the new length allows, and only a confirmed extension
    /// moves the deadline later. An extend that fails or is dropped can
    /// therefore bring the reported loss earlier, never later; the watchdog,
    /// if on, renews with the old length soon after.
    ///
    /// While an extend is in flight the watchdog leaves this lease to it, so
    /// do not keep the future alive without polling it.
    ///
    /// On a [`Redlock`](crate::Redlock) the extend goes to every master in
    /// parallel and a majority must confirm it. One that falls short fails
    /// with [`ErrorKind::Quorum`](crate::ErrorKind::Quorum) and leaves the
    /// lease as it was: nothing is released.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        let span = self.span(Op::Extend);
        observe::traced(span, self.held.extend(lease)).await
    }

    /// Releases this lease: checks the token, removes it, and wakes the
    /// waiters the lock can serve now (the first waiter of a mutex; a
    /// [`FairMutex`](crate::FairMutex) hands the lock to it; the readers at
    /// the front of an [`RwLock`](crate::RwLock)'s queue; semaphore waiters
    /// whose permits fit). A [`ReentrantMutex`](crate::ReentrantMutex) level
    /// undoes one level. Before the lock's hold-at-least has passed
    /// ([`Mutex::with_hold_at_least`](crate::Mutex::with_hold_at_least)) the
    /// lease is kept until it has instead, and this reports success.
    ///
    /// A release that cannot reach Redis is tried again for a few command
    /// timeouts (never past the lease), so its outcome is known whenever Redis
    /// answers in that time. A [`Redlock`](crate::Redlock)'s returns once a
    /// majority of the masters confirmed; the others' releases (and their
    /// retries after a transient failure) run on in the background. A try sent
    /// again after an earlier one went out and got no answer answers what that
    /// earlier try did: Redis remembers a release for a few command timeouts.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the lease was
    /// lost before the release: the work done under it may have overlapped
    /// with another holder.
    /// [`ErrorKind::OutcomeUnknown`](crate::ErrorKind::OutcomeUnknown) when a
    /// try sent again found the lease gone after an earlier try got no
    /// answer, and no record of that try's release (a release nobody waited
    /// for records none, and the lock was taken by another since): that try
    /// most likely released it (the lease held to the end), unless the lock
    /// was force-released or lost by Redis first; the lease did not run
    /// out, and nothing is held now.
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection)
    /// when no answer came: whether the lease held to the end is unknown
    /// (treat the work as unprotected); the lock expires at the end of its
    /// lease, and the release goes on in the background meanwhile.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the release finishes in the background.
    pub async fn release(self) -> Result<()> {
        let span = self.span(Op::Release);
        // The outcome is known once a majority of a Redlock's masters
        // confirmed: the other masters' answers are not waited for.
        observe::traced(span, self.held.release(false))
            .await
            .map(drop)
    }

    /// As [`release`](Self::release), and on how many servers the lease
    /// was held when it was released: for a [`Redlock`](crate::Redlock),
    /// the masters that still held its token (the release goes to all of
    /// them in parallel, and succeeds when a majority held it); 1 for the
    /// other locks.
    ///
    /// # Errors
    ///
    /// As [`release`](Self::release).
    ///
    /// # Cancel safety
    ///
    /// As [`release`](Self::release).
    pub async fn release_counted(self) -> Result<usize> {
        let span = self.span(Op::Release);
        observe::traced(span, self.held.release(true)).await
    }

    fn span(&self, op: Op) -> tracing::Span {
        let kind = self.held.holding.kind();
        observe::span(op, kind, self.name(), Some(self.fence()))
    }

    /// Gives up the guard without releasing: the lock stays held until its
    /// lease runs out, and is no longer renewed. For a lease handed to
    /// another process, which can release it with
    /// [`Mutex::release_token`](crate::Mutex::release_token) (or the same call
    /// of the lock's kind).
    pub fn detach(self) -> DetachedLease {
        let detached = DetachedLease {
            name: self.name().to_owned(),
            token: self.token().to_owned(),
            fence: self.fence(),
            valid_for: self.valid_for(),
        };
        self.held.detach();
        detached
    }
}

/// A lease given up by [`LeaseGuard::detach`]: enough to release or extend
/// it later, from anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DetachedLease {
    /// The lock's name.
    pub name: String,
    /// The token that holds the lock.
    pub token: String,
    /// The fence of the acquisition.
    pub fence: u64,
    /// The lease left when it was detached, by the local clock.
    pub valid_for: Duration,
}
