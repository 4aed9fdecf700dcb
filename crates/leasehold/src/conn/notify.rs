//! Notifications for waiters: one subscriber connection per notifier, one
//! channel per lock for this client alone, and each message routed to the
//! waiters of this client that listen on it.
//!
//! A notification only wakes a waiter early; a waiter never depends on one,
//! because it also wakes when the blocking lease can have run out and when
//! its heartbeat is due. A channel stays subscribed for a while after its
//! last waiter leaves, so that a client that waits for a lock again and
//! again does not pay a subscribe each time.
//!
//! Two modes share everything but the connection:
//! - classic ([`Notifier::new`]): SUBSCRIBE on a RESP2 pub/sub connection;
//!   the scripts PUBLISH.
//! - sharded ([`Notifier::sharded`]), for Redis Cluster, where a PUBLISH
//!   reaches every node over the cluster bus: SSUBSCRIBE on a RESP3
//!   connection to one master, and the scripts SPUBLISH. A node hears only
//!   the channels of its own slots, so there is one notifier per node, and
//!   the node takes a channel back (a `sunsubscribe` of its own) when the
//!   channel's slot leaves it; its waiters are told to look again, and
//!   [`Subscription::is_moved`] tells them to subscribe again through the
//!   node that serves the slot now.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::ConnectionLike;
use redis::{PushKind, ServerErrorKind, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// What a waiter hears: a message published on its channel, or (empty)
/// "notifications may have been missed, look again".
pub(crate) type Message = Arc<[u8]>;

enum Command {
    Subscribe(String, oneshot::Sender<bool>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Classic,
    Sharded,
}

/// How often the subscriber task looks after idle channels and the
/// connection's health.
#[derive(Clone, Copy, Debug)]
struct Timing {
    /// How long a channel nobody listens on stays subscribed.
    linger: Duration,
    /// How often an otherwise quiet connection is checked with PING.
    health_check: Duration,
}

const TIMING: Timing = Timing {
    linger: LINGER,
    health_check: HEALTH_CHECK,
};

#[derive(Default)]
struct Channel {
    listeners: HashMap<u64, mpsc::UnboundedSender<Message>>,
    /// Redis confirmed the subscription on the current connection and has
    /// not taken it back: it is subscribed there.
    confirmed: bool,
    /// Sharded: the node does not serve the channel's slot (it took the
    /// channel back, or answered a subscribe with a redirect). Not
    /// subscribed again by this notifier until a waiter asks.
    moved: bool,
    /// Since when nobody listens; unsubscribed after the linger.
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
    mode: Mode,
    timing: Timing,
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
        let look_again = look_again();
        for entry in self.state().channels.values() {
            for listener in entry.listeners.values() {
                let _ = listener.send(Arc::clone(&look_again));
            }
        }
    }

    fn is_confirmed(&self, channel: &str) -> bool {
        self.state()
            .channels
            .get(channel)
            .is_some_and(|c| c.confirmed)
    }

    /// Records what Redis answered to subscribing `channels`, one answer
    /// each.
    fn record(&self, channels: &[String], answers: &[Subscribed]) {
        let mut state = self.state();
        for (channel, answer) in channels.iter().zip(answers) {
            let entry = match state.channels.get_mut(channel) {
                Some(entry) => entry,
                // Its waiters left before the answer came, and the channel
                // was dropped meanwhile: keep it, idle, so that the linger
                // unsubscribes it.
                None if *answer == Subscribed::Yes => {
                    state.channels.entry(channel.clone()).or_insert(Channel {
                        idle_since: Some(Instant::now()),
                        ..Channel::default()
                    })
                }
                None => continue,
            };
            entry.confirmed = *answer == Subscribed::Yes;
            entry.moved = *answer == Subscribed::Moved;
        }
    }

    /// The server took `channel` back by itself: its slot left the node.
    /// The channel's waiters look again, and learn from
    /// [`Subscription::is_moved`] where to listen now.
    fn taken_back(&self, channel: &str) {
        let mut state = self.state();
        let Some(entry) = state.channels.get_mut(channel) else {
            return;
        };
        // An unconfirmed channel is not subscribed on this connection: what
        // arrives is the confirmation of an unsubscribe of ours that was
        // still queued when the channel was asked for again.
        if !entry.confirmed {
            return;
        }
        entry.confirmed = false;
        entry.moved = true;
        let look_again = look_again();
        for listener in entry.listeners.values() {
            let _ = listener.send(Arc::clone(&look_again));
        }
    }
}

fn look_again() -> Message {
    Arc::from(&[][..])
}

/// The notifications of one server. Cloning it is cheap: the clones share
/// one subscriber connection.
#[derive(Clone)]
pub(crate) struct Notifier {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("mode", &self.shared.mode)
            .finish_non_exhaustive()
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
    /// A notifier that listens with SUBSCRIBE, for scripts that PUBLISH.
    pub(crate) fn new(redis: redis::Client, timeout: Duration) -> Self {
        Self::with(redis, timeout, Mode::Classic, TIMING)
    }

    /// A notifier that listens with SSUBSCRIBE on the node `redis` points
    /// at, for scripts that SPUBLISH (Redis 7 or later). It hears only the
    /// channels of the slots that node serves: a Redis Cluster needs one
    /// per master.
    pub(crate) fn sharded(redis: redis::Client, timeout: Duration) -> Self {
        Self::with(redis, timeout, Mode::Sharded, TIMING)
    }

    fn with(redis: redis::Client, timeout: Duration, mode: Mode, timing: Timing) -> Self {
        Notifier {
            shared: Arc::new(Shared {
                redis,
                timeout,
                mode,
                timing,
                state: Mutex::default(),
                next_listener: AtomicU64::new(0),
            }),
        }
    }

    /// Listens on `channel` if Redis has confirmed it already (it lingers
    /// after earlier waits); `None` otherwise. Sends nothing.
    pub(crate) fn listen_if_confirmed(&self, channel: &str) -> Option<Subscription> {
        let id;
        let inbox;
        {
            let mut state = self.shared.state();
            if state.commands.as_ref().is_none_or(|tx| tx.is_closed()) {
                return None;
            }
            let entry = state.channels.get_mut(channel)?;
            if !entry.confirmed {
                return None;
            }
            // Made only now: most first attempts find no channel.
            let tx;
            (tx, inbox) = mpsc::unbounded_channel();
            id = self.shared.next_listener.fetch_add(1, Ordering::Relaxed);
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

    /// Whether a message published on the channel now reaches this
    /// subscription: Redis confirmed the channel on the notifier's current
    /// connection and has not taken it back. False while the notifier
    /// reconnects (it subscribes the channel again by itself), for a
    /// channel Redis refused (NOPERM: timers only), and after
    /// [`is_moved`](Self::is_moved).
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "waiters of a Redis Cluster ask this")
    )]
    pub(crate) fn is_confirmed(&self) -> bool {
        self.shared.is_confirmed(&self.channel)
    }

    /// Sharded: the node this notifier listens on does not serve the
    /// channel's slot now. It took the channel back (on a slot migration,
    /// a failover, a reset), and its waiters were told to look again; or
    /// it answered the subscribe with a redirect or CLUSTERDOWN. The
    /// notifier does not subscribe the channel again by itself: drop this
    /// subscription and subscribe through the notifier of the node that
    /// serves the lock's key now. Never true in classic mode.
    pub(crate) fn is_moved(&self) -> bool {
        self.shared
            .state()
            .channels
            .get(&self.channel)
            .is_some_and(|c| c.moved)
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

/// The subscriber task: keeps one subscriber connection, reconnects with
/// backoff, and resubscribes every channel still wanted. Every way out of a
/// connection passes a pause, so a server that accepts and then fails each
/// connection is not hammered.
async fn run(shared: Weak<Shared>, mut commands: mpsc::UnboundedReceiver<Command>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let Some((redis, timeout, mode, timing)) = shared
            .upgrade()
            .map(|s| (s.redis.clone(), s.timeout, s.mode, s.timing))
        else {
            return;
        };
        if let Some(link) = Link::connect(mode, &redis, timeout).await {
            let Ended::Disconnected { served } =
                serve(&shared, link, &mut commands, timeout, timing).await
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
/// Commands go out one at a time, each bounded by `timeout`.
async fn serve(
    shared: &Weak<Shared>,
    mut link: Link,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    timeout: Duration,
    timing: Timing,
) -> Ended {
    let wanted: Vec<String> = match shared.upgrade() {
        Some(s) => {
            let mut state = s.state();
            // Channels nobody listens on are not taken to the new connection,
            // nor those whose slot another node serves.
            state.channels.retain(|_, c| !c.listeners.is_empty());
            state
                .channels
                .iter()
                .filter(|(_, c)| !c.moved)
                .map(|(name, _)| name.clone())
                .collect()
        }
        None => return Ended::Closed,
    };
    if !wanted.is_empty() {
        let Some(answers) = link.subscribe(&wanted, timeout).await else {
            return Ended::EARLY;
        };
        match shared.upgrade() {
            Some(s) => s.record(&wanted, &answers),
            None => return Ended::Closed,
        }
    }
    match shared.upgrade() {
        Some(s) => s.wake_all(),
        None => return Ended::Closed,
    }
    let serving = Instant::now();
    let lost = || Ended::Disconnected {
        served: serving.elapsed(),
    };
    // A connection that died without a FIN or RST (a host gone, a NAT entry
    // dropped) shows only when a command goes unanswered: ask now and then.
    let mut health = tokio::time::interval_at(serving + timing.health_check, timing.health_check);
    health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut linger = tokio::time::interval_at(serving + timing.linger, timing.linger);
    linger.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // What the connection heard goes first: a confirmation of an
        // unsubscribe of ours is queued before that unsubscribe returns, and
        // must be read before the same channel is subscribed again.
        tokio::select! {
            biased;
            heard = link.next() => match (heard, shared.upgrade()) {
                (None, _) => return lost(),
                (Some(_), None) => return Ended::Closed,
                (Some(Heard::Published { channel, payload }), Some(s)) => {
                    s.deliver(&channel, &payload);
                }
                (Some(Heard::TakenBack(channel)), Some(s)) => s.taken_back(&channel),
            },
            _ = health.tick() => {
                if !link.ping(timeout).await {
                    return lost();
                }
            }
            _ = linger.tick() => {
                let idle: Vec<String> = match shared.upgrade() {
                    Some(s) => {
                        let mut state = s.state();
                        let idle: Vec<(String, bool)> = state
                            .channels
                            .iter()
                            .filter(|(_, c)| {
                                c.idle_since.is_some_and(|at| at.elapsed() >= timing.linger)
                            })
                            .map(|(name, c)| (name.clone(), c.confirmed))
                            .collect();
                        for (name, _) in &idle {
                            state.channels.remove(name);
                        }
                        // Only a confirmed channel is subscribed on this
                        // connection.
                        idle.into_iter()
                            .filter_map(|(name, confirmed)| confirmed.then_some(name))
                            .collect()
                    }
                    None => return Ended::Closed,
                };
                // An unanswered unsubscribe means a dead connection; keeping
                // it would make every later subscribe wait too.
                if !idle.is_empty() && !link.unsubscribe(&idle, timeout).await {
                    return lost();
                }
            }
            command = commands.recv() => match command {
                None => return Ended::Closed,
                Some(Command::Subscribe(channel, confirm)) => {
                    if shared.upgrade().is_some_and(|s| s.is_confirmed(&channel)) {
                        // Taken along when this connection was made.
                        let _ = confirm.send(true);
                        continue;
                    }
                    let channels = std::slice::from_ref(&channel);
                    let Some(answers) = link.subscribe(channels, timeout).await else {
                        let _ = confirm.send(false);
                        return lost();
                    };
                    if let Some(s) = shared.upgrade() {
                        s.record(channels, &answers);
                    }
                    let _ = confirm.send(answers.first() == Some(&Subscribed::Yes));
                }
            },
        }
    }
}

/// Redis's answer to subscribing one channel, on a connection that works.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Subscribed {
    Yes,
    /// NOPERM (an ACL user without access to the channel), or another
    /// refusal of this channel alone. Waiters on it wake on their timers
    /// only.
    Refused,
    /// Sharded: the node does not serve the channel's slot.
    Moved,
}

/// What a subscriber connection heard.
enum Heard {
    Published {
        channel: String,
        payload: Message,
    },
    /// Sharded: the node took the channel back by itself (or confirmed an
    /// unsubscribe of ours).
    TakenBack(String),
}

/// The subscriber connection of one session.
enum Link {
    /// A RESP2 pub/sub connection.
    Classic {
        sink: redis::aio::PubSubSink,
        stream: redis::aio::PubSubStream,
    },
    /// A RESP3 connection: replies come back in order as usual, and what
    /// the server pushes (messages, confirmations, and channels it takes
    /// back) comes through `pushes`.
    ///
    /// redis-rs takes every `sunsubscribe` push for a reply to the oldest
    /// command in flight, since it cannot tell one the server sent by
    /// itself from a confirmation. One that arrives while a command of ours
    /// is in flight so becomes that command's reply, and every later reply
    /// would belong to the command before: each reply is checked against
    /// what was sent, and one that does not fit ends the connection.
    Sharded {
        conn: redis::aio::MultiplexedConnection,
        pushes: mpsc::UnboundedReceiver<redis::PushInfo>,
    },
}

impl Link {
    /// A new connection, made within `timeout`. redis-rs does not reconnect
    /// a multiplexed connection, so it never subscribes anything by itself:
    /// each session starts with no subscriptions and makes its own.
    async fn connect(mode: Mode, redis: &redis::Client, timeout: Duration) -> Option<Link> {
        match mode {
            Mode::Classic => {
                let pubsub = tokio::time::timeout(timeout, redis.get_async_pubsub())
                    .await
                    .ok()?
                    .ok()?;
                let (sink, stream) = pubsub.split();
                Some(Link::Classic { sink, stream })
            }
            Mode::Sharded => {
                let info = redis.get_connection_info().clone();
                let settings = info
                    .redis_settings()
                    .clone()
                    .set_protocol(redis::ProtocolVersion::RESP3);
                let resp3 = redis::Client::open(info.set_redis_settings(settings)).ok()?;
                let (tx, pushes) = mpsc::unbounded_channel();
                let config = redis::AsyncConnectionConfig::new()
                    .set_push_sender(tx)
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout));
                let conn = tokio::time::timeout(
                    timeout,
                    resp3.get_multiplexed_async_connection_with_config(&config),
                )
                .await
                .ok()?
                .ok()?;
                Some(Link::Sharded { conn, pushes })
            }
        }
    }

    /// What the connection heard next; `None` once it is gone. Cancel safe.
    async fn next(&mut self) -> Option<Heard> {
        match self {
            Link::Classic { stream, .. } => stream.next().await.map(|message| Heard::Published {
                channel: message.get_channel_name().to_owned(),
                payload: Arc::from(message.get_payload_bytes()),
            }),
            Link::Sharded { pushes, .. } => loop {
                let push = pushes.recv().await?;
                match (push.kind, push.data.as_slice()) {
                    (PushKind::SMessage, [channel, Value::BulkString(payload), ..]) => {
                        if let Some(channel) = text(channel) {
                            return Some(Heard::Published {
                                channel: channel.to_owned(),
                                payload: Arc::from(payload.as_slice()),
                            });
                        }
                    }
                    (PushKind::SUnsubscribe, [channel, ..]) => {
                        if let Some(channel) = text(channel) {
                            return Some(Heard::TakenBack(channel.to_owned()));
                        }
                    }
                    (PushKind::Disconnection, _) => return None,
                    // Confirmations of subscribes come back as replies too.
                    _ => {}
                }
            },
        }
    }

    /// Subscribes `channels`: an answer for each, or `None` if the
    /// connection failed (no answer in time, or replies out of step).
    async fn subscribe(
        &mut self,
        channels: &[String],
        timeout: Duration,
    ) -> Option<Vec<Subscribed>> {
        match self {
            Link::Classic { sink, .. } => {
                let all = classic_subscribe(sink, channels, timeout).await?;
                if all == Subscribed::Yes || channels.len() == 1 {
                    return Some(vec![all; channels.len()]);
                }
                // One refused channel refuses the whole command: take them
                // one at a time, so the others still get notifications.
                let mut answers = Vec::with_capacity(channels.len());
                for channel in channels {
                    answers.push(classic_subscribe(sink, channel, timeout).await?);
                }
                Some(answers)
            }
            Link::Sharded { conn, .. } => {
                // One command per channel: the channels of one node lie in
                // many slots, and a command that names two is refused.
                let mut pipe = redis::pipe();
                for channel in channels {
                    pipe.cmd("SSUBSCRIBE").arg(channel);
                }
                let replies = sharded_send(conn, &pipe, channels.len(), timeout).await?;
                channels
                    .iter()
                    .zip(&replies)
                    .map(|(channel, reply)| match reply {
                        Value::Push {
                            kind: PushKind::SSubscribe,
                            data,
                        } if names(data, channel) => Some(Subscribed::Yes),
                        Value::ServerError(e) => match e.kind() {
                            Some(
                                ServerErrorKind::Moved
                                | ServerErrorKind::Ask
                                | ServerErrorKind::ClusterDown
                                | ServerErrorKind::ReadOnly,
                            ) => Some(Subscribed::Moved),
                            // The server is not ready: try on a new
                            // connection after a pause.
                            Some(
                                ServerErrorKind::BusyLoading
                                | ServerErrorKind::TryAgain
                                | ServerErrorKind::MasterDown,
                            ) => None,
                            _ => Some(Subscribed::Refused),
                        },
                        _ => None,
                    })
                    .collect()
            }
        }
    }

    /// Unsubscribes `channels`; false if the connection failed.
    async fn unsubscribe(&mut self, channels: &[String], timeout: Duration) -> bool {
        match self {
            Link::Classic { sink, .. } => matches!(
                tokio::time::timeout(timeout, sink.unsubscribe(channels)).await,
                Ok(Ok(()))
            ),
            Link::Sharded { conn, .. } => {
                let mut pipe = redis::pipe();
                for channel in channels {
                    pipe.cmd("SUNSUBSCRIBE").arg(channel);
                }
                let Some(replies) = sharded_send(conn, &pipe, channels.len(), timeout).await else {
                    return false;
                };
                // An error is an answer too: the node no longer serves the
                // slot, so the channel is not subscribed there anyway.
                channels
                    .iter()
                    .zip(&replies)
                    .all(|(channel, reply)| match reply {
                        Value::Push {
                            kind: PushKind::SUnsubscribe,
                            data,
                        } => names(data, channel),
                        Value::ServerError(_) => true,
                        _ => false,
                    })
            }
        }
    }

    /// Whether the connection answers PING in time.
    async fn ping(&mut self, timeout: Duration) -> bool {
        match self {
            Link::Classic { sink, .. } => matches!(
                tokio::time::timeout(timeout, sink.ping::<Value>()).await,
                Ok(Ok(_))
            ),
            Link::Sharded { conn, .. } => matches!(
                tokio::time::timeout(timeout, conn.req_packed_command(&redis::cmd("PING"))).await,
                Ok(Ok(Value::SimpleString(pong))) if pong == "PONG"
            ),
        }
    }
}

/// Sends `pipe` of `count` commands; its replies, exactly `count`, or
/// `None` if the connection failed.
async fn sharded_send(
    conn: &mut redis::aio::MultiplexedConnection,
    pipe: &redis::Pipeline,
    count: usize,
    timeout: Duration,
) -> Option<Vec<Value>> {
    let replies = tokio::time::timeout(timeout, conn.req_packed_commands(pipe, 0, count))
        .await
        .ok()?
        .ok()?;
    (replies.len() == count).then_some(replies)
}

/// Whether a (un)subscribe confirmation's data names `channel`.
fn names(data: &[Value], channel: &str) -> bool {
    data.first().and_then(text) == Some(channel)
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        _ => None,
    }
}

/// One SUBSCRIBE on a classic connection; `None` if the connection failed.
async fn classic_subscribe(
    sink: &mut redis::aio::PubSubSink,
    channels: impl redis::ToRedisArgs,
    timeout: Duration,
) -> Option<Subscribed> {
    match tokio::time::timeout(timeout, sink.subscribe(channels)).await {
        Ok(Ok(())) => Some(Subscribed::Yes),
        Ok(Err(e)) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoPerm) => {
            Some(Subscribed::Refused)
        }
        _ => None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::hash_slot;
    use leasehold_testkit::{FaultProxy, RedisServer};

    const TIMEOUT: Duration = Duration::from_secs(2);
    /// Bounds every wait in these tests: running out is a failure.
    const PATIENCE: Duration = Duration::from_secs(20);
    /// Between two looks at a server's state that gives no signal.
    const POLL: Duration = Duration::from_millis(50);
    const FAST: Timing = Timing {
        linger: Duration::from_millis(300),
        health_check: Duration::from_millis(100),
    };

    fn notifier(url: &str, mode: Mode, timing: Timing) -> Notifier {
        let redis = redis::Client::open(url).expect("a valid URL");
        Notifier::with(redis, TIMEOUT, mode, timing)
    }

    async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
        redis::Client::open(url)
            .expect("a valid URL")
            .get_multiplexed_async_connection()
            .await
            .expect("a connection")
    }

    async fn query<T: redis::FromRedisValue>(
        conn: &mut redis::aio::MultiplexedConnection,
        args: &[&str],
    ) -> T {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query_async(conn)
            .await
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// Publishes the way the scripts of `mode` do; how many heard it.
    async fn publish(
        conn: &mut redis::aio::MultiplexedConnection,
        mode: Mode,
        channel: &str,
        payload: &str,
    ) -> i64 {
        let command = match mode {
            Mode::Classic => "PUBLISH",
            Mode::Sharded => "SPUBLISH",
        };
        query(conn, &[command, channel, payload]).await
    }

    async fn next(subscription: &mut Subscription) -> Message {
        tokio::time::timeout(PATIENCE, subscription.inbox.recv())
            .await
            .expect("a message in time")
            .expect("an open inbox")
    }

    /// The next published message, past any "look again".
    async fn next_published(subscription: &mut Subscription) -> String {
        loop {
            let message = next(subscription).await;
            if !message.is_empty() {
                return String::from_utf8_lossy(&message).into_owned();
            }
        }
    }

    /// Reads "look again" messages until the subscription is confirmed:
    /// the notifier records a confirmation before it wakes the listeners.
    async fn until_confirmed(subscription: &mut Subscription) {
        while !subscription.is_confirmed() {
            let message = next(subscription).await;
            assert!(
                message.is_empty(),
                "only a look-again before the confirmation"
            );
        }
    }

    fn drain(subscription: &mut Subscription) {
        while subscription.inbox.try_recv().is_ok() {}
    }

    async fn eventually<F: std::future::Future<Output = bool>>(
        what: &str,
        mut check: impl FnMut() -> F,
    ) {
        let deadline = Instant::now() + PATIENCE;
        while !check().await {
            assert!(Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(POLL).await;
        }
    }

    async fn shard_subscribers(conn: &mut redis::aio::MultiplexedConnection, channel: &str) -> i64 {
        let reply: (String, i64) = query(conn, &["PUBSUB", "SHARDNUMSUB", channel]).await;
        reply.1
    }

    /// Whether the test server has sharded pub/sub (Redis 7 on). A test
    /// that needs it says why it stops where the server has none.
    fn has_sharded(test: &str) -> bool {
        let sharded = leasehold_testkit::server_version().map_or(true, |v| v.at_least(7, 0));
        if !sharded {
            eprintln!("{test}: skipped: the server has no sharded pub/sub (Redis 7 on)");
        }
        sharded
    }

    #[tokio::test]
    async fn sharded_routes_messages_to_the_listeners_of_each_channel() {
        if !has_sharded("sharded_routes_messages_to_the_listeners_of_each_channel") {
            return;
        }
        let server = RedisServer::start();
        let mut conn = raw(&server.url()).await;
        let redis = redis::Client::open(server.url()).expect("a valid URL");
        let notifier = Notifier::sharded(redis, TIMEOUT);
        let mut a1 = notifier.subscribe("{a}ch", None).await;
        assert!(a1.is_confirmed());
        assert!(!a1.is_moved());
        let mut a2 = notifier
            .listen_if_confirmed("{a}ch")
            .expect("a confirmed channel takes listeners");
        let mut b = notifier.clone().subscribe("{b}ch", None).await;
        assert!(b.is_confirmed());

        assert_eq!(publish(&mut conn, Mode::Sharded, "{a}ch", "one").await, 1);
        assert_eq!(publish(&mut conn, Mode::Sharded, "{b}ch", "two").await, 1);
        assert_eq!(next_published(&mut a1).await, "one");
        assert_eq!(next_published(&mut a2).await, "one");
        assert_eq!(next_published(&mut b).await, "two");

        // Nothing listens with SUBSCRIBE: a PUBLISH reaches nobody.
        assert_eq!(
            publish(&mut conn, Mode::Classic, "{a}ch", "classic").await,
            0
        );
        assert_eq!(publish(&mut conn, Mode::Sharded, "{a}ch", "three").await, 1);
        assert_eq!(next_published(&mut a1).await, "three");
        assert_eq!(shard_subscribers(&mut conn, "{a}ch").await, 1);
    }

    #[tokio::test]
    async fn classic_routes_messages_and_ignores_spublish() {
        let server = RedisServer::start();
        let mut conn = raw(&server.url()).await;
        let redis = redis::Client::open(server.url()).expect("a valid URL");
        let notifier = Notifier::new(redis, TIMEOUT);
        let mut a = notifier.subscribe("{a}ch", None).await;
        assert!(a.is_confirmed());
        assert!(!a.is_moved());
        if has_sharded("classic_routes_messages_and_ignores_spublish") {
            assert_eq!(
                publish(&mut conn, Mode::Sharded, "{a}ch", "sharded").await,
                0
            );
        }
        assert_eq!(publish(&mut conn, Mode::Classic, "{a}ch", "one").await, 1);
        assert_eq!(next_published(&mut a).await, "one");
    }

    async fn resubscribes_after_client_kill(mode: Mode) {
        let server = RedisServer::start();
        let mut conn = raw(&server.url()).await;
        let notifier = notifier(&server.url(), mode, TIMING);
        let mut a = notifier.subscribe("{a}ch", None).await;
        assert!(a.is_confirmed());
        drain(&mut a);

        let killed: i64 = query(&mut conn, &["CLIENT", "KILL", "TYPE", "pubsub"]).await;
        assert_eq!(killed, 1);
        assert!(
            next(&mut a).await.is_empty(),
            "a lost connection wakes its listeners"
        );
        until_confirmed(&mut a).await;
        assert!(!a.is_moved());
        assert_eq!(publish(&mut conn, mode, "{a}ch", "after").await, 1);
        assert_eq!(next_published(&mut a).await, "after");
    }

    #[tokio::test]
    async fn sharded_resubscribes_after_client_kill() {
        if !has_sharded("sharded_resubscribes_after_client_kill") {
            return;
        }
        resubscribes_after_client_kill(Mode::Sharded).await;
    }

    #[tokio::test]
    async fn classic_resubscribes_after_client_kill() {
        resubscribes_after_client_kill(Mode::Classic).await;
    }

    #[tokio::test]
    async fn sharded_resubscribes_after_a_server_restart() {
        if !has_sharded("sharded_resubscribes_after_a_server_restart") {
            return;
        }
        let server = RedisServer::start();
        let notifier = notifier(&server.url(), Mode::Sharded, TIMING);
        let mut a = notifier.subscribe("{a}ch", None).await;
        assert!(a.is_confirmed());
        drain(&mut a);

        let server = tokio::task::spawn_blocking(move || {
            let mut server = server;
            server.restart();
            server
        })
        .await
        .expect("the restart");
        assert!(
            next(&mut a).await.is_empty(),
            "a lost connection wakes its listeners"
        );
        until_confirmed(&mut a).await;
        let mut conn = raw(&server.url()).await;
        assert_eq!(publish(&mut conn, Mode::Sharded, "{a}ch", "after").await, 1);
        assert_eq!(next_published(&mut a).await, "after");
    }

    /// A channel the ACL user may not use is timer-only; the others work,
    /// on the first connection and after a reconnect.
    async fn noperm_channel_is_timer_only(mode: Mode) {
        let server = RedisServer::start();
        let mut conn = raw(&server.url()).await;
        let _: () = query(
            &mut conn,
            &[
                "ACL",
                "SETUSER",
                "limited",
                "on",
                ">pw",
                "~*",
                "resetchannels",
                "&ok:*",
                "+@all",
            ],
        )
        .await;
        let url = format!("redis://limited:pw@127.0.0.1:{}", server.port());
        let notifier = notifier(&url, mode, TIMING);
        let mut ok = notifier.subscribe("ok:1", None).await;
        let no = notifier.subscribe("no:1", None).await;
        assert!(ok.is_confirmed());
        assert!(!no.is_confirmed());
        assert!(!no.is_moved());
        assert!(notifier.listen_if_confirmed("no:1").is_none());
        assert_eq!(publish(&mut conn, mode, "ok:1", "one").await, 1);
        assert_eq!(next_published(&mut ok).await, "one");
        drain(&mut ok);

        // Both are taken to the new connection; the refusal of one does
        // not cost the other its subscription.
        let killed: i64 = query(&mut conn, &["CLIENT", "KILL", "TYPE", "pubsub"]).await;
        assert_eq!(killed, 1);
        assert!(next(&mut ok).await.is_empty());
        until_confirmed(&mut ok).await;
        assert!(!no.is_confirmed());
        assert_eq!(publish(&mut conn, mode, "ok:1", "two").await, 1);
        assert_eq!(next_published(&mut ok).await, "two");
    }

    #[tokio::test]
    async fn sharded_noperm_channel_is_timer_only() {
        if !has_sharded("sharded_noperm_channel_is_timer_only") {
            return;
        }
        noperm_channel_is_timer_only(Mode::Sharded).await;
    }

    #[tokio::test]
    async fn classic_noperm_channel_is_timer_only() {
        noperm_channel_is_timer_only(Mode::Classic).await;
    }

    #[tokio::test]
    async fn sharded_unsubscribes_a_channel_nobody_listens_on() {
        if !has_sharded("sharded_unsubscribes_a_channel_nobody_listens_on") {
            return;
        }
        let server = RedisServer::start();
        let mut conn = raw(&server.url()).await;
        let notifier = notifier(&server.url(), Mode::Sharded, FAST);
        let a = notifier.subscribe("{a}ch", None).await;
        assert!(a.is_confirmed());
        drop(a);
        // It lingers: a new waiter listens without a subscribe.
        let again = notifier.listen_if_confirmed("{a}ch");
        assert!(again.is_some());
        drop(again);
        assert_eq!(shard_subscribers(&mut conn, "{a}ch").await, 1);

        eventually("the idle channel is unsubscribed", || {
            let mut conn = conn.clone();
            async move { shard_subscribers(&mut conn, "{a}ch").await == 0 }
        })
        .await;
        assert!(notifier.listen_if_confirmed("{a}ch").is_none());
        // And subscribed again on demand, on the same connection.
        let mut b = notifier.subscribe("{a}ch", None).await;
        assert!(b.is_confirmed());
        assert_eq!(publish(&mut conn, Mode::Sharded, "{a}ch", "back").await, 1);
        assert_eq!(next_published(&mut b).await, "back");
    }

    #[tokio::test]
    async fn sharded_health_checks_keep_a_good_connection() {
        if !has_sharded("sharded_health_checks_keep_a_good_connection") {
            return;
        }
        let server = RedisServer::start();
        let mut conn = raw(&server.url()).await;
        let notifier = notifier(&server.url(), Mode::Sharded, FAST);
        let mut a = notifier.subscribe("{a}ch", None).await;
        assert!(a.is_confirmed());
        drain(&mut a);

        let pings = |conn: redis::aio::MultiplexedConnection| async move {
            let mut conn = conn;
            let stats: String = query(&mut conn, &["INFO", "commandstats"]).await;
            stats
                .lines()
                .find_map(|line| line.strip_prefix("cmdstat_ping:calls="))
                .and_then(|rest| rest.split(',').next())
                .and_then(|calls| calls.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let before = pings(conn.clone()).await;
        eventually("three health checks", || {
            let conn = conn.clone();
            async move { pings(conn).await >= before + 3 }
        })
        .await;
        // A reconnect would have woken the listener.
        assert!(a.inbox.try_recv().is_err());
        assert!(a.is_confirmed());
        assert_eq!(publish(&mut conn, Mode::Sharded, "{a}ch", "still").await, 1);
        assert_eq!(next_published(&mut a).await, "still");
    }

    #[tokio::test]
    async fn sharded_hears_a_slot_leave_the_node() {
        if !has_sharded("sharded_hears_a_slot_leave_the_node") {
            return;
        }
        let node = RedisServer::start_cluster_node();
        let mut conn = raw(&node.url()).await;
        let _: () = query(
            &mut conn,
            &["CONFIG", "SET", "cluster-require-full-coverage", "no"],
        )
        .await;
        let notifier = notifier(&node.url(), Mode::Sharded, TIMING);
        let mut a = notifier.subscribe("{a}ch", None).await;
        let mut b = notifier.subscribe("{b}ch", None).await;
        assert!(a.is_confirmed() && b.is_confirmed());
        drain(&mut a);
        drain(&mut b);

        let slot = hash_slot("{a}ch").to_string();
        let _: () = query(&mut conn, &["CLUSTER", "DELSLOTS", &slot]).await;
        assert!(next(&mut a).await.is_empty(), "the waiter looks again");
        assert!(!a.is_confirmed());
        assert!(a.is_moved());
        assert!(notifier.listen_if_confirmed("{a}ch").is_none());
        // The other channel keeps its subscription, and nobody else woke.
        assert!(b.is_confirmed());
        assert!(b.inbox.try_recv().is_err());
        assert_eq!(publish(&mut conn, Mode::Sharded, "{b}ch", "still").await, 1);
        assert_eq!(next_published(&mut b).await, "still");

        // Nobody serves the slot: asking again finds it moved still.
        let nowhere = notifier.subscribe("{a}ch", None).await;
        assert!(!nowhere.is_confirmed());
        assert!(nowhere.is_moved());

        // The slot comes back: a waiter that subscribes again hears it.
        let _: () = query(&mut conn, &["CLUSTER", "ADDSLOTS", &slot]).await;
        let mut back = notifier.subscribe("{a}ch", None).await;
        assert!(back.is_confirmed());
        assert!(!back.is_moved());
        assert_eq!(publish(&mut conn, Mode::Sharded, "{a}ch", "back").await, 1);
        assert_eq!(next_published(&mut back).await, "back");
    }

    async fn node_id(conn: &mut redis::aio::MultiplexedConnection) -> String {
        query(conn, &["CLUSTER", "MYID"]).await
    }

    /// Whether `conn`'s node knows `id` as a connected node.
    async fn knows(conn: &mut redis::aio::MultiplexedConnection, id: &str) -> bool {
        let nodes: String = query(conn, &["CLUSTER", "NODES"]).await;
        nodes.lines().any(|line| {
            line.starts_with(id) && line.contains(" connected") && !line.contains("handshake")
        })
    }

    async fn cluster_ok(conn: &mut redis::aio::MultiplexedConnection) -> bool {
        let info: String = query(conn, &["CLUSTER", "INFO"]).await;
        info.lines()
            .any(|line| line.trim_end() == "cluster_state:ok")
    }

    #[tokio::test]
    async fn sharded_follows_a_slot_migrated_to_another_node() {
        if !has_sharded("sharded_follows_a_slot_migrated_to_another_node") {
            return;
        }
        let first = RedisServer::start_cluster_node();
        let second = RedisServer::start_cluster_node();
        let mut one = raw(&first.url()).await;
        let mut two = raw(&second.url()).await;
        let one_id = node_id(&mut one).await;
        let two_id = node_id(&mut two).await;
        // The second node gives its slots up and joins the first.
        let _: () = query(&mut two, &["CLUSTER", "FLUSHSLOTS"]).await;
        let port = second.port().to_string();
        let bus = second
            .cluster_bus_port()
            .expect("a cluster node has a bus port")
            .to_string();
        let _: () = query(&mut one, &["CLUSTER", "MEET", "127.0.0.1", &port, &bus]).await;
        eventually("the nodes meet", || {
            let (mut one, mut two) = (one.clone(), two.clone());
            let (one_id, two_id) = (one_id.clone(), two_id.clone());
            async move { knows(&mut one, &two_id).await && knows(&mut two, &one_id).await }
        })
        .await;
        eventually("the second node sees every slot served", || {
            let mut two = two.clone();
            async move { cluster_ok(&mut two).await }
        })
        .await;

        let on_first = notifier(&first.url(), Mode::Sharded, TIMING);
        let mut a = on_first.subscribe("{a}ch", None).await;
        assert!(a.is_confirmed());
        drain(&mut a);

        // A migration of an empty slot, the way redis-cli reshards.
        let slot = hash_slot("{a}ch").to_string();
        let setslot = |state: &'static str, id: &str| {
            vec![
                "CLUSTER".to_owned(),
                "SETSLOT".to_owned(),
                slot.clone(),
                state.to_owned(),
                id.to_owned(),
            ]
        };
        for (mut conn, args) in [
            (two.clone(), setslot("IMPORTING", &one_id)),
            (one.clone(), setslot("MIGRATING", &two_id)),
            (two.clone(), setslot("NODE", &two_id)),
            (one.clone(), setslot("NODE", &two_id)),
        ] {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let _: () = query(&mut conn, &args).await;
        }
        assert!(next(&mut a).await.is_empty(), "the waiter looks again");
        assert!(a.is_moved());
        assert!(!a.is_confirmed());
        // The first node redirects a new subscribe.
        let redirected = on_first.subscribe("{a}ch", None).await;
        assert!(redirected.is_moved());
        assert!(!redirected.is_confirmed());

        // The node that serves the slot now takes it.
        let on_second = notifier(&second.url(), Mode::Sharded, TIMING);
        let mut moved = on_second.subscribe("{a}ch", None).await;
        assert!(moved.is_confirmed());
        assert!(!moved.is_moved());
        assert_eq!(publish(&mut two, Mode::Sharded, "{a}ch", "there").await, 1);
        assert_eq!(next_published(&mut moved).await, "there");
    }

    /// A `sunsubscribe` the node sends by itself while a subscribe of ours
    /// is in flight becomes that subscribe's reply in redis-rs; the
    /// notifier sees a reply that does not fit and starts a new
    /// connection rather than read every later reply one step out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sharded_survives_a_sunsubscribe_taken_for_a_reply() {
        if !has_sharded("sharded_survives_a_sunsubscribe_taken_for_a_reply") {
            return;
        }
        let node = RedisServer::start_cluster_node();
        let proxy = FaultProxy::start(node.addr());
        let mut conn = raw(&node.url()).await;
        let _: () = query(
            &mut conn,
            &["CONFIG", "SET", "cluster-require-full-coverage", "no"],
        )
        .await;
        let notifier = notifier(&proxy.url(), Mode::Sharded, TIMING);
        let mut a = notifier.subscribe("{a}ch", None).await;
        assert!(a.is_confirmed());
        drain(&mut a);
        assert_eq!(proxy.connections(), 1);

        // The subscribe reaches the node half a second after it is sent,
        // after the slot has left; the node's `sunsubscribe` reaches the
        // client half a second after that, while the subscribe is in flight.
        proxy.set_latency(Duration::from_millis(500));
        let subscribing = tokio::spawn({
            let notifier = notifier.clone();
            async move { notifier.subscribe("{b}ch", None).await }
        });
        let slot = hash_slot("{a}ch").to_string();
        let _: () = query(&mut conn, &["CLUSTER", "DELSLOTS", &slot]).await;

        assert!(next(&mut a).await.is_empty(), "the waiter looks again");
        let mut b = subscribing.await.expect("the subscribe");
        until_confirmed(&mut b).await;
        assert!(a.is_moved());
        assert!(
            proxy.connections() >= 2,
            "the connection out of step was replaced"
        );
        assert_eq!(shard_subscribers(&mut conn, "{b}ch").await, 1);
        assert_eq!(
            publish(&mut conn, Mode::Sharded, "{b}ch", "in step").await,
            1
        );
        assert_eq!(next_published(&mut b).await, "in step");
    }
}
