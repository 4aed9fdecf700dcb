//! The runtime blocking calls run on: one current-thread tokio runtime on a
//! thread of its own, shared by every blocking client of the process.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle as TaskHandle;

use crate::error::{Error, ErrorKind, Result};

/// The runtime of the blocking clients alive now, if any.
static SHARED: Mutex<Weak<Runtime>> = Mutex::new(Weak::new());

/// A runtime whose thread drives timers, connections and background tasks
/// (the watchdog, background releases) while the calling threads poll
/// their own calls with [`Handle::block_on`].
pub(crate) struct Runtime {
    handle: Handle,
    /// Tells the thread to wait for these flushes and stop.
    stop: Option<oneshot::Sender<Vec<TaskHandle<()>>>>,
    thread: Option<JoinHandle<()>>,
    flushes: Mutex<Vec<TaskHandle<()>>>,
}

impl Runtime {
    /// The runtime in use, started if no blocking client holds one.
    pub(crate) fn shared() -> Result<Arc<Runtime>> {
        let mut slot = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(runtime) = slot.upgrade() {
            return Ok(runtime);
        }
        let runtime = Arc::new(Runtime::start()?);
        *slot = Arc::downgrade(&runtime);
        Ok(runtime)
    }

    fn start() -> Result<Runtime> {
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let (stop_tx, stop_rx) = oneshot::channel::<Vec<TaskHandle<()>>>();
        let thread = std::thread::Builder::new()
            .name("leasehold-blocking".to_owned())
            .spawn(move || {
                // Built, run and dropped on this thread, so that no caller
                // ever drops a runtime (which panics inside another one).
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(runtime.handle().clone()));
                runtime.block_on(async move {
                    if let Ok(flushes) = stop_rx.await {
                        for flush in flushes {
                            let _ = flush.await;
                        }
                    }
                });
            })
            .map_err(|e| {
                Error::new(
                    ErrorKind::System,
                    "cannot start a thread for leasehold's blocking runtime",
                )
                .with_source(e)
            })?;
        let handle = match ready_rx.recv() {
            Ok(Ok(handle)) => handle,
            Ok(Err(e)) => {
                return Err(Error::new(
                    ErrorKind::System,
                    "cannot build a tokio runtime for leasehold's blocking calls",
                )
                .with_source(e))
            }
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::System,
                    "the thread of leasehold's blocking runtime ended as it started",
                ))
            }
        };
        Ok(Runtime {
            handle,
            stop: Some(stop_tx),
            thread: Some(thread),
            flushes: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Runs `future` to its end on the calling thread, with this runtime's
    /// timers, connections and tasks.
    ///
    /// Refused inside an async runtime: blocking there stalls its thread,
    /// and on a current-thread runtime deadlocks a lock whose holder is a
    /// task of that runtime (the watchdog, here, keeps the holder's lease).
    pub(crate) fn block_on<F: Future>(&self, future: F) -> Result<F::Output> {
        outside_async()?;
        Ok(self.handle.block_on(future))
    }

    /// Flushes `client`'s background releases before this runtime stops.
    pub(crate) fn flush_later(&self, client: crate::Client) {
        let flush = self.handle.spawn(async move { client.flush().await });
        let mut flushes = self.flushes.lock().unwrap_or_else(PoisonError::into_inner);
        flushes.retain(|flush| !flush.is_finished());
        flushes.push(flush);
    }
}

/// Refuses a blocking call made inside an async runtime.
pub(crate) fn outside_async() -> Result<()> {
    if Handle::try_current().is_ok() {
        return Err(Error::invalid(
            "blocking leasehold call made inside an async runtime, whose thread it would stall: \
             use the async API (leasehold::Client) there, or call from a thread of your own",
        ));
    }
    Ok(())
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let flushes = std::mem::take(
            self.flushes
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(flushes);
        }
        // Inside an async runtime nothing may block: the thread then
        // finishes the flushes by itself, unless the process ends first.
        if outside_async().is_ok() {
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime").finish_non_exhaustive()
    }
}

/// What a blocking client and everything made from it share: the async
/// client and the runtime. Faces and guards hold it, so it is dropped
/// after the last guard, and its background releases are flushed before
/// the runtime stops.
pub(crate) struct Shared {
    pub(crate) client: crate::Client,
    pub(crate) runtime: Arc<Runtime>,
}

impl Shared {
    pub(crate) fn block_on<F: Future>(&self, future: F) -> Result<F::Output> {
        self.runtime.block_on(future)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.runtime.flush_later(self.client.clone());
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}
