//! The `loadterm` binary: three subcommands, plus haterm's argv (`loadterm -L ...`).

use clap::{Parser, Subcommand};

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

fn main() -> std::process::ExitCode {
    let cli = Cli::parse_from(argv());
    let (command, result) = match cli.cmd {
        Cmd::Serve(a) => ("serve", loadterm_server::cli::run(*a)),
        Cmd::Load(a) => ("load", loadterm_load::cli::run(*a)),
        Cmd::Ab(a) => ("ab", loadterm_ab::cli::run(*a)),
    };
    let Err(e) = result else {
        return std::process::ExitCode::SUCCESS;
    };
    if is_usage_error(&e) {
        // As clap reports its own usage errors.
        eprintln!("error: {e}\n\nFor more information, try 'loadterm {command} --help'.");
        return std::process::ExitCode::from(2);
    }
    eprintln!("loadterm: {e:#}");
    std::process::ExitCode::FAILURE
}

fn is_usage_error(e: &anyhow::Error) -> bool {
    e.is::<loadterm_server::cli::UsageError>()
        || e.is::<loadterm_load::cli::UsageError>()
        || e.is::<loadterm_ab::cli::UsageError>()
}
