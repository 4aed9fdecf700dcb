//! Deployments: how commands, scripts, pipelines and notifications reach
//! Redis, and what is known of each server behind them. The engine above
//! talks to every topology through [`Deployment`] alone and never asks
//! which one it has.
//!
//! Every lock keeps all its keys in one hash slot, so every request the
//! engine makes concerns one key's slot: a deployment answers "which server
//! serves this key now" ([`Deployment::route`]), and the request goes there.
//!
//! - [`standalone`]: one Redis server (or a cluster-mode server that holds
//!   every slot).
//! - [`cluster`]: a Redis Cluster, routed by slot, following redirections.
//! - [`sentinel`]: the master a group of sentinels names, following
//!   failovers.
//!
//! A quorum of independent masters (Redlock, [`quorum`]) is several
//! standalone deployments side by side, each asked in parallel. What the
//! engine leases from is a [`backing::Backing`]: one deployment's
//! [`store::Store`], or a quorum.

pub(crate) mod backing;
pub(crate) mod build;
pub(crate) mod cluster;
pub(crate) mod detect;
pub(crate) mod grace;
pub(crate) mod quorum;
pub(crate) mod sentinel;
pub(crate) mod standalone;
pub(crate) mod store;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::conn::notify::Notifier;
use crate::conn::route::Route;
use crate::error::verdict::Redirect;
use crate::error::Result;

/// A future a deployment returns: boxed, so that the trait stays usable
/// as `dyn Deployment`. One allocation per request, against a network
/// round trip.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One Redis deployment, as the engine sees it.
pub(crate) trait Deployment: Send + Sync + fmt::Debug {
    /// Where requests go, for messages: host and port, never a password.
    fn address(&self) -> &str;

    /// How long one command may take before it counts as not answered.
    fn command_timeout(&self) -> Duration;

    /// A healthy route to the server that serves `key` now, made (and
    /// checked) if need be, with what is known of that server. Nothing the
    /// caller asked for is sent by this, so a caller can arm what must
    /// undo its request before anything leaves.
    fn route<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Route>>;

    /// [`route`](Self::route) without waiting and without a boxed future,
    /// when the server of `key` is known and its connection answered
    /// lately (the common case); `None` sends the caller to `route`.
    fn route_ready(&self, _key: &str) -> Option<Route> {
        None
    }

    /// A server answered MOVED or ASK for `key`: a route to the server
    /// that serves it now (for an ASK, for the next command only). `None`
    /// when this deployment does not follow redirects (the error stands).
    fn follow<'a>(
        &'a self,
        key: &'a str,
        redirect: &'a Redirect,
    ) -> Option<BoxFuture<'a, Result<Route>>>;

    /// The server of a route refused a write as a replica (READONLY): a
    /// route to the master that replaced it, for a deployment that follows
    /// failovers. `None` when it does not (the error stands).
    fn failed_over<'a>(&'a self, _key: &'a str) -> Option<BoxFuture<'a, Result<Route>>> {
        None
    }

    /// Which server of the deployment serves `key` now, as a small number:
    /// the watchdog sends one renewal pipeline per server.
    fn server_of(&self, key: &str) -> usize;

    /// The notifications of `key`'s shard: the channel a release publishes
    /// on is heard through it. `None` before the deployment knows its
    /// servers (nothing was routed yet).
    fn notifier(&self, key: &str) -> Option<Notifier>;

    /// A route to every master of the deployment, for what is asked of
    /// each server rather than of a lock's (the Functions libraries): the
    /// one server, or the master the sentinels name, unless overridden.
    fn masters(&self) -> BoxFuture<'_, Result<Vec<Route>>> {
        Box::pin(async move { Ok(vec![self.route("").await?]) })
    }
}
