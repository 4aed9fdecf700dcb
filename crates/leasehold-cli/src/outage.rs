//! Riding out Redis not answering, in the loops that go on until the user
//! or their own wait ends them (`watch`, `watch --until-free`), as a lock's
//! wait does: a passing fault (no answer, a lost connection, a server
//! loading, a failover under way) is said on stderr and tried again; a loop
//! that has never reached Redis gives up once the connect timeout has
//! passed, with the reason.

use std::time::Duration;

use tokio::time::Instant;

use crate::duration::human;
use crate::duration::seconds;
use crate::exit::{self, Fail};

const FIRST_PAUSE: Duration = Duration::from_millis(250);
const LONGEST_PAUSE: Duration = Duration::from_secs(2);
/// A fault that goes on but says something new is said again at most this
/// often.
const SAY_AGAIN_AFTER: Duration = Duration::from_secs(5);

/// What one loop knows of Redis answering it.
#[derive(Debug)]
pub(crate) struct Outages {
    started: Instant,
    connect_timeout: Duration,
    reached: bool,
    down: Option<Down>,
    pause: Duration,
}

/// Redis has not answered since `since`.
#[derive(Debug)]
struct Down {
    since: Instant,
    clock: String,
    said: String,
    said_at: Instant,
}

impl Outages {
    pub(crate) fn new(connect_timeout: Duration) -> Self {
        Outages {
            started: Instant::now(),
            connect_timeout,
            reached: false,
            down: None,
            pause: FIRST_PAUSE,
        }
    }

    /// Redis answered. Returns the line that says an outage is over, if
    /// one was under way.
    pub(crate) fn answered(&mut self) -> Option<String> {
        self.reached = true;
        self.pause = FIRST_PAUSE;
        let down = self.down.take()?;
        Some(format!(
            "redis answers again (it did not from {}, for {})",
            down.clock,
            seconds(down.since.elapsed())
        ))
    }

    /// Whether Redis has answered this loop at least once.
    pub(crate) fn reached(&self) -> bool {
        self.reached
    }

    /// What the last failure said, while Redis does not answer.
    pub(crate) fn reason(&self) -> Option<&str> {
        self.down.as_ref().map(|down| down.said.as_str())
    }

    /// A look failed with `error`. `Ok` to go on (after [`pause`]), with
    /// the line to say on stderr if there is something new to say; `Err`
    /// with what ends the loop: a fault that no retry mends, or no answer
    /// at all within the connect timeout.
    ///
    /// [`pause`]: Self::pause
    pub(crate) fn failed(&mut self, error: leasehold::Error) -> anyhow::Result<Option<String>> {
        if !error.is_transient() {
            return Err(error.into());
        }
        if !self.reached && self.started.elapsed() >= self.connect_timeout {
            return Err(Fail {
                code: exit::UNAVAILABLE,
                message: format!(
                    "gave up after {} without reaching redis once: {}; check the URL, and \
                     that the server runs and is reachable from here",
                    human(self.connect_timeout),
                    exit::message(&error.into())
                ),
            }
            .into());
        }
        let now = Instant::now();
        let said = exit::message(&error.into());
        match &mut self.down {
            None => {
                let clock = wall_clock();
                let line = format!("redis not answering since {clock}, retrying: {said}");
                self.down = Some(Down {
                    since: now,
                    clock,
                    said,
                    said_at: now,
                });
                Ok(Some(line))
            }
            Some(down) if down.said != said && now >= down.said_at + SAY_AGAIN_AFTER => {
                down.said_at = now;
                down.said.clone_from(&said);
                Ok(Some(format!(
                    "redis not answering since {} ({}), retrying: {said}",
                    down.clock,
                    seconds(down.since.elapsed())
                )))
            }
            Some(_) => Ok(None),
        }
    }

    /// How long to wait before the next try: longer after each failure in
    /// a row, up to two seconds.
    pub(crate) fn pause(&mut self) -> Duration {
        let pause = self.pause;
        self.pause = (self.pause * 2).min(LONGEST_PAUSE);
        pause
    }
}

/// The time of day here, `HH:MM:SS`, as an operator reads it off a log.
fn wall_clock() -> String {
    let Ok(since_epoch) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) else {
        return "now".to_owned();
    };
    let Ok(secs) = libc::time_t::try_from(since_epoch.as_secs()) else {
        return "now".to_owned();
    };
    // SAFETY: localtime_r writes only into `tm`, which lives on this stack,
    // and reads only `secs`.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return "now".to_owned();
        }
        tm
    };
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_of_day_reads_as_a_clock() {
        let clock = wall_clock();
        let parts: Vec<&str> = clock.split(':').collect();
        assert_eq!(parts.len(), 3, "{clock}");
        assert!(
            parts
                .iter()
                .all(|p| p.len() == 2 && p.parse::<u8>().is_ok()),
            "{clock}"
        );
    }

    #[test]
    fn pauses_grow_to_two_seconds_and_start_again_on_an_answer() {
        let mut outages = Outages::new(Duration::from_secs(10));
        let pauses: Vec<u128> = (0..5).map(|_| outages.pause().as_millis()).collect();
        assert_eq!(pauses, [250, 500, 1000, 2000, 2000]);
        assert_eq!(outages.answered(), None, "no outage to end");
        assert!(outages.reached());
        assert_eq!(outages.pause(), FIRST_PAUSE);
    }
}
