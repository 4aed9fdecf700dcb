use std::collections::HashSet;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::error::StartError;

/// The user's own Redis lives here; never hand it out.
const FORBIDDEN_PORT: u16 = 6379;

/// Ports handed to live servers (and, for good, by `free_port` and
/// `unreachable_url`) in this process.
///
/// A port is only free between `bind(0)` and the server binding it, and it is
/// free again while a stopped server waits to be restarted; without this set
/// another test thread could grab it in either window.
fn reserved() -> MutexGuard<'static, HashSet<u16>> {
    static RESERVED: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    RESERVED
        .get_or_init(|| Mutex::new(HashSet::new()))
        .lock()
        // The set stays consistent even if a holder panicked; and Drop must not panic.
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn os_free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:0 to find a free port: {e}"));
    match listener.local_addr() {
        Ok(addr) => addr.port(),
        Err(e) => panic!("cannot read the local address of a 127.0.0.1:0 listener: {e}"),
    }
}

fn pick(reserved: &HashSet<u16>) -> u16 {
    loop {
        let port = os_free_port();
        if port != FORBIDDEN_PORT && !reserved.contains(&port) {
            return port;
        }
    }
}

/// Returns a loopback port that nothing listens on right now (found by
/// binding `127.0.0.1:0`). Never 6379, and never a port this crate has handed
/// to a live [`RedisServer`](crate::RedisServer).
///
/// The port stays reserved for the life of the process, so servers started by
/// this crate will never take it (other programs still can).
///
/// Panics if the loopback interface cannot be bound.
pub fn free_port() -> u16 {
    let mut reserved = reserved();
    let port = pick(&reserved);
    reserved.insert(port);
    port
}

/// Returns `redis://127.0.0.1:PORT` for a free port where nothing listens,
/// for "Redis is down" tests.
///
/// The port stays reserved for the life of the process, so servers started by
/// this crate will never take it.
pub fn unreachable_url() -> String {
    format!("redis://127.0.0.1:{}", free_port())
}

/// Picks a free port and reserves it until [`release_port`].
pub(crate) fn reserve_port() -> u16 {
    let mut reserved = reserved();
    let port = pick(&reserved);
    reserved.insert(port);
    port
}

/// Tries for [`reserve_port_pair`] before giving up.
const PAIR_ATTEMPTS: usize = 200;

/// Picks a free port `p` such that `p + offset` is free too (a cluster node
/// binds its bus there), and reserves both until [`release_port`].
pub(crate) fn reserve_port_pair(offset: u16) -> Result<(u16, u16), StartError> {
    let mut reserved = reserved();
    for _ in 0..PAIR_ATTEMPTS {
        let port = pick(&reserved);
        let Some(companion) = port.checked_add(offset) else {
            continue;
        };
        if companion == FORBIDDEN_PORT
            || reserved.contains(&companion)
            || TcpListener::bind((Ipv4Addr::LOCALHOST, companion)).is_err()
        {
            continue;
        }
        reserved.insert(port);
        reserved.insert(companion);
        return Ok((port, companion));
    }
    Err(StartError::other(format!(
        "found no free loopback port p with p+{offset} free as well after {PAIR_ATTEMPTS} \
         tries: widen net.ipv4.ip_local_port_range below {}",
        u16::MAX - offset
    )))
}

/// Binds a listener on `127.0.0.1` on a port that is neither 6379 nor
/// reserved, and reserves it until [`release_port`].
pub(crate) fn bind_reserved() -> io::Result<TcpListener> {
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        let mut reserved = reserved();
        // A reserved port may be one a stopped server waits to get back.
        if port != FORBIDDEN_PORT && reserved.insert(port) {
            return Ok(listener);
        }
    }
}

pub(crate) fn release_port(port: u16) {
    reserved().remove(&port);
}
