//! A store: one deployment as the engine leases from it. The routes to
//! its servers, with what the deployment layer knows of them: the grace on
//! a restart or a change of master, and the redirects and failovers a
//! request follows. The engine asks a store, never a deployment.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::conn::notify::Notifier;
use crate::conn::replicas::Acked;
use crate::conn::route::Route;
use crate::conn::scripts::Scripts;
use crate::conn::ServerInfo;
use crate::deploy::grace::Grace;
use crate::deploy::Deployment;
use crate::error::verdict::Verdict;
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{hash_slot, LockKeys};

/// What a script that may grant a lock got. Returned once per request,
/// never stored: boxing the route would cost an allocation per request.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Answer {
    /// The script's reply, how many replicas acknowledged it when the route
    /// asked (see [`ReplicaAck`](crate::ReplicaAck)), and the route of the
    /// server that gave it.
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

/// One deployment, with its grace and what its requests follow.
#[derive(Debug)]
pub(crate) struct Store {
    deployment: Arc<dyn Deployment>,
    grace: Grace,
    /// Some request got a connection that Redis answered.
    reached: AtomicBool,
    /// A master of a quorum: a release that does not find its token marks
    /// the fence counter with it, so that the token's round one, should it
    /// arrive after all, takes nothing (see `release.lua` and
    /// `redlock_acquire.lua`).
    marks_missed_releases: bool,
}

impl Store {
    pub(crate) fn new(deployment: Arc<dyn Deployment>, grace: Option<Duration>) -> Self {
        Store {
            deployment,
            grace: Grace::new(grace),
            reached: AtomicBool::new(false),
            marks_missed_releases: false,
        }
    }

    /// A master of a quorum (see `marks_missed_releases`).
    pub(crate) fn quorum_master(mut self) -> Self {
        self.marks_missed_releases = true;
        self
    }

    /// Whether a release that does not find its token marks the fence
    /// counter with it.
    pub(crate) fn marks_missed_releases(&self) -> bool {
        self.marks_missed_releases
    }

    /// Where requests go, for messages: host and port, never a password.
    pub(crate) fn address(&self) -> &str {
        self.deployment.address()
    }

    pub(crate) fn command_timeout(&self) -> Duration {
        self.deployment.command_timeout()
    }

    /// Which server serves `key` now, as a small number.
    pub(crate) fn server_of(&self, key: &str) -> usize {
        self.deployment.server_of(key)
    }

    /// The notifications of `key`'s shard, if its servers are known yet.
    pub(crate) fn known_notifier(&self, key: &str) -> Option<Notifier> {
        self.deployment.notifier(key)
    }

    /// `items` in groups that one script may take each on the server
    /// behind `route`: by hash slot on a cluster-mode server (a script
    /// there touches one slot), all together elsewhere.
    pub(crate) fn one_script_groups<T>(
        &self,
        route: &Route,
        items: Vec<T>,
        key: impl Fn(&T) -> &str,
    ) -> Vec<Vec<T>> {
        let cluster = route.server().cluster;
        let mut groups: BTreeMap<u16, Vec<T>> = BTreeMap::new();
        for item in items {
            let group = if cluster { hash_slot(key(&item)) } else { 0 };
            groups.entry(group).or_default().push(item);
        }
        groups.into_values().collect()
    }

    /// Whether this client ever reached Redis (a connection it answered).
    pub(crate) fn has_reached_redis(&self) -> bool {
        self.reached.load(Ordering::Relaxed)
    }

    /// How long from now no lock on `key` may be granted by the server
    /// behind `server` (see [`Grace`]).
    pub(crate) fn grace_left(&self, key: &str, server: &ServerInfo) -> Option<Duration> {
        self.grace.left(key, server)
    }

    /// A healthy route to the server of `keys`, for a request that must
    /// arm something first.
    pub(crate) async fn route(&self, keys: &LockKeys) -> Result<Route> {
        self.route_key(&keys.lock).await
    }

    /// A healthy route to the server that serves `key` now.
    pub(crate) async fn route_key(&self, key: &str) -> Result<Route> {
        if let Some(route) = self.deployment.route_ready(key) {
            // A connection that answered lately: Redis was reached.
            self.reached.store(true, Ordering::Relaxed);
            return Ok(route);
        }
        let route = self.deployment.route(key).await?;
        // A connection was made and the server answered it: whatever it
        // says next, this client has reached Redis.
        self.reached.store(true, Ordering::Relaxed);
        Ok(route)
    }

    /// A route to every master of the deployment.
    pub(crate) async fn masters(&self) -> Result<Vec<Route>> {
        self.deployment.masters().await
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
    ///
    /// Followed: a cluster's MOVED and ASK, and a demoted master's
    /// READONLY (Sentinel), each as the error's verdict says.
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
            // Boxed: what runs a script is most of a request's future, and
            // every caller above would otherwise carry it, and move it
            // whole as it starts each.
            let reply = Box::pin(route.clone().eval(operation, script, key_list, args)).await;
            let error = match reply {
                Ok((reply, acked)) => return Ok(Answer::Reply(reply, acked, route)),
                Err(error) => error,
            };
            if hops >= MAX_REDIRECTS {
                return Err(error);
            }
            // A cluster's MOVED and ASK, and a demoted master's READONLY
            // (Sentinel), are followed to the server that serves `key` now.
            let verdict = error.verdict();
            let next = match &verdict {
                Verdict::Follow(redirect) => self.deployment.follow(key, redirect),
                Verdict::FailedOver { .. } => self.deployment.failed_over(key),
                _ => None,
            };
            let Some(next) = next else {
                return Err(error);
            };
            route = next.await?.with_ack(ack);
            hops += 1;
            // An ASK sends one command to where the slot is moving: it says
            // nothing of who serves the slot.
            if grants && !route.is_asking() {
                if let Some(left) = self.grace.left(key, route.server()) {
                    return Ok(Answer::InGrace(left));
                }
            }
        }
    }
}
