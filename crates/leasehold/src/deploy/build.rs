//! Building a deployment from its URLs: one server or the seeds of a
//! Redis Cluster (found out on the first request), a master named by its
//! sentinels (`redis+sentinel://`), or the independent masters of a
//! Redlock. Every connection is made with the same socket settings.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::io::tcp::{socket2, TcpSettings};
use redis::IntoConnectionInfo;

use crate::deploy::cluster::NodeFactory;
use crate::deploy::detect::Detect;
use crate::deploy::sentinel::Sentinel;
use crate::deploy::standalone::Standalone;
use crate::deploy::Deployment;
use crate::error::{Error, Result};

/// What the sentinels of a `redis+sentinel://` URL are asked with, when it
/// is not what the data nodes are: from the builder, else the URL's
/// `sentinel_username` and `sentinel_password` parameters.
#[derive(Clone, Default)]
pub(crate) struct SentinelAuth {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

impl fmt::Debug for SentinelAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelAuth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .finish()
    }
}

/// The deployment behind `url`: a master named by its sentinels
/// (`redis+sentinel://`), else one server or the seeds of a cluster,
/// separated by commas, found out on the first request.
pub(crate) fn deployment(
    url: &str,
    command_timeout: Duration,
    tls_root: Option<&[u8]>,
    sentinel_auth: &SentinelAuth,
) -> Result<Arc<dyn Deployment>> {
    install_tls_provider(url);
    if let Some(sentinel) =
        sentinel_deployment(url.trim(), command_timeout, tls_root, sentinel_auth)?
    {
        return Ok(Arc::new(sentinel));
    }
    if sentinel_auth.username.is_some() || sentinel_auth.password.is_some() {
        return Err(Error::invalid(
            "sentinel credentials were given, but the URL names no sentinels: use \
             redis+sentinel://host:port[,host:port…]/MASTER_NAME, or leave them out",
        ));
    }
    let urls: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .collect();
    if urls.is_empty() {
        return Err(Error::invalid(
            "redis URL is empty: give redis://host:port, or several seeds of a cluster \
             separated by commas",
        ));
    }
    let seeds = urls
        .iter()
        .map(|url| seed(url, command_timeout, tls_root))
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(Detect::new(seeds, command_timeout)))
}

/// The independent masters of a Redlock, one server per URL, in order.
pub(crate) fn masters(
    urls: &[&str],
    command_timeout: Duration,
) -> Result<Vec<Arc<dyn Deployment>>> {
    if urls.iter().any(|url| url.starts_with("rediss")) {
        install_tls_provider("rediss");
    }
    let mut masters: Vec<Arc<dyn Deployment>> = Vec::with_capacity(urls.len());
    for url in urls {
        let master = Standalone::new(seed(url, command_timeout, None)?, command_timeout);
        let address = master.address().to_owned();
        if masters.iter().any(|m| m.address() == address) {
            return Err(Error::invalid(format!(
                "master {address} is given twice: a Redlock's masters must be independent \
                 servers, or one of them counts twice in every majority"
            )));
        }
        masters.push(Arc::new(master));
    }
    Ok(masters)
}

/// rustls needs a process-wide crypto provider for `rediss://`; the one
/// the application installed, if any, is kept.
fn install_tls_provider(url: &str) {
    if url.trim().starts_with("rediss") {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The Redis client of one seed URL, with the socket settings every
/// connection uses.
pub(crate) fn seed(
    url: &str,
    command_timeout: Duration,
    tls_root: Option<&[u8]>,
) -> Result<redis::Client> {
    let invalid_url = |e| {
        Error::invalid(
            "redis URL is not valid: use redis://[user:password@]host:port[/db] or rediss://",
        )
        .with_source(e)
    };
    let info = url.into_connection_info().map_err(invalid_url)?;
    // Small requests go out at once; a peer that vanished is noticed by
    // the kernel too, not only by a command that goes unanswered.
    let info = info.set_tcp_settings(
        TcpSettings::default()
            .set_nodelay(true)
            .set_keepalive(
                socket2::TcpKeepalive::new()
                    .with_time(Duration::from_secs(15))
                    .with_interval(Duration::from_secs(5)),
            )
            .set_user_timeout(
                command_timeout
                    .saturating_mul(3)
                    .max(Duration::from_secs(5)),
            ),
    );
    rebuild(info, tls_root)
}

/// The Redis client of `info`, trusting `tls_root` if given.
fn rebuild(info: redis::ConnectionInfo, tls_root: Option<&[u8]>) -> Result<redis::Client> {
    let invalid_url = |e| {
        Error::invalid(
            "redis URL is not valid: use redis://[user:password@]host:port[/db] or rediss://",
        )
        .with_source(e)
    };
    match tls_root {
        None => redis::Client::open(info).map_err(invalid_url),
        Some(root) => {
            let certificates = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(root.to_vec()),
            };
            redis::Client::build_with_tls(info, certificates).map_err(|e| {
                Error::invalid(
                    "TLS root certificate is not usable: pass the CA certificate in PEM form",
                )
                .with_source(e)
            })
        }
    }
}

/// The port a sentinel listens on when its URL gives none.
const SENTINEL_PORT: u16 = 26379;

/// The deployment of a `redis+sentinel://` (or `rediss+sentinel://`) URL:
/// `[user:password@]host:port[,host:port…]/MASTER_NAME[/DB][?PARAMS]`,
/// `None` for another scheme. The user, password and database are the data
/// nodes'; the sentinels are reached with TLS if the URL says so, with the
/// credentials of `auth` or else of the `sentinel_username` and
/// `sentinel_password` parameters, if any.
fn sentinel_deployment(
    url: &str,
    command_timeout: Duration,
    tls_root: Option<&[u8]>,
    auth: &SentinelAuth,
) -> Result<Option<Sentinel>> {
    let (tls, rest) = if let Some(rest) = url.strip_prefix("redis+sentinel://") {
        (false, rest)
    } else if let Some(rest) = url.strip_prefix("rediss+sentinel://") {
        (true, rest)
    } else {
        return Ok(None);
    };
    let invalid = |why: &str| {
        Error::invalid(format!(
            "sentinel URL is not valid: {why}; use \
             redis+sentinel://[user:password@]host:port[,host:port…]/MASTER_NAME"
        ))
    };
    let (rest, fragment) = match rest.split_once('#') {
        Some((rest, fragment)) => (rest, format!("#{fragment}")),
        None => (rest, String::new()),
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut from_url = SentinelAuth::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value).ok_or_else(|| {
            invalid(&format!(
                "the value of {key} is not valid percent-encoded UTF-8"
            ))
        })?;
        match key {
            "sentinel_username" => from_url.username = Some(value),
            "sentinel_password" => from_url.password = Some(value),
            _ => {
                return Err(invalid(&format!(
                    "unknown parameter {key:?} (sentinel_username and sentinel_password are \
                     known)"
                )))
            }
        }
    }
    let username = auth.username.clone().or(from_url.username);
    let password = auth.password.clone().or(from_url.password);
    if username.is_some() && password.is_none() {
        return Err(invalid(
            "a sentinel username is given without a sentinel password",
        ));
    }
    let (authority, path) = rest
        .split_once('/')
        .ok_or_else(|| invalid("it names no master (the name goes after the sentinels)"))?;
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
        None => (String::new(), authority),
    };
    let (name, db) = match path.split_once('/') {
        Some((name, db)) => (name, db),
        None => (path, ""),
    };
    if name.is_empty() {
        return Err(invalid("the master name is empty"));
    }
    if !db.is_empty() && db.parse::<u32>().is_err() {
        return Err(invalid(
            "the database after the master name is not a number",
        ));
    }
    let scheme = if tls { "rediss" } else { "redis" };
    let mut sentinels = Vec::new();
    for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        // `host`, `host:port`, `[v6]` or `[v6]:port`.
        let has_port = match host.rsplit_once(':') {
            Some((before, port)) => {
                (!before.contains(':') || before.ends_with(']')) && port.parse::<u16>().is_ok()
            }
            None => false,
        };
        let addr = if has_port {
            host.to_owned()
        } else {
            format!("{host}:{SENTINEL_PORT}")
        };
        let client = seed(
            &format!("{scheme}://{addr}{fragment}"),
            command_timeout,
            tls_root,
        )?;
        let client = match &password {
            None => client,
            Some(password) => {
                let info = client.get_connection_info().clone();
                let mut settings = info.redis_settings().clone().set_password(password);
                if let Some(username) = &username {
                    settings = settings.set_username(username);
                }
                rebuild(info.set_redis_settings(settings), tls_root)?
            }
        };
        sentinels.push((client, addr));
    }
    let Some((_, first)) = sentinels.first() else {
        return Err(invalid("it names no sentinel"));
    };
    // The data nodes' settings, on the address of a sentinel: each master
    // is reached with them at its own address.
    let db = if db.is_empty() {
        String::new()
    } else {
        format!("/{db}")
    };
    let template = seed(
        &format!("{scheme}://{userinfo}{first}{db}{fragment}"),
        command_timeout,
        tls_root,
    )?;
    Ok(Some(Sentinel::new(
        name.to_owned(),
        sentinels,
        NodeFactory::new(&template),
        command_timeout,
    )))
}

/// `%XX` escapes (and `+` for a space) decoded; `None` for a bad escape
/// or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}
