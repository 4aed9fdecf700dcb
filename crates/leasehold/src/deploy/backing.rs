//! What an engine leases from: one deployment's store, or the quorum of a
//! Redlock's masters.

use std::sync::Arc;
use std::time::Duration;

use crate::deploy::quorum::count::Clocks;
use crate::deploy::quorum::Quorum;
use crate::deploy::store::Store;
use crate::error::{Error, Result};

/// What an engine leases from.
#[derive(Debug)]
pub(crate) enum Backing {
    /// One deployment: a server, a cluster, or the master its sentinels
    /// name.
    One(Arc<Store>),
    /// The independent masters of a Redlock, a majority of which must hold
    /// a lease.
    Quorum(Arc<Quorum>),
}

impl Backing {
    /// How long one command may take before it counts as not answered.
    pub(crate) fn command_timeout(&self) -> Duration {
        match self {
            Backing::One(store) => store.command_timeout(),
            Backing::Quorum(quorum) => quorum.command_timeout(),
        }
    }

    /// Where requests go, for messages.
    pub(crate) fn address(&self) -> String {
        match self {
            Backing::One(store) => store.address().to_owned(),
            Backing::Quorum(quorum) => quorum
                .masters
                .iter()
                .map(|master| master.address())
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// How many servers a lease is taken on.
    pub(crate) fn servers(&self) -> usize {
        match self {
            Backing::One(_) => 1,
            Backing::Quorum(quorum) => quorum.len(),
        }
    }

    /// How the time a lease can be trusted is reckoned across servers
    /// whose clocks may drift: a quorum's own, else the default.
    pub(crate) fn clocks(&self) -> Option<Clocks> {
        match self {
            Backing::One(_) => None,
            Backing::Quorum(quorum) => Some(quorum.config.clocks),
        }
    }

    /// The one deployment, for what a quorum does not offer.
    pub(crate) fn one(&self) -> Result<&Arc<Store>> {
        match self {
            Backing::One(store) => Ok(store),
            Backing::Quorum(_) => Err(Error::invalid(
                "a Redlock offers mutexes alone: waiting in line, watching a lock and the other \
                 kinds of lock need one deployment; use a Client for them",
            )),
        }
    }
}
