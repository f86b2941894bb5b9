//! The protocols a comparison measures (`--proto`): their names on the command line, in the
//! reports and in file names, which port their servers are reached on, and how `loadterm load`
//! is told to speak them.

use serde::{Serialize, Serializer};
use std::fmt;

/// A matrix cell's protocol. Its name (`h1`, `h1s`, `h2`, `h2c`, `h3`) is the one clap reads,
/// the one the reports and the JSON write, and a part of the folded stacks' file names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Protocol {
    /// HTTP/1.1 on the clear port.
    #[default]
    #[value(name = "h1")]
    H1,
    /// HTTP/1.1 over TLS.
    #[value(name = "h1s")]
    H1s,
    /// HTTP/2 over TLS.
    #[value(name = "h2")]
    H2,
    /// HTTP/2 on the clear port (prior knowledge).
    #[value(name = "h2c")]
    H2c,
    /// HTTP/3 over QUIC, on the TLS port.
    #[value(name = "h3")]
    H3,
}

impl Protocol {
    /// Its name, as `--proto` takes it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Protocol::H1 => "h1",
            Protocol::H1s => "h1s",
            Protocol::H2 => "h2",
            Protocol::H2c => "h2c",
            Protocol::H3 => "h3",
        }
    }

    /// Over TLS (and so on a server's `{tls_port}`), else on its `{clear_port}`.
    pub(crate) fn is_tls(self) -> bool {
        match self {
            Protocol::H1 | Protocol::H2c => false,
            Protocol::H1s | Protocol::H2 | Protocol::H3 => true,
        }
    }

    /// The `loadterm load` option that speaks it (HTTP/1.1 over TLS is `--h1` with an https
    /// URL).
    pub(crate) fn load_flag(self) -> &'static str {
        match self {
            Protocol::H1 | Protocol::H1s => "--h1",
            Protocol::H2 => "--h2",
            Protocol::H2c => "--h2c",
            Protocol::H3 => "--h3",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Protocol {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    /// The names on the command line, in the reports and in the JSON are one and the same,
    /// and the ones users' scripts and earlier reports have.
    #[test]
    fn names_are_the_command_lines_and_the_reports() {
        let names = ["h1", "h1s", "h2", "h2c", "h3"];
        assert_eq!(Protocol::value_variants().len(), names.len());
        for (p, name) in Protocol::value_variants().iter().zip(names) {
            assert_eq!(p.name(), name);
            assert_eq!(p.to_string(), name);
            assert_eq!(
                p.to_possible_value().map(|v| v.get_name().to_owned()),
                Some(name.to_owned())
            );
            assert_eq!(serde_json::to_string(p).unwrap(), format!("\"{name}\""));
            assert_eq!(Protocol::from_str(name, false), Ok(*p));
        }
        assert!(Protocol::from_str("h2s", false).is_err());
    }
}
