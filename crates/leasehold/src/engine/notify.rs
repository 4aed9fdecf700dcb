//! Release notifications: one subscriber connection per client, with
//! subscriptions counted per channel.
//!
//! A notification only wakes a waiter early; a waiter never depends on one,
//! because it also wakes when the blocking lease can have run out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot, watch};

enum Command {
    Subscribe(String, oneshot::Sender<bool>),
    Unsubscribe(String),
}

struct Channel {
    wake: watch::Sender<u64>,
    subscribers: usize,
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
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self, channel: &str) {
        if let Some(entry) = self.state().channels.get(channel) {
            entry.wake.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Notifications may have been missed: every waiter looks again.
    fn wake_all(&self) {
        for entry in self.state().channels.values() {
            entry.wake.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

pub(crate) struct Notifier {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier").finish_non_exhaustive()
    }
}

/// A waiter's interest in one channel; dropping it unsubscribes when it was
/// the last one of this client.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: String,
    pub(crate) wake: watch::Receiver<u64>,
}

impl Notifier {
    pub(crate) fn new(redis: redis::Client, timeout: Duration) -> Self {
        Notifier {
            shared: Arc::new(Shared {
                redis,
                timeout,
                state: Mutex::default(),
            }),
        }
    }

    /// Subscribes to `channel` and waits (at most the command timeout) for
    /// Redis to confirm, so that a release after this returns is not missed.
    /// Without a confirmation the subscription still works as a timer-only one.
    ///
    /// Cancel safe: dropping the future drops the subscription.
    pub(crate) async fn subscribe(&self, channel: &str) -> Subscription {
        let (wake, commands) = {
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
            let entry = state
                .channels
                .entry(channel.to_owned())
                .or_insert_with(|| Channel {
                    wake: watch::channel(0).0,
                    subscribers: 0,
                });
            entry.subscribers += 1;
            (entry.wake.subscribe(), commands)
        };
        let subscription = Subscription {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            wake,
        };
        let (confirm, confirmed) = oneshot::channel();
        if commands
            .send(Command::Subscribe(channel.to_owned(), confirm))
            .is_ok()
        {
            let _ = tokio::time::timeout(self.shared.timeout, confirmed).await;
        }
        subscription
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        let Some(entry) = state.channels.get_mut(&self.channel) else {
            return;
        };
        entry.subscribers = entry.subscribers.saturating_sub(1);
        if entry.subscribers == 0 {
            state.channels.remove(&self.channel);
            if let Some(commands) = &state.commands {
                let _ = commands.send(Command::Unsubscribe(std::mem::take(&mut self.channel)));
            }
        }
    }
}

/// The subscriber task: keeps one pub/sub connection, reconnects with
/// backoff, and resubscribes every channel still wanted.
async fn run(shared: Weak<Shared>, mut commands: mpsc::UnboundedReceiver<Command>) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let Some((redis, timeout)) = shared.upgrade().map(|s| (s.redis.clone(), s.timeout)) else {
            return;
        };
        let connected = tokio::time::timeout(timeout, redis.get_async_pubsub()).await;
        let Ok(Ok(pubsub)) = connected else {
            // Disconnected: answer subscriptions at once, so waiters fall back
            // to their timers instead of waiting for a confirmation.
            let pause = tokio::time::sleep(backoff);
            tokio::pin!(pause);
            loop {
                tokio::select! {
                    () = &mut pause => break,
                    command = commands.recv() => match command {
                        None => return,
                        Some(Command::Subscribe(_, confirm)) => { let _ = confirm.send(false); }
                        Some(Command::Unsubscribe(_)) => {}
                    }
                }
            }
            backoff = (backoff * 2).min(Duration::from_secs(2));
            continue;
        };
        backoff = Duration::from_millis(50);
        let (mut sink, mut stream) = pubsub.split();
        let wanted: Vec<String> = match shared.upgrade() {
            Some(s) => s.state().channels.keys().cloned().collect(),
            None => return,
        };
        if !wanted.is_empty()
            && !matches!(
                tokio::time::timeout(timeout, sink.subscribe(&wanted)).await,
                Ok(Ok(()))
            )
        {
            continue;
        }
        if let Some(s) = shared.upgrade() {
            s.wake_all();
        }
        loop {
            tokio::select! {
                message = stream.next() => match message {
                    Some(message) => match shared.upgrade() {
                        Some(s) => s.wake(message.get_channel_name()),
                        None => return,
                    },
                    None => break,
                },
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Subscribe(channel, confirm)) => {
                        let ok = matches!(
                            tokio::time::timeout(timeout, sink.subscribe(&channel)).await,
                            Ok(Ok(()))
                        );
                        let _ = confirm.send(ok);
                        if !ok {
                            break;
                        }
                    }
                    Some(Command::Unsubscribe(channel)) => {
                        let still_wanted = shared
                            .upgrade()
                            .is_some_and(|s| s.state().channels.contains_key(&channel));
                        if !still_wanted {
                            let _ = tokio::time::timeout(timeout, sink.unsubscribe(&channel)).await;
                        }
                    }
                },
            }
        }
        if let Some(s) = shared.upgrade() {
            s.wake_all();
        }
    }
}
