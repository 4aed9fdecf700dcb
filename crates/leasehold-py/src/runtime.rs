//! The tokio runtime every call runs on: one per process, on a thread of its
//! own, made again in a child after `fork()` (a runtime's threads do not
//! survive a fork), and what lives on it.

use std::cell::OnceCell;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use pyo3::prelude::*;
use pyo3_async_runtimes::generic::{ContextExt, JoinError, Runtime as AsyncRuntime};
use pyo3_async_runtimes::TaskLocals;
use tokio::runtime::Handle;
use tokio::sync::Notify;

use crate::error::Fail;

/// The runtime of one process: its handle and the pid it was made in.
struct Rt {
    pid: u32,
    handle: Handle,
    /// Wakes the blocking waits now and then (see [`block_on_interruptible`]).
    tick: Arc<Notify>,
}

/// The current process's runtime, or one a parent made before it forked
/// (never dropped: its threads are not ours), or null.
static CURRENT: AtomicPtr<Rt> = AtomicPtr::new(std::ptr::null_mut());

/// Taken only to start a runtime, so that two threads do not both start one.
static STARTING: Mutex<()> = Mutex::new(());

/// This process's id: a child after `fork()` has another.
pub(crate) fn pid() -> u32 {
    std::process::id()
}

/// The runtime of this process, started on first use (again in a child).
pub(crate) fn handle() -> Result<Handle, Fail> {
    Ok(runtime()?.handle.clone())
}

/// This process's runtime, started on first use (again in a child).
fn runtime() -> Result<&'static Rt, Fail> {
    if let Some(rt) = current() {
        return Ok(rt);
    }
    let _starting = STARTING.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(rt) = current() {
        return Ok(rt);
    }
    let handle = start()?;
    let tick = Arc::new(Notify::new());
    handle.spawn(ticks(Arc::clone(&tick)));
    let rt = Box::new(Rt {
        pid: pid(),
        handle: handle.clone(),
        tick,
    });
    // The runtime it replaces, if any, belongs to the parent of a fork: it
    // is left as it is, never dropped.
    let rt: &'static Rt = Box::leak(rt);
    CURRENT.store(std::ptr::from_ref(rt).cast_mut(), Ordering::Release);
    Ok(rt)
}

fn current() -> Option<&'static Rt> {
    let rt = CURRENT.load(Ordering::Acquire);
    // SAFETY: a pointer stored in CURRENT comes from a leaked Box and is
    // never freed, so it stays valid for the life of the process.
    let rt: &'static Rt = unsafe { rt.as_ref() }?;
    (rt.pid == pid()).then_some(rt)
}

/// Wakes every blocking wait once per [`SIGNAL_CHECK`]: one timer for the
/// process, not one per call.
async fn ticks(tick: Arc<Notify>) {
    let mut every = tokio::time::interval(SIGNAL_CHECK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        tick.notify_waiters();
    }
}

/// Starts a current-thread runtime on a thread named `leasehold-runtime`
/// that drives connections, timers and the watchdog for as long as the
/// process lives.
fn start() -> Result<Handle, Fail> {
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("leasehold-runtime".to_owned())
        .spawn(move || {
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
            runtime.block_on(std::future::pending::<()>());
        })
        .map_err(|e| Fail::system(format!("cannot start leasehold's runtime thread: {e}")))?;
    match ready_rx.recv() {
        Ok(Ok(handle)) => Ok(handle),
        Ok(Err(e)) => Err(Fail::system(format!(
            "cannot build leasehold's tokio runtime: {e}"
        ))),
        Err(_) => Err(Fail::system(
            "leasehold's runtime thread ended as it started",
        )),
    }
}

/// Runs `future` on the calling thread, with the GIL released, until it is
/// done: for calls bounded by the command timeout.
pub(crate) fn block_on<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let handle = handle().map_err(|e| e.into_pyerr(py))?;
    Ok(py.detach(|| handle.block_on(future)))
}

/// As [`block_on`], for waits that may last: the wait comes back to Python
/// now and then to run its signal handlers (on the main thread), so that
/// Ctrl-C ends it; the future is then dropped, and the library undoes what
/// it started.
pub(crate) fn block_on_interruptible<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let rt = runtime().map_err(|e| e.into_pyerr(py))?;
    let mut future = std::pin::pin!(future);
    loop {
        let slice = py.detach(|| {
            rt.handle.block_on(async {
                tokio::select! {
                    biased;
                    output = future.as_mut() => Some(output),
                    () = rt.tick.notified() => None,
                }
            })
        });
        match slice {
            Some(output) => return Ok(output),
            None => py.check_signals()?,
        }
    }
}

/// How often a blocking wait lets Python run its signal handlers.
const SIGNAL_CHECK: std::time::Duration = std::time::Duration::from_millis(200);

/// Drops `value` where the library expects to be dropped: inside this
/// process's runtime, so that what it leaves to the background (a release,
/// a resignation) runs there.
pub(crate) fn drop_in_runtime<T>(value: T) {
    match handle() {
        Ok(handle) => {
            let _context = handle.enter();
            drop(value);
        }
        Err(_) => drop(value),
    }
}

/// A value that belongs to the process that made it. In a child after
/// `fork()` it is never dropped (its sockets, tasks and runtime are the
/// parent's); callers ask [`PerProcess::mine`] before using it.
pub(crate) struct PerProcess<T> {
    pid: u32,
    value: ManuallyDrop<T>,
}

impl<T> PerProcess<T> {
    pub(crate) fn new(value: T) -> Self {
        PerProcess {
            pid: pid(),
            value: ManuallyDrop::new(value),
        }
    }

    /// The value, if this process made it.
    pub(crate) fn mine(&self) -> Option<&T> {
        (self.pid == pid()).then_some(&*self.value)
    }

    /// The process that made it.
    pub(crate) fn owner_pid(&self) -> u32 {
        self.pid
    }
}

impl<T> Drop for PerProcess<T> {
    fn drop(&mut self) {
        if self.pid == pid() {
            // SAFETY: dropped once, here, and never used again.
            let value = unsafe { ManuallyDrop::take(&mut self.value) };
            drop_in_runtime(value);
        }
    }
}

/// A value made again in each process that uses it: the parent's is left
/// alone in a child, and a fresh one is built on first use there.
pub(crate) struct Rebuilt<T> {
    slot: Mutex<Option<PerProcess<T>>>,
}

impl<T: Clone> Rebuilt<T> {
    pub(crate) fn new(value: T) -> Self {
        Rebuilt {
            slot: Mutex::new(Some(PerProcess::new(value))),
        }
    }

    /// This process's value, if it has one yet.
    pub(crate) fn existing(&self) -> Option<T> {
        let slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        slot.as_ref().and_then(PerProcess::mine).cloned()
    }

    /// This process's value, built by `build` if this process has none.
    pub(crate) fn get(&self, build: impl FnOnce() -> Result<T, Fail>) -> Result<T, Fail> {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(value) = slot.as_ref().and_then(PerProcess::mine) {
            return Ok(value.clone());
        }
        let value = build()?;
        *slot = Some(PerProcess::new(value.clone()));
        Ok(value)
    }
}

/// The runtime of the awaitables handed to asyncio: futures run on this
/// process's runtime, their results go back to the caller's event loop.
pub(crate) struct Asyncio;

tokio::task_local! {
    static TASK_LOCALS: OnceCell<TaskLocals>;
}

/// Why a spawned task ended without its output.
pub(crate) struct TaskFailed(Option<tokio::task::JoinError>);

impl JoinError for TaskFailed {
    fn is_panic(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(tokio::task::JoinError::is_panic)
    }

    fn into_panic(self) -> Box<dyn std::any::Any + Send + 'static> {
        match self.0 {
            Some(e) if e.is_panic() => e.into_panic(),
            _ => Box::new("the task did not run"),
        }
    }
}

/// A spawned task's end.
pub(crate) struct Joined(Option<tokio::task::JoinHandle<()>>);

impl Future for Joined {
    type Output = Result<(), TaskFailed>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match self.0.as_mut() {
            None => std::task::Poll::Ready(Err(TaskFailed(None))),
            Some(task) => Pin::new(task)
                .poll(cx)
                .map(|joined| joined.map_err(|e| TaskFailed(Some(e)))),
        }
    }
}

impl AsyncRuntime for Asyncio {
    type JoinError = TaskFailed;
    type JoinHandle = Joined;

    fn spawn<F>(fut: F) -> Joined
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match handle() {
            Ok(handle) => Joined(Some(handle.spawn(fut))),
            Err(_) => Joined(None),
        }
    }

    fn spawn_blocking<F>(f: F) -> Joined
    where
        F: FnOnce() + Send + 'static,
    {
        match handle() {
            Ok(handle) => Joined(Some(handle.spawn_blocking(f))),
            Err(_) => Joined(None),
        }
    }
}

impl ContextExt for Asyncio {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = OnceCell::new();
        let _ = cell.set(locals);
        Box::pin(TASK_LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        TASK_LOCALS
            .try_with(|cell| cell.get().cloned())
            .unwrap_or_default()
    }
}
