//! Durations as people type them (`500ms`, `1.5s`, `1m30s`, `25h`), read by
//! `humantime`, and kept with the user's own text to echo back.

use std::fmt;
use std::time::Duration;

use leasehold::{MAX_LEASE, MAX_WAIT, MIN_LEASE};

const HINT: &str = "use a number with a unit, such as 500ms, 1.5s, 30s, 1m30s or 2h";

/// A duration from the command line: its value, and the text it was given as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dur {
    value: Duration,
    text: String,
}

impl Dur {
    pub(crate) fn get(&self) -> Duration {
        self.value
    }
}

/// The user's own text.
impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Any duration.
pub(crate) fn parse(text: &str) -> Result<Dur, String> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text:?} has no unit: {HINT}"));
    }
    match humantime::parse_duration(trimmed) {
        Ok(value) => Ok(Dur {
            value,
            text: trimmed.to_owned(),
        }),
        Err(err) => Err(format!("{text:?} is not a duration ({err}): {HINT}")),
    }
}

/// A lease length (also a max hold): from 10ms to 24h.
pub(crate) fn lease(text: &str) -> Result<Dur, String> {
    within(parse(text)?, MIN_LEASE, MAX_LEASE)
}

/// A wait, a hold or a grace: at most a day.
/// A replica timeout: 10 ms to 60 s.
pub(crate) fn replica_timeout(text: &str) -> Result<Dur, String> {
    within(parse(text)?, leasehold::MIN_LEASE, Duration::from_secs(60))
}

/// A command timeout: 10 ms to 60 s.
pub(crate) fn command_timeout(text: &str) -> Result<Dur, String> {
    within(parse(text)?, leasehold::MIN_LEASE, Duration::from_secs(60))
}

/// A semaphore count's lifetime: 1 ms to a year.
pub(crate) fn permit_lifetime(text: &str) -> Result<Dur, String> {
    within(
        parse(text)?,
        Duration::from_millis(1),
        leasehold::MAX_PERMIT_LIFETIME,
    )
}

pub(crate) fn up_to_a_day(text: &str) -> Result<Dur, String> {
    within(parse(text)?, Duration::ZERO, MAX_WAIT.min(MAX_LEASE))
}

fn within(dur: Dur, min: Duration, max: Duration) -> Result<Dur, String> {
    if dur.value < min {
        return Err(format!("{dur} is shorter than the minimum, {}", human(min)));
    }
    if dur.value > max {
        return Err(format!("{dur} is longer than the maximum, {}", human(max)));
    }
    Ok(dur)
}

/// A duration for people: `24h`, `5m`, `1m30s`, `1.5s`, `500ms`.
pub(crate) fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    if ms < 60_000 && !ms.is_multiple_of(1_000) {
        return format!("{:.1}s", d.as_secs_f64());
    }
    // A minute or more: to the nearest second.
    let secs = d.as_secs() + u64::from(d.subsec_millis() >= 500);
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// A duration as seconds with one decimal (`2.5s`), for what the command
/// says of a lease.
pub(crate) fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> Duration {
        parse(text).unwrap().get()
    }

    #[test]
    fn reads_the_forms_people_type() {
        assert_eq!(value("500ms"), Duration::from_millis(500));
        assert_eq!(value("1.5s"), Duration::from_millis(1500));
        assert_eq!(value("30s"), Duration::from_secs(30));
        assert_eq!(value("1m30s"), Duration::from_secs(90));
        assert_eq!(value("5m"), Duration::from_secs(300));
        assert_eq!(value("25h"), Duration::from_secs(90_000));
        assert_eq!(value("0s"), Duration::ZERO);
    }

    #[test]
    fn echoes_the_text_it_was_given() {
        assert_eq!(parse("1m30s").unwrap().to_string(), "1m30s");
        let err = lease("25h").unwrap_err();
        assert!(err.starts_with("25h is longer"), "{err}");
        assert!(err.contains("24h"), "{err}");
        let err = lease("5ms").unwrap_err();
        assert!(err.starts_with("5ms is shorter"), "{err}");
        assert!(err.contains("10ms"), "{err}");
    }

    #[test]
    fn refuses_the_rest_with_a_hint() {
        for bad in [
            "",
            "30",
            "s",
            "-1s",
            "10 parsecs",
            "soon",
            "99999999999999999999s",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("500ms"), "{bad}: {err}");
            assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
        }
    }

    #[test]
    fn prints_durations_for_people() {
        assert_eq!(human(Duration::from_secs(86_400)), "24h");
        assert_eq!(human(Duration::from_secs(90)), "1m30s");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
        assert_eq!(human(Duration::from_millis(10)), "10ms");
        assert_eq!(human(Duration::from_secs(3_600 + 5)), "1h5s");
        assert_eq!(human(Duration::ZERO), "0s");
        assert_eq!(human(Duration::from_millis(90_600)), "1m31s");
    }
}
