//! The deployment a client finds behind its URLs: a Redis Cluster when the
//! first seed that answers runs in cluster mode, else that one server. A
//! seed that cannot be reached is skipped; the finding is made on the
//! first request and kept.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::conn::notify::Notifier;
use crate::conn::route::Route;
use crate::deploy::cluster::{Cluster, NodeFactory};
use crate::deploy::standalone::Standalone;
use crate::deploy::{BoxFuture, Deployment};
use crate::error::verdict::Redirect;
use crate::error::{Error, Result};

#[derive(Debug)]
pub(crate) struct Detect {
    seeds: Vec<redis::Client>,
    /// Each seed as one server, kept across tries: callers queued behind a
    /// connect that failed take its outcome instead of connecting again.
    servers: Vec<Arc<Standalone>>,
    command_timeout: Duration,
    /// The seeds, for messages until the deployment is known.
    address: String,
    found: OnceLock<Arc<dyn Deployment>>,
}

impl Detect {
    /// A deployment to be found behind `seeds`, tried in order (at least one).
    pub(crate) fn new(seeds: Vec<redis::Client>, command_timeout: Duration) -> Self {
        let address = seeds
            .iter()
            .map(|seed| seed.get_connection_info().addr().to_string())
            .collect::<Vec<_>>()
            .join(",");
        let servers = seeds
            .iter()
            .map(|seed| Arc::new(Standalone::new(seed.clone(), command_timeout)))
            .collect();
        Detect {
            seeds,
            servers,
            command_timeout,
            address,
            found: OnceLock::new(),
        }
    }

    async fn detect(&self) -> Result<Arc<dyn Deployment>> {
        let mut failure = None;
        for (seed, server) in self.seeds.iter().zip(&self.servers) {
            match server.route("").await {
                Ok(route) if route.server().cluster => {
                    let seeds = self.seeds.iter().filter_map(host_and_port).collect();
                    return Ok(Arc::new(Cluster::new(
                        NodeFactory::new(seed),
                        seeds,
                        self.command_timeout,
                        route.server().sharded_pubsub,
                    )));
                }
                Ok(_) => return Ok(Arc::clone(server) as Arc<dyn Deployment>),
                // Down, or out of reach: the next seed may answer.
                Err(error) if error.is_connection() => failure = Some(error),
                Err(error) => return Err(error),
            }
        }
        Err(failure.unwrap_or_else(|| Error::invalid("no redis URL was given: give at least one")))
    }

    /// The deployment, found on the first request that reaches a seed.
    /// Callers that ask meanwhile each look, sharing each seed's connect
    /// (and its failure), and the first finding is kept.
    async fn deployment(&self) -> Result<&Arc<dyn Deployment>> {
        if let Some(found) = self.found.get() {
            return Ok(found);
        }
        let found = self.detect().await?;
        Ok(self.found.get_or_init(|| found))
    }
}

/// A seed's host and port.
fn host_and_port(seed: &redis::Client) -> Option<(String, u16)> {
    match seed.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
        _ => None,
    }
}

impl Deployment for Detect {
    fn address(&self) -> &str {
        self.found
            .get()
            .map_or(&self.address, |found| found.address())
    }

    fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    fn route<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Route>> {
        Box::pin(async move { self.deployment().await?.route(key).await })
    }

    fn route_ready(&self, key: &str) -> Option<Route> {
        self.found.get()?.route_ready(key)
    }

    fn follow<'a>(
        &'a self,
        key: &'a str,
        redirect: &'a Redirect,
    ) -> Option<BoxFuture<'a, Result<Route>>> {
        self.found.get()?.follow(key, redirect)
    }

    fn failed_over<'a>(&'a self, key: &'a str) -> Option<BoxFuture<'a, Result<Route>>> {
        self.found.get()?.failed_over(key)
    }

    fn server_of(&self, key: &str) -> usize {
        self.found.get().map_or(0, |found| found.server_of(key))
    }

    fn notifier(&self, key: &str) -> Option<Notifier> {
        self.found.get()?.notifier(key)
    }

    fn masters(&self) -> BoxFuture<'_, Result<Vec<Route>>> {
        Box::pin(async move { self.deployment().await?.masters().await })
    }
}
