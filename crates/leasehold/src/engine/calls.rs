//! What the lock core asks of the engine by a lock's keys, the same for a
//! lock on one deployment or on a quorum of masters: each call says which
//! of the two does it, and how.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::conn::replicas::ReplicaAck;
use crate::deploy::backing::Backing;
use crate::engine::state::Engine;
use crate::engine::watch::LockWatch;
use crate::engine::{admin, masters, ops, Kind};
use crate::error::{Error, Result};
use crate::holder::{LockInfo, Waiter};
use crate::keys::LockKeys;

/// Releases the lease `token` holds, whoever took it; on how many servers
/// it was held (a majority or more of a quorum's masters, 1 on one
/// deployment).
pub(crate) async fn release_token(
    engine: &Arc<Engine>,
    keys: &LockKeys,
    token: &str,
) -> Result<usize> {
    match &engine.backing {
        Backing::One(store) => ops::release_token(engine, store, keys, token)
            .await
            .map(|()| 1),
        Backing::Quorum(quorum) => masters::release_token(engine, quorum, keys, token, None).await,
    }
}

/// Releases the lease `token` holds but keeps the lock held, marked as
/// kept, for `keep` from now; nobody is woken.
pub(crate) async fn release_token_keeping(
    engine: &Arc<Engine>,
    keys: &LockKeys,
    token: &str,
    keep: Duration,
) -> Result<()> {
    match &engine.backing {
        Backing::One(store) => ops::release_token_keeping(engine, store, keys, token, keep).await,
        Backing::Quorum(quorum) => {
            let until = Instant::now() + keep;
            masters::release_token(engine, quorum, keys, token, Some(until))
                .await
                .map(drop)
        }
    }
}

/// Releases `token` only if a lease of `owner` holds it, of a lock of
/// `kind` (a kind with owners: one deployment's alone).
pub(crate) async fn release_owned_token(
    engine: &Engine,
    keys: &LockKeys,
    kind: Kind,
    owner: &str,
    token: &str,
) -> Result<()> {
    ops::release_owned_token(engine, engine.one()?, keys, kind, owner, token).await
}

/// Sets the lease of `token` to `lease`, or says that it holds nothing;
/// on one deployment, `ack` says which replicas must acknowledge it.
pub(crate) async fn extend_token(
    engine: &Arc<Engine>,
    keys: &LockKeys,
    token: &str,
    lease: Duration,
    ack: ReplicaAck,
) -> Result<()> {
    match &engine.backing {
        Backing::One(store) => ops::extend_token(store, keys, token, lease, ack).await,
        Backing::Quorum(quorum) => masters::extend_token(engine, quorum, keys, token, lease).await,
    }
}

/// Removes the lock whoever holds it, and wakes its waiters; whether a
/// lock was there.
pub(crate) async fn force_release(engine: &Engine, keys: &LockKeys) -> Result<bool> {
    match &engine.backing {
        Backing::One(store) => ops::force_release(engine, store, keys, None).await,
        Backing::Quorum(quorum) => masters::force_release(engine, quorum, keys).await,
    }
}

/// Removes the leases of one side of a read-write lock, and wakes the
/// waiters that can go; whether there was one. (A quorum has mutexes
/// alone.)
pub(crate) async fn force_release_side(
    engine: &Engine,
    keys: &LockKeys,
    side: ops::RwSide,
) -> Result<bool> {
    ops::force_release(engine, engine.one()?, keys, Some(side)).await
}

/// The lock's state now: as its server sees it, or as a majority of a
/// quorum's masters do.
pub(crate) async fn inspect(engine: &Engine, keys: &LockKeys) -> Result<LockInfo> {
    match &engine.backing {
        Backing::One(store) => ops::inspect(store, keys).await,
        Backing::Quorum(quorum) => masters::inspect(quorum, keys).await,
    }
}

/// The lock's state on each server it is kept on, by address: every
/// master of a quorum, or the one deployment.
pub(crate) async fn inspect_servers(
    engine: &Engine,
    keys: &LockKeys,
) -> Vec<(String, Result<LockInfo>)> {
    match &engine.backing {
        Backing::One(store) => vec![(store.address().to_owned(), ops::inspect(store, keys).await)],
        Backing::Quorum(quorum) => masters::inspect_masters(quorum, keys).await,
    }
}

/// The lock's live waiters in line. Nobody waits in line for a lock on a
/// quorum: a wait there tries again after a pause.
pub(crate) async fn waiters(engine: &Engine, keys: &LockKeys) -> Result<Vec<Waiter>> {
    match &engine.backing {
        Backing::One(_) => admin::waiters(engine, keys).await,
        Backing::Quorum(_) => Ok(Vec::new()),
    }
}

/// A watch of the lock's leases, on one deployment.
pub(crate) fn watch(engine: &Arc<Engine>, keys: &LockKeys) -> Result<LockWatch> {
    match &engine.backing {
        Backing::One(_) => LockWatch::new(Arc::clone(engine), keys.clone()),
        Backing::Quorum(_) => Err(Error::invalid(
            "a Redlock's lock cannot be watched: each master keeps a copy of its own, and the \
             lock's end is a majority's; watch a lock on one deployment (a Client)",
        )),
    }
}
