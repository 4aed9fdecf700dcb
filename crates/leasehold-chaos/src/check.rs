//! The checker: reads the workers' logs, the faults as injected and the
//! fenced resource's log, and counts what went wrong.
//!
//! - An **overlap** is two critical sections of one lock, by two workers,
//!   that the lock forbids at the same time (any two of a mutex, a writer
//!   with anyone, more holders than a semaphore's permits). It is
//!   **faulted** when one of its holders was paused or killed during its
//!   section (only fences protect the resource then) and **unsafe**
//!   otherwise: the lock was granted twice.
//! - A **stale write** is a write the resource accepted with a fence smaller
//!   than one it had accepted before for that register.
//! - A **lost update** is an accepted write that is not the previous
//!   accepted write's value plus one (two holders read the same value).
//! - A **fence regression** is a grant whose fence is not larger than the
//!   fence of every grant of its lock that ended before it started (a
//!   reader: smaller than a write that ended before it), or a fence handed
//!   out twice.

use std::collections::{BTreeSet, HashMap};

use serde_json::{json, Value};

use crate::events::{Event, Mode, Outcome};
use crate::faults::Injected;
use crate::resource::{Op, Served};
use crate::workload::Workload;

/// One worker's log, and when it was killed if it was.
#[derive(Debug, Clone)]
pub(crate) struct WorkerLog {
    pub(crate) id: String,
    pub(crate) events: Vec<Event>,
    pub(crate) killed_at: Option<u64>,
}

/// Everything a run leaves for the checker.
#[derive(Debug, Clone, Default)]
pub(crate) struct Inputs {
    pub(crate) workers: Vec<WorkerLog>,
    pub(crate) faults: Vec<Injected>,
    pub(crate) served: Vec<Served>,
    pub(crate) keys_without_ttl: BTreeSet<String>,
    /// When the run stopped; a section still open then ends there.
    pub(crate) run_end: u64,
    /// How long after a fault ends a wait that fails is still put down to
    /// it (a frozen connection is noticed only at a command timeout).
    pub(crate) fault_slack: u64,
}

#[derive(Debug, Clone)]
struct Section {
    worker: usize,
    wait_start: u64,
    lock: String,
    mode: Mode,
    fence: u64,
    start: u64,
    end: u64,
    outcome: Option<Outcome>,
    faulted: bool,
}

/// What the checker found.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Findings {
    pub(crate) acquisitions: u64,
    pub(crate) unsafe_overlaps: u64,
    pub(crate) faulted_overlaps: u64,
    pub(crate) fenced_accepted: u64,
    pub(crate) fenced_refused: u64,
    pub(crate) stale_writes_accepted: u64,
    pub(crate) lost_updates: u64,
    pub(crate) fence_regressions: u64,
    pub(crate) lost_leases: u64,
    pub(crate) loss_detection_ms_max: f64,
    pub(crate) wait_errors: u64,
    pub(crate) wait_errors_while_reachable: u64,
    pub(crate) wait_timeouts: u64,
    pub(crate) release_errors: u64,
    pub(crate) keys_without_ttl: u64,
    /// A few of the unsafe overlaps and regressions, for a person to read.
    pub(crate) examples: Vec<String>,
}

const EXAMPLES: usize = 5;

impl Findings {
    /// The figures that must be 0 for a run to pass.
    pub(crate) fn failures(&self) -> Vec<(&'static str, u64)> {
        [
            ("unsafe_overlaps", self.unsafe_overlaps),
            ("stale_writes_accepted", self.stale_writes_accepted),
            ("lost_updates", self.lost_updates),
            ("fence_regressions", self.fence_regressions),
            ("keys_without_ttl", self.keys_without_ttl),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect()
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "acquisitions": self.acquisitions,
            "unsafe_overlaps": self.unsafe_overlaps,
            "faulted_overlaps": self.faulted_overlaps,
            "fenced_accepted": self.fenced_accepted,
            "fenced_refused": self.fenced_refused,
            "stale_writes_accepted": self.stale_writes_accepted,
            "lost_updates": self.lost_updates,
            "fence_regressions": self.fence_regressions,
            "lost_leases": self.lost_leases,
            "loss_detection_ms_max": (self.loss_detection_ms_max * 1000.0).round() / 1000.0,
            "wait_errors": self.wait_errors,
            "wait_errors_while_reachable": self.wait_errors_while_reachable,
            "wait_timeouts": self.wait_timeouts,
            "release_errors": self.release_errors,
            "keys_without_ttl": self.keys_without_ttl,
            "examples": self.examples,
        })
    }
}

pub(crate) fn check(inputs: &Inputs) -> Findings {
    let mut found = Findings {
        keys_without_ttl: inputs.keys_without_ttl.len() as u64,
        ..Findings::default()
    };
    for key in inputs.keys_without_ttl.iter().take(EXAMPLES) {
        found.examples.push(format!("key without a TTL: {key}"));
    }
    let sections = sections(inputs, &mut found);
    found.acquisitions = sections.len() as u64;
    let mut by_lock: HashMap<&str, Vec<&Section>> = HashMap::new();
    for s in &sections {
        by_lock.entry(&s.lock).or_default().push(s);
    }
    let mut locks: Vec<_> = by_lock.into_iter().collect();
    locks.sort_by(|a, b| a.0.cmp(b.0));
    for (lock, mut list) in locks {
        list.sort_by_key(|s| (s.start, s.end));
        let permits = Workload::of_lock(lock).and_then(Workload::permits);
        overlaps(inputs, lock, &list, permits, &mut found);
        regressions(inputs, lock, &list, &mut found);
        loss_detection(&list, permits, &mut found);
    }
    resource(&inputs.served, &mut found);
    found
}

/// The critical sections, from each worker's acquire to its end (or its
/// death, or the run's end); also counts the waits and releases that failed.
fn sections(inputs: &Inputs, found: &mut Findings) -> Vec<Section> {
    let mut out = Vec::new();
    for (w, log) in inputs.workers.iter().enumerate() {
        let stopped: Vec<(u64, u64)> = inputs
            .faults
            .iter()
            .filter(|f| f.fault.stops_process() && f.target.as_deref() == Some(log.id.as_str()))
            .map(|f| (f.start, f.end))
            .collect();
        let mut open: Option<Section> = None;
        let close = |mut s: Section, end: u64, outcome: Option<Outcome>| {
            s.end = end.max(s.start);
            s.outcome = outcome;
            s.faulted = stopped.iter().any(|&(a, b)| a <= s.end && b >= s.start);
            s
        };
        for event in &log.events {
            match event {
                Event::Acquired {
                    lock,
                    mode,
                    fence,
                    wait_start,
                    at,
                } => {
                    if let Some(s) = open.take() {
                        out.push(close(s, *at, None));
                    }
                    open = Some(Section {
                        worker: w,
                        wait_start: *wait_start,
                        lock: lock.clone(),
                        mode: *mode,
                        fence: *fence,
                        start: *at,
                        end: *at,
                        outcome: None,
                        faulted: false,
                    });
                }
                Event::Ended { at, outcome } => {
                    if let Some(s) = open.take() {
                        out.push(close(s, *at, Some(*outcome)));
                    }
                }
                Event::WaitFailed {
                    kind,
                    wait_start,
                    at,
                    ..
                } => {
                    if kind == "timeout" {
                        found.wait_timeouts += 1;
                        continue;
                    }
                    found.wait_errors += 1;
                    let excused = inputs.faults.iter().any(|f| {
                        f.target.as_ref().is_none_or(|t| *t == log.id)
                            && f.start <= *at
                            && f.end + inputs.fault_slack >= *wait_start
                    });
                    if !excused {
                        found.wait_errors_while_reachable += 1;
                    }
                }
                Event::Released { result, .. } => {
                    // A lease known lost releases as "not held": no error.
                    if result != "ok" && !result.starts_with("notheld") {
                        found.release_errors += 1;
                    }
                }
            }
        }
        if let Some(s) = open.take() {
            out.push(close(s, log.killed_at.unwrap_or(inputs.run_end), None));
        }
    }
    out
}

fn conflicts(a: Mode, b: Mode) -> bool {
    // Readers share with readers, permits with permits (up to the count).
    a != b || !matches!(a, Mode::Read | Mode::Permit)
}

fn describe(inputs: &Inputs, s: &Section) -> String {
    format!(
        "{} ({}, fence {}, {}..{} ms{})",
        inputs.workers[s.worker].id,
        s.mode.as_str(),
        s.fence,
        s.start / 1_000_000,
        s.end / 1_000_000,
        if s.faulted { ", faulted" } else { "" }
    )
}

fn overlaps(
    inputs: &Inputs,
    lock: &str,
    list: &[&Section],
    permits: Option<u32>,
    found: &mut Findings,
) {
    let mut active: Vec<&Section> = Vec::new();
    for &s in list {
        active.retain(|a| a.end > s.start);
        let record = |others: &[&Section], found: &mut Findings| {
            if s.faulted || others.iter().any(|o| o.faulted) {
                found.faulted_overlaps += 1;
            } else {
                found.unsafe_overlaps += 1;
                if found.examples.len() < EXAMPLES {
                    let with: Vec<String> = others.iter().map(|o| describe(inputs, o)).collect();
                    found.examples.push(format!(
                        "{lock}: {} overlaps {}",
                        describe(inputs, s),
                        with.join(", ")
                    ));
                }
            }
        };
        match permits {
            Some(n) => {
                let others: Vec<&Section> = active
                    .iter()
                    .copied()
                    .filter(|a| a.worker != s.worker)
                    .collect();
                if others.len() >= n as usize {
                    record(&others, found);
                }
            }
            None => {
                for &a in &active {
                    if a.worker != s.worker && conflicts(a.mode, s.mode) {
                        record(&[a], found);
                    }
                }
            }
        }
        active.push(s);
    }
}

/// A grant must have a larger fence than every grant that surely came
/// before it: one whose section ended before this one's grant can have
/// happened. That is this section's start for an exclusive holder (nobody
/// else held the lock between its grant and its start), and the start of
/// its wait for a reader or a permit (another holder could be granted while
/// this grant's reply was on its way).
fn regressions(inputs: &Inputs, lock: &str, list: &[&Section], found: &mut Findings) {
    let threshold = |s: &Section| match s.mode {
        Mode::Exclusive | Mode::Write => s.start,
        Mode::Read | Mode::Permit => s.wait_start,
    };
    let mut by_end: Vec<&Section> = list.to_vec();
    by_end.sort_by_key(|s| s.end);
    let mut by_threshold: Vec<&Section> = list.to_vec();
    by_threshold.sort_by_key(|s| threshold(s));
    let (mut max_grant, mut max_write, mut next) = (0u64, 0u64, 0usize);
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for s in by_threshold {
        while let Some(e) = by_end.get(next).filter(|e| e.end < threshold(s)) {
            if e.mode.grants_fence() {
                max_grant = max_grant.max(e.fence);
            }
            if matches!(e.mode, Mode::Write | Mode::Exclusive) {
                max_write = max_write.max(e.fence);
            }
            next += 1;
        }
        let regressed = if s.mode.grants_fence() {
            let dup = seen.entry(s.fence).or_insert(0);
            *dup += 1;
            s.fence <= max_grant || *dup > 1
        } else {
            s.fence < max_write
        };
        if regressed {
            found.fence_regressions += 1;
            if found.examples.len() < EXAMPLES {
                found.examples.push(format!(
                    "{lock}: fence regression at {} (largest fence ended before it: {})",
                    describe(inputs, s),
                    if s.mode.grants_fence() {
                        max_grant
                    } else {
                        max_write
                    }
                ));
            }
        }
    }
}

/// For each lease that was reported lost: how long after a new holder
/// started did its old holder learn it.
fn loss_detection(list: &[&Section], permits: Option<u32>, found: &mut Findings) {
    if permits.is_some() {
        found.lost_leases += list
            .iter()
            .filter(|s| s.outcome == Some(Outcome::Lost))
            .count() as u64;
        return;
    }
    for (i, &s) in list.iter().enumerate() {
        if s.outcome != Some(Outcome::Lost) {
            continue;
        }
        found.lost_leases += 1;
        let next = list[i + 1..]
            .iter()
            .find(|n| n.worker != s.worker && conflicts(n.mode, s.mode));
        if let Some(n) = next {
            if n.start < s.end {
                let ms = (s.end - n.start) as f64 / 1e6;
                found.loss_detection_ms_max = found.loss_detection_ms_max.max(ms);
            }
        }
    }
}

fn resource(served: &[Served], found: &mut Findings) {
    #[derive(Default)]
    struct Reg {
        largest: u64,
        value: u64,
    }
    let mut regs: HashMap<&str, Reg> = HashMap::new();
    for s in served {
        if !s.accepted {
            found.fenced_refused += 1;
            continue;
        }
        found.fenced_accepted += 1;
        let reg = regs.entry(&s.register).or_default();
        if s.op == Op::Write {
            if s.fence < reg.largest {
                found.stale_writes_accepted += 1;
            }
            if s.value != reg.value + 1 {
                found.lost_updates += 1;
            }
            reg.value = s.value;
        }
        reg.largest = reg.largest.max(s.fence);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Fault;
    use std::time::Duration;

    fn acq(lock: &str, mode: Mode, fence: u64, at: u64) -> Event {
        Event::Acquired {
            lock: lock.into(),
            mode,
            fence,
            wait_start: at,
            at,
        }
    }

    fn end(at: u64, outcome: Outcome) -> Event {
        Event::Ended { at, outcome }
    }

    fn worker(id: &str, events: Vec<Event>) -> WorkerLog {
        WorkerLog {
            id: id.into(),
            events,
            killed_at: None,
        }
    }

    fn inputs(workers: Vec<WorkerLog>) -> Inputs {
        Inputs {
            workers,
            run_end: 1_000,
            ..Inputs::default()
        }
    }

    fn served(worker: &str, op: Op, fence: u64, value: u64, accepted: bool) -> Served {
        Served {
            at: 0,
            worker: worker.into(),
            register: "mutex-0".into(),
            op,
            fence,
            value,
            accepted,
        }
    }

    #[test]
    fn a_clean_run_finds_nothing() {
        let x = Mode::Exclusive;
        let mut run = inputs(vec![
            worker(
                "a",
                vec![
                    acq("mutex-0", x, 10, 0),
                    end(5, Outcome::Done),
                    acq("mutex-0", x, 30, 20),
                    end(25, Outcome::Done),
                ],
            ),
            worker("b", vec![acq("mutex-0", x, 20, 10), end(15, Outcome::Done)]),
        ]);
        run.served = vec![
            served("a", Op::Write, 10, 1, true),
            served("b", Op::Write, 20, 2, true),
            served("a", Op::Write, 30, 3, true),
        ];
        let found = check(&run);
        assert_eq!(found.acquisitions, 3);
        assert!(found.failures().is_empty(), "{found:?}");
        assert_eq!(found.fenced_accepted, 3);
    }

    #[test]
    fn a_double_grant_is_unsafe_unless_a_holder_was_paused() {
        let x = Mode::Exclusive;
        let mut run = inputs(vec![
            worker("a", vec![acq("mutex-0", x, 10, 0), end(50, Outcome::Lost)]),
            worker("b", vec![acq("mutex-0", x, 20, 30), end(60, Outcome::Done)]),
        ]);
        let found = check(&run);
        assert_eq!((found.unsafe_overlaps, found.faulted_overlaps), (1, 0));
        assert_eq!(found.failures(), [("unsafe_overlaps", 1)]);
        assert_eq!(found.lost_leases, 1);
        assert!((found.loss_detection_ms_max - 20e-6).abs() < 1e-9);
        assert_eq!(found.examples.len(), 1);

        run.faults.push(Injected {
            fault: Fault::Pause(Duration::from_secs(1)),
            target: Some("a".into()),
            at_holder: true,
            start: 10,
            end: 40,
        });
        let found = check(&run);
        assert_eq!((found.unsafe_overlaps, found.faulted_overlaps), (0, 1));
    }

    #[test]
    fn readers_share_writers_do_not_and_a_semaphore_holds_its_permits() {
        let (r, w, p) = (Mode::Read, Mode::Write, Mode::Permit);
        let run = inputs(vec![
            worker("a", vec![acq("rwlock-0", r, 5, 0), end(10, Outcome::Done)]),
            worker("b", vec![acq("rwlock-0", r, 5, 2), end(12, Outcome::Done)]),
            worker("c", vec![acq("rwlock-0", w, 6, 11), end(20, Outcome::Done)]),
        ]);
        assert_eq!(check(&run).unsafe_overlaps, 1);

        let two = inputs(vec![
            worker(
                "a",
                vec![acq("semaphore-0", p, 1, 0), end(10, Outcome::Done)],
            ),
            worker(
                "b",
                vec![acq("semaphore-0", p, 2, 1), end(10, Outcome::Done)],
            ),
        ]);
        assert_eq!(check(&two).unsafe_overlaps, 0);
        let mut three = two.clone();
        three.workers.push(worker(
            "c",
            vec![acq("semaphore-0", p, 3, 5), end(6, Outcome::Done)],
        ));
        assert_eq!(check(&three).unsafe_overlaps, 1);
    }

    #[test]
    fn fences_that_go_back_or_repeat_are_regressions() {
        let x = Mode::Exclusive;
        let back = inputs(vec![
            worker("a", vec![acq("mutex-0", x, 50, 0), end(5, Outcome::Done)]),
            worker("b", vec![acq("mutex-0", x, 40, 10), end(15, Outcome::Done)]),
        ]);
        assert_eq!(check(&back).fence_regressions, 1);
        let twice = inputs(vec![
            worker("a", vec![acq("mutex-0", x, 50, 0), end(5, Outcome::Done)]),
            worker("b", vec![acq("mutex-0", x, 50, 10), end(15, Outcome::Done)]),
        ]);
        assert_eq!(check(&twice).fence_regressions, 1);
        let reader_behind = inputs(vec![
            worker(
                "a",
                vec![acq("rwlock-0", Mode::Write, 50, 0), end(5, Outcome::Done)],
            ),
            worker(
                "b",
                vec![acq("rwlock-0", Mode::Read, 49, 10), end(15, Outcome::Done)],
            ),
            worker(
                "c",
                vec![acq("rwlock-0", Mode::Read, 50, 10), end(15, Outcome::Done)],
            ),
        ]);
        assert_eq!(check(&reader_behind).fence_regressions, 1);
    }

    #[test]
    fn a_permit_granted_first_but_answered_late_is_no_regression() {
        let p = Mode::Permit;
        let late = |fence, wait_start, at| Event::Acquired {
            lock: "semaphore-0".into(),
            mode: p,
            fence,
            wait_start,
            at,
        };
        // a's grant (fence 10) left Redis before b's (fence 20), but its
        // reply came after b had come and gone.
        let run = inputs(vec![
            worker("a", vec![late(10, 0, 50), end(60, Outcome::Done)]),
            worker("b", vec![late(20, 5, 10), end(20, Outcome::Done)]),
        ]);
        assert_eq!(check(&run).fence_regressions, 0);
        // c asked after b had ended: its fence must be larger.
        let mut after = run.clone();
        after
            .workers
            .push(worker("c", vec![late(15, 30, 35), end(40, Outcome::Done)]));
        assert_eq!(check(&after).fence_regressions, 1);
    }

    #[test]
    fn the_resource_log_shows_stale_writes_and_lost_updates() {
        let mut run = inputs(vec![]);
        run.served = vec![
            served("a", Op::Read, 10, 0, true),
            served("b", Op::Read, 20, 0, true),
            served("b", Op::Write, 20, 1, true),
            served("a", Op::Write, 10, 1, true),
            served("a", Op::Write, 10, 1, false),
        ];
        let found = check(&run);
        assert_eq!(found.stale_writes_accepted, 1);
        assert_eq!(found.lost_updates, 1);
        assert_eq!((found.fenced_accepted, found.fenced_refused), (4, 1));
    }

    #[test]
    fn a_wait_error_counts_only_when_no_fault_explains_it() {
        let failed = |at| Event::WaitFailed {
            lock: "mutex-0".into(),
            wait_start: at - 5,
            at,
            kind: "connection".into(),
            message: "cannot reach".into(),
        };
        let mut run = inputs(vec![worker("a", vec![failed(100), failed(500)])]);
        run.fault_slack = 50;
        run.faults.push(Injected {
            fault: Fault::Blackhole(Duration::from_secs(1)),
            target: Some("a".into()),
            at_holder: false,
            start: 90,
            end: 120,
        });
        run.faults.push(Injected {
            fault: Fault::Reset,
            target: Some("other".into()),
            at_holder: false,
            start: 490,
            end: 495,
        });
        let found = check(&run);
        assert_eq!(
            (found.wait_errors, found.wait_errors_while_reachable),
            (2, 1)
        );
    }

    #[test]
    fn a_killed_holder_holds_until_it_dies() {
        let x = Mode::Exclusive;
        let mut a = worker("a", vec![acq("mutex-0", x, 10, 0)]);
        a.killed_at = Some(40);
        let run = inputs(vec![
            a,
            worker("b", vec![acq("mutex-0", x, 20, 30), end(60, Outcome::Done)]),
        ]);
        assert_eq!(check(&run).unsafe_overlaps, 1);
        let mut late = run.clone();
        late.workers[1].events[0] = acq("mutex-0", x, 20, 45);
        assert_eq!(check(&late).unsafe_overlaps, 0);
    }

    #[test]
    fn keys_without_a_ttl_fail_the_run() {
        let mut run = inputs(vec![]);
        run.keys_without_ttl.insert("leasehold:{mutex-0}".into());
        assert_eq!(check(&run).failures(), [("keys_without_ttl", 1)]);
    }
}
