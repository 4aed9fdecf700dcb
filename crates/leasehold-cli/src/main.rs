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
//! | 65 | the name is in use by another kind of lock (a mutex asked for `--read`, say), or by a semaphore of another size |
//! | 69 | Redis cannot be reached, or is not ready: loading, busy, failing over (`demo`: `redis-server` is not installed) |
//! | 74 | fewer replicas than asked (by default every replica of the master (those it lists, and those that could take over from it), else `--replicas N`) acknowledged the grant in time: it was undone, nothing is held (a wait without `--wait` gives up after the connect timeout; `extend`: the lease stays extended on the master) |
//! | 75 | the lock is held by someone else and the wait ran out (or `--no-wait`) |
//! | 76 | `run`: the lease was lost while the command ran, or the release after it got no answer (both unless `--on-lost ignore`), or the lease ran out before the command could start (nothing was run); `release` / `extend`: the token no longer holds the lock |
//! | 77 | Redis refused the credentials: a wrong or missing password or user, or an ACL user without the rights |
//! | 78 | Redis refused the connection settings: a database number it does not have, TLS on a port without it, an untrusted certificate; or the URL names a read-only replica, a Sentinel, a node of a Redis Cluster that sends the lock to another node, or a port where no Redis listens (a web server) |
//! | 128+N | `run`: signal N ended the wait before the lock was taken; `demo`: signal N stopped it early |
//! | 127 / 126 | `run`: the command was not found / could not be executed |
//!
//! With `--json`, a failure also prints one object on stdout:
//! `{"error": KIND, "message": ..., "exit": N}`, KIND one of `usage` (2),
//! `conflict` (65), `unavailable` (69), `replicas_missing` (74), `busy` (75), `lost` (76), `auth` (77), `config` (78),
//! `cannot_execute` (126), `not_found` (127), `signal` (128+N), `failure` (1).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod cli;
mod demo;
mod duration;
mod exit;
mod kind;
mod leader;
mod outage;
mod plural;
mod private_cluster;
mod private_redis;
mod runner;
mod screen;
mod scripting;
mod signals;
mod state;
mod status;
mod terminal;
mod warden;
mod watch;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command};
use crate::exit::Fail;

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
            // The parser's own message: which argument, what it expected,
            // "a similar subcommand exists", and the usage line.
            let _ = err.print();
            if json_asked() {
                exit::print_json(exit::USAGE, &usage_message(&err.render().to_string()));
            }
            return ExitCode::from(exit::USAGE);
        }
    };
    let json = cli.json;
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            let code = exit::code_for(&err);
            let message = exit::message(&err);
            eprintln!("leasehold: {message}");
            if json {
                exit::print_json(code, &message);
            }
            ExitCode::from(code)
        }
    }
}

/// `--json` is among the arguments that clap refused (before `--`, after
/// which they belong to `run`'s command).
fn json_asked() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|arg| arg != "--")
        .any(|arg| arg == "--json")
}

/// The parser's message on one line, without the usage and help pointers.
fn usage_message(rendered: &str) -> String {
    rendered
        .lines()
        .map(str::trim)
        .filter(|line| {
            !line.is_empty() && !line.starts_with("Usage:") && !line.starts_with("For more")
        })
        .map(|line| line.strip_prefix("error: ").unwrap_or(line))
        .collect::<Vec<_>>()
        .join("; ")
}

fn run(mut cli: Cli) -> anyhow::Result<ExitCode> {
    let json = cli.json;
    match &mut cli.command {
        Command::Completions(args) => {
            // Written whole by us: the generator panics on a write error.
            let mut script = Vec::new();
            clap_complete::generate(args.shell, &mut Cli::command(), "leasehold", &mut script);
            std::io::stdout().write_all(&script)?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Man(args) => {
            match &args.out_dir {
                Some(dir) => {
                    clap_mangen::generate_to(Cli::command(), dir).with_context(|| {
                        format!("cannot write the manual pages to {}", dir.display())
                    })?;
                }
                None => {
                    let mut page = Vec::new();
                    clap_mangen::Man::new(Cli::command()).render(&mut page)?;
                    std::io::stdout().write_all(&page)?;
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        Command::Watch(args) if json && !args.once && !args.until_free => {
            return Err(Fail {
                code: exit::USAGE,
                message: "watch --json needs --once (one snapshot as JSON) or --until-free (one \
                          JSON line per ended lease)"
                    .to_owned(),
            }
            .into());
        }
        Command::Demo(args) => args.json = json,
        Command::Watch(args) => args.json = json,
        Command::Run(args) => args.json = json,
        Command::Acquire(args) => args.json = json,
        Command::Release(args) => args.json = json,
        Command::Extend(args) => args.json = json,
        Command::Inspect(args) => args.json = json,
        Command::ForceRelease(args) => args.json = json,
        Command::Leader(args) => args.json = json,
        Command::Semaphore(args) => args.json = json,
        Command::Libraries(args) => args.json = json,
    }
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
            Command::Semaphore(args) => scripting::semaphore(&cli.connection, args).await,
            Command::Libraries(args) => scripting::libraries(&cli.connection, args).await,
            // Done above, without a runtime.
            Command::Completions(_) | Command::Man(_) => Ok(ExitCode::SUCCESS),
        }
    })
}
