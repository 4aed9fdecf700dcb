//! Lock names, the Redis keys they map to, and the limits on what users pass in.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};

/// The longest lock name accepted, in bytes of the name as given (its
/// keys may be longer: see [`Client::mutex`](crate::Client::mutex) on names
/// with braces).
pub const MAX_NAME_LEN: usize = 1024;
/// The longest key prefix accepted, in bytes.
pub const MAX_PREFIX_LEN: usize = 256;
/// The shortest lease accepted: below it clock drift eats the whole lease.
pub const MIN_LEASE: Duration = Duration::from_millis(10);
/// The longest lease accepted.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest wait for a lock accepted by
/// [`Mutex::acquire_timeout`](crate::Mutex::acquire_timeout).
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest token accepted by the token-based calls.
pub const MAX_TOKEN_LEN: usize = 256;

/// The Redis keys of one lock. They share one hash tag, so every script
/// touches a single slot: `<prefix>:{name}` for a name without braces, and
/// `<prefix>:%{escaped}` for one with braces (see [`lock_key`]).
///
/// Shared: a clone (one per lease taken) costs a count, not seven strings.
#[derive(Debug, Clone)]
pub(crate) struct LockKeys(Arc<KeyNames>);

/// What [`LockKeys`] holds.
#[derive(Debug)]
pub(crate) struct KeyNames {
    pub(crate) name: String,
    pub(crate) lock: String,
    /// Expires only after a long retention: fences must not go backwards,
    /// and the fence's clock term keeps them growing across its expiry.
    pub(crate) fence: String,
    /// The waiter queue (arrival order), and the prefix of each waiter's
    /// heartbeat key.
    pub(crate) queue: String,
    pub(crate) waiters: String,
    /// Each client's notification channel for this lock is this prefix
    /// followed by the client's id.
    pub(crate) channels: String,
    /// The prefix of the short-lived record of a release, by its token: a
    /// release sent again after a lost reply finds its own answer there.
    pub(crate) released: String,
}

impl LockKeys {
    pub(crate) fn new(prefix: &str, name: &str) -> Result<Self> {
        validate_name(name)?;
        let lock = lock_key(prefix, name);
        Ok(LockKeys(Arc::new(KeyNames {
            name: name.to_owned(),
            fence: format!("{lock}:fence"),
            queue: format!("{lock}:q"),
            waiters: format!("{lock}:w:"),
            channels: format!("{lock}:ch:"),
            released: format!("{lock}:r:"),
            lock,
        })))
    }
}

impl std::ops::Deref for LockKeys {
    type Target = KeyNames;

    fn deref(&self) -> &KeyNames {
        &self.0
    }
}

/// The key of the lock `name`; every other key of the lock starts with it.
///
/// A name without braces is its own hash tag, so such names keep the keys
/// they always had. A name with braces is escaped (`{` as `%7B`, `}` as
/// `%7D`, `%` as `%25`) into a tag without braces, and a `%` stands before
/// the tag. The map is injective: the character before the first `{` (the
/// prefix has no braces) tells the two forms apart, and an escaped tag
/// decodes back to one name because every `%` in it starts an escape.
fn lock_key(prefix: &str, name: &str) -> String {
    if !name.contains(['{', '}']) {
        return format!("{prefix}:{{{name}}}");
    }
    let mut tag = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        match c {
            '{' => tag.push_str("%7B"),
            '}' => tag.push_str("%7D"),
            '%' => tag.push_str("%25"),
            c => tag.push(c),
        }
    }
    format!("{prefix}:%{{{tag}}}")
}

pub(crate) fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("lock name is empty: give the lock a name"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "lock name is {} bytes long: a name may have at most {MAX_NAME_LEN} bytes, counted as \
             given (braces are one byte each), so use a shorter name (a hash of a long one works)",
            name.len()
        )));
    }
    Ok(())
}

pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Err(Error::invalid(
            "key prefix is empty: use a short word such as \"leasehold\"",
        ));
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::invalid(format!(
            "key prefix is {} bytes long: the limit is {MAX_PREFIX_LEN} bytes",
            prefix.len()
        )));
    }
    if prefix.contains(['{', '}']) {
        return Err(Error::invalid(format!(
            "key prefix {prefix:?} contains '{{' or '}}': braces would break the lock's hash tag"
        )));
    }
    Ok(())
}

pub(crate) fn validate_lease(lease: Duration) -> Result<()> {
    if lease.is_zero() {
        return Err(Error::invalid(
            "lease is zero: a lock must be held for some time, e.g. 30s",
        ));
    }
    if lease < MIN_LEASE {
        return Err(Error::invalid(format!(
            "lease {lease:?} is shorter than the minimum {MIN_LEASE:?}"
        )));
    }
    if lease > MAX_LEASE {
        return Err(Error::invalid(format!(
            "lease {lease:?} is longer than 24h: use a shorter lease and let the watchdog renew it"
        )));
    }
    Ok(())
}

pub(crate) fn validate_wait(wait: Duration) -> Result<()> {
    if wait > MAX_WAIT {
        return Err(Error::invalid(format!(
            "wait {wait:?} is longer than a day: use acquire() to wait without a bound"
        )));
    }
    Ok(())
}

pub(crate) fn validate_token(token: &str) -> Result<()> {
    if token.is_empty() {
        return Err(Error::invalid(
            "token is empty: pass the token printed by `leasehold acquire`",
        ));
    }
    if token.len() > MAX_TOKEN_LEN {
        return Err(Error::invalid(format!(
            "token is {} bytes long: leasehold tokens are 32 hex characters",
            token.len()
        )));
    }
    if token.chars().any(char::is_whitespace) {
        // Scripts read a space as the end of a token.
        return Err(Error::invalid(
            "token contains whitespace: leasehold tokens are 32 hex characters, pass the token \
             printed by `leasehold acquire`",
        ));
    }
    Ok(())
}

/// Milliseconds for Redis, rounded up so that a lease is never shortened.
pub(crate) fn millis(d: Duration) -> u64 {
    let ms = d.as_millis();
    let ms = if !d.subsec_nanos().is_multiple_of(1_000_000) {
        ms + 1
    } else {
        ms
    };
    u64::try_from(ms).unwrap_or(u64::MAX)
}

/// The Redis Cluster hash slot of `key` (CRC16/XMODEM of its hash tag).
pub(crate) fn hash_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(bytes);
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let keys = LockKeys::new("app", "jobs:nightly").unwrap();
        assert_eq!(keys.lock, "app:{jobs:nightly}");
        assert_eq!(keys.fence, "app:{jobs:nightly}:fence");
        assert_eq!(keys.queue, "app:{jobs:nightly}:q");
        assert_eq!(keys.waiters, "app:{jobs:nightly}:w:");
        assert_eq!(keys.channels, "app:{jobs:nightly}:ch:");
    }

    #[test]
    fn names_are_checked() {
        assert!(validate_name("").unwrap_err().is_invalid_input());
        let err = validate_name(&"x".repeat(MAX_NAME_LEN + 1)).unwrap_err();
        assert!(err.is_invalid_input());
        assert!(err.to_string().contains("1025 bytes"), "{err}");
        validate_name(&"x".repeat(MAX_NAME_LEN)).unwrap();
        validate_name("ünïcode ok").unwrap();
        validate_name("a{b").unwrap();
        validate_name("}").unwrap();
        // The limit is on the name, not on its escaped form.
        validate_name(&"{".repeat(MAX_NAME_LEN)).unwrap();
        assert!(validate_name(&"{".repeat(MAX_NAME_LEN + 1)).is_err());
    }

    #[test]
    fn braces_are_escaped_in_the_keys() {
        let keys = LockKeys::new("app", "user:{42}").unwrap();
        assert_eq!(keys.name, "user:{42}");
        assert_eq!(keys.lock, "app:%{user:%7B42%7D}");
        assert_eq!(keys.fence, "app:%{user:%7B42%7D}:fence");
        assert_eq!(keys.queue, "app:%{user:%7B42%7D}:q");
        assert_eq!(keys.waiters, "app:%{user:%7B42%7D}:w:");
        assert_eq!(keys.channels, "app:%{user:%7B42%7D}:ch:");
        assert_eq!(
            LockKeys::new("app", "50%{").unwrap().lock,
            "app:%{50%25%7B}"
        );
        // A name without braces keeps its keys, '%' and all.
        assert_eq!(LockKeys::new("app", "50%").unwrap().lock, "app:{50%}");
        assert_eq!(LockKeys::new("app", "a%7Bb").unwrap().lock, "app:{a%7Bb}");
    }

    /// The name a lock key belongs to, read back: what makes the map
    /// from names to keys injective.
    fn decode(key: &str, prefix: &str) -> String {
        let rest = key.strip_prefix(prefix).unwrap().strip_prefix(':').unwrap();
        if let Some(tag) = rest.strip_prefix('{') {
            return tag.strip_suffix('}').unwrap().to_owned();
        }
        let tag = rest.strip_prefix("%{").unwrap().strip_suffix('}').unwrap();
        let (mut name, mut rest) = (String::new(), tag);
        while let Some(at) = rest.find('%') {
            name.push_str(&rest[..at]);
            name.push(match &rest[at..at + 3] {
                "%7B" => '{',
                "%7D" => '}',
                "%25" => '%',
                other => panic!("{other} is no escape"),
            });
            rest = &rest[at + 3..];
        }
        name.push_str(rest);
        name
    }

    #[test]
    fn no_two_names_share_keys() {
        // Every name of up to four characters over an alphabet of braces,
        // the escape character and the letters of the escapes.
        let alphabet = ['{', '}', '%', '7', 'B', 'D', '2', '5'];
        let mut names = vec![String::new()];
        let mut all = Vec::new();
        for _ in 0..4 {
            names = names
                .iter()
                .flat_map(|n| alphabet.iter().map(move |c| format!("{n}{c}")))
                .collect();
            all.extend(names.iter().cloned());
        }
        let mut seen = std::collections::HashMap::new();
        for name in &all {
            let keys = LockKeys::new("p", name).unwrap();
            assert_eq!(&decode(&keys.lock, "p"), name);
            let tag_slot = hash_slot(&keys.lock);
            for key in [
                &keys.fence,
                &keys.queue,
                &keys.waiters,
                &keys.channels,
                &keys.released,
            ] {
                assert_eq!(hash_slot(key), tag_slot, "{key}");
            }
            if let Some(other) = seen.insert(keys.lock.clone(), name.clone()) {
                panic!("{name:?} and {other:?} share the key {}", keys.lock);
            }
        }
        assert_eq!(seen.len(), all.len());
    }

    /// Redis itself puts every key of a braced name in one slot.
    #[test]
    fn every_key_of_a_braced_name_has_one_cluster_slot() {
        let node = leasehold_testkit::RedisServer::start_cluster_node();
        let slot = |key: &str| node.command(&["CLUSTER", "KEYSLOT", key]).unwrap();
        for name in ["{", "}", "a{b}c", "{}", "}{", "x%7B{", "{user}:42", "ü{ñ}"] {
            let keys = LockKeys::new("leasehold", name).unwrap();
            let tag = keys
                .lock
                .split_once('{')
                .and_then(|(_, rest)| rest.split_once('}'))
                .map(|(tag, _)| tag)
                .unwrap();
            let expected = slot(tag);
            assert_eq!(expected, hash_slot(&keys.lock).to_string(), "{name}");
            for key in [
                keys.lock.clone(),
                keys.fence.clone(),
                keys.queue.clone(),
                format!("{}0123abcd", keys.waiters),
                format!("{}0123abcd", keys.channels),
                format!("{}0123abcd", keys.released),
                format!("{}:leader", keys.lock),
                format!("{}:leader:ch", keys.lock),
            ] {
                assert_eq!(slot(&key), expected, "{name}: {key}");
            }
        }
    }

    #[test]
    fn leases_and_waits_are_checked() {
        assert!(validate_lease(Duration::ZERO)
            .unwrap_err()
            .is_invalid_input());
        assert!(validate_lease(Duration::from_millis(1)).is_err());
        assert!(validate_lease(MAX_LEASE + Duration::from_millis(1)).is_err());
        validate_lease(MAX_LEASE).unwrap();
        assert!(validate_wait(MAX_WAIT + Duration::from_secs(1)).is_err());
        validate_wait(Duration::ZERO).unwrap();
    }

    #[test]
    fn millis_round_up() {
        assert_eq!(millis(Duration::from_micros(10_500)), 11);
        assert_eq!(millis(Duration::from_millis(30_000)), 30_000);
    }
}

#[cfg(test)]
mod slot_tests {
    use super::hash_slot;

    #[test]
    fn slots_follow_the_hash_tag() {
        // Known values from the Redis Cluster specification.
        assert_eq!(hash_slot("123456789"), 0x31c3);
        assert_eq!(hash_slot("foo"), 12182);
        assert_eq!(hash_slot("{user1000}.following"), hash_slot("user1000"));
        assert_eq!(hash_slot("leasehold:{a}:q"), hash_slot("leasehold:{a}"));
        // An empty tag does not count: the whole key is hashed.
        assert_ne!(hash_slot("{}a"), hash_slot("{}b"));
    }
}
