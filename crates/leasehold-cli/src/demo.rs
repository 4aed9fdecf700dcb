//! `leasehold demo`: workers, each with a client of its own as separate
//! processes would have, contend for one lock on a private redis-server (or,
//! with `--cluster`, a private Redis Cluster) and update a shared counter in
//! the critical section. The counter stands in for
//! a database that checks fences: it takes a write only with a fence at least
//! as large as the last one it took. Without the lock, the read-modify-write
//! around the pause in the critical section would lose updates; the summary
//! checks that none was lost.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::{Duration, Instant};

use leasehold::redis;
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::cli::{Connection, DemoArgs};
use crate::exit::{self, Fail};
use crate::kind::{self, Kind, Lock};
use crate::plural;
use crate::private_cluster::PrivateCluster;
use crate::private_redis::PrivateRedis;
use crate::screen::{self, LiveView};
use crate::signals::Stop;

const LOCK_NAME: &str = "demo";
const LEASE: Duration = Duration::from_secs(10);
/// The pause between reading and writing the counter.
const WORK: Duration = Duration::from_millis(1);
const LIVE_PERIOD: Duration = Duration::from_millis(200);
const LINE_PERIOD: Duration = Duration::from_secs(1);
const BAR_WIDTH: f64 = 30.0;
/// Masters of the private cluster of `demo --cluster`.
const CLUSTER_MASTERS: usize = 3;

pub(crate) async fn demo(conn: &Connection, args: DemoArgs) -> anyhow::Result<ExitCode> {
    if conn.url_given() || args.url.is_some() {
        return Err(Fail {
            code: exit::USAGE,
            message: "the demo starts a redis-server of its own and takes no --url: run it \
                      without --url, and give --url to the other commands (run, acquire, ...) \
                      to use your Redis"
                .to_owned(),
        }
        .into());
    }
    if conn.redlock_given() || !args.redlock.is_empty() {
        return Err(Fail {
            code: exit::USAGE,
            message: "the demo starts a redis-server of its own and takes no --redlock: run it \
                      without --redlock, and give --redlock to the other commands (run, \
                      acquire, ...) to use your masters"
                .to_owned(),
        }
        .into());
    }
    // Heard from here on: a Ctrl-C while the servers start stops the ones
    // started so far.
    let mut signals = Stop::listen()?;
    let private = tokio::select! {
        started = Private::start(args.cluster) => started?,
        signal = signals.recv() => {
            return Err(Fail {
                code: u8::try_from(128 + signal).unwrap_or(exit::FAILURE),
                message: format!(
                    "{} stopped the demo while its servers started; those started were \
                     stopped",
                    signal_name(signal)
                ),
            }
            .into());
        }
    };
    private.announce();
    // The servers outlive every client and worker of the run.
    run_on(&private, conn, &args, signals).await
}

/// The demo's own Redis: one server, or a cluster.
#[derive(Debug)]
enum Private {
    Server(PrivateRedis),
    Cluster(PrivateCluster),
}

impl Private {
    async fn start(cluster: bool) -> anyhow::Result<Self> {
        Ok(if cluster {
            Private::Cluster(PrivateCluster::start(CLUSTER_MASTERS).await?)
        } else {
            Private::Server(PrivateRedis::start().await?)
        })
    }

    fn announce(&self) {
        match self {
            Private::Server(server) => eprintln!(
                "leasehold demo: started a private redis-server (pid {}) on 127.0.0.1:{}; \
                 it stops when the demo ends",
                server.pid(),
                server.port()
            ),
            Private::Cluster(cluster) => eprintln!(
                "leasehold demo: started a private Redis Cluster of {} masters \
                 (redis-server pids {}) on {}; it stops when the demo ends",
                cluster.nodes().len(),
                join(cluster.nodes().iter().map(PrivateRedis::pid)),
                join(cluster.nodes().iter().map(PrivateRedis::addr)),
            ),
        }
    }

    /// What the workers' clients are given: the server's URL, or every
    /// node as a seed.
    fn url(&self) -> String {
        match self {
            Private::Server(server) => server.url(),
            Private::Cluster(cluster) => cluster.urls().join(","),
        }
    }

    /// Every server, each of which counts the commands it ran.
    fn servers(&self) -> &[PrivateRedis] {
        match self {
            Private::Server(server) => std::slice::from_ref(server),
            Private::Cluster(cluster) => cluster.nodes(),
        }
    }

    fn is_cluster(&self) -> bool {
        matches!(self, Private::Cluster(_))
    }
}

/// The name of a signal that [`Stop`] hears.
fn signal_name(signal: libc::c_int) -> String {
    match signal {
        libc::SIGINT => "SIGINT".to_owned(),
        libc::SIGTERM => "SIGTERM".to_owned(),
        libc::SIGHUP => "SIGHUP".to_owned(),
        other => format!("signal {other}"),
    }
}

fn join<T: std::fmt::Display>(items: impl Iterator<Item = T>) -> String {
    items
        .map(|item| item.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where the lock lives, as the view and the summary say it.
#[derive(Debug)]
struct Place {
    /// The server that keeps the lock: on a cluster, its slot's master.
    server: String,
    /// Every node of the private cluster; empty on one server.
    cluster: Vec<String>,
}

async fn run_on(
    private: &Private,
    conn: &Connection,
    args: &DemoArgs,
    mut signals: Stop,
) -> anyhow::Result<ExitCode> {
    let mut stats = Vec::new();
    for server in private.servers() {
        stats.push(
            redis::Client::open(server.url())?
                .get_multiplexed_async_connection()
                .await?,
        );
    }
    let calls_before = command_calls(&mut stats).await?;

    let workers = usize::from(args.workers);
    let board = Arc::new(StdMutex::new(Board::new(workers)));
    let (stop_workers, stopped) = watch::channel(false);
    let mut clients = Vec::with_capacity(workers);
    let mut running = JoinSet::new();
    let mut server_of_lock = None;
    for index in 0..workers {
        let client = leasehold::Client::builder(private.url())
            .prefix(conn.prefix.clone())
            .lease(LEASE)
            .build()?;
        let kind = if args.fair { Kind::Fair } else { Kind::Mutex };
        let lock = kind::lock(&client, LOCK_NAME, kind, kind::Holding::default())?;
        if server_of_lock.is_none() {
            server_of_lock = Some(lock.inspect().await?.server);
        }
        clients.push(client);
        running.spawn(worker(index, lock, Arc::clone(&board), stopped.clone()));
    }
    let place = Place {
        server: server_of_lock.unwrap_or_default(),
        cluster: if private.is_cluster() {
            private.servers().iter().map(PrivateRedis::addr).collect()
        } else {
            Vec::new()
        },
    };

    let mut output = if args.json {
        Output::Quiet
    } else if screen::stdout_is_terminal() {
        Output::Live(LiveView::start()?)
    } else {
        Output::Lines
    };
    let period = match output {
        Output::Live(_) => LIVE_PERIOD,
        _ => LINE_PERIOD,
    };
    let started = Instant::now();
    let run_for = Duration::from_secs(args.seconds);
    let end = tokio::time::sleep(run_for);
    tokio::pin!(end);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    let mut rate = Rate::since(started);
    let mut failed = None;
    let interrupted = loop {
        tokio::select! {
            () = &mut end => break None,
            signal = signals.recv() => break Some(signal),
            Some(done) = running.join_next() => {
                // Workers end only when told to, or on an error.
                failed = Some(flatten(done));
                break None;
            }
            _ = tick.tick() => {
                let snapshot = locked(&board).snapshot();
                let per_second = rate.update(snapshot.acquisitions);
                let elapsed = started.elapsed();
                match &mut output {
                    Output::Live(view) => {
                        view.draw(&frame(&snapshot, args, &place, per_second, elapsed, run_for))?;
                    }
                    Output::Lines => println!("{}", line(&snapshot, per_second, elapsed)),
                    Output::Quiet => {}
                }
            }
        }
    };
    let _ = stop_workers.send(true);
    let mut outcome = failed.unwrap_or(Ok(()));
    while let Some(done) = running.join_next().await {
        outcome = outcome.and(flatten(done));
    }
    for client in &clients {
        client.flush().await;
    }
    let elapsed = started.elapsed();
    outcome?;
    let calls = command_calls(&mut stats)
        .await?
        .saturating_sub(calls_before);

    let snapshot = locked(&board).snapshot();
    if let Output::Live(view) = &mut output {
        let per_second = rate.update(snapshot.acquisitions);
        view.draw(&frame(
            &snapshot, args, &place, per_second, elapsed, run_for,
        ))?;
    }
    // Shows the cursor again before the summary.
    drop(output);
    let summary = Summary::new(&snapshot, &place, calls, elapsed);
    if args.json {
        println!("{}", summary.json(args, interrupted.is_some()));
    } else {
        print!("{}", summary.text(args));
    }
    if summary.lost_updates > 0 {
        return Err(Fail {
            code: exit::FAILURE,
            message: format!(
                "{} lost in {}: the lock did not keep the workers apart",
                plural::count(summary.lost_updates, "update", "updates"),
                plural::count(summary.acquisitions, "acquisition", "acquisitions")
            ),
        }
        .into());
    }
    Ok(match interrupted {
        Some(signal) => ExitCode::from(u8::try_from(128 + signal).unwrap_or(exit::FAILURE)),
        None => ExitCode::SUCCESS,
    })
}

enum Output {
    Live(LiveView),
    Lines,
    Quiet,
}

fn flatten(done: Result<leasehold::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    Ok(done??)
}

async fn worker(
    index: usize,
    lock: Lock,
    board: Arc<StdMutex<Board>>,
    mut stop: watch::Receiver<bool>,
) -> leasehold::Result<()> {
    loop {
        let asked = Instant::now();
        locked(&board).workers[index].waiting_since = Some(asked);
        let guard = tokio::select! {
            guard = lock.acquire() => guard?,
            // Dropping the acquire leaves nothing held.
            _ = stop.wait_for(|stop| *stop) => return Ok(()),
        };
        let fence = guard.fence();
        let seen = locked(&board).acquired(index, fence, asked.elapsed());
        tokio::time::sleep(WORK).await;
        locked(&board).write(index, fence, seen + 1);
        guard.release().await?;
    }
}

fn locked(board: &StdMutex<Board>) -> std::sync::MutexGuard<'_, Board> {
    // Every update leaves the board consistent, so a panicked holder leaves a usable one.
    board.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the workers did, shared with the view.
#[derive(Debug)]
struct Board {
    workers: Vec<WorkerState>,
    /// Every wait for the lock, in microseconds.
    waits: Vec<u32>,
    holder: Option<(usize, u64)>,
    counter: Counter,
}

#[derive(Debug, Default, Clone)]
struct WorkerState {
    acquisitions: u64,
    waiting_since: Option<Instant>,
}

/// The shared resource: a counter that refuses writes with a stale fence.
#[derive(Debug, Default, Clone, Copy)]
struct Counter {
    value: u64,
    last_fence: u64,
    refused: u64,
}

impl Board {
    fn new(workers: usize) -> Self {
        Board {
            workers: vec![WorkerState::default(); workers],
            waits: Vec::new(),
            holder: None,
            counter: Counter::default(),
        }
    }

    /// Records a wait that ended with the lock, and returns the counter as
    /// the new holder reads it.
    fn acquired(&mut self, index: usize, fence: u64, waited: Duration) -> u64 {
        self.workers[index].waiting_since = None;
        self.waits
            .push(u32::try_from(waited.as_micros()).unwrap_or(u32::MAX));
        self.holder = Some((index, fence));
        self.counter.value
    }

    /// The holder's write, which completes its acquisition: counted here,
    /// so that the counter matches the acquisitions at every moment.
    fn write(&mut self, index: usize, fence: u64, value: u64) {
        self.workers[index].acquisitions += 1;
        if fence >= self.counter.last_fence {
            self.counter.last_fence = fence;
            self.counter.value = value;
        } else {
            self.counter.refused += 1;
        }
        if self.holder.is_some_and(|(holder, _)| holder == index) {
            self.holder = None;
        }
    }

    fn snapshot(&self) -> Snapshot {
        let mut waits = self.waits.clone();
        waits.sort_unstable();
        let now = Instant::now();
        Snapshot {
            acquisitions: self.workers.iter().map(|w| w.acquisitions).sum(),
            per_worker: self.workers.iter().map(|w| w.acquisitions).collect(),
            waiting_for: self
                .workers
                .iter()
                .map(|w| w.waiting_since.map(|since| now - since))
                .collect(),
            waits,
            holder: self.holder,
            counter: self.counter,
        }
    }
}

#[derive(Debug)]
struct Snapshot {
    acquisitions: u64,
    per_worker: Vec<u64>,
    waiting_for: Vec<Option<Duration>>,
    /// Sorted, in microseconds.
    waits: Vec<u32>,
    holder: Option<(usize, u64)>,
    counter: Counter,
}

impl Snapshot {
    fn share(&self, index: usize) -> f64 {
        match self.acquisitions {
            0 => 0.0,
            total => self.per_worker[index] as f64 / total as f64,
        }
    }

    /// The wait at quantile `q`, in milliseconds.
    fn wait_ms(&self, q: f64) -> f64 {
        let Some(last) = self.waits.len().checked_sub(1) else {
            return 0.0;
        };
        let at = ((last as f64) * q).round() as usize;
        f64::from(self.waits[at.min(last)]) / 1000.0
    }

    fn lost_updates(&self) -> u64 {
        self.acquisitions.saturating_sub(self.counter.value)
    }
}

/// Hand-offs per second over the last second or so.
#[derive(Debug)]
struct Rate {
    seen: VecDeque<(Instant, u64)>,
}

impl Rate {
    fn since(start: Instant) -> Self {
        Rate {
            seen: VecDeque::from([(start, 0)]),
        }
    }

    fn update(&mut self, acquisitions: u64) -> f64 {
        let now = Instant::now();
        self.seen.push_back((now, acquisitions));
        while self.seen.len() > 2
            && self
                .seen
                .get(1)
                .is_some_and(|(at, _)| now - *at >= Duration::from_secs(1))
        {
            self.seen.pop_front();
        }
        match self.seen.front() {
            Some((at, count)) if now > *at => {
                (acquisitions - count) as f64 / (now - *at).as_secs_f64()
            }
            _ => 0.0,
        }
    }
}

fn kind(args: &DemoArgs) -> &'static str {
    if args.fair {
        "FairMutex"
    } else {
        "Mutex"
    }
}

fn frame(
    s: &Snapshot,
    args: &DemoArgs,
    place: &Place,
    per_second: f64,
    elapsed: Duration,
    run_for: Duration,
) -> Vec<String> {
    let mut lines = vec![
        format!(
            "lock {LOCK_NAME:?} ({}) on {}, {}, {:.1} s of {} s; Ctrl-C stops",
            kind(args),
            place.server,
            plural::count(args.workers, "worker", "workers"),
            elapsed.as_secs_f64().min(run_for.as_secs_f64()),
            run_for.as_secs()
        ),
        match s.holder {
            Some((index, fence)) => format!("holder   w{}, fence {fence}", index + 1),
            None => "holder   none (between hand-offs)".to_owned(),
        },
        format!(
            "rate     {per_second:.0} hand-offs/s, {}, counter {} ({})",
            plural::count(s.acquisitions, "acquisition", "acquisitions"),
            s.counter.value,
            match s.lost_updates() {
                0 => "no update lost".to_owned(),
                n => format!("{} lost", plural::count(n, "update", "updates")),
            }
        ),
        format!(
            "wait     p50 {:.1} ms   p99 {:.1} ms   max {:.1} ms",
            s.wait_ms(0.5),
            s.wait_ms(0.99),
            s.wait_ms(1.0)
        ),
        String::new(),
        format!(
            "worker  acquisitions  share{:w$}  now",
            "",
            w = BAR_WIDTH as usize + 2
        ),
    ];
    for (index, count) in s.per_worker.iter().enumerate() {
        let share = s.share(index);
        let bar = "#".repeat((share * BAR_WIDTH).round() as usize);
        let now = match (s.holder, s.waiting_for[index]) {
            (Some((holder, _)), _) if holder == index => "holds the lock".to_owned(),
            (_, Some(waited)) => format!("waiting {:.1} ms", waited.as_secs_f64() * 1000.0),
            _ => String::new(),
        };
        lines.push(format!(
            "w{:<6} {count:>12}  {:>5.1}% {bar:<w$}  {now}",
            index + 1,
            share * 100.0,
            w = BAR_WIDTH as usize
        ));
    }
    lines
}

fn line(s: &Snapshot, per_second: f64, elapsed: Duration) -> String {
    let mut text = format!(
        "{:>4.1}s  {} ({per_second:.0}/s), counter {}, ",
        elapsed.as_secs_f64(),
        plural::count(s.acquisitions, "acquisition", "acquisitions"),
        s.counter.value
    );
    match s.holder {
        Some((index, fence)) => {
            let _ = write!(text, "holder w{} fence {fence}, ", index + 1);
        }
        None => text.push_str("no holder, "),
    }
    text.push_str("shares");
    for index in 0..s.per_worker.len() {
        let _ = write!(text, " w{} {:.0}%", index + 1, s.share(index) * 100.0);
    }
    let _ = write!(
        text,
        ", wait p50 {:.1} ms max {:.1} ms",
        s.wait_ms(0.5),
        s.wait_ms(1.0)
    );
    text
}

#[derive(Debug)]
struct Summary<'a> {
    snapshot: &'a Snapshot,
    place: &'a Place,
    acquisitions: u64,
    calls_per_acquisition: Option<f64>,
    lost_updates: u64,
    elapsed: Duration,
}

impl<'a> Summary<'a> {
    fn new(snapshot: &'a Snapshot, place: &'a Place, calls: u64, elapsed: Duration) -> Self {
        Summary {
            snapshot,
            place,
            acquisitions: snapshot.acquisitions,
            calls_per_acquisition: (snapshot.acquisitions > 0)
                .then(|| calls as f64 / snapshot.acquisitions as f64),
            lost_updates: snapshot.lost_updates(),
            elapsed,
        }
    }

    fn json(&self, args: &DemoArgs, interrupted: bool) -> serde_json::Value {
        let s = self.snapshot;
        json!({
            "lock": LOCK_NAME,
            "fair": args.fair,
            "workers": args.workers,
            "seconds": round(self.elapsed.as_secs_f64(), 2),
            "interrupted": interrupted,
            "acquisitions": self.acquisitions,
            "worker_acquisitions": s.per_worker,
            "shares": (0..s.per_worker.len()).map(|i| round(s.share(i), 4)).collect::<Vec<_>>(),
            "wait_ms": {
                "p50": round(s.wait_ms(0.5), 3),
                "p99": round(s.wait_ms(0.99), 3),
                "max": round(s.wait_ms(1.0), 3),
            },
            "calls_per_acquisition": self.calls_per_acquisition.map(|c| round(c, 2)),
            "counter": s.counter.value,
            "lost_updates": self.lost_updates,
            "stale_writes_refused": s.counter.refused,
            "server": self.place.server,
            "cluster": !self.place.cluster.is_empty(),
            "cluster_nodes": self.place.cluster,
        })
    }

    fn text(&self, args: &DemoArgs) -> String {
        let s = self.snapshot;
        let seconds = self.elapsed.as_secs_f64();
        let mut text = format!(
            "\n{} took lock {LOCK_NAME:?} ({}) for {seconds:.1} s\n",
            plural::count(args.workers, "worker", "workers"),
            kind(args)
        );
        if self.place.cluster.is_empty() {
            let _ = writeln!(text, "server        {}", self.place.server);
        } else {
            let _ = writeln!(
                text,
                "server        {}, the master of the lock's hash slot",
                self.place.server
            );
            let _ = writeln!(
                text,
                "cluster       {} masters: {}",
                self.place.cluster.len(),
                self.place.cluster.join(", ")
            );
        }
        let _ = writeln!(
            text,
            "acquisitions  {} ({:.0} a second)",
            self.acquisitions,
            self.acquisitions as f64 / seconds.max(f64::EPSILON)
        );
        text.push_str("shares       ");
        for index in 0..s.per_worker.len() {
            let _ = write!(text, " w{} {:.1}%", index + 1, s.share(index) * 100.0);
        }
        let _ = writeln!(
            text,
            "\nwait          p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            s.wait_ms(0.5),
            s.wait_ms(0.99),
            s.wait_ms(1.0)
        );
        if let Some(calls) = self.calls_per_acquisition {
            let servers = if self.place.cluster.is_empty() {
                "the server"
            } else {
                "the cluster's nodes"
            };
            let _ = writeln!(
                text,
                "redis calls   {calls:.1} per acquisition (INFO commandstats: every command \
                 {servers} ran, those inside scripts included)"
            );
        }
        match self.lost_updates {
            0 => {
                let _ = writeln!(
                    text,
                    "counter       {} = acquisitions: no update lost",
                    s.counter.value
                );
            }
            lost => {
                let _ = writeln!(
                    text,
                    "counter       {} for {}: {} LOST",
                    s.counter.value,
                    plural::count(self.acquisitions, "acquisition", "acquisitions"),
                    plural::count(lost, "update", "updates")
                );
            }
        }
        if !args.fair {
            text.push_str(
                "\nA Mutex lets whoever asks first take a free lock; run `leasehold demo --fair` \
                 to see FairMutex serve the workers in turn.\n",
            );
        }
        text.push_str(
            "Next: `leasehold run NAME -- CMD` runs a command under a lock on your own Redis \
             (--url, default redis://127.0.0.1:6379).\n",
        );
        text
    }
}

fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

/// Every command the servers have run (those of scripts included), from
/// `INFO commandstats` on each, less the `INFO` calls that read them.
async fn command_calls(conns: &mut [redis::aio::MultiplexedConnection]) -> anyhow::Result<u64> {
    let mut calls = 0u64;
    for conn in conns {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(conn)
            .await?;
        calls = info
            .lines()
            .filter_map(|line| line.strip_prefix("cmdstat_"))
            .filter(|line| !line.starts_with("info:"))
            .filter_map(|line| line.split_once(":calls="))
            .filter_map(|(_, rest)| rest.split(',').next()?.parse::<u64>().ok())
            .fold(calls, u64::saturating_add);
    }
    Ok(calls)
}
