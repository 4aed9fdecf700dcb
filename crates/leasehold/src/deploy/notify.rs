//! Notifications for waiters: one subscriber connection per client, one
//! channel per lock for this client alone, and each message routed to the
//! waiters of this client that listen on it.
//!
//! A notification only wakes a waiter early; a waiter never depends on one,
//! because it also wakes when the blocking lease can have run out and when
//! its heartbeat is due. A channel stays subscribed for a while after its
//! last waiter leaves, so that a client that waits for a lock again and
//! again does not pay a subscribe each time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// What a waiter hears: a message published on its channel, or (empty)
/// "notifications may have been missed, look again".
pub(crate) type Message = Arc<[u8]>;

enum Command {
    Subscribe(String, oneshot::Sender<bool>),
}

#[derive(Default)]
struct Channel {
    listeners: HashMap<u64, mpsc::UnboundedSender<Message>>,
    /// Redis confirmed the subscription on the current connection.
    confirmed: bool,
    /// Since when nobody listens; unsubscribed after [`LINGER`].
    idle_since: Option<Instant>,
}

#[derive(Default)]
struct State {
    channels: HashMap<String, Channel>,
    commands: Option<mpsc::UnboundedSender<Command>>,
}

struct Shared {
    redis: redis::Client,
    timeout: Duration,
    state: Mutex<State>,
    next_listener: AtomicU64,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn deliver(&self, channel: &str, message: &Message) {
        if let Some(entry) = self.state().channels.get(channel) {
            for listener in entry.listeners.values() {
                let _ = listener.send(Arc::clone(message));
            }
        }
    }

    /// Notifications may have been missed: every waiter looks again.
    fn wake_all(&self) {
        let look_again: Message = Arc::from(&[][..]);
        for entry in self.state().channels.values() {
            for listener in entry.listeners.values() {
                let _ = listener.send(Arc::clone(&look_again));
            }
        }
    }

    fn set_confirmed(&self, channels: &[String], confirmed: bool) {
        let mut state = self.state();
        for channel in channels {
            if let Some(entry) = state.channels.get_mut(channel) {
                entry.confirmed = confirmed;
            }
        }
    }
}

#[derive(Clone)]
pub(crate) struct Notifier {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier").finish_non_exhaustive()
    }
}

/// A waiter's interest in one channel, with its inbox.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: String,
    id: u64,
    pub(crate) inbox: mpsc::UnboundedReceiver<Message>,
}

impl Notifier {
    pub(crate) fn new(redis: redis::Client, timeout: Duration) -> Self {
        Notifier {
            shared: Arc::new(Shared {
                redis,
                timeout,
                state: Mutex::default(),
                next_listener: AtomicU64::new(0),
            }),
        }
    }

    /// Listens on `channel` if Redis has confirmed it already (it lingers
    /// after earlier waits); `None` otherwise. Sends nothing.
    pub(crate) fn listen_if_confirmed(&self, channel: &str) -> Option<Subscription> {
        let id = self.shared.next_listener.fetch_add(1, Ordering::Relaxed);
        let (tx, inbox) = mpsc::unbounded_channel();
        {
            let mut state = self.shared.state();
            if state.commands.as_ref().is_none_or(|tx| tx.is_closed()) {
                return None;
            }
            let entry = state.channels.get_mut(channel)?;
            if !entry.confirmed {
                return None;
            }
            entry.listeners.insert(id, tx);
            entry.idle_since = None;
        }
        Some(Subscription {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            id,
            inbox,
        })
    }

    /// Listens on `channel`. If Redis has not confirmed the channel yet,
    /// subscribes and waits (at most the command timeout, and not past
    /// `until`) for the confirmation, so that a message published after
    /// this returns is not missed. Without a confirmation the subscription
    /// still works as a timer-only one.
    ///
    /// Cancel safe: dropping the future drops the subscription.
    pub(crate) async fn subscribe(&self, channel: &str, until: Option<Instant>) -> Subscription {
        let id = self.shared.next_listener.fetch_add(1, Ordering::Relaxed);
        let (tx, inbox) = mpsc::unbounded_channel();
        let (confirmed, commands) = {
            let mut state = self.shared.state();
            let commands = match &state.commands {
                Some(tx) if !tx.is_closed() => tx.clone(),
                _ => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    if let Ok(handle) = tokio::runtime::Handle::try_current() {
                        handle.spawn(run(Arc::downgrade(&self.shared), rx));
                    }
                    state.commands = Some(tx.clone());
                    tx
                }
            };
            let entry = state.channels.entry(channel.to_owned()).or_default();
            entry.listeners.insert(id, tx);
            entry.idle_since = None;
            (entry.confirmed, commands)
        };
        let subscription = Subscription {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            id,
            inbox,
        };
        if confirmed {
            return subscription;
        }
        let (confirm, confirmation) = oneshot::channel();
        if commands
            .send(Command::Subscribe(channel.to_owned(), confirm))
            .is_ok()
        {
            let mut by = Instant::now() + self.shared.timeout;
            if let Some(until) = until {
                by = by.min(until);
            }
            let _ = tokio::time::timeout_at(by, confirmation).await;
        }
        subscription
    }
}

impl Subscription {
    /// Whether this subscription listens through `notifier`.
    pub(crate) fn is_of(&self, notifier: &Notifier) -> bool {
        Arc::ptr_eq(&self.shared, &notifier.shared)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        if let Some(entry) = state.channels.get_mut(&self.channel) {
            entry.listeners.remove(&self.id);
            if entry.listeners.is_empty() {
                entry.idle_since = Some(Instant::now());
            }
        }
    }
}

/// How long a channel nobody listens on stays subscribed.
const LINGER: Duration = Duration::from_secs(5);
/// First pause before reconnecting; it doubles on every failure in a row.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// A connection that served this long counts as healthy: the backoff starts
/// over. A shorter one (say, closed by a proxy after every subscribe) keeps
/// doubling it.
const HEALTHY_SESSION: Duration = Duration::from_secs(5);
/// How often an otherwise quiet subscriber connection is checked with PING.
const HEALTH_CHECK: Duration = Duration::from_secs(30);

/// The subscriber task: keeps one pub/sub connection, reconnects with
/// backoff, and resubscribes every channel still wanted. Every way out of a
/// connection passes a pause, so a server that accepts and then fails each
/// connection is not hammered.
async fn run(shared: Weak<Shared>, mut commands: mpsc::UnboundedReceiver<Command>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let Some((redis, timeout)) = shared.upgrade().map(|s| (s.redis.clone(), s.timeout)) else {
            return;
        };
        if let Ok(Ok(pubsub)) = tokio::time::timeout(timeout, redis.get_async_pubsub()).await {
            let Ended::Disconnected { served } =
                serve(&shared, pubsub, &mut commands, timeout).await
            else {
                return;
            };
            // Notifications may have been missed: every waiter looks again.
            match shared.upgrade() {
                Some(s) => {
                    let mut state = s.state();
                    for channel in state.channels.values_mut() {
                        channel.confirmed = false;
                    }
                    drop(state);
                    s.wake_all();
                }
                None => return,
            }
            if served >= HEALTHY_SESSION {
                backoff = FIRST_BACKOFF;
            }
        }
        if !pause(&mut commands, backoff).await {
            return;
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

enum Ended {
    /// The connection failed after serving notifications for `served`
    /// (zero if it failed while resubscribing); connect again.
    Disconnected { served: Duration },
    /// The client is gone.
    Closed,
}

impl Ended {
    const EARLY: Ended = Ended::Disconnected {
        served: Duration::ZERO,
    };
}

/// Resubscribes the wanted channels on a new connection, then forwards
/// notifications and serves subscribe commands until the connection fails.
async fn serve(
    shared: &Weak<Shared>,
    pubsub: redis::aio::PubSub,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    timeout: Duration,
) -> Ended {
    let (mut sink, mut stream) = pubsub.split();
    let wanted: Vec<String> = match shared.upgrade() {
        Some(s) => {
            let mut state = s.state();
            // Channels nobody listens on are not taken to the new connection.
            state.channels.retain(|_, c| !c.listeners.is_empty());
            state.channels.keys().cloned().collect()
        }
        None => return Ended::Closed,
    };
    if !wanted.is_empty() {
        match subscribe(&mut sink, &wanted, timeout).await {
            Subscribed::Yes => {}
            // One refused channel refuses the whole command: take them one
            // at a time, so the others still get notifications.
            Subscribed::Refused => {
                for channel in &wanted {
                    if subscribe(&mut sink, channel, timeout).await == Subscribed::Failed {
                        return Ended::EARLY;
                    }
                }
            }
            Subscribed::Failed => return Ended::EARLY,
        }
    }
    match shared.upgrade() {
        Some(s) => {
            s.set_confirmed(&wanted, true);
            s.wake_all();
        }
        None => return Ended::Closed,
    }
    let serving = Instant::now();
    let lost = || Ended::Disconnected {
        served: serving.elapsed(),
    };
    // A connection that died without a FIN or RST (a host gone, a NAT entry
    // dropped) shows only when a command goes unanswered: ask now and then.
    let mut health = tokio::time::interval_at(serving + HEALTH_CHECK, HEALTH_CHECK);
    health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut linger = tokio::time::interval_at(serving + LINGER, LINGER);
    linger.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            message = stream.next() => match message {
                Some(message) => match shared.upgrade() {
                    Some(s) => {
                        let payload: Message = Arc::from(message.get_payload_bytes());
                        s.deliver(message.get_channel_name(), &payload);
                    }
                    None => return Ended::Closed,
                },
                None => return lost(),
            },
            _ = health.tick() => {
                let pong = tokio::time::timeout(timeout, sink.ping::<redis::Value>()).await;
                if !matches!(pong, Ok(Ok(_))) {
                    return lost();
                }
            }
            _ = linger.tick() => {
                let idle: Vec<String> = match shared.upgrade() {
                    Some(s) => {
                        let mut state = s.state();
                        let idle: Vec<String> = state
                            .channels
                            .iter()
                            .filter(|(_, c)| c.idle_since.is_some_and(|at| at.elapsed() >= LINGER))
                            .map(|(name, _)| name.clone())
                            .collect();
                        for name in &idle {
                            state.channels.remove(name);
                        }
                        idle
                    }
                    None => return Ended::Closed,
                };
                // An unanswered unsubscribe means a dead connection; keeping
                // it would make every later subscribe wait too.
                if !idle.is_empty()
                    && !matches!(
                        tokio::time::timeout(timeout, sink.unsubscribe(&idle)).await,
                        Ok(Ok(()))
                    )
                {
                    return lost();
                }
            }
            command = commands.recv() => match command {
                None => return Ended::Closed,
                Some(Command::Subscribe(channel, confirm)) => {
                    let confirmed = shared.upgrade().is_some_and(|s| {
                        s.state().channels.get(&channel).is_some_and(|c| c.confirmed)
                    });
                    if confirmed {
                        // Taken along when this connection was made.
                        let _ = confirm.send(true);
                        continue;
                    }
                    let outcome = subscribe(&mut sink, &channel, timeout).await;
                    if outcome == Subscribed::Yes {
                        if let Some(s) = shared.upgrade() {
                            s.set_confirmed(std::slice::from_ref(&channel), true);
                        }
                    }
                    let _ = confirm.send(outcome == Subscribed::Yes);
                    if outcome == Subscribed::Failed {
                        return lost();
                    }
                }
            },
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Subscribed {
    Yes,
    /// NOPERM: an ACL user without access to the channel. The connection is
    /// fine; waiters on such a channel wake on their timers only.
    Refused,
    /// No answer in time, or the connection failed.
    Failed,
}

async fn subscribe(
    sink: &mut redis::aio::PubSubSink,
    channels: impl redis::ToRedisArgs,
    timeout: Duration,
) -> Subscribed {
    match tokio::time::timeout(timeout, sink.subscribe(channels)).await {
        Ok(Ok(())) => Subscribed::Yes,
        Ok(Err(e)) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) => {
            Subscribed::Refused
        }
        _ => Subscribed::Failed,
    }
}

/// Waits `backoff` before the next connection, answering subscriptions at
/// once meanwhile so that waiters fall back to their timers instead of
/// waiting for a confirmation. False when the client is gone.
async fn pause(commands: &mut mpsc::UnboundedReceiver<Command>, backoff: Duration) -> bool {
    let pause = tokio::time::sleep(backoff);
    tokio::pin!(pause);
    loop {
        tokio::select! {
            () = &mut pause => return true,
            command = commands.recv() => match command {
                None => return false,
                Some(Command::Subscribe(_, confirm)) => { let _ = confirm.send(false); }
            }
        }
    }
}
