use std::fmt;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::StartError;
use crate::resp::Value;
use crate::server::{Mode, RedisServer};

/// The master name the sentinels monitor unless
/// [`SentinelsBuilder::master_name`] says otherwise.
pub const DEFAULT_MASTER_NAME: &str = "mymaster";

/// `down-after-milliseconds` unless [`SentinelsBuilder::down_after`] says
/// otherwise: how long the master may go unanswered before a sentinel
/// thinks it down. Shorter is faster to fail over a killed master, but a
/// loaded machine then fails over masters that are merely slow.
pub const DEFAULT_DOWN_AFTER: Duration = Duration::from_millis(2000);

/// `failover-timeout` unless [`SentinelsBuilder::failover_timeout`] says
/// otherwise. A sentinel that failed to fail over tries again after twice
/// this.
pub const DEFAULT_FAILOVER_TIMEOUT: Duration = Duration::from_millis(5000);

/// Longest wait for the group to settle after a start or a restart.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for the sentinels to agree on a new master: room for an
/// election that split its votes and the retry after twice the failover
/// timeout.
const SWITCH_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Lines of each server's log in a failure message.
const LOG_LINES: usize = 30;

/// Settings for [`Sentinels`]; made by [`Sentinels::builder`].
#[derive(Debug, Clone)]
pub struct SentinelsBuilder {
    replicas: usize,
    sentinels: usize,
    quorum: Option<usize>,
    master_name: String,
    down_after: Duration,
    failover_timeout: Duration,
    args: Vec<String>,
}

impl SentinelsBuilder {
    /// The name the sentinels monitor the master under
    /// ([`DEFAULT_MASTER_NAME`] unless set).
    pub fn master_name(mut self, name: &str) -> Self {
        name.clone_into(&mut self.master_name);
        self
    }

    /// How many sentinels must agree that the master is down before a
    /// failover: a majority of the sentinels unless set.
    pub fn quorum(mut self, quorum: usize) -> Self {
        self.quorum = Some(quorum);
        self
    }

    /// `down-after-milliseconds` ([`DEFAULT_DOWN_AFTER`] unless set).
    pub fn down_after(mut self, after: Duration) -> Self {
        self.down_after = after;
        self
    }

    /// `failover-timeout` ([`DEFAULT_FAILOVER_TIMEOUT`] unless set).
    pub fn failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// Extra `redis-server` arguments for the master and the replicas (not
    /// the sentinels), after the defaults (see
    /// [`RedisServer::start_with_args`]).
    pub fn args(mut self, extra: &[&str]) -> Self {
        self.args.extend(extra.iter().map(|s| (*s).to_owned()));
        self
    }

    /// Starts the group and waits until it is ready (see
    /// [`Sentinels::start`]). Panics with every server's log if it cannot.
    pub fn start(self) -> Sentinels {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start`](Self::start), but returns the failure instead of
    /// panicking.
    ///
    /// # Errors
    ///
    /// No sentinel was asked for, the quorum is not between 1 and the
    /// number of sentinels, a server cannot be started, or the group does
    /// not settle within 30 s; the message includes the servers' logs.
    pub fn try_start(self) -> Result<Sentinels, StartError> {
        let quorum = self.quorum.unwrap_or(self.sentinels / 2 + 1);
        if self.sentinels == 0 || quorum == 0 || quorum > self.sentinels {
            return Err(StartError::other(format!(
                "a quorum of {quorum} out of {} sentinels cannot be: give at least one \
                 sentinel and a quorum between 1 and their number",
                self.sentinels
            )));
        }
        if self.master_name.is_empty() || self.master_name.contains(char::is_whitespace) {
            return Err(StartError::other(format!(
                "master name {:?} must be one word",
                self.master_name
            )));
        }
        // A replica's first sync starts at once, not after 5 s.
        let mut args = vec!["--repl-diskless-sync-delay", "0"];
        args.extend(self.args.iter().map(String::as_str));
        // The replicas' roles live in their config files, which the
        // sentinels rewrite when they reconfigure them, so a restart keeps
        // the role it had.
        let master = RedisServer::launch(Mode::Standalone, Some(""), &args, false)?;
        let follow = format!("replicaof 127.0.0.1 {}\n", master.port());
        let mut servers = vec![master];
        for _ in 0..self.replicas {
            servers.push(RedisServer::launch(
                Mode::Standalone,
                Some(&follow),
                &args,
                false,
            )?);
        }
        let mut group = Sentinels {
            name: self.master_name,
            quorum,
            master: 0,
            servers,
            sentinels: Vec::new(),
        };
        // The sentinels find the replicas in the master's INFO: start them
        // once the replicas are there.
        group.wait_for("the replicas to sync", SETTLE_TIMEOUT, |g| {
            g.replication_ok(0)
        })?;
        let conf = format!(
            "sentinel monitor {name} 127.0.0.1 {port} {quorum}\n\
             sentinel down-after-milliseconds {name} {down_after}\n\
             sentinel failover-timeout {name} {failover_timeout}\n",
            name = group.name,
            port = group.servers[0].port(),
            down_after = self.down_after.as_millis().max(1),
            failover_timeout = self.failover_timeout.as_millis().max(1),
        );
        for _ in 0..self.sentinels {
            let sentinel = RedisServer::launch(Mode::Sentinel, Some(&conf), &[], false)?;
            group.sentinels.push(sentinel);
        }
        group.settle(SETTLE_TIMEOUT)?;
        Ok(group)
    }
}

/// A master, its replicas and the sentinels that watch them, all real
/// `redis-server` processes on loopback (sentinels run with `--sentinel`
/// and a config file of their own, which they rewrite).
///
/// Server 0 starts out as the master and servers `1..=R` as its replicas;
/// failovers change which server is master. The sentinels watch the master
/// under [`master_name`](Self::master_name) with a short
/// `down-after-milliseconds` ([`DEFAULT_DOWN_AFTER`]) and
/// `failover-timeout` ([`DEFAULT_FAILOVER_TIMEOUT`]). Every wait is
/// bounded; a group that does not settle panics with each server's role
/// and the end of its log. Dropping it kills every process.
///
/// ```no_run
/// use leasehold_testkit::Sentinels;
///
/// let mut group = Sentinels::start(2, 3); // 2 replicas, 3 sentinels
/// let url = group.url(); // redis+sentinel://127.0.0.1:…,…/mymaster
/// # let _ = url;
/// assert_eq!(group.master_addr(), group.master().addr());
/// group.failover(); // SENTINEL FAILOVER: a replica becomes master
/// let killed = group.kill_master(); // SIGKILL; the sentinels promote a replica
/// group.restart(killed); // it comes back as a replica
/// let stopped = group.stop_replica(0);
/// group.restart(stopped);
/// ```
pub struct Sentinels {
    name: String,
    quorum: usize,
    /// Index in `servers` of the master, as last seen.
    master: usize,
    servers: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

impl fmt::Debug for Sentinels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ports = |servers: &[RedisServer]| -> Vec<u16> {
            servers.iter().map(RedisServer::port).collect()
        };
        f.debug_struct("Sentinels")
            .field("master_name", &self.name)
            .field("quorum", &self.quorum)
            .field("master", &self.master)
            .field("server_ports", &ports(&self.servers))
            .field("sentinel_ports", &ports(&self.sentinels))
            .finish()
    }
}

impl Sentinels {
    /// Starts a master with `replicas` replicas and `sentinels` sentinels
    /// (quorum: a majority of them), and waits until the replicas are in
    /// sync and every sentinel reports the master, knows every replica and
    /// every other sentinel.
    ///
    /// Panics with every server's log if it cannot; see
    /// [`builder`](Self::builder) for settings.
    pub fn start(replicas: usize, sentinels: usize) -> Sentinels {
        Self::builder(replicas, sentinels).start()
    }

    /// Settings for a master with `replicas` replicas and `sentinels`
    /// sentinels.
    pub fn builder(replicas: usize, sentinels: usize) -> SentinelsBuilder {
        SentinelsBuilder {
            replicas,
            sentinels,
            quorum: None,
            master_name: DEFAULT_MASTER_NAME.to_owned(),
            down_after: DEFAULT_DOWN_AFTER,
            failover_timeout: DEFAULT_FAILOVER_TIMEOUT,
            args: Vec::new(),
        }
    }

    /// The name the sentinels monitor the master under.
    pub fn master_name(&self) -> &str {
        &self.name
    }

    /// How many sentinels must agree that the master is down.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// `redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,…/NAME`: every
    /// sentinel, and the master name.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        format!("redis+sentinel://{}/{}", hosts.join(","), self.name)
    }

    /// Each sentinel's `redis://127.0.0.1:PORT`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// Each sentinel's address.
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(RedisServer::addr).collect()
    }

    /// The sentinel processes.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The master's address as the sentinels report it now
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`, from the first that answers).
    ///
    /// Panics if no sentinel answers with an address.
    pub fn master_addr(&self) -> SocketAddr {
        self.sentinels
            .iter()
            .find_map(|s| self.reported_master(s).ok())
            .unwrap_or_else(|| {
                panic!(
                    "{}",
                    self.failure("no sentinel reports the master's address")
                )
            })
    }

    /// The master, as of the last start, failover, kill or restart.
    pub fn master(&self) -> &RedisServer {
        &self.servers[self.master]
    }

    /// The master's index in [`servers`](Self::servers).
    pub fn master_index(&self) -> usize {
        self.master
    }

    /// The servers other than the master (running or not), in server
    /// order.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        self.replica_indices()
            .into_iter()
            .map(|i| &self.servers[i])
            .collect()
    }

    /// The master and its replicas, in server order (server 0 was the
    /// first master).
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    fn replica_indices(&self) -> Vec<usize> {
        (0..self.servers.len())
            .filter(|&i| i != self.master)
            .collect()
    }

    /// `SENTINEL FAILOVER`: the sentinels promote a replica although the
    /// master is fine. Waits until every sentinel reports the new master,
    /// it answers `ROLE` as master and the other replicas follow it. The
    /// old master is then made a replica of the new one right away (the
    /// sentinels would do so themselves only some ten seconds later) and
    /// the group is waited for until it settles. Returns the new master's
    /// index in [`servers`](Self::servers).
    ///
    /// Panics if there is no running replica or the failover does not
    /// happen within 30 s.
    pub fn failover(&mut self) -> usize {
        let old = self.master;
        self.running_replica();
        self.ask_failover();
        let new = self.wait_switch(old);
        let port = self.servers[new].port().to_string();
        let old_server = &self.servers[old];
        if old_server.pid().is_some() {
            let demoted = old_server
                .pipeline(&[&["REPLICAOF", "127.0.0.1", &port], &["CONFIG", "REWRITE"]])
                .map(|replies| replies.iter().map(Value::render).collect::<Vec<_>>());
            match demoted {
                Ok(replies) if replies.iter().all(|r| r == "OK") => {}
                Ok(replies) => panic!(
                    "{}",
                    self.failure(&format!(
                        "the old master refused to follow the new one: {replies:?}"
                    ))
                ),
                Err(e) => panic!("{}", self.failure(&e.to_string())),
            }
        }
        if let Err(e) = self.settle(SETTLE_TIMEOUT) {
            panic!("{e}");
        }
        self.master
    }

    /// `SENTINEL FAILOVER`, as the sentinels do it alone: waits until every
    /// sentinel reports the new master, it answers `ROLE` as master and the
    /// other replicas but the old master follow it, and returns the new
    /// master's index. The old master is left as it is: it goes on taking
    /// writes, which the new master never sees, until the sentinels make it
    /// a replica some ten seconds later (a client that keeps talking to it
    /// meanwhile writes into the void). [`wait_settled`](Self::wait_settled)
    /// waits for that.
    ///
    /// Panics like [`failover`](Self::failover).
    pub fn failover_unaided(&mut self) -> usize {
        let old = self.master;
        self.running_replica();
        self.ask_failover();
        self.wait_switch(old)
    }

    /// Waits until the group settles: every sentinel reports the same
    /// master, every other running server follows it in sync, and no
    /// failover is under way (after [`failover_unaided`](Self::failover_unaided),
    /// until the sentinels have made the old master a replica).
    ///
    /// Panics if it does not settle within 30 s.
    pub fn wait_settled(&mut self) {
        if let Err(e) = self.settle(SETTLE_TIMEOUT) {
            panic!("{e}");
        }
    }

    /// Kills the master with SIGKILL and waits until every sentinel reports
    /// a new master, it answers `ROLE` as master and the other running
    /// replicas follow it. Returns the killed server's index:
    /// [`restart`](Self::restart) brings it back as a replica.
    ///
    /// Panics if there is no running replica or no replica takes over
    /// within 30 s.
    pub fn kill_master(&mut self) -> usize {
        self.running_replica();
        let old = self.master;
        self.servers[old].stop();
        self.wait_switch(old);
        if let Err(e) = self.settle(SETTLE_TIMEOUT) {
            panic!("{e}");
        }
        old
    }

    /// Stops (SIGKILL) the `i`-th of the current [`replicas`](Self::replicas)
    /// and returns its index in [`servers`](Self::servers), for
    /// [`restart`](Self::restart). Panics if there is no such replica.
    pub fn stop_replica(&mut self, i: usize) -> usize {
        let replicas = self.replica_indices();
        let Some(&server) = replicas.get(i) else {
            panic!("replica {i} out of range: there are {}", replicas.len());
        };
        self.servers[server].stop();
        server
    }

    /// Restarts server `i` (killing it first if it runs) and waits until
    /// the group settles with it. A server other than the master comes
    /// back as a replica of the current master: its config file is pointed
    /// there first, as an operator would before bringing back a failed-over
    /// master.
    ///
    /// Panics if `i` is out of range or the group does not settle within
    /// 30 s.
    pub fn restart(&mut self, i: usize) {
        let len = self.servers.len();
        assert!(i < len, "server {i} out of range: there are {len}");
        if i != self.master {
            self.servers[i].stop();
            let port = self.servers[self.master].port();
            if let Err(e) = self.point_to(i, port) {
                panic!("{e}");
            }
        }
        self.servers[i].restart();
        if let Err(e) = self.settle(SETTLE_TIMEOUT) {
            panic!("{e}");
        }
    }

    /// Rewrites server `i`'s config file to follow `127.0.0.1:port`.
    fn point_to(&self, i: usize, port: u16) -> Result<(), StartError> {
        let Some(path) = self.servers[i].config_file() else {
            return Err(StartError::other(format!("server {i} has no config file")));
        };
        let text = fs::read_to_string(path)
            .map_err(|e| StartError::io(format!("cannot read {}", path.display()), e))?;
        let mut lines: Vec<&str> = text
            .lines()
            .filter(|line| {
                let directive = line.trim_start().to_ascii_lowercase();
                !directive.starts_with("replicaof") && !directive.starts_with("slaveof")
            })
            .collect();
        let follow = format!("replicaof 127.0.0.1 {port}");
        lines.push(&follow);
        fs::write(path, lines.join("\n") + "\n")
            .map_err(|e| StartError::io(format!("cannot write {}", path.display()), e))
    }

    /// Asks a sentinel for `SENTINEL FAILOVER` until it starts one.
    fn ask_failover(&self) {
        let result = self.wait_for("a sentinel to start a failover", SWITCH_TIMEOUT, |g| {
            let reply = g.sentinels[0]
                .command(&["SENTINEL", "FAILOVER", &g.name])
                .map_err(|e| e.to_string())?;
            match reply.as_str() {
                "OK" => Ok(()),
                // In progress, or no replica good enough yet: ask again.
                _ if reply.starts_with("(error) INPROG")
                    || reply.starts_with("(error) NOGOODSLAVE") =>
                {
                    Err(reply)
                }
                _ => panic!(
                    "{}",
                    g.failure(&format!("SENTINEL FAILOVER answered {reply}"))
                ),
            }
        });
        if let Err(e) = result {
            panic!("{e}");
        }
    }

    fn running_replica(&self) -> usize {
        self.replica_indices()
            .into_iter()
            .find(|&i| self.servers[i].pid().is_some())
            .unwrap_or_else(|| panic!("there is no running replica to take over"))
    }

    /// Polls `check` until it returns `Ok`, or fails after `timeout` with
    /// the last reason it gave and every server's state.
    fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&Self) -> Result<T, String>,
    ) -> Result<T, StartError> {
        let deadline = Instant::now() + timeout;
        loop {
            let reason = match check(self) {
                Ok(value) => return Ok(value),
                Err(reason) => reason,
            };
            if Instant::now() >= deadline {
                return Err(self.failure(&format!(
                    "waited {} s for {what}; last: {reason}",
                    timeout.as_secs()
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Waits until every sentinel reports a master other than server `old`,
    /// the same one, which answers `ROLE` as master and which every other
    /// running server but `old` follows. Notes and returns it.
    fn wait_switch(&mut self, old: usize) -> usize {
        let result = self.wait_for("the sentinels to switch masters", SWITCH_TIMEOUT, |g| {
            let new = g.agreed_master()?;
            if new == old {
                return Err(format!("the sentinels still report server {old}"));
            }
            g.followers_ok(new, &[old])?;
            Ok(new)
        });
        match result {
            Ok(new) => {
                self.master = new;
                new
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// Waits until every sentinel reports the same master, its replicas
    /// are in sync, and every sentinel knows all its running replicas and
    /// every other sentinel, with no failover under way. Notes the master:
    /// the sentinels may have failed over once more meanwhile (a loaded
    /// machine can leave a fresh master's ping unanswered for long enough).
    fn settle(&mut self, timeout: Duration) -> Result<(), StartError> {
        self.master = self.wait_for("the sentinels to settle", timeout, |g| {
            let master = g.agreed_master()?;
            g.replication_ok(master)?;
            g.sentinels_ok(master)?;
            Ok(master)
        })?;
        Ok(())
    }

    /// The running server every sentinel reports as the master.
    fn agreed_master(&self) -> Result<usize, String> {
        let mut reported = None;
        for sentinel in &self.sentinels {
            let addr = self.reported_master(sentinel)?;
            match reported {
                Some(seen) if seen != addr => {
                    return Err(format!("the sentinels report {seen} and {addr}"))
                }
                _ => reported = Some(addr),
            }
        }
        let port = reported.map_or(0, |addr| addr.port());
        self.servers
            .iter()
            .position(|s| s.port() == port && s.pid().is_some())
            .ok_or_else(|| format!("the sentinels report a master on port {port}, not running"))
    }

    /// Ok once server `master` answers `ROLE` as master and every other
    /// running server follows it, connected.
    fn replication_ok(&self, master: usize) -> Result<(), String> {
        self.followers_ok(master, &[])
    }

    /// Like [`replication_ok`](Self::replication_ok), leaving out the
    /// servers in `except`.
    fn followers_ok(&self, master: usize, except: &[usize]) -> Result<(), String> {
        let role = self.role(master)?;
        if role.first().map(String::as_str) != Some("master") {
            return Err(format!("server {master} answers ROLE {role:?}, not master"));
        }
        let port = self.servers[master].port().to_string();
        for (i, server) in self.servers.iter().enumerate() {
            if i == master || except.contains(&i) || server.pid().is_none() {
                continue;
            }
            let role = self.role(i)?;
            let follows = matches!(
                role.as_slice(),
                [kind, _, master_port, state, ..]
                    if kind == "slave" && *master_port == port && state == "connected"
            );
            if !follows {
                return Err(format!(
                    "server {i} answers ROLE {role:?}, not a replica of port {port} in sync"
                ));
            }
        }
        Ok(())
    }

    /// Ok once every sentinel reports server `master`, not down nor being
    /// failed over, knows every other sentinel, and lists every running
    /// server but the master as a working replica of it.
    fn sentinels_ok(&self, master: usize) -> Result<(), String> {
        let master_port = self.servers[master].port();
        let others = (self.sentinels.len() - 1).to_string();
        for (k, sentinel) in self.sentinels.iter().enumerate() {
            let addr = self.reported_master(sentinel)?;
            if addr.port() != master_port {
                return Err(format!("sentinel {k} reports master {addr}"));
            }
            let replies = sentinel
                .pipeline(&[
                    &["SENTINEL", "MASTER", &self.name],
                    &["SENTINEL", "REPLICAS", &self.name],
                ])
                .map_err(|e| e.to_string())?;
            let [state, replicas] = replies.as_slice() else {
                return Err(format!("sentinel {k} sent too few replies"));
            };
            let flags = state.field("flags").unwrap_or("");
            if flags != "master" {
                return Err(format!("sentinel {k} flags the master {flags}"));
            }
            let known = state.field("num-other-sentinels").unwrap_or("");
            if known != others {
                return Err(format!(
                    "sentinel {k} knows {known} other sentinels, not {others}"
                ));
            }
            for (i, server) in self.servers.iter().enumerate() {
                if i == master || server.pid().is_none() {
                    continue;
                }
                let port = server.port().to_string();
                let entry = replicas
                    .items()
                    .iter()
                    .find(|r| r.field("port") == Some(port.as_str()));
                let Some(entry) = entry else {
                    return Err(format!(
                        "sentinel {k} does not list server {i} as a replica"
                    ));
                };
                let flags = entry.field("flags").unwrap_or("");
                if flags != "slave" {
                    return Err(format!("sentinel {k} flags replica server {i} {flags}"));
                }
            }
        }
        Ok(())
    }

    /// What `sentinel` answers to `SENTINEL GET-MASTER-ADDR-BY-NAME`.
    fn reported_master(&self, sentinel: &RedisServer) -> Result<SocketAddr, String> {
        let reply = sentinel
            .value(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.name])
            .map_err(|e| e.to_string())?;
        match reply.items() {
            [ip, port] => {
                let ip: Ipv4Addr = ip
                    .text()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| format!("a sentinel reports the master at {reply:?}"))?;
                let port: u16 = port
                    .text()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| format!("a sentinel reports the master at {reply:?}"))?;
                Ok(SocketAddr::from((ip, port)))
            }
            _ => Err(format!(
                "a sentinel answers GET-MASTER-ADDR-BY-NAME with {}",
                reply.render()
            )),
        }
    }

    /// Server `i`'s `ROLE` reply, flattened to its top-level words.
    fn role(&self, i: usize) -> Result<Vec<String>, String> {
        let reply = self.servers[i]
            .value(&["ROLE"])
            .map_err(|e| e.to_string())?;
        Ok(reply
            .items()
            .iter()
            .map(|item| item.text().unwrap_or("…").to_owned())
            .collect())
    }

    /// An error about the group, with every server's role, every
    /// sentinel's view of the master, and each one's log tail.
    fn failure(&self, what: &str) -> StartError {
        let mut message = format!("redis sentinel group {:?}: {what}", self.name);
        let master_query = ["SENTINEL", "MASTER", self.name.as_str()];
        let servers = self
            .servers
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("server {i}"), s, &["ROLE"][..]));
        let sentinels = self
            .sentinels
            .iter()
            .enumerate()
            .map(|(k, s)| (format!("sentinel {k}"), s, &master_query[..]));
        for (label, server, query) in servers.chain(sentinels) {
            let state = match server.pid() {
                Some(pid) => format!("pid {pid}"),
                None => "stopped".to_owned(),
            };
            message.push_str(&format!(
                "\n=== {label} 127.0.0.1:{} {state}, dir {} ===",
                server.port(),
                server.dir().display()
            ));
            if server.pid().is_some() {
                match server.command(query) {
                    Ok(reply) => message.push_str(&format!(
                        "\n--- {} ---\n{}",
                        query.join(" "),
                        reply.replace('\n', " ")
                    )),
                    Err(e) => message.push_str(&format!("\n({e})")),
                }
            }
            message.push_str(&format!("\n--- last {LOG_LINES} log lines ---\n"));
            message.push_str(&server.log_tail(LOG_LINES));
        }
        StartError::other(message)
    }
}

#[cfg(test)]
mod tests;
