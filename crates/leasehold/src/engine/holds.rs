//! What one client knows of the leases it holds: the reentrant holds its
//! guards share, and every lease by lock and holder.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::lease::Lease;
use crate::engine::{Kind, Request};

/// The reentrant hold a granted level belongs to.
#[derive(Debug)]
pub(crate) struct Hold {
    /// The hold's token: its first level's.
    pub(crate) token: String,
    /// What was left of the hold's max hold when Redis granted the level.
    pub(crate) cap_left: Option<Duration>,
}

type HoldMap = HashMap<(String, String), (String, Weak<Lease>)>;

/// The reentrant holds this client's guards share, by lock key and hold
/// token, each with its owner.
#[derive(Debug, Default)]
pub(crate) struct Holds(Mutex<HoldMap>);

impl Holds {
    fn holds(&self) -> std::sync::MutexGuard<'_, HoldMap> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live levels this client holds of `owner`'s hold of `lock`, as
    /// [`Lease::live_levels`] gives them; empty when it holds none.
    pub(crate) fn live_levels(&self, lock: &str, owner: &str) -> String {
        self.holds()
            .iter()
            .filter(|((key, _), (of, _))| key == lock && of == owner)
            .find_map(|(_, (_, lease))| lease.upgrade())
            .map(|lease| lease.live_levels())
            .unwrap_or_default()
    }

    /// The lease of `hold` with one more level, `token`, granted `ttl` by
    /// a request sent at `sent_at`: the one its other levels here share,
    /// refreshed by this reentry, or a new one, made live by `start`, when
    /// there are none (the first level; a level of an owner shared with
    /// another client; a level taken while the hold was kept past its last
    /// level).
    pub(crate) fn join(
        &self,
        request: &Request<'_>,
        token: &str,
        hold: Hold,
        fence: u64,
        (sent_at, ttl): (Instant, Duration),
        start: impl FnOnce(Lease) -> Arc<Lease>,
    ) -> Arc<Lease> {
        let mut holds = self.holds();
        let key = (request.keys.lock.clone(), hold.token);
        if let Some(lease) = holds.get(&key).and_then(|(_, lease)| lease.upgrade()) {
            if lease.add_level() {
                lease.refreshed(sent_at, ttl);
                return lease;
            }
        }
        let mut lease = Lease::new(request, key.1.clone(), fence, sent_at, ttl, None);
        if key.1 != token {
            // A hold begun elsewhere: its own max hold and hold-at-least,
            // which Redis keeps, bound it.
            lease = lease.joining(sent_at, ttl, hold.cap_left);
        }
        let lease = start(lease);
        holds.insert(key, (request.owner.to_owned(), Arc::downgrade(&lease)));
        lease
    }

    /// Forgets `lease`, whose last guard is gone.
    pub(crate) fn forget(&self, lease: &Arc<Lease>) {
        let mut holds = self.holds();
        if holds.is_empty() {
            return;
        }
        let key = (lease.keys.lock.clone(), lease.token.clone());
        if holds
            .get(&key)
            .is_some_and(|(_, known)| std::ptr::eq(known.as_ptr(), Arc::as_ptr(lease)))
        {
            holds.remove(&key);
        }
    }
}

type MineMap = HashMap<String, Vec<(String, Kind, Weak<Lease>)>>;

/// The leases this client holds, by lock key, each with its holder (see
/// [`Request::holder`]) and kind: what tells a holder's own second attempt
/// on a non-reentrant lock, and answers "do I hold this?".
#[derive(Debug, Default)]
pub(crate) struct Mine(Mutex<MineMap>);

impl Mine {
    fn map(&self) -> std::sync::MutexGuard<'_, MineMap> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn add(&self, lock: &str, holder: &str, kind: Kind, lease: &Arc<Lease>) {
        let mut map = self.map();
        let entries = map.entry(lock.to_owned()).or_default();
        entries.retain(|(_, _, held)| held.upgrade().is_some_and(|l| !l.is_finished()));
        if !entries
            .iter()
            .any(|(_, _, held)| std::ptr::eq(held.as_ptr(), Arc::as_ptr(lease)))
        {
            entries.push((holder.to_owned(), kind, Arc::downgrade(lease)));
        }
    }

    /// Forgets `lease`, whose last guard is gone, and what else of its lock
    /// is over: so that the map holds only the locks held now.
    pub(crate) fn forget(&self, lease: &Arc<Lease>) {
        let mut map = self.map();
        let Some(entries) = map.get_mut(&lease.keys.lock) else {
            return;
        };
        entries.retain(|(_, _, held)| {
            !std::ptr::eq(held.as_ptr(), Arc::as_ptr(lease))
                && held.upgrade().is_some_and(|l| !l.is_finished())
        });
        if entries.is_empty() {
            map.remove(&lease.keys.lock);
        }
    }

    /// The fence of a lease of `lock` that `holder` holds here, of a kind
    /// `of` accepts, that is neither released nor known lost.
    pub(crate) fn held_by(
        &self,
        lock: &str,
        holder: &str,
        of: impl Fn(Kind) -> bool,
    ) -> Option<u64> {
        let mut map = self.map();
        let entries = map.get_mut(lock)?;
        entries.retain(|(_, _, held)| held.upgrade().is_some_and(|l| !l.is_finished()));
        let found = entries.iter().find_map(|(who, kind, held)| {
            let lease = held.upgrade()?;
            (who == holder && of(*kind) && lease.loss().is_none()).then_some(lease.fence)
        });
        if entries.is_empty() {
            map.remove(lock);
        }
        found
    }
}
