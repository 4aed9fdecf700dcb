//! The Lua scripts, each built once, and how replies are read.
//!
//! Every script is sent with EVALSHA; a server that lost it (`SCRIPT FLUSH`,
//! restart, failover) answers NOSCRIPT, and the script is loaded and sent again.
//! The scripts of the fast paths (acquire and release, and a Redlock's two
//! rounds) are also one Redis Functions library: where the server has
//! functions (Redis 7, Valkey), they are called with FCALL, which spares
//! the server the work of making the shared functions on every call (see
//! [`Library`]).

use std::sync::LazyLock;

use redis::Value;

use crate::error::verdict::{verdict_of_reply, Verdict};
use crate::error::{Error, Result};

/// How scripts send notifications: classic PUBLISH, or SPUBLISH to the
/// shard of the channel's slot on a Redis Cluster (where PUBLISH would be
/// broadcast to every node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Publish {
    Classic,
    Sharded,
}

/// Every script, built once for one way of publishing. Each is made of the
/// shared functions of `lib.lua`, those of `family.lua` where the script
/// may meet a hash primitive's lock (if only to find that nobody holds it;
/// the family's functions are made only when a script first uses them),
/// and one operation.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: redis::Script,
    pub(crate) try_acquire: redis::Script,
    pub(crate) fair_acquire: redis::Script,
    pub(crate) family_acquire: redis::Script,
    pub(crate) release: redis::Script,
    /// A Mutex's or FairMutex's release by comparing the whole value,
    /// where the server has no compare-and-delete command: bare, without
    /// `lib.lua`.
    pub(crate) delete_if_equal: redis::Script,
    pub(crate) force_release: redis::Script,
    pub(crate) semaphore_permits: redis::Script,
    pub(crate) renew: redis::Script,
    pub(crate) inspect: redis::Script,
    pub(crate) waiters: redis::Script,
    pub(crate) semaphore_delete: redis::Script,
    pub(crate) permit_left: redis::Script,
    pub(crate) election_win: redis::Script,
    pub(crate) election_leader: redis::Script,
    pub(crate) announce: redis::Script,
    pub(crate) redlock_acquire: redis::Script,
    pub(crate) redlock_fence: redis::Script,
    pub(crate) watch: redis::Script,
    pub(crate) library: Library,
}

/// The acquire and release scripts as one Redis Functions library: its
/// shared functions are made once, when it is loaded, not on every call.
/// Its name and its functions' names carry a hash of the scripts, so that
/// clients of other versions load libraries of their own beside it.
#[derive(Debug)]
pub(crate) struct Library {
    /// Its name on the server: `leasehold_` and the hash of its scripts.
    pub(crate) name: String,
    /// What FUNCTION LOAD takes.
    pub(crate) code: String,
    /// The function of each script in the library, by the script's hash.
    functions: Vec<(String, String)>,
}

impl Library {
    fn build(lib: &str, ops: &[(&str, &redis::Script, &str, &str)]) -> Library {
        let hashes: Vec<&str> = ops
            .iter()
            .map(|(_, script, _, _)| script.get_hash())
            .collect();
        let version = redis::Script::new(&hashes.join(" ")).get_hash()[..16].to_owned();
        let mut code = format!("#!lua name=leasehold_{version}\n{lib}{FAMILY}");
        let mut functions = Vec::new();
        for (name, script, op, flags) in ops {
            let function = format!("leasehold_{version}_{name}");
            code.push_str(&format!(
                "redis.register_function{{function_name='{function}', \
                 callback=function(KEYS, ARGV)\n{op}\nend, flags={{{flags}}}}}\n"
            ));
            functions.push((script.get_hash().to_owned(), function));
        }
        Library {
            name: format!("leasehold_{version}"),
            code,
            functions,
        }
    }
}

/// The prefix of every leasehold library's name, of any version.
pub(crate) const LIBRARY_PREFIX: &str = "leasehold_";

/// The name a client of this library gives its connections
/// (`CLIENT SETINFO LIB-NAME`).
pub(crate) const CLIENT_LIB_NAME: &str = "leasehold";

/// The version a client of this library gives its connections
/// (`CLIENT SETINFO LIB-VER`): the crate's version and the hash part of
/// the name of each library it may load, joined by `-`, so that an
/// operator can tell from `CLIENT LIST` which libraries connected clients
/// still call.
pub(crate) fn client_lib_ver() -> &'static str {
    static VER: LazyLock<String> = LazyLock::new(|| {
        let hash = |publish| {
            Scripts::get(publish)
                .library
                .name
                .trim_start_matches(LIBRARY_PREFIX)
                .to_owned()
        };
        format!(
            "{}-{}-{}",
            env!("CARGO_PKG_VERSION"),
            hash(Publish::Classic),
            hash(Publish::Sharded)
        )
    });
    &VER
}

static CLASSIC: LazyLock<Scripts> = LazyLock::new(|| Scripts::build(Publish::Classic));
static SHARDED: LazyLock<Scripts> = LazyLock::new(|| Scripts::build(Publish::Sharded));

const LIB: &str = include_str!("../scripts/lib.lua");
const FAMILY: &str = include_str!("../scripts/family.lua");
/// The record and notification of a watched lock's end (see
/// `LockWatch`), after `lib.lua` in the scripts that end a lease and in
/// the watch's own.
const WATCHED: &str = include_str!("../scripts/watched.lua");
/// The one line of `lib.lua` that sends a notification.
const PUBLISH_LINE: &str = "redis.pcall('PUBLISH', channel, message)";

impl Scripts {
    /// The scripts that publish as `publish` says.
    pub(crate) fn get(publish: Publish) -> &'static Scripts {
        match publish {
            Publish::Classic => &CLASSIC,
            Publish::Sharded => &SHARDED,
        }
    }

    fn build(publish: Publish) -> Scripts {
        let lib = match publish {
            Publish::Classic => LIB.to_owned(),
            Publish::Sharded => {
                LIB.replace(PUBLISH_LINE, "redis.pcall('SPUBLISH', channel, message)")
            }
        };
        let with_family = |op: &str| redis::Script::new(&format!("{lib}{FAMILY}{op}"));
        // Only the scripts that end a lease, and the watch's own, carry the
        // record of a watched lock's end: the others make no closure for it.
        let with_watched = |op: &str| redis::Script::new(&format!("{lib}{WATCHED}{FAMILY}{op}"));
        let with_lib = |op: &str| redis::Script::new(&format!("{lib}{op}"));
        const ACQUIRE: &str = include_str!("../scripts/acquire.lua");
        const TRY_ACQUIRE: &str = include_str!("../scripts/try_acquire.lua");
        const FAIR_ACQUIRE: &str = include_str!("../scripts/fair_acquire.lua");
        const FAMILY_ACQUIRE: &str = include_str!("../scripts/family_acquire.lua");
        const RELEASE: &str = include_str!("../scripts/release.lua");
        const DELETE_IF_EQUAL: &str = include_str!("../scripts/delete_if_equal.lua");
        const REDLOCK_ACQUIRE: &str = include_str!("../scripts/redlock_acquire.lua");
        const REDLOCK_FENCE: &str = include_str!("../scripts/redlock_fence.lua");
        let acquire = with_family(ACQUIRE);
        let try_acquire = with_family(TRY_ACQUIRE);
        let fair_acquire = with_family(FAIR_ACQUIRE);
        let family_acquire = with_family(FAMILY_ACQUIRE);
        let release = with_watched(RELEASE);
        let delete_if_equal = redis::Script::new(DELETE_IF_EQUAL);
        let redlock_acquire = with_lib(REDLOCK_ACQUIRE);
        let redlock_fence = with_lib(REDLOCK_FENCE);
        // A release runs under maxmemory too, as its EVAL does (a DEL is
        // not refused then): it frees memory.
        let library = Library::build(
            &format!("{lib}{WATCHED}"),
            &[
                ("acquire", &acquire, ACQUIRE, ""),
                ("try_acquire", &try_acquire, TRY_ACQUIRE, ""),
                ("fair_acquire", &fair_acquire, FAIR_ACQUIRE, ""),
                ("family_acquire", &family_acquire, FAMILY_ACQUIRE, ""),
                ("release", &release, RELEASE, "'allow-oom'"),
                (
                    "delete_if_equal",
                    &delete_if_equal,
                    DELETE_IF_EQUAL,
                    "'allow-oom'",
                ),
                ("redlock_acquire", &redlock_acquire, REDLOCK_ACQUIRE, ""),
                ("redlock_fence", &redlock_fence, REDLOCK_FENCE, ""),
            ],
        );
        Scripts {
            acquire,
            try_acquire,
            fair_acquire,
            family_acquire,
            release,
            delete_if_equal,
            library,
            force_release: with_watched(include_str!("../scripts/force_release.lua")),
            semaphore_permits: with_family(include_str!("../scripts/semaphore_permits.lua")),
            renew: with_family(include_str!("../scripts/renew.lua")),
            inspect: with_family(include_str!("../scripts/inspect.lua")),
            waiters: with_lib(include_str!("../scripts/waiters.lua")),
            semaphore_delete: with_family(include_str!("../scripts/semaphore_delete.lua")),
            permit_left: with_family(include_str!("../scripts/permit_left.lua")),
            election_win: with_lib(include_str!("../scripts/election_win.lua")),
            election_leader: with_lib(include_str!("../scripts/election_leader.lua")),
            announce: with_lib(include_str!("../scripts/announce.lua")),
            redlock_acquire,
            redlock_fence,
            watch: with_watched(include_str!("../scripts/watch.lua")),
        }
    }
}

impl Scripts {
    /// The function that runs `script`, if the library has one.
    pub(crate) fn function(&self, script: &redis::Script) -> Option<&str> {
        let hash = script.get_hash();
        self.library
            .functions
            .iter()
            .find(|(of, _)| of == hash)
            .map(|(_, function)| function.as_str())
    }
}

/// The FCALL command for `function`.
pub(crate) fn fcall(function: &str, keys: &[&str], args: &[&[u8]]) -> redis::Cmd {
    script_call("FCALL", function, keys, args)
}

/// `command` (FCALL or EVALSHA) of `name` (a function or a script's hash),
/// its buffers sized up front: growing them argument by argument cost the
/// client more than the rest of a fast path's request.
fn script_call(command: &str, name: &str, keys: &[&str], args: &[&[u8]]) -> redis::Cmd {
    let data = command.len()
        + name.len()
        + 4
        + keys.iter().map(|key| key.len()).sum::<usize>()
        + args.iter().map(|arg| arg.len()).sum::<usize>();
    let mut cmd = redis::Cmd::with_capacity(3 + keys.len() + args.len(), data);
    cmd.arg(command).arg(name).arg(keys.len()).arg(keys);
    for arg in args {
        cmd.arg(*arg);
    }
    cmd
}

/// The EVALSHA command for `script`, for use in a pipeline.
pub(crate) fn evalsha(script: &redis::Script, keys: &[&str], args: &[&[u8]]) -> redis::Cmd {
    script_call("EVALSHA", script.get_hash(), keys, args)
}

/// Whether a reply of a pipeline says the server lost the script.
pub(crate) fn is_noscript(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if verdict_of_reply(e) == Verdict::Reload)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharded_scripts_publish_with_spublish_alone() {
        assert_eq!(
            LIB.matches(PUBLISH_LINE).count(),
            1,
            "lib.lua publishes in one place"
        );
        assert_eq!(LIB.matches("'PUBLISH'").count(), 1);
        let sharded = Scripts::build(Publish::Sharded);
        let classic = Scripts::build(Publish::Classic);
        assert_ne!(sharded.release.get_hash(), classic.release.get_hash());
        for op in [
            include_str!("../scripts/release.lua"),
            include_str!("../scripts/election_win.lua"),
            include_str!("../scripts/announce.lua"),
        ] {
            assert!(!op.contains("PUBLISH'"), "scripts publish through lib.lua");
        }
    }
}
