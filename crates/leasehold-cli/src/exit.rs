//! Exit codes, one meaning each.

pub(crate) const FAILURE: u8 = 1;
pub(crate) const USAGE: u8 = 2;
/// EX_DATAERR: the name is in use by another kind of lock (or by a
/// semaphore of another size). Waiting would never end, so it is not busy.
pub(crate) const CONFLICT: u8 = 65;
/// Fewer replicas than asked (every connected one, or `--replicas N`)
/// acknowledged the grant (undone) or the extend in time.
pub(crate) const REPLICAS: u8 = 74;
/// EX_UNAVAILABLE: Redis cannot be reached, or is not ready (loading, busy,
/// failing over).
pub(crate) const UNAVAILABLE: u8 = 69;
/// EX_TEMPFAIL: the lock is busy; try again later.
pub(crate) const BUSY: u8 = 75;
/// The lease was lost, or the token no longer holds the lock.
pub(crate) const LOST: u8 = 76;
/// EX_NOPERM: Redis refused the credentials (or the ACL user's rights).
pub(crate) const AUTH: u8 = 77;
/// EX_CONFIG: Redis refused the connection's settings (database, TLS), or
/// the URL names a server that cannot hold the locks: a replica, a
/// Sentinel, a node of a Redis Cluster that sends the lock elsewhere, or
/// no Redis at all (a web server's port).
pub(crate) const CONFIG: u8 = 78;
pub(crate) const CANNOT_EXECUTE: u8 = 126;
pub(crate) const NOT_FOUND: u8 = 127;

/// An error that ends the program with a chosen code.
#[derive(Debug)]
pub(crate) struct Fail {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Fail {}

/// The exit code for an error that ends the program.
pub(crate) fn code_for(err: &anyhow::Error) -> u8 {
    if let Some(fail) = err.downcast_ref::<Fail>() {
        return fail.code;
    }
    let Some(err) = err.downcast_ref::<leasehold::Error>() else {
        return FAILURE;
    };
    match err.kind() {
        leasehold::ErrorKind::Timeout => BUSY,
        leasehold::ErrorKind::NotHeld => LOST,
        leasehold::ErrorKind::InvalidInput => USAGE,
        leasehold::ErrorKind::Conflict => CONFLICT,
        leasehold::ErrorKind::Connection | leasehold::ErrorKind::Quorum => UNAVAILABLE,
        leasehold::ErrorKind::Auth => AUTH,
        leasehold::ErrorKind::Config => CONFIG,
        leasehold::ErrorKind::ReplicasMissing => REPLICAS,
        _ => FAILURE,
    }
}

/// An error that ends the program as the command says it: each cause after
/// the one it explains (as `{:#}` does), with a library error's remedy in
/// the command's own words (see [`said`]).
pub(crate) fn message(err: &anyhow::Error) -> String {
    err.chain()
        .map(|cause| match cause.downcast_ref::<leasehold::Error>() {
            Some(err) => said(err),
            None => cause.to_string(),
        })
        .collect::<Vec<_>>()
        .join(": ")
}

/// A library error as the command says it: where the library's message
/// ends with a setting or a call of its Rust API, the command's flag or
/// subcommand instead.
pub(crate) fn said(err: &leasehold::Error) -> String {
    match err.remedy().and_then(advice) {
        Some(advice) => format!("{}; {advice}", err.situation()),
        None => err.to_string(),
    }
}

/// A remedy in the command's words; `None` for one it has no words of its
/// own for (the library's are kept).
fn advice(remedy: leasehold::Remedy) -> Option<&'static str> {
    use leasehold::Remedy;
    Some(match remedy {
        Remedy::SetPermits => {
            "change it for everyone with `leasehold semaphore set-permits NAME N`, or give \
             the count it has (--semaphore N)"
        }
        Remedy::CommandTimeout => "if it is only slow, give it longer with --command-timeout",
        Remedy::TrustCa => {
            "the leasehold command trusts the public CAs only (a URL ending in #insecure \
             skips the check, for development only)"
        }
        Remedy::ReplicaTimeout => "or allow a longer --replica-timeout",
        Remedy::ReleaseAsAdmin => {
            "release it with `leasehold release NAME TOKEN`, or as an admin with \
             `leasehold force-release NAME`"
        }
        _ => return None,
    })
}

/// The name of an exit code, as the `"error"` of a JSON failure.
pub(crate) fn kind(code: u8) -> &'static str {
    match code {
        USAGE => "usage",
        CONFLICT => "conflict",
        REPLICAS => "replicas_missing",
        UNAVAILABLE => "unavailable",
        BUSY => "busy",
        LOST => "lost",
        AUTH => "auth",
        CONFIG => "config",
        CANNOT_EXECUTE => "cannot_execute",
        NOT_FOUND => "not_found",
        129.. => "signal",
        _ => "failure",
    }
}

/// A failure as one JSON object on stdout, for `--json`.
pub(crate) fn print_json(code: u8, message: &str) {
    println!(
        "{}",
        serde_json::json!({"error": kind(code), "message": message, "exit": code})
    );
}
