//! `leasehold leader NAME`: who leads an election now.

use std::process::ExitCode;

use serde_json::json;

use crate::cli::{Connection, LeaderArgs};

/// Prints `FENCE VALUE` for the current leader, or nothing (and a note on
/// stderr) when nobody leads; both exit 0.
pub(crate) async fn leader(conn: &Connection, args: LeaderArgs) -> anyhow::Result<ExitCode> {
    let client = conn.client(leasehold::DEFAULT_LEASE, false, None)?;
    let leader = client.election(&args.name)?.leader().await?;
    if args.json {
        let leader = leader.map(|l| json!({ "value": l.value, "fence": l.fence }));
        println!("{}", json!({ "name": args.name, "leader": leader }));
    } else {
        match leader {
            Some(leader) => println!("{} {}", leader.fence, leader.value),
            None => eprintln!("leasehold: nobody leads election {:?}", args.name),
        }
    }
    Ok(ExitCode::SUCCESS)
}
