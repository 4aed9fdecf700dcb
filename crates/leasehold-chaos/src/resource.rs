//! The fenced resource: a small TCP server of registers that accepts a read
//! or a write only with a fence at least as large as the largest it has
//! accepted for that register, and logs every request in the order it
//! served them. Workers do their read-modify-writes on it; the checker reads
//! its log.
//!
//! One request per line, one reply per line:
//!
//! ```text
//! R <register> <fence> <worker>           -> OK <value> | NO <largest fence>
//! W <register> <fence> <value> <worker>   -> OK <value> | NO <largest fence>
//! ```

use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::TcpStream as AsyncTcpStream;

use crate::events::{mono_ns, Op};

const POLL: Duration = Duration::from_millis(20);

/// One request as the resource served it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Served {
    pub(crate) at: u64,
    pub(crate) worker: String,
    pub(crate) register: String,
    pub(crate) op: Op,
    pub(crate) fence: u64,
    /// The value written, or the value a read returned.
    pub(crate) value: u64,
    pub(crate) accepted: bool,
}

impl fmt::Display for Served {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.at,
            self.worker,
            self.register,
            self.op.as_str(),
            self.fence,
            self.value,
            if self.accepted { "ok" } else { "no" }
        )
    }
}

impl FromStr for Served {
    type Err = String;
    fn from_str(line: &str) -> Result<Self, String> {
        let f: Vec<&str> = line.split('\t').collect();
        let [at, worker, register, op, fence, value, accepted] = f.as_slice() else {
            return Err(format!("not a served request: {line:?}"));
        };
        let num =
            |s: &str| -> Result<u64, String> { s.parse().map_err(|e| format!("{line:?}: {e}")) };
        Ok(Served {
            at: num(at)?,
            worker: (*worker).to_owned(),
            register: (*register).to_owned(),
            op: op.parse()?,
            fence: num(fence)?,
            value: num(value)?,
            accepted: match *accepted {
                "ok" => true,
                "no" => false,
                other => return Err(format!("{line:?}: not ok or no: {other:?}")),
            },
        })
    }
}

#[derive(Debug, Default)]
struct Register {
    value: u64,
    largest_fence: u64,
}

#[derive(Debug, Default)]
struct State {
    registers: HashMap<String, Register>,
    log: Vec<Served>,
}

#[derive(Debug)]
struct Shared {
    /// Off: every request is accepted (to show what the checker finds
    /// when a resource ignores fences).
    fenced: bool,
    stopping: AtomicBool,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn serve(&self, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        let parsed = match words.as_slice() {
            ["R", register, fence, worker] => fence
                .parse::<u64>()
                .ok()
                .map(|f| (Op::Read, *register, f, 0, *worker)),
            ["W", register, fence, value, worker] => match (fence.parse(), value.parse()) {
                (Ok(f), Ok(v)) => Some((Op::Write, *register, f, v, *worker)),
                _ => None,
            },
            _ => None,
        };
        let Some((op, register, fence, value, worker)) = parsed else {
            return format!("ERR cannot read {line:?}");
        };
        let mut state = self.lock();
        let State { registers, log } = &mut *state;
        let reg = registers.entry(register.to_owned()).or_default();
        let accepted = !self.fenced || fence >= reg.largest_fence;
        let reply = if accepted {
            reg.largest_fence = reg.largest_fence.max(fence);
            if op == Op::Write {
                reg.value = value;
            }
            format!("OK {}", reg.value)
        } else {
            format!("NO {}", reg.largest_fence)
        };
        log.push(Served {
            at: mono_ns(),
            worker: worker.to_owned(),
            register: register.to_owned(),
            op,
            fence,
            value: if op == Op::Write { value } else { reg.value },
            accepted,
        });
        reply
    }
}

/// The running resource server, on a free loopback port.
#[derive(Debug)]
pub(crate) struct Resource {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Resource {
    pub(crate) fn start(fenced: bool) -> Result<Resource> {
        let listener = bind_loopback().context("cannot bind the fenced resource")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            fenced,
            stopping: AtomicBool::new(false),
            state: Mutex::new(State::default()),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name("resource-accept".into())
                .spawn(move || accept_loop(&listener, &shared))?
        };
        Ok(Resource {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request served so far, in the order served.
    pub(crate) fn log(&self) -> Vec<Served> {
        self.shared.lock().log.clone()
    }
}

impl Drop for Resource {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// The machine's own Redis answers on 6379: a free port, never that one
/// (held while the next is bound, so the kernel cannot hand it out again).
fn bind_loopback() -> std::io::Result<TcpListener> {
    let first = TcpListener::bind(("127.0.0.1", 0))?;
    if first.local_addr()?.port() != REDIS_PORT {
        return Ok(first);
    }
    TcpListener::bind(("127.0.0.1", 0))
}

const REDIS_PORT: u16 = 6379;

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut connections = Vec::new();
    while !shared.stopping.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let shared = Arc::clone(shared);
                if let Ok(handle) = thread::Builder::new()
                    .name("resource-conn".into())
                    .spawn(move || serve_connection(stream, &shared))
                {
                    connections.push(handle);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(POLL),
            Err(_) => thread::sleep(POLL),
        }
    }
    for handle in connections {
        let _ = handle.join();
    }
}

fn serve_connection(stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(POLL * 5));
    let _ = stream.set_nodelay(true);
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while !shared.stopping.load(Ordering::SeqCst) {
        match reader.read_line(&mut line) {
            Ok(0) => return,
            Ok(_) => {
                if !line.ends_with('\n') {
                    continue;
                }
                let reply = shared.serve(line.trim_end());
                line.clear();
                if writer.write_all(format!("{reply}\n").as_bytes()).is_err() {
                    return;
                }
            }
            // A timeout keeps what was read so far in `line`.
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

/// A worker's connection to the resource. A request cut short (the lease
/// was lost while it was in flight) leaves the connection unusable, so the
/// next request makes a new one.
#[derive(Debug)]
pub(crate) struct ResourceClient {
    addr: SocketAddr,
    worker: String,
    conn: Option<AsyncBufReader<AsyncTcpStream>>,
}

/// The resource's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    Accepted(u64),
    Refused,
}

impl ResourceClient {
    pub(crate) fn new(addr: SocketAddr, worker: &str) -> ResourceClient {
        ResourceClient {
            addr,
            worker: worker.to_owned(),
            conn: None,
        }
    }

    pub(crate) async fn read(&mut self, register: &str, fence: u64) -> Result<Reply> {
        let worker = self.worker.clone();
        self.request(&format!("R {register} {fence} {worker}"))
            .await
    }

    pub(crate) async fn write(&mut self, register: &str, fence: u64, value: u64) -> Result<Reply> {
        let worker = self.worker.clone();
        self.request(&format!("W {register} {fence} {value} {worker}"))
            .await
    }

    async fn request(&mut self, line: &str) -> Result<Reply> {
        let mut conn = match self.conn.take() {
            Some(conn) => conn,
            None => {
                let stream = AsyncTcpStream::connect(self.addr)
                    .await
                    .context("cannot reach the fenced resource")?;
                stream.set_nodelay(true)?;
                AsyncBufReader::new(stream)
            }
        };
        conn.get_mut()
            .write_all(format!("{line}\n").as_bytes())
            .await?;
        let mut reply = String::new();
        conn.read_line(&mut reply).await?;
        // Only a whole exchange gives the connection back.
        self.conn = Some(conn);
        let mut words = reply.split_whitespace();
        match (words.next(), words.next().map(str::parse::<u64>)) {
            (Some("OK"), Some(Ok(value))) => Ok(Reply::Accepted(value)),
            (Some("NO"), _) => Ok(Reply::Refused),
            _ => Err(anyhow!("the resource answered {reply:?} to {line:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_smaller_fence_is_refused_and_every_request_is_logged() {
        let resource = Resource::start(true).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut a = ResourceClient::new(resource.addr(), "a");
            let mut b = ResourceClient::new(resource.addr(), "b");
            assert_eq!(a.read("r", 5).await.unwrap(), Reply::Accepted(0));
            assert_eq!(b.read("r", 7).await.unwrap(), Reply::Accepted(0));
            assert_eq!(a.write("r", 5, 1).await.unwrap(), Reply::Refused);
            assert_eq!(b.write("r", 7, 1).await.unwrap(), Reply::Accepted(1));
            assert_eq!(b.read("other", 1).await.unwrap(), Reply::Accepted(0));
        });
        let log = resource.log();
        let accepted: Vec<bool> = log.iter().map(|s| s.accepted).collect();
        assert_eq!(accepted, [true, true, false, true, true]);
        assert_eq!(log[2].worker, "a");
        assert_eq!((log[2].op, log[2].fence, log[2].value), (Op::Write, 5, 1));
    }

    #[test]
    fn the_kept_resource_log_reads_back() {
        let served = Served {
            at: 12,
            worker: "w3".into(),
            register: "mutex-0".into(),
            op: Op::Write,
            fence: 1_700_000_000_000_001,
            value: 9,
            accepted: false,
        };
        assert_eq!(served.to_string().parse::<Served>().unwrap(), served);
        assert!("1\tw\tr\tx\t1\t1\tok".parse::<Served>().is_err());
    }

    #[test]
    fn an_unfenced_resource_accepts_everything() {
        let resource = Resource::start(false).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut a = ResourceClient::new(resource.addr(), "a");
            assert_eq!(a.read("r", 9).await.unwrap(), Reply::Accepted(0));
            assert_eq!(a.write("r", 3, 4).await.unwrap(), Reply::Accepted(4));
        });
        assert!(resource.log().iter().all(|s| s.accepted));
    }
}
