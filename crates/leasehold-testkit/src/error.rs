use std::fmt;

/// Why a `redis-server` or [`FaultProxy`](crate::FaultProxy) could not be
/// started, or a [`RedisServer::command`](crate::RedisServer::command) could
/// not be carried out.
///
/// The message says what happened and, when the server got far enough to
/// write one, includes its log file contents.
#[derive(Debug)]
pub struct StartError {
    kind: Kind,
    message: String,
    source: Option<std::io::Error>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    NotFound,
    PortInUse,
    TlsUnsupported,
    Other,
}

/// The one-line message used when no `redis-server` binary can be found.
pub(crate) const NOT_FOUND_MESSAGE: &str = "redis-server not found on PATH: install it \
     (Debian/Ubuntu: apt-get install redis-server) or set LEASEHOLD_REDIS_SERVER";

impl StartError {
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self {
            kind: Kind::NotFound,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn port_in_use(message: impl Into<String>) -> Self {
        Self {
            kind: Kind::PortInUse,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn tls_unsupported(message: impl Into<String>) -> Self {
        Self {
            kind: Kind::TlsUnsupported,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn other(message: impl Into<String>) -> Self {
        Self {
            kind: Kind::Other,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn io(message: impl Into<String>, source: std::io::Error) -> Self {
        Self {
            kind: Kind::Other,
            message: message.into(),
            source: Some(source),
        }
    }

    /// True if no `redis-server` binary could be found (not on `PATH`, or
    /// `$LEASEHOLD_REDIS_SERVER` does not name an executable file). Lets a
    /// test choose to skip rather than fail.
    pub fn is_not_found(&self) -> bool {
        self.kind == Kind::NotFound
    }

    /// True if the server refused its `tls-*` arguments because the binary
    /// was built without TLS support. Lets a TLS test skip rather than fail
    /// on such a build.
    pub fn is_tls_unsupported(&self) -> bool {
        self.kind == Kind::TlsUnsupported
    }

    pub(crate) fn is_port_in_use(&self) -> bool {
        self.kind == Kind::PortInUse
    }
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
