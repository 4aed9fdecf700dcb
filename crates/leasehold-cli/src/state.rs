//! Who holds a lock of any kind, as `inspect` prints it.

use leasehold::HoldMode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::plural;

/// The lock's kind, for people.
fn kind_label(kind: Option<&str>) -> String {
    match kind {
        None => "none (free)".to_owned(),
        Some("mutex") => "mutex".to_owned(),
        Some("reentrant") => "reentrant mutex".to_owned(),
        Some("rwlock") => "read-write lock".to_owned(),
        Some("semaphore") => "semaphore".to_owned(),
        // A key leasehold did not write: its Redis type.
        Some(other) => format!("not a leasehold lock (a Redis {other})"),
    }
}

/// "held by 2 readers", "2 of 3 permits in use", ...; `None` for a mutex,
/// whose one holder says it all.
fn hash_state(info: &leasehold::LockInfo) -> Option<String> {
    let count = |mode: HoldMode| info.holders.iter().filter(|h| h.mode == mode).count();
    match info.kind.as_deref()? {
        _ if info.holders.is_empty() => Some("free".to_owned()),
        "rwlock" if count(HoldMode::Write) > 0 => Some("held by a writer".to_owned()),
        "rwlock" => Some(format!(
            "held by {}",
            plural::count(count(HoldMode::Read), "reader", "readers")
        )),
        "semaphore" => Some(format!(
            "{} of {} in use",
            permits_in_use(info),
            info.permits
                .map_or("? permits".to_owned(), |n| plural::count(
                    n, "permit", "permits"
                ))
        )),
        "reentrant" => Some(match info.holders.iter().map(|h| h.levels as usize).sum() {
            // Released within its hold-at-least: kept until that is over.
            0 => "held, kept until its hold-at-least is over".to_owned(),
            levels => format!("held, {} deep", plural::count(levels, "level", "levels")),
        }),
        _ => None,
    }
}

/// How long until the lock is free unless renewed: the lease of a mutex,
/// the longest lease of the other kinds' holders (their key lives longer,
/// to keep a semaphore's size).
pub(crate) fn lease_left(info: &leasehold::LockInfo) -> Option<Duration> {
    match info.kind.as_deref() {
        Some("reentrant" | "rwlock" | "semaphore") => {
            info.holders.iter().filter_map(|h| h.remaining).max()
        }
        _ => info.remaining,
    }
}

fn permits_in_use(info: &leasehold::LockInfo) -> u32 {
    // Records written by hand can add up past u32::MAX.
    info.holders
        .iter()
        .fold(0, |used: u32, h| used.saturating_add(h.permits))
}

/// The holder's fence: its own where its record keeps one, else (a
/// mutex's one holder) the lock's last.
fn fence_of(info: &leasehold::LockInfo, holder: &leasehold::Holder) -> Option<u64> {
    holder.fence.or(if info.kind.as_deref() == Some("mutex") {
        info.last_fence
    } else {
        None
    })
}

fn role(holder: &leasehold::Holder) -> &'static str {
    match holder.mode {
        HoldMode::Read => "reader",
        HoldMode::Write => "writer",
        HoldMode::Permits => "permits",
        _ => "holder",
    }
}

/// The lines `inspect` prints after the lock's name: kind, state and one
/// line per holder.
pub(crate) fn lines(info: &leasehold::LockInfo, mutex_state: String) -> Vec<String> {
    let mut out = vec![format!(
        "kind:            {}",
        kind_label(info.kind.as_deref())
    )];
    out.push(format!(
        "state:           {}",
        hash_state(info).unwrap_or(mutex_state)
    ));
    for holder in &info.holders {
        let mut line = format!("  {:<15}{}", role(holder), holder.describe());
        if !holder.kept && holder.client_name.starts_with("leasehold acquire ") {
            // Taken by a shell step: nothing renews it, on purpose.
            line.push_str(", kept by `leasehold acquire` until released or its lease runs out");
        }
        if holder.mode == HoldMode::Permits {
            line.push_str(&format!(
                ", {}",
                plural::count(holder.permits, "permit", "permits")
            ));
        }
        if let Some(at) = holder.acquired_at {
            line.push_str(&format!(", since {}", rfc3339(at)));
        }
        if let Some(held) = info.read_at.and_then(|now| holder.held_for(now)) {
            line.push_str(&format!(" (held {:.1}s)", held.as_secs_f64()));
        }
        if let Some(left) = holder.remaining {
            line.push_str(&format!(", {:.1}s of lease left", left.as_secs_f64()));
        }
        if let Some(fence) = fence_of(info, holder) {
            line.push_str(&format!(", fence {fence}"));
        }
        out.push(line);
    }
    if let Some(total) = info.permits {
        out.push(format!(
            "permits:         {} of {total} in use",
            permits_in_use(info)
        ));
    }
    out
}

/// What `inspect --json` adds to the mutex fields: the kind, every holder,
/// and a semaphore's permits.
pub(crate) fn json_fields(info: &leasehold::LockInfo) -> [(&'static str, Value); 3] {
    let holders: Vec<Value> = info
        .holders
        .iter()
        .map(|holder| {
            json!({
                "mode": holder.mode.as_str(),
                "pid": holder.pid,
                "host": holder.host,
                "client_name": holder.client_name,
                "acquired_at": holder.acquired_at.map(rfc3339),
                "acquired_at_unix_ms": holder.acquired_at.map(unix_ms),
                "held_ms": info.read_at.and_then(|now| holder.held_for(now)).map(millis),
                "remaining_ms": holder.remaining.map(millis),
                "permits": holder.permits,
                "levels": holder.levels,
                "owner": holder.owner,
                "fence": fence_of(info, holder),
                "kept": holder.kept,
            })
        })
        .collect();
    let permits = info
        .permits
        .map(|total| json!({ "total": total, "in_use": permits_in_use(info) }));
    [
        ("kind", json!(info.kind)),
        ("holders", Value::Array(holders)),
        ("permits", permits.unwrap_or(Value::Null)),
    ]
}

/// What a waiter waits for, as `inspect` prints it.
fn wants(waiter: &leasehold::Waiter) -> String {
    match waiter.wants {
        HoldMode::Read => "a read lease".to_owned(),
        HoldMode::Write => "the write lease".to_owned(),
        HoldMode::Permits => plural::count(waiter.permits, "permit", "permits"),
        _ => "the lock".to_owned(),
    }
}

/// One line per live waiter, in line: its place, who, since when, and
/// what it waits for.
pub(crate) fn waiter_lines(
    info: &leasehold::LockInfo,
    waiters: &[leasehold::Waiter],
) -> Vec<String> {
    waiters
        .iter()
        .map(|waiter| {
            let mut line = format!(
                "  {:<15}{}",
                format!("#{}", waiter.position),
                waiter.describe()
            );
            line.push_str(&format!(", wants {}", wants(waiter)));
            if let Some(at) = waiter.queued_at {
                line.push_str(&format!(", queued {}", rfc3339(at)));
                if let Some(waited) = info.read_at.and_then(|now| now.duration_since(at).ok()) {
                    line.push_str(&format!(" (waited {:.1}s)", waited.as_secs_f64()));
                }
            }
            line
        })
        .collect()
}

/// The live waiters in line, as `inspect --json` prints them.
pub(crate) fn waiters_json(info: &leasehold::LockInfo, waiters: &[leasehold::Waiter]) -> Value {
    Value::Array(
        waiters
            .iter()
            .map(|waiter| {
                json!({
                    "position": waiter.position,
                    "pid": waiter.pid,
                    "host": waiter.host,
                    "client_name": waiter.client_name,
                    "wants": waiter.wants.as_str(),
                    "permits": waiter.permits,
                    "queued_at": waiter.queued_at.map(rfc3339),
                    "queued_at_unix_ms": waiter.queued_at.map(unix_ms),
                    "waited_ms": waiter.queued_at.and_then(|at| {
                        info.read_at.and_then(|now| now.duration_since(at).ok()).map(millis)
                    }),
                })
            })
            .collect(),
    )
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, millis)
}

/// `at` in UTC as "2026-11-23T03:58:01.123Z".
fn rfc3339(at: SystemTime) -> String {
    let ms = unix_ms(at);
    let (days, ms_of_day) = (ms / 86_400_000, ms % 86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, milli) = (
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000,
    );
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

/// Year, month, day of the `days`th day after 1970-01-01 (proleptic
/// Gregorian; H. Hinnant's `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_in_utc() {
        let at = |secs: u64, ms: u64| UNIX_EPOCH + Duration::from_millis(secs * 1000 + ms);
        assert_eq!(rfc3339(at(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(at(951_782_400, 5)), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(at(1_795_398_781, 123)), "2026-11-23T01:53:01.123Z");
        assert_eq!(rfc3339(at(4_107_542_399, 999)), "2100-02-28T23:59:59.999Z");
    }
}
