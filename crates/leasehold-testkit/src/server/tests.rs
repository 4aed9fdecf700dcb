#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream};

use super::*;
use crate::{free_port, unreachable_url};

fn refuses(port: u16) -> bool {
    match TcpStream::connect((Ipv4Addr::LOCALHOST, port)) {
        Ok(_) => false,
        Err(e) => e.kind() == ErrorKind::ConnectionRefused,
    }
}

fn proc_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn start_answers_ping_on_its_port() {
    let server = RedisServer::start();
    assert_ne!(server.port(), 6379);
    assert_eq!(
        ping_reply(server.addr()).as_deref(),
        Some("+PONG\r\n"),
        "{server:?}"
    );
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(server.addr().port(), server.port());
    assert!(server.log().contains(READY_MARKER), "{}", server.log());
}

#[test]
fn stop_refuses_connections_and_is_idempotent() {
    let mut server = RedisServer::start();
    let pid = server.pid().unwrap();
    assert!(server.is_running());
    server.stop();
    assert!(refuses(server.port()));
    assert!(!server.is_running());
    assert_eq!(server.pid(), None);
    assert!(!proc_exists(pid), "pid {pid} still exists after stop");
    server.stop();
    assert!(refuses(server.port()));
}

#[test]
fn restart_answers_again_on_the_same_port() {
    let mut server = RedisServer::start();
    let port = server.port();
    let first_pid = server.pid().unwrap();
    server.stop();
    assert!(refuses(port));
    server.restart();
    assert_eq!(server.port(), port);
    assert!(answers_ping(port));
    assert_ne!(server.pid(), Some(first_pid));
    // Restarting a running server replaces the process.
    let second_pid = server.pid().unwrap();
    server.restart();
    assert!(answers_ping(port));
    assert!(!proc_exists(second_pid));
    assert_eq!(server.log().matches(READY_MARKER).count(), 3);
}

#[test]
fn masters_have_distinct_ports_all_answering() {
    let mut masters = Masters::start(3);
    assert_eq!(masters.len(), 3);
    assert!(!masters.is_empty());
    let ports: HashSet<u16> = masters.servers().iter().map(RedisServer::port).collect();
    assert_eq!(ports.len(), 3);
    assert!(!ports.contains(&6379));
    for port in &ports {
        assert!(answers_ping(*port), "port {port}");
    }
    let urls = masters.urls();
    assert_eq!(urls.len(), 3);
    assert_eq!(urls[1], masters.servers()[1].url());

    masters.server(1).stop();
    assert!(refuses(masters.servers()[1].port()));
    assert!(answers_ping(masters.servers()[0].port()));
    assert!(answers_ping(masters.servers()[2].port()));
    masters.server(1).restart();
    assert!(answers_ping(masters.servers()[1].port()));
}

#[test]
fn zero_masters_is_empty() {
    let masters = Masters::start(0);
    assert!(masters.is_empty());
    assert!(masters.urls().is_empty());
}

#[test]
fn unreachable_url_refuses_connections() {
    let url = unreachable_url();
    let port: u16 = url
        .strip_prefix("redis://127.0.0.1:")
        .expect(&url)
        .parse()
        .unwrap();
    assert_ne!(port, 6379);
    assert!(refuses(port), "{url}");
}

#[test]
fn free_port_is_bindable_and_not_6379() {
    let port = free_port();
    assert_ne!(port, 6379);
    // Free "right now" only: another thread's bind(0) or connect() may hold it
    // for a moment, so nothing must hold it for long.
    let bound = (0..5).any(|_| {
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() || {
            thread::sleep(POLL_INTERVAL);
            false
        }
    });
    assert!(bound, "free port {port} stayed in use");
    assert_ne!(free_port(), port, "a handed-out port was handed out again");
}

#[test]
fn drop_kills_reaps_and_removes_dir() {
    let server = RedisServer::start();
    let pid = server.pid().unwrap();
    let port = server.port();
    let dir = server.dir().to_owned();
    assert!(proc_exists(pid));
    assert!(dir.join(LOG_FILE).exists());
    drop(server);
    // A zombie would still have /proc/<pid>; only a reaped process is gone.
    assert!(!proc_exists(pid), "pid {pid} still exists after drop");
    assert!(!dir.exists(), "{} still exists after drop", dir.display());
    assert!(refuses(port));
}

#[test]
fn drop_after_external_kill_does_not_panic() {
    let mut server = RedisServer::start();
    let pid = server.pid().unwrap();
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.is_running() {
        assert!(Instant::now() < deadline, "killed server still running");
        thread::sleep(POLL_INTERVAL);
    }
    assert_eq!(server.pid(), None);
    drop(server);
    assert!(!proc_exists(pid));
}

/// A server started to die with its parent goes when the thread that
/// started it does, as it would if the whole process were killed.
#[cfg(target_os = "linux")]
#[test]
fn a_server_tied_to_its_parent_dies_with_the_thread_that_started_it() {
    let mut server = thread::spawn(|| RedisServer::try_start_dying_with_parent(&[]).unwrap())
        .join()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.is_running() {
        assert!(
            Instant::now() < deadline,
            "the server outlived the thread that started it"
        );
        thread::sleep(POLL_INTERVAL);
    }
    // restart ties the new server to the thread that calls it.
    server.restart();
    assert_eq!(server.command(&["PING"]).unwrap(), "PONG");
    assert!(server.is_running());
}

#[test]
fn requirepass_server_counts_as_up() {
    let server = RedisServer::start_with_args(&["--requirepass", "pw"]);
    let reply = ping_reply(server.addr()).unwrap();
    assert!(reply.starts_with("-NOAUTH"), "{reply:?}");
}

#[test]
fn bad_args_error_includes_redis_output() {
    let err = RedisServer::try_start_with_args(&["--no-such-directive", "x"]).unwrap_err();
    assert!(!err.is_not_found());
    let message = err.to_string();
    assert!(message.contains("exited early"), "{message}");
    assert!(message.contains("no-such-directive"), "{message}");
}

#[test]
#[should_panic(expected = "exited early")]
fn start_with_bad_args_panics() {
    let _ = RedisServer::start_with_args(&["--no-such-directive", "x"]);
}

#[test]
fn port_in_use_is_detected_and_log_is_included() {
    let spec = Spec {
        binary: redis_server_path().unwrap(),
        mode: Mode::Standalone,
        conf: None,
        args: Vec::new(),
        die_with_parent: false,
    };
    let dir = tempfile::tempdir().unwrap();
    let holder = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = holder.local_addr().unwrap().port();
    let err = spawn_ready(&spec, port, dir.path()).unwrap_err();
    assert!(err.is_port_in_use(), "{err}");
    assert!(err.to_string().contains(PORT_IN_USE_MARKER), "{err}");
}

#[test]
fn missing_binary_is_one_line_hint() {
    let err = resolve_binary(None, Some(OsString::new())).unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(err.to_string(), NOT_FOUND_MESSAGE);
    assert!(!NOT_FOUND_MESSAGE.contains('\n'));
    assert_eq!(
        NOT_FOUND_MESSAGE,
        "redis-server not found on PATH: install it (Debian/Ubuntu: apt-get install \
         redis-server) or set LEASEHOLD_REDIS_SERVER"
    );
}

#[test]
fn env_override_is_used_and_checked() {
    let real = redis_server_path().unwrap();
    assert_eq!(
        resolve_binary(Some(real.clone().into_os_string()), None).unwrap(),
        real
    );
    // A bare name is looked up on PATH: the binary in use may be named
    // otherwise than redis-server (valkey-server).
    let name = real.file_name().unwrap().to_owned();
    let dir = real.parent().unwrap().as_os_str().to_owned();
    assert_eq!(resolve_binary(Some(name), Some(dir)).unwrap(), real);
    let err = resolve_binary(Some("/nonexistent/redis-server".into()), None).unwrap_err();
    assert!(err.is_not_found());
    assert!(err.to_string().contains(ENV_BINARY), "{err}");
}

#[test]
fn command_renders_every_reply_kind() {
    let server = RedisServer::start();
    assert_eq!(server.command(&["SET", "k", "v"]).unwrap(), "OK");
    assert_eq!(server.command(&["GET", "k"]).unwrap(), "v");
    assert_eq!(server.command(&["GET", "missing"]).unwrap(), "(nil)");
    assert_eq!(server.command(&["INCR", "n"]).unwrap(), "1");
    assert_eq!(server.command(&["ECHO", "a\r\nb"]).unwrap(), "a\r\nb");
    assert_eq!(
        server.command(&["MGET", "k", "missing", "n"]).unwrap(),
        "v\n(nil)\n1"
    );
    assert_eq!(server.command(&["LRANGE", "none", "0", "-1"]).unwrap(), "");
    let error = server.command(&["INCR", "k"]).unwrap();
    assert!(error.starts_with("(error) ERR "), "{error}");
}

#[test]
fn command_to_a_stopped_server_fails() {
    let mut server = RedisServer::start();
    server.stop();
    let err = server.command(&["PING"]).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("command PING"), "{message}");
    assert!(message.contains(&server.port().to_string()), "{message}");
}

#[test]
fn cluster_node_holds_every_slot() {
    let node = RedisServer::start_cluster_node();
    assert_ne!(node.port(), 6379);
    let info = node.command(&["CLUSTER", "INFO"]).unwrap();
    assert!(info.contains("cluster_state:ok"), "{info}");
    assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
    assert!(node.dir().join(CLUSTER_CONFIG_FILE).exists());
    assert_eq!(
        node.command(&["CLUSTER", "KEYSLOT", "foo"]).unwrap(),
        "12182"
    );
    assert_eq!(node.command(&["SET", "foo", "1"]).unwrap(), "OK");
    // Keys of one hash tag share a slot; keys of different slots cannot meet.
    assert_eq!(
        node.command(&["MSET", "{t}a", "1", "{t}b", "2"]).unwrap(),
        "OK"
    );
    let refused = node.command(&["MSET", "a", "1", "b", "2"]).unwrap();
    assert!(refused.starts_with("(error) CROSSSLOT"), "{refused}");
}

#[test]
fn cluster_node_restarts_with_its_slots() {
    let mut node = RedisServer::start_cluster_node();
    let port = node.port();
    node.restart();
    assert_eq!(node.port(), port);
    let info = node.command(&["CLUSTER", "INFO"]).unwrap();
    assert!(info.contains("cluster_state:ok"), "{info}");
    assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
}

/// A binary without TLS is told apart from one that has it but was given
/// a certificate it cannot load: the server's own words say which.
#[test]
fn a_build_without_tls_is_told_apart() {
    let tls_port = free_port().to_string();
    let err = RedisServer::try_start_with_args(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        "/nonexistent/cert.pem",
        "--tls-key-file",
        "/nonexistent/key.pem",
        "--tls-auth-clients",
        "no",
    ])
    .unwrap_err();
    let message = err.to_string();
    if err.is_tls_unsupported() {
        assert!(
            message.contains(NO_TLS_MARKER) || message.contains(NO_TLS_DIRECTIVE_MARKER),
            "{message}"
        );
    } else {
        assert!(message.contains("/nonexistent/cert.pem"), "{message}");
        assert!(!message.contains(NO_TLS_MARKER), "{message}");
    }
}
