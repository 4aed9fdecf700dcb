//! One Redis server: every key is served by it, over one healing command
//! connection and one subscriber connection.

use std::sync::Arc;
use std::time::Duration;

use crate::conn::notify::Notifier;
use crate::conn::route::Route;
use crate::conn::scripts::Publish;
use crate::conn::{Connection, Line};
use crate::deploy::{BoxFuture, Deployment};
use crate::error::verdict::Redirect;
use crate::error::Result;

#[derive(Debug)]
pub(crate) struct Standalone {
    connection: Arc<Connection>,
    notifier: Notifier,
}

impl Standalone {
    pub(crate) fn new(redis: redis::Client, command_timeout: Duration) -> Self {
        let address = redis.get_connection_info().addr().to_string();
        Standalone {
            notifier: Notifier::new(redis.clone(), command_timeout),
            connection: Arc::new(Connection::new(redis, address, command_timeout)),
        }
    }
}

impl Deployment for Standalone {
    fn address(&self) -> &str {
        &self.connection.address
    }

    fn command_timeout(&self) -> Duration {
        self.connection.timeout
    }

    fn route<'a>(&'a self, _key: &'a str) -> BoxFuture<'a, Result<Route>> {
        Box::pin(async move {
            let checkout = self.connection.get().await?;
            Ok(Route::new(
                Arc::clone(&self.connection),
                checkout,
                Publish::Classic,
            ))
        })
    }

    fn route_ready(&self, _key: &str) -> Option<Route> {
        let checkout = self.connection.fresh(Line::Commands)?;
        Some(Route::new(
            Arc::clone(&self.connection),
            checkout,
            Publish::Classic,
        ))
    }

    fn follow<'a>(
        &'a self,
        _key: &'a str,
        _redirect: &'a Redirect,
    ) -> Option<BoxFuture<'a, Result<Route>>> {
        None
    }

    fn server_of(&self, _key: &str) -> usize {
        0
    }

    fn notifier(&self, _key: &str) -> Option<Notifier> {
        Some(self.notifier.clone())
    }
}
