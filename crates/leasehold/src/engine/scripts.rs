//! The Lua scripts, each built once, and how replies are read.
//!
//! Every script is sent with EVALSHA; a server that lost it (`SCRIPT FLUSH`,
//! restart, failover) answers NOSCRIPT, and the script is loaded and sent again.

use std::sync::LazyLock;

use redis::Value;

use crate::error::{Error, Result};

/// A script made of the shared functions of `lib.lua` and `family.lua`
/// and one operation. Every lock script may meet a hash primitive's lock,
/// if only to find that nobody holds it; the family's functions are made
/// only when a script first uses them.
macro_rules! with_family {
    ($file:literal) => {
        LazyLock::new(|| {
            redis::Script::new(concat!(
                include_str!("../scripts/lib.lua"),
                include_str!("../scripts/family.lua"),
                include_str!(concat!("../scripts/", $file))
            ))
        })
    };
}

/// A script made of the shared functions of `lib.lua` and one operation
/// that meets no hash primitive.
macro_rules! with_lib {
    ($file:literal) => {
        LazyLock::new(|| {
            redis::Script::new(concat!(
                include_str!("../scripts/lib.lua"),
                include_str!(concat!("../scripts/", $file))
            ))
        })
    };
}

pub(crate) static ACQUIRE: LazyLock<redis::Script> = with_family!("acquire.lua");
pub(crate) static RELEASE: LazyLock<redis::Script> = with_family!("release.lua");
pub(crate) static FAIR_ACQUIRE: LazyLock<redis::Script> = with_family!("fair_acquire.lua");
pub(crate) static FORCE_RELEASE: LazyLock<redis::Script> = with_family!("force_release.lua");
pub(crate) static FAMILY_ACQUIRE: LazyLock<redis::Script> = with_family!("family_acquire.lua");
pub(crate) static SEMAPHORE_PERMITS: LazyLock<redis::Script> =
    with_family!("semaphore_permits.lua");
pub(crate) static RENEW: LazyLock<redis::Script> = with_family!("renew.lua");
pub(crate) static INSPECT: LazyLock<redis::Script> = with_family!("inspect.lua");
pub(crate) static ELECTION_WIN: LazyLock<redis::Script> = with_lib!("election_win.lua");
pub(crate) static ELECTION_LEADER: LazyLock<redis::Script> = with_lib!("election_leader.lua");
pub(crate) static ANNOUNCE: LazyLock<redis::Script> = with_lib!("announce.lua");

/// The EVALSHA command for `script`, for use in a pipeline.
pub(crate) fn evalsha(script: &redis::Script, keys: &[&str], args: &[&[u8]]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len()).arg(keys);
    for arg in args {
        cmd.arg(*arg);
    }
    cmd
}

pub(crate) fn is_noscript(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

pub(crate) fn as_int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

/// A bulk or simple string reply as text.
pub(crate) fn as_text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

/// Reads a reply that must be the integer 0 or 1.
pub(crate) fn flag(operation: &str, value: &Value) -> Result<bool> {
    match as_int(value) {
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        _ => Err(Error::unexpected_reply(operation, value)),
    }
}

/// What the renew script said about one lease.
#[derive(Debug)]
pub(crate) enum Renewal {
    Renewed,
    NotHeld,
    /// Redis refused the renewal (OOM, NOREPLICAS, READONLY, ...), or the
    /// reply made no sense: the lease may still be held.
    Refused(String),
}

pub(crate) fn renewal(value: &Value) -> Renewal {
    match value {
        Value::Int(1) => Renewal::Renewed,
        Value::Int(0) => Renewal::NotHeld,
        Value::BulkString(bytes) => Renewal::Refused(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Renewal::Refused(text.clone()),
        other => Renewal::Refused(format!("unexpected reply {other:?}")),
    }
}
