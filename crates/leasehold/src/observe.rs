//! What leasehold reports about its locks: a [`tracing`] span around every
//! lock operation, and metrics through the [`metrics`] facade.
//!
//! Nothing is reported anywhere until the application installs a
//! `tracing` subscriber or a `metrics` recorder (for example
//! `metrics-exporter-prometheus`, as the `prometheus` example does); without
//! one, each report costs a check of a global.
//!
//! # Spans
//!
//! Every operation runs in a span named after it — `acquire`,
//! `try_acquire`, `release`, `extend`, `release_token`, `extend_token`,
//! `force_release`, `inspect`, `set_permits`, `available`, and for an
//! election `campaign`, `leader` and `resign` — at `DEBUG` level, with the
//! target `leasehold`, and the fields `name` (the lock's name), `primitive`
//! (`mutex`, `fair_mutex`, `reentrant_mutex`, `rw_lock_read`,
//! `rw_lock_write`, `semaphore`, `rw_lock` for an operation on a whole
//! read-write lock, or `election` for the election's own operations; the
//! lock taken by a campaign is a `fair_mutex`), `outcome` (see below), `waited` (for
//! acquisitions: from the call to the outcome) and `fence` (of the lease
//! taken or released). A lease lost while held is logged as a `WARN` event
//! with the lock's name and the reason.
//!
//! Outcomes: `acquired`, `busy` (a `try_acquire` that found the lock held),
//! `timed_out`, `ok`, `not_held`, `invalid_input`, `conflict` (the name
//! holds another kind of lock), `connection`, `auth`, `config`, `server`,
//! `system`.
//!
//! # Metrics
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | [`ACQUISITIONS`] | counter | `primitive` | leases taken |
//! | [`TIMEOUTS`] | counter | `primitive` | waits that ran out |
//! | [`LOSSES`] | counter | `reason` | leases lost while held: `token_gone`, `master_changed`, `deadline_passed`, `max_hold_reached`, `quorum_lost` |
//! | [`RENEWALS`] | counter | | watchdog renewals that Redis confirmed |
//! | [`RENEWAL_FAILURES`] | counter | | watchdog renewals that got no usable answer (tried again while the lease lasts) |
//! | [`WAIT_SECONDS`] | histogram | `primitive` | from an acquire call to its lease |
//! | [`HOLD_SECONDS`] | histogram | `primitive` | from a lease's acquisition until its guard is released, dropped or detached |
//! | [`HELD_LEASES`] | gauge | `primitive` | guards alive in this process |
//! | [`WAITING_TASKS`] | gauge | `primitive` | tasks inside `acquire` or `acquire_timeout` |
//!
//! Lock names are not labels: a service that locks one name per user or per
//! record would make one time series each. The names are in the spans.
//! [`describe_metrics`] gives the recorder their units and help texts.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use pin_project_lite::pin_project;
use tracing::instrument::Instrumented;
use tracing::{Instrument, Span};

pub use crate::engine::metrics::{
    ACQUISITIONS, HELD_LEASES, HOLD_SECONDS, LOSSES, PRIMITIVE_LABEL, REASON_LABEL, RENEWALS,
    RENEWAL_FAILURES, TIMEOUTS, WAITING_TASKS, WAIT_SECONDS,
};

use crate::engine::metrics::primitive;
use crate::engine::Kind;
use crate::error::{ErrorKind, Result};

/// Gives the installed recorder each metric's unit and help text (the
/// `# HELP` lines of a Prometheus scrape). Call it once, after installing
/// the recorder; without it the metrics are reported all the same.
pub fn describe_metrics() {
    use metrics::Unit;
    metrics::describe_counter!(ACQUISITIONS, Unit::Count, "Leases taken");
    metrics::describe_counter!(TIMEOUTS, Unit::Count, "Waits for a lock that ran out");
    metrics::describe_counter!(LOSSES, Unit::Count, "Leases lost while held, by reason");
    metrics::describe_counter!(RENEWALS, Unit::Count, "Lease renewals Redis confirmed");
    metrics::describe_counter!(
        RENEWAL_FAILURES,
        Unit::Count,
        "Lease renewals that got no usable answer"
    );
    metrics::describe_histogram!(
        WAIT_SECONDS,
        Unit::Seconds,
        "Time from an acquire call to its lease"
    );
    metrics::describe_histogram!(HOLD_SECONDS, Unit::Seconds, "Time a guard held its lease");
    metrics::describe_gauge!(HELD_LEASES, Unit::Count, "Guards alive in this process");
    metrics::describe_gauge!(
        WAITING_TASKS,
        Unit::Count,
        "Tasks waiting in acquire or acquire_timeout"
    );
}

/// The operations that get a span.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Acquire,
    TryAcquire,
    Release,
    Extend,
    ReleaseToken,
    ExtendToken,
    ForceRelease,
    Inspect,
    Campaign,
    Leader,
    Resign,
    SetPermits,
    Available,
}

/// The span of one operation on the lock `name`.
pub(crate) fn span(op: Op, kind: Kind, name: &str, fence: Option<u64>) -> tracing::Span {
    span_of(op, primitive(kind), name, fence)
}

/// The span of one operation on the election `name`.
pub(crate) fn election_span(op: Op, name: &str, fence: Option<u64>) -> tracing::Span {
    span_of(op, "election", name, fence)
}

/// The span of one operation on the lock `name`, of the kind `primitive`
/// (`rw_lock` for an operation on a whole read-write lock).
pub(crate) fn span_of(
    op: Op,
    primitive: &'static str,
    name: &str,
    fence: Option<u64>,
) -> tracing::Span {
    // Span names must be literals.
    macro_rules! op_span {
        ($op:literal) => {
            tracing::debug_span!(
                target: "leasehold",
                $op,
                name,
                primitive,
                outcome = tracing::field::Empty,
                waited = tracing::field::Empty,
                fence,
            )
        };
    }
    match op {
        Op::Acquire => op_span!("acquire"),
        Op::TryAcquire => op_span!("try_acquire"),
        Op::Release => op_span!("release"),
        Op::Extend => op_span!("extend"),
        Op::ReleaseToken => op_span!("release_token"),
        Op::ExtendToken => op_span!("extend_token"),
        Op::ForceRelease => op_span!("force_release"),
        Op::Inspect => op_span!("inspect"),
        Op::Campaign => op_span!("campaign"),
        Op::Leader => op_span!("leader"),
        Op::Resign => op_span!("resign"),
        Op::SetPermits => op_span!("set_permits"),
        Op::Available => op_span!("available"),
    }
}

fn error_outcome(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Timeout => "timed_out",
        ErrorKind::NotHeld => "not_held",
        ErrorKind::InvalidInput => "invalid_input",
        ErrorKind::Connection => "connection",
        ErrorKind::Auth => "auth",
        ErrorKind::Config => "config",
        ErrorKind::Server => "server",
        ErrorKind::System => "system",
        ErrorKind::Conflict => "conflict",
        ErrorKind::ReplicasMissing => "replicas_missing",
        ErrorKind::OutcomeUnknown => "outcome_unknown",
        ErrorKind::Quorum => "quorum",
    }
}

/// Runs `operation` inside `span` and records its outcome there.
///
/// A future of its own rather than an `async fn`: an `async fn` would keep
/// `operation` twice (as its argument, and as what it awaits), and every
/// lock operation runs through here.
pub(crate) fn traced<T, F: Future<Output = Result<T>>>(span: Span, operation: F) -> Traced<F> {
    Traced {
        operation: operation.instrument(span),
    }
}

pin_project! {
    /// What [`traced`] returns.
    pub(crate) struct Traced<F> {
        #[pin]
        operation: Instrumented<F>,
    }
}

impl<T, F: Future<Output = Result<T>>> Future for Traced<F> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let mut operation = self.project().operation;
        let result = ready!(operation.as_mut().poll(cx));
        let outcome = match &result {
            Ok(_) => "ok",
            Err(error) => error_outcome(error.kind()),
        };
        operation.span().record("outcome", outcome);
        Poll::Ready(result)
    }
}

/// Runs one acquisition (`waits`: acquire or acquire_timeout, else a
/// try) in its span, and counts it. `fence_of` reads the fence of what it
/// returned, `None` for a try that found the lock busy. A future of its
/// own, as [`traced`] is.
pub(crate) fn acquisition<T, F, G>(
    kind: Kind,
    name: &str,
    waits: bool,
    attempt: F,
    fence_of: G,
) -> Acquisition<F, G>
where
    F: Future<Output = Result<T>>,
    G: FnOnce(&T) -> Option<u64>,
{
    let op = if waits { Op::Acquire } else { Op::TryAcquire };
    let primitive = primitive(kind);
    Acquisition {
        attempt: attempt.instrument(span(op, kind, name, None)),
        fence_of: Some(fence_of),
        primitive,
        started: Instant::now(),
        waiting: waits.then(|| Waiting::new(primitive)),
    }
}

pin_project! {
    /// What [`acquisition`] returns.
    pub(crate) struct Acquisition<F, G> {
        #[pin]
        attempt: Instrumented<F>,
        // Taken when the attempt is over.
        fence_of: Option<G>,
        primitive: &'static str,
        started: Instant,
        waiting: Option<Waiting>,
    }
}

impl<T, F, G> Future for Acquisition<F, G>
where
    F: Future<Output = Result<T>>,
    G: FnOnce(&T) -> Option<u64>,
{
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let mut this = self.project();
        let result = ready!(this.attempt.as_mut().poll(cx));
        *this.waiting = None;
        let waited = this.started.elapsed();
        let span = this.attempt.span();
        span.record("waited", tracing::field::debug(waited));
        let primitive = *this.primitive;
        let outcome = match &result {
            Ok(taken) => match this.fence_of.take().and_then(|fence_of| fence_of(taken)) {
                Some(fence) => {
                    span.record("fence", fence);
                    metrics::counter!(ACQUISITIONS, PRIMITIVE_LABEL => primitive).increment(1);
                    metrics::histogram!(WAIT_SECONDS, PRIMITIVE_LABEL => primitive)
                        .record(waited.as_secs_f64());
                    "acquired"
                }
                None => "busy",
            },
            Err(error) => {
                if error.kind() == ErrorKind::Timeout {
                    metrics::counter!(TIMEOUTS, PRIMITIVE_LABEL => primitive).increment(1);
                }
                error_outcome(error.kind())
            }
        };
        span.record("outcome", outcome);
        Poll::Ready(result)
    }
}

/// Counts a task in [`WAITING_TASKS`] for as long as it lives, so that a
/// cancelled wait stops counting too.
struct Waiting(&'static str);

impl Waiting {
    fn new(primitive: &'static str) -> Self {
        metrics::gauge!(WAITING_TASKS, PRIMITIVE_LABEL => primitive).increment(1.0);
        Waiting(primitive)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        metrics::gauge!(WAITING_TASKS, PRIMITIVE_LABEL => self.0).decrement(1.0);
    }
}
