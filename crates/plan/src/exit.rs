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

/// What a command that judges its measurement against a threshold found (`loadterm ab
/// --fail-if`, `loadterm bisect`): the one source of every such command's exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    /// The whole interval lies within the threshold.
    Within,
    /// The whole interval lies beyond it.
    Beyond,
    /// The interval straddles it, or there is none: the measurement cannot tell.
    CannotTell,
}

impl Judgement {
    /// Several judgements as one: beyond if any is, else cannot tell if any cannot, else within.
    pub fn combine(verdicts: impl IntoIterator<Item = Judgement>) -> Option<Judgement> {
        verdicts.into_iter().fold(None, |acc, v| {
            Some(match (acc, v) {
                (Some(Judgement::Beyond), _) | (_, Judgement::Beyond) => Judgement::Beyond,
                (Some(Judgement::CannotTell), _) | (_, Judgement::CannotTell) => {
                    Judgement::CannotTell
                }
                _ => Judgement::Within,
            })
        })
    }
}

/// Which exit statuses the verdicts and failures get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Codes {
    /// Within 0, beyond 1, cannot tell 3; a usage error 2, any other failure 1, interrupted
    /// 130.
    #[default]
    Plain,
    /// `git bisect run`'s: within 0 (good), beyond 1 (bad), cannot tell 125 (skip); anything
    /// that is no verdict 128, which stops the bisect instead of marking the commit bad.
    GitBisect,
}

impl std::str::FromStr for Codes {
    type Err = String;
    fn from_str(s: &str) -> Result<Codes, String> {
        match s {
            "plain" => Ok(Codes::Plain),
            "git-bisect" => Ok(Codes::GitBisect),
            _ => Err(format!("'{s}': expected plain or git-bisect")),
        }
    }
}

/// The exit status of a command's result: its verdict (none: a command without one that
/// succeeded), or its failure.
pub fn status(result: &anyhow::Result<Option<Judgement>>, codes: Codes) -> u8 {
    match (result, codes) {
        (Ok(None | Some(Judgement::Within)), _) => 0,
        (Ok(Some(Judgement::Beyond)), _) => 1,
        (Ok(Some(Judgement::CannotTell)), Codes::Plain) => 3,
        (Ok(Some(Judgement::CannotTell)), Codes::GitBisect) => 125,
        (Err(e), _) if e.is::<Interrupted>() => 130,
        // Any status from 1 to 127 but 125 would mark the commit bad.
        (Err(_), Codes::GitBisect) => 128,
        (Err(e), Codes::Plain) if e.is::<UsageError>() => 2,
        (Err(_), Codes::Plain) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_has_its_status() {
        use Judgement::*;
        let ok = |v| status(&Ok(v), Codes::Plain);
        let bisect = |v| status(&Ok(v), Codes::GitBisect);
        assert_eq!((ok(None), ok(Some(Within)), ok(Some(Beyond))), (0, 0, 1));
        assert_eq!(ok(Some(CannotTell)), 3);
        assert_eq!((bisect(Some(Within)), bisect(Some(Beyond))), (0, 1));
        assert_eq!(bisect(Some(CannotTell)), 125);
        assert_eq!(status(&Err(usage_error("x")), Codes::Plain), 2);
        assert_eq!(status(&Err(usage_error("x")), Codes::GitBisect), 128);
        assert_eq!(status(&Err(Interrupted.into()), Codes::GitBisect), 130);
        assert_eq!(status(&Err(anyhow::anyhow!("x")), Codes::Plain), 1);
    }

    #[test]
    fn one_beyond_outweighs_the_rest() {
        use Judgement::*;
        assert_eq!(
            Judgement::combine([Within, CannotTell, Beyond]),
            Some(Beyond)
        );
        assert_eq!(Judgement::combine([Within, CannotTell]), Some(CannotTell));
        assert_eq!(Judgement::combine([Within, Within]), Some(Within));
        assert_eq!(Judgement::combine([]), None);
    }
}
