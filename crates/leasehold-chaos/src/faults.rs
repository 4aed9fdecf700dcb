//! The fault schedules: which faults a run injects, at which strengths, drawn
//! from a seeded generator. The first nine strike one Redis server and the
//! workers' connections to it; the `cluster-` schedules strike a Redis
//! Cluster's shards; the `sentinel` schedules fail over a master watched
//! by Redis Sentinel; the `redlock-` schedules strike one of the
//! independent masters of a Redlock at a time.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};

use crate::rng::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Schedule {
    Pause,
    Kill,
    Restart,
    ClientPause,
    Latency,
    Blackhole,
    Reset,
    HalfOpen,
    Mixed,
    ClusterFailover,
    ClusterKill,
    ClusterMigrate,
    SentinelFailover,
    SentinelKill,
    Sentinel,
    RedlockKill,
    RedlockRestart,
    RedlockPause,
    RedlockLatency,
    RedlockBlackhole,
}

impl Schedule {
    pub(crate) const ALL: [Schedule; 9] = [
        Schedule::Pause,
        Schedule::Kill,
        Schedule::Restart,
        Schedule::ClientPause,
        Schedule::Latency,
        Schedule::Blackhole,
        Schedule::Reset,
        Schedule::HalfOpen,
        Schedule::Mixed,
    ];

    /// The schedules of a Redis Cluster: `--schedule cluster`. Not in
    /// `all`, which runs on one server: a cluster takes six servers and
    /// longer runs, and the published `all` figures stay reproducible.
    pub(crate) const CLUSTER: [Schedule; 3] = [
        Schedule::ClusterFailover,
        Schedule::ClusterKill,
        Schedule::ClusterMigrate,
    ];

    /// The schedules of a master with a replica under three sentinels:
    /// `sentinel` draws a failover by command or a kill at random, the
    /// other two one of them each time. Not in `all` either.
    pub(crate) const SENTINEL: [Schedule; 3] = [
        Schedule::SentinelFailover,
        Schedule::SentinelKill,
        Schedule::Sentinel,
    ];

    /// The schedules of a Redlock over independent masters: `--schedule
    /// redlock` runs them in turn. Not in `all` either: they take N
    /// servers, and their workers take Redlock mutexes only.
    pub(crate) const REDLOCK: [Schedule; 5] = [
        Schedule::RedlockKill,
        Schedule::RedlockRestart,
        Schedule::RedlockPause,
        Schedule::RedlockLatency,
        Schedule::RedlockBlackhole,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Schedule::Pause => "pause",
            Schedule::Kill => "kill",
            Schedule::Restart => "restart",
            Schedule::ClientPause => "client-pause",
            Schedule::Latency => "latency",
            Schedule::Blackhole => "blackhole",
            Schedule::Reset => "reset",
            Schedule::HalfOpen => "half-open",
            Schedule::Mixed => "mixed",
            Schedule::ClusterFailover => "cluster-failover",
            Schedule::ClusterKill => "cluster-kill",
            Schedule::ClusterMigrate => "cluster-migrate",
            Schedule::SentinelFailover => "sentinel-failover",
            Schedule::SentinelKill => "sentinel-kill",
            Schedule::Sentinel => "sentinel",
            Schedule::RedlockKill => "redlock-kill",
            Schedule::RedlockRestart => "redlock-restart",
            Schedule::RedlockPause => "redlock-pause",
            Schedule::RedlockLatency => "redlock-latency",
            Schedule::RedlockBlackhole => "redlock-blackhole",
        }
    }

    /// One schedule by name, every one-server schedule for `all`, every
    /// cluster schedule for `cluster`, or every Redlock schedule for
    /// `redlock` (`sentinel` is one schedule, a mix).
    pub(crate) fn parse_list(name: &str) -> Result<Vec<Schedule>> {
        match name {
            "all" => return Ok(Schedule::ALL.to_vec()),
            "cluster" => return Ok(Schedule::CLUSTER.to_vec()),
            "redlock" => return Ok(Schedule::REDLOCK.to_vec()),
            _ => {}
        }
        match Schedule::ALL
            .iter()
            .chain(&Schedule::CLUSTER)
            .chain(&Schedule::SENTINEL)
            .chain(&Schedule::REDLOCK)
            .find(|s| s.name() == name)
        {
            Some(s) => Ok(vec![*s]),
            None => bail!(
                "unknown schedule {name:?}: use one of {}, or all; or one of {}, or cluster; \
                 or one of {}; or one of {}, or redlock",
                Schedule::ALL.map(Schedule::name).join(", "),
                Schedule::CLUSTER.map(Schedule::name).join(", "),
                Schedule::SENTINEL.map(Schedule::name).join(", "),
                Schedule::REDLOCK.map(Schedule::name).join(", ")
            ),
        }
    }

    /// Whether the schedule runs on the independent masters of a Redlock.
    pub(crate) fn on_redlock(self) -> bool {
        Schedule::REDLOCK.contains(&self)
    }

    /// Whether a Redlock schedule's masters keep an AOF (`appendfsync
    /// always`), so that a killed master comes back with its locks.
    pub(crate) fn persists_masters(self) -> bool {
        self == Schedule::RedlockKill
    }

    /// Whether the schedule runs on a Redis Cluster.
    pub(crate) fn on_cluster(self) -> bool {
        Schedule::CLUSTER.contains(&self)
    }

    /// Whether the schedule runs on a master watched by Redis Sentinel.
    pub(crate) fn on_sentinel(self) -> bool {
        Schedule::SENTINEL.contains(&self)
    }

    /// Whether the schedule restarts Redis (the server then keeps an AOF,
    /// which a restart "without AOF" removes first).
    pub(crate) fn restarts(self) -> bool {
        matches!(self, Schedule::Restart | Schedule::Mixed)
    }

    /// The next fault, its strength scaled to `lease`. A cluster fault is
    /// drawn for shard 0 (slot 0), a Redlock fault for master 0: the run
    /// aims it when it strikes.
    pub(crate) fn draw(self, rng: &mut Rng, lease: Duration) -> Fault {
        let schedule = match self {
            Schedule::Mixed => *rng.pick(&Schedule::ALL[..8]),
            Schedule::Sentinel => *rng.pick(&Schedule::SENTINEL[..2]),
            s => s,
        };
        match schedule {
            Schedule::Pause => Fault::Pause(lease.mul_f64(*rng.pick(&[0.5, 1.0, 3.0]))),
            Schedule::Kill => Fault::Kill,
            Schedule::Restart => Fault::Restart {
                aof: rng.chance(0.5),
                down: if rng.chance(0.5) {
                    Duration::ZERO
                } else {
                    lease.mul_f64(1.5)
                },
            },
            Schedule::ClientPause => {
                Fault::ClientPause(lease.mul_f64(*rng.pick(&[0.5, 1.0, 2.0, 3.0])))
            }
            Schedule::Latency => Fault::Latency {
                replies_only: rng.chance(0.5),
                latency: lease.mul_f64(*rng.pick(&[0.1, 0.5, 1.5])),
                lasting: lease * 2,
            },
            Schedule::Blackhole => Fault::Blackhole(lease.mul_f64(*rng.pick(&[0.5, 1.0, 3.0]))),
            Schedule::Reset => Fault::Reset,
            Schedule::HalfOpen | Schedule::Mixed => Fault::HalfOpen,
            Schedule::ClusterFailover => Fault::Failover { shard: 0 },
            Schedule::ClusterKill => Fault::KillMaster {
                shard: 0,
                lag: lease.mul_f64(*rng.pick(&[0.0, 0.5, 1.0])),
            },
            Schedule::ClusterMigrate => Fault::Migrate {
                slot: 0,
                to: 0,
                step: lease.mul_f64(*rng.pick(&[0.05, 0.2])),
            },
            Schedule::SentinelFailover => Fault::SentinelFailover {
                lag: lease.mul_f64(*rng.pick(&[0.0, 0.5, 1.0])),
            },
            Schedule::SentinelKill | Schedule::Sentinel => Fault::SentinelKill {
                lag: lease.mul_f64(*rng.pick(&[0.0, 0.5, 1.0])),
            },
            Schedule::RedlockKill | Schedule::RedlockRestart => Fault::MasterKill {
                master: 0,
                aof: schedule == Schedule::RedlockKill,
                down: lease.mul_f64(*rng.pick(&[0.0, 0.5])),
            },
            Schedule::RedlockPause => Fault::MasterPause {
                master: 0,
                stop: lease.mul_f64(*rng.pick(&[0.5, 1.0, 3.0])),
            },
            Schedule::RedlockLatency => Fault::MasterLatency {
                master: 0,
                replies_only: rng.chance(0.5),
                latency: lease.mul_f64(*rng.pick(&[0.1, 0.5, 1.5])),
                lasting: lease * 2,
            },
            Schedule::RedlockBlackhole => Fault::MasterBlackhole {
                master: 0,
                held: lease.mul_f64(*rng.pick(&[0.5, 1.0, 3.0])),
            },
        }
    }
}

/// One fault, with its strength.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fault {
    /// SIGSTOP a worker for this long, then SIGCONT.
    Pause(Duration),
    /// SIGKILL a worker (a new one takes its place).
    Kill,
    /// Kill Redis, keep it down this long, start it again; without `aof`
    /// its data is gone.
    Restart { aof: bool, down: Duration },
    /// `CLIENT PAUSE` for this long.
    ClientPause(Duration),
    /// Delay a worker's traffic (both ways, or its replies only).
    Latency {
        replies_only: bool,
        latency: Duration,
        lasting: Duration,
    },
    /// Hold a worker's bytes for this long, then deliver them.
    Blackhole(Duration),
    /// Abort a worker's connections with a TCP RST.
    Reset,
    /// Freeze a worker's open connections for good; new ones pass.
    HalfOpen,
    /// A graceful `CLUSTER FAILOVER` of a shard: its replica catches up,
    /// then takes over.
    Failover { shard: usize },
    /// SIGKILL of a shard's master; its replica takes over, and the killed
    /// node is started again and rejoins as a replica. With a `lag`, the
    /// replicas stop applying their masters' writes (`CLIENT PAUSE WRITE`)
    /// this long before the kill: the one that takes over does so without
    /// them, as a replica that lags behind does.
    KillMaster { shard: usize, lag: Duration },
    /// The slot `slot` moves to shard `to`: its keys one by one, `step`
    /// apart, while clients are redirected (ASK, TRYAGAIN), then the rest
    /// and the slot itself.
    Migrate {
        slot: u16,
        to: usize,
        step: Duration,
    },
    /// `SENTINEL FAILOVER`: the sentinels promote the replica at once,
    /// without waiting for it to catch up, and leave the old master taking
    /// writes until they make it a replica some ten seconds later. With a
    /// `lag`, the replica is cut off from the master this long before (its
    /// `PSYNC` refused), as a replica that lags behind: it takes over
    /// without the master's last writes.
    SentinelFailover { lag: Duration },
    /// SIGKILL of the master; the sentinels promote the replica once it is
    /// down for their down-after time, and the killed server is started
    /// again as a replica. The `lag` as for a failover.
    SentinelKill { lag: Duration },
    /// SIGKILL of one of a Redlock's masters, down this long, started
    /// again: with `aof` it reloads its locks and fence counters from its
    /// AOF (`appendfsync always`); without, it comes back empty.
    MasterKill {
        master: usize,
        aof: bool,
        down: Duration,
    },
    /// SIGSTOP of one of a Redlock's masters for this long, then SIGCONT.
    MasterPause { master: usize, stop: Duration },
    /// Every worker's traffic to one of a Redlock's masters delayed (both
    /// ways, or the replies only), through that master's fault proxy.
    MasterLatency {
        master: usize,
        replies_only: bool,
        latency: Duration,
        lasting: Duration,
    },
    /// Every worker's bytes to and from one of a Redlock's masters held
    /// this long, then delivered.
    MasterBlackhole { master: usize, held: Duration },
}

impl Fault {
    /// Whether it strikes one worker (else Redis, for everyone).
    pub(crate) fn targets_worker(self) -> bool {
        !matches!(self, Fault::Restart { .. } | Fault::ClientPause(_))
            && !self.strikes_cluster()
            && !self.strikes_sentinels()
            && !self.strikes_masters()
    }

    /// Whether it strikes one of a Redlock's masters (every worker's
    /// traffic to it).
    pub(crate) fn strikes_masters(self) -> bool {
        matches!(
            self,
            Fault::MasterKill { .. }
                | Fault::MasterPause { .. }
                | Fault::MasterLatency { .. }
                | Fault::MasterBlackhole { .. }
        )
    }

    /// This fault, aimed at master `to` (a Redlock fault; any other is
    /// left as it is).
    pub(crate) fn at_master(self, to: usize) -> Fault {
        match self {
            Fault::MasterKill { aof, down, .. } => Fault::MasterKill {
                master: to,
                aof,
                down,
            },
            Fault::MasterPause { stop, .. } => Fault::MasterPause { master: to, stop },
            Fault::MasterLatency {
                replies_only,
                latency,
                lasting,
                ..
            } => Fault::MasterLatency {
                master: to,
                replies_only,
                latency,
                lasting,
            },
            Fault::MasterBlackhole { held, .. } => Fault::MasterBlackhole { master: to, held },
            other => other,
        }
    }

    /// Whether it fails over a master watched by Redis Sentinel (every
    /// worker).
    pub(crate) fn strikes_sentinels(self) -> bool {
        matches!(
            self,
            Fault::SentinelFailover { .. } | Fault::SentinelKill { .. }
        )
    }

    /// How long the replicas lag behind the master when it strikes.
    pub(crate) fn lag(self) -> Duration {
        match self {
            Fault::KillMaster { lag, .. }
            | Fault::SentinelFailover { lag }
            | Fault::SentinelKill { lag } => lag,
            _ => Duration::ZERO,
        }
    }

    /// Whether it strikes a shard of a Redis Cluster (every worker that
    /// uses that shard).
    pub(crate) fn strikes_cluster(self) -> bool {
        matches!(
            self,
            Fault::Failover { .. } | Fault::KillMaster { .. } | Fault::Migrate { .. }
        )
    }

    /// Whether the worker it strikes is stopped while alive, blind to its
    /// own clock: the only fault that lets a lease run out while its holder
    /// still believes it holds it. Any other fault leaves the holder
    /// running, so its watchdog's local deadline (shorter than the lease in
    /// Redis) tells it first; a killed holder believes nothing.
    pub(crate) fn stops_holder(self) -> bool {
        matches!(self, Fault::Pause(_))
    }

    /// How many leases of calm follow it, on average. After a restart no
    /// lock is granted for a restart grace (a lease and more), so the run
    /// leaves the locks more time to be taken between restarts; the same
    /// grace follows a change of a slot's master in a cluster.
    pub(crate) fn gap_factor(self) -> f64 {
        match self {
            Fault::Restart { .. } => 4.0,
            // Restarts of a Redlock's masters without their AOF follow
            // each other closely, so that several strike one long hold:
            // one master forgetting a lock leaves its holder a majority of
            // the others, a majority forgetting it does not.
            Fault::MasterKill { aof: false, .. } => 0.3,
            f if f.strikes_cluster() => 2.0,
            // A failover takes seconds of its own (a kill, four; the old
            // master of a failover by command is a replica again ten
            // seconds later), so a lease of calm follows.
            f if f.strikes_sentinels() => 1.0,
            _ => 1.0,
        }
    }

    pub(crate) fn kind(self) -> &'static str {
        match self {
            Fault::Pause(_) => "pause",
            Fault::Kill => "kill",
            Fault::Restart { .. } => "restart",
            Fault::ClientPause(_) => "client-pause",
            Fault::Latency { .. } => "latency",
            Fault::Blackhole(_) => "blackhole",
            Fault::Reset => "reset",
            Fault::HalfOpen => "half-open",
            Fault::Failover { .. } => "cluster-failover",
            Fault::KillMaster { .. } => "cluster-kill",
            Fault::Migrate { .. } => "cluster-migrate",
            Fault::SentinelFailover { .. } => "sentinel-failover",
            Fault::SentinelKill { .. } => "sentinel-kill",
            Fault::MasterKill { aof: true, .. } => "redlock-kill",
            Fault::MasterKill { aof: false, .. } => "redlock-restart",
            Fault::MasterPause { .. } => "redlock-pause",
            Fault::MasterLatency { .. } => "redlock-latency",
            Fault::MasterBlackhole { .. } => "redlock-blackhole",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: &Duration| d.as_millis();
        match self {
            Fault::Pause(d) => write!(f, "pause {} ms", ms(d)),
            Fault::Kill => write!(f, "kill"),
            Fault::Restart { aof, down } => write!(
                f,
                "restart {} AOF, down {} ms",
                if *aof { "with" } else { "without" },
                ms(down)
            ),
            Fault::ClientPause(d) => write!(f, "client-pause {} ms", ms(d)),
            Fault::Latency {
                replies_only,
                latency,
                lasting,
            } => write!(
                f,
                "latency {} ms {} for {} ms",
                ms(latency),
                direction(*replies_only),
                ms(lasting)
            ),
            Fault::Blackhole(d) => write!(f, "blackhole {} ms", ms(d)),
            Fault::Reset => write!(f, "reset"),
            Fault::HalfOpen => write!(f, "half-open"),
            Fault::Failover { shard } => write!(f, "failover of shard {shard}"),
            Fault::KillMaster { shard, lag } if lag.is_zero() => {
                write!(f, "kill of shard {shard}'s master")
            }
            Fault::KillMaster { shard, lag } => write!(
                f,
                "kill of shard {shard}'s master, its replica {} ms behind",
                ms(lag)
            ),
            Fault::Migrate { slot, to, step } => write!(
                f,
                "migration of slot {slot} to shard {to}, a key every {} ms",
                ms(step)
            ),
            Fault::SentinelFailover { lag } if lag.is_zero() => write!(f, "SENTINEL FAILOVER"),
            Fault::SentinelFailover { lag } => {
                write!(f, "SENTINEL FAILOVER, the replica {} ms behind", ms(lag))
            }
            Fault::SentinelKill { lag } if lag.is_zero() => write!(f, "kill of the master"),
            Fault::SentinelKill { lag } => {
                write!(f, "kill of the master, the replica {} ms behind", ms(lag))
            }
            Fault::MasterKill { master, aof, down } => write!(
                f,
                "kill of master {master}, down {} ms, back {}",
                ms(down),
                if *aof { "from its AOF" } else { "empty" }
            ),
            Fault::MasterPause { master, stop } => {
                write!(f, "SIGSTOP of master {master} for {} ms", ms(stop))
            }
            Fault::MasterLatency {
                master,
                replies_only,
                latency,
                lasting,
            } => write!(
                f,
                "latency {} ms {} to master {master} for {} ms",
                ms(latency),
                direction(*replies_only),
                ms(lasting)
            ),
            Fault::MasterBlackhole { master, held } => {
                write!(f, "blackhole of master {master} for {} ms", ms(held))
            }
        }
    }
}

impl Fault {
    /// The fault as one word, for the kept fault log: its kind and its
    /// strength in nanoseconds.
    pub(crate) fn code(self) -> String {
        let ns = |d: Duration| d.as_nanos();
        match self {
            Fault::Pause(d) => format!("pause:{}", ns(d)),
            Fault::Kill => "kill".into(),
            Fault::Restart { aof, down } => {
                format!("restart:{}:{}", if aof { "aof" } else { "noaof" }, ns(down))
            }
            Fault::ClientPause(d) => format!("client-pause:{}", ns(d)),
            Fault::Latency {
                replies_only,
                latency,
                lasting,
            } => format!(
                "latency:{}:{}:{}",
                if replies_only { "replies" } else { "both" },
                ns(latency),
                ns(lasting)
            ),
            Fault::Blackhole(d) => format!("blackhole:{}", ns(d)),
            Fault::Reset => "reset".into(),
            Fault::HalfOpen => "half-open".into(),
            Fault::Failover { shard } => format!("cluster-failover:{shard}"),
            Fault::KillMaster { shard, lag } => format!("cluster-kill:{shard}:{}", ns(lag)),
            Fault::Migrate { slot, to, step } => {
                format!("cluster-migrate:{slot}:{to}:{}", ns(step))
            }
            Fault::SentinelFailover { lag } => format!("sentinel-failover:{}", ns(lag)),
            Fault::SentinelKill { lag } => format!("sentinel-kill:{}", ns(lag)),
            Fault::MasterKill { master, aof, down } => format!(
                "redlock-kill:{master}:{}:{}",
                if aof { "aof" } else { "empty" },
                ns(down)
            ),
            Fault::MasterPause { master, stop } => format!("redlock-pause:{master}:{}", ns(stop)),
            Fault::MasterLatency {
                master,
                replies_only,
                latency,
                lasting,
            } => format!(
                "redlock-latency:{master}:{}:{}:{}",
                if replies_only { "replies" } else { "both" },
                ns(latency),
                ns(lasting)
            ),
            Fault::MasterBlackhole { master, held } => {
                format!("redlock-blackhole:{master}:{}", ns(held))
            }
        }
    }

    pub(crate) fn from_code(code: &str) -> Result<Fault> {
        let parts: Vec<&str> = code.split(':').collect();
        let ns = |i: usize| -> Result<Duration> {
            let n: u64 = parts
                .get(i)
                .ok_or_else(|| anyhow!("no strength in fault {code:?}"))?
                .parse()
                .map_err(|e| anyhow!("fault {code:?}: {e}"))?;
            Ok(Duration::from_nanos(n))
        };
        let number = |i: usize| -> Result<u64> {
            parts
                .get(i)
                .ok_or_else(|| anyhow!("no shard or slot in fault {code:?}"))?
                .parse()
                .map_err(|e| anyhow!("fault {code:?}: {e}"))
        };
        let shard = |i: usize| -> Result<usize> { Ok(usize::try_from(number(i)?)?) };
        Ok(match parts.as_slice() {
            ["pause", _] => Fault::Pause(ns(1)?),
            ["kill"] => Fault::Kill,
            ["restart", aof @ ("aof" | "noaof"), _] => Fault::Restart {
                aof: *aof == "aof",
                down: ns(2)?,
            },
            ["client-pause", _] => Fault::ClientPause(ns(1)?),
            ["latency", way @ ("replies" | "both"), _, _] => Fault::Latency {
                replies_only: *way == "replies",
                latency: ns(2)?,
                lasting: ns(3)?,
            },
            ["blackhole", _] => Fault::Blackhole(ns(1)?),
            ["reset"] => Fault::Reset,
            ["half-open"] => Fault::HalfOpen,
            ["cluster-failover", _] => Fault::Failover { shard: shard(1)? },
            ["cluster-kill", _, _] => Fault::KillMaster {
                shard: shard(1)?,
                lag: ns(2)?,
            },
            ["cluster-migrate", _, _, _] => Fault::Migrate {
                slot: u16::try_from(number(1)?)?,
                to: shard(2)?,
                step: ns(3)?,
            },
            ["sentinel-failover", _] => Fault::SentinelFailover { lag: ns(1)? },
            ["sentinel-kill", _] => Fault::SentinelKill { lag: ns(1)? },
            ["redlock-kill", _, aof @ ("aof" | "empty"), _] => Fault::MasterKill {
                master: shard(1)?,
                aof: *aof == "aof",
                down: ns(3)?,
            },
            ["redlock-pause", _, _] => Fault::MasterPause {
                master: shard(1)?,
                stop: ns(2)?,
            },
            ["redlock-latency", _, way @ ("replies" | "both"), _, _] => Fault::MasterLatency {
                master: shard(1)?,
                replies_only: *way == "replies",
                latency: ns(3)?,
                lasting: ns(4)?,
            },
            ["redlock-blackhole", _, _] => Fault::MasterBlackhole {
                master: shard(1)?,
                held: ns(2)?,
            },
            _ => bail!("not a fault: {code:?}"),
        })
    }
}

/// Which way a latency fault delays the bytes, as messages say it.
fn direction(replies_only: bool) -> &'static str {
    if replies_only {
        "on replies"
    } else {
        "both ways"
    }
}

/// A fault as it was injected, on the monotonic clock.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Injected {
    pub(crate) fault: Fault,
    /// The worker it struck; `None` for Redis.
    pub(crate) target: Option<String>,
    /// The worker held a lock when it was struck, as `inspect` saw it.
    pub(crate) at_holder: bool,
    pub(crate) start: u64,
    pub(crate) end: u64,
}

impl fmt::Display for Injected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}\t{}\t{}\t{}\t{}",
            self.fault.code(),
            self.target.as_deref().unwrap_or("-"),
            u8::from(self.at_holder),
            self.start,
            self.end
        )
    }
}

impl FromStr for Injected {
    type Err = anyhow::Error;
    fn from_str(line: &str) -> Result<Self> {
        let f: Vec<&str> = line.split('\t').collect();
        let [code, target, at_holder, start, end] = f.as_slice() else {
            bail!("not a fault line: {line:?}");
        };
        let num =
            |s: &str| -> Result<u64> { s.parse().map_err(|e| anyhow!("fault line {line:?}: {e}")) };
        Ok(Injected {
            fault: Fault::from_code(code)?,
            target: (*target != "-").then(|| (*target).to_owned()),
            at_holder: *at_holder == "1",
            start: num(start)?,
            end: num(end)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schedule_draws_its_own_faults_and_mixed_draws_them_all() {
        let lease = Duration::from_secs(1);
        let mut rng = Rng::new(3);
        for s in &Schedule::ALL[..8] {
            for _ in 0..20 {
                assert_eq!(s.draw(&mut rng, lease).kind(), s.name());
            }
        }
        let kinds: std::collections::BTreeSet<&str> = (0..400)
            .map(|_| Schedule::Mixed.draw(&mut rng, lease).kind())
            .collect();
        assert_eq!(kinds.len(), 8);
        for s in Schedule::CLUSTER {
            for _ in 0..20 {
                let fault = s.draw(&mut rng, lease);
                assert_eq!(fault.kind(), s.name());
                assert!(fault.strikes_cluster() && !fault.targets_worker());
            }
        }
        for s in Schedule::SENTINEL {
            let drawn: std::collections::BTreeSet<&str> = (0..60)
                .map(|_| s.draw(&mut rng, lease))
                .inspect(|f| assert!(f.strikes_sentinels() && !f.targets_worker()))
                .map(Fault::kind)
                .collect();
            match s {
                Schedule::Sentinel => {
                    assert_eq!(drawn, ["sentinel-failover", "sentinel-kill"].into())
                }
                s => assert_eq!(drawn, [s.name()].into()),
            }
        }
        for s in Schedule::REDLOCK {
            for _ in 0..20 {
                let fault = s.draw(&mut rng, lease);
                assert_eq!(fault.kind(), s.name());
                assert!(fault.strikes_masters() && !fault.targets_worker());
                assert!(!fault.strikes_cluster() && !fault.strikes_sentinels());
                let aimed = fault.at_master(3);
                assert_eq!(aimed.kind(), fault.kind());
                assert!(
                    aimed.code().starts_with(&format!("{}:3:", s.name()))
                        || aimed.code().starts_with("redlock-kill:3:")
                );
            }
            assert!(s.on_redlock() && !s.on_cluster() && !s.on_sentinel());
        }
        assert_eq!(
            Schedule::parse_list("redlock").unwrap(),
            Schedule::REDLOCK.to_vec()
        );
        assert!(Schedule::ALL
            .iter()
            .chain(&Schedule::CLUSTER)
            .chain(&Schedule::SENTINEL)
            .all(|s| !s.on_redlock()));
        assert_eq!(
            Schedule::parse_list("sentinel").unwrap(),
            [Schedule::Sentinel]
        );
        assert!(Schedule::ALL
            .iter()
            .chain(&Schedule::CLUSTER)
            .all(|s| !s.on_sentinel()));
        assert_eq!(Schedule::parse_list("all").unwrap().len(), 9);
        assert!(Schedule::ALL.iter().all(|s| !s.on_cluster()));
        assert_eq!(
            Schedule::parse_list("cluster").unwrap(),
            Schedule::CLUSTER.to_vec()
        );
        assert_eq!(
            Schedule::parse_list("cluster-kill").unwrap(),
            [Schedule::ClusterKill]
        );
        assert!(Schedule::parse_list("earthquake").is_err());
    }

    #[test]
    fn faults_read_back_from_the_kept_fault_log() {
        let mut rng = Rng::new(5);
        let lease = Duration::from_millis(333);
        let aimed = [
            Fault::Failover { shard: 2 },
            Fault::KillMaster {
                shard: 1,
                lag: lease / 2,
            },
            Fault::Migrate {
                slot: 16383,
                to: 2,
                step: lease / 20,
            },
            Fault::SentinelFailover { lag: lease },
            Fault::SentinelKill {
                lag: Duration::ZERO,
            },
            Fault::MasterKill {
                master: 4,
                aof: true,
                down: lease / 2,
            },
            Fault::MasterKill {
                master: 0,
                aof: false,
                down: Duration::ZERO,
            },
            Fault::MasterPause {
                master: 2,
                stop: lease * 3,
            },
            Fault::MasterLatency {
                master: 1,
                replies_only: true,
                latency: lease / 10,
                lasting: lease * 2,
            },
            Fault::MasterBlackhole {
                master: 3,
                held: lease,
            },
        ];
        for i in 0..203 {
            let fault = match aimed.get(i) {
                Some(f) => *f,
                None => Schedule::Mixed.draw(&mut rng, lease),
            };
            let injected = Injected {
                fault,
                target: rng.chance(0.5).then(|| "w3".to_owned()),
                at_holder: rng.chance(0.5),
                start: rng.next(),
                end: rng.next(),
            };
            assert_eq!(injected.to_string().parse::<Injected>().unwrap(), injected);
        }
        assert!("pause:x\t-\t0\t1\t2".parse::<Injected>().is_err());
        assert!("quake\t-\t0\t1\t2".parse::<Injected>().is_err());
        assert!("cluster-kill:x:0\t-\t0\t1\t2".parse::<Injected>().is_err());
        assert!("cluster-migrate:70000:0:0\t-\t0\t1\t2"
            .parse::<Injected>()
            .is_err());
    }
}
