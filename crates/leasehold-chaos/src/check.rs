//! The checker: reads the workers' logs, the faults as injected and the
//! fenced resource's log, and counts what went wrong.
//!
//! - An **overlap** is a pair of critical sections of one lock, by two
//!   workers, that the lock forbids at the same time (any two of a mutex, a
//!   writer with anyone), or a section that starts while the other holders
//!   of a semaphore already hold all its permits. Each is counted once
//!   (a pair, or a section too many). It is **faulted** when the earlier
//!   holder's lease could have run out while it believed it held it: the
//!   holder, granted first as the fences tell, was stopped (SIGSTOP) from
//!   before the later grant, long enough for its lease to run out first,
//!   and was still stopped when it did.
//!   Only fences protect the resource then. Every other overlap is
//!   **unsafe**: the lock was granted twice. No other fault excuses one: a
//!   holder that runs learns of a lost lease from its own clock before
//!   Redis lets the lease go; a killed holder holds nothing after its
//!   death; a fault of the later holder changes nothing; and across a
//!   restart that lost the locks, the restart grace is what keeps them
//!   from being granted again while old holders still hold them.
//! - A **stale write** is a write that a worker saw accepted although
//!   another request of the same register, with a larger fence, had been
//!   accepted before that write was sent, as the workers' own logs show.
//!   It does not rest on the resource's rule or its log: a resource that
//!   ignores fences (`--unfenced`) lets them through.
//! - A **lost update** is an accepted write that is not the previous
//!   accepted write's value plus one (two holders read the same value).
//! - A **fence regression** is a grant whose fence is not larger than the
//!   fence of every grant of its lock that ended before it started (a
//!   reader: smaller than a write that ended before it), or a fence handed
//!   out twice.
//! - A **nested mismatch** is a second level of a held lock (a reentry, the
//!   read lock a writer downgrades to) that reported another fence than
//!   the level it nests in while that lease was not lost, or a write sent
//!   after such a level was refused.

use std::collections::{BTreeSet, HashMap};

use serde_json::{json, Value};

use crate::events::{Answer, Event, Mode, Op, Outcome};
use crate::faults::Injected;
use crate::resource::Served;
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
    /// Every lease, in nanoseconds.
    pub(crate) lease: u64,
    /// Workers that exited when nothing in the schedule stopped them, or
    /// would not stop: what they left on standard error.
    pub(crate) worker_failures: Vec<String>,
}

#[derive(Debug, Clone)]
struct Section {
    worker: usize,
    wait_start: u64,
    lock: String,
    mode: Mode,
    fence: u64,
    permits: u32,
    start: u64,
    end: u64,
    /// The holder's deadline for its lease as it logged the grant; 0 when
    /// unknown.
    valid_until: u64,
    outcome: Option<Outcome>,
    /// The reader half of a downgrade: the acquisition of the writer
    /// section before it, not one of its own.
    continued: bool,
}

/// A request to the fenced resource, as its worker logged it.
#[derive(Debug, Clone)]
struct Request<'a> {
    worker: &'a str,
    register: &'a str,
    op: Op,
    fence: u64,
    sent: u64,
    answered: u64,
    answer: Answer,
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
    pub(crate) nested: u64,
    pub(crate) nested_mismatches: u64,
    pub(crate) lost_leases: u64,
    pub(crate) loss_detection_ms_max: f64,
    pub(crate) loss_detection_after_resume_ms_max: f64,
    pub(crate) faults_struck_sections: u64,
    pub(crate) wait_errors: u64,
    pub(crate) wait_errors_while_reachable: u64,
    pub(crate) wait_timeouts: u64,
    pub(crate) release_errors: u64,
    pub(crate) keys_without_ttl: u64,
    pub(crate) workers_failed: u64,
    /// A few of the unsafe overlaps and regressions, for a person to read.
    pub(crate) examples: Vec<String>,
}

const EXAMPLES: usize = 5;

const MS: u64 = 1_000_000;

/// The watchdog renews a lease at a third of its length; a tenth more
/// allows for a renewal that went out late.
fn renewal_gap(lease: u64) -> u64 {
    lease / 3 + lease / 10
}

/// What Redis's clock and the monotonic clock may differ by over a
/// lease, as the library allows for it: 1% plus 2 ms.
fn expiry_slack(lease: u64) -> u64 {
    lease / 100 + 2 * MS
}

impl Findings {
    /// The figures that must be 0 for a run to pass.
    pub(crate) fn failures(&self) -> Vec<(&'static str, u64)> {
        [
            ("unsafe_overlaps", self.unsafe_overlaps),
            ("stale_writes_accepted", self.stale_writes_accepted),
            ("lost_updates", self.lost_updates),
            ("fence_regressions", self.fence_regressions),
            ("nested_mismatches", self.nested_mismatches),
            ("keys_without_ttl", self.keys_without_ttl),
            ("workers_failed", self.workers_failed),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect()
    }

    pub(crate) fn to_json(&self) -> Value {
        let ms = |x: f64| (x * 1000.0).round() / 1000.0;
        json!({
            "acquisitions": self.acquisitions,
            "unsafe_overlaps": self.unsafe_overlaps,
            "faulted_overlaps": self.faulted_overlaps,
            "fenced_accepted": self.fenced_accepted,
            "fenced_refused": self.fenced_refused,
            "stale_writes_accepted": self.stale_writes_accepted,
            "lost_updates": self.lost_updates,
            "fence_regressions": self.fence_regressions,
            "nested": self.nested,
            "nested_mismatches": self.nested_mismatches,
            "lost_leases": self.lost_leases,
            "loss_detection_ms_max": ms(self.loss_detection_ms_max),
            "loss_detection_after_resume_ms_max": ms(self.loss_detection_after_resume_ms_max),
            "faults_struck_sections": self.faults_struck_sections,
            "wait_errors": self.wait_errors,
            "wait_errors_while_reachable": self.wait_errors_while_reachable,
            "wait_timeouts": self.wait_timeouts,
            "release_errors": self.release_errors,
            "keys_without_ttl": self.keys_without_ttl,
            "workers_failed": self.workers_failed,
            "examples": self.examples,
        })
    }

    fn example(&mut self, text: String) {
        if self.examples.len() < EXAMPLES {
            self.examples.push(text);
        }
    }
}

pub(crate) fn check(inputs: &Inputs) -> Findings {
    let mut found = Findings {
        keys_without_ttl: inputs.keys_without_ttl.len() as u64,
        workers_failed: inputs.worker_failures.len() as u64,
        ..Findings::default()
    };
    for failure in &inputs.worker_failures {
        found.example(format!("worker failed: {failure}"));
    }
    for key in &inputs.keys_without_ttl {
        found.example(format!("key without a TTL: {key}"));
    }
    let (sections, requests) = sections(inputs, &mut found);
    found.acquisitions = sections.iter().filter(|s| !s.continued).count() as u64;
    found.faults_struck_sections = struck(inputs, &sections);
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
        loss_detection(inputs, &list, permits, &mut found);
    }
    stale_writes(&requests, &mut found);
    resource(&inputs.served, &mut found);
    found
}

/// The critical sections, from each worker's acquire to its end (or its
/// death, or the run's end), and the workers' requests to the resource;
/// also counts the waits, nested levels and releases that failed.
fn sections<'a>(inputs: &'a Inputs, found: &mut Findings) -> (Vec<Section>, Vec<Request<'a>>) {
    let mut out = Vec::new();
    let mut requests = Vec::new();
    for (w, log) in inputs.workers.iter().enumerate() {
        let mut open: Option<Section> = None;
        // A level nested in the last section was refused: it must not write.
        let mut nest_refused = false;
        let close = |mut s: Section, end: u64, outcome: Option<Outcome>| {
            s.end = end.max(s.start);
            s.outcome = outcome;
            s
        };
        for event in &log.events {
            match event {
                Event::Acquired {
                    lock,
                    mode,
                    fence,
                    permits,
                    wait_start,
                    at,
                    valid_until,
                } => {
                    if let Some(s) = open.take() {
                        out.push(close(s, *at, None));
                    }
                    nest_refused = false;
                    open = Some(Section {
                        worker: w,
                        wait_start: *wait_start,
                        lock: lock.clone(),
                        mode: *mode,
                        fence: *fence,
                        permits: *permits,
                        start: *at,
                        end: *at,
                        valid_until: *valid_until,
                        outcome: None,
                        continued: false,
                    });
                }
                Event::Nested {
                    fence,
                    lost,
                    result,
                    ..
                } => {
                    found.nested += 1;
                    if result != "ok" {
                        nest_refused = true;
                    } else if let Some(s) = open.as_ref().filter(|s| s.fence != *fence && !*lost) {
                        found.nested_mismatches += 1;
                        found.example(format!(
                            "{}: a nested level of {} reported fence {fence}",
                            s.lock,
                            describe(inputs, s)
                        ));
                    }
                }
                Event::Downgraded { at } => {
                    if let Some(s) = open.take() {
                        let reader = Section {
                            mode: Mode::Read,
                            start: *at,
                            // A read lease of its own, whose deadline was
                            // not logged.
                            valid_until: 0,
                            continued: true,
                            ..s.clone()
                        };
                        out.push(close(s, *at, None));
                        open = Some(reader);
                    }
                }
                Event::Request {
                    register,
                    op,
                    fence,
                    sent,
                    answered,
                    answer,
                    ..
                } => {
                    if *op == Op::Write && nest_refused {
                        found.nested_mismatches += 1;
                        found.example(format!(
                            "{register}: {} wrote after a nested level was refused",
                            log.id
                        ));
                    }
                    requests.push(Request {
                        worker: &log.id,
                        register,
                        op: *op,
                        fence: *fence,
                        sent: *sent,
                        answered: *answered,
                        answer: *answer,
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
    (out, requests)
}

/// How many faults struck while a section they could touch was in
/// progress: one of its target's, or any for a fault of Redis itself.
fn struck(inputs: &Inputs, sections: &[Section]) -> u64 {
    inputs
        .faults
        .iter()
        .filter(|f| {
            sections.iter().any(|s| {
                s.start <= f.end
                    && s.end >= f.start
                    && f.target
                        .as_ref()
                        .is_none_or(|t| *t == inputs.workers[s.worker].id)
            })
        })
        .count() as u64
}

fn conflicts(a: Mode, b: Mode) -> bool {
    // Readers share with readers, permits with permits (up to the count).
    a != b || !matches!(a, Mode::Read | Mode::Permit)
}

fn describe(inputs: &Inputs, s: &Section) -> String {
    format!(
        "{} ({}{}, fence {}, {}..{} ms)",
        inputs.workers[s.worker].id,
        s.mode.as_str(),
        if s.permits > 1 {
            format!(" x{}", s.permits)
        } else {
            String::new()
        },
        s.fence,
        s.start / MS,
        s.end / MS,
    )
}

/// Whether `earlier` was granted before `later`, as their fences tell:
/// each grant's fence is larger than every earlier one of its lock, and
/// readers holding together share one.
fn granted_before(earlier: &Section, later: &Section) -> bool {
    if later.mode == Mode::Read {
        earlier.fence <= later.fence
    } else {
        earlier.fence < later.fence
    }
}

/// Whether `earlier`'s lease could have run out before `later` was
/// granted, with `earlier` none the wiser: `earlier` was granted first,
/// a SIGSTOP of its worker began before `later`'s grant, while `earlier`
/// waited or held, and the lease could have run out (at the soonest, a
/// lease after its grant or after its last renewal before the stop, and
/// never before the deadline its holder logged with the grant) before
/// `later`'s grant and while the stop lasted. A holder that runs when its
/// lease runs out learns it from its own clock first; a grant to another
/// before the holder's own deadline is a lock granted twice, stopped
/// holder or not.
fn lapsed(inputs: &Inputs, earlier: &Section, later: &Section) -> bool {
    if !granted_before(earlier, later) {
        return false;
    }
    let id = &inputs.workers[earlier.worker].id;
    let lease = inputs.lease;
    inputs
        .faults
        .iter()
        .filter(|f| f.fault.stops_holder() && f.target.as_ref() == Some(id))
        .any(|f| {
            let renewed = earlier
                .wait_start
                .max(f.start.saturating_sub(renewal_gap(lease)));
            let runs_out = (renewed + lease)
                .saturating_sub(expiry_slack(lease))
                .max(earlier.valid_until);
            f.start < later.start
                && f.end > earlier.wait_start
                && f.start < earlier.end
                && runs_out <= later.start
                && runs_out <= f.end
        })
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
        let mut record = |others: &[&Section], excused: bool| {
            if excused {
                found.faulted_overlaps += 1;
                return;
            }
            found.unsafe_overlaps += 1;
            let with: Vec<String> = others.iter().map(|o| describe(inputs, o)).collect();
            found.example(format!(
                "{lock}: {} overlaps {}",
                describe(inputs, s),
                with.join(", ")
            ));
        };
        match permits {
            Some(n) => {
                let others: Vec<&Section> = active
                    .iter()
                    .copied()
                    .filter(|a| a.worker != s.worker)
                    .collect();
                let held: u32 = s.permits + others.iter().map(|o| o.permits).sum::<u32>();
                if held > n {
                    let gone: u32 = others
                        .iter()
                        .filter(|o| lapsed(inputs, o, s))
                        .map(|o| o.permits)
                        .sum::<u32>()
                        + if others.iter().any(|o| lapsed(inputs, s, o)) {
                            s.permits
                        } else {
                            0
                        };
                    record(&others, held.saturating_sub(gone) <= n);
                }
            }
            None => {
                for &a in &active {
                    if a.worker != s.worker && conflicts(a.mode, s.mode) {
                        record(&[a], lapsed(inputs, a, s) || lapsed(inputs, s, a));
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
/// else held the lock between its grant and its start), unless a fault of
/// its worker (a stop, a slow reply) came between them: its lease may have
/// run out meanwhile and others come and gone, so the bound is the start
/// of its wait, as for a reader or a permit (another holder could be
/// granted while this grant's reply was on its way).
fn regressions(inputs: &Inputs, lock: &str, list: &[&Section], found: &mut Findings) {
    let delayed = |s: &Section| {
        let id = &inputs.workers[s.worker].id;
        inputs
            .faults
            .iter()
            .any(|f| f.target.as_ref() == Some(id) && f.start <= s.start && f.end >= s.wait_start)
    };
    let threshold = |s: &Section| match s.mode {
        Mode::Exclusive | Mode::Write if !delayed(s) => s.start,
        _ => s.wait_start,
    };
    let mut by_end: Vec<&Section> = list.to_vec();
    by_end.sort_by_key(|s| s.end);
    let mut by_threshold: Vec<(u64, &Section)> = list
        .iter()
        .filter(|s| !s.continued)
        .map(|&s| (threshold(s), s))
        .collect();
    by_threshold.sort_by_key(|(t, _)| *t);
    let (mut max_grant, mut max_write, mut next) = (0u64, 0u64, 0usize);
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for (threshold, s) in by_threshold {
        while let Some(e) = by_end.get(next).filter(|e| e.end < threshold) {
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
            found.example(format!(
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

/// For each lease that was reported lost: how long after a new holder
/// started did its old holder learn it, and how long after the old holder
/// was let go on again when a stop held it past the new holder's start.
fn loss_detection(inputs: &Inputs, list: &[&Section], permits: Option<u32>, found: &mut Findings) {
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
        let Some(n) = next.filter(|n| n.start < s.end) else {
            continue;
        };
        let id = &inputs.workers[s.worker].id;
        // A stop's end is logged once SIGCONT has been sent, and the holder
        // may run, and log its loss, before that: a stop that ends after the
        // section resumed it at the section's end at the latest.
        let resumed = inputs
            .faults
            .iter()
            .filter(|f| f.fault.stops_holder() && f.target.as_ref() == Some(id))
            .filter(|f| f.start < s.end)
            .map(|f| f.end.min(s.end))
            .fold(n.start, u64::max);
        let ms = |ns: u64| ns as f64 / 1e6;
        found.loss_detection_ms_max = found.loss_detection_ms_max.max(ms(s.end - n.start));
        found.loss_detection_after_resume_ms_max = found
            .loss_detection_after_resume_ms_max
            .max(ms(s.end - resumed));
    }
}

/// Writes that their workers saw accepted after a request of the same
/// register with a larger fence had been answered as accepted: the
/// resource had seen the larger fence first, so it had to refuse them.
fn stale_writes(requests: &[Request<'_>], found: &mut Findings) {
    let mut by_register: HashMap<&str, Vec<&Request<'_>>> = HashMap::new();
    for r in requests.iter().filter(|r| r.answer == Answer::Accepted) {
        by_register.entry(r.register).or_default().push(r);
    }
    let mut registers: Vec<_> = by_register.into_iter().collect();
    registers.sort_by(|a, b| a.0.cmp(b.0));
    for (register, list) in registers {
        let mut answered = list.clone();
        answered.sort_by_key(|r| r.answered);
        let mut writes: Vec<&Request<'_>> =
            list.into_iter().filter(|r| r.op == Op::Write).collect();
        writes.sort_by_key(|r| r.sent);
        let (mut largest, mut next) = (0u64, 0usize);
        for w in writes {
            while let Some(r) = answered.get(next).filter(|r| r.answered < w.sent) {
                largest = largest.max(r.fence);
                next += 1;
            }
            if w.fence < largest {
                found.stale_writes_accepted += 1;
                found.example(format!(
                    "{register}: {}'s write with fence {} was accepted after fence {largest} had been",
                    w.worker, w.fence
                ));
            }
        }
    }
}

fn resource(served: &[Served], found: &mut Findings) {
    let mut values: HashMap<&str, u64> = HashMap::new();
    for s in served {
        if !s.accepted {
            found.fenced_refused += 1;
            continue;
        }
        found.fenced_accepted += 1;
        if s.op == Op::Write {
            let value = values.entry(&s.register).or_default();
            if s.value != *value + 1 {
                found.lost_updates += 1;
                found.example(format!(
                    "{}: {} wrote {} over {} (fence {})",
                    s.register, s.worker, s.value, value, s.fence
                ));
            }
            *value = s.value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Fault;
    use std::time::Duration;

    const LEASE: u64 = 1000 * MS;

    fn acq(lock: &str, mode: Mode, fence: u64, at: u64) -> Event {
        late(lock, mode, fence, at, at)
    }

    /// An acquisition whose wait started at `wait_start`.
    fn late(lock: &str, mode: Mode, fence: u64, wait_start: u64, at: u64) -> Event {
        Event::Acquired {
            lock: lock.into(),
            mode,
            fence,
            permits: 1,
            wait_start,
            at,
            valid_until: 0,
        }
    }

    fn end(at: u64, outcome: Outcome) -> Event {
        Event::Ended { at, outcome }
    }

    fn req(op: Op, fence: u64, sent: u64, answered: u64, answer: Answer) -> Event {
        Event::Request {
            register: "mutex-0".into(),
            op,
            fence,
            value: 0,
            sent,
            answered,
            answer,
        }
    }

    fn nest(at: u64, fence: u64, result: &str) -> Event {
        Event::Nested {
            at,
            fence,
            lost: false,
            result: result.into(),
        }
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
            run_end: 100_000 * MS,
            lease: LEASE,
            ..Inputs::default()
        }
    }

    fn fault(fault: Fault, target: Option<&str>, start: u64, end: u64) -> Injected {
        Injected {
            fault,
            target: target.map(str::to_owned),
            at_holder: true,
            start,
            end,
        }
    }

    fn pause(target: &str, start: u64, end: u64) -> Injected {
        fault(
            Fault::Pause(Duration::from_nanos(end - start)),
            Some(target),
            start,
            end,
        )
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

    fn overlaps_of(run: &Inputs) -> (u64, u64) {
        let found = check(run);
        (found.unsafe_overlaps, found.faulted_overlaps)
    }

    /// A holds mutex-0 from 0 to 1000 ms; B is granted it from 100 to
    /// 200 ms.
    fn a_and_b() -> Inputs {
        let x = Mode::Exclusive;
        inputs(vec![
            worker(
                "a",
                vec![acq("mutex-0", x, 10, 0), end(1000 * MS, Outcome::Done)],
            ),
            worker(
                "b",
                vec![
                    acq("mutex-0", x, 20, 100 * MS),
                    end(200 * MS, Outcome::Done),
                ],
            ),
        ])
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
    fn a_double_grant_is_unsafe() {
        let run = a_and_b();
        let found = check(&run);
        assert_eq!((found.unsafe_overlaps, found.faulted_overlaps), (1, 0));
        assert_eq!(found.failures(), [("unsafe_overlaps", 1)]);
        assert_eq!(found.examples.len(), 1);
    }

    #[test]
    fn an_overlap_is_excused_when_the_earlier_holder_was_stopped_past_its_lease() {
        // A stopped for 3 leases from 100 ms; B granted at 1200 ms, after
        // A's lease ran out, while A was still stopped.
        let x = Mode::Exclusive;
        let mut run = inputs(vec![
            worker(
                "a",
                vec![acq("mutex-0", x, 10, 0), end(3110 * MS, Outcome::Lost)],
            ),
            worker(
                "b",
                vec![
                    acq("mutex-0", x, 20, 1200 * MS),
                    end(1300 * MS, Outcome::Done),
                ],
            ),
        ]);
        run.faults.push(pause("a", 100 * MS, 3100 * MS));
        assert_eq!(overlaps_of(&run), (0, 1));
        let found = check(&run);
        assert_eq!(found.lost_leases, 1);
        assert!((found.loss_detection_ms_max - 1910.0).abs() < 1e-6);
        assert!((found.loss_detection_after_resume_ms_max - 10.0).abs() < 1e-6);
        assert_eq!(found.faults_struck_sections, 1);

        // The stop's end logged a little after A, resumed, logged its loss.
        let mut logged_late = run.clone();
        logged_late.faults[0].end = 3115 * MS;
        let found = check(&logged_late);
        assert!((found.loss_detection_ms_max - 1910.0).abs() < 1e-6);
        assert!(found.loss_detection_after_resume_ms_max.abs() < 1e-6);

        // B granted before A's lease could have run out: granted twice.
        let mut soon = run.clone();
        soon.workers[1].events[0] = acq("mutex-0", x, 20, 500 * MS);
        assert_eq!(overlaps_of(&soon), (1, 0));
    }

    #[test]
    fn a_grant_before_the_stopped_holders_own_deadline_is_unsafe() {
        // A waited from 0, was granted with its deadline at 3000 ms and
        // logged it at 2000 ms, then was stopped from 2050 ms for 3 leases.
        // B, granted at 2700 ms, came before A's deadline: Redis still had
        // A's lease, so the lock was granted twice, stop or not.
        let x = Mode::Exclusive;
        let a_granted = |valid_until| Event::Acquired {
            lock: "mutex-0".into(),
            mode: x,
            fence: 10,
            permits: 1,
            wait_start: 0,
            at: 2000 * MS,
            valid_until,
        };
        let run_with = |valid_until, b_at| {
            let mut run = inputs(vec![
                worker(
                    "a",
                    vec![a_granted(valid_until), end(5100 * MS, Outcome::Lost)],
                ),
                worker(
                    "b",
                    vec![
                        acq("mutex-0", x, 20, b_at),
                        end(b_at + 100 * MS, Outcome::Done),
                    ],
                ),
            ]);
            run.faults.push(pause("a", 2050 * MS, 5050 * MS));
            run
        };
        assert_eq!(overlaps_of(&run_with(3000 * MS, 2700 * MS)), (1, 0));
        // Without the deadline, all the checker knows is that the grant
        // came after A's wait began: the lease could have run out.
        assert_eq!(overlaps_of(&run_with(0, 2700 * MS)), (0, 1));
        // After A's deadline (and its lease), B's grant is excused.
        assert_eq!(overlaps_of(&run_with(3000 * MS, 3100 * MS)), (0, 1));
    }

    #[test]
    fn a_stop_that_began_after_the_later_grant_excuses_nothing() {
        // (a): A stopped from 500 to 900 ms, after B's section had ended.
        let mut run = a_and_b();
        run.faults.push(pause("a", 500 * MS, 900 * MS));
        assert_eq!(overlaps_of(&run), (1, 0));
        // Even a long one.
        let mut long = a_and_b();
        long.faults.push(pause("a", 150 * MS, 3150 * MS));
        assert_eq!(overlaps_of(&long), (1, 0));
    }

    #[test]
    fn a_stop_of_the_later_holder_excuses_nothing() {
        // (b): B stopped after its own grant.
        let mut run = a_and_b();
        run.faults.push(pause("b", 150 * MS, 3150 * MS));
        assert_eq!(overlaps_of(&run), (1, 0));
    }

    #[test]
    fn a_kill_excuses_nothing() {
        // (c): A killed at 500 ms; its section ends there, the overlap with
        // B began while A was alive and running.
        let x = Mode::Exclusive;
        let mut a = worker("a", vec![acq("mutex-0", x, 10, 0)]);
        a.killed_at = Some(500 * MS);
        let mut run = a_and_b();
        run.workers[0] = a;
        run.faults
            .push(fault(Fault::Kill, Some("a"), 499 * MS, 500 * MS));
        assert_eq!(overlaps_of(&run), (1, 0));
        // B granted after A's death: no overlap at all.
        run.workers[1].events[0] = acq("mutex-0", x, 20, 600 * MS);
        run.workers[1].events[1] = end(700 * MS, Outcome::Done);
        assert_eq!(overlaps_of(&run), (0, 0));
    }

    #[test]
    fn a_stop_shorter_than_a_renewed_lease_excuses_nothing() {
        // Half a lease: the watchdog renewed within a third of a lease
        // before it, so the lease outlives the stop.
        let x = Mode::Exclusive;
        let mut run = inputs(vec![
            worker(
                "a",
                vec![acq("mutex-0", x, 10, 0), end(3000 * MS, Outcome::Done)],
            ),
            worker(
                "b",
                vec![
                    acq("mutex-0", x, 20, 2700 * MS),
                    end(2800 * MS, Outcome::Done),
                ],
            ),
        ]);
        run.faults.push(pause("a", 2000 * MS, 2500 * MS));
        assert_eq!(overlaps_of(&run), (1, 0));
    }

    #[test]
    fn network_faults_restarts_and_client_pauses_excuse_nothing() {
        let long = Duration::from_secs(3);
        for f in [
            fault(Fault::Blackhole(long), Some("a"), 0, 3000 * MS),
            fault(
                Fault::Latency {
                    replies_only: false,
                    latency: long,
                    lasting: long,
                },
                Some("a"),
                0,
                3000 * MS,
            ),
            fault(Fault::HalfOpen, Some("a"), 0, 3000 * MS),
            fault(Fault::ClientPause(long), None, 0, 3000 * MS),
            fault(
                Fault::Restart {
                    aof: false,
                    down: Duration::ZERO,
                },
                None,
                50 * MS,
                90 * MS,
            ),
        ] {
            let mut run = a_and_b();
            run.faults.push(f.clone());
            assert_eq!(overlaps_of(&run), (1, 0), "{}", f.fault);
        }
    }

    #[test]
    fn a_holder_stopped_before_it_logged_its_grant_is_the_earlier_one() {
        // A granted while waiting from 0, stopped from 50 ms for 3 leases
        // before it could log its start (at 3060 ms); B granted at 1200 ms
        // and still holding then.
        let x = Mode::Exclusive;
        let mut run = inputs(vec![
            worker(
                "a",
                vec![
                    late("mutex-0", x, 10, 0, 3060 * MS),
                    end(3070 * MS, Outcome::Lost),
                ],
            ),
            worker(
                "b",
                vec![
                    acq("mutex-0", x, 20, 1200 * MS),
                    end(3500 * MS, Outcome::Done),
                ],
            ),
        ]);
        run.faults.push(pause("a", 50 * MS, 3050 * MS));
        let found = check(&run);
        assert_eq!((found.unsafe_overlaps, found.faulted_overlaps), (0, 1));
        assert_eq!(found.fence_regressions, 0);
    }

    #[test]
    fn a_waiter_stopped_and_granted_after_it_resumed_is_the_later_one() {
        // A waited from 0, was stopped from 50 ms for 3 leases, and was
        // granted after it resumed (its fence is larger than B's), while B
        // still held: granted twice.
        let x = Mode::Exclusive;
        let mut run = inputs(vec![
            worker(
                "a",
                vec![
                    late("mutex-0", x, 30, 0, 3060 * MS),
                    end(3070 * MS, Outcome::Done),
                ],
            ),
            worker(
                "b",
                vec![
                    acq("mutex-0", x, 20, 1200 * MS),
                    end(3500 * MS, Outcome::Done),
                ],
            ),
        ]);
        run.faults.push(pause("a", 50 * MS, 3050 * MS));
        assert_eq!(overlaps_of(&run), (1, 0));
    }

    #[test]
    fn a_fence_is_no_regression_when_its_holder_was_stopped_before_logging_it() {
        // A's grant (fence 10) came before B's (fence 20), but A was
        // stopped before it logged it; B came and went meanwhile.
        let x = Mode::Exclusive;
        let mut run = inputs(vec![
            worker(
                "a",
                vec![
                    late("mutex-0", x, 10, 0, 3100 * MS),
                    end(3200 * MS, Outcome::Lost),
                ],
            ),
            worker(
                "b",
                vec![
                    acq("mutex-0", x, 20, 1200 * MS),
                    end(1300 * MS, Outcome::Done),
                ],
            ),
        ]);
        run.faults.push(pause("a", 50 * MS, 3050 * MS));
        assert_eq!(check(&run).fence_regressions, 0);
        // Nothing held A back: the fence went back.
        run.faults.clear();
        assert_eq!(check(&run).fence_regressions, 1);
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

        // One lease of both permits leaves room for nobody.
        let mut whole = two.clone();
        whole.workers[0].events[0] = Event::Acquired {
            lock: "semaphore-0".into(),
            mode: p,
            fence: 1,
            permits: 2,
            wait_start: 0,
            at: 0,
            valid_until: 0,
        };
        assert_eq!(check(&whole).unsafe_overlaps, 1);
    }

    #[test]
    fn a_semaphore_holder_too_many_is_unsafe_though_another_was_stopped_later() {
        // (d): x, y and z hold the two permits at once from 100 ms; x is
        // stopped at 500 ms, after.
        let p = Mode::Permit;
        let mut run = inputs(vec![
            worker(
                "x",
                vec![acq("semaphore-0", p, 1, 0), end(1000 * MS, Outcome::Done)],
            ),
            worker(
                "y",
                vec![
                    acq("semaphore-0", p, 2, 10 * MS),
                    end(1000 * MS, Outcome::Done),
                ],
            ),
            worker(
                "z",
                vec![
                    acq("semaphore-0", p, 3, 100 * MS),
                    end(200 * MS, Outcome::Done),
                ],
            ),
        ]);
        run.faults.push(pause("x", 500 * MS, 3500 * MS));
        assert_eq!(overlaps_of(&run), (1, 0));
        // x stopped from 5 ms, for 3 leases, and z granted at 1100 ms: x's
        // lease could have run out first.
        run.faults[0] = pause("x", 5 * MS, 3005 * MS);
        run.workers[0].events[1] = end(3010 * MS, Outcome::Lost);
        run.workers[1].events[1] = end(3000 * MS, Outcome::Done);
        run.workers[2].events = vec![
            acq("semaphore-0", p, 3, 1100 * MS),
            end(1200 * MS, Outcome::Done),
        ];
        assert_eq!(overlaps_of(&run), (0, 1));
    }

    #[test]
    fn a_downgrade_lets_readers_in_and_keeps_writers_out() {
        let (r, w) = (Mode::Read, Mode::Write);
        let writer = worker(
            "a",
            vec![
                acq("rwlock-0", w, 7, 0),
                nest(5, 7, "ok"),
                Event::Downgraded { at: 6 },
                end(20, Outcome::Done),
            ],
        );
        let mut run = inputs(vec![
            writer,
            worker("b", vec![acq("rwlock-0", r, 7, 8), end(12, Outcome::Done)]),
        ]);
        let found = check(&run);
        assert_eq!(found.unsafe_overlaps, 0, "{found:?}");
        assert_eq!((found.acquisitions, found.nested), (2, 1));
        assert_eq!(found.fence_regressions, 0);
        run.workers.push(worker(
            "c",
            vec![acq("rwlock-0", w, 8, 10), end(12, Outcome::Done)],
        ));
        assert_eq!(check(&run).unsafe_overlaps, 2);
        // A reader during the writer half overlaps.
        run.workers.pop();
        run.workers[1].events[0] = acq("rwlock-0", r, 7, 4);
        assert_eq!(check(&run).unsafe_overlaps, 1);
    }

    #[test]
    fn a_nested_level_must_report_its_holders_fence_and_a_refused_one_must_not_write() {
        let x = Mode::Exclusive;
        let same = inputs(vec![worker(
            "a",
            vec![
                acq("reentrant-0", x, 7, 0),
                nest(2, 7, "ok"),
                req(Op::Write, 7, 3, 4, Answer::Accepted),
                end(5, Outcome::Done),
            ],
        )]);
        let found = check(&same);
        assert_eq!((found.nested, found.nested_mismatches), (1, 0));

        let mut other = same.clone();
        other.workers[0].events[1] = nest(2, 8, "ok");
        assert_eq!(
            check(&other).failures(),
            [("nested_mismatches", 1)],
            "another fence"
        );
        // Unless the outer lease was lost by then.
        other.workers[0].events[1] = Event::Nested {
            at: 2,
            fence: 8,
            lost: true,
            result: "ok".into(),
        };
        assert_eq!(check(&other).nested_mismatches, 0);

        let mut refused = same.clone();
        refused.workers[0].events[1] = nest(2, 0, "connection");
        assert_eq!(check(&refused).nested_mismatches, 1);
        refused.workers[0].events.remove(2);
        assert_eq!(check(&refused).nested_mismatches, 0);
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
        // a's grant (fence 10) left Redis before b's (fence 20), but its
        // reply came after b had come and gone.
        let run = inputs(vec![
            worker(
                "a",
                vec![late("semaphore-0", p, 10, 0, 50), end(60, Outcome::Done)],
            ),
            worker(
                "b",
                vec![late("semaphore-0", p, 20, 5, 10), end(20, Outcome::Done)],
            ),
        ]);
        assert_eq!(check(&run).fence_regressions, 0);
        // c asked after b had ended: its fence must be larger.
        let mut after = run.clone();
        after.workers.push(worker(
            "c",
            vec![late("semaphore-0", p, 15, 30, 35), end(40, Outcome::Done)],
        ));
        assert_eq!(check(&after).fence_regressions, 1);
    }

    #[test]
    fn a_write_accepted_after_a_larger_fence_was_is_stale_whatever_the_resource_logged() {
        let x = Mode::Exclusive;
        // b read with fence 20 and had its answer at 12; a's write with
        // fence 10, sent at 15, was accepted. The resource's own log is
        // left empty: the checker does not lean on it.
        let run = inputs(vec![
            worker(
                "a",
                vec![
                    acq("mutex-0", x, 10, 0),
                    req(Op::Read, 10, 1, 2, Answer::Accepted),
                    end(5, Outcome::Lost),
                    req(Op::Write, 10, 15, 16, Answer::Accepted),
                ],
            ),
            worker(
                "b",
                vec![
                    acq("mutex-0", x, 20, 10),
                    req(Op::Read, 20, 11, 12, Answer::Accepted),
                    end(13, Outcome::Done),
                ],
            ),
        ]);
        let found = check(&run);
        assert_eq!(found.stale_writes_accepted, 1);
        assert!(found.failures().contains(&("stale_writes_accepted", 1)));
        // Refused, it is what fences are for.
        let mut refused = run.clone();
        refused.workers[0].events[3] = req(Op::Write, 10, 15, 16, Answer::Refused);
        assert_eq!(check(&refused).stale_writes_accepted, 0);
        // Sent before the larger fence was answered: the resource may have
        // served it first.
        let mut racing = run.clone();
        racing.workers[0].events[3] = req(Op::Write, 10, 11, 16, Answer::Accepted);
        assert_eq!(check(&racing).stale_writes_accepted, 0);
    }

    #[test]
    fn the_resource_log_shows_lost_updates() {
        let mut run = inputs(vec![]);
        run.served = vec![
            served("a", Op::Read, 10, 0, true),
            served("b", Op::Read, 20, 0, true),
            served("b", Op::Write, 20, 1, true),
            served("a", Op::Write, 10, 1, true),
            served("a", Op::Write, 10, 1, false),
        ];
        let found = check(&run);
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
    fn faults_that_met_no_section_are_not_counted_as_striking_one() {
        let mut run = a_and_b();
        run.faults.push(pause("a", 5000 * MS, 6000 * MS));
        run.faults.push(pause("b", 150 * MS, 160 * MS));
        run.faults.push(pause("c", 150 * MS, 160 * MS));
        run.faults
            .push(fault(Fault::ClientPause(LEASE_D), None, 900 * MS, 950 * MS));
        assert_eq!(check(&run).faults_struck_sections, 2);
    }

    const LEASE_D: Duration = Duration::from_secs(1);

    #[test]
    fn keys_without_a_ttl_and_failed_workers_fail_the_run() {
        let mut run = inputs(vec![]);
        run.keys_without_ttl.insert("leasehold:{mutex-0}".into());
        assert_eq!(check(&run).failures(), [("keys_without_ttl", 1)]);
        let mut failed = inputs(vec![]);
        failed
            .worker_failures
            .push("w3 exited with status 101: panicked".into());
        let found = check(&failed);
        assert_eq!(found.failures(), [("workers_failed", 1)]);
        assert!(found.examples[0].contains("panicked"));
    }
}
