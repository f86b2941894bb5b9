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
             \x20 s=<size>    body size in bytes (HEAD: its length, no body)         e.g. s=256k\n\
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
             \x20 k=2         httpterm's one-byte chunks; HTTP/2 and /3: 1-byte DATA frames\n\
             \x20 b=<n>       advertise content-length n whatever the body            e.g. b=10\n\
             \x20             (-1: the real one); a lie closes the HTTP/1.x connection,\n\
             \x20             HTTP/2 and HTTP/3 clients reject the response\n\
             \x20 B=<n>       read at most n request body bytes before responding,    e.g. B=1000\n\
             \x20             the rest after the response\n\
             \x20 P=<ms>      pause after the response (HTTP/2, /3: then end it)      e.g. P=500\n\
             \x20 w=<ms>      wait at most this long for the next request             e.g. w=200\n\
             \x20 p=<n>       body in pieces of 1..n bytes, 0-15 ms apart, n<=65536  e.g. p=100\n\
             \x20 e=<n>       an ETag (the target's checksum plus n): If-None-Match   e.g. e=1\n\
             \x20             gives 304 (412 unless GET or HEAD), a failed If-Match 412\n\
             \n\
             Distributions for t, s and r: value[-value][:weight],... (at most 64 entries, one\n\
             value drawn per request; t units ms or s, s suffixes k m g), e.g.\n\
             \x20 t=5ms:99,500ms:1   t=1-10ms:99,1s:1   s=1k:90,1-4m:10   r=200:99,503:1\n\
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
    /// One header field line too large.
    FieldTooLarge,
    /// Request method longer than any the server knows (RFC 9112 §3 suggests 501).
    MethodTooLong,
    /// Request method with a byte that is not a token character.
    InvalidMethod,
    /// CONNECT: a 2xx would open a tunnel, which a dummy server cannot honour.
    Connect,
    /// Protocol version other than HTTP/1.0 and HTTP/1.1.
    VersionNotSupported,
    /// Request line not `method SP request-target SP HTTP-version CRLF`.
    InvalidRequestLine,
    /// Request-target of a form the method does not allow, or with bytes a URI cannot hold.
    InvalidTarget,
    /// A line of the head ending in a bare CR, or a bare LF in strict mode.
    InvalidLineEnding,
    /// Field name not a token (whitespace before the colon, obs-fold included).
    InvalidFieldName,
    /// Field value with a control character other than HTAB.
    InvalidFieldValue,
    /// HTTP/1.1 request without Host.
    MissingHost,
    /// More than one Host field.
    DuplicateHost,
    /// Host value not `uri-host [":" port]`, or empty.
    InvalidHost,
    /// Content-Length not one decimal number, or sent more than once.
    InvalidContentLength,
    /// Transfer-Encoding empty, or not a single final `chunked`.
    InvalidTransferEncoding,
    /// Both Transfer-Encoding and Content-Length.
    TransferEncodingWithLength,
    /// Transfer-Encoding on an HTTP/1.0 request (RFC 9112 §6.1).
    TransferEncodingOnHttp10,
}

impl ErrorPage {
    pub fn status(self) -> u16 {
        match self {
            ErrorPage::BadRequest => 400,
            ErrorPage::Timeout => 408,
            ErrorPage::UriTooLong => 414,
            ErrorPage::HeadersTooLarge | ErrorPage::FieldTooLarge => 431,
            ErrorPage::MethodTooLong | ErrorPage::Connect => 501,
            ErrorPage::VersionNotSupported => 505,
            ErrorPage::InvalidMethod
            | ErrorPage::InvalidRequestLine
            | ErrorPage::InvalidTarget
            | ErrorPage::InvalidLineEnding
            | ErrorPage::InvalidFieldName
            | ErrorPage::InvalidFieldValue
            | ErrorPage::MissingHost
            | ErrorPage::DuplicateHost
            | ErrorPage::InvalidHost
            | ErrorPage::InvalidContentLength
            | ErrorPage::InvalidTransferEncoding
            | ErrorPage::TransferEncodingWithLength
            | ErrorPage::TransferEncodingOnHttp10 => 400,
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
            ErrorPage::FieldTooLarge => {
                "431 Request Header Fields Too Large: a header field exceeds the limit.\n"
            }
            ErrorPage::MethodTooLong => {
                "501 Not Implemented: the request method is longer than any this server knows.\n"
            }
            ErrorPage::InvalidMethod => {
                "400 Bad Request: the request method holds a byte that is not a token character.\n"
            }
            ErrorPage::Connect => {
                "501 Not Implemented: CONNECT is not supported: this server opens no tunnels.\n"
            }
            ErrorPage::VersionNotSupported => {
                "505 HTTP Version Not Supported: only HTTP/1.0 and HTTP/1.1 are served here.\n"
            }
            ErrorPage::InvalidRequestLine => {
                "400 Bad Request: the request line is not 'method target HTTP/x.y'.\n"
            }
            ErrorPage::InvalidTarget => {
                "400 Bad Request: the request-target is not a valid URI of a form this method \
                 allows ('*' is for OPTIONS only).\n"
            }
            ErrorPage::InvalidLineEnding => {
                "400 Bad Request: a line of the request head does not end with CRLF.\n"
            }
            ErrorPage::InvalidFieldName => {
                "400 Bad Request: a header field name is not a token (whitespace before the \
                 colon, or a folded line).\n"
            }
            ErrorPage::InvalidFieldValue => {
                "400 Bad Request: a header field value holds a control character.\n"
            }
            ErrorPage::MissingHost => {
                "400 Bad Request: an HTTP/1.1 request must carry a Host header field.\n"
            }
            ErrorPage::DuplicateHost => {
                "400 Bad Request: the request carries more than one Host header field.\n"
            }
            ErrorPage::InvalidHost => "400 Bad Request: the Host value is not host[:port].\n",
            ErrorPage::InvalidContentLength => {
                "400 Bad Request: Content-Length must be one decimal number, sent once.\n"
            }
            ErrorPage::InvalidTransferEncoding => {
                "400 Bad Request: Transfer-Encoding must be a single final 'chunked'.\n"
            }
            ErrorPage::TransferEncodingWithLength => {
                "400 Bad Request: Transfer-Encoding and Content-Length together are refused.\n"
            }
            ErrorPage::TransferEncodingOnHttp10 => {
                "400 Bad Request: Transfer-Encoding is not allowed on an HTTP/1.0 request.\n"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_pages_start_with_their_status() {
        use ErrorPage::*;
        for p in [
            BadRequest,
            Timeout,
            UriTooLong,
            HeadersTooLarge,
            FieldTooLarge,
            MethodTooLong,
            InvalidMethod,
            Connect,
            VersionNotSupported,
            InvalidRequestLine,
            InvalidTarget,
            InvalidLineEnding,
            InvalidFieldName,
            InvalidFieldValue,
            MissingHost,
            DuplicateHost,
            InvalidHost,
            InvalidContentLength,
            InvalidTransferEncoding,
            TransferEncodingWithLength,
            TransferEncodingOnHttp10,
        ] {
            assert!(p.body().starts_with(&p.status().to_string()), "{p:?}");
            assert!(p.body().ends_with(".\n") && p.body().len() < 120, "{p:?}");
        }
    }

    #[test]
    fn help_lists_every_parameter_and_the_version() {
        let h = help();
        assert!(h.contains(env!("CARGO_PKG_VERSION")));
        for key in [
            "s=", "r=", "t=", "c=", "A=", "C=", "K=", "k=", "S=", "R=", "k=2", "b=", "B=", "P=",
            "w=", "p=", "e=",
        ] {
            assert!(h.contains(&format!("  {key}")), "help misses {key}");
        }
    }
}
