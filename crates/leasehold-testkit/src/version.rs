use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::error::StartError;
use crate::server::redis_server_path;

/// Which server a binary is: Redis or Valkey (which speaks the same
/// protocol and reads the same configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Product {
    /// Redis.
    Redis,
    /// Valkey.
    Valkey,
}

/// The product and version of a `redis-server` binary, as its `--version`
/// prints them (`Redis server v=7.0.15 …`, `Valkey server v=9.1.2 …`).
///
/// Lets a test skip what an older server lacks:
///
/// ```no_run
/// let version = leasehold_testkit::server_version().unwrap();
/// if !version.at_least(7, 0) {
///     eprintln!("skipped: {version} has no CLUSTER SHARDS");
///     return;
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServerVersion {
    product: Product,
    major: u32,
    minor: u32,
    patch: u32,
}

impl ServerVersion {
    /// Redis or Valkey.
    pub fn product(&self) -> Product {
        self.product
    }

    /// True for a Valkey server.
    pub fn is_valkey(&self) -> bool {
        self.product == Product::Valkey
    }

    /// The major version, e.g. 7 for 7.0.15.
    pub fn major(&self) -> u32 {
        self.major
    }

    /// The minor version, e.g. 0 for 7.0.15.
    pub fn minor(&self) -> u32 {
        self.minor
    }

    /// The patch level, e.g. 15 for 7.0.15.
    pub fn patch(&self) -> u32 {
        self.patch
    }

    /// True if this is `major.minor` or newer, whatever the product (Valkey
    /// counts on from Redis 7.2, which it forked).
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }

    /// True if the cluster bus port can be set with `cluster-port` (Redis 7
    /// and Valkey); older servers bind it at the client port plus 10000.
    pub(crate) fn has_cluster_port(&self) -> bool {
        self.is_valkey() || self.major >= 7
    }

    /// True if `CLUSTER ADDSLOTSRANGE` exists (Redis 7 and Valkey).
    pub(crate) fn has_addslotsrange(&self) -> bool {
        self.has_cluster_port()
    }

    /// Reads the first line of `--version` output.
    fn parse(text: &str) -> Option<ServerVersion> {
        let mut words = text.split_whitespace();
        let product = match words.next()? {
            "Redis" => Product::Redis,
            "Valkey" => Product::Valkey,
            _ => return None,
        };
        let number = words.find_map(|word| word.strip_prefix("v="))?;
        let mut parts = number.split('.').map(str::parse::<u32>);
        let major = parts.next()?.ok()?;
        let minor = parts.next().unwrap_or(Ok(0)).ok()?;
        let patch = parts.next().unwrap_or(Ok(0)).ok()?;
        Some(ServerVersion {
            product,
            major,
            minor,
            patch,
        })
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let product = match self.product {
            Product::Redis => "Redis",
            Product::Valkey => "Valkey",
        };
        write!(f, "{product} {}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The version of the binary [`redis_server_path`] finds, from its
/// `--version` output (asked once per binary and process).
///
/// # Errors
///
/// No binary is found ([`StartError::is_not_found`]), it cannot be run, or
/// it does not print a Redis or Valkey version.
pub fn server_version() -> Result<ServerVersion, StartError> {
    version_of(&redis_server_path()?)
}

pub(crate) fn version_of(binary: &Path) -> Result<ServerVersion, StartError> {
    static KNOWN: OnceLock<Mutex<HashMap<PathBuf, ServerVersion>>> = OnceLock::new();
    let known = KNOWN.get_or_init(|| Mutex::new(HashMap::new()));
    let cached = known
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(binary)
        .copied();
    if let Some(version) = cached {
        return Ok(version);
    }
    let output = Command::new(binary)
        .arg("--version")
        .output()
        .map_err(|e| StartError::io(format!("cannot run {} --version", binary.display()), e))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let version = ServerVersion::parse(&text).ok_or_else(|| {
        StartError::other(format!(
            "{} --version printed no Redis or Valkey version: {:?}",
            binary.display(),
            text.trim()
        ))
    })?;
    known
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .insert(binary.to_owned(), version);
    Ok(version)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn parses_redis_and_valkey_version_lines() {
        let redis = ServerVersion::parse(
            "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d7c9",
        )
        .unwrap();
        assert_eq!(redis.product(), Product::Redis);
        assert_eq!((redis.major(), redis.minor(), redis.patch()), (7, 0, 15));
        assert!(redis.has_cluster_port());
        assert_eq!(redis.to_string(), "Redis 7.0.15");

        let old = ServerVersion::parse("Redis server v=6.2.14 sha=40305114:0 bits=64").unwrap();
        assert!(!old.has_cluster_port());
        assert!(old.at_least(6, 2) && !old.at_least(7, 0));

        let valkey = ServerVersion::parse("Valkey server v=9.1.2 sha=00000000:1 bits=64").unwrap();
        assert!(valkey.is_valkey());
        assert!(valkey.has_cluster_port());
        assert!(valkey.at_least(7, 2));
        assert_eq!(valkey.to_string(), "Valkey 9.1.2");

        assert_eq!(ServerVersion::parse("KeyDB v=6.3.4"), None);
        assert_eq!(ServerVersion::parse(""), None);
    }

    #[test]
    fn the_binary_in_use_has_a_version() {
        let version = server_version().unwrap();
        assert!(version.at_least(6, 0), "{version}");
    }
}
