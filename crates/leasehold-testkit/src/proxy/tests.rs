#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;

use super::*;
use crate::{free_port, resp, RedisServer};

/// Long enough that a missing reply is not just a slow machine.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a test listens to make sure nothing arrives.
const SILENCE: Duration = Duration::from_millis(300);

/// A client connection speaking raw RESP.
struct Conn {
    reader: BufReader<TcpStream>,
}

impl Conn {
    fn new(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        Conn {
            reader: BufReader::new(stream),
        }
    }

    fn send(&self, args: &[&str]) {
        self.reader
            .get_ref()
            .write_all(&resp::encode(args))
            .unwrap();
    }

    fn reply(&mut self) -> String {
        resp::render(&mut self.reader).unwrap()
    }

    fn ping(&mut self) -> String {
        self.send(&["PING"]);
        self.reply()
    }

    /// What the next read from the socket gives.
    fn read(&mut self) -> io::Result<usize> {
        let mut buf = [0; 64];
        self.reader.read(&mut buf)
    }

    /// Nothing arrives for a while, and the connection is not closed either.
    fn assert_silent(&mut self) {
        assert!(
            self.reader.buffer().is_empty(),
            "{:?}",
            self.reader.buffer()
        );
        self.reader
            .get_ref()
            .set_read_timeout(Some(SILENCE))
            .unwrap();
        match self.reader.fill_buf() {
            Err(e) if is_retry(&e) => {}
            other => panic!("expected silence, got {other:?}"),
        }
        self.reader
            .get_ref()
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .unwrap();
    }
}

fn connect(proxy: &FaultProxy) -> Conn {
    Conn::new(proxy.addr())
}

fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + REPLY_TIMEOUT;
    while !condition() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn passes_traffic_through() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    assert_ne!(proxy.port(), 6379);
    assert_ne!(proxy.port(), server.port());
    assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}", proxy.port()));
    assert_eq!(proxy.addr().port(), proxy.port());

    let mut first = connect(&proxy);
    assert_eq!(first.ping(), "PONG");
    first.send(&["SET", "k", "v"]);
    assert_eq!(first.reply(), "OK");
    let mut second = connect(&proxy);
    second.send(&["GET", "k"]);
    assert_eq!(second.reply(), "v");
    assert_eq!(proxy.connections(), 2);
    assert_eq!(proxy.open_connections(), 2);

    drop(first);
    eventually("a closed connection stops counting as open", || {
        proxy.open_connections() == 1
    });
    assert_eq!(proxy.connections(), 2);
    assert!(format!("{proxy:?}").contains("FaultProxy"));
}

#[test]
fn latency_delays_both_directions_and_keeps_order() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut stream = connect(&proxy);
    let latency = Duration::from_millis(150);
    proxy.set_latency(latency);

    let started = Instant::now();
    assert_eq!(stream.ping(), "PONG");
    assert!(started.elapsed() >= 2 * latency, "{:?}", started.elapsed());

    // Separate writes, each its own chunk, all in flight at once.
    for i in 0..5 {
        stream.send(&["ECHO", &i.to_string()]);
    }
    for i in 0..5 {
        assert_eq!(stream.reply(), i.to_string());
    }

    proxy.heal();
    assert_eq!(stream.ping(), "PONG");
}

#[test]
fn reply_latency_delays_replies() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut stream = connect(&proxy);
    let latency = Duration::from_millis(200);
    proxy.set_reply_latency(latency);

    let started = Instant::now();
    assert_eq!(stream.ping(), "PONG");
    assert!(started.elapsed() >= latency, "{:?}", started.elapsed());

    // The command itself went through at once: the key is already set
    // while its reply is still held.
    proxy.set_reply_latency(Duration::from_secs(3600));
    stream.send(&["SET", "k", "v"]);
    eventually("the SET reaches the server", || {
        server.command(&["GET", "k"]).unwrap() == "v"
    });
    stream.assert_silent();
    proxy.heal();
    assert_eq!(stream.reply(), "OK");
}

#[test]
fn blackhole_holds_bytes_until_it_heals() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut old = connect(&proxy);
    assert_eq!(old.ping(), "PONG");

    proxy.blackhole(true);
    old.send(&["SET", "k", "v"]);
    old.send(&["PING"]);
    let mut new = connect(&proxy);
    new.send(&["PING"]);
    eventually("a connection is accepted while blackholed", || {
        proxy.connections() == 2
    });
    old.assert_silent();
    new.assert_silent();
    assert_eq!(server.command(&["GET", "k"]).unwrap(), "(nil)");

    proxy.blackhole(false);
    assert_eq!(old.reply(), "OK");
    assert_eq!(old.reply(), "PONG");
    assert_eq!(new.reply(), "PONG");
    assert_eq!(server.command(&["GET", "k"]).unwrap(), "v");
}

#[test]
fn hold_existing_holds_old_connections_while_new_ones_work() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut old = connect(&proxy);
    assert_eq!(old.ping(), "PONG");

    proxy.hold_existing();
    old.send(&["SET", "k", "v"]);
    let mut new = connect(&proxy);
    assert_eq!(new.ping(), "PONG");
    old.assert_silent();
    assert_eq!(server.command(&["GET", "k"]).unwrap(), "(nil)");

    proxy.heal();
    assert_eq!(old.reply(), "OK");
    assert_eq!(server.command(&["GET", "k"]).unwrap(), "v");
    assert_eq!(new.ping(), "PONG");
}

#[test]
fn reset_sends_rst_and_later_connections_work() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut old = connect(&proxy);
    assert_eq!(old.ping(), "PONG");

    proxy.reset();
    assert_eq!(proxy.open_connections(), 0);
    match old.read() {
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("expected a connection reset, got {other:?}"),
    }

    let mut new = connect(&proxy);
    assert_eq!(new.ping(), "PONG");
    assert_eq!(proxy.connections(), 2);
    assert_eq!(proxy.open_connections(), 1);
}

#[test]
fn frozen_connections_stay_silent_while_new_ones_work() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut old = connect(&proxy);
    assert_eq!(old.ping(), "PONG");

    // Bytes queued before the freeze are dropped too.
    proxy.set_reply_latency(Duration::from_secs(3600));
    old.send(&["SET", "k", "v"]);
    eventually("the SET reaches the server", || {
        server.command(&["GET", "k"]).unwrap() == "v"
    });
    proxy.freeze_existing();
    proxy.heal();
    old.assert_silent();

    old.send(&["SET", "k", "w"]);
    old.assert_silent();
    assert_eq!(server.command(&["GET", "k"]).unwrap(), "v");

    let mut new = connect(&proxy);
    assert_eq!(new.ping(), "PONG");
    assert_eq!(proxy.open_connections(), 1);
    assert_eq!(proxy.connections(), 2);
    old.assert_silent();
}

#[test]
fn a_refusing_target_closes_the_client() {
    // Reserved for good: nothing will listen there.
    let proxy = FaultProxy::start(SocketAddr::from((Ipv4Addr::LOCALHOST, free_port())));
    let mut stream = connect(&proxy);
    match stream.read() {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("expected the connection closed, got {other:?}"),
    }
    assert_eq!(proxy.connections(), 1);
    assert_eq!(proxy.open_connections(), 0);
}

#[test]
fn drop_closes_connections_and_the_port() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut live = connect(&proxy);
    assert_eq!(live.ping(), "PONG");
    let mut frozen = connect(&proxy);
    assert_eq!(frozen.ping(), "PONG");
    proxy.freeze_existing();
    proxy.blackhole(true);
    let addr = proxy.addr();

    drop(proxy);
    for stream in [&mut live, &mut frozen] {
        assert_eq!(stream.read().unwrap(), 0);
    }
    match TcpStream::connect(addr) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionRefused),
        Ok(_) => panic!("{addr} still accepts after drop"),
    }
    // The server is untouched.
    assert_eq!(server.command(&["PING"]).unwrap(), "PONG");
}

/// Names of this process's threads that belong to the proxy on `port`.
fn threads_of(port: u16) -> Vec<String> {
    let prefix = thread_name(port, "");
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .filter(|name| name.starts_with(&prefix))
        .collect()
}

#[test]
fn drop_joins_every_thread() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let port = proxy.port();
    let mut frozen = connect(&proxy);
    assert_eq!(frozen.ping(), "PONG");
    proxy.freeze_existing();
    let mut held = connect(&proxy);
    proxy.blackhole(true);
    held.send(&["PING"]);
    let mut closed = connect(&proxy);
    proxy.blackhole(false);
    assert_eq!(closed.ping(), "PONG");
    assert_eq!(held.reply(), "PONG");
    drop(closed);
    // An acceptor, and four threads for each connection.
    assert!(threads_of(port).len() >= 9, "{:?}", threads_of(port));

    drop(proxy);
    assert_eq!(threads_of(port), Vec::<String>::new());
}
