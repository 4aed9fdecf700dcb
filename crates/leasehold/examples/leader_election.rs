//! Leader election with failover: two candidate processes campaign, one
//! leads; it is killed (SIGKILL, no goodbye), and once its lease runs out
//! the other takes over. An observer follows the changes.
//!
//! Run against your Redis (default `redis://127.0.0.1:6379`, or `LEASEHOLD_URL`):
//!
//!     cargo run -p leasehold --example leader_election

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use leasehold::Leader;

/// How long the service may go without a leader when one dies.
const LEASE: Duration = Duration::from_secs(1);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var("LEASEHOLD_URL").unwrap_or_else(|_| leasehold::DEFAULT_URL.into());
    let args: Vec<String> = std::env::args().collect();
    if let [_, role, value] = args.as_slice() {
        if role == "candidate" {
            return campaign(&url, value).await;
        }
    }

    let client = leasehold::Client::open(&url)?;
    let election = client.election("example:scheduler")?;
    let mut observer = election.observe().await?;
    if let Some(leader) = &*observer.borrow_and_update() {
        return Err(format!("{} already leads: is another run going on?", leader.value).into());
    }

    let a = Candidate::start("host-a")?;
    let first = next_leader(&mut observer).await?;
    println!("{} leads (fence {})", first.value, first.fence);
    // The second candidate waits in line behind the leader.
    let b = Candidate::start("host-b")?;
    let (mut leader, mut standby) = if first.value == "host-a" {
        (a, b)
    } else {
        (b, a)
    };
    leader.says("leading")?;

    leader.kill()?;
    println!(
        "{} was killed; its lease runs out within {LEASE:?}",
        first.value
    );
    let second = next_leader(&mut observer).await?;
    println!(
        "{} took over (fence {}, after fence {})",
        second.value, second.fence, first.fence
    );
    standby.says("leading")?;
    if second.value == first.value || second.fence <= first.fence {
        return Err("the standby did not take over".into());
    }
    standby.kill()?;
    Ok(())
}

/// The next leader the observer reports (skipping "nobody leads").
async fn next_leader(
    observer: &mut tokio::sync::watch::Receiver<Option<Leader>>,
) -> Result<Leader, BoxError> {
    loop {
        observer.changed().await?;
        if let Some(leader) = observer.borrow_and_update().clone() {
            return Ok(leader);
        }
    }
}

/// A candidate process; it dies with the parent (its stdin closes).
struct Candidate {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Candidate {
    fn start(value: &str) -> Result<Candidate, BoxError> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["candidate", value])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Candidate { child, out })
    }

    /// Reads the candidate's next line, which must be `what`.
    fn says(&mut self, what: &str) -> Result<(), BoxError> {
        let mut line = String::new();
        self.out.read_line(&mut line)?;
        if line.trim() != what {
            return Err(format!("candidate said {line:?}, not {what:?}").into());
        }
        Ok(())
    }

    fn kill(&mut self) -> Result<(), BoxError> {
        self.child.kill()?; // SIGKILL: no release, no resignation
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What each candidate process runs: lead until the leadership is lost or
/// the parent goes away.
async fn campaign(url: &str, value: &str) -> Result<(), BoxError> {
    let client = leasehold::Client::open(url)?;
    let election = client.election("example:scheduler")?.with_lease(LEASE)?;
    // The parent holds our stdin: it closes when the parent goes away.
    let (gone, mut parent_gone) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read(&mut [0u8; 1]);
        let _ = gone.send(());
    });
    let leadership = tokio::select! {
        won = election.campaign(value) => won?,
        _ = &mut parent_gone => return Ok(()),
    };
    println!("leading");
    tokio::select! {
        () = leadership.lost() => eprintln!("{value}: leadership lost"),
        _ = parent_gone => {}
    }
    leadership.resign().await.ok();
    client.flush().await;
    Ok(())
}
