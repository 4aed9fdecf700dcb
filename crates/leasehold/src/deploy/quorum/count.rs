//! The arithmetic of a lock over N independent masters (Redlock), in one
//! place: majorities, when a round is decided, how long a grant can be
//! trusted, the per-node deadline, the fence, and the pause between tries.
//! Nothing here sends anything or reads a clock.

use std::time::Duration;

/// The smallest number of masters that is more than half of `n`.
pub(crate) fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// The answers of one round to N masters so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) n: usize,
    /// Masters that said yes (granted, renewed, released, wrote the fence).
    pub(crate) yes: usize,
    /// Masters that said no for sure (held by another, token gone).
    pub(crate) no: usize,
    /// Masters that failed to answer in time, or answered an error: each
    /// may or may not have done what it was asked.
    pub(crate) failed: usize,
}

impl Tally {
    pub(crate) fn new(n: usize) -> Self {
        Tally {
            n,
            yes: 0,
            no: 0,
            failed: 0,
        }
    }

    pub(crate) fn majority(&self) -> usize {
        majority(self.n)
    }

    /// Masters that have not answered yet.
    pub(crate) fn pending(&self) -> usize {
        self.n.saturating_sub(self.yes + self.no + self.failed)
    }

    /// A majority said yes.
    pub(crate) fn won(&self) -> bool {
        self.yes >= self.majority()
    }

    /// A majority can no longer say yes, whatever the others answer.
    pub(crate) fn lost(&self) -> bool {
        self.yes + self.pending() < self.majority()
    }

    /// The round is decided either way: no need to wait for the others.
    pub(crate) fn decided(&self) -> bool {
        self.won() || self.lost()
    }

    /// A majority of the masters said no for sure: the token is known to
    /// hold the lock on fewer than a majority.
    pub(crate) fn surely_lost(&self) -> bool {
        self.no > self.n - self.majority()
    }

    /// Unreachable masters alone keep a majority from saying yes: waiting
    /// for busy ones to free the lock would not help.
    pub(crate) fn blocked_by_failures(&self) -> bool {
        self.failed > self.n - self.majority()
    }
}

/// How time is accounted for across masters whose clocks may run at
/// slightly different rates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Clocks {
    /// The part of a lease allowed for drift (0.01 is 1%).
    pub(crate) drift_factor: f64,
    /// Drift allowed on top of that, whatever the lease.
    pub(crate) drift_constant: Duration,
}

impl Clocks {
    /// The drift allowed for a lease of `lease`.
    pub(crate) fn drift(&self, lease: Duration) -> Duration {
        let factor = if self.drift_factor.is_finite() {
            self.drift_factor.clamp(0.0, 1.0)
        } else {
            1.0
        };
        lease.mul_f64(factor).saturating_add(self.drift_constant)
    }

    /// What is left of a lease of `lease` whose request left `elapsed` ago:
    /// lease − elapsed − drift, or `None` when nothing is.
    pub(crate) fn validity(&self, lease: Duration, elapsed: Duration) -> Option<Duration> {
        let left = lease.checked_sub(elapsed)?.checked_sub(self.drift(lease))?;
        (!left.is_zero()).then_some(left)
    }

    /// Whether a grant of `lease`, whose first request left `elapsed` ago,
    /// may be reported held: only with more than `floor` of validity left.
    pub(crate) fn usable(&self, lease: Duration, elapsed: Duration, floor: Duration) -> bool {
        self.validity(lease, elapsed)
            .is_some_and(|left| left > floor)
    }

    /// The time after the first request left past which a lease of
    /// `lease` is no longer trusted: lease − drift (zero when the drift
    /// eats all of it).
    pub(crate) fn trusted_for(&self, lease: Duration) -> Duration {
        lease.saturating_sub(self.drift(lease))
    }
}

/// The per-node deadline of a request, unless set: a hundredth of the
/// lease, at least `floor` (what a busy host takes to hear a master), and
/// at most a quarter of the lease, as far as [`widened_deadline`] goes.
pub(crate) fn node_deadline(lease: Duration, floor: Duration) -> Duration {
    (lease / 100).max(floor).min(lease / 4)
}

/// The per-node deadline of the next try after one in which too many
/// masters missed `current` for a majority (a loaded host, or masters
/// slower than the default deadline): twice as long, up to a quarter of
/// the lease, so that a grant still leaves most of the lease valid. Never
/// shorter than `current`.
pub(crate) fn widened_deadline(current: Duration, lease: Duration) -> Duration {
    current.saturating_mul(2).min(lease / 4).max(current)
}

/// How much faster or slower than this host's clock a master's clock may
/// run, in parts per million: 500, the most NTP slews a clock.
pub(crate) const CLOCK_RATE_PPM: u64 = 500;

fn rate_slack(over: Duration) -> Duration {
    Duration::from_nanos(
        u64::try_from(over.as_nanos().saturating_mul(u128::from(CLOCK_RATE_PPM)) / 1_000_000)
            .unwrap_or(u64::MAX),
    )
}

/// When a round-one request stops being able to take the lock, so that a
/// request held in the network (a partition that heals after its release
/// gave up) cannot grant to a token nobody holds any more.
///
/// The client learns each master's clock from round one's replies: a
/// master ran a request at `sampled_us` on its clock, between the
/// request's sending and its reply, `loose` apart. A request sent `since`
/// after that sample takes the lock only up to [`RoundOneLimit::master_us`]
/// on the master's clock: the sample plus `since` plus `window`, plus what
/// a master clock running [`CLOCK_RATE_PPM`] fast gains over `since`. Past
/// that the master refuses it.
///
/// A release (or any request) sent [`RoundOneLimit::refused_after`] after
/// the round-one request runs on its master after that instant, whatever
/// the master's rate within [`CLOCK_RATE_PPM`] and wherever in the sample's
/// round trip the master read its clock: a round-one request that has not
/// run by the time that release runs is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RoundOneLimit {
    /// On the master's clock, µs: the request is refused past this.
    pub(crate) master_us: u64,
    /// On this host's clock, after the request is sent: a request sent from
    /// then on runs on the master past [`master_us`](Self::master_us).
    pub(crate) refused_after: Duration,
}

impl RoundOneLimit {
    pub(crate) fn new(sampled_us: u64, loose: Duration, since: Duration, window: Duration) -> Self {
        let ahead = since
            .saturating_add(window)
            .saturating_add(rate_slack(since));
        let master_us =
            sampled_us.saturating_add(u64::try_from(ahead.as_micros()).unwrap_or(u64::MAX));
        // The master's clock may have read `loose` early, and may run slow
        // by the rate over everything since the sample: waiting `window`
        // plus those, scaled for the slow rate, lands past `master_us`.
        let gap = window
            .saturating_add(loose)
            .saturating_add(rate_slack(since).saturating_mul(2));
        let refused_after = gap
            .saturating_add(rate_slack(gap.saturating_add(since)).saturating_mul(2))
            .saturating_add(Duration::from_millis(1));
        RoundOneLimit {
            master_us,
            refused_after,
        }
    }
}

/// The fence of a grant, from the fences the granting masters computed in
/// round one (each `max(stored + 1, its clock in µs)`): the largest. `None`
/// when no master granted.
pub(crate) fn fence(granted: &[u64]) -> Option<u64> {
    granted.iter().copied().max()
}

/// The pause before the next try: `base` scaled by a jitter in [0.5, 1.5)
/// (`jitter` is a random number, taken modulo 1000), never past `left`.
pub(crate) fn retry_pause(base: Duration, jitter: u32, left: Duration) -> Duration {
    let scale = 0.5 + f64::from(jitter % 1000) / 1000.0;
    base.mul_f64(scale).min(left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn clocks() -> impl Strategy<Value = Clocks> {
        (0.0f64..0.5, 0u64..1_000).prop_map(|(f, c)| Clocks {
            drift_factor: f,
            drift_constant: Duration::from_millis(c),
        })
    }

    proptest! {
        // A grant is never reported held at or past its validity: whenever
        // it is usable, the time elapsed plus the floor plus the drift is
        // still short of the lease.
        #[test]
        fn never_held_at_or_past_validity(
            lease_ms in 10u64..86_400_000,
            elapsed_us in 0u64..100_000_000_000,
            floor_ms in 0u64..10_000,
            clocks in clocks(),
        ) {
            let lease = Duration::from_millis(lease_ms);
            let elapsed = Duration::from_micros(elapsed_us);
            let floor = Duration::from_millis(floor_ms);
            if clocks.usable(lease, elapsed, floor) {
                prop_assert!(elapsed + floor + clocks.drift(lease) < lease);
                prop_assert!(elapsed < clocks.trusted_for(lease));
            }
            if let Some(left) = clocks.validity(lease, elapsed) {
                prop_assert_eq!(left + elapsed + clocks.drift(lease), lease);
            } else {
                prop_assert!(elapsed + clocks.drift(lease) >= lease);
            }
        }

        // More drift or more elapsed time never leaves more validity.
        #[test]
        fn validity_shrinks(
            lease_ms in 10u64..86_400_000,
            a in 0u64..100_000_000,
            b in 0u64..100_000_000,
            clocks in clocks(),
        ) {
            let lease = Duration::from_millis(lease_ms);
            let (short, long) = (Duration::from_micros(a.min(b)), Duration::from_micros(a.max(b)));
            let v = |e| clocks.validity(lease, e).unwrap_or_default();
            prop_assert!(v(long) <= v(short));
        }

        // Any two majorities of the same masters share one: what one wrote
        // the next one reads.
        #[test]
        fn majorities_intersect(n in 1usize..64) {
            prop_assert!(2 * majority(n) > n);
            prop_assert!(majority(n) <= n);
        }

        // A round is decided as soon as, and only when, the answers so far
        // settle it.
        #[test]
        fn tally_decides(
            (n, yes, no, failed) in (1usize..32).prop_flat_map(|n| (Just(n), 0..=n))
                .prop_flat_map(|(n, yes)| (Just(n), Just(yes), 0..=n - yes))
                .prop_flat_map(|(n, yes, no)| (Just(n), Just(yes), Just(no), 0..=n - yes - no)),
        ) {
            let t = Tally { n, yes, no, failed };
            let m = majority(n);
            prop_assert_eq!(t.won(), yes >= m);
            // Lost: even if every pending master said yes, no majority.
            prop_assert_eq!(t.lost(), yes + (n - yes - no - failed) < m);
            prop_assert!(!(t.won() && t.lost()));
            if t.surely_lost() {
                // Whatever the others answer, no majority can say yes.
                prop_assert!(yes + t.pending() + failed < m);
                prop_assert!(t.lost());
            }
            if t.blocked_by_failures() {
                prop_assert!(n - failed < m);
            }
        }

        #[test]
        fn pause_in_bounds(base_ms in 0u64..10_000, jitter in any::<u32>(), left_ms in 0u64..10_000) {
            let base = Duration::from_millis(base_ms);
            let left = Duration::from_millis(left_ms);
            let p = retry_pause(base, jitter, left);
            prop_assert!(p <= left);
            prop_assert!(p <= base.mul_f64(1.5));
            prop_assert!(p >= base.mul_f64(0.5).min(left));
        }

        #[test]
        fn a_widened_deadline_grows_to_a_quarter_of_the_lease(
            current_ms in 0u64..100_000,
            lease_ms in 1u64..1_000_000,
        ) {
            let (current, lease) = (Duration::from_millis(current_ms), Duration::from_millis(lease_ms));
            let wider = widened_deadline(current, lease);
            prop_assert!(wider >= current);
            prop_assert!(wider <= current.saturating_mul(2));
            prop_assert!(wider <= (lease / 4).max(current));
            if current < lease / 8 {
                prop_assert_eq!(wider, current * 2);
            }
        }

        // A master whose clock runs at any rate within CLOCK_RATE_PPM of
        // this host's, and read it anywhere in the sample's round trip:
        // a round-one request that runs within (most of) the window after
        // it was sent is not refused, and a request sent `refused_after`
        // after it runs past the limit, so a round one that has not run by
        // then is refused.
        #[test]
        fn a_round_one_limit_holds_for_any_clock_within_the_rate(
            sampled_us in 0u64..1 << 52,
            loose_us in 0u64..2_000_000,
            at_permille in 0u64..=1000,
            since_us in prop_oneof![0u64..10_000_000, 0u64..86_400_000_000],
            window_us in 1_000u64..10_000_000,
            rate_ppm in -(CLOCK_RATE_PPM as i64)..=CLOCK_RATE_PPM as i64,
        ) {
            let limit = RoundOneLimit::new(
                sampled_us,
                Duration::from_micros(loose_us),
                Duration::from_micros(since_us),
                Duration::from_micros(window_us),
            );
            let (on_time, late) = limit_seen_by(
                sampled_us,
                limit,
                (loose_us, at_permille),
                since_us,
                window_us,
                rate_ppm,
            );
            prop_assert!(on_time, "a request on time is refused");
            prop_assert!(late, "a release sent refused_after later runs before the limit");
        }

        #[test]
        fn fence_is_the_largest(fences in proptest::collection::vec(0u64..1 << 53, 0..9)) {
            match fence(&fences) {
                None => prop_assert!(fences.is_empty()),
                Some(f) => prop_assert!(fences.iter().all(|&x| x <= f) && fences.contains(&f)),
            }
        }
    }

    /// Where a master's clock stands against a round-one limit: whether a
    /// request that runs at the end of the window (less the rate) is still
    /// on time, and whether one sent `refused_after` after the request runs
    /// past the limit. The master read `sampled_us` at `at_permille` of the
    /// sample's round trip of `loose_us`, and runs `rate_ppm` fast.
    fn limit_seen_by(
        sampled_us: u64,
        limit: RoundOneLimit,
        (loose_us, at_permille): (u64, u64),
        since_us: u64,
        window_us: u64,
        rate_ppm: i64,
    ) -> (bool, bool) {
        // Nanoseconds on this host's clock from the sample's sending.
        let t0 = i128::from(loose_us * at_permille / 1000) * 1000;
        let master_at = |t: i128| {
            i128::from(sampled_us) * 1000
                + (t - t0) * (1_000_000 + i128::from(rate_ppm)) / 1_000_000
        };
        let sent = i128::from(since_us) * 1000;
        let limit_ns = i128::from(limit.master_us) * 1000;
        let rate = 1_000_000 + i128::from(CLOCK_RATE_PPM);
        let on_time = i128::from(window_us) * 1000 * 1_000_000 / rate - 1000;
        let release = sent + i128::try_from(limit.refused_after.as_nanos()).unwrap_or(i128::MAX);
        (
            master_at(sent + on_time) <= limit_ns,
            master_at(release) > limit_ns,
        )
    }

    #[test]
    fn a_round_one_limit_holds_at_the_corners() {
        let rate = CLOCK_RATE_PPM as i64;
        for since_us in [0, 1_000_000, 86_400_000_000] {
            for window_us in [1_000, 10_000_000] {
                for (loose_us, at) in [(0, 0), (2_000_000, 0), (2_000_000, 1000)] {
                    for rate_ppm in [-rate, 0, rate] {
                        let limit = RoundOneLimit::new(
                            1 << 50,
                            Duration::from_micros(loose_us),
                            Duration::from_micros(since_us),
                            Duration::from_micros(window_us),
                        );
                        let seen = limit_seen_by(
                            1 << 50,
                            limit,
                            (loose_us, at),
                            since_us,
                            window_us,
                            rate_ppm,
                        );
                        assert_eq!(
                            seen,
                            (true, true),
                            "since {since_us} µs, window {window_us} µs, loose {loose_us} µs \
                             read at {at}‰, rate {rate_ppm} ppm: {limit:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn deadline_is_a_hundredth_with_a_floor_and_a_quarter_at_most() {
        let floor = Duration::from_millis(50);
        assert_eq!(
            node_deadline(Duration::from_secs(10), floor),
            Duration::from_millis(100)
        );
        assert_eq!(node_deadline(Duration::from_secs(1), floor), floor);
        assert_eq!(
            node_deadline(Duration::from_millis(100), floor),
            Duration::from_millis(25)
        );
    }
}
