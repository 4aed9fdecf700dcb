//! Watching a lock one does not wait for: an event when a lease someone
//! holds ends (released, force-released, expired), without keyspace
//! notifications.
//!
//! A watcher registers in the lock's watch key (`<lock>:watch`, a hash
//! with a field per watcher that lives its heartbeat) and marks a
//! `Mutex`'s or `FairMutex`'s value as a waiter would, so that the release
//! of a watched lock records its end there and publishes on the lock's
//! watch channel (`scripts/watched.lua`); a lock nobody watches pays
//! nothing more on its fast path. Redis cannot publish an expiry, so the
//! watcher also looks (`scripts/watch.lua`) when a lease it saw can have
//! run out, at least every [`LOOK_HELD`] while the lock is held and every
//! [`LOOK_FREE`] while it is free, and when its subscriber connection was
//! lost (messages may have been missed). Each look is one script: it
//! refreshes the registration, marks the holder, and reads the live leases
//! and the ends recorded; a lease seen before and gone now ended as the
//! record says, or expired when none does.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use crate::conn::notify::Subscription;
use crate::conn::scripts;
use crate::engine::state::Engine;
use crate::error::{Error, Result};
use crate::holder::Holder;
use crate::keys::{millis, LockKeys};

/// How long a watcher's registration lives without a look: a watcher that
/// died makes the releases of the lock publish for at most this long.
pub(crate) const WATCH_HEARTBEAT: Duration = Duration::from_secs(10);
/// How often a watcher looks while the lock is held (and no lease it saw
/// can run out sooner): it refreshes its registration, and marks a new
/// holder that took the lock between two looks.
pub(crate) const LOOK_HELD: Duration = Duration::from_secs(3);
/// How often a watcher looks while the lock is free, for the next holder.
pub(crate) const LOOK_FREE: Duration = Duration::from_secs(1);
/// A look that failed is tried again after this.
const RETRY: Duration = Duration::from_millis(250);
/// The least time between a look and the next one a message asks for: on
/// a lock released many times a second, each watcher looks at most this
/// often, not once per release (the ends a release records are read by
/// the next look, all those since the last).
const MESSAGE_GAP: Duration = Duration::from_millis(10);
/// The most ends a watch keeps for [`LockWatch::next`]: a watch whose
/// consumer does not call it keeps looking in the background, and on a
/// lock released many times a second would keep every end otherwise. The
/// oldest go first, counted by [`LockWatch::dropped`].
pub const WATCH_EVENTS_KEPT: usize = 4096;

/// How a lease that a [`LockWatch`] saw ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseEnd {
    /// Its holder released it (a release kept until its hold-at-least was
    /// over counts as released, when the hold ends).
    Released,
    /// An admin removed it (`force_release`, or a semaphore's).
    ForceReleased,
    /// Its lease ran out: its holder died, or stopped renewing it.
    Expired,
    /// It went before its lease could have run out, as the watch last saw
    /// it, and no release was recorded: the server lost it (a restart
    /// without persistence, a failover to a replica that had not got it),
    /// something deleted its key (a semaphore's `delete`, a `DEL` by
    /// hand), or its holder shortened its lease (an extend to less than
    /// it had) and it expired before the watch looked again.
    Vanished,
    /// A lease that the watch never saw held began and ended between two
    /// of its looks (a holder that took the lock just after a look and let
    /// it go before the next), by a release nobody recorded or an expiry.
    /// Its fence is the last one handed out.
    Missed,
}

/// A lease of a watched lock that ended ([`LockWatch::next`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockEvent {
    /// How it ended.
    pub ended: LeaseEnd,
    /// The fence of the lease that ended (0 when the lock's fence counter
    /// was lost while it was held, so its fence is unknown).
    pub fence: u64,
    /// Who held it, as the watch last saw it; `None` for a lease the watch
    /// never saw held (one released between two looks).
    pub holder: Option<Holder>,
    /// The lease that holds the lock now, taken after the one that ended
    /// (its [`Holder::fence`] is larger), if the look that saw the end
    /// found one: for a fair lock, the waiter it was handed to. For a
    /// semaphore or a read lock, the newest such lease.
    pub taken_by: Option<Holder>,
}

/// A lease the watch saw held.
struct Seen {
    holder: Holder,
    /// It cannot have run out before this (the look's send time plus its
    /// time left).
    earliest_end: Option<Instant>,
    /// It ends by this, unless renewed (the look's reply time plus its
    /// time left).
    latest_end: Option<Instant>,
    /// Released, and kept until its hold-at-least is over.
    kept: bool,
}

/// Watches one lock for the end of the leases others hold on it, without
/// being a waiter: see [`Mutex::watch`](crate::Mutex::watch).
///
/// Every kind of lock has one: `Mutex`, `FairMutex`, `ReentrantMutex`,
/// `RwLock` (readers and the writer alike) and `Semaphore` (each permit
/// lease), on one server, a Redis Cluster (sharded pub/sub on the lock's
/// shard) or Sentinel. A `RedlockMutex` has none: its lease lives on
/// several masters and ends when a majority's does, so a watch would have
/// to look at and listen to every master and count; it is not built. The
/// blocking faces have none either; a blocking program can drive this one
/// on a runtime of its own.
///
/// On a `Mutex` or `FairMutex` a release is recorded and published only
/// once a look has marked its holder: a lock taken and let go again
/// between two looks (within a second while it is free) is reported as
/// [`LeaseEnd::Missed`] by the next look. The hash kinds record every
/// release while watched.
///
/// Once polled, the watch keeps looking in the background (every 3 s) while its
/// consumer is busy elsewhere, so a consumer that takes its time between two
/// calls of [`next`](Self::next) is still told how each lease it saw ended;
/// what those looks find is kept for `next` until it is read.
///
/// Dropping it unregisters the watcher in the background (with no runtime
/// left, its registration runs out after its heartbeat of 10 s) and
/// unsubscribes.
pub struct LockWatch {
    name: String,
    state: Arc<tokio::sync::Mutex<Watcher>>,
    /// The background looks, from the first call on.
    keeper: Option<tokio::task::AbortHandle>,
}

/// A watch's state: what its looks saw, and its registration.
struct Watcher {
    engine: Arc<Engine>,
    keys: LockKeys,
    watch_key: String,
    channel: String,
    id: String,
    subscription: Option<Subscription>,
    /// A look may have registered this watcher.
    registered: bool,
    /// The first look is done: what it saw is the starting point.
    started: bool,
    /// By lease: its fence and its start in µs (readers that hold
    /// together share a fence).
    seen: HashMap<LeaseId, Seen>,
    /// The fence counter at the last look.
    counter: Option<u64>,
    /// The server's time (µs) of the last look: the next reads the ends
    /// recorded since.
    last_look: Option<String>,
    /// Ends the last look reported (the next may read them again).
    reported: HashSet<LeaseId>,
    events: VecDeque<LockEvent>,
    /// Ends dropped from `events`, the oldest, past [`WATCH_EVENTS_KEPT`].
    dropped: u64,
    /// A message came, or the connection was lost: look now.
    due: bool,
    /// When the last look was sent.
    last_sent: Option<Instant>,
    next_look: Instant,
    holders: Vec<Holder>,
}

impl std::fmt::Debug for LockWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockWatch")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl LockWatch {
    pub(crate) fn new(engine: Arc<Engine>, keys: LockKeys) -> Result<LockWatch> {
        Ok(LockWatch {
            name: keys.name.clone(),
            state: Arc::new(tokio::sync::Mutex::new(Watcher::new(engine, keys)?)),
            keeper: None,
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Starts the background looks, once, from within a runtime.
    fn keep(&mut self) {
        if self.keeper.is_some() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let state = Arc::downgrade(&self.state);
        let task = runtime.spawn(async move {
            loop {
                tokio::time::sleep(LOOK_HELD).await;
                let Some(state) = state.upgrade() else {
                    return;
                };
                // Busy: the consumer is in `next` or `holders`, which look
                // on their own timers.
                let Ok(mut watcher) = state.try_lock() else {
                    continue;
                };
                if watcher.registered && Instant::now() >= watcher.next_look {
                    // A failure is the consumer's to see at its next call,
                    // which looks again.
                    let _ = watcher.look().await;
                }
            }
        });
        self.keeper = Some(task.abort_handle());
    }

    /// Waits for the end of the next lease this watch sees end, and says
    /// how it ended.
    ///
    /// The watch starts at its first look: a lease held then is watched,
    /// a lease that ended before is not reported. While the lock is free,
    /// the watch looks every second for the next holder, and reports the
    /// end of its lease; a lease taken and let go between two looks is
    /// reported as [`LeaseEnd::Missed`] (or as released, where the release
    /// was recorded: the hash kinds', and a waited-for mutex's). A
    /// release is heard at once (a message on the lock's watch channel);
    /// an expiry within a few milliseconds of the lease's end, as the
    /// watch looks then (Redis cannot publish it without keyspace
    /// notifications).
    ///
    /// The watch keeps looking in the background between calls, and keeps
    /// up to [`WATCH_EVENTS_KEPT`] ends for them; past that the oldest are
    /// dropped, and counted ([`dropped`](Self::dropped)).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
    /// [`ErrorKind::Server`](crate::ErrorKind::Server) when a look failed:
    /// the watch could not see the lock then. It stays usable: the next
    /// call looks again, and reports what ended meanwhile (a lease gone
    /// without a record, before it could run out, as
    /// [`LeaseEnd::Vanished`]).
    /// [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the lock's
    /// key holds something no leasehold lock writes (a Redis list, say): no
    /// lease will end there, and every later call fails the same way until
    /// the key is deleted.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an event is returned or kept for the next call.
    pub async fn next(&mut self) -> Result<LockEvent> {
        self.keep();
        self.state.lock().await.next().await
    }

    /// The next end the watch's looks have already found, without looking
    /// again (`None` when none is waiting): after
    /// [`holders`](Self::holders) found the lock free, the ends that look
    /// read are here.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn try_next(&mut self) -> Option<LockEvent> {
        self.state.lock().await.events.pop_front()
    }

    /// How many ends this watch dropped, the oldest first, because
    /// [`WATCH_EVENTS_KEPT`] were waiting for [`next`](Self::next) already
    /// (its looks go on in the background while nobody calls it).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn dropped(&self) -> u64 {
        self.state.lock().await.dropped
    }

    /// Looks at the lock now, and returns who holds it (none when it is
    /// free). The ends this look finds are kept for
    /// [`next`](Self::next).
    ///
    /// # Errors
    ///
    /// As [`next`](Self::next).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn holders(&mut self) -> Result<Vec<Holder>> {
        self.keep();
        self.state.lock().await.holders().await
    }

    /// Ends the watch now: unregisters the watcher (and, the last one
    /// gone, unmarks the holder) before it returns, where dropping the
    /// watch does it in the background.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
    /// [`ErrorKind::Server`](crate::ErrorKind::Server): the registration
    /// then runs out by itself within its heartbeat (10 s).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the registration to run out.
    pub async fn close(mut self) -> Result<()> {
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
        }
        let mut watcher = self.state.lock().await;
        if !std::mem::take(&mut watcher.registered) {
            return Ok(());
        }
        unregister(
            &watcher.engine,
            &watcher.keys,
            &watcher.watch_key,
            &watcher.id,
        )
        .await
    }
}

impl Watcher {
    fn new(engine: Arc<Engine>, keys: LockKeys) -> Result<Watcher> {
        Ok(Watcher {
            watch_key: format!("{}:watch", keys.lock),
            channel: format!("{}watch", keys.channels),
            id: crate::random::new_token()?,
            engine,
            keys,
            subscription: None,
            registered: false,
            started: false,
            seen: HashMap::new(),
            counter: None,
            last_look: None,
            reported: HashSet::new(),
            events: VecDeque::new(),
            dropped: 0,
            due: true,
            last_sent: None,
            next_look: Instant::now(),
            holders: Vec::new(),
        })
    }

    async fn next(&mut self) -> Result<LockEvent> {
        loop {
            if let Some(event) = self.events.pop_front() {
                return Ok(event);
            }
            self.listen().await;
            if self.due || Instant::now() >= self.next_look {
                self.look().await?;
                continue;
            }
            let until = self.next_look;
            match self.subscription.as_mut() {
                Some(listening) => {
                    tokio::select! {
                        heard = listening.inbox.recv() => {
                            if heard.is_none() {
                                self.subscription = None;
                            }
                            // A release, or "look again" after a lost
                            // connection: either way, look, but not
                            // sooner than MESSAGE_GAP after the last look.
                            self.due = true;
                            if let Some(last) = self.last_sent {
                                tokio::time::sleep_until(last + MESSAGE_GAP).await;
                            }
                        }
                        () = tokio::time::sleep_until(until) => {}
                    }
                }
                None => tokio::time::sleep_until(until).await,
            }
        }
    }

    async fn holders(&mut self) -> Result<Vec<Holder>> {
        self.listen().await;
        self.look().await?;
        Ok(self.holders.clone())
    }

    /// Subscribes to the lock's watch channel, or again when the channel
    /// moved (a cluster's slot migration or failover). Without a
    /// subscription the watch still looks on its timers.
    async fn listen(&mut self) {
        let Ok(store) = self.engine.one() else {
            return;
        };
        let notifier = match store.notifier(&self.keys).await {
            Ok(notifier) => notifier,
            Err(_) => return,
        };
        if let Some(listening) = &self.subscription {
            if listening.is_of(&notifier) && !listening.is_moved() {
                return;
            }
        }
        // Subscribed before the look that follows, so no release after
        // that look goes unheard.
        self.subscription = Some(
            notifier
                .subscribe(&self.channel, Some(Instant::now() + RETRY))
                .await,
        );
        self.due = true;
    }

    async fn look(&mut self) -> Result<()> {
        // Whatever was published before this look is covered by it.
        if let Some(listening) = self.subscription.as_mut() {
            while listening.inbox.try_recv().is_ok() {}
        }
        let heartbeat = millis(WATCH_HEARTBEAT).to_string();
        let since = self.last_look.clone().unwrap_or_default();
        let sent = Instant::now();
        self.last_sent = Some(sent);
        self.registered = true;
        let reply = self
            .engine
            .one()?
            .eval(
                &self.keys,
                "watch",
                |s| &s.watch,
                &[
                    &self.keys.lock,
                    &self.keys.fence,
                    &self.keys.queue,
                    &self.watch_key,
                ],
                &[self.id.as_bytes(), heartbeat.as_bytes(), since.as_bytes()],
            )
            .await;
        let reply = match reply {
            Ok(reply) => reply,
            Err(error) => {
                self.due = false;
                self.next_look = Instant::now() + RETRY;
                return Err(error);
            }
        };
        let received = Instant::now();
        let mut look = Look::read(&reply, &self.keys.name)?;
        self.last_look = look.at.take();
        self.apply(look, sent, received);
        self.due = false;
        Ok(())
    }

    fn apply(&mut self, look: Look, sent: Instant, received: Instant) {
        let mut current: HashMap<LeaseId, Seen> = HashMap::new();
        for (id, left, holder) in look.leases {
            let kept = holder.kept;
            current.insert(
                id,
                Seen {
                    holder,
                    earliest_end: left.map(|left| sent + left),
                    latest_end: left.map(|left| received + left),
                    kept,
                },
            );
        }
        // A lease released, kept, then force-released: released.
        let mut ends: HashMap<LeaseId, char> = HashMap::new();
        for &(id, how) in &look.ends {
            let entry = ends.entry(id).or_insert(how);
            if how != 'f' {
                *entry = how;
            }
        }
        let mut events = Vec::new();
        // An end is read by the first look after it, and perhaps by the
        // next (an end in the µs of a look): those reported by the last
        // look are not reported again.
        let earlier = std::mem::take(&mut self.reported);
        if self.started {
            for (id, seen) in self.seen.drain() {
                if current.contains_key(&id) {
                    continue;
                }
                let ended = match ends.get(&id) {
                    Some('f') => LeaseEnd::ForceReleased,
                    Some(_) => LeaseEnd::Released,
                    None if seen.kept => LeaseEnd::Released,
                    None if seen
                        .earliest_end
                        .is_some_and(|end| received + tolerance(end, sent) < end) =>
                    {
                        LeaseEnd::Vanished
                    }
                    None => LeaseEnd::Expired,
                };
                self.reported.insert(id);
                events.push((id.0, ended, Some(seen.holder)));
            }
            // Ends recorded for leases this watch never saw held (taken
            // after its last look).
            for (&id, &how) in &ends {
                let fence = id.0;
                if !earlier.contains(&id)
                    && !self.reported.contains(&id)
                    && !current.contains_key(&id)
                {
                    self.reported.insert(id);
                    let ended = if how == 'f' {
                        LeaseEnd::ForceReleased
                    } else {
                        LeaseEnd::Released
                    };
                    events.push((fence, ended, None));
                }
            }
            // The last fence handed out went to a lease that is gone, with
            // no record: it began and ended between two looks.
            if let (Some(counter), Some(before)) = (look.counter, self.counter) {
                if counter > before
                    && !current.keys().any(|(fence, _)| *fence == counter)
                    && !events.iter().any(|(fence, _, _)| *fence == counter)
                    && !earlier.iter().any(|(fence, _)| *fence == counter)
                {
                    events.push((counter, LeaseEnd::Missed, None));
                }
            }
        } else {
            self.started = true;
            // A lock never taken has no counter yet: any fence is newer.
            self.counter = Some(look.counter.unwrap_or(0));
        }
        events.sort_by_key(|(fence, _, _)| *fence);
        for (fence, ended, holder) in events {
            let taken_by = current
                .iter()
                .filter(|((f, _), _)| *f > fence)
                .max_by_key(|(id, _)| **id)
                .map(|(_, seen)| seen.holder.clone());
            self.events.push_back(LockEvent {
                ended,
                fence,
                holder,
                taken_by,
            });
        }
        while self.events.len() > WATCH_EVENTS_KEPT {
            self.events.pop_front();
            self.dropped += 1;
        }
        self.counter = look.counter.or(self.counter);
        let now = Instant::now();
        let mut next = now
            + if current.is_empty() {
                LOOK_FREE
            } else {
                LOOK_HELD
            };
        for seen in current.values() {
            if let Some(end) = seen.latest_end {
                // One millisecond past, so the key has surely expired.
                next = next.min(end + Duration::from_millis(1));
            }
        }
        self.next_look = next;
        let mut holders: Vec<Holder> = current.values().map(|s| s.holder.clone()).collect();
        holders.sort_by_key(|h| h.fence);
        self.holders = holders;
        self.seen = current;
    }
}

/// How early a lease may seem to go without having vanished: the clocks
/// of the client and the server run at slightly different rates.
fn tolerance(end: Instant, sent: Instant) -> Duration {
    Duration::from_millis(5) + end.saturating_duration_since(sent) / 100
}

impl Drop for LockWatch {
    fn drop(&mut self) {
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let state = Arc::clone(&self.state);
        handle.spawn(async move {
            // After an aborted background look, if one was under way.
            let mut watcher = state.lock().await;
            if !std::mem::take(&mut watcher.registered) {
                return;
            }
            let (engine, keys) = (Arc::clone(&watcher.engine), watcher.keys.clone());
            let watch_key = std::mem::take(&mut watcher.watch_key);
            let id = std::mem::take(&mut watcher.id);
            drop(watcher);
            for pause in [50, 200, 0] {
                let done = unregister(&engine, &keys, &watch_key, &id).await.is_ok();
                if done || pause == 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        });
    }
}

/// Takes the watcher `id` out of the lock's watch key.
async fn unregister(engine: &Engine, keys: &LockKeys, watch_key: &str, id: &str) -> Result<()> {
    engine
        .one()?
        .eval(
            keys,
            "unwatch",
            |s| &s.watch,
            &[&keys.lock, &keys.fence, &keys.queue, watch_key],
            &[id.as_bytes(), b"0"],
        )
        .await
        .map(|_| ())
}

/// A lease: its fence (0 when unknown) and its start in µs on the
/// server's clock.
type LeaseId = (u64, u64);

/// What one look read.
struct Look {
    counter: Option<u64>,
    /// The server's time of the look, µs as text.
    at: Option<String>,
    /// The live leases: which, time left (none: no expiry), holder.
    leases: Vec<(LeaseId, Option<Duration>, Holder)>,
    /// The ends recorded: which lease, how ('r', 'k', 'f').
    ends: Vec<(LeaseId, char)>,
}

impl Look {
    /// The look's reply, for the lock `name`. A key that holds no lock (a
    /// Redis list, say) is a conflict: no lease will ever end there.
    fn read(reply: &Value, name: &str) -> Result<Look> {
        let unexpected = || Error::unexpected_reply("watch", reply);
        let Value::Array(items) = reply else {
            return Err(unexpected());
        };
        let kind = items
            .first()
            .and_then(scripts::as_text)
            .ok_or_else(unexpected)?;
        if !matches!(
            kind.as_str(),
            "none" | "mutex" | "reentrant" | "rwlock" | "semaphore"
        ) {
            return Err(Error::new(
                crate::error::ErrorKind::Conflict,
                format!(
                    "the key of lock {name:?} holds {}, which no leasehold lock writes: no \
                     lease will end there to watch; delete the key, or watch another name",
                    crate::engine::stored_phrase(&kind)
                ),
            ));
        }
        let counter = items
            .get(1)
            .and_then(scripts::as_int)
            .ok_or_else(unexpected)?;
        let at = items.get(2).and_then(scripts::as_text);
        let count = items
            .get(3)
            .and_then(scripts::as_int)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(unexpected)?;
        let mut leases = Vec::new();
        let mut ends = Vec::new();
        for (i, item) in items.iter().skip(4).enumerate() {
            let text = scripts::as_text(item).ok_or_else(unexpected)?;
            if i < count {
                let mut words = text.splitn(4, ' ');
                let fence = words.next().and_then(|w| w.parse::<i64>().ok());
                let acquired = words.next().and_then(|w| w.parse::<u64>().ok());
                let left = words.next().and_then(|w| w.parse::<i64>().ok());
                let record = words.next().unwrap_or_default();
                let (Some(fence), Some(acquired), Some(left)) = (fence, acquired, left) else {
                    return Err(unexpected());
                };
                let left = crate::engine::pttl(left);
                let holder = if kind == "mutex" {
                    let mut holder = Holder::from_mutex_record(record, left);
                    holder.fence = u64::try_from(fence).ok();
                    holder
                } else {
                    Holder::from_hash_record(record, true).ok_or_else(unexpected)?
                };
                let id = (u64::try_from(fence).unwrap_or(0), acquired);
                leases.push((id, left, holder));
            } else {
                let mut words = text.split(' ');
                let id = words.next().and_then(|w| {
                    let (fence, acquired) = w.split_once('/')?;
                    Some((fence.parse::<u64>().ok()?, acquired.parse::<u64>().ok()?))
                });
                let how = words.next().and_then(|w| w.chars().next());
                let (Some(id), Some(how)) = (id, how) else {
                    return Err(unexpected());
                };
                ends.push((id, how));
            }
        }
        Ok(Look {
            counter: u64::try_from(counter).ok(),
            at,
            leases,
            ends,
        })
    }
}
