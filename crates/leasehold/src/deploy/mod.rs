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
//! A quorum of independent masters (Redlock) is several standalone
//! deployments side by side, each asked in parallel by the engine.

pub(crate) mod cluster;
pub(crate) mod conn;
pub(crate) mod detect;
pub(crate) mod notify;
pub(crate) mod probe;
pub(crate) mod sentinel;
pub(crate) mod standalone;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use conn::ServerInfo;
pub(crate) use notify::{Notifier, Subscription};

use crate::engine::scripts::{
    evalsha, fcall, is_function_missing, is_functions_refused, is_library_loaded,
    is_noscript_error, is_readonly_error, Publish, Scripts,
};
use crate::engine::ReplicaAck;
use crate::error::{Error, Redirect, Result};

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
}

/// A checked-out connection to one server, for one request (or one
/// pipeline) on keys it serves.
#[derive(Clone)]
pub(crate) struct Route {
    connection: Arc<conn::Connection>,
    checkout: conn::Checkout,
    publish: Publish,
    /// Sent after a server's ASK: the next command goes with ASKING.
    asking: bool,
    /// A script is followed by WAIT on the same connection.
    ack: Option<ReplicaAck>,
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("address", &self.connection.address)
            .finish_non_exhaustive()
    }
}

impl Route {
    pub(crate) fn new(
        connection: Arc<conn::Connection>,
        checkout: conn::Checkout,
        publish: Publish,
    ) -> Self {
        Route {
            connection,
            checkout,
            publish,
            asking: false,
            ack: None,
        }
    }

    /// This route for a script whose write `ack` replicas must
    /// acknowledge: `WAIT` goes right behind it, in one round trip.
    pub(crate) fn with_ack(mut self, ack: Option<ReplicaAck>) -> Self {
        self.ack = ack;
        self
    }

    pub(crate) fn ack(&self) -> Option<ReplicaAck> {
        self.ack
    }

    /// This route for one command that an ASK sent here.
    pub(crate) fn asking(mut self) -> Self {
        self.asking = true;
        self
    }

    /// Whether this route carries one command that an ASK sent here.
    pub(crate) fn is_asking(&self) -> bool {
        self.asking
    }

    /// The scripts this server runs: they publish as its deployment does.
    pub(crate) fn scripts(&self) -> &'static Scripts {
        Scripts::get(self.publish)
    }

    /// What is known of the server behind this route.
    pub(crate) fn server(&self) -> &ServerInfo {
        &self.checkout.server
    }

    /// The server behind this route: host and port, never a password.
    pub(crate) fn address(&self) -> &str {
        &self.connection.address
    }

    /// Runs one script; NOSCRIPT is answered by loading it and sending it
    /// again. A script of the functions library goes as FCALL where the
    /// server has functions (the library is loaded when the server says
    /// it has not got it), and as EVALSHA where it has none. Bounded by
    /// the command timeout (and the WAIT's timeout, when the route asks
    /// replicas to acknowledge: then also how many did).
    pub(crate) async fn eval(
        self,
        operation: &str,
        script: &redis::Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<(redis::Value, Option<u32>)> {
        let asking = self.asking;
        let ack = self.ack;
        let within = ack.map_or(std::time::Duration::ZERO, |ack| ack.timeout);
        let scripts = self.scripts();
        let function = scripts
            .function(script)
            .filter(|_| self.connection.functions(&self.checkout.server));
        if function.is_none() && !self.checkout.server.evalsha {
            // Never sent to find out: see conn::OPTIONAL_COMMANDS.
            return Err(Error::lacks_command(self.address(), "EVALSHA"));
        }
        let connection = &self.connection;
        self.connection
            .run_on_within(self.checkout, operation, within, |mut conn, _| async move {
                if let Some(function) = function {
                    let call = || fcall(function, keys, args);
                    match send(&mut conn, asking, ack, call()).await {
                        Err(e) if is_function_missing(&e) => {
                            match redis::cmd("FUNCTION")
                                .arg("LOAD")
                                .arg(&scripts.library.code)
                                .query_async::<redis::Value>(&mut conn)
                                .await
                            {
                                Err(e) if is_functions_refused(&e) => connection.no_functions(),
                                // A replica: sent as a script below.
                                Err(e) if is_readonly_error(&e) => {}
                                Err(e) if !is_library_loaded(&e) => return Err(e),
                                _ => match send(&mut conn, asking, ack, call()).await {
                                    Err(e) if is_readonly_error(&e) => {}
                                    reply => return reply,
                                },
                            }
                        }
                        Err(e) if is_functions_refused(&e) => connection.no_functions(),
                        // Sent as a script below: a replica answers it as it
                        // always did.
                        Err(e) if is_readonly_error(&e) => {}
                        reply => return reply,
                    }
                }
                // ASKING holds for the next command alone, and WAIT counts
                // the writes of this connection: all go in one pipeline,
                // and again after a NOSCRIPT.
                let call = || evalsha(script, keys, args);
                match send(&mut conn, asking, ack, call()).await {
                    Err(e) if is_noscript_error(&e) => {
                        script.prepare_invoke().load_async(&mut conn).await?;
                        send(&mut conn, asking, ack, call()).await
                    }
                    reply => reply,
                }
            })
            .await
    }

    /// Deletes `key` if it holds exactly `value`, with the server's own
    /// compare-and-delete (see [`conn::CompareAndDelete`]): `Some(true)`
    /// when deleted, `Some(false)` when the key holds something else or
    /// nothing, `None` when the server has no such command, refuses it to
    /// this user, or answered with an error a script would have handled (a
    /// redirect, READONLY): the caller sends the script then. An error of
    /// the connection is returned as it is (the command may have been
    /// applied).
    pub(crate) async fn compare_and_delete(&self, key: &str, value: &[u8]) -> Result<Option<bool>> {
        use conn::CompareAndDelete as Cad;
        if self.asking || self.ack.is_some() {
            return Ok(None);
        }
        let found = self.connection.compare_and_delete(&self.checkout.server);
        let mut cmd = match found {
            Cad::DelIfEq => redis::cmd("DELIFEQ"),
            Cad::DelEx => redis::cmd("DELEX"),
            Cad::None => return Ok(None),
        };
        cmd.arg(key);
        if found == Cad::DelEx {
            cmd.arg("IFEQ");
        }
        cmd.arg(value);
        let connection = &self.connection;
        self.connection
            .run_on(self.checkout.clone(), "release", |mut conn, _| async move {
                match cmd.query_async::<redis::Value>(&mut conn).await {
                    Ok(redis::Value::Int(n)) => Ok(Some(n == 1)),
                    Ok(_) => Ok(None),
                    Err(e) if e.kind() == redis::ErrorKind::Io || e.is_connection_dropped() => {
                        Err(e)
                    }
                    Err(e) => {
                        if is_refused(&e) {
                            connection.no_compare_and_delete();
                        }
                        // MOVED, READONLY, ...: the script handles it.
                        Ok(None)
                    }
                }
            })
            .await
    }

    /// Sends a pipeline of commands on keys this server serves.
    pub(crate) async fn pipeline(
        &self,
        operation: &str,
        pipe: &redis::Pipeline,
    ) -> Result<Vec<redis::Value>> {
        let replies: Vec<redis::Value> = self
            .connection
            .run_on(self.checkout.clone(), operation, |mut conn, _| async move {
                pipe.query_async(&mut conn).await
            })
            .await?;
        // A pipeline that keeps going past errors says READONLY in its replies.
        if replies
            .iter()
            .any(|reply| matches!(reply, redis::Value::ServerError(e) if e.code() == "READONLY"))
        {
            self.connection.demoted();
        }
        Ok(replies)
    }

    /// Loads `script` into the server's script cache.
    pub(crate) async fn load(&self, operation: &str, script: &redis::Script) -> Result<()> {
        self.connection
            .run_on(self.checkout.clone(), operation, |mut conn, _| async move {
                script.prepare_invoke().load_async(&mut conn).await
            })
            .await
            .map(drop)
    }
}

/// Whether the server does not let this user run a command (or does not
/// know it, or these arguments of it, after all).
fn is_refused(err: &redis::RedisError) -> bool {
    let detail = err.detail().unwrap_or("").to_ascii_lowercase();
    matches!(err.code(), Some("NOPERM"))
        || (matches!(err.code(), Some("ERR"))
            && (detail.starts_with("unknown command")
                || detail.starts_with("unknown subcommand")
                || detail.starts_with("syntax error")
                || detail.contains("wrong number of arguments")))
}

/// Sends `command`, alone or, when `asking` or `ack` say so, in one
/// pipeline behind ASKING and before WAIT; answers its reply and how many
/// replicas acknowledged it when `ack` asked.
async fn send(
    conn: &mut redis::aio::MultiplexedConnection,
    asking: bool,
    ack: Option<ReplicaAck>,
    command: redis::Cmd,
) -> redis::RedisResult<(redis::Value, Option<u32>)> {
    if !asking && ack.is_none() {
        return command.query_async(conn).await.map(|v| (v, None));
    }
    let mut pipe = redis::pipe();
    if asking {
        pipe.cmd("ASKING").ignore();
    }
    pipe.add_command(command);
    if let Some(ack) = ack {
        pipe.cmd("WAIT")
            .arg(ack.replicas)
            .arg(crate::keys::millis(ack.timeout).max(1));
    }
    let mut replies = pipe
        .query_async::<Vec<redis::Value>>(conn)
        .await?
        .into_iter();
    let value = replies.next().unwrap_or(redis::Value::Nil);
    let acked = match (ack, replies.next()) {
        (None, _) => None,
        (Some(_), Some(redis::Value::Int(n))) => Some(u32::try_from(n).unwrap_or(0)),
        (Some(_), _) => Some(0),
    };
    Ok((value, acked))
}
