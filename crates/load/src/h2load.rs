//! h2load's flags that `loadterm load` takes as h2load does but does not offer in its help
//! (`-w`, `-W`, `-f`, `--header-table-size`: what the client offers the server, see
//! [`crate::setup::Offer`]), and those it refuses with what to use instead, so that an h2load
//! command line either runs with h2load's meaning or says why not.
//! The flags loadterm runs as h2load does (`-n -c -t -m -H -d -D --warm-up-time --connect-to
//! --h1 -i -p --npn-list --rps`) are `cli::LoadArgs`'s own. Table: docs/COMPATIBILITY.md.

/// Hidden: they are here for h2load's command lines, not to be offered.
#[derive(Debug, Default, clap::Args)]
pub(crate) struct H2loadFlags {
    #[arg(short = 'f', long = "max-frame-size", hide = true)]
    max_frame_size: Option<String>,
    #[arg(short = 'w', long = "window-bits", hide = true)]
    window_bits: Option<String>,
    #[arg(short = 'W', long = "connection-window-bits", hide = true)]
    connection_window_bits: Option<String>,
    #[arg(long = "header-table-size", hide = true)]
    header_table_size: Option<String>,
    /// Any value: the request encoder never inserts into the dynamic table, so it stays
    /// within whatever size is asked.
    #[arg(long = "encoder-header-table-size", hide = true)]
    _encoder_header_table_size: Option<String>,
    #[arg(long, hide = true)]
    ciphers: Option<String>,
    #[arg(long = "tls13-ciphers", hide = true)]
    tls13_ciphers: Option<String>,
    #[arg(long, hide = true)]
    groups: Option<String>,
    #[arg(short = 'r', hide = true)]
    connection_rate: Option<String>,
    #[arg(long = "rate-period", hide = true)]
    rate_period: Option<String>,
    #[arg(short = 'T', long = "connection-active-timeout", hide = true)]
    active_timeout: Option<String>,
    #[arg(short = 'N', long = "connection-inactivity-timeout", hide = true)]
    inactivity_timeout: Option<String>,
    #[arg(long = "timing-script-file", hide = true)]
    timing_script_file: Option<String>,
    #[arg(short = 'B', long = "base-uri", hide = true)]
    base_uri: Option<String>,
    #[arg(long = "log-file", hide = true)]
    log_file: Option<String>,
    #[arg(long = "qlog-file-base", hide = true)]
    qlog_file_base: Option<String>,
    #[arg(long = "no-udp-gso", hide = true)]
    no_udp_gso: bool,
    #[arg(long = "max-udp-payload-size", hide = true)]
    max_udp_payload_size: Option<String>,
    #[arg(long, hide = true)]
    ktls: bool,
    #[arg(short = 'v', long, hide = true)]
    verbose: bool,
}

impl H2loadFlags {
    /// `-w`, `-W`, `-f`, `--header-table-size` with h2load's meaning and ranges: window bits
    /// 0 to 30, a frame size from 16K to 16M − 1, a table size up to 4G − 1.
    pub(crate) fn offer(&self) -> Result<crate::setup::Offer, String> {
        let bits = |flag: &str, v: &Option<String>| -> Result<Option<u8>, String> {
            v.as_deref()
                .map(|v| match v.parse::<u8>() {
                    Ok(n) if n <= 30 => Ok(n),
                    _ => Err(format!(
                        "{flag} {v} (h2load): window bits are an integer from 0 to 30 (a window of 2^N-1 bytes)"
                    )),
                })
                .transpose()
        };
        let sized =
            |flag: &str, v: &Option<String>, range: std::ops::RangeInclusive<u64>, default: u32| {
                match v.as_deref() {
                    None => Ok(default),
                    // h2load's sizes are ours: K, M and G are powers of 1024.
                    Some(v) => match loadterm_plan::units::parse_size(v) {
                        Ok(n) if range.contains(&n) => Ok(n as u32),
                        _ => Err(format!(
                            "{flag} {v} (h2load): a size from {} to {} (K, M, G: powers of 1024)",
                            range.start(),
                            range.end()
                        )),
                    },
                }
            };
        Ok(crate::setup::Offer {
            stream_window_bits: bits("-w", &self.window_bits)?,
            conn_window_bits: bits("-W", &self.connection_window_bits)?,
            max_frame: sized("-f", &self.max_frame_size, 16_384..=16_777_215, 16_384)?,
            header_table: sized(
                "--header-table-size",
                &self.header_table_size,
                0..=u64::from(u32::MAX),
                4096,
            )?,
        })
    }

    /// The first flag given that loadterm does not run as h2load would, and why, with what to
    /// use instead; `None` when every flag given is run (or asks for what loadterm does).
    pub(crate) fn refused(&self) -> Option<String> {
        let no = |flag: &str, given: bool, instead: &str| {
            given.then(|| format!("{flag} (h2load) is not supported: {instead}"))
        };
        let f = self;
        [
            no(
                "--ciphers/--tls13-ciphers",
                f.ciphers.is_some() || f.tls13_ciphers.is_some(),
                "loadterm offers rustls's default suites; choose them on the server \
                 (ssl-default-bind-ciphers, ssl-default-bind-ciphersuites)",
            ),
            no(
                "--groups",
                f.groups.is_some(),
                "loadterm offers rustls's default groups; choose them on the server \
                 (ssl-default-bind-curves)",
            ),
            no(
                "-r",
                f.connection_rate.is_some(),
                "loadterm opens all -c connections at once; for a request rate use --rate \
                 (requests per second, open loop) or --rps (per connection)",
            ),
            no(
                "--rate-period",
                f.rate_period.is_some(),
                "loadterm opens all -c connections at once (h2load's connection rate has no \
                 equivalent; loadterm's --rate is requests per second)",
            ),
            no(
                "-T",
                f.active_timeout.is_some(),
                "loadterm keeps a connection as long as the server does; --timeout bounds \
                 each request and connection attempt",
            ),
            no(
                "-N",
                f.inactivity_timeout.is_some(),
                "use --timeout (each request and connection attempt)",
            ),
            no(
                "--timing-script-file",
                f.timing_script_file.is_some(),
                "use --rate or --rps for scheduled sends (open loop)",
            ),
            no(
                "-B",
                f.base_uri.is_some(),
                "use --connect-to HOST:PORT to send the URL's requests elsewhere",
            ),
            no(
                "--log-file",
                f.log_file.is_some(),
                "use --hdr-log (per-second latency histograms) or --json (percentiles and \
                 histograms)",
            ),
            no("--qlog-file-base", f.qlog_file_base.is_some(), "no qlog"),
            no(
                "--no-udp-gso",
                f.no_udp_gso,
                "loadterm's QUIC sockets always use GSO where the kernel has it",
            ),
            no(
                "--max-udp-payload-size",
                f.max_udp_payload_size.is_some(),
                "loadterm's QUIC client discovers the path MTU (quinn)",
            ),
            no("--ktls", f.ktls, "no kernel TLS (rustls)"),
            no(
                "-v",
                f.verbose,
                "use --json for the details of a run (first error reasons, histograms)",
            ),
        ]
        .into_iter()
        .flatten()
        .next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_are_parsed_with_h2load_ranges() {
        let f = H2loadFlags {
            window_bits: Some("16".into()),
            connection_window_bits: Some("20".into()),
            max_frame_size: Some("64K".into()),
            header_table_size: Some("0".into()),
            _encoder_header_table_size: Some("0".into()),
            ..H2loadFlags::default()
        };
        assert_eq!(f.refused(), None);
        let o = f.offer().unwrap();
        assert_eq!(
            (o.h2_stream_window(), o.h2_conn_window()),
            (65_535, (1 << 20) - 1)
        );
        assert_eq!((o.max_frame, o.header_table), (65_536, 0));
        assert_eq!(o.h3_windows(), (Some(65_535), Some((1 << 20) - 1)));
        // h2load's QUIC cap: 2^26 - 1.
        let w30 = H2loadFlags {
            window_bits: Some("30".into()),
            ..H2loadFlags::default()
        };
        let o = w30.offer().unwrap();
        assert_eq!(o.h2_stream_window(), (1 << 30) - 1);
        assert_eq!(o.h3_windows(), (Some((1 << 26) - 1), None));
        let d = H2loadFlags::default().offer().unwrap();
        assert_eq!(d, crate::setup::Offer::default());
        assert_eq!(
            (d.h2_stream_window(), d.h2_conn_window()),
            ((1 << 30) - 1, (1 << 30) - 1)
        );
        for (f, why) in [
            (
                H2loadFlags {
                    window_bits: Some("31".into()),
                    ..Default::default()
                },
                "-w 31 (h2load): window bits",
            ),
            (
                H2loadFlags {
                    connection_window_bits: Some("x".into()),
                    ..Default::default()
                },
                "-W x (h2load)",
            ),
            (
                H2loadFlags {
                    max_frame_size: Some("8K".into()),
                    ..Default::default()
                },
                "-f 8K (h2load): a size from 16384 to 16777215",
            ),
            (
                H2loadFlags {
                    max_frame_size: Some("16M".into()),
                    ..Default::default()
                },
                "-f 16M",
            ),
            (
                H2loadFlags {
                    header_table_size: Some("4G".into()),
                    ..Default::default()
                },
                "--header-table-size 4G",
            ),
        ] {
            let e = f.offer().unwrap_err();
            assert!(e.starts_with(why), "{e}");
        }
        let log = H2loadFlags {
            log_file: Some("x".into()),
            ..H2loadFlags::default()
        };
        assert!(log.refused().unwrap().contains("--hdr-log"));
    }
}
