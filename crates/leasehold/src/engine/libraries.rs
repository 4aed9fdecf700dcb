//! The Redis Functions libraries of leasehold on every master: which are
//! there, which connected clients may still call, and the removal of the
//! others. Every version of leasehold loads a library of its own (its name
//! carries a hash of its scripts) and nothing else removes one.
//!
//! A client says which libraries it may call in the version it gives its
//! connections (`CLIENT SETINFO LIB-NAME leasehold LIB-VER …`, read back
//! with `CLIENT LIST`). Clients of leasehold from before it did so show the
//! name of the redis crate (`redis-rs`), and a server older than 7.2 shows
//! no library names at all: what they call cannot be told, and a library
//! is removed then only when forced. A client that finds its library gone
//! loads it again (one more round trip, on its next call), so a removal
//! that was wrong costs that, not a failed lock call.

use std::sync::Arc;

use redis::Value;

use crate::conn::route::Route;
use crate::conn::scripts::{self, CLIENT_LIB_NAME, LIBRARY_PREFIX};
use crate::deploy::backing::Backing;
use crate::deploy::store::Store;
use crate::engine::state::Engine;
use crate::error::{Error, Result};

/// The name the redis crate gives a connection when nobody names it: a
/// client of leasehold from before it named its connections.
const REDIS_RS: &str = "redis-rs";

/// One leasehold Functions library on one master, as
/// [`Client::script_libraries`](crate::Client::script_libraries) finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScriptLibrary {
    /// The master it is loaded on (host and port).
    pub server: String,
    /// Its name (`leasehold_` and a hash of its scripts).
    pub name: String,
    /// It is one this version of leasehold loads.
    pub this_version: bool,
    /// Connected clients that said they may call it (this client's
    /// connections included).
    pub clients: usize,
    /// Connected clients that may be leasehold from before clients said
    /// which library they call (they name the redis crate alone), or
    /// `None` when the server cannot tell (older than Redis 7.2: no
    /// client says its library).
    pub unknown_clients: Option<usize>,
    /// It was removed by this call.
    pub removed: bool,
}

impl ScriptLibrary {
    /// No connected client may call it, as far as the server can tell.
    pub fn is_unused(&self) -> bool {
        !self.this_version && self.clients == 0 && self.unknown_clients == Some(0)
    }

    /// May be removed: unused, or, when `force`d, used by no client that
    /// said it calls it (the unknown clients are ignored).
    fn removable(&self, force: bool) -> bool {
        !self.this_version && self.clients == 0 && (force || self.unknown_clients == Some(0))
    }
}

/// What the connected clients of one server say of the libraries they
/// call.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Callers {
    /// The library versions each leasehold client said it may call.
    pub(crate) announced: Vec<Vec<String>>,
    /// Clients that name the redis crate alone, or `None` when the server
    /// shows no library names.
    pub(crate) unknown: Option<usize>,
}

impl Callers {
    /// Reads `CLIENT LIST`.
    pub(crate) fn from_client_list(text: &str) -> Callers {
        let mut callers = Callers {
            announced: Vec::new(),
            unknown: Some(0),
        };
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            };
            let Some(lib_name) = field("lib-name") else {
                callers.unknown = None;
                continue;
            };
            if lib_name == CLIENT_LIB_NAME {
                let versions = field("lib-ver")
                    .unwrap_or_default()
                    .split('-')
                    .map(str::to_owned)
                    .collect();
                callers.announced.push(versions);
            } else if lib_name == REDIS_RS {
                callers.unknown = callers.unknown.map(|n| n + 1);
            }
        }
        callers
    }

    /// How many clients said they may call the library `name`.
    fn calling(&self, name: &str) -> usize {
        let Some(version) = name.strip_prefix(LIBRARY_PREFIX) else {
            return 0;
        };
        self.announced
            .iter()
            .filter(|versions| versions.iter().any(|v| v == version))
            .count()
    }
}

/// The names of the leasehold libraries in a `FUNCTION LIST` reply.
pub(crate) fn library_names(reply: &Value) -> Option<Vec<String>> {
    let Value::Array(libraries) = reply else {
        return None;
    };
    let mut names = Vec::new();
    for library in libraries {
        let fields: Vec<(String, &Value)> = match library {
            Value::Array(items) => items
                .chunks(2)
                .filter_map(|pair| Some((scripts::as_text(pair.first()?)?, pair.get(1)?)))
                .collect(),
            Value::Map(pairs) => pairs
                .iter()
                .filter_map(|(k, v)| Some((scripts::as_text(k)?, v)))
                .collect(),
            _ => return None,
        };
        let name = fields
            .iter()
            .find(|(k, _)| k == "library_name")
            .and_then(|(_, v)| scripts::as_text(v))?;
        if name.starts_with(LIBRARY_PREFIX) {
            names.push(name);
        }
    }
    names.sort();
    Some(names)
}

fn stores(engine: &Engine) -> Vec<Arc<Store>> {
    match &engine.backing {
        Backing::One(store) => vec![Arc::clone(store)],
        Backing::Quorum(quorum) => quorum.masters.clone(),
    }
}

/// Lists the leasehold libraries of every master, and removes those
/// [`ScriptLibrary::removable`] says may go when `remove` is set.
pub(crate) async fn libraries(engine: &Engine, remove: Option<bool>) -> Result<Vec<ScriptLibrary>> {
    let mut found = Vec::new();
    for store in stores(engine) {
        for route in store.masters().await? {
            found.extend(on_master(&route, remove).await?);
        }
    }
    Ok(found)
}

async fn on_master(route: &Route, remove: Option<bool>) -> Result<Vec<ScriptLibrary>> {
    let server = route.address().to_owned();
    let mut pipe = redis::pipe();
    pipe.ignore_errors()
        .cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg(format!("{LIBRARY_PREFIX}*"))
        .cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("normal");
    let replies = route
        .pipeline("listing the Functions libraries", &pipe)
        .await?;
    let [list, clients] = replies.as_slice() else {
        return Err(Error::unexpected_reply(
            "FUNCTION LIST",
            &Value::Array(replies),
        ));
    };
    if let Value::ServerError(e) = list {
        // A server without Functions (Redis 6.2) has no library to list.
        if matches!(e.code(), "ERR") && e.details().unwrap_or("").contains("unknown command") {
            return Ok(Vec::new());
        }
        return Err(Error::unexpected_reply("FUNCTION LIST", list));
    }
    let names =
        library_names(list).ok_or_else(|| Error::unexpected_reply("FUNCTION LIST", list))?;
    let text =
        scripts::as_text(clients).ok_or_else(|| Error::unexpected_reply("CLIENT LIST", clients))?;
    let callers = Callers::from_client_list(&text);
    let current = [
        scripts::Scripts::get(scripts::Publish::Classic)
            .library
            .name
            .as_str(),
        scripts::Scripts::get(scripts::Publish::Sharded)
            .library
            .name
            .as_str(),
    ];
    let mut libraries = Vec::new();
    for name in names {
        let mut library = ScriptLibrary {
            server: server.clone(),
            this_version: current.contains(&name.as_str()),
            clients: callers.calling(&name),
            unknown_clients: callers.unknown,
            removed: false,
            name,
        };
        if remove.is_some_and(|force| library.removable(force)) {
            let mut delete = redis::pipe();
            delete
                .ignore_errors()
                .cmd("FUNCTION")
                .arg("DELETE")
                .arg(&library.name);
            let reply = route
                .pipeline("removing a Functions library", &delete)
                .await?;
            match reply.first() {
                Some(Value::ServerError(e)) if !is_gone(e) => {
                    return Err(Error::unexpected_reply(
                        "FUNCTION DELETE",
                        &Value::ServerError(e.clone()),
                    ))
                }
                _ => library.removed = true,
            }
        }
        libraries.push(library);
    }
    Ok(libraries)
}

/// Another operator removed it first.
fn is_gone(e: &redis::ServerError) -> bool {
    e.details().unwrap_or("").contains("not exist")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_say_which_libraries_they_call() {
        let text = "id=3 addr=1 lib-name=leasehold lib-ver=0.1.0-aaaa-bbbb\n\
                    id=4 addr=2 lib-name=redis-rs lib-ver=1.8.1\n\
                    id=5 addr=3 lib-name= lib-ver=\n\
                    id=6 addr=4 lib-name=leasehold lib-ver=0.2.0-cccc-dddd\n";
        let callers = Callers::from_client_list(text);
        assert_eq!(callers.unknown, Some(1));
        assert_eq!(callers.calling("leasehold_aaaa"), 1);
        assert_eq!(callers.calling("leasehold_dddd"), 1);
        assert_eq!(callers.calling("leasehold_eeee"), 0);
        // A server older than 7.2 shows no library names.
        let old = Callers::from_client_list("id=3 addr=1 name= cmd=client\n");
        assert_eq!(old.unknown, None);
    }

    #[test]
    fn only_libraries_nobody_may_call_are_removed_unless_forced() {
        let library = |this_version, clients, unknown_clients| ScriptLibrary {
            server: String::new(),
            name: "leasehold_aaaa".into(),
            this_version,
            clients,
            unknown_clients,
            removed: false,
        };
        assert!(library(false, 0, Some(0)).removable(false));
        assert!(!library(true, 0, Some(0)).removable(true));
        assert!(!library(false, 1, Some(0)).removable(true));
        assert!(!library(false, 0, Some(2)).removable(false));
        assert!(library(false, 0, Some(2)).removable(true));
        assert!(!library(false, 0, None).removable(false));
        assert!(library(false, 0, None).removable(true));
    }
}
