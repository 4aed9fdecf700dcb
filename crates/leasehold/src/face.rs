//! The surface every lock face shares, written once: the lock's settings
//! as a value ([`LockSettings`]), and the methods that change them, name
//! the lock and watch it ([`face_settings`]), and the calls a face
//! forwards to its core ([`face_calls`]), each face giving only their docs.
//! The operations every face answers are one list, in `lock.rs`.

use std::time::Duration;

use crate::conn::replicas::ReplicaAck;
use crate::error::{Error, Result};
use crate::keys::{validate_lease, MAX_LEASE, MIN_LEASE};

/// The settings of a lock: what the `with_*` methods of every face
/// change, one by one, and what [`Lock::settings`](crate::Lock::settings)
/// reads and [`Lock::set_settings`](crate::Lock::set_settings) changes at
/// once, for code that picks a lock's kind once and sets it up the same
/// way whatever the kind.
///
/// ```no_run
/// # async fn demo(client: leasehold::Client) -> leasehold::Result<()> {
/// use std::time::Duration;
/// use leasehold::Lock;
///
/// let mut lock: Box<dyn Lock> = Box::new(client.fair_mutex("nightly")?);
/// let mut settings = lock.settings();
/// settings.hold_at_least = Some(Duration::from_secs(600));
/// lock.set_settings(settings)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockSettings {
    /// The lease of each acquisition ([`Mutex::with_lease`](crate::Mutex::with_lease)).
    pub lease: Duration,
    /// Whether the watchdog renews held leases
    /// ([`Mutex::with_watchdog`](crate::Mutex::with_watchdog)).
    pub watchdog: bool,
    /// A release before this much time since the acquisition keeps the
    /// lock until then ([`Mutex::with_hold_at_least`](crate::Mutex::with_hold_at_least));
    /// `None` (or zero) for none.
    pub hold_at_least: Option<Duration>,
    /// Nothing renews a lease past this much time since its acquisition
    /// ([`Mutex::with_max_hold`](crate::Mutex::with_max_hold)); `None` for no cap.
    pub max_hold: Option<Duration>,
    /// Which replicas must acknowledge a grant
    /// ([`Mutex::with_replica_ack`](crate::Mutex::with_replica_ack)).
    pub replica_ack: ReplicaAck,
}

impl LockSettings {
    pub(crate) fn new(lease: Duration, watchdog: bool, replica_ack: ReplicaAck) -> Self {
        LockSettings {
            lease,
            watchdog,
            hold_at_least: None,
            max_hold: None,
            replica_ack,
        }
    }

    pub(crate) fn set_replica_ack(&mut self, replicas: u32, timeout: Duration) -> Result<()> {
        self.replica_ack = ReplicaAck::at_least(replicas, timeout).validate()?;
        Ok(())
    }

    pub(crate) fn set_lease(&mut self, lease: Duration) -> Result<()> {
        validate_lease(lease)?;
        self.lease = lease;
        Ok(())
    }

    pub(crate) fn set_hold_at_least(&mut self, hold: Duration) -> Result<()> {
        if hold > MAX_LEASE {
            return Err(Error::invalid(format!(
                "hold-at-least {hold:?} is longer than 24h: a run-once window is at most a day"
            )));
        }
        let hold = (!hold.is_zero()).then_some(hold);
        check_hold_within_cap(hold, self.max_hold)?;
        self.hold_at_least = hold;
        Ok(())
    }

    pub(crate) fn set_max_hold(&mut self, max: Duration) -> Result<()> {
        if max < MIN_LEASE || max > MAX_LEASE {
            return Err(Error::invalid(format!(
                "max hold {max:?} is out of range: give at least 10ms and at most 24h"
            )));
        }
        check_hold_within_cap(self.hold_at_least, Some(max))?;
        self.max_hold = Some(max);
        Ok(())
    }

    /// `wanted`, checked as the setters check each value: these settings
    /// become `wanted`, or stay as they are when a value is refused.
    pub(crate) fn set_all(&mut self, wanted: LockSettings) -> Result<()> {
        let mut next = LockSettings::new(wanted.lease, wanted.watchdog, wanted.replica_ack);
        next.set_lease(wanted.lease)?;
        next.replica_ack = wanted.replica_ack.validate()?;
        if let Some(max) = wanted.max_hold {
            next.set_max_hold(max)?;
        }
        if let Some(hold) = wanted.hold_at_least {
            next.set_hold_at_least(hold)?;
        }
        *self = next;
        Ok(())
    }
}

/// A lock kept after its release for longer than the holder may renew it
/// would outlive the cap: refused, whichever of the two is set first.
fn check_hold_within_cap(hold: Option<Duration>, cap: Option<Duration>) -> Result<()> {
    match (hold, cap) {
        (Some(hold), Some(cap)) if hold > cap => Err(Error::invalid(format!(
            "hold-at-least {hold:?} is longer than the max hold {cap:?}: the lock would be kept \
             past its cap; make the hold shorter or the cap longer"
        ))),
        _ => Ok(()),
    }
}

/// The settings methods every face has, written once: `name`, `settings`,
/// `with_settings`, `with_lease`, `with_watchdog`, `with_hold_at_least`,
/// `with_max_hold` and `with_replica_ack`, and `watch`, on a type whose
/// `core` field is a `LockCore`.
macro_rules! face_settings {
    ($face:ident) => {
        impl $face {
            /// The lock's name.
            #[must_use]
            pub fn name(&self) -> &str {
                &self.core.keys.name
            }

            /// This lock's settings: its lease, watchdog, hold-at-least, max
            /// hold and replica acknowledgement.
            #[must_use]
            pub fn settings(&self) -> $crate::face::LockSettings {
                self.core.settings
            }

            /// This lock with `settings`, checked as the `with_*` methods
            /// check each of them.
            ///
            /// # Errors
            ///
            /// As [`with_lease`](Self::with_lease),
            /// [`with_hold_at_least`](Self::with_hold_at_least),
            /// [`with_max_hold`](Self::with_max_hold) and
            /// [`with_replica_ack`](Self::with_replica_ack).
            pub fn with_settings(
                mut self,
                settings: $crate::face::LockSettings,
            ) -> $crate::error::Result<Self> {
                self.core.set_settings(settings)?;
                Ok(self)
            }

            /// This lock with another lease length (the client's by default).
            ///
            /// # Errors
            ///
            /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for
            /// a zero lease, one under 10 ms, or one over 24 h.
            pub fn with_lease(mut self, lease: std::time::Duration) -> $crate::error::Result<Self> {
                self.core.settings.set_lease(lease)?;
                Ok(self)
            }

            /// This lock with the watchdog on or off (the client's setting
            /// by default). Off, each lease is fixed: it ends after its
            /// length unless extended, and the guard reports it lost then.
            #[must_use]
            pub fn with_watchdog(mut self, on: bool) -> Self {
                self.core.settings.watchdog = on;
                self
            }

            /// This lock with a hold-at-least of `hold` (off, zero, by
            /// default): for run-once jobs. A release before `hold` has
            /// passed since the acquisition does not free the lock: it stays
            /// held, and is no longer renewed, until `hold` has passed, and
            /// then expires. Nobody is woken early; waiters take it when it
            /// expires. The release reports success (the lease held to the
            /// end). So a job that several hosts start within `hold` of each
            /// other (cron on every host, clocks apart by a little) runs
            /// once: the first to take the lock runs it, and the others find
            /// it busy even when the first finished quickly.
            ///
            /// The hold is measured on this process's monotonic clock from
            /// the moment the grant arrived, which is after Redis granted
            /// it, and the release sends Redis only the time left (rounded
            /// up, with an allowance for clock drift) as a relative expiry.
            /// No wall clock is compared across machines, so clock
            /// differences between hosts and Redis cannot shorten the hold;
            /// the lock may be held a few milliseconds longer than `hold`,
            /// never shorter. A holder that dies without releasing keeps the
            /// lock only until its lease runs out, and a lease that was lost
            /// is not held on.
            ///
            /// # Errors
            ///
            /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for
            /// a hold over 24 h, or longer than the max hold.
            pub fn with_hold_at_least(
                mut self,
                hold: std::time::Duration,
            ) -> $crate::error::Result<Self> {
                self.core.settings.set_hold_at_least(hold)?;
                Ok(self)
            }

            /// This lock with a cap on renewal (off by default): the
            /// watchdog renews a lease no further than `max` after its
            /// acquisition, so a holder stuck in an endless loop cannot keep
            /// the lock forever. The lease then ends at the cap:
            /// [`LeaseGuard::lost`](crate::LeaseGuard::lost) resolves and the
            /// loss error says that the max hold was reached. An explicit
            /// [`extend`](crate::LeaseGuard::extend) stops at the cap too.
            ///
            /// The cap is counted on this process's monotonic clock from the
            /// moment the acquire request was sent, so the lock never
            /// outlives it by this holder's reckoning.
            ///
            /// # Errors
            ///
            /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for
            /// a cap under 10 ms or over 24 h, or shorter than the
            /// hold-at-least.
            pub fn with_max_hold(
                mut self,
                max: std::time::Duration,
            ) -> $crate::error::Result<Self> {
                self.core.settings.set_max_hold(max)?;
                Ok(self)
            }

            /// This lock with acknowledgement by at least `replicas`
            /// replicas ([`ReplicaAck::AtLeast`](crate::ReplicaAck::AtLeast)),
            /// or none with `replicas` of 0 ([`ReplicaAck::Off`](crate::ReplicaAck::Off)),
            /// instead of the client's setting
            /// ([`ClientBuilder::replica_ack`](crate::ClientBuilder::replica_ack):
            /// by default every replica of the master, those it lists and
            /// those that could take over from it, see
            /// [`ReplicaAck::Connected`](crate::ReplicaAck::Connected)).
            /// Each acquisition, and each
            /// [`extend`](crate::LeaseGuard::extend), is followed on the
            /// same connection, in the same round trip, by `WAIT replicas
            /// timeout`. When fewer than `replicas` replicas acknowledge
            /// the grant within `timeout`, it is released at once and the
            /// acquisition fails with
            /// [`ErrorKind::ReplicasMissing`](crate::ErrorKind::ReplicasMissing),
            /// saying how many did; a wait (`acquire`) keeps trying within
            /// its bound instead (without a bound, for as long as the
            /// client's connect timeout). An extend that too few replicas
            /// acknowledge fails the same way, and the lease stays
            /// extended on the master.
            ///
            /// What it gives is best effort, not consensus: a replica that
            /// acknowledged has the lock's keys in memory, so a failover
            /// to it keeps the lock, but a failover to another replica, or
            /// a replica that restarts without persistence, still loses it
            /// (Redis's WAIT documentation says the same). The watchdog's
            /// renewals send no WAIT. Redis holds this client's command
            /// connection, shared by its locks, for up to `timeout` while
            /// replicas lag: keep it short against the lease (tens of
            /// milliseconds on a healthy network).
            ///
            /// # Errors
            ///
            /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for
            /// a timeout under 10 ms or over 60 s.
            pub fn with_replica_ack(
                mut self,
                replicas: u32,
                timeout: std::time::Duration,
            ) -> $crate::error::Result<Self> {
                self.core.set_replica_ack(replicas, timeout)?;
                Ok(self)
            }

            /// Watches the lock without waiting for it: the
            /// [`LockWatch`](crate::LockWatch) reports the end of each lease
            /// it sees held, by anyone, with how it ended (released,
            /// force-released, expired, or gone from the server), its
            /// fence, and who took the lock next if someone did at once.
            /// It works on a lock of any kind, whatever kind this handle
            /// is: it only reads the lock's leases.
            ///
            /// A release of a watched lock is heard at once, through the
            /// lock's watch channel (sharded pub/sub on a Redis Cluster);
            /// an expiry a few milliseconds after the lease ends, as the
            /// watch looks then (one script). Keyspace notifications are
            /// not needed. A lock nobody watches costs its holders nothing
            /// more; while watched, each release of it publishes one
            /// message, and each watch looks at least every 3 s (every
            /// second while the lock is free). Nothing is sent before the
            /// first [`next`](crate::LockWatch::next) or
            /// [`holders`](crate::LockWatch::holders).
            ///
            /// # Errors
            ///
            /// [`ErrorKind::System`](crate::ErrorKind::System) when the
            /// operating system gives no randomness for the watch's id.
            pub fn watch(&self) -> $crate::error::Result<crate::engine::watch::LockWatch> {
                self.core.watch()
            }
        }

        impl std::fmt::Debug for $face {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.core.debug(stringify!($face), f)
            }
        }
    };
}

pub(crate) use face_settings;

/// The calls a face forwards to its core, each written once: a face lists
/// those it has, each with its own doc, and names the guard its
/// acquisitions return. `spans "primitive"` names the primitive of the
/// spans where it is not the core's kind (an operation on a whole
/// read-write lock).
macro_rules! face_calls {
    ($face:ident -> $guard:ty { $($calls:tt)* }) => {
        $crate::face::face_calls! { @spans [] $face -> $guard { $($calls)* } }
    };
    ($face:ident -> $guard:ty, spans $primitive:literal { $($calls:tt)* }) => {
        $crate::face::face_calls! { @spans [$primitive] $face -> $guard { $($calls)* } }
    };
    (@spans $spans:tt $face:ident -> $guard:ty { $( $(#[$doc:meta])* $op:ident; )* }) => {
        impl $face {
            $( $crate::face::face_call! { $guard, $spans, $(#[$doc])* $op } )*
        }
    };
}

pub(crate) use face_calls;

/// One call of [`face_calls`]: its signature and what it forwards to.
macro_rules! face_call {
    ($guard:ty, [$($p:literal)?], $(#[$doc:meta])* try_acquire) => {
        $(#[$doc])*
        pub async fn try_acquire(&self) -> $crate::error::Result<Option<$guard>> {
            self.core.try_acquire().await
        }
    };
    ($guard:ty, [$($p:literal)?], $(#[$doc:meta])* acquire) => {
        $(#[$doc])*
        pub async fn acquire(&self) -> $crate::error::Result<$guard> {
            self.core.acquire().await
        }
    };
    ($guard:ty, [$($p:literal)?], $(#[$doc:meta])* acquire_timeout) => {
        $(#[$doc])*
        pub async fn acquire_timeout(
            &self,
            wait: std::time::Duration,
        ) -> $crate::error::Result<$guard> {
            self.core.acquire_timeout(wait).await
        }
    };
    ($guard:ty, [$($p:literal)?], $(#[$doc:meta])* release_token) => {
        $(#[$doc])*
        pub async fn release_token(&self, token: &str) -> $crate::error::Result<()> {
            let span = self.core.span_as($crate::observe::Op::ReleaseToken, [$($p)?]);
            $crate::observe::traced(span, self.core.release_token(token)).await
        }
    };
    ($guard:ty, [$($p:literal)?], $(#[$doc:meta])* extend_token) => {
        $(#[$doc])*
        pub async fn extend_token(
            &self,
            token: &str,
            lease: std::time::Duration,
        ) -> $crate::error::Result<()> {
            let span = self.core.span_as($crate::observe::Op::ExtendToken, [$($p)?]);
            $crate::observe::traced(span, self.core.extend_token(token, lease)).await
        }
    };
    ($guard:ty, [$($p:literal)?], $(#[$doc:meta])* force_release) => {
        $(#[$doc])*
        pub async fn force_release(&self) -> $crate::error::Result<bool> {
            let span = self.core.span_as($crate::observe::Op::ForceRelease, [$($p)?]);
            $crate::observe::traced(span, self.core.force_release()).await
        }
    };
    ($guard:ty, [$($p:literal)?], $(#[$doc:meta])* inspect) => {
        $(#[$doc])*
        pub async fn inspect(&self) -> $crate::error::Result<$crate::holder::LockInfo> {
            let span = self.core.span_as($crate::observe::Op::Inspect, [$($p)?]);
            $crate::observe::traced(span, self.core.inspect()).await
        }
    };
    ($guard:ty, [$($p:literal)?], $(#[$doc:meta])* owner) => {
        $(#[$doc])*
        #[must_use]
        pub fn owner(&self) -> $crate::owner::Owner {
            self.core.owner()
        }
    };
    ($guard:ty, [$($p:literal)?], $(#[$doc:meta])* with_owner) => {
        $(#[$doc])*
        #[must_use]
        pub fn with_owner(mut self, owner: $crate::owner::Owner) -> Self {
            self.core.set_owner(owner);
            self
        }
    };
    ($guard:ty, [$($p:literal)?], $(#[$doc:meta])* waiters) => {
        $(#[$doc])*
        pub async fn waiters(&self) -> $crate::error::Result<Vec<$crate::holder::Waiter>> {
            self.core.waiters().await
        }
    };
}

pub(crate) use face_call;
