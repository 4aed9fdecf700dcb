//! W1 and W2 (`Mutex`) through Redis Sentinel (`redis+sentinel://`), next
//! to a direct connection (`redis://`) to the same master in the same run,
//! all with the default replica acknowledgement (`WAIT 1` behind every
//! acquiring script, since the master has one replica connected), and W1
//! through the sentinel with it off (`ReplicaAck::Off`): the price of an
//! acknowledgement next to the bare round trip. The group is a master with
//! one replica under one sentinel, started by the test kit; the figures
//! are for leasehold alone (rslock 0.10 has no Sentinel support).
//!
//! Through Sentinel the client asks the sentinel once for the master and
//! then talks to it as a direct client does, so W1 and W2 should be within
//! noise of the direct figures; the acknowledgement adds the replica's
//! round trip to the acquisition (the release is not acknowledged).

use super::*;

use leasehold::DEFAULT_REPLICA_TIMEOUT;
use leasehold_testkit::Sentinels;

/// The columns: through the sentinels, without an acknowledgement, and
/// direct (last: the ratios are over it).
const VIA: &str = "via sentinel";
const UNACKED: &str = "via sentinel, ack off";
const DIRECT: &str = "master direct";
const NO_PEER: &str = "rslock 0.10 has no Redis Sentinel support: not run";

pub(super) struct SentinelRuns {
    master_port: u16,
    replica_port: u16,
    /// Via the sentinel, acknowledged, direct.
    w1: Vec<W1Run>,
    /// Via the sentinel, direct.
    w2: Vec<W2Run>,
}

/// A `Mutex` whose grants no replica acknowledges.
struct LeaseholdUnacked(Client);

impl Library for LeaseholdUnacked {
    const NAME: &'static str = UNACKED;
    const PLAIN_COMMANDS: &'static [&'static str] = &["ping"];
    type Lock = Mutex;
    type Guard = MutexGuard;

    fn connect(url: &str) -> Result<Self> {
        Ok(LeaseholdUnacked(lock_client(url)?))
    }

    fn lock(&self, name: &str) -> Result<Self::Lock> {
        Ok(self
            .0
            .mutex(name)?
            .with_replica_ack(0, DEFAULT_REPLICA_TIMEOUT)?)
    }

    async fn acquire(lock: &Self::Lock) -> Result<Option<Self::Guard>> {
        LeaseholdMutex::acquire(lock).await
    }

    async fn try_acquire(lock: &Self::Lock) -> Result<Option<Self::Guard>> {
        LeaseholdMutex::try_acquire(lock).await
    }

    async fn waiting(lock: &Self::Lock) -> Result<Option<u64>> {
        LeaseholdMutex::waiting(lock).await
    }

    fn fence(guard: &Self::Guard) -> Option<u64> {
        LeaseholdMutex::fence(guard)
    }

    async fn release(guard: Self::Guard) -> Result<()> {
        LeaseholdMutex::release(guard).await
    }
}

/// Starts the group, runs W1 three ways and W2 two ways on its master, and
/// stops it.
pub(super) fn sentinel_runs(bench: &Bench) -> Result<SentinelRuns> {
    let group = Sentinels::builder(1, 1)
        .try_start()
        .map_err(|e| format!("cannot start a master with a replica under a sentinel: {e}"))?;
    let master = group.master();
    let direct_url = master.url();
    let via_url = group.url();
    let on = |name, url: &str| -> Result<Servers> {
        let data = bench.rt.block_on(connect(&direct_url))?;
        Ok(Servers {
            name,
            url: url.to_owned(),
            data_url: direct_url.clone(),
            masters: vec![data.clone()],
            data,
        })
    };
    let via = on(VIA, &via_url)?;
    let direct = on(DIRECT, &direct_url)?;
    let mut w1 = vec![
        w1_on::<LeaseholdMutex>(bench, &via.url, &via.data)?,
        w1_on::<LeaseholdUnacked>(bench, &via.url, &via.data)?,
        w1_on::<LeaseholdMutex>(bench, &direct.url, &direct.data)?,
    ];
    for (run, name) in w1.iter_mut().zip([VIA, UNACKED, DIRECT]) {
        run.library = name;
    }
    let mut w2 = vec![
        w2::<LeaseholdMutex>(bench, &via)?,
        w2::<LeaseholdMutex>(bench, &direct)?,
    ];
    for (run, name) in w2.iter_mut().zip([VIA, DIRECT]) {
        run.library = name;
    }
    Ok(SentinelRuns {
        master_port: master.port(),
        replica_port: group.replicas().first().map_or(0, |r| r.port()),
        w1,
        w2,
    })
}

/// What one acknowledgement adds to an acquisition, at p50 and p99, in µs.
fn ack_cost(runs: &SentinelRuns) -> (f64, f64) {
    let (acked, via) = (&runs.w1[0].run.acquire, &runs.w1[1].run.acquire);
    (
        round1(acked.p50_us() - via.p50_us()),
        round1(acked.p99_us() - via.p99_us()),
    )
}

pub(super) fn print_sentinel(plan: &Plan, runs: &SentinelRuns) {
    println!();
    println!(
        "sentinel: leasehold Mutex through a sentinel to a master (port {}) with a replica \
         (port {}), next to a direct connection to the same master; {NO_PEER}",
        runs.master_port, runs.replica_port
    );
    print_w1(plan, &runs.w1, false);
    let (p50, p99) = ack_cost(runs);
    row(
        "one acknowledgement adds, acquire p50 / p99",
        format!(
            "{} / {} µs (the default WAIT 1 behind the script, against ack off; the bare round trip: direct acquire p50 {} µs)",
            number(p50),
            number(p99),
            number(runs.w1[2].run.acquire.p50_us())
        ),
    );
    println!(
        "W2 contended through the sentinel: {W2_WORKERS} workers, {W2_LOCK}, {} s, \
         blocking acquire (30 s bound), {} ms hold",
        plan.w2_run.as_secs(),
        W2_HOLD.as_millis()
    );
    let table = Table::new(&[VIA, DIRECT]);
    w2_rows(&table, &runs.w2.iter().collect::<Vec<_>>());
}

fn head(plan: &Plan, workload: &str, runs: &SentinelRuns) -> Value {
    json!({
        "workload": workload,
        "quick": plan.quick,
        "library": LeaseholdMutex::NAME,
        "master_port": runs.master_port,
        "replica_port": runs.replica_port,
        "sentinels": 1,
        "peer": NO_PEER,
    })
}

pub(super) fn w1_sentinel_json(plan: &Plan, runs: &SentinelRuns) -> Value {
    let mut out = w1_json(plan, &runs.w1);
    let (p50, p99) = ack_cost(runs);
    if let (Some(object), Value::Object(head)) =
        (out.as_object_mut(), head(plan, "W1-sentinel", runs))
    {
        // W1's own keys name the columns "libraries"; here they are ways
        // of reaching the master.
        if let Some(columns) = object.remove("libraries") {
            object.insert("deployments".to_owned(), columns);
        }
        if let Some(ratios) = object.remove("ratio_leasehold_over_rslock") {
            object.insert("ratio_over_direct".to_owned(), ratios);
        }
        object.extend(head);
        object.insert(
            "ack".to_owned(),
            json!({
                "replicas": "connected (1)",
                "timeout_ms": DEFAULT_REPLICA_TIMEOUT.as_millis() as u64,
                "acquire_p50_us_added": p50,
                "acquire_p99_us_added": p99,
            }),
        );
    }
    out
}

pub(super) fn w2_sentinel_json(plan: &Plan, runs: &SentinelRuns) -> Value {
    let mut out = with(
        head(plan, "W2-sentinel", runs),
        compared_as(
            runs.w2.iter().map(|r| (r.library, w2_figures(r))).collect(),
            "deployments",
            "ratio_over_direct",
        ),
    );
    if let Some(object) = out.as_object_mut() {
        object.insert("workers".to_owned(), json!(W2_WORKERS));
        object.insert("seconds".to_owned(), json!(plan.w2_run.as_secs_f64()));
        object.insert("hold_ms".to_owned(), json!(W2_HOLD.as_secs_f64() * 1e3));
    }
    out
}

/// Whether a W2 run lost an update (each is said on standard error).
pub(super) fn lost_updates(runs: &SentinelRuns) -> bool {
    let mut lost = false;
    for run in &runs.w2 {
        if run.counter != run.acquisitions.len() as u64 {
            eprintln!(
                "workloads: W2 {} lost updates: the counter is {} after {} acquisitions",
                run.library,
                run.counter,
                run.acquisitions.len()
            );
            lost = true;
        }
    }
    lost
}
