//! The engine's operations on one store besides taking and holding a
//! lease: renewing or releasing by token, force-release, inspect, a
//! semaphore's permit count, and an election's record. Each is one script
//! on the server of the lock's keys.

use std::time::{Duration, UNIX_EPOCH};

use redis::Value;

use crate::conn::replicas::{Acked, ReplicaAck};
use crate::conn::route::Route;
use crate::conn::scripts;
use crate::deploy::store::{Answer, Store};
use crate::engine::release::{release, release_as};
use crate::engine::state::Engine;
use crate::engine::Kind;
use crate::error::{Error, ErrorKind, Result};
use crate::holder::{Holder, LockInfo};
use crate::keys::{millis, LockKeys};

/// What a renewal of one token found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    Yes,
    /// The token no longer holds the lock on the server `server` (its
    /// identity, see [`ServerInfo`](crate::conn::ServerInfo)).
    NotHeld {
        server: u64,
    },
}

/// Sets the lease of `token` to `lease` if it still holds the lock, on the
/// connection no WAIT holds back.
pub(crate) async fn renew_one(
    store: &Store,
    keys: &LockKeys,
    token: &str,
    lease: Duration,
) -> Result<Renewed> {
    let route = store.route(keys).await?;
    renew_on(store, keys, token, lease, route)
        .await
        .map(|(renewed, _)| renewed)
}

/// Sets the lease of `token` to `lease` again and has the replicas `ack`
/// names acknowledge it: an extend the master made (see [`renew_one`]),
/// sent again where a WAIT can count it (a WAIT counts the writes of its
/// own connection), in a batch with the other requests that ask for one
/// (see [`crate::conn::acks`]). Fewer replicas acknowledging than asked is
/// an error; the lease stays extended on the master either way.
pub(crate) async fn acknowledge_renewal(
    store: &Store,
    keys: &LockKeys,
    token: &str,
    lease: Duration,
    ack: ReplicaAck,
) -> Result<Renewed> {
    let route = store.route(keys).await?.with_ack(ack);
    let short = |acked: Acked, route: &Route| {
        Error::replicas_missing(
            &keys.name,
            "extended",
            acked.acked,
            acked.asked,
            matches!(ack, ReplicaAck::Connected { .. }),
            &route.replicas().named(),
            ack.timeout().unwrap_or_default(),
            "the lease stays extended on the master",
        )
    };
    match renew_on(store, keys, token, lease, route).await? {
        (Renewed::Yes, Some((acked, route))) if acked.is_short() => Err(short(acked, &route)),
        (renewed, _) => Ok(renewed),
    }
}

/// The renewal script on `route`, with how its WAIT went, if one was sent.
async fn renew_on(
    store: &Store,
    keys: &LockKeys,
    token: &str,
    lease: Duration,
    route: Route,
) -> Result<(Renewed, Option<(Acked, Route)>)> {
    let ms = millis(lease).to_string();
    let args: [&[u8]; 2] = [token.as_bytes(), ms.as_bytes()];
    let answer = store
        .send(
            route,
            &keys.lock,
            "extend",
            |s| &s.renew,
            &[&keys.lock],
            &args,
            false,
        )
        .await?;
    let (reply, acked, route) = match answer {
        Answer::Reply(reply, acked, route) => (reply, acked, route),
        Answer::InGrace(_) => return Err(Error::unexpected_reply("extend", &Value::Nil)),
    };
    let outcome = match &reply {
        Value::Array(items) if items.len() == 1 => scripts::renewal(&items[0]),
        _ => return Err(Error::unexpected_reply("extend", &reply)),
    };
    match outcome {
        scripts::Renewal::Renewed => Ok((Renewed::Yes, acked.map(|acked| (acked, route)))),
        scripts::Renewal::NotHeld => Ok((
            Renewed::NotHeld {
                server: route.server().identity,
            },
            None,
        )),
        scripts::Renewal::Refused(why) => Err(Error::new(
            ErrorKind::Server,
            format!("redis refused to extend lock {:?}: {why}", keys.name),
        )),
    }
}

/// The error for a token that does not hold the lock `name`.
fn token_not_held(name: &str) -> Error {
    Error::not_held(format!(
        "lock {name:?} is not held by this token: it expired, or was released or removed"
    ))
}

/// Releases the lock if `token` holds it.
pub(crate) async fn release_token(
    engine: &Engine,
    store: &Store,
    keys: &LockKeys,
    token: &str,
) -> Result<()> {
    if release(engine, store, keys, token, false, None).await? {
        Ok(())
    } else {
        Err(token_not_held(&keys.name))
    }
}

/// Releases `token` but keeps the lock held, marked as kept, for `keep`
/// from now (a hold-at-least of a lease taken elsewhere): nobody is woken.
pub(crate) async fn release_token_keeping(
    engine: &Engine,
    store: &Store,
    keys: &LockKeys,
    token: &str,
    keep: Duration,
) -> Result<()> {
    let until = tokio::time::Instant::now() + keep;
    if release(engine, store, keys, token, false, Some(until)).await? {
        Ok(())
    } else {
        Err(token_not_held(&keys.name))
    }
}

/// Sets the lease of `token` to `lease`, or says that it holds nothing.
pub(crate) async fn extend_token(
    store: &Store,
    keys: &LockKeys,
    token: &str,
    lease: Duration,
    ack: ReplicaAck,
) -> Result<()> {
    let mut renewed = renew_one(store, keys, token, lease).await?;
    if renewed == Renewed::Yes && ack != ReplicaAck::Off {
        renewed = acknowledge_renewal(store, keys, token, lease, ack).await?;
    }
    match renewed {
        Renewed::Yes => Ok(()),
        Renewed::NotHeld { .. } => Err(token_not_held(&keys.name)),
    }
}

/// Releases `token` only if a lease of `owner` holds it: a reentrant
/// mutex's level, an rw-lock's read or write lease.
pub(crate) async fn release_owned_token(
    engine: &Engine,
    store: &Store,
    keys: &LockKeys,
    kind: Kind,
    owner: &str,
    token: &str,
) -> Result<()> {
    let unit = if kind.is_reentrant() {
        "level"
    } else {
        "lease"
    };
    let name = &keys.name;
    match release_as(engine, store, keys, token, owner, kind).await? {
        Some(true) => Ok(()),
        Some(false) => Err(Error::not_held(format!(
            "lock {name:?} has no {unit} held by this token: it expired, or was released or \
             removed"
        ))),
        None => Err(Error::not_held(format!(
            "lock {name:?} is held at this token by another owner, not by {owner:?}: only \
             the owner's handles release its {unit}s"
        ))
        .with_remedy(crate::error::Remedy::ReleaseAsAdmin)),
    }
}

/// One side of a read-write lock, for a forced release of that side alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RwSide {
    Readers,
    Writer,
}

/// Removes the lock whoever holds it and wakes its waiters; whether a lock
/// was there. With `only`, of a read-write lock the leases of that side
/// alone.
pub(crate) async fn force_release(
    engine: &Engine,
    store: &Store,
    keys: &LockKeys,
    only: Option<RwSide>,
) -> Result<bool> {
    let side: &[u8] = match only {
        Some(RwSide::Readers) => b"r",
        Some(RwSide::Writer) => b"w",
        None => b"",
    };
    let reply = store
        .eval(
            keys,
            "force-release",
            |s| &s.force_release,
            &[
                &keys.lock,
                &keys.fence,
                &keys.queue,
                &keys.waiters,
                &keys.released,
            ],
            &[engine.retention_ms(), keys.channels.as_bytes(), side],
        )
        .await?;
    if let Value::Array(items) = &reply {
        return match (items.first(), items.get(1).and_then(scripts::as_text)) {
            (Some(Value::Int(-2)), Some(kind)) => Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "lock {:?} is a {kind}, not a read-write lock: only a read-write lock's \
                     readers or writer are released apart; force-release the whole lock instead",
                    keys.name
                ),
            )),
            (Some(Value::Int(-1)), Some(found)) => Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "lock {:?} is a redis {found} that leasehold did not write: force-release \
                     removes only locks, so it was left as it is; delete the key by hand if \
                     it is not needed",
                    keys.name
                ),
            )),
            _ => Err(Error::unexpected_reply("force-release", &reply)),
        };
    }
    scripts::flag("force-release", &reply)
}

/// The lock's state as Redis sees it now.
pub(crate) async fn inspect(store: &Store, keys: &LockKeys) -> Result<LockInfo> {
    let route = store.route(keys).await?;
    let (reply, answered) = store
        .eval_answered(
            route,
            &keys.lock,
            "inspect",
            |s| &s.inspect,
            &[&keys.lock, &keys.fence, &keys.queue],
            &[],
        )
        .await?;
    let mut info = lock_info(&keys.name, answered.address(), &reply)?;
    info.replicas = Some(answered.replicas());
    info.grace_left = store.grace_left(&keys.lock, answered.server());
    Ok(info)
}

/// Reads the reply of `scripts/inspect.lua`, which `server` sent.
fn lock_info(name: &str, server: &str, reply: &Value) -> Result<LockInfo> {
    let unexpected = || Error::unexpected_reply("inspect", reply);
    let redis::Value::Array(items) = reply else {
        return Err(unexpected());
    };
    let int = |i: usize| {
        items
            .get(i)
            .and_then(scripts::as_int)
            .ok_or_else(unexpected)
    };
    let kind = items
        .first()
        .and_then(scripts::as_text)
        .ok_or_else(unexpected)?;
    let (lock_pttl, fence, waiting, permits) = (int(1)?, int(2)?, int(3)?, int(4)?);
    let read_at = u64::try_from(int(5)?)
        .ok()
        .map(|us| UNIX_EPOCH + Duration::from_micros(us));
    let remaining = crate::engine::pttl(lock_pttl);
    let records = items[6.min(items.len())..]
        .iter()
        .filter_map(scripts::as_text);
    let holders: Vec<Holder> = if kind == "mutex" {
        records
            .map(|record| Holder::from_mutex_record(&record, remaining))
            .collect()
    } else {
        records
            .filter_map(|record| Holder::from_hash_record(&record, true))
            .collect()
    };
    let held = match kind.as_str() {
        "none" => false,
        "reentrant" | "rwlock" | "semaphore" => !holders.is_empty(),
        _ => true,
    };
    Ok(LockInfo {
        name: name.to_owned(),
        held,
        remaining: if held { remaining } else { None },
        last_fence: u64::try_from(fence).ok(),
        waiting_clients: u64::try_from(waiting).unwrap_or(0),
        kind: (kind != "none").then_some(kind),
        holders,
        permits: u32::try_from(permits).ok(),
        read_at,
        server: server.to_owned(),
        replicas: None,
        grace_left: None,
    })
}

/// Stores a semaphore's permit count, and wakes the waiters it may admit;
/// with `unless_set`, only where no count is set, given `lifetime` when
/// `Some` (see `semaphore_permits.lua`). Whether it was stored.
pub(crate) async fn set_permits(
    engine: &Engine,
    keys: &LockKeys,
    permits: u32,
    unless_set: Option<Option<Duration>>,
) -> Result<bool> {
    let permits_arg = permits.to_string();
    let lifetime_arg = unless_set.flatten().map(millis).unwrap_or(0).to_string();
    let only: &[u8] = if unless_set.is_some() { b"1" } else { b"0" };
    let reply = engine
        .one()?
        .eval(
            keys,
            "set-permits",
            |s| &s.semaphore_permits,
            &[&keys.lock, &keys.queue, &keys.waiters],
            &[
                permits_arg.as_bytes(),
                engine.retention_ms(),
                keys.channels.as_bytes(),
                only,
                lifetime_arg.as_bytes(),
            ],
        )
        .await?;
    let unexpected = || Error::unexpected_reply("set-permits", &reply);
    let Value::Array(items) = &reply else {
        return Err(unexpected());
    };
    match items.first().and_then(scripts::as_int) {
        Some(1) => Ok(true),
        Some(0) if unless_set.is_some() => Ok(false),
        Some(-1) => {
            let found = items
                .get(1)
                .and_then(scripts::as_text)
                .ok_or_else(unexpected)?;
            Err(Kind::Semaphore { total: permits }.conflict(&keys.name, &found))
        }
        _ => Err(unexpected()),
    }
}

/// Where an election keeps its leader's record and announces changes,
/// beside its lock's keys.
#[derive(Debug, Clone)]
pub(crate) struct ElectionKeys {
    pub(crate) record: String,
    pub(crate) channel: String,
}

impl ElectionKeys {
    pub(crate) fn new(keys: &LockKeys) -> Self {
        ElectionKeys {
            record: format!("{}:leader", keys.lock),
            channel: format!("{}:leader:ch", keys.lock),
        }
    }
}

/// Writes the record of the leadership that `token` holds, for `ttl`, and
/// announces it; false when the token no longer holds the lock.
pub(crate) async fn write_leader(
    engine: &Engine,
    keys: &LockKeys,
    election: &ElectionKeys,
    token: &str,
    fence: u64,
    value: &str,
    ttl: Duration,
) -> Result<bool> {
    let fence = fence.to_string();
    let ttl = millis(ttl).to_string();
    let reply = engine
        .one()?
        .eval(
            keys,
            "election record",
            |s| &s.election_win,
            &[&keys.lock, &election.record],
            &[
                token.as_bytes(),
                fence.as_bytes(),
                value.as_bytes(),
                ttl.as_bytes(),
                election.channel.as_bytes(),
            ],
        )
        .await?;
    scripts::flag("election record", &reply)
}

/// Who leads an election, as its record says: the value and fence, while
/// the leadership that wrote them holds the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaderRecord {
    pub(crate) value: String,
    pub(crate) fence: u64,
}

/// The leader now, and the lock's PTTL (negative: no key, or no expiry).
pub(crate) async fn read_leader(
    engine: &Engine,
    keys: &LockKeys,
    election: &ElectionKeys,
) -> Result<(Option<LeaderRecord>, i64)> {
    let reply = engine
        .one()?
        .eval(
            keys,
            "leader",
            |s| &s.election_leader,
            &[&keys.lock, &election.record],
            &[],
        )
        .await?;
    let unexpected = || Error::unexpected_reply("leader", &reply);
    let Value::Array(items) = &reply else {
        return Err(unexpected());
    };
    let pttl = items
        .first()
        .and_then(scripts::as_int)
        .ok_or_else(unexpected)?;
    let leader = match items.as_slice() {
        [_] => None,
        [_, fence, value] => {
            let fence = scripts::as_text(fence)
                .and_then(|fence| fence.parse().ok())
                .ok_or_else(unexpected)?;
            let value = scripts::as_text(value).ok_or_else(unexpected)?;
            Some(LeaderRecord { value, fence })
        }
        _ => return Err(unexpected()),
    };
    Ok((leader, pttl))
}

/// Tells an election's observers to read its record again.
pub(crate) async fn announce(
    engine: &Engine,
    keys: &LockKeys,
    election: &ElectionKeys,
) -> Result<()> {
    engine
        .one()?
        .eval(
            keys,
            "election announcement",
            |s| &s.announce,
            &[&keys.lock],
            &[election.channel.as_bytes(), b""],
        )
        .await
        .map(drop)
}
