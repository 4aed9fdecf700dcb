//! A route: one checked-out connection to the server of a key, for one
//! request (or one pipeline), and how a script runs on it: FCALL or
//! EVALSHA, a NOSCRIPT answered by loading, ASKING before it after an ASK,
//! and WAIT behind it when the replicas must acknowledge.

use std::fmt;
use std::sync::Arc;

use crate::conn::acks::{self, Job};
use crate::conn::replicas::{Acked, ReplicaAck, MAX_REPLICA_TIMEOUT};
use crate::conn::scripts::{self, evalsha, fcall, Publish, Scripts};
use crate::conn::{Checkout, CompareAndDelete, Connection, ServerInfo};
use crate::error::verdict::{is_library_loaded, verdict_of, verdict_of_reply, Verdict};
use crate::error::{Error, Result};
use crate::holder::ReplicaStatus;

/// A checked-out connection to one server, for one request (or one
/// pipeline) on keys it serves.
#[derive(Clone)]
pub(crate) struct Route {
    connection: Arc<Connection>,
    checkout: Checkout,
    publish: Publish,
    /// Sent after a server's ASK: the next command goes with ASKING.
    asking: bool,
    /// Which replicas must acknowledge a script's writes (WAIT behind it,
    /// on the same connection).
    ack: ReplicaAck,
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("address", &self.connection.address)
            .finish_non_exhaustive()
    }
}

impl Route {
    pub(crate) fn new(connection: Arc<Connection>, checkout: Checkout, publish: Publish) -> Self {
        Route {
            connection,
            checkout,
            publish,
            asking: false,
            ack: ReplicaAck::Off,
        }
    }

    /// This route for a script whose writes the replicas `ack` names
    /// must acknowledge: `WAIT` goes right behind it, in one round trip.
    pub(crate) fn with_ack(mut self, ack: ReplicaAck) -> Self {
        self.ack = ack;
        self
    }

    pub(crate) fn ack(&self) -> ReplicaAck {
        self.ack
    }

    /// What is known of the replicas of the server behind this route.
    pub(crate) fn replicas(&self) -> ReplicaStatus {
        self.connection.replica_status()
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
    /// replicas to acknowledge: then also how that went, see
    /// [`ReplicaAck`]; `None` when no WAIT was sent).
    pub(crate) async fn eval(
        self,
        operation: &str,
        script: &'static redis::Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<(redis::Value, Option<Acked>)> {
        let asking = self.asking;
        let ack = self.ack;
        let scripts = self.scripts();
        let function = scripts
            .function(script)
            .filter(|_| self.connection.functions(&self.checkout.server));
        if function.is_none() && !self.checkout.server.evalsha {
            // Never sent to find out: see `OPTIONAL_COMMANDS` in conn.
            return Err(Error::lacks_command(self.address(), "EVALSHA"));
        }
        let connection = &self.connection;
        // How many replicas must acknowledge, decided before anything is
        // sent; a master known to have none is sent no WAIT.
        let wait = match ack {
            ReplicaAck::Off => None,
            ReplicaAck::AtLeast { replicas, timeout } => Some((replicas, timeout)),
            ReplicaAck::Connected { timeout } => {
                if connection.replicas_due() {
                    connection
                        .run_on(self.checkout.clone(), operation, |mut conn, _| async move {
                            connection.read_replicas_on(&mut conn).await
                        })
                        .await?;
                }
                let online = connection.replicas_asked();
                (online > 0).then_some((online, timeout))
            }
        };
        // A WAIT goes on the line of its own, with the other requests
        // that asked for one meanwhile, so that nothing else of the client
        // queues behind it.
        if let Some(wait) = wait {
            let job = Job::new(
                operation,
                scripts,
                function,
                script,
                keys,
                args,
                asking,
                wait,
                matches!(ack, ReplicaAck::Connected { .. }),
            );
            return acks::submit(connection, job).await;
        }
        let call = Call {
            connection,
            scripts,
            function,
            script,
            keys,
            args,
            asking,
        };
        connection
            .run_on(self.checkout, operation, |conn, _| call.run(conn))
            .await
    }

    /// Resolves once every request sent before on this server's line of
    /// acknowledged requests has its answer (at most a command timeout and
    /// the longest replica timeout): a release for a caller that dropped
    /// its request sent after this finds the grant the request made.
    pub(crate) async fn after_acknowledged(&self) {
        let within = self.connection.timeout + MAX_REPLICA_TIMEOUT;
        let _ = tokio::time::timeout(within, self.connection.acks.settled()).await;
    }

    /// Deletes `key` if it holds exactly `value`, with the server's own
    /// compare-and-delete (see [`CompareAndDelete`]): `Some(true)`
    /// when deleted, `Some(false)` when the key holds something else or
    /// nothing, `None` when the server has no such command, refuses it to
    /// this user, or answered with an error a script would have handled (a
    /// redirect, READONLY): the caller sends the script then. An error of
    /// the connection is returned as it is (the command may have been
    /// applied).
    pub(crate) async fn compare_and_delete(&self, key: &str, value: &[u8]) -> Result<Option<bool>> {
        use CompareAndDelete as Cad;
        if self.asking || self.ack != ReplicaAck::Off {
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
                    Err(e) => match verdict_of(&e) {
                        // It may have been applied.
                        Verdict::Reconnect => Err(e),
                        Verdict::Refused => {
                            connection.no_compare_and_delete();
                            Ok(None)
                        }
                        // MOVED, READONLY, ...: the script handles it.
                        _ => Ok(None),
                    },
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
        if replies.iter().any(|reply| {
            matches!(reply, redis::Value::ServerError(e)
                if verdict_of_reply(e) == Verdict::FailedOver { unblocked: false })
        }) {
            self.connection.demoted();
        }
        Ok(replies)
    }

    /// Sends a pipeline of calls of the script `pick` names (with errors
    /// kept as replies); loads the script and sends again if the server
    /// lost it. `None` when Redis did not answer usefully.
    pub(crate) async fn script_pipeline(
        &self,
        operation: &str,
        pipe: &redis::Pipeline,
        pick: fn(&Scripts) -> &redis::Script,
    ) -> Option<Vec<redis::Value>> {
        for _ in 0..2 {
            let replies = self.pipeline(operation, pipe).await.ok()?;
            if !replies.iter().any(scripts::is_noscript) {
                return Some(replies);
            }
            let script = pick(self.scripts());
            self.load(&format!("loading the script of {operation}"), script)
                .await
                .ok()?;
        }
        None
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

/// One script to run, with no acknowledgement asked (see [`Route::eval`];
/// one that asks goes in a batch, see [`acks`]).
struct Call<'a> {
    connection: &'a Connection,
    scripts: &'static Scripts,
    function: Option<&'static str>,
    script: &'a redis::Script,
    keys: &'a [&'a str],
    args: &'a [&'a [u8]],
    asking: bool,
}

impl Call<'_> {
    async fn run(
        self,
        mut conn: redis::aio::MultiplexedConnection,
    ) -> redis::RedisResult<(redis::Value, Option<Acked>)> {
        let conn = &mut conn;
        let asking = self.asking;
        // A function that writes is refused up front by a replica
        // (READONLY), where a script is let in and says what the replica's
        // state is (MASTERDOWN when cut off from its master): the script is
        // sent then. A server without functions, or a user not let to call
        // or load them, gets the script too.
        let readonly = Verdict::FailedOver { unblocked: false };
        if let Some(function) = self.function {
            let call = || fcall(function, self.keys, self.args);
            let reply = send(conn, asking, call()).await;
            match reply.as_ref().map_err(verdict_of) {
                Err(Verdict::Reload) => {
                    let loaded = redis::cmd("FUNCTION")
                        .arg("LOAD")
                        .arg(&self.scripts.library.code)
                        .query_async::<redis::Value>(&mut *conn)
                        .await;
                    match loaded {
                        Err(e) if verdict_of(&e) == Verdict::Refused => {
                            self.connection.no_functions()
                        }
                        Err(e) if verdict_of(&e) == readonly => {}
                        Err(e) if !is_library_loaded(&e) => return Err(e),
                        _ => {
                            let reply = send(conn, asking, call()).await;
                            match reply.as_ref().map_err(verdict_of) {
                                Err(v) if v == readonly => {}
                                _ => return reply.map(|v| (v, None)),
                            }
                        }
                    }
                }
                Err(Verdict::Refused) => self.connection.no_functions(),
                Err(v) if v == readonly => {}
                _ => return reply.map(|v| (v, None)),
            }
        }
        // ASKING holds for the next command alone: both go in one
        // pipeline, and again after a NOSCRIPT.
        let call = || evalsha(self.script, self.keys, self.args);
        let reply = match send(conn, asking, call()).await {
            Err(e) if verdict_of(&e) == Verdict::Reload => {
                self.script.prepare_invoke().load_async(&mut *conn).await?;
                send(conn, asking, call()).await
            }
            reply => reply,
        };
        reply.map(|v| (v, None))
    }
}

/// Sends `command`, alone or, when `asking` says so, in one pipeline
/// behind ASKING; answers its reply.
async fn send(
    conn: &mut redis::aio::MultiplexedConnection,
    asking: bool,
    command: redis::Cmd,
) -> redis::RedisResult<redis::Value> {
    if !asking {
        return command.query_async(conn).await;
    }
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING").ignore();
    pipe.add_command(command);
    let mut replies = pipe
        .query_async::<Vec<redis::Value>>(conn)
        .await?
        .into_iter();
    Ok(replies.next().unwrap_or(redis::Value::Nil))
}
