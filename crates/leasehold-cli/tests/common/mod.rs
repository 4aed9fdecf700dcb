//! Running the `leasehold` binary from the tests: one way for every test
//! file that has no older helpers of its own.
#![allow(dead_code)]

use std::process::{Child, Command, Output, Stdio};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// `leasehold --url URL ARGS…`, with the environment's URLs removed and
/// never the harness's terminal as input (a runner at a terminal hands it
/// over).
pub(crate) fn command(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("LEASEHOLD_URL")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

pub(crate) fn leasehold(url: &str, args: &[&str]) -> Output {
    command(url, args).output().unwrap()
}

pub(crate) fn spawn(url: &str, args: &[&str]) -> Child {
    command(url, args).spawn().unwrap()
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}
