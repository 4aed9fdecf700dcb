//! Group commit of the requests whose writes the replicas must
//! acknowledge. A `WAIT` holds back every command behind it on its
//! connection for as long as the replicas take, so such requests go on a
//! line of their own (see [`Line::Acks`]), and one batch of them is out at
//! a time: those that arrive while one is out are sent together when it
//! comes back, their scripts in one pipeline followed by one `WAIT n
//! timeout`. A WAIT counts every earlier write of its connection, so the
//! one WAIT acknowledges the writes of the whole batch, and a request
//! waits for at most one batch before its own.
//!
//! A batch is sent by a task of its own, which runs while requests are
//! queued and ends when none are: a caller dropped while its request is
//! queued takes it out unsent, and one dropped while it is out leaves it
//! to the task, as a request dropped after it was written to the socket
//! has always been (the caller's pending release undoes the grant).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use crate::conn::replicas::Acked;
use crate::conn::scripts::{evalsha, fcall, Scripts};
use crate::conn::{Connection, Line};
use crate::error::verdict::{is_library_loaded, verdict_of, verdict_of_reply, Verdict};
use crate::error::{Error, Result};

/// The most requests one pipeline carries.
const MAX_BATCH: usize = 256;

/// What a request is answered: the script's reply and how the WAIT went.
pub(crate) type Reply = Result<(redis::Value, Option<Acked>)>;

/// One script whose writes `wait` names must acknowledge.
pub(crate) struct Job {
    operation: String,
    scripts: &'static Scripts,
    /// The function that runs the script, while it is sent as one.
    function: Option<&'static str>,
    script: &'static redis::Script,
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
    /// Sent after a server's ASK: it goes behind ASKING.
    asking: bool,
    /// How many replicas, and how long Redis waits for them.
    wait: (u32, Duration),
    /// The replicas waited for are those the master lists.
    connected: bool,
    /// The functions library, or the script, was loaded for it once.
    function_loaded: bool,
    script_loaded: bool,
    answer: Option<oneshot::Sender<Reply>>,
}

impl Job {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        operation: &str,
        scripts: &'static Scripts,
        function: Option<&'static str>,
        script: &'static redis::Script,
        keys: &[&str],
        args: &[&[u8]],
        asking: bool,
        wait: (u32, Duration),
        connected: bool,
    ) -> Job {
        Job {
            operation: operation.to_owned(),
            scripts,
            function,
            script,
            keys: keys.iter().map(|&key| key.to_owned()).collect(),
            args: args.iter().map(|arg| arg.to_vec()).collect(),
            asking,
            wait,
            connected,
            function_loaded: false,
            script_loaded: false,
            answer: None,
        }
    }

    fn answer(mut self, reply: Reply) {
        if let Some(answer) = self.answer.take() {
            // A caller that is gone has its pending release.
            let _ = answer.send(reply);
        }
    }

    /// Its caller is gone.
    fn is_abandoned(&self) -> bool {
        self.answer.as_ref().is_none_or(oneshot::Sender::is_closed)
    }

    fn command(&self) -> redis::Cmd {
        let keys: Vec<&str> = self.keys.iter().map(String::as_str).collect();
        let args: Vec<&[u8]> = self.args.iter().map(Vec::as_slice).collect();
        match self.function {
            Some(function) => fcall(function, &keys, &args),
            None => evalsha(self.script, &keys, &args),
        }
    }
}

/// The requests of one connection waiting for a batch, and whether one is
/// out.
#[derive(Default)]
pub(crate) struct AckQueue {
    state: Mutex<Queued>,
    /// A batch was answered (or given up).
    finished: Notify,
}

#[derive(Default)]
struct Queued {
    jobs: VecDeque<Job>,
    /// A task sends batches.
    sending: bool,
    /// The number of the last batch sent, and of the last one answered.
    sent: u64,
    answered: u64,
}

impl AckQueue {
    fn state(&self) -> MutexGuard<'_, Queued> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves once every batch sent before this call has its answer (or
    /// was given up): a grant it carried for a caller that is gone has
    /// been made by then, so a release sent after it finds the grant.
    pub(crate) async fn settled(&self) {
        let target = self.state().sent;
        loop {
            let finished = self.finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            if self.state().answered >= target {
                return;
            }
            finished.await;
        }
    }

    /// Batch `number` was answered or given up.
    fn finish(&self, number: u64) {
        let mut state = self.state();
        state.answered = state.answered.max(number);
        drop(state);
        self.finished.notify_waiters();
    }
}

/// Sends `job` in the next batch of `connection`'s acknowledged requests
/// and answers its reply.
///
/// # Cancel safety
///
/// Dropped before its batch is sent, the request is never sent; dropped
/// after, it runs to its end without a caller, as a request written to a
/// socket does.
pub(crate) async fn submit(connection: &Arc<Connection>, mut job: Job) -> Reply {
    let (answer, answered) = oneshot::channel();
    job.answer = Some(answer);
    let operation = job.operation.clone();
    let limit = connection.timeout + job.wait.1;
    let start = {
        let mut state = connection.acks.state();
        state.jobs.push_back(job);
        !std::mem::replace(&mut state.sending, true)
    };
    if start {
        tokio::spawn(send_batches(Arc::clone(connection)));
    }
    // Unanswered: its batch got no answer in time (or the runtime shut
    // down under it).
    answered
        .await
        .unwrap_or_else(|_| Err(Error::no_answer(&connection.address, &operation, limit)))
}

/// Ends the sending of batches: when the task ends before the queue is
/// empty (its runtime shutting down), its queued requests are answered
/// with an error (by being dropped) and the next request starts a task.
struct Sending<'a> {
    connection: &'a Connection,
    done: bool,
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if !self.done {
            let mut state = self.connection.acks.state();
            state.jobs.clear();
            state.sending = false;
            let sent = state.sent;
            drop(state);
            self.connection.acks.finish(sent);
        }
    }
}

/// Sends the queued requests of `connection`, one batch at a time, until
/// none are queued.
async fn send_batches(connection: Arc<Connection>) {
    let mut sending = Sending {
        connection: &connection,
        done: false,
    };
    loop {
        let batch = {
            let mut state = connection.acks.state();
            state.jobs.retain(|job| !job.is_abandoned());
            let Some(wait) = state.jobs.front().map(|job| job.wait) else {
                state.sending = false;
                sending.done = true;
                return;
            };
            // Requests that wait for as many replicas as long: one WAIT
            // answers them all.
            let mut batch = Vec::new();
            let mut rest = VecDeque::new();
            while let Some(job) = state.jobs.pop_front() {
                if job.wait == wait && batch.len() < MAX_BATCH {
                    batch.push(job);
                } else {
                    rest.push_back(job);
                }
            }
            state.jobs = rest;
            batch
        };
        let again = send_batch(&connection, batch).await;
        if !again.is_empty() {
            let mut state = connection.acks.state();
            for job in again.into_iter().rev() {
                state.jobs.push_front(job);
            }
        }
    }
}

/// What became of one request of a batch: its answer, or `None`: to be
/// sent again in the next batch (after a load, or as a script).
type Decided = (Job, Option<Reply>);

/// Sends one batch and answers its requests; returns those to send again.
async fn send_batch(connection: &Connection, batch: Vec<Job>) -> Vec<Job> {
    let wait = batch.first().map_or((0, Duration::ZERO), |job| job.wait);
    let checkout = match Box::pin(connection.get_on(Line::Acks)).await {
        Ok(checkout) => checkout,
        Err(error) => {
            for job in batch {
                job.answer(Err(error.shared_copy()));
            }
            return Vec::new();
        }
    };
    let (line, generation) = (checkout.line, checkout.generation);
    let limit = connection.timeout + wait.1;
    // A caller dropped while its batch waited for a connection has had its
    // pending release sent: its request must not follow it. One dropped
    // from here on has its release wait for this batch (see
    // `AckQueue::settled`). Nothing is awaited from here until the
    // pipeline is handed to the connection.
    let number = {
        let mut state = connection.acks.state();
        state.sent += 1;
        state.sent
    };
    let batch: Vec<Job> = batch
        .into_iter()
        .filter(|job| !job.is_abandoned())
        .collect();
    if batch.is_empty() {
        connection.acks.finish(number);
        return Vec::new();
    }
    let exchanged =
        tokio::time::timeout(limit, exchange(connection, checkout.conn, batch, wait)).await;
    connection.acks.finish(number);
    let (outcome, batch) = match exchanged {
        Ok(exchanged) => exchanged,
        Err(_) => {
            connection.broken(line, generation);
            // The batch went with the future: its callers hear that no
            // answer came.
            return Vec::new();
        }
    };
    match outcome {
        Ok(fates) => {
            connection.slot(line).last_answer = Some(Instant::now());
            let mut again = Vec::new();
            for (job, reply) in fates {
                match reply {
                    Some(reply) => job.answer(reply),
                    None => again.push(job),
                }
            }
            again
        }
        Err(e) => {
            if verdict_of(&e) == Verdict::Reconnect {
                connection.broken(line, generation);
            } else {
                connection.slot(line).last_answer = Some(Instant::now());
            }
            for job in batch {
                let error = Error::redis(&connection.address, &job.operation, e.clone());
                if error.is_readonly() {
                    connection.demoted();
                }
                job.answer(Err(error));
            }
            Vec::new()
        }
    }
}

/// The round trip of one batch: every request (behind ASKING where it
/// needs it) in one pipeline with `WAIT` behind them, then what the
/// replies call for: the functions library or a script loaded for those
/// that found it missing, the replicas read again when the WAIT fell short
/// (a replica that left during it is not waited for). On a failure of the
/// whole pipeline the batch is handed back, to be answered with it.
async fn exchange(
    connection: &Connection,
    mut conn: redis::aio::MultiplexedConnection,
    batch: Vec<Job>,
    wait: (u32, Duration),
) -> (redis::RedisResult<Vec<Decided>>, Vec<Job>) {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for job in &batch {
        if job.asking {
            pipe.cmd("ASKING").ignore();
        }
        pipe.add_command(job.command());
    }
    pipe.cmd("WAIT")
        .arg(wait.0)
        .arg(crate::keys::millis(wait.1).max(1));
    let replies = match pipe.query_async::<Vec<redis::Value>>(&mut conn).await {
        Ok(replies) => replies,
        Err(e) => return (Err(e), batch),
    };
    let mut replies = replies.into_iter();
    let mut decided = Vec::with_capacity(batch.len());
    let mut replied = Vec::with_capacity(batch.len());
    for job in batch {
        replied.push((job, replies.next().unwrap_or(redis::Value::Nil)));
    }
    let waited = replies.next().unwrap_or(redis::Value::Nil);
    let readonly = Verdict::FailedOver { unblocked: false };
    let mut load_library = Vec::new();
    let mut load_scripts = Vec::new();
    let mut granted = Vec::new();
    for (mut job, reply) in replied {
        let redis::Value::ServerError(e) = reply else {
            granted.push((job, reply));
            continue;
        };
        let verdict = verdict_of_reply(&e);
        if job.function.is_some() {
            // A function that writes is refused up front by a replica
            // (READONLY), where a script is let in and says what the
            // replica's state is (MASTERDOWN when cut off from its
            // master): the script is sent then, as it is to a user not
            // let to call functions.
            match verdict {
                Verdict::Reload if !job.function_loaded => {
                    load_library.push(job);
                    continue;
                }
                Verdict::Refused => {
                    connection.no_functions();
                    job.function = None;
                    decided.push(again(job));
                    continue;
                }
                v if v == readonly => {
                    job.function = None;
                    decided.push(again(job));
                    continue;
                }
                _ => {}
            }
        } else if verdict == Verdict::Reload && !job.script_loaded {
            load_scripts.push(job);
            continue;
        }
        let error = failed(connection, &job, e.into());
        decided.push(answered(job, Err(error)));
    }
    if let Some(first) = load_library.first() {
        let loaded = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(&first.scripts.library.code)
            .query_async::<redis::Value>(&mut conn)
            .await;
        for mut job in load_library {
            match &loaded {
                Err(e) if verdict_of(e) == Verdict::Refused => {
                    connection.no_functions();
                    job.function = None;
                }
                Err(e) if verdict_of(e) == readonly => job.function = None,
                Err(e) if !is_library_loaded(e) => {
                    let error = failed(connection, &job, e.clone());
                    decided.push(answered(job, Err(error)));
                    continue;
                }
                _ => job.function_loaded = true,
            }
            decided.push(again(job));
        }
    }
    for mut job in load_scripts {
        let loaded = job.script.prepare_invoke().load_async(&mut conn).await;
        match loaded {
            Ok(_) => {
                job.script_loaded = true;
                decided.push(again(job));
            }
            Err(e) => {
                let error = failed(connection, &job, e);
                decided.push(answered(job, Err(error)));
            }
        }
    }
    let acked = match waited {
        redis::Value::Int(n) => Ok(u32::try_from(n).unwrap_or(0)),
        redis::Value::ServerError(e) => Err(redis::RedisError::from(e)),
        _ => Ok(0),
    };
    let acked = match acked {
        Ok(acked) => acked,
        // UNBLOCKED: a failover cut the WAIT short; each grant follows it.
        Err(e) => {
            for (job, _) in granted {
                let error = failed(connection, &job, e.clone());
                decided.push(answered(job, Err(error)));
            }
            return (Ok(decided), Vec::new());
        }
    };
    let short = granted.iter().any(|(job, _)| acked < job.wait.0);
    let mut listed = None;
    if short && granted.iter().any(|(job, _)| job.connected) {
        // A replica that left during the WAIT is not waited for: every
        // replica still there has the writes. Not read, the shortfall
        // stands.
        if connection.read_replicas_on(&mut conn).await.is_ok() {
            listed = Some(connection.replicas_asked());
        }
    }
    for (job, reply) in granted {
        let mut ack = Acked {
            asked: job.wait.0,
            acked,
        };
        if let (true, Some(listed)) = (job.connected, listed) {
            ack.asked = ack.asked.min(listed);
        }
        connection.note_ack(ack);
        decided.push(answered(job, Ok((reply, Some(ack)))));
    }
    (Ok(decided), Vec::new())
}

fn answered(job: Job, reply: Reply) -> Decided {
    (job, Some(reply))
}

fn again(job: Job) -> Decided {
    (job, None)
}

/// The error a server answered `job` with, as its connection reads it.
fn failed(connection: &Connection, job: &Job, e: redis::RedisError) -> Error {
    let error = Error::redis(&connection.address, &job.operation, e);
    if error.is_readonly() {
        connection.demoted();
    }
    error
}
