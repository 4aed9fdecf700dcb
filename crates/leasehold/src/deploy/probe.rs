//! One quick look at what listens on Redis's port, taken only after a
//! connect failed: a TLS client on a plain port waits for a handshake that
//! never comes, and a plain client on a TLS port is reset. Both are settings
//! to fix, not faults to wait out, so they must not read as "cannot reach".

use std::sync::Arc;
use std::time::Duration;

use redis::ConnectionAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{Error, ErrorKind};

/// The server on the port speaks the other protocol than the URL asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// `rediss://` to a port that answers plain RESP.
    PlainServer,
    /// `redis://` to a port that answers a TLS handshake.
    TlsServer,
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
            // A simple string (+PONG) or an error (-NOAUTH …): RESP.
            matches!(first.as_slice(), [b'+' | b'-', ..]).then_some(Mismatch::PlainServer)
        }
        ConnectionAddr::Tcp(host, port) => {
            let hello = client_hello(host)?;
            let first = start_of_reply(host, *port, &hello).await?;
            // A TLS handshake record: content type 22, major version 3.
            matches!(first.as_slice(), [0x16, 0x03, ..]).then_some(Mismatch::TlsServer)
        }
        _ => None,
    }
}

async fn start_of_reply(host: &str, port: u16, request: &[u8]) -> Option<Vec<u8>> {
    let mut stream = TcpStream::connect((host, port)).await.ok()?;
    stream.write_all(request).await.ok()?;
    let mut reply = [0u8; 2];
    let mut got = 0;
    while got < reply.len() {
        let n = stream.read(&mut reply[got..]).await.ok()?;
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
