//! The fault schedules: which faults a run injects, at which strengths, drawn
//! from a seeded generator.

use std::fmt;
use std::time::Duration;

use anyhow::{bail, Result};

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
        }
    }

    /// One schedule by name, or every one for `all`.
    pub(crate) fn parse_list(name: &str) -> Result<Vec<Schedule>> {
        if name == "all" {
            return Ok(Schedule::ALL.to_vec());
        }
        match Schedule::ALL.iter().find(|s| s.name() == name) {
            Some(s) => Ok(vec![*s]),
            None => bail!(
                "unknown schedule {name:?}: use one of {} or all",
                Schedule::ALL.map(Schedule::name).join(", ")
            ),
        }
    }

    /// Whether the schedule restarts Redis (the server then keeps an AOF,
    /// which a restart "without AOF" removes first).
    pub(crate) fn restarts(self) -> bool {
        matches!(self, Schedule::Restart | Schedule::Mixed)
    }

    /// The next fault, its strength scaled to `lease`.
    pub(crate) fn draw(self, rng: &mut Rng, lease: Duration) -> Fault {
        let schedule = match self {
            Schedule::Mixed => *rng.pick(&Schedule::ALL[..8]),
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
}

impl Fault {
    /// Whether it strikes one worker (else Redis, for everyone).
    pub(crate) fn targets_worker(self) -> bool {
        !matches!(self, Fault::Restart { .. } | Fault::ClientPause(_))
    }

    /// Whether the worker it strikes is stopped or gone: its overlaps are
    /// expected (only fences protect the resource then).
    pub(crate) fn stops_process(self) -> bool {
        matches!(self, Fault::Pause(_) | Fault::Kill)
    }

    /// How many leases of calm follow it, on average. After a restart no
    /// lock is granted for a restart grace (a lease and more), so the run
    /// leaves the locks more time to be taken between restarts.
    pub(crate) fn gap_factor(self) -> f64 {
        match self {
            Fault::Restart { .. } => 4.0,
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
                if *replies_only {
                    "on replies"
                } else {
                    "both ways"
                },
                ms(lasting)
            ),
            Fault::Blackhole(d) => write!(f, "blackhole {} ms", ms(d)),
            Fault::Reset => write!(f, "reset"),
            Fault::HalfOpen => write!(f, "half-open"),
        }
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
        assert_eq!(Schedule::parse_list("all").unwrap().len(), 9);
        assert!(Schedule::parse_list("earthquake").is_err());
    }
}
