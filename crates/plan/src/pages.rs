//! The help page and the error pages, in loadterm's own words.

use std::sync::OnceLock;

/// Help page body (text/plain), with the version on its first line.
pub fn help() -> &'static str {
    static HELP: OnceLock<String> = OnceLock::new();
    HELP.get_or_init(|| {
        format!(
            "loadterm {} - dummy HTTP server for benchmarks (haterm/httpterm request vocabulary).\n\
             \n\
             Shape the response with one-letter parameters after the first '?' of the URI, or in\n\
             an 'x-loadterm' request header (same syntax, applied after the URI), e.g.\n\
             \x20 GET /?s=16k&r=404&t=20&c=0 HTTP/1.1\n\
             \n\
             Numbers: C strtol form (123, 0x7b, 0173, -5); suffixes k/m/g multiply by 2^10/2^20/2^30\n\
             and add up (1kk = 1m); an 'r' suffix scales the value by a random factor in [0,1]\n\
             before the multiplier (10kr = 0..10 KiB, in 1 KiB steps). Multipliers apply to s, r, t.\n\
             Parameters are separated by exactly one of & ; / ? , and parsing stops at anything else.\n\
             \n\
             \x20 s=<size>    body size in bytes (HEAD always gets an empty body)     e.g. s=256k\n\
             \x20 r=<code>    status code, 100..999                                   e.g. r=503\n\
             \x20 t=<ms>      wait this long before responding (after the request     e.g. t=50r\n\
             \x20             body, or after the headers with A=1; at most 1 hour)\n\
             \x20 c=<n>       n<1: not cacheable (cache-control: no-cache)           e.g. c=0\n\
             \x20 A=<n>       n>0: respond first, then read the request body          e.g. A=1\n\
             \x20 C=<n>       n!=0: close the connection after the response; 0: keep it\n\
             \x20 K=<n>       n!=0: keep the connection alive; 0: close it (C/K: last wins)\n\
             \x20 k=<n>       n>0: chunked transfer (HTTP/1.1), body made of '1' bytes\n\
             \x20 S=<n>       n<1: no zero-copy (splice) for this response\n\
             \x20 R=<n>       n>0: random bytes instead of the line pattern\n\
             \n\
             Response headers: content-length (when the connection stays open),\n\
             x-req: size=<request bytes>, time=<ms to receive it> ms\n\
             x-rsp: id=dummy, code=<status>, cache=<0|1>[, chunked], size=<body>, time=<t> ms (<real> real)\n\
             This page: a URI ending in '?', or /?h.\n",
            env!("CARGO_PKG_VERSION")
        )
    })
}

/// Errors the server answers itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorPage {
    /// Malformed request (or absurd parameters, see [`crate::PlanError`]).
    BadRequest,
    /// Request headers or body not received within the client timeout.
    Timeout,
    /// Request-target too long.
    UriTooLong,
    /// Request header block too large.
    HeadersTooLarge,
}

impl ErrorPage {
    pub fn status(self) -> u16 {
        match self {
            ErrorPage::BadRequest => 400,
            ErrorPage::Timeout => 408,
            ErrorPage::UriTooLong => 414,
            ErrorPage::HeadersTooLarge => 431,
        }
    }

    /// Short text/plain body.
    pub fn body(self) -> &'static str {
        match self {
            ErrorPage::BadRequest => "400 Bad Request: the request could not be parsed.\n",
            ErrorPage::Timeout => "408 Request Timeout: the request was not received in time.\n",
            ErrorPage::UriTooLong => "414 URI Too Long: the request-target exceeds the limit.\n",
            ErrorPage::HeadersTooLarge => {
                "431 Request Header Fields Too Large: the header block exceeds the limit.\n"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_every_parameter_and_the_version() {
        let h = help();
        assert!(h.contains(env!("CARGO_PKG_VERSION")));
        for key in ["s=", "r=", "t=", "c=", "A=", "C=", "K=", "k=", "S=", "R="] {
            assert!(h.contains(&format!("  {key}")), "help misses {key}");
        }
    }
}
