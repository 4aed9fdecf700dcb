//! Replica acknowledgement: which replicas must have a grant before it
//! counts (`WAIT`, right behind the script that made it, on the same
//! connection), and what a master says of its replicas.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::holder::{CutOffReplica, ReplicaStatus};

/// How long Redis waits for the replicas to acknowledge a grant unless
/// the client or the lock says otherwise.
pub const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest a lock waits for its replicas' acknowledgement: Redis holds
/// the client's command connection back that long at most.
pub(crate) const MAX_REPLICA_TIMEOUT: Duration = Duration::from_secs(60);
/// The shortest.
const MIN_REPLICA_TIMEOUT: Duration = Duration::from_millis(10);

/// Redis's defaults of the settings that decide how long a cluster replica
/// cut off from its master may still be promoted, taken where `CONFIG` is
/// refused.
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(15_000);
const DEFAULT_VALIDITY_FACTOR: u64 = 10;
const DEFAULT_PING_PERIOD: Duration = Duration::from_secs(10);
/// Redis counts a replica's time cut off in whole seconds.
const DATA_AGE_ROUNDING: Duration = Duration::from_secs(1);

/// How long what a master said of its replicas is trusted: a replica that
/// connects (a rolling restart, a new one) is asked for within this.
const REREAD_AFTER: Duration = Duration::from_secs(5);

/// A replica missing from the master's list at two readings at most this
/// far apart is taken to have been missing between them. Further apart,
/// it may have come back in sync and been cut off again unseen, its data
/// fresh enough to be promoted: it counts as missing from the later one.
const MISSING_SEEN_WITHIN: Duration = Duration::from_secs(10);

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
///
/// A client's grants on one master are acknowledged in batches, one batch
/// out at a time, each behind one `WAIT`: grants made together cost one
/// wait for the replicas. With the replicas stalled, a grant can wait for
/// the batch before its own to time out first; locks of one client that
/// ask for different timeouts can then wait the longer one before their
/// own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplicaAck {
    /// Every replica of the master must acknowledge within `timeout`:
    /// those it lists as connected and in sync (`INFO replication`,
    /// `state=online`), and at least as many as could take over from it,
    /// cut off from it or not: on a Redis Cluster its replicas not marked
    /// failed (`CLUSTER NODES`, asked of the master) and not cut off from
    /// it for longer than Redis lets such a replica be promoted
    /// (`cluster-node-timeout` × (`cluster-replica-validity-factor` + 1) +
    /// `repl-ping-replica-period`, and a second, read with `CONFIG GET`;
    /// about 3 minutes with Redis's defaults, forever with a factor of 0),
    /// behind Sentinel the replicas the sentinels could promote (not down,
    /// not of priority 0, not cut off for longer than ten times
    /// `down-after-milliseconds`). A master without replicas is sent no
    /// `WAIT` and pays nothing. The default, with
    /// [`DEFAULT_REPLICA_TIMEOUT`]. The lists are read when a connection is
    /// made (and a master found), again every few seconds while locks are
    /// taken, and at once when an acknowledgement falls short (a replica
    /// that left and could not take over is then no longer waited for).
    ///
    /// What it costs in latency: a grant waits for its replicas'
    /// acknowledgement (a round trip from the master to the slowest
    /// replica); the grants a client asks of one master meanwhile go
    /// together behind one `WAIT`. While a replica that could take over
    /// restarts (a rolling restart) or is cut off, grants on its master
    /// fail or wait until it is back in sync or can no longer take over
    /// (see above); locks already held are not affected.
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

/// What a master last said of its replicas, as one connection read it,
/// and which of its replicas could take over from it.
#[derive(Debug, Default)]
pub(crate) struct ReplicaList {
    /// `ip:port` of each replica listed connected and in sync.
    online: Vec<String>,
    /// `ip:port` of each replica that could be promoted in its place, as
    /// the deployment knows them (a cluster's nodes, the sentinels), even
    /// when cut off from it: a grant they have not got is not safe. Empty
    /// where nothing but the master says (a master named directly).
    promotable: Vec<String>,
    /// When it was read; `None`: never, or to be read again at once.
    read: Option<Instant>,
    /// The last acknowledgement asked of them, when it fell short.
    short: Option<Acked>,
    /// Each replica that could be promoted but the master does not list in
    /// sync, since when this client has seen it so at every reading (none
    /// more than [`MISSING_SEEN_WITHIN`] apart), and the last such reading.
    missing_since: Vec<(String, Instant, Instant)>,
    /// How long a cluster replica cut off from its master may still be
    /// promoted; `None` where nothing but the master says (Sentinel, whose
    /// sentinels leave out a replica cut off too long, or a master named
    /// directly).
    validity: Option<Validity>,
    /// How many times replicas synchronised with the master (`INFO
    /// stats`: full and partial resyncs), when read: a replica that came
    /// back in sync between two readings moved it on, seen or not.
    syncs: Option<u64>,
}

/// The settings that decide how long a cluster replica cut off from its
/// master may still win a failover: Redis refuses to promote a replica
/// whose data is older than `cluster-node-timeout` ×
/// (`cluster-replica-validity-factor` + 1) + `repl-ping-replica-period`
/// (the replica's "data age", less one node timeout, is compared with the
/// rest), unless the factor is 0, and unless an operator asks for the
/// failover by hand (`CLUSTER FAILOVER` on the replica).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Validity {
    pub(crate) node_timeout: Duration,
    pub(crate) factor: u64,
    pub(crate) ping_period: Duration,
}

impl Default for Validity {
    fn default() -> Self {
        Validity {
            node_timeout: DEFAULT_NODE_TIMEOUT,
            factor: DEFAULT_VALIDITY_FACTOR,
            ping_period: DEFAULT_PING_PERIOD,
        }
    }
}

impl Validity {
    /// The settings in the replies of `CONFIG GET cluster-node-timeout`,
    /// `CONFIG GET cluster-replica-validity-factor` and `CONFIG GET
    /// repl-ping-replica-period` (`None` each where refused or unread):
    /// Redis's defaults for what is not there.
    pub(crate) fn from_config(
        node_timeout_ms: Option<u64>,
        factor: Option<u64>,
        ping_period_s: Option<u64>,
    ) -> Validity {
        let default = Validity::default();
        Validity {
            node_timeout: node_timeout_ms.map_or(default.node_timeout, Duration::from_millis),
            factor: factor.unwrap_or(default.factor),
            ping_period: ping_period_s.map_or(default.ping_period, Duration::from_secs),
        }
    }

    /// How long a replica may be cut off from its master and still be
    /// promoted (with a second more for Redis's rounding); `None`: however
    /// long (factor 0).
    pub(crate) fn span(self) -> Option<Duration> {
        if self.factor == 0 {
            return None;
        }
        let factor = u32::try_from(self.factor.saturating_add(1)).unwrap_or(u32::MAX);
        Some(
            self.node_timeout
                .saturating_mul(factor)
                .saturating_add(self.ping_period)
                .saturating_add(DATA_AGE_ROUNDING),
        )
    }
}

impl ReplicaList {
    /// This list with the master's count of resyncs in an `INFO stats`
    /// reply, when it has one.
    pub(crate) fn with_syncs(mut self, stats: Option<&str>) -> ReplicaList {
        self.syncs = stats.and_then(|stats| {
            let count = |name: &str| {
                stats.lines().find_map(|line| {
                    line.strip_prefix(name)?
                        .strip_prefix(':')?
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
            };
            let full = count("sync_full")?;
            let partial = count("sync_partial_ok")?;
            Some(full.saturating_add(partial))
        });
        self
    }

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
            ..ReplicaList::default()
        }
    }

    /// The replicas of the master whose own view `nodes` is (`CLUSTER
    /// NODES`, asked of the master) that could take over from it: those
    /// that replicate it and are not known failed. A replica cut off from
    /// the master is one of them: the cluster may still promote it.
    pub(crate) fn promotable_in_cluster(nodes: &str) -> Vec<String> {
        let lines: Vec<Vec<&str>> = nodes
            .lines()
            .map(|line| line.split_ascii_whitespace().collect())
            .collect();
        let flags = |fields: &[&str]| -> Vec<String> {
            fields
                .get(2)
                .map(|f| f.split(',').map(str::to_owned).collect())
                .unwrap_or_default()
        };
        let Some(me) = lines
            .iter()
            .find(|fields| flags(fields).iter().any(|f| f == "myself"))
            .and_then(|fields| fields.first())
        else {
            return Vec::new();
        };
        lines
            .iter()
            .filter(|fields| fields.get(3) == Some(me))
            .filter(|fields| {
                !flags(fields)
                    .iter()
                    .any(|f| matches!(f.as_str(), "fail" | "handshake" | "noaddr"))
            })
            .filter_map(|fields| {
                let addr = fields.get(1)?;
                Some(addr.split(['@', ',']).next()?.to_owned())
            })
            .collect()
    }

    /// Whether it is to be read again before a grant relies on it.
    pub(crate) fn is_due(&self) -> bool {
        self.read.is_none_or(|at| at.elapsed() >= REREAD_AFTER)
    }

    /// To be read again before a grant relies on it.
    pub(crate) fn mark_due(&mut self) {
        self.read = None;
    }

    /// A new reading of the master's list (`INFO replication`) replaces
    /// this one, with the replicas that could take over when they were read
    /// with it (a cluster's, with how long one cut off may still be
    /// promoted), else those known stay; the last shortfall stays until an
    /// acknowledgement is had, and so does since when each replica that
    /// could take over has been missing from the master's list.
    pub(crate) fn replace(
        &mut self,
        new: ReplicaList,
        promotable: Option<(Vec<String>, Option<Validity>)>,
    ) {
        self.replace_at(new, promotable, Instant::now());
    }

    /// As [`replace`](Self::replace), read at `now`.
    fn replace_at(
        &mut self,
        mut new: ReplicaList,
        promotable: Option<(Vec<String>, Option<Validity>)>,
        now: Instant,
    ) {
        // A replica synchronised since the last reading: one missing at
        // both may have been back in between, its data fresh again.
        let resynced = matches!((self.syncs, new.syncs), (Some(was), Some(is)) if was != is);
        new.syncs = new.syncs.or(self.syncs);
        if resynced {
            self.missing_since.clear();
        }
        new.short = self.short.take();
        new.missing_since = std::mem::take(&mut self.missing_since);
        (new.promotable, new.validity) = match promotable {
            Some(read) => read,
            None => (std::mem::take(&mut self.promotable), self.validity),
        };
        *self = new;
        self.track_missing(now);
    }

    /// The replicas the deployment says could take over (see
    /// [`promotable`](Self::promotable)).
    pub(crate) fn set_promotable(&mut self, replicas: Vec<String>) {
        self.promotable = replicas;
        self.track_missing(Instant::now());
    }

    /// Notes, as of `now`, each replica that could take over and that the
    /// master does not list in sync, keeping since when one already noted
    /// has been missing, unless it was last seen missing too long ago to
    /// say it stayed so (see [`MISSING_SEEN_WITHIN`]).
    fn track_missing(&mut self, now: Instant) {
        let missing: Vec<(String, Instant, Instant)> = self
            .promotable
            .iter()
            .filter(|replica| !self.online.contains(replica))
            .map(|replica| {
                let since = self
                    .missing_since
                    .iter()
                    .find(|(known, _, seen)| {
                        known == replica
                            && now.saturating_duration_since(*seen) <= MISSING_SEEN_WITHIN
                    })
                    .map_or(now, |&(_, since, _)| since);
                (replica.clone(), since, now)
            })
            .collect();
        self.missing_since = missing;
    }

    /// Whether `replica`, which could take over, has been missing from the
    /// master's list for longer than it could still be promoted, as of
    /// `now`: a grant no longer waits for it.
    fn excused(&self, replica: &str, now: Instant) -> bool {
        let Some(span) = self.validity.and_then(Validity::span) else {
            return false;
        };
        self.missing_since.iter().any(|(known, since, _)| {
            known == replica && now.saturating_duration_since(*since) > span
        })
    }

    /// How many replicas a grant waits for: every one the master lists in
    /// sync, and at least as many as could take over from it (a cluster
    /// replica cut off from the master for longer than it could still be
    /// promoted no longer can).
    pub(crate) fn asked(&self) -> u32 {
        let now = Instant::now();
        let promotable = self
            .promotable
            .iter()
            .filter(|replica| !self.excused(replica, now))
            .count();
        let n = self.online.len().max(promotable);
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// How the last acknowledgement went.
    pub(crate) fn note(&mut self, acked: Acked) {
        if acked.is_short() {
            self.short = Some(acked);
            // Read again before the next grant: a replica may have left.
            self.mark_due();
        } else {
            self.short = None;
        }
    }
}

impl ReplicaList {
    /// What is known of the replicas, for `inspect`.
    pub(crate) fn status(&self) -> ReplicaStatus {
        let now = Instant::now();
        let span = self.validity.and_then(Validity::span);
        let cut_off = self
            .missing_since
            .iter()
            .map(|(address, since, _)| {
                let missing_for = now.saturating_duration_since(*since);
                CutOffReplica {
                    address: address.clone(),
                    missing_for,
                    promotable_for: match (self.validity, span) {
                        (Some(_), Some(span)) => Some(span.saturating_sub(missing_for)),
                        (Some(_), None) => None,
                        // The deployment says it could take over.
                        (None, _) => None,
                    },
                    waited_for: !self.excused(address, now),
                    validity_factor: self.validity.map(|v| v.factor),
                }
            })
            .collect();
        ReplicaStatus {
            online: self.online.clone(),
            promotable: self
                .promotable
                .iter()
                .filter(|replica| !self.excused(replica, now))
                .cloned()
                .collect(),
            last_shortfall: self.short.map(|a| (a.acked, a.asked)),
            cut_off,
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
        assert_eq!(list.asked(), 2);
        assert!(!list.is_due());
        assert_eq!(
            ReplicaList::parse("role:master\r\nconnected_slaves:0\r\n").asked(),
            0
        );
    }

    #[test]
    fn a_shortfall_reads_the_list_again_and_is_kept_until_an_ack() {
        let mut list = ReplicaList::parse("slave0:ip=a,port=1,state=online\r\n");
        list.note(Acked { asked: 1, acked: 0 });
        assert!(list.is_due());
        list.replace(ReplicaList::parse(""), None);
        assert_eq!(list.short, Some(Acked { asked: 1, acked: 0 }));
        list.note(Acked { asked: 0, acked: 0 });
        assert_eq!(list.short, None);
    }

    #[test]
    fn replicas_that_could_take_over_are_waited_for_even_when_cut_off() {
        let mut list = ReplicaList::parse("role:master\r\nconnected_slaves:0\r\n");
        assert_eq!(list.asked(), 0);
        list.set_promotable(vec!["10.0.0.6:6380".to_owned()]);
        assert_eq!(list.asked(), 1);
        // Another reading of the master alone keeps what the deployment said.
        list.replace(ReplicaList::parse(""), None);
        assert_eq!(list.asked(), 1);
        list.replace(ReplicaList::parse(""), Some((Vec::new(), None)));
        assert_eq!(list.asked(), 0);
    }

    #[test]
    fn how_long_a_cluster_replica_cut_off_may_still_be_promoted() {
        let validity = Validity::from_config(Some(500), Some(2), Some(1));
        assert_eq!(validity.span(), Some(Duration::from_millis(3_500)));
        assert_eq!(
            Validity::from_config(None, None, None).span(),
            Some(Duration::from_secs(15 * 11 + 10 + 1))
        );
        assert_eq!(Validity::from_config(Some(500), Some(0), None).span(), None);
    }

    #[test]
    fn a_cluster_replica_cut_off_too_long_to_be_promoted_is_excused() {
        let nodes = |validity| {
            Some((
                vec!["a:1".to_owned(), "b:2".to_owned()],
                Some(Validity::from_config(Some(500), Some(validity), Some(1))),
            ))
        };
        let start = Instant::now();
        let mut list = ReplicaList::default();
        list.replace(
            ReplicaList::parse("slave0:ip=a,port=1,state=online\r\n"),
            nodes(2),
        );
        assert_eq!(list.asked(), 2);
        let later = start + Duration::from_millis(3_600);
        assert!(!list.excused("a:1", later), "it is listed in sync");
        assert!(list.excused("b:2", later));
        assert!(!list.excused("b:2", start + Duration::from_millis(3_000)));
        // Another reading keeps since when it is missing.
        list.replace(
            ReplicaList::parse("slave0:ip=a,port=1,state=online\r\n"),
            nodes(2),
        );
        assert!(list.excused("b:2", later));
        // Back in sync, and cut off again: counted from then.
        list.replace(
            ReplicaList::parse(
                "slave0:ip=a,port=1,state=online\r\nslave1:ip=b,port=2,state=online\r\n",
            ),
            nodes(2),
        );
        list.replace(
            ReplicaList::parse("slave0:ip=a,port=1,state=online\r\n"),
            nodes(2),
        );
        assert!(!list.excused("b:2", Instant::now() + Duration::from_millis(3_000)));
        // A factor of 0: it could be promoted however long it is cut off.
        list.replace(
            ReplicaList::parse("slave0:ip=a,port=1,state=online\r\n"),
            nodes(0),
        );
        assert!(!list.excused("b:2", later + Duration::from_secs(3_600)));
        let status = list.status();
        assert_eq!(status.cut_off.len(), 1);
        assert!(status.cut_off[0].waited_for);
        assert_eq!(status.cut_off[0].promotable_for, None);
        assert_eq!(status.cut_off[0].validity_factor, Some(0));
    }

    #[test]
    fn a_cluster_replica_missing_at_readings_far_apart_is_counted_from_the_later() {
        let nodes = || {
            Some((
                vec!["a:1".to_owned(), "b:2".to_owned()],
                Some(Validity::from_config(Some(500), Some(2), Some(1))),
            ))
        };
        let only_a = || ReplicaList::parse("slave0:ip=a,port=1,state=online\r\n");
        let start = Instant::now();
        let mut list = ReplicaList::default();
        list.replace_at(only_a(), nodes(), start);
        // Unread for ten minutes: b may have come back in sync and been cut
        // off again meanwhile, its data fresh enough to be promoted.
        let later = start + Duration::from_secs(600);
        list.replace_at(only_a(), nodes(), later);
        assert!(!list.excused("b:2", later + Duration::from_millis(100)));
        // Seen missing at every reading since: its span counts from then.
        let mut at = later;
        for _ in 0..3 {
            at += Duration::from_millis(1_500);
            list.replace_at(only_a(), nodes(), at);
        }
        assert!(!list.excused("b:2", later + Duration::from_millis(3_000)));
        assert!(list.excused("b:2", at));
    }

    #[test]
    fn a_cluster_replica_missing_across_a_resync_is_counted_from_then() {
        let nodes = || {
            Some((
                vec!["a:1".to_owned(), "b:2".to_owned()],
                Some(Validity::from_config(Some(500), Some(2), Some(1))),
            ))
        };
        let read = |syncs: u64| {
            ReplicaList::parse("slave0:ip=a,port=1,state=online\r\n").with_syncs(Some(&format!(
                "# Stats\r\nsync_full:1\r\nsync_partial_ok:{syncs}\r\nsync_partial_err:0\r\n"
            )))
        };
        let start = Instant::now();
        let mut list = ReplicaList::default();
        list.replace_at(read(0), nodes(), start);
        let at = start + Duration::from_secs(4);
        list.replace_at(read(0), nodes(), at);
        assert!(list.excused("b:2", at));
        // A resync between two readings: b may have been back meanwhile.
        let later = at + Duration::from_secs(2);
        list.replace_at(read(1), nodes(), later);
        assert!(!list.excused("b:2", later + Duration::from_millis(100)));
        // A reading without the count changes nothing.
        list.replace_at(
            ReplicaList::parse("slave0:ip=a,port=1,state=online\r\n"),
            nodes(),
            later,
        );
        list.replace_at(read(1), nodes(), later + Duration::from_secs(4));
        assert!(list.excused("b:2", later + Duration::from_secs(4)));
    }

    #[test]
    fn a_cluster_master_s_replicas_are_those_not_failed() {
        let nodes = "\
            aaa 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n\
            bbb 10.0.0.2:7001@17001,host-b slave aaa 0 1 1 connected\n\
            ccc 10.0.0.3:7002@17002 slave,fail aaa 0 1 1 disconnected\n\
            ddd 10.0.0.4:7003@17003 slave,fail? aaa 0 1 1 connected\n\
            eee 10.0.0.5:7004@17004 slave fff 0 1 2 connected\n\
            fff 10.0.0.6:7005@17005 master - 0 1 2 connected 5461-10922\n";
        assert_eq!(
            ReplicaList::promotable_in_cluster(nodes),
            ["10.0.0.2:7001", "10.0.0.4:7003"]
        );
        assert!(ReplicaList::promotable_in_cluster("").is_empty());
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
