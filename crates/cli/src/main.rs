//! The `loadterm` binary: its subcommands, plus haterm's argv (`loadterm -L ...`).

use clap::{CommandFactory, Parser, Subcommand};
use loadterm_plan::exit::{self, Codes, Interrupted, UsageError};

#[derive(Parser)]
#[command(
    name = "loadterm",
    version,
    about = "Dummy HTTP server, load generator and A/B harness for HTTP/1.1, HTTP/2 and HTTP/3"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the dummy server (haterm/httpterm request vocabulary).
    Serve(Box<loadterm_server::cli::ServeArgs>),
    /// Generate load against a URL.
    Load(Box<loadterm_load::cli::LoadArgs>),
    /// Compare two (or more) server builds with interleaved rounds and paired statistics.
    Ab(Box<loadterm_ab::cli::AbArgs>),
    /// The first commit between a good and a bad revision whose change in CPU per request
    /// stands: git worktrees and builds per commit, one A/B comparison per step.
    Bisect(Box<loadterm_ab::bisect::BisectArgs>),
    /// Run on a server host for `loadterm ab --server-host`: starts, pins, measures and stops
    /// the variants of one comparison at a time (loopback unless authenticated).
    Agent(Box<loadterm_ab::agent::AgentArgs>),
    /// Merge the JSON reports and interval logs of several runs (shards) into one, losslessly.
    Merge(Box<loadterm_load::merge_cmd::MergeArgs>),
    /// Print a shell completion script (e.g. `loadterm completions bash > /etc/bash_completion.d/loadterm`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of loadterm, or with DIR write one page per subcommand there.
    Man {
        /// Write loadterm.1, loadterm-serve.1, ... into this directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

/// The completion script, from the same clap definitions that parse the command line, so
/// that it cannot drift from it.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "loadterm", &mut out);
    print(&out)
}

/// The man page on stdout, or one page per subcommand in `dir`; from the clap definitions.
fn man(dir: Option<&std::path::Path>) -> anyhow::Result<()> {
    use anyhow::Context;
    let Some(dir) = dir else {
        let mut out = Vec::new();
        clap_mangen::Man::new(Cli::command()).render(&mut out)?;
        return print(&out);
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("cannot write man pages into {}", dir.display()))
}

/// Write to stdout; a reader that went away (`| head`) is not an error.
fn print(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(bytes) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// haterm is run as `haterm -L ...`: a first argument that is an option (other than help or
/// version) means `serve`.
fn argv() -> Vec<std::ffi::OsString> {
    let mut args: Vec<_> = std::env::args_os().collect();
    let serve_implied = args
        .get(1)
        .and_then(|a| a.to_str())
        .is_some_and(|a| a.starts_with('-') && !matches!(a, "-h" | "--help" | "-V" | "--version"));
    if serve_implied {
        args.insert(1, "serve".into());
    }
    if args.get(1).is_some_and(|a| a == "serve") {
        // haterm's two-letter debug flags, which clap would read as `-d -S`.
        for a in args.iter_mut().skip(2) {
            let long = match a.to_str() {
                Some(s) if s.starts_with("-dS") => "--no-splice",
                Some(s) if s.starts_with("-dZ") => "--no-zero-copy",
                Some(s) if s.starts_with("-dT") => "--no-ktls",
                _ => continue,
            };
            *a = long.into();
        }
    }
    args
}

// jemalloc, not glibc's malloc: under the soak's mixed load glibc's heap fragments, its free
// pages stay resident and RSS creeps (+7.3% in 30 minutes with memory in use flat);
// jemalloc returns free pages by itself (dirty-page decay). No difference in CPU per request
// shown by `loadterm ab` (docs/RELIABILITY.md "Soak", docs/bench/2026-11-25-ab-jemalloc/).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// jemalloc's options, read before `main`: a background thread purges freed pages on their decay
// schedule, also while the server is idle (without it, only allocations drive the decay: after
// 2 000 HTTP/3 connections closed, 33 MiB stayed resident 15 s later, against 8-12 MiB with it).
#[allow(unsafe_code)] // an exported symbol jemalloc reads: the one name it looks for
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: &[u8; 23] = b"background_thread:true\0";

fn main() -> std::process::ExitCode {
    let cli = Cli::parse_from(argv());
    let codes = match &cli.cmd {
        Cmd::Ab(a) => a.exit_codes(),
        _ => Codes::Plain,
    };
    let done = |r: anyhow::Result<()>| r.map(|()| None);
    let (command, result) = match cli.cmd {
        Cmd::Serve(a) => ("serve", done(loadterm_server::cli::run(*a))),
        Cmd::Load(a) => ("load", done(loadterm_load::cli::run(*a))),
        Cmd::Ab(a) => ("ab", loadterm_ab::cli::run(*a)),
        Cmd::Bisect(a) => ("bisect", loadterm_ab::bisect::run(*a)),
        Cmd::Agent(a) => ("agent", done(loadterm_ab::agent::run(*a))),
        Cmd::Merge(a) => ("merge", done(loadterm_load::merge_cmd::run(*a))),
        Cmd::Completions { shell } => ("completions", done(completions(shell))),
        Cmd::Man { dir } => ("man", done(man(dir.as_deref()))),
    };
    match &result {
        Ok(_) => {}
        // The results were reported; 128 + SIGINT, as a shell says of a command it stopped.
        Err(e) if e.is::<Interrupted>() => eprintln!("loadterm: interrupted"),
        // As clap reports its own usage errors.
        Err(e) if e.is::<UsageError>() => {
            eprintln!("error: {e}\n\nFor more information, try 'loadterm {command} --help'.")
        }
        Err(e) => eprintln!("loadterm: {e:#}"),
    }
    std::process::ExitCode::from(exit::status(&result, codes))
}
