//! W2 (`Mutex`) and W3 once more on a Redis Cluster of three masters
//! started by the test kit (no replicas, persistence off as on the single
//! node), for leasehold alone: rslock 0.10 has no Redis Cluster support.
//! Each figure is printed next to the single node's from the same run.
//!
//! The lock clients get every node's URL as seeds and send each lock to the
//! master of its slot; W2's counter is read and written on the master of
//! its own slot. Server cost is summed over the masters (`INFO commandstats`
//! and `INFO cpu` before and after on each), and a master's share of W3's
//! attempts is its share of the scripts (EVALSHA and FCALL): an attempt is
//! one, and the release after a success is another on the same master.

use super::*;

use leasehold_testkit::RedisCluster;

const MASTERS: usize = 3;
/// The cluster's and the single node's columns, the cluster's first (the
/// ratio is the cluster's over the single node's).
const CLUSTER: &str = "cluster";
const SINGLE: &str = "single node";
const NO_PEER: &str = "rslock 0.10 has no Redis Cluster support: not run";
/// How far the cluster's W3 may fall behind the single node's: attempts/s
/// at least theirs / this, Redis CPU per attempt at most theirs × this.
const W3_SLACK: f64 = 1.1;
/// How far a master's share of W3's attempts may be from a third.
const SHARE_SLACK: f64 = 0.05;
/// W2 Mutex Redis calls per acquisition must equal the single node's: the
/// same scripts run on one master either way. Equal within this share of
/// it, since the figure is an average over a mix of paths that timing
/// decides (a releaser that takes the lock straight back costs fewer calls
/// than a waiter woken to take it): the single node's own figure moved by
/// about 1 % from run to run on the development machine.
const W2_CALLS_SLACK: f64 = 0.01;

pub(super) struct ClusterRuns {
    pub(super) name: &'static str,
    /// The masters' ports, in the order of [`W3Run::per_master`].
    ports: Vec<u16>,
    /// Where the bench and the masters ran (see `pinning.rs`).
    cpus: String,
    pub(super) w2: W2Run,
    w3: W3Run,
}

/// Starts the cluster, runs W2 (`Mutex`) and W3 on it as on the single
/// node, and stops it.
pub(super) fn cluster_runs(bench: &Bench) -> Result<ClusterRuns> {
    let cluster = RedisCluster::builder(MASTERS, 0)
        .try_start()
        .map_err(|e| format!("cannot start a Redis Cluster of {MASTERS} masters: {e}"))?;
    let on = bench.rt.block_on(servers(&cluster))?;
    let w2 = w2::<LeaseholdMutex>(bench, &on)?;
    let w3 = w3::<LeaseholdMutex>(bench, &on)?;
    Ok(ClusterRuns {
        name: on.name,
        ports: cluster.masters().iter().map(|m| m.port()).collect(),
        cpus: super::pinning::describe(
            &cluster
                .masters()
                .iter()
                .map(|m| m.pid())
                .collect::<Vec<_>>(),
        ),
        w2,
        w3,
    })
}

async fn servers(cluster: &RedisCluster) -> Result<Servers> {
    let data_url = cluster.master_for_key(W2_COUNTER).url();
    let mut masters = Vec::with_capacity(MASTERS);
    for master in cluster.masters() {
        masters.push(connect(&master.url()).await?);
    }
    Ok(Servers {
        name: "3-master cluster",
        url: cluster.urls().join(","),
        data: connect(&data_url).await?,
        data_url,
        masters,
    })
}

/// Each master's share of W3's attempts: of the scripts it ran (EVALSHA,
/// or FCALL where the server has functions).
fn shares(run: &W3Run) -> Vec<f64> {
    let scripts = |c: &ServerCost| c.get("evalsha") + c.get("fcall");
    let total: u64 = run.per_master.iter().map(scripts).sum();
    run.per_master
        .iter()
        .map(|c| {
            if total == 0 {
                0.0
            } else {
                round3(scripts(c) as f64 / total as f64)
            }
        })
        .collect()
}

/// Each master's Redis CPU per attempt it served (its share of them).
fn cpu_per_attempt(run: &W3Run) -> Vec<f64> {
    run.per_master
        .iter()
        .zip(shares(run))
        .map(|(cost, share)| {
            let attempts = share * run.attempts as f64;
            if attempts == 0.0 {
                0.0
            } else {
                round1(cost.cpu_us / attempts)
            }
        })
        .collect()
}

pub(super) fn print_cluster(
    plan: &Plan,
    w2: &[W2Run],
    w3: &[W3Run],
    runs: &ClusterRuns,
) -> Result<()> {
    let ports: Vec<String> = runs.ports.iter().map(u16::to_string).collect();
    println!();
    println!(
        "cluster: leasehold Mutex on a Redis Cluster of {MASTERS} masters (ports {}), \
         next to the single node of this run; {NO_PEER}",
        ports.join(", ")
    );
    println!("{}", runs.cpus);
    println!(
        "W3 many keys on the cluster: {W3_WORKERS} workers, {W3_KEYS} keys, {} s, \
         one non-waiting attempt on a random key, release on success",
        plan.w3_run.as_secs()
    );
    let table = Table::new(&[CLUSTER, SINGLE]);
    w3_rows(&table, &[&runs.w3, w3_run(w3, LeaseholdMutex::NAME)?]);
    let single = w3_run(w3, LeaseholdMutex::NAME)?;
    for (i, ((port, share), cpu)) in runs
        .ports
        .iter()
        .zip(shares(&runs.w3))
        .zip(cpu_per_attempt(&runs.w3))
        .enumerate()
    {
        table.text(
            &format!("master {i} (port {port}): share / CPU µs per attempt"),
            &[
                format!("{} / {}", number(share), number(cpu)),
                // The single node serves every attempt.
                if i == 0 {
                    format!("1 / {}", number(single.lock.cpu_us))
                } else {
                    "-".to_owned()
                },
            ],
        );
    }
    row(
        "",
        "calls and CPU are summed over the masters; a master's share of the \
         attempts is its share of the scripts, EVALSHA and FCALL (fair 0.333)",
    );
    println!(
        "W2 contended on the cluster: {W2_WORKERS} workers, {W2_LOCK}, {} s, \
         blocking acquire (30 s bound), {} ms hold",
        plan.w2_run.as_secs(),
        W2_HOLD.as_millis()
    );
    let table = Table::new(&[CLUSTER, SINGLE]);
    w2_rows(&table, &[&runs.w2, w2_run(w2, LeaseholdMutex::NAME)?]);
    Ok(())
}

/// The cluster targets, judged on this run's figures: the cluster's W3 as
/// fast and as cheap as the single node's within 1.1×, its attempts spread
/// evenly over the masters, and W2's calls per acquisition the same.
pub(super) fn targets(w2: &[W2Run], w3: &[W3Run], runs: &ClusterRuns) -> Result<Vec<Target>> {
    let mut out = Vec::new();
    let single = w3_run(w3, LeaseholdMutex::NAME)?;
    let ours = &runs.w3;
    let single_per_s = per_second(single.attempts, single.elapsed);
    out.push(Target::new(
        "W3",
        "cluster: Mutex attempts/s ≥ single node's / 1.1",
        Some(per_second(ours.attempts, ours.elapsed)),
        Bound::AtLeast(single_per_s / W3_SLACK),
        format!("single node {}/s", number(single_per_s)),
    ));
    out.push(Target::new(
        "W3",
        "cluster: redis CPU µs / attempt ≤ 1.1 × single node's",
        Some(ours.lock.cpu_us),
        Bound::AtMost(W3_SLACK * single.lock.cpu_us),
        format!(
            "summed over the masters; single node {} µs",
            number(single.lock.cpu_us)
        ),
    ));
    let shares = shares(ours);
    let third = 1.0 / MASTERS as f64;
    let worst = shares
        .iter()
        .copied()
        .max_by(|a, b| (a - third).abs().total_cmp(&(b - third).abs()))
        .unwrap_or(0.0);
    out.push(Target::new(
        "W3",
        "cluster: every master's share of attempts ⅓ ± 0.05",
        Some(worst),
        Bound::Within(third - SHARE_SLACK, third + SHARE_SLACK),
        format!(
            "the share farthest from ⅓, of scripts per master; all {}",
            shares
                .iter()
                .map(|&s| number(s))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    ));
    let single = w2_run(w2, LeaseholdMutex::NAME)?.lock.calls;
    out.push(Target::new(
        "W2",
        "cluster: Mutex redis calls / acquisition = single's",
        Some(runs.w2.lock.calls),
        Bound::Within(
            single * (1.0 - W2_CALLS_SLACK),
            single * (1.0 + W2_CALLS_SLACK),
        ),
        format!(
            "single node {} (± {} %: timing picks the paths); summed over the masters",
            number(single),
            W2_CALLS_SLACK * 100.0
        ),
    ));
    Ok(out)
}

/// The head of a cluster workload's JSON object.
fn head(plan: &Plan, workload: &str, runs: &ClusterRuns) -> Value {
    json!({
        "workload": workload,
        "quick": plan.quick,
        "library": LeaseholdMutex::NAME,
        "masters": MASTERS,
        "master_ports": runs.ports,
        "peer": NO_PEER,
        "cluster_redis_calls_and_cpu_are": "summed over the masters: INFO commandstats and INFO cpu before and after on each",
    })
}

pub(super) fn w3_cluster_json(plan: &Plan, w3: &[W3Run], runs: &ClusterRuns) -> Result<Value> {
    let single = w3_run(w3, LeaseholdMutex::NAME)?;
    let mut cluster = w3_figures(&runs.w3);
    let masters: Vec<Value> = runs
        .ports
        .iter()
        .zip(&runs.w3.per_master)
        .zip(shares(&runs.w3))
        .zip(cpu_per_attempt(&runs.w3))
        .map(|(((port, cost), share), cpu)| {
            json!({
                "port": port,
                "share_of_attempts": share,
                "redis_cpu_us": round1(cost.cpu_us),
                "redis_cpu_us_per_attempt_served": cpu,
                "redis_calls": cost.calls_json(),
            })
        })
        .collect();
    if let Some(object) = cluster.as_object_mut() {
        object.insert("per_master".to_owned(), json!(masters));
    }
    let mut out = with(
        head(plan, "W3-cluster", runs),
        compared_as(
            vec![(CLUSTER, cluster), (SINGLE, w3_figures(single))],
            "deployments",
            "ratio_cluster_over_single",
        ),
    );
    if let Some(object) = out.as_object_mut() {
        object.insert("workers".to_owned(), json!(W3_WORKERS));
        object.insert("keys".to_owned(), json!(W3_KEYS));
        object.insert("seconds".to_owned(), json!(plan.w3_run.as_secs_f64()));
        object.insert(
            "share_of_attempts_is".to_owned(),
            json!("the master's share of the scripts, EVALSHA and FCALL (an attempt, and a release after a success)"),
        );
    }
    Ok(out)
}

pub(super) fn w2_cluster_json(plan: &Plan, w2: &[W2Run], runs: &ClusterRuns) -> Result<Value> {
    let single = w2_run(w2, LeaseholdMutex::NAME)?;
    let mut out = with(
        head(plan, "W2-cluster", runs),
        compared_as(
            vec![
                (CLUSTER, w2_figures(&runs.w2)),
                (SINGLE, w2_figures(single)),
            ],
            "deployments",
            "ratio_cluster_over_single",
        ),
    );
    if let Some(object) = out.as_object_mut() {
        object.insert("workers".to_owned(), json!(W2_WORKERS));
        object.insert("seconds".to_owned(), json!(plan.w2_run.as_secs_f64()));
        object.insert("hold_ms".to_owned(), json!(W2_HOLD.as_secs_f64() * 1e3));
        object.insert(
            "calls_and_round_trips_exclude".to_owned(),
            json!("the critical section's GET and SET"),
        );
    }
    Ok(out)
}
