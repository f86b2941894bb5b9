//! How a failed command tells the binary which exit status to give: `loadterm`'s `main` looks
//! for these among the errors the commands return (`anyhow::Error::is`), so every command uses
//! the same two types.

use std::fmt;

/// A command line that cannot run: the binary reports it as clap reports its own usage errors
/// and exits with status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// `msg` as a [`UsageError`], for `return Err(..)` or `map_err` in a command.
pub fn usage_error(msg: impl fmt::Display) -> anyhow::Error {
    UsageError(msg.to_string()).into()
}

/// The run was stopped by SIGINT; its results were reported. The binary exits with status 130
/// (128 + SIGINT), as a shell reports a command killed by it.
#[derive(Debug)]
pub struct Interrupted;

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}
