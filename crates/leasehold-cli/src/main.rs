//! `leasehold`: run a command under a Redis lock, or take and give back
//! locks from shell scripts.
//!
//! Exit codes (sysexits where one fits):
//!
//! | code | meaning |
//! |---|---|
//! | the command's | `run`: the command ran with the lease held; its own code (128+N if killed by signal N) |
//! | 0 | the other commands: done (`demo`: no update was lost; `watch`: stopped with Ctrl-C) |
//! | 1 | an unexpected error (an odd reply from Redis); `demo`: an update was lost |
//! | 2 | usage: a bad flag, duration, lease or lock name |
//! | 69 | Redis cannot be reached (`demo`: `redis-server` is not installed) |
//! | 75 | the lock is held by someone else and the wait ran out (or `--no-wait`) |
//! | 76 | `run`: the lease was lost while the command ran, or the release after it got no answer (both unless `--on-lost ignore`), or the lease ran out before the command could start (nothing was run); `release` / `extend`: the token no longer holds the lock |
//! | 77 | Redis refused the credentials: a wrong or missing password or user, or an ACL user without the rights |
//! | 78 | Redis refused the connection settings: a database number it does not have, TLS on a port without it, an untrusted certificate |
//! | 128+N | `run`: signal N ended the wait before the lock was taken; `demo`: signal N stopped it early |
//! | 127 / 126 | `run`: the command was not found / could not be executed |

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod cli;
mod demo;
mod duration;
mod exit;
mod leader;
mod private_redis;
mod runner;
mod screen;
mod scripting;
mod signals;
mod terminal;
mod warden;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    if warden::is_warden() {
        warden::main();
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => {
            // --help and --version.
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            // One line, as for every other error; `--help` has the rest.
            let rendered = err.render().to_string();
            let first = rendered.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("leasehold: {first} (see leasehold --help)");
            return ExitCode::from(exit::USAGE);
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("leasehold: {err:#}");
            ExitCode::from(exit::code_for(&err))
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // One thread: PR_SET_PDEATHSIG follows the thread that spawned the child,
    // and the main thread lives as long as the runner.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Demo(args) => demo::demo(&cli.connection, args).await,
            Command::Watch(args) => watch::watch(&cli.connection, args).await,
            Command::Leader(args) => leader::leader(&cli.connection, args).await,
            Command::Run(args) => runner::run(&cli.connection, args).await,
            Command::Acquire(args) => scripting::acquire(&cli.connection, args).await,
            Command::Release(args) => scripting::release(&cli.connection, args).await,
            Command::Extend(args) => scripting::extend(&cli.connection, args).await,
            Command::Inspect(args) => scripting::inspect(&cli.connection, args).await,
            Command::ForceRelease(args) => scripting::force_release(&cli.connection, args).await,
        }
    })
}
