//! One quick look at what listens on Redis's port, taken only after a
//! connect failed: a TLS client on a plain port waits for a handshake that
//! never comes, a plain client on a TLS port is reset, and a port where
//! something else listens (a web server) answers in its own protocol. All
//! are settings to fix, not faults to wait out, so they must not read as
//! "cannot reach".

use std::sync::Arc;
use std::time::Duration;

use redis::ConnectionAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{Error, ErrorKind};

/// How long the rest of a reply's first bytes may take after the first.
const REST_OF_REPLY: Duration = Duration::from_millis(50);

/// The server on the port speaks another protocol than the URL asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// `rediss://` to a port that answers plain RESP.
    PlainServer,
    /// `redis://` to a port that answers a TLS handshake.
    TlsServer,
    /// No Redis: the port answers another protocol, named when it can be
    /// told from its first bytes (HTTP, SSH).
    NotRedis(Option<&'static str>),
}

impl Mismatch {
    pub(crate) fn error(self, address: &str) -> Error {
        let message = match self {
            Mismatch::PlainServer => format!(
                "redis at {address} does not speak TLS on this port (it answers plain commands): \
                 use a redis:// URL for this port, or keep rediss:// and use the server's TLS \
                 port (its tls-port setting)"
            ),
            Mismatch::TlsServer => format!(
                "redis at {address} speaks TLS on this port: use a rediss:// URL for this port, \
                 or keep redis:// and use the server's plain port (its port setting)"
            ),
            Mismatch::NotRedis(Some(protocol)) => format!(
                "{address} is not a Redis server: it answered {protocol}; check the host and \
                 port of the URL"
            ),
            Mismatch::NotRedis(None) => format!(
                "{address} is not a Redis server: it answered with bytes that are not the Redis \
                 protocol; check the host and port of the URL"
            ),
        };
        Error::new(ErrorKind::Config, message)
    }
}

/// Which mismatch, if any, the server at `addr` shows within `within`. No
/// answer, or an answer of neither kind, tells nothing.
pub(crate) async fn mismatch(addr: &ConnectionAddr, within: Duration) -> Option<Mismatch> {
    tokio::time::timeout(within, look(addr)).await.ok()?
}

async fn look(addr: &ConnectionAddr) -> Option<Mismatch> {
    match addr {
        ConnectionAddr::TcpTls { host, port, .. } => {
            let first = start_of_reply(host, *port, b"PING\r\n").await?;
            match first.as_slice() {
                // A simple string (+PONG) or an error (-NOAUTH …): RESP.
                [b'+' | b'-', ..] => Some(Mismatch::PlainServer),
                // A TLS server's alert, or silence, tells nothing: the
                // handshake's own failure says more.
                reply => named(reply).map(|protocol| Mismatch::NotRedis(Some(protocol))),
            }
        }
        ConnectionAddr::Tcp(host, port) => {
            let hello = client_hello(host)?;
            let first = start_of_reply(host, *port, &hello).await?;
            match first.as_slice() {
                // A TLS handshake record: content type 22, major version 3.
                [0x16, 0x03, ..] => Some(Mismatch::TlsServer),
                // What a Redis answers to bytes it cannot read.
                [first, ..] if is_resp_type(*first) => None,
                reply => Some(Mismatch::NotRedis(named(reply))),
            }
        }
        _ => None,
    }
}

/// The protocol a server's first bytes are in, where they name one.
fn named(reply: &[u8]) -> Option<&'static str> {
    [(&b"HTTP/"[..], "HTTP"), (&b"SSH-"[..], "SSH")]
        .into_iter()
        .find(|(start, _)| reply.starts_with(start))
        .map(|(_, protocol)| protocol)
}

/// The first byte of a RESP2 or RESP3 reply.
fn is_resp_type(byte: u8) -> bool {
    b"+-:$*_,#!=(%~>|".contains(&byte)
}

/// Up to the first five bytes the server at `host:port` answers `request`
/// with; `None` for no answer.
async fn start_of_reply(host: &str, port: u16, request: &[u8]) -> Option<Vec<u8>> {
    let mut stream = TcpStream::connect((host, port)).await.ok()?;
    stream.write_all(request).await.ok()?;
    let mut reply = [0u8; 5];
    let mut got = 0;
    while got < reply.len() {
        // Once some bytes came, the rest of the first segment comes at
        // once or not at all; a server may also answer and reset.
        let read = stream.read(&mut reply[got..]);
        let n = if got == 0 {
            read.await.ok()?
        } else {
            match tokio::time::timeout(REST_OF_REPLY, read).await {
                Ok(Ok(n)) => n,
                Ok(Err(_)) | Err(_) => break,
            }
        };
        if n == 0 {
            break;
        }
        got += n;
    }
    (got > 0).then(|| reply[..got].to_vec())
}

/// The bytes of a TLS ClientHello for `host`; nothing after it is sent, so
/// no certificate is ever checked or trusted.
fn client_hello(host: &str) -> Option<Vec<u8>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .or_else(|_| rustls::pki_types::ServerName::try_from("redis"))
        .ok()?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).ok()?;
    Some(hello)
}
