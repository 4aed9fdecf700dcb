//! The grace on a restart or a change of master: no lock is granted by a
//! server younger than the grace, nor by a master that took a slot over
//! from another within it. What the client saw of its servers lives here.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::conn::ServerInfo;
use crate::keys::hash_slot;

/// The masters a client has seen serve its locks' slots.
#[derive(Debug, Default)]
struct SlotMasters {
    /// The master each slot was last served by.
    slots: HashMap<u16, SlotMaster>,
    /// Every master seen serve any slot, by identity.
    known: HashSet<u64>,
    /// When each promoted master (identity, replication id) was first seen
    /// taking a slot over: the other slots it took over at that failover
    /// count their grace from then too, not from the client's first
    /// request to each of them.
    promotions: HashMap<(u64, u64), Instant>,
}

#[derive(Debug)]
struct SlotMaster {
    identity: u64,
    replid: u64,
    /// When a promoted master took the slot over, as seen here.
    changed: Option<Instant>,
}

/// The grace of one client's deployment, and what it has seen.
#[derive(Debug, Default)]
pub(crate) struct Grace {
    /// Off when `None`.
    grace: Option<Duration>,
    masters: Mutex<SlotMasters>,
}

impl Grace {
    pub(crate) fn new(grace: Option<Duration>) -> Self {
        Grace {
            grace,
            masters: Mutex::default(),
        }
    }

    /// How long from now no lock on `key` may be granted by the server
    /// behind `server`, under the grace: while that server has been up for
    /// less than the grace (a restart), or since it took over `key`'s slot
    /// by a promotion, as this client saw it: it was promoted from the
    /// master this client last saw serve the slot, or it is a master this
    /// client did not know that was promoted at some time. The grace of a
    /// promotion counts from when this client first saw the promoted
    /// master take any slot over, so a failover costs one grace, not one
    /// per slot. A slot that moved to a master this client knew (a
    /// migration: the keys move with it) is not held back.
    pub(crate) fn left(&self, key: &str, server: &ServerInfo) -> Option<Duration> {
        let grace = self.grace?;
        let now = Instant::now();
        let mut ends = server.started + grace;
        let slot = hash_slot(key);
        let mut masters = self
            .masters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let known = masters.known.contains(&server.identity);
        let changed = match masters.slots.get(&slot) {
            Some(seen) if seen.identity != server.identity => {
                let promoted = server.promoted_from == Some(seen.replid)
                    || (!known && server.promoted_from.is_some());
                if promoted {
                    Some(
                        *masters
                            .promotions
                            .entry((server.identity, server.replid))
                            .or_insert(now),
                    )
                } else {
                    seen.changed
                }
            }
            Some(seen) => seen.changed,
            None => None,
        };
        masters.known.insert(server.identity);
        masters.slots.insert(
            slot,
            SlotMaster {
                identity: server.identity,
                replid: server.replid,
                changed,
            },
        );
        if let Some(at) = changed {
            ends = ends.max(at + grace);
        }
        let left = ends.saturating_duration_since(now);
        (!left.is_zero()).then_some(left)
    }
}
