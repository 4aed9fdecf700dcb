use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::error::StartError;
use crate::port::{bind_reserved, release_port};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest a thread blocked on a socket goes without checking whether its
/// connection was reset, frozen or the proxy dropped.
const IO_POLL: Duration = Duration::from_millis(20);
const CHUNK_SIZE: usize = 16 * 1024;

/// A TCP proxy on a free loopback port that forwards every connection to a
/// target (typically [`RedisServer::addr`](crate::RedisServer::addr)) and
/// injects network faults on demand: latency, a partition that heals
/// ([`blackhole`](Self::blackhole)), one that holds only the connections
/// open now ([`hold_existing`](Self::hold_existing)), connection resets,
/// and half-open connections ([`freeze_existing`](Self::freeze_existing)).
///
/// Hand [`url`](Self::url) to the client under test instead of the server's.
/// Each accepted connection gets its own connection to the target; a
/// connection whose target refuses it is closed at once.
///
/// Dropping the proxy closes its listener and every connection (the client
/// sees the connection closed) and joins all its threads.
///
/// ```
/// use std::time::Duration;
/// use leasehold_testkit::{FaultProxy, RedisServer};
///
/// let server = RedisServer::start();
/// let proxy = FaultProxy::start(server.addr());
/// let url = proxy.url(); // hand this to the client under test
/// # let _ = url;
/// proxy.set_reply_latency(Duration::from_millis(50)); // slow replies
/// proxy.blackhole(true); // a partition: bytes are held...
/// proxy.heal(); // ...and delivered once it heals
/// proxy.hold_existing(); // today's connections are held, new ones work
/// proxy.heal(); // ...and the held bytes delivered
/// proxy.freeze_existing(); // today's connections go silent, new ones work
/// proxy.reset(); // every connection is aborted with a TCP RST
/// ```
pub struct FaultProxy {
    addr: SocketAddr,
    target: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("target", &self.target)
            .field("latency", &state.latency)
            .field("reply_latency", &state.reply_latency)
            .field("blackhole", &state.blackhole)
            .field("connections", &state.accepted)
            .field("open_connections", &state.open())
            .finish()
    }
}

impl FaultProxy {
    /// Starts a proxy to `target` on a free `127.0.0.1` port (never 6379).
    ///
    /// The target is not contacted until a client connects.
    ///
    /// Panics if the proxy cannot be started.
    pub fn start(target: SocketAddr) -> FaultProxy {
        Self::try_start(target).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start`](Self::start), but returns the failure instead of
    /// panicking.
    ///
    /// # Errors
    ///
    /// No loopback port could be bound, or the accepting thread could not be
    /// spawned.
    pub fn try_start(target: SocketAddr) -> Result<FaultProxy, StartError> {
        let listener = bind_reserved()
            .map_err(|e| StartError::io("cannot bind a loopback port for a fault proxy", e))?;
        let addr = match listener.local_addr() {
            Ok(addr) => addr,
            Err(e) => return Err(StartError::io("cannot read the fault proxy's address", e)),
        };
        let shared = Arc::new(Shared::default());
        let acceptor = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name(thread_name(addr.port(), "accept"))
                .spawn(move || accept_loop(&listener, target, &shared))
        };
        match acceptor {
            Ok(acceptor) => Ok(FaultProxy {
                addr,
                target,
                shared,
                acceptor: Some(acceptor),
            }),
            Err(e) => {
                release_port(addr.port());
                Err(StartError::io("cannot spawn the fault proxy's thread", e))
            }
        }
    }

    /// The port the proxy listens on (on `127.0.0.1`).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    /// Delays every chunk of bytes, in both directions, by `latency` after
    /// the proxy received it; order is kept and later bytes are still read
    /// meanwhile. Bytes already queued are released at their receive time
    /// plus the new latency. `Duration::ZERO` turns it off.
    pub fn set_latency(&self, latency: Duration) {
        self.shared.update(|state| state.latency = latency);
    }

    /// Delays server-to-client bytes by `latency`, on top of
    /// [`set_latency`](Self::set_latency); client-to-server bytes are not
    /// affected. `Duration::ZERO` turns it off.
    pub fn set_reply_latency(&self, latency: Duration) {
        self.shared.update(|state| state.reply_latency = latency);
    }

    /// While `on`, bytes are read from both sides but held, as in a network
    /// partition; turning it off delivers them in order (the partition
    /// heals). New connections are still accepted meanwhile, and their bytes
    /// are held too.
    pub fn blackhole(&self, on: bool) {
        self.shared.update(|state| state.blackhole = on);
    }

    /// Aborts every current connection: the client gets a TCP RST (so its
    /// next read fails with `ConnectionReset`) and the connection to the
    /// target is closed. Bytes still held for them are dropped. Later
    /// connections work normally. Returns once the resets are sent.
    pub fn reset(&self) {
        let links = self.shared.take_links();
        for link in &links {
            abort_on_close(&link.sockets.client);
            let _ = link.sockets.server.shutdown(Shutdown::Both);
        }
        // Closing sends the RST, so every other handle must be gone first.
        join_links(links);
    }

    /// Turns every connection open now into a dead-but-open one, as when a
    /// peer vanished without closing: from now on nothing is forwarded in
    /// either direction and bytes already held are dropped, yet neither side
    /// sees a FIN or RST. Connections accepted afterwards work normally.
    ///
    /// Returns once no byte of those connections can be delivered any more.
    /// Frozen connections stay frozen (see [`heal`](Self::heal)) until
    /// [`reset`](Self::reset) or drop.
    pub fn freeze_existing(&self) {
        let mut state = self.shared.lock();
        for link in state.links.values_mut() {
            link.frozen = true;
            for flow in &mut link.flows {
                flow.queue.clear();
            }
        }
        self.shared.changed.notify_all();
        while state
            .links
            .values()
            .any(|link| link.frozen && link.flows.iter().any(|flow| flow.writing))
        {
            state = self.shared.wait(state, None);
        }
    }

    /// Holds the bytes of every connection open now, in both directions,
    /// as a partition would, while connections accepted afterwards work
    /// normally: a TCP flow stalled in retransmission while a new one gets
    /// through. [`heal`](Self::heal) delivers what was held, in order.
    pub fn hold_existing(&self) {
        self.shared.update(|state| {
            for link in state.links.values_mut() {
                link.held = true;
            }
        });
    }

    /// Ends latency, blackhole and held connections, delivering held bytes.
    /// Frozen connections stay frozen: they model sockets whose peer is gone.
    pub fn heal(&self) {
        self.shared.update(|state| {
            state.latency = Duration::ZERO;
            state.reply_latency = Duration::ZERO;
            state.blackhole = false;
            for link in state.links.values_mut() {
                link.held = false;
            }
        });
    }

    /// Connections accepted so far, in total (including closed ones).
    pub fn connections(&self) -> usize {
        self.shared.lock().accepted
    }

    /// Connections forwarding now: accepted, connected to the target, not
    /// frozen, not reset, and with neither direction closed yet.
    pub fn open_connections(&self) -> usize {
        self.shared.lock().open()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.update(|state| state.stopping = true);
        if let Some(acceptor) = self.acceptor.take() {
            // Wakes the blocked accept(); the acceptor then sees `stopping`.
            let _ = TcpStream::connect_timeout(&self.addr, CONNECT_TIMEOUT);
            let _ = acceptor.join();
        }
        join_links(self.shared.take_links());
        release_port(self.addr.port());
    }
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled on every change of `state`.
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update leaves the state consistent, and Drop must not panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(
        &self,
        state: MutexGuard<'a, State>,
        timeout: Option<Duration>,
    ) -> MutexGuard<'a, State> {
        match timeout {
            None => self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner),
            Some(timeout) => {
                self.changed
                    .wait_timeout(state, timeout)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
        }
    }

    fn update(&self, change: impl FnOnce(&mut State)) {
        change(&mut self.lock());
        self.changed.notify_all();
    }

    /// Removes every link; their threads exit on their own soon after.
    fn take_links(&self) -> Vec<Link> {
        let mut state = self.lock();
        let links = state.links.drain().map(|(_, link)| link).collect();
        self.changed.notify_all();
        links
    }
}

#[derive(Default)]
struct State {
    latency: Duration,
    reply_latency: Duration,
    blackhole: bool,
    stopping: bool,
    accepted: usize,
    links: HashMap<u64, Link>,
}

impl State {
    /// The link `id`, unless it was reset or the proxy is stopping: then its
    /// threads must exit.
    fn live(&mut self, id: u64) -> Option<&mut Link> {
        if self.stopping {
            return None;
        }
        self.links.get_mut(&id)
    }

    fn delay(&self, direction: Direction) -> Duration {
        match direction {
            Direction::ToServer => self.latency,
            Direction::ToClient => self.latency.saturating_add(self.reply_latency),
        }
    }

    fn open(&self) -> usize {
        self.links
            .values()
            .filter(|link| !link.frozen && link.flows.iter().all(|flow| !flow.ended))
            .count()
    }
}

/// One accepted connection and the proxy's connection to the target for it.
struct Link {
    sockets: Arc<Sockets>,
    frozen: bool,
    /// Its bytes are held until the proxy heals (see `hold_existing`).
    held: bool,
    /// Indexed by [`Direction`].
    flows: [Flow; 2],
    threads: Vec<JoinHandle<()>>,
}

/// Shared by a link's threads; the sockets close when the last one lets go.
struct Sockets {
    client: TcpStream,
    server: TcpStream,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToServer = 0,
    ToClient = 1,
}

impl Direction {
    fn source(self, sockets: &Sockets) -> &TcpStream {
        match self {
            Direction::ToServer => &sockets.client,
            Direction::ToClient => &sockets.server,
        }
    }

    fn sink(self, sockets: &Sockets) -> &TcpStream {
        match self {
            Direction::ToServer => &sockets.server,
            Direction::ToClient => &sockets.client,
        }
    }
}

/// Bytes on their way in one direction of a link.
#[derive(Default)]
struct Flow {
    queue: VecDeque<Chunk>,
    /// The writer holds a chunk it is writing out.
    writing: bool,
    /// The writer is done: end of stream passed on, or the sink failed.
    ended: bool,
}

struct Chunk {
    received: Instant,
    /// Empty for the end of the stream (a read never yields an empty chunk).
    bytes: Vec<u8>,
}

fn accept_loop(listener: &TcpListener, target: SocketAddr, shared: &Arc<Shared>) {
    let mut next_id = 0;
    for client in listener.incoming() {
        if shared.lock().stopping {
            return;
        }
        let Ok(client) = client else {
            // Such as too many open files: back off rather than spin.
            thread::sleep(IO_POLL);
            continue;
        };
        shared.update(|state| state.accepted += 1);
        // A target that refuses gets the client closed: it sees the same.
        let Ok(server) = TcpStream::connect_timeout(&target, CONNECT_TIMEOUT) else {
            continue;
        };
        if prepare(&client).and_then(|()| prepare(&server)).is_err() {
            continue;
        }
        add_link(shared, next_id, Sockets { client, server });
        next_id += 1;
    }
}

fn prepare(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(IO_POLL))?;
    stream.set_write_timeout(Some(IO_POLL))
}

fn add_link(shared: &Arc<Shared>, id: u64, sockets: Sockets) {
    let mut state = shared.lock();
    if state.stopping {
        return;
    }
    // Closed links go here rather than piling up until drop.
    let closed: Vec<u64> = state
        .links
        .iter()
        .filter(|(_, link)| link.threads.iter().all(JoinHandle::is_finished))
        .map(|(id, _)| *id)
        .collect();
    let closed: Vec<Link> = closed
        .iter()
        .filter_map(|id| state.links.remove(id))
        .collect();

    let sockets = Arc::new(sockets);
    let port = sockets.client.local_addr().map_or(0, |addr| addr.port());
    let pumps: [(Direction, &str, Pump); 4] = [
        (Direction::ToServer, "rs", read_loop),
        (Direction::ToServer, "ws", write_loop),
        (Direction::ToClient, "rc", read_loop),
        (Direction::ToClient, "wc", write_loop),
    ];
    let mut threads = Vec::with_capacity(pumps.len());
    let mut spawned = true;
    for (direction, role, pump) in pumps {
        let shared = Arc::clone(shared);
        let sockets = Arc::clone(&sockets);
        let spawn = thread::Builder::new()
            .name(thread_name(port, &format!("{id}{role}")))
            .spawn(move || pump(&shared, id, direction, &sockets));
        match spawn {
            Ok(thread) => threads.push(thread),
            Err(_) => spawned = false,
        }
    }
    if spawned {
        state.links.insert(
            id,
            Link {
                sockets,
                frozen: false,
                held: false,
                flows: Default::default(),
                threads,
            },
        );
        drop(state);
    } else {
        // Without a link to serve, the threads that did start exit at once.
        drop(state);
        for thread in threads {
            let _ = thread.join();
        }
    }
    join_links(closed);
}

/// `fp<proxy port>-<what>`: short, as Linux keeps only 15 bytes of a
/// thread's name.
fn thread_name(port: u16, what: &str) -> String {
    format!("fp{port}-{what}")
}

/// The body of one of a link's threads.
type Pump = fn(&Shared, u64, Direction, &Sockets);

fn join_links(links: Vec<Link>) {
    for link in links {
        for thread in link.threads {
            let _ = thread.join();
        }
    }
}

/// Reads `from` into the link's queue for `direction`, stamping each chunk
/// with the time it arrived.
fn read_loop(shared: &Shared, id: u64, direction: Direction, sockets: &Sockets) {
    let mut from = direction.source(sockets);
    let mut buf = vec![0; CHUNK_SIZE];
    loop {
        let bytes = match from.read(&mut buf) {
            Ok(n) => buf[..n].to_vec(),
            Err(e) if is_retry(&e) => {
                if shared.lock().live(id).is_none() {
                    return;
                }
                continue;
            }
            // A reset or broken connection ends the stream like a FIN.
            Err(_) => Vec::new(),
        };
        let end = bytes.is_empty();
        let chunk = Chunk {
            received: Instant::now(),
            bytes,
        };
        let mut state = shared.lock();
        let Some(link) = state.live(id) else {
            return;
        };
        // A frozen link swallows what it reads.
        if !link.frozen {
            link.flows[direction as usize].queue.push_back(chunk);
            shared.changed.notify_all();
        }
        if end {
            return;
        }
    }
}

/// Writes the queue for `direction` out to `to`, each chunk once it is due.
fn write_loop(shared: &Shared, id: u64, direction: Direction, sockets: &Sockets) {
    let to = direction.sink(sockets);
    while let Some(chunk) = next_due(shared, id, direction) {
        if chunk.bytes.is_empty() {
            let _ = to.shutdown(Shutdown::Write);
            break;
        }
        match write_chunk(shared, id, direction, to, &chunk.bytes) {
            Written::All | Written::Abandoned => {}
            Written::Failed => {
                // The other direction cannot be useful either: close both
                // sides so that both peers learn it.
                if let Some(link) = shared.lock().live(id) {
                    let _ = link.sockets.client.shutdown(Shutdown::Both);
                    let _ = link.sockets.server.shutdown(Shutdown::Both);
                }
                break;
            }
        }
    }
    let mut state = shared.lock();
    if let Some(link) = state.links.get_mut(&id) {
        link.flows[direction as usize].ended = true;
    }
    shared.changed.notify_all();
}

/// Waits until the first queued chunk may go out, and marks the flow as
/// writing it. `None` when the link is gone.
fn next_due(shared: &Shared, id: u64, direction: Direction) -> Option<Chunk> {
    let mut state = shared.lock();
    loop {
        let delay = state.delay(direction);
        let held = state.blackhole;
        let link = state.live(id)?;
        let flow = &mut link.flows[direction as usize];
        let timeout = match flow.queue.front() {
            Some(_) if link.frozen || link.held || held => None,
            None => None,
            Some(chunk) => {
                let now = Instant::now();
                match chunk.received.checked_add(delay) {
                    Some(due) if due <= now => {
                        flow.writing = true;
                        return flow.queue.pop_front();
                    }
                    Some(due) => Some(due - now),
                    None => None,
                }
            }
        };
        state = shared.wait(state, timeout);
    }
}

enum Written {
    All,
    /// The link was frozen, reset or dropped in the middle.
    Abandoned,
    Failed,
}

fn write_chunk(
    shared: &Shared,
    id: u64,
    direction: Direction,
    mut to: &TcpStream,
    mut bytes: &[u8],
) -> Written {
    let written = loop {
        match to.write(bytes) {
            Ok(0) => break Written::Failed,
            Ok(n) if n == bytes.len() => break Written::All,
            Ok(n) => bytes = &bytes[n..],
            Err(e) if is_retry(&e) => {}
            Err(_) => break Written::Failed,
        }
        if shared.lock().live(id).is_none_or(|link| link.frozen) {
            break Written::Abandoned;
        }
    };
    let mut state = shared.lock();
    if let Some(link) = state.links.get_mut(&id) {
        link.flows[direction as usize].writing = false;
    }
    shared.changed.notify_all();
    written
}

fn is_retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// Makes closing `stream` send a RST instead of a FIN (`SO_LINGER` 0).
fn abort_on_close(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the descriptor stays open while `stream` is borrowed, and the
    // option value points to a live `linger` of the size passed with it.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

#[cfg(test)]
mod tests;
