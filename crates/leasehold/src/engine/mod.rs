//! The lease engine under every primitive: scripts, waiting, cancellation,
//! and the watchdog.

pub(crate) mod held;
pub(crate) mod lease;
pub(crate) mod notify;
pub(crate) mod queue;
pub(crate) mod scripts;
pub(crate) mod watchdog;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::client::ClientInner;
use crate::error::{Error, ErrorKind, Result};
use crate::keys::LockKeys;

/// How long a waiter sleeps when the blocking key has no expiry to wait for
/// (set by hand, or gone between the attempt and its PTTL).
const BLIND_RECHECK: Duration = Duration::from_secs(1);

/// The outcome of one attempt to take a lock.
#[derive(Debug)]
pub(crate) enum Attempt<T> {
    Acquired(T),
    /// Held by someone else; the blocking lease runs out within `pttl` if known.
    Busy {
        pttl: Option<Duration>,
    },
}

/// A fresh 128-bit token from the operating system, as 32 hex digits.
pub(crate) fn new_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        Error::new(
            ErrorKind::System,
            format!("the operating system gave no randomness for a lock token: {e}"),
        )
    })?;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut token = String::with_capacity(32);
    for b in bytes {
        token.push(char::from(HEX[usize::from(b >> 4)]));
        token.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    Ok(token)
}

/// Reads a PTTL reply: negative values mean no expiry or no key.
pub(crate) fn pttl(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// Releases `token` in the background unless disarmed: armed around every
/// request that may take a lock, so that a dropped or failed request whose
/// command may have reached Redis never leaves the lock held by nobody.
pub(crate) struct PendingRelease<'a> {
    client: &'a Arc<ClientInner>,
    keys: &'a LockKeys,
    token: &'a str,
    armed: bool,
}

impl<'a> PendingRelease<'a> {
    pub(crate) fn arm(client: &'a Arc<ClientInner>, keys: &'a LockKeys, token: &'a str) -> Self {
        PendingRelease {
            client,
            keys,
            token,
            armed: true,
        }
    }

    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for PendingRelease<'_> {
    fn drop(&mut self) {
        if self.armed {
            release_in_background(
                Arc::clone(self.client),
                self.keys.clone(),
                self.token.to_owned(),
            );
        }
    }
}

/// Releases started from drops, counted so that [`Background::idle`] can
/// wait for them before the runtime shuts down and cancels them.
#[derive(Debug, Default)]
pub(crate) struct Background {
    pending: AtomicUsize,
    done: Notify,
}

impl Background {
    /// Resolves once no background release is running.
    pub(crate) async fn idle(&self) {
        loop {
            let done = self.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.pending.load(Ordering::Acquire) == 0 {
                return;
            }
            done.await;
        }
    }
}

/// Counts one background release for as long as its future exists, even if
/// a shutting-down runtime drops it unpolled.
struct Ticket(Arc<ClientInner>);

impl Ticket {
    fn new(client: Arc<ClientInner>) -> Self {
        client.background.pending.fetch_add(1, Ordering::AcqRel);
        Ticket(client)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.0.background.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.background.done.notify_waiters();
        }
    }
}

/// Releases a token from a drop: a few tries, then the lease's expiry is the
/// safety net. Without a runtime only the expiry is left.
pub(crate) fn release_in_background(client: Arc<ClientInner>, keys: LockKeys, token: String) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let ticket = Ticket::new(client);
    handle.spawn(async move {
        let client = &ticket.0;
        // Three tries, 50 ms and 200 ms apart.
        for pause in [50, 200] {
            if release(client, &keys, &token).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        let _ = release(client, &keys, &token).await;
    });
}

/// Compare the token, delete, publish: one script. `Ok(false)` when the
/// token did not hold the lock.
pub(crate) async fn release(client: &ClientInner, keys: &LockKeys, token: &str) -> Result<bool> {
    let reply = client
        .eval(
            "release",
            &scripts::RELEASE,
            &[&keys.lock, &keys.channel],
            &[token.as_bytes()],
        )
        .await?;
    scripts::flag("release", &reply)
}

/// Sets the lease of `token` to `lease` if it still holds the lock.
pub(crate) async fn renew_one(
    client: &ClientInner,
    keys: &LockKeys,
    token: &str,
    lease: Duration,
) -> Result<bool> {
    let ms = crate::keys::millis(lease).to_string();
    let reply = client
        .eval(
            "extend",
            &scripts::RENEW,
            &[&keys.lock],
            &[token.as_bytes(), ms.as_bytes()],
        )
        .await?;
    let outcome = match &reply {
        redis::Value::Array(items) if items.len() == 1 => scripts::renewal(&items[0]),
        _ => return Err(Error::unexpected_reply("extend", &reply)),
    };
    match outcome {
        scripts::Renewal::Renewed => Ok(true),
        scripts::Renewal::NotHeld => Ok(false),
        scripts::Renewal::Refused(why) => Err(Error::new(
            ErrorKind::Server,
            format!("redis refused to extend lock {:?}: {why}", keys.name),
        )),
    }
}

/// Waits for a lock, at most `wait` if given: queue locally, try, then
/// sleep until a release notification, the blocking lease's expiry or the
/// end of the wait, and try again.
///
/// Cancel safe as long as `attempt` is: nothing is held between attempts.
pub(crate) async fn wait_for<T, F, Fut>(
    client: &ClientInner,
    keys: &LockKeys,
    wait: Option<Duration>,
    mut attempt: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let deadline = wait.map(|wait| Instant::now() + wait);
    let timed_out = || Error::wait_timed_out(&keys.name, wait.unwrap_or_default());
    let queue = client.queues.queue(&keys.lock);
    let _turn = match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, queue.lock())
            .await
            .map_err(|_| timed_out())?,
        None => queue.lock().await,
    };

    if let Attempt::Acquired(held) = attempt().await? {
        return Ok(held);
    }
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(timed_out());
    }
    // Subscribe only once the fast path failed; the next attempt covers a
    // release that happened before the subscription was confirmed.
    let mut subscription = client.notifier.subscribe(&keys.channel, deadline).await;
    loop {
        subscription.wake.borrow_and_update();
        let pttl = match attempt().await? {
            Attempt::Acquired(held) => return Ok(held),
            Attempt::Busy { pttl } => pttl,
        };
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(timed_out());
        }
        // One millisecond past the PTTL, so the key has surely expired. A
        // key set by hand may carry any TTL: look again within a day anyway.
        let nap = pttl.map_or(BLIND_RECHECK, |p| {
            p.min(crate::keys::MAX_LEASE) + Duration::from_millis(1)
        });
        let mut until = now + nap;
        if let Some(deadline) = deadline {
            until = until.min(deadline);
        }
        tokio::select! {
            changed = subscription.wake.changed() => {
                if changed.is_err() {
                    tokio::time::sleep_until(until).await;
                }
            }
            () = tokio::time::sleep_until(until) => {}
        }
    }
}
