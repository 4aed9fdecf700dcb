//! The mutex: one holder at a time, fenced.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::engine::held::Held;
use crate::engine::{self, scripts, Attempt, PendingRelease};
use crate::error::{Error, Result};
use crate::keys::{millis, validate_lease, validate_token, validate_wait, LockKeys};

/// A lock with one holder at a time across every process that uses the same
/// Redis and key prefix. Made by [`Client::mutex`]; cheap to clone.
///
/// Each acquisition gets a fresh random token and a fence: a number larger
/// than every fence handed out before for this lock. Pass the fence to the
/// resources you write, and have them refuse smaller ones: that keeps them
/// safe even when a holder stalls past its lease.
///
/// The mutex is not reentrant: a holder that acquires it again waits for
/// itself. Use [`acquire_timeout`](Mutex::acquire_timeout) when that could happen.
///
/// ```no_run
/// # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
/// let mutex = client.mutex("cache:user:42")?;
/// if let Some(guard) = mutex.try_acquire().await? {
///     // rebuild the cache entry, then:
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Mutex {
    client: Client,
    keys: LockKeys,
    lease: Duration,
    watchdog: bool,
}

impl fmt::Debug for Mutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex")
            .field("name", &self.keys.name)
            .field("lease", &self.lease)
            .field("watchdog", &self.watchdog)
            .finish()
    }
}

impl Mutex {
    pub(crate) fn new(client: Client, keys: LockKeys) -> Self {
        let config = &client.inner.config;
        let (lease, watchdog) = (config.lease, config.watchdog);
        Mutex {
            client,
            keys,
            lease,
            watchdog,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// This mutex with another lease length (the client's by default).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a zero
    /// lease, one under 10 ms, or one over 24 h.
    pub fn with_lease(mut self, lease: Duration) -> Result<Self> {
        validate_lease(lease)?;
        self.lease = lease;
        Ok(self)
    }

    /// This mutex with the watchdog on or off (the client's setting by
    /// default). Off, each lease is fixed: it ends after its length unless
    /// extended, and the guard reports it lost then.
    pub fn with_watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// One attempt: the guard if the lock was free, `None` if someone else holds it.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when Redis is
    /// out of reach or slow; [`ErrorKind::Server`](crate::ErrorKind::Server)
    /// for an unexpected reply.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped after the request may have
    /// reached Redis, the token it sent is released in the background, so the
    /// lock is never left held by nobody.
    pub async fn try_acquire(&self) -> Result<Option<MutexGuard>> {
        match self.attempt().await? {
            Attempt::Acquired(guard) => Ok(Some(guard)),
            Attempt::Busy { .. } => Ok(None),
        }
    }

    /// Waits as long as it takes for the lock.
    ///
    /// Waiting does not poll: the waiter sleeps until the holder's release is
    /// published, or until the holder's lease can have run out. Tasks of one
    /// client that wait for the same lock queue in FIFO order, and only the
    /// first of them talks to Redis.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Mutex::try_acquire); a Redis outage during the wait
    /// ends it with [`ErrorKind::Connection`](crate::ErrorKind::Connection).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves nothing held; a
    /// request that may have taken the lock is undone in the background.
    pub async fn acquire(&self) -> Result<MutexGuard> {
        engine::wait_for(&self.client.inner, &self.keys, None, || self.attempt()).await
    }

    /// Waits at most `wait` for the lock.
    ///
    /// An attempt that is in flight when `wait` runs out is seen through, so
    /// against a slow Redis the call can end up to one command timeout late.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when the lock is
    /// still held after `wait`; [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
    /// for a wait over a day; otherwise as [`acquire`](Mutex::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Mutex::acquire).
    pub async fn acquire_timeout(&self, wait: Duration) -> Result<MutexGuard> {
        validate_wait(wait)?;
        engine::wait_for(&self.client.inner, &self.keys, Some(wait), || {
            self.attempt()
        })
        .await
    }

    async fn attempt(&self) -> Result<Attempt<MutexGuard>> {
        let inner = &self.client.inner;
        let token = engine::new_token()?;
        let lease_ms = millis(self.lease).to_string();
        // Nothing can be held before the request leaves: connect first, then
        // arm the release that undoes a request cut off on its way.
        let conn = inner.connected().await?;
        let pending = PendingRelease::arm(inner, &self.keys, &token);
        let sent_at = Instant::now();
        let reply = inner
            .eval_on(
                conn,
                "acquire",
                &scripts::ACQUIRE,
                &[&self.keys.lock, &self.keys.fence],
                &[token.as_bytes(), lease_ms.as_bytes()],
            )
            .await?;
        let [taken, value] = scripts::int_list::<2>("acquire", &reply)?;
        match (taken, u64::try_from(value)) {
            (1, Ok(fence)) => {
                pending.disarm();
                let held = Held::take(
                    inner,
                    self.keys.clone(),
                    token,
                    fence,
                    self.lease,
                    self.watchdog,
                    sent_at,
                );
                Ok(Attempt::Acquired(MutexGuard { held }))
            }
            (0, _) => {
                pending.disarm();
                Ok(Attempt::Busy {
                    pttl: engine::pttl(value),
                })
            }
            _ => Err(Error::unexpected_reply("acquire", &reply)),
        }
    }

    /// Releases the lock if `token` holds it: for a lease taken by another
    /// process, such as `leasehold acquire` in a shell script.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the token does
    /// not hold the lock (it expired, or it was released or removed).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not release the lock.
    pub async fn release_token(&self, token: &str) -> Result<()> {
        validate_token(token)?;
        if engine::release(&self.client.inner, &self.keys, token).await? {
            Ok(())
        } else {
            Err(self.token_not_held())
        }
    }

    /// Sets the remaining lease of `token` to `lease` if it still holds the lock.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the token does
    /// not hold the lock; [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
    /// for a lease out of range.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not extend the lease.
    pub async fn extend_token(&self, token: &str, lease: Duration) -> Result<()> {
        validate_token(token)?;
        validate_lease(lease)?;
        if engine::renew_one(&self.client.inner, &self.keys, token, lease).await? {
            Ok(())
        } else {
            Err(self.token_not_held())
        }
    }

    fn token_not_held(&self) -> Error {
        Error::not_held(format!(
            "lock {:?} is not held by this token: it expired, or was released or removed",
            self.keys.name
        ))
    }

    /// Removes the lock whoever holds it, and wakes its waiters: an admin
    /// action for a lock whose holder is known to be gone. Returns whether a
    /// lock was removed. The fence counter is kept, so fences never go back.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
    /// [`ErrorKind::Server`](crate::ErrorKind::Server).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not remove the lock.
    pub async fn force_release(&self) -> Result<bool> {
        let reply = self
            .client
            .inner
            .eval(
                "force-release",
                &scripts::FORCE_RELEASE,
                &[&self.keys.lock, &self.keys.channel],
                &[],
            )
            .await?;
        scripts::flag("force-release", &reply)
    }

    /// The lock's state as Redis sees it now.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
    /// [`ErrorKind::Server`](crate::ErrorKind::Server).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn inspect(&self) -> Result<LockInfo> {
        let keys = &self.keys;
        let reply = self
            .client
            .inner
            .eval(
                "inspect",
                &scripts::INSPECT,
                &[&keys.lock, &keys.fence, &keys.channel],
                &[],
            )
            .await?;
        let [pttl, fence, waiting_clients] = scripts::int_list::<3>("inspect", &reply)?;
        Ok(LockInfo {
            name: keys.name.clone(),
            held: pttl != -2,
            remaining: engine::pttl(pttl),
            last_fence: u64::try_from(fence).ok(),
            waiting_clients: u64::try_from(waiting_clients).unwrap_or(0),
        })
    }
}

/// What [`Mutex::inspect`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// Someone holds the lock.
    pub held: bool,
    /// The time left on the holder's lease; `None` when free (or when the key
    /// was set by hand without an expiry).
    pub remaining: Option<Duration>,
    /// The last fence handed out, if any ever was.
    pub last_fence: Option<u64>,
    /// Clients subscribed to the lock's release notifications: clients with
    /// a task waiting for it.
    pub waiting_clients: u64,
}

/// A held lease on a [`Mutex`].
///
/// Release it with [`release`](MutexGuard::release) to learn whether the
/// lease held to the end. Dropped without it, the lock is released in the
/// background (see [`Client::flush`]); outside a runtime it expires after its
/// lease.
///
/// While the guard lives the watchdog renews the lease (unless turned off).
/// If a renewal finds the lock gone, or no renewal succeeds before the lease
/// runs out, the lease is lost: [`lost`](MutexGuard::lost) resolves,
/// [`is_lost`](MutexGuard::is_lost) turns true, and it never turns back.
#[must_use = "dropping the guard releases the lock at once"]
#[clippy::has_significant_drop]
pub struct MutexGuard {
    held: Held,
}

impl fmt::Debug for MutexGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MutexGuard")
            .field("name", &self.name())
            .field("fence", &self.fence())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl MutexGuard {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.held.lease().keys.name
    }

    /// The fence of this acquisition: larger than every fence handed out
    /// before for this lock.
    pub fn fence(&self) -> u64 {
        self.held.lease().fence
    }

    /// The random token that identifies this acquisition in Redis.
    pub fn token(&self) -> &str {
        &self.held.lease().token
    }

    /// The lease was lost: the work done under it from here on is not
    /// protected. Once true, stays true.
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// Resolves when the lease is lost (at once if it already is). Race it
    /// against the work with `tokio::select!`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub async fn lost(&self) {
        self.held.lost().await;
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
    /// out of range; connection and server errors as elsewhere.
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
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        self.held.extend(lease).await
    }

    /// Releases the lock: checks the token, deletes, wakes the waiters.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) when the lease was
    /// lost before the release: the work done under it may have overlapped
    /// with another holder. Connection errors leave the lock to expire at the
    /// end of its lease (renewal has stopped).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the release finishes in the background.
    pub async fn release(self) -> Result<()> {
        self.held.release().await
    }

    /// Gives up the guard without releasing: the lock stays held until its
    /// lease runs out, and is no longer renewed. For a lease handed to
    /// another process, which can release it with [`Mutex::release_token`].
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

/// A lease given up by [`MutexGuard::detach`]: enough to release or extend
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
