//! The lease engine under every primitive: taking, holding, renewing and
//! releasing leases, waiting in the queue, and the admin operations, over
//! one [`Deployment`]. It knows nothing of the public faces built on it.

pub(crate) mod admin;
pub(crate) mod held;
pub(crate) mod lease;
pub(crate) mod loss;
pub(crate) mod metrics;
pub(crate) mod ops;
pub(crate) mod queue;
pub(crate) mod quorum;
pub(crate) mod redlock;
pub(crate) mod release;
pub(crate) mod state;
pub(crate) mod wait;
pub(crate) mod watch;
pub(crate) mod watchdog;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::conn::notify::Notifier;
use crate::conn::replicas::{Acked, ReplicaAck};
use crate::conn::route::Route;
use crate::conn::scripts::Scripts;
use crate::conn::ServerInfo;
use crate::deploy::Deployment;
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{hash_slot, millis, LockKeys};
use crate::random::new_token;

/// The masters a client has seen serve its locks' slots, for the grace on
/// a change of master.
#[derive(Debug, Default)]
struct Masters {
    /// The master each slot was last served by.
    slots: HashMap<u16, SlotMaster>,
    /// Every master seen serve any slot, by identity.
    known: std::collections::HashSet<u64>,
    /// When each promoted master (identity, replication id) was first seen
    /// taking a slot over: the other slots it took over at that failover
    /// count their grace from then too, not from the client's first
    /// request to each of them.
    promotions: HashMap<(u64, u64), Instant>,
}

#[derive(Debug)]
struct SlotMaster {
    identity: u64,
    replid: u64,
    /// When a promoted master took the slot over, as seen here.
    changed: Option<Instant>,
}

/// What a script that may grant a lock got. Returned once per request,
/// never stored: boxing the route would cost an allocation per request.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Answer {
    /// The script's reply, how many replicas acknowledged it when the
    /// route asked (see [`ReplicaAck`]), and the route of the server that
    /// gave it.
    Reply(redis::Value, Option<Acked>, Route),
    /// Not sent: the server that serves the key now is in its grace, which
    /// ends in this long.
    InGrace(Duration),
}

/// Names one script of a set (see [`Scripts`]).
pub(crate) type Pick = fn(&Scripts) -> &redis::Script;

/// How many MOVED, ASK or READONLY one request follows before it gives
/// up: a slot (or a master) that moves more often than this while one
/// request is sent is a deployment in trouble.
const MAX_REDIRECTS: u32 = 5;

/// How an engine behaves, fixed when it is made.
#[derive(Debug, Clone)]
pub(crate) struct EngineConfig {
    /// No lock is granted by a server that has been up for less than this.
    pub(crate) restart_grace: Option<Duration>,
    /// How long a fence counter outlives the last acquisition.
    pub(crate) fence_retention: Duration,
    /// "<pid> <host> <client name>", recorded with every lease and waiter.
    pub(crate) identity: String,
    /// A wait by a client that has never reached Redis ends after this.
    pub(crate) connect_timeout: Duration,
    /// This engine is one master of a Redlock: a release that does not
    /// find its token marks the fence counter with it, so that the
    /// token's round one, if it arrives after all, takes nothing (see
    /// `release.lua` and `redlock_acquire.lua`).
    pub(crate) redlock_master: bool,
}

/// One client's engine: its deployment, its leases, and its settings.
/// Every primitive of a client works through one `Engine`.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) deployment: Arc<dyn Deployment>,
    pub(crate) config: EngineConfig,
    /// Names this client's notification channels: a release publishes to
    /// the one waiter it wakes, on its client's channel alone.
    pub(crate) id: String,
    pub(crate) leases: state::LeaseState,
    /// The fence retention in ms, as the scripts take it: written once,
    /// not for every request.
    retention_ms: String,
    /// Under a grace: the masters this client has seen.
    masters: std::sync::Mutex<Masters>,
    /// Some request of this client got a connection that Redis answered.
    reached: AtomicBool,
}

impl Engine {
    pub(crate) fn new(
        deployment: Arc<dyn Deployment>,
        config: EngineConfig,
    ) -> Result<Arc<Engine>> {
        Ok(Arc::new(Engine {
            deployment,
            retention_ms: millis(config.fence_retention).to_string(),
            config,
            id: new_token()?,
            leases: state::LeaseState::default(),
            masters: std::sync::Mutex::default(),
            reached: AtomicBool::new(false),
        }))
    }

    pub(crate) fn command_timeout(&self) -> Duration {
        self.deployment.command_timeout()
    }

    /// The fence retention in ms, as a script argument.
    pub(crate) fn retention_ms(&self) -> &[u8] {
        self.retention_ms.as_bytes()
    }

    /// A healthy route to the server of `keys`, for a request that must
    /// arm something first.
    pub(crate) async fn route(&self, keys: &LockKeys) -> Result<Route> {
        let route = self.deployment.route(&keys.lock).await?;
        // A connection was made and the server answered it: whatever it
        // says next, this client has reached Redis.
        self.reached.store(true, Ordering::Relaxed);
        Ok(route)
    }

    /// The notifications of the shard of `keys`, once the deployment knows
    /// its servers (it is asked for a route to learn them).
    pub(crate) async fn notifier(&self, keys: &LockKeys) -> Result<Notifier> {
        if let Some(notifier) = self.deployment.notifier(&keys.lock) {
            return Ok(notifier);
        }
        self.route(keys).await?;
        self.deployment.notifier(&keys.lock).ok_or_else(|| {
            Error::new(
                ErrorKind::Connection,
                format!(
                    "no server of {} serves lock {:?} now: try again shortly",
                    self.deployment.address(),
                    keys.name
                ),
            )
        })
    }

    /// Runs the script `pick` names on the server of `keys`.
    pub(crate) async fn eval(
        &self,
        keys: &LockKeys,
        operation: &str,
        pick: Pick,
        key_list: &[&str],
        args: &[&[u8]],
    ) -> Result<redis::Value> {
        let route = self.route(keys).await?;
        self.eval_on(route, &keys.lock, operation, pick, key_list, args)
            .await
    }

    /// Runs the script `pick` names on `route`, taken for `key`, and
    /// follows a cluster's MOVED and ASK to the server that serves `key`
    /// now: each hop is bounded by the command timeout, and there are few.
    pub(crate) async fn eval_on(
        &self,
        route: Route,
        key: &str,
        operation: &str,
        pick: Pick,
        key_list: &[&str],
        args: &[&[u8]],
    ) -> Result<redis::Value> {
        self.eval_answered(route, key, operation, pick, key_list, args)
            .await
            .map(|(reply, _)| reply)
    }

    /// [`eval_on`](Self::eval_on), with the route of the server that
    /// answered: the one the last redirect led to.
    pub(crate) async fn eval_answered(
        &self,
        route: Route,
        key: &str,
        operation: &str,
        pick: Pick,
        key_list: &[&str],
        args: &[&[u8]],
    ) -> Result<(redis::Value, Route)> {
        match self
            .send(route, key, operation, pick, key_list, args, false)
            .await?
        {
            Answer::Reply(reply, _, route) => Ok((reply, route)),
            Answer::InGrace(left) => Err(Error::new(
                ErrorKind::Connection,
                format!("the master of {key:?} is in its grace for {left:?}; try again then"),
            )
            .transient()),
        }
    }

    /// As [`eval_on`](Self::eval_on), for a script that may grant a lock
    /// (`grants`): a redirect to a server in its grace (see
    /// [`grace_left`](Self::grace_left)) is not followed, and says so.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn send(
        &self,
        mut route: Route,
        key: &str,
        operation: &str,
        pick: Pick,
        key_list: &[&str],
        args: &[&[u8]],
        grants: bool,
    ) -> Result<Answer> {
        let mut hops = 0;
        let ack = route.ack();
        loop {
            let script = pick(route.scripts());
            let reply = route.clone().eval(operation, script, key_list, args).await;
            let error = match reply {
                Ok((reply, acked)) => return Ok(Answer::Reply(reply, acked, route)),
                Err(error) => error,
            };
            if hops >= MAX_REDIRECTS {
                return Err(error);
            }
            // A cluster's MOVED and ASK, and a demoted master's READONLY
            // (Sentinel), are followed to the server that serves `key` now.
            let redirect = error.redirect();
            let next = match &redirect {
                Some(redirect) => self.deployment.follow(key, redirect),
                None if error.is_readonly() => self.deployment.failed_over(key),
                None => None,
            };
            let Some(next) = next else {
                return Err(error);
            };
            route = next.await?.with_ack(ack);
            hops += 1;
            // An ASK sends one command to where the slot is moving: it says
            // nothing of who serves the slot.
            if grants && !route.is_asking() {
                if let Some(left) = self.grace_left(key, route.server()) {
                    return Ok(Answer::InGrace(left));
                }
            }
        }
    }

    /// Whether this client ever reached Redis (a connection it answered).
    pub(crate) fn has_reached_redis(&self) -> bool {
        self.reached.load(Ordering::Relaxed)
    }

    /// Waits until the releases this client runs in the background are
    /// done, at most four command timeouts.
    pub(crate) async fn flush(&self) {
        let limit = self.command_timeout().saturating_mul(4);
        let _ = tokio::time::timeout(limit, self.leases.background.idle()).await;
    }

    /// How long from now no lock on `key` may be granted by the server
    /// behind `server`, under the grace: while that server has been up for
    /// less than the grace (a restart), or since it took over `key`'s slot
    /// by a promotion, as this client saw it: it was promoted from the
    /// master this client last saw serve the slot, or it is a master this
    /// client did not know that was promoted at some time. The grace of a
    /// promotion counts from when this client first saw the promoted
    /// master take any slot over, so a failover costs one grace, not one
    /// per slot. A slot that moved to a master this client knew (a
    /// migration: the keys move with it) is not held back.
    pub(crate) fn grace_left(&self, key: &str, server: &ServerInfo) -> Option<Duration> {
        let grace = self.config.restart_grace?;
        let now = Instant::now();
        let mut ends = server.started + grace;
        let slot = hash_slot(key);
        let mut masters = self
            .masters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let known = masters.known.contains(&server.identity);
        let changed = match masters.slots.get(&slot) {
            Some(seen) if seen.identity != server.identity => {
                let promoted = server.promoted_from == Some(seen.replid)
                    || (!known && server.promoted_from.is_some());
                if promoted {
                    Some(
                        *masters
                            .promotions
                            .entry((server.identity, server.replid))
                            .or_insert(now),
                    )
                } else {
                    seen.changed
                }
            }
            Some(seen) => seen.changed,
            None => None,
        };
        masters.known.insert(server.identity);
        masters.slots.insert(
            slot,
            SlotMaster {
                identity: server.identity,
                replid: server.replid,
                changed,
            },
        );
        if let Some(at) = changed {
            ends = ends.max(at + grace);
        }
        let left = ends.saturating_duration_since(now);
        (!left.is_zero()).then_some(left)
    }
}

/// Which primitive a request is for, and so how the lock is taken and
/// handed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A free lock goes to whoever asks; a release wakes one waiter.
    Mutex,
    /// A release hands the lock to the first live waiter (FIFO).
    Fair,
    /// One owner, who may take it again; non-fair, as `Mutex`.
    Reentrant,
    /// A shared (read) or exclusive (write) share of a read-write lock;
    /// reentrant per owner, writers served in arrival order with readers.
    Read,
    Write,
    /// Permits of a semaphore of `total`, served in arrival order.
    Semaphore {
        total: u32,
    },
}

impl Kind {
    /// The error for lock `name` asked for as this kind while Redis keeps
    /// it as `found` (the kind a script read, as `stored_phrase` takes it).
    pub(crate) fn conflict(self, name: &str, found: &str) -> Error {
        Error::wrong_kind(name, &self.phrase(), &stored_phrase(found))
    }

    /// The name Redis keeps for this kind, as errors and `inspect` show it.
    pub(crate) fn stored_name(self) -> &'static str {
        match self {
            Kind::Mutex | Kind::Fair => "mutex",
            Kind::Reentrant => "reentrant",
            Kind::Read | Kind::Write => "rwlock",
            Kind::Semaphore { .. } => "semaphore",
        }
    }

    /// How messages name this kind: "a semaphore of 4 permits".
    pub(crate) fn phrase(self) -> String {
        match self {
            Kind::Semaphore { total } => format!("a semaphore of {total} permits"),
            _ => stored_phrase(self.stored_name()),
        }
    }

    /// Kept in a hash with one entry per lease (see `scripts/lib.lua`).
    pub(crate) fn is_hash(self) -> bool {
        !matches!(self, Kind::Mutex | Kind::Fair)
    }
}

/// How messages name the kind Redis keeps as `stored`: one of
/// [`Kind::stored_name`], or the type of a key leasehold did not write.
pub(crate) fn stored_phrase(stored: &str) -> String {
    match stored {
        "mutex" => "a mutex".to_owned(),
        "reentrant" => "a reentrant mutex".to_owned(),
        "rwlock" => "a read-write lock".to_owned(),
        "semaphore" => "a semaphore".to_owned(),
        "hash" => "a hash leasehold did not write".to_owned(),
        other => format!("a Redis {other}"),
    }
}

/// What an acquisition asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) kind: Kind,
    pub(crate) lease: Duration,
    /// The watchdog renews the lease while it is held.
    pub(crate) renew: bool,
    /// A release before this much time since the acquisition keeps the
    /// lock until then.
    pub(crate) hold_at_least: Option<Duration>,
    /// Nothing renews the lease past this much time since the acquisition.
    pub(crate) max_hold: Option<Duration>,
    /// Who may take the lock again while holding it (reentrant kinds).
    pub(crate) owner: &'a str,
    /// Who holds the lease in this process once granted: the owner, or for
    /// the kinds without owners the task (or thread) acquiring through the
    /// handle. Never sent to Redis.
    pub(crate) holder: &'a str,
    /// Semaphore permits asked for (1 for the other kinds).
    pub(crate) permits: u32,
    /// Replicas that must acknowledge the grant, else it is undone.
    pub(crate) replica_ack: ReplicaAck,
}

/// Reads a PTTL reply: negative values mean no expiry or no key.
pub(crate) fn pttl(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}
