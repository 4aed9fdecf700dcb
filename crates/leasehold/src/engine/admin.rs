//! Reading a lock's waiter queue, and a semaphore's admin calls: delete,
//! and the lease left on a permit. Each is one script on the server of the
//! lock's keys.

use std::time::Duration;

use redis::Value;

use crate::conn::scripts;
use crate::engine::state::Engine;
use crate::engine::Kind;
use crate::error::{Error, Result};
use crate::holder::Waiter;
use crate::keys::LockKeys;

/// The live waiters of the lock, in line.
pub(crate) async fn waiters(engine: &Engine, keys: &LockKeys) -> Result<Vec<Waiter>> {
    let reply = engine
        .one()?
        .eval(
            keys,
            "waiters",
            |s| &s.waiters,
            &[&keys.queue, &keys.waiters],
            &[],
        )
        .await?;
    let Value::Array(items) = &reply else {
        return Err(Error::unexpected_reply("waiters", &reply));
    };
    let mut waiters = Vec::new();
    for pair in items.get(1..).unwrap_or_default().chunks(2) {
        let [arrived, record] = pair else {
            return Err(Error::unexpected_reply("waiters", &reply));
        };
        let Some(record) = scripts::as_text(record).filter(|r| !r.is_empty()) else {
            // Its heartbeat ran out: it died, and is no longer in line.
            continue;
        };
        // Scores are arrival times in µs, which a double holds exactly.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let arrived = match arrived {
            Value::Double(us) => Some(*us),
            other => scripts::as_text(other).and_then(|text| text.parse::<f64>().ok()),
        }
        .filter(|us| us.is_finite() && *us >= 0.0)
        .map(|us| us as u64);
        if let Some(waiter) = Waiter::from_record(waiters.len() + 1, arrived, &record, &engine.id) {
            waiters.push(waiter);
        }
    }
    Ok(waiters)
}

/// Deletes a semaphore, its count and its permit leases, and wakes its
/// waiters; whether there was one.
pub(crate) async fn delete_semaphore(engine: &Engine, keys: &LockKeys, total: u32) -> Result<bool> {
    let reply = engine
        .one()?
        .eval(
            keys,
            "delete",
            |s| &s.semaphore_delete,
            &[&keys.lock, &keys.queue, &keys.waiters],
            &[keys.channels.as_bytes()],
        )
        .await?;
    match &reply {
        Value::Array(items) => match (items.first(), items.get(1).and_then(scripts::as_text)) {
            (Some(Value::Int(-1)), Some(found)) => {
                Err(Kind::Semaphore { total }.conflict(&keys.name, &found))
            }
            _ => Err(Error::unexpected_reply("delete", &reply)),
        },
        _ => scripts::flag("delete", &reply),
    }
}

/// The time left on the permit lease of `token`, or `None` when it holds
/// no permits.
pub(crate) async fn permit_left(
    engine: &Engine,
    keys: &LockKeys,
    token: &str,
) -> Result<Option<Duration>> {
    let reply = engine
        .one()?
        .eval(
            keys,
            "permit lease",
            |s| &s.permit_left,
            &[&keys.lock],
            &[token.as_bytes()],
        )
        .await?;
    match scripts::as_int(&reply) {
        Some(ms) if ms >= 0 => Ok(Some(Duration::from_millis(ms.unsigned_abs()))),
        Some(_) => Ok(None),
        None => Err(Error::unexpected_reply("permit lease", &reply)),
    }
}
