//! Tasks of one client waiting for the same `Mutex` or `FairMutex` queue
//! here, so that only the head of the queue talks to Redis.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

#[derive(Debug, Default)]
pub(crate) struct LocalQueues {
    queues: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl LocalQueues {
    /// The queue of `key`; tokio's mutex hands itself over in FIFO order.
    pub(crate) fn queue(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(queue) = queues.get(key).and_then(Weak::upgrade) {
            return queue;
        }
        queues.retain(|_, q| q.strong_count() > 0);
        let queue = Arc::new(tokio::sync::Mutex::new(()));
        queues.insert(key.to_owned(), Arc::downgrade(&queue));
        queue
    }
}
