//! What workers log, one line per event, and the clock they log it on.
//!
//! Every time is CLOCK_MONOTONIC in nanoseconds: one clock for every
//! process on the machine, so the critical sections of different workers can
//! be put on one line.

use std::fmt;
use std::fs::File;
use std::io::Write;
use std::str::FromStr;

/// CLOCK_MONOTONIC now, in nanoseconds.
pub(crate) fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for clock_gettime to write; the
    // monotonic clock always exists on Linux, so the call cannot fail.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// How an acquisition holds its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Mode {
    /// The only holder (mutex, fair mutex, reentrant mutex).
    Exclusive,
    /// A reader of a read-write lock.
    Read,
    /// The writer of a read-write lock.
    Write,
    /// One permit of a semaphore.
    Permit,
}

impl Mode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Exclusive => "x",
            Mode::Read => "r",
            Mode::Write => "w",
            Mode::Permit => "p",
        }
    }

    /// The acquisition got a fence of its own, larger than every earlier
    /// one of its lock (readers holding together share one).
    pub(crate) fn grants_fence(self) -> bool {
        self != Mode::Read
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "x" => Ok(Mode::Exclusive),
            "r" => Ok(Mode::Read),
            "w" => Ok(Mode::Write),
            "p" => Ok(Mode::Permit),
            _ => Err(format!("unknown mode {s:?}")),
        }
    }
}

/// How a critical section ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The work was done (whether the resource accepted it or not).
    Done,
    /// The lease's lost signal fired first.
    Lost,
    /// The fenced resource could not be reached.
    Error,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Lost => "lost",
            Outcome::Error => "error",
        }
    }
}

impl FromStr for Outcome {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "done" => Ok(Outcome::Done),
            "lost" => Ok(Outcome::Lost),
            "error" => Ok(Outcome::Error),
            _ => Err(format!("unknown outcome {s:?}")),
        }
    }
}

/// What a request to the fenced resource asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Write,
}

impl Op {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Op::Read => "r",
            Op::Write => "w",
        }
    }
}

impl FromStr for Op {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "r" => Ok(Op::Read),
            "w" => Ok(Op::Write),
            _ => Err(format!("unknown op {s:?}")),
        }
    }
}

/// How a request to the fenced resource ended, as its worker saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Accepted: the value read or written.
    Accepted,
    /// Refused for its fence.
    Refused,
    /// No answer: the resource could not be reached.
    Failed,
    /// The lease was lost while the request was on its way; it may or may
    /// not have been served.
    Cut,
}

impl Answer {
    fn as_str(self) -> &'static str {
        match self {
            Answer::Accepted => "ok",
            Answer::Refused => "no",
            Answer::Failed => "err",
            Answer::Cut => "cut",
        }
    }
}

impl FromStr for Answer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ok" => Ok(Answer::Accepted),
            "no" => Ok(Answer::Refused),
            "err" => Ok(Answer::Failed),
            "cut" => Ok(Answer::Cut),
            _ => Err(format!("unknown answer {s:?}")),
        }
    }
}

/// One line of a worker's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// A critical section starts: the acquire returned a guard.
    Acquired {
        lock: String,
        mode: Mode,
        fence: u64,
        /// Semaphore permits held by the one lease (1 for other locks).
        permits: u32,
        wait_start: u64,
        at: u64,
        /// The holder's own deadline for the lease as it logged the grant
        /// (`at` + the guard's `valid_for`), which Redis's expiry of the
        /// lease comes after: 0 when unknown, or already passed.
        valid_until: u64,
    },
    /// A second level of the lock the open section holds was asked for (a
    /// reentry, or the read lock of a writer about to downgrade). `lost`:
    /// the outer lease was known lost when the answer came; `result` is
    /// "ok" or the error's kind.
    Nested {
        at: u64,
        fence: u64,
        lost: bool,
        result: String,
    },
    /// A writer is about to release its write lock and hold on as a
    /// reader: from `at` on, other readers may be admitted.
    Downgraded { at: u64 },
    /// A request to the fenced resource, from when it was sent to when its
    /// answer came. `value`: the value written, or the value read.
    Request {
        register: String,
        op: Op,
        fence: u64,
        value: u64,
        sent: u64,
        answered: u64,
        answer: Answer,
    },
    /// The critical section that started last ends.
    Ended { at: u64, outcome: Outcome },
    /// A wait ended without the lock. `kind` is the error kind ("timeout",
    /// "connection", …).
    WaitFailed {
        lock: String,
        wait_start: u64,
        at: u64,
        kind: String,
        message: String,
    },
    /// The release of a lease of the section that ended last answered.
    Released { at: u64, result: String },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Acquired {
                lock,
                mode,
                fence,
                permits,
                wait_start,
                at,
                valid_until,
            } => write!(
                f,
                "acq\t{lock}\t{}\t{fence}\t{permits}\t{wait_start}\t{at}\t{valid_until}",
                mode.as_str()
            ),
            Event::Nested {
                at,
                fence,
                lost,
                result,
            } => write!(
                f,
                "nest\t{at}\t{fence}\t{}\t{}",
                u8::from(*lost),
                one_line(result)
            ),
            Event::Downgraded { at } => write!(f, "down\t{at}"),
            Event::Request {
                register,
                op,
                fence,
                value,
                sent,
                answered,
                answer,
            } => write!(
                f,
                "req\t{register}\t{}\t{fence}\t{value}\t{sent}\t{answered}\t{}",
                op.as_str(),
                answer.as_str()
            ),
            Event::Ended { at, outcome } => write!(f, "end\t{at}\t{}", outcome.as_str()),
            Event::WaitFailed {
                lock,
                wait_start,
                at,
                kind,
                message,
            } => write!(
                f,
                "werr\t{lock}\t{wait_start}\t{at}\t{kind}\t{}",
                one_line(message)
            ),
            Event::Released { at, result } => write!(f, "rel\t{at}\t{}", one_line(result)),
        }
    }
}

pub(crate) fn one_line(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

impl FromStr for Event {
    type Err = String;
    fn from_str(line: &str) -> Result<Self, String> {
        let f: Vec<&str> = line.split('\t').collect();
        let num = |i: usize| -> Result<u64, String> {
            f.get(i)
                .ok_or_else(|| format!("field {i} missing in {line:?}"))?
                .parse()
                .map_err(|e| format!("field {i} of {line:?}: {e}"))
        };
        let text = |i: usize| -> Result<String, String> {
            f.get(i)
                .map(|s| (*s).to_owned())
                .ok_or_else(|| format!("field {i} missing in {line:?}"))
        };
        match f.first().copied() {
            // Logs kept before the deadline was logged have 7 fields.
            Some("acq") if f.len() == 7 || f.len() == 8 => Ok(Event::Acquired {
                lock: text(1)?,
                mode: text(2)?.parse()?,
                fence: num(3)?,
                permits: u32::try_from(num(4)?).map_err(|e| format!("{line:?}: {e}"))?,
                wait_start: num(5)?,
                at: num(6)?,
                valid_until: if f.len() == 8 { num(7)? } else { 0 },
            }),
            Some("nest") if f.len() == 5 => Ok(Event::Nested {
                at: num(1)?,
                fence: num(2)?,
                lost: num(3)? != 0,
                result: text(4)?,
            }),
            Some("down") if f.len() == 2 => Ok(Event::Downgraded { at: num(1)? }),
            Some("req") if f.len() == 8 => Ok(Event::Request {
                register: text(1)?,
                op: text(2)?.parse()?,
                fence: num(3)?,
                value: num(4)?,
                sent: num(5)?,
                answered: num(6)?,
                answer: text(7)?.parse()?,
            }),
            Some("end") if f.len() == 3 => Ok(Event::Ended {
                at: num(1)?,
                outcome: text(2)?.parse()?,
            }),
            Some("werr") if f.len() == 6 => Ok(Event::WaitFailed {
                lock: text(1)?,
                wait_start: num(2)?,
                at: num(3)?,
                kind: text(4)?,
                message: text(5)?,
            }),
            Some("rel") if f.len() == 3 => Ok(Event::Released {
                at: num(1)?,
                result: text(2)?,
            }),
            _ => Err(format!("not an event: {line:?}")),
        }
    }
}

/// A worker's log file. Each event is one `write` of a whole line to a file
/// opened for appending, so a worker killed at any moment leaves at most a
/// cut last line, which the reader skips.
#[derive(Debug)]
pub(crate) struct Log {
    file: File,
}

impl Log {
    pub(crate) fn new(file: File) -> Log {
        Log { file }
    }

    pub(crate) fn write(&mut self, event: &Event) -> std::io::Result<()> {
        self.file.write_all(format!("{event}\n").as_bytes())
    }
}

/// The events of a log's text; a last line without its newline (the
/// worker was killed while writing it) is left out.
pub(crate) fn parse_log(text: &str) -> Result<Vec<Event>, String> {
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    };
    complete
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_back_as_written_and_a_cut_line_is_skipped() {
        let events = [
            Event::Acquired {
                lock: "mutex-0".into(),
                mode: Mode::Exclusive,
                fence: 1_700_000_000_000_001,
                permits: 1,
                wait_start: 5,
                at: 9,
                valid_until: 1009,
            },
            Event::Nested {
                at: 10,
                fence: 1_700_000_000_000_001,
                lost: false,
                result: "ok".into(),
            },
            Event::Downgraded { at: 10 },
            Event::Request {
                register: "mutex-0".into(),
                op: Op::Write,
                fence: 1_700_000_000_000_001,
                value: 4,
                sent: 10,
                answered: 11,
                answer: Answer::Refused,
            },
            Event::Ended {
                at: 12,
                outcome: Outcome::Lost,
            },
            Event::Released {
                at: 21,
                result: "ok".into(),
            },
            Event::WaitFailed {
                lock: "fair-0".into(),
                wait_start: 13,
                at: 20,
                kind: "connection".into(),
                message: "cannot reach\tredis\n".into(),
            },
        ];
        let mut text: String = events.iter().map(|e| format!("{e}\n")).collect();
        text.push_str("acq\tmutex-0\tx\t17");
        let read = parse_log(&text).unwrap();
        assert_eq!(read.len(), events.len());
        assert_eq!(read[..6], events[..6]);
        let Event::WaitFailed { message, .. } = &read[6] else {
            panic!("{:?}", read[6]);
        };
        assert_eq!(message, "cannot reach redis ");
        // A grant logged without the holder's deadline (an older log).
        let old = parse_log("acq\tmutex-0\tx\t17\t1\t5\t9\n").unwrap();
        assert!(matches!(
            old[..],
            [Event::Acquired {
                fence: 17,
                at: 9,
                valid_until: 0,
                ..
            }]
        ));
    }

    #[test]
    fn the_clock_does_not_go_back() {
        let a = mono_ns();
        let b = mono_ns();
        assert!(b >= a && a > 0);
    }
}
