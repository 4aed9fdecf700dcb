//! Replica acknowledgement: which replicas must have a grant before it
//! counts (`WAIT`, right behind the script that made it, on the same
//! connection), and what a master says of its replicas.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::holder::ReplicaStatus;

/// How long Redis waits for the replicas to acknowledge a grant unless
/// the client or the lock says otherwise.
pub const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest a lock waits for its replicas' acknowledgement: Redis holds
/// the client's command connection back that long at most.
const MAX_REPLICA_TIMEOUT: Duration = Duration::from_secs(60);
/// The shortest.
const MIN_REPLICA_TIMEOUT: Duration = Duration::from_millis(10);

/// How long what a master said of its replicas is trusted: a replica that
/// connects (a rolling restart, a new one) is asked for within this.
const REREAD_AFTER: Duration = Duration::from_secs(5);

/// Which replicas must acknowledge a grant (an acquisition, an explicit
/// extend) before it counts. A grant fewer replicas acknowledge within the
/// timeout is undone: the acquisition fails with
/// [`ErrorKind::ReplicasMissing`](crate::ErrorKind::ReplicasMissing), or a
/// wait tries again.
///
/// What it gives is best effort, not consensus: a replica that
/// acknowledged has the lock's keys in memory, so a failover to it keeps
/// the lock; a failover to a replica that did not, or a replica that
/// restarts without persistence, still loses it (Redis's `WAIT`
/// documentation says the same). The watchdog's renewals are not
/// acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplicaAck {
    /// Every replica the master lists as connected and in sync (`INFO
    /// replication`, `state=online`) must acknowledge within `timeout`.
    /// A master without replicas is sent no `WAIT` and pays nothing. The
    /// default, with [`DEFAULT_REPLICA_TIMEOUT`]. The list is read when a
    /// connection is made, again every few seconds while locks are taken,
    /// and at once when an acknowledgement falls short (a replica that
    /// left is then no longer waited for).
    Connected {
        /// How long Redis waits for them (10 ms to 60 s).
        timeout: Duration,
    },
    /// At least `replicas` replicas must acknowledge within `timeout`,
    /// however many the master has: with fewer connected, every grant
    /// fails.
    AtLeast {
        /// How many (at least 1).
        replicas: u32,
        /// How long Redis waits for them (10 ms to 60 s).
        timeout: Duration,
    },
    /// No acknowledgement: a grant counts once the master made it. A
    /// failover to a replica that had not got it yet can then grant the
    /// lock a second time while its holder still holds it (see the
    /// README's safety model).
    Off,
}

impl Default for ReplicaAck {
    fn default() -> Self {
        ReplicaAck::Connected {
            timeout: DEFAULT_REPLICA_TIMEOUT,
        }
    }
}

impl ReplicaAck {
    /// `replicas` replicas within `timeout`; 0 is [`ReplicaAck::Off`].
    pub(crate) fn at_least(replicas: u32, timeout: Duration) -> Self {
        if replicas == 0 {
            ReplicaAck::Off
        } else {
            ReplicaAck::AtLeast { replicas, timeout }
        }
    }

    /// How long Redis waits for the replicas, unless off.
    #[must_use]
    pub fn timeout(&self) -> Option<Duration> {
        match *self {
            ReplicaAck::Connected { timeout } | ReplicaAck::AtLeast { timeout, .. } => {
                Some(timeout)
            }
            ReplicaAck::Off => None,
        }
    }

    /// This setting, checked.
    pub(crate) fn validate(self) -> Result<Self> {
        if let ReplicaAck::AtLeast { replicas: 0, .. } = self {
            return Ok(ReplicaAck::Off);
        }
        match self.timeout() {
            Some(timeout) if !(MIN_REPLICA_TIMEOUT..=MAX_REPLICA_TIMEOUT).contains(&timeout) => {
                Err(Error::invalid(format!(
                    "replica timeout {timeout:?} is out of range: give at least 10ms and at most \
                     60s (Redis holds the client's connection back that long at most)"
                )))
            }
            _ => Ok(self),
        }
    }
}

/// How a `WAIT` behind a script went: `asked` replicas were to
/// acknowledge, `acked` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Acked {
    pub(crate) asked: u32,
    pub(crate) acked: u32,
}

impl Acked {
    pub(crate) fn is_short(self) -> bool {
        self.acked < self.asked
    }
}

/// What a master last said of its replicas, as one connection read it.
#[derive(Debug, Default)]
pub(crate) struct ReplicaList {
    /// `ip:port` of each replica listed connected and in sync.
    online: Vec<String>,
    /// When it was read; `None`: never, or to be read again at once.
    read: Option<Instant>,
    /// The last acknowledgement asked of them, when it fell short.
    short: Option<Acked>,
}

impl ReplicaList {
    /// The list in an `INFO replication` reply.
    pub(crate) fn parse(info: &str) -> ReplicaList {
        let online = info
            .lines()
            .filter(|line| {
                line.strip_prefix("slave")
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
            })
            .filter_map(|line| {
                let (_, fields) = line.split_once(':')?;
                let field = |name: &str| {
                    fields
                        .split(',')
                        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                };
                if field("state") != Some("online") {
                    return None;
                }
                Some(format!("{}:{}", field("ip")?, field("port")?))
            })
            .collect();
        ReplicaList {
            online,
            read: Some(Instant::now()),
            short: None,
        }
    }

    /// Whether it is to be read again before a grant relies on it.
    pub(crate) fn is_due(&self) -> bool {
        self.read.is_none_or(|at| at.elapsed() >= REREAD_AFTER)
    }

    /// How many replicas the master listed connected and in sync.
    pub(crate) fn online(&self) -> u32 {
        u32::try_from(self.online.len()).unwrap_or(u32::MAX)
    }

    /// A new reading replaces this one; the last shortfall stays until an
    /// acknowledgement is had.
    pub(crate) fn replace(&mut self, new: ReplicaList) {
        let short = self.short.take();
        *self = new;
        self.short = short;
    }

    /// The last acknowledgement asked, when it fell short.
    pub(crate) fn short(&self) -> Option<Acked> {
        self.short
    }

    /// How the last acknowledgement went.
    pub(crate) fn note(&mut self, acked: Acked) {
        if acked.is_short() {
            self.short = Some(acked);
            // Read again before the next grant: a replica may have left.
            self.read = None;
        } else {
            self.short = None;
        }
    }
}

impl ReplicaList {
    /// What is known of the replicas, for `inspect`.
    pub(crate) fn status(&self) -> ReplicaStatus {
        ReplicaStatus {
            online: self.online.clone(),
            last_shortfall: self.short.map(|a| (a.acked, a.asked)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_replicas_in_sync_are_listed() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n\
            slave0:ip=10.0.0.5,port=6380,state=online,offset=42,lag=0\r\n\
            slave1:ip=10.0.0.6,port=6381,state=wait_bgsave,offset=0,lag=0\r\n\
            slave2:ip=::1,port=6382,state=online,offset=40,lag=1\r\n\
            slave_expires_tracked_keys:0\r\nmaster_replid:abc\r\n";
        let list = ReplicaList::parse(info);
        assert_eq!(list.online, ["10.0.0.5:6380", "::1:6382"]);
        assert_eq!(list.online(), 2);
        assert!(!list.is_due());
        assert_eq!(
            ReplicaList::parse("role:master\r\nconnected_slaves:0\r\n").online(),
            0
        );
    }

    #[test]
    fn a_shortfall_reads_the_list_again_and_is_kept_until_an_ack() {
        let mut list = ReplicaList::parse("slave0:ip=a,port=1,state=online\r\n");
        list.note(Acked { asked: 1, acked: 0 });
        assert!(list.is_due());
        list.replace(ReplicaList::parse(""));
        assert_eq!(list.short, Some(Acked { asked: 1, acked: 0 }));
        list.note(Acked { asked: 0, acked: 0 });
        assert_eq!(list.short, None);
    }

    #[test]
    fn settings_are_checked() {
        assert_eq!(
            ReplicaAck::at_least(0, Duration::from_secs(1)),
            ReplicaAck::Off
        );
        assert_eq!(
            ReplicaAck::AtLeast {
                replicas: 0,
                timeout: Duration::ZERO
            }
            .validate()
            .unwrap(),
            ReplicaAck::Off
        );
        for timeout in [Duration::ZERO, Duration::from_secs(61)] {
            assert!(ReplicaAck::Connected { timeout }.validate().is_err());
        }
        assert!(ReplicaAck::default().validate().is_ok());
        assert!(ReplicaAck::Off.validate().is_ok());
    }
}
