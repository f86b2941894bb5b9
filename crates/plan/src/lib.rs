//! What to answer, decided from the request alone: the haterm/httpterm request vocabulary
//! (`/?s=1k&r=404&t=10...`) turned into a [`Plan`], plus the content every answer is made of
//! (body bytes, reason phrases, help and error page texts), the HTTP rules both ends apply to a
//! response ([`response_has_body`], [`is_interim`]), and the two errors by which every command
//! tells the binary its exit status ([`exit`]).
//!
//! Pure functions, no I/O. How a plan is carried out (interim responses, body reading, delay,
//! head fields, framing, connection reuse) is `loadterm-exchange`'s job.

#![forbid(unsafe_code)]

pub mod body;
pub mod dist;
pub mod exit;
pub mod pages;
pub mod query;
pub mod reason;
mod rng;
pub mod units;

pub use body::BodyKind;
pub use query::{ConnForce, Params, PlanError};
pub use rng::Rng;

/// Name of the request header that carries the same vocabulary as the query string, for
/// setups where a proxy rewrites URLs. Parsed after the URI, so its keys win.
pub const CONTROL_HEADER: &str = "x-loadterm";

/// Longest delay a request may ask for; longer ones are refused with a 400 so that a typo
/// (`t=10g`) cannot park connections for years.
pub const MAX_DELAY_MS: u64 = 3_600_000;

/// What the vocabulary reads a plan from: where it is written (the target, the control header)
/// and whether the request is a HEAD.
#[derive(Debug, Clone, Copy)]
pub struct Query<'a> {
    /// Raw request-target (H1) or `:path` (H2/H3); no percent-decoding is done.
    pub target: &'a [u8],
    /// Value of the [`CONTROL_HEADER`] header, if any.
    pub control: Option<&'a [u8]>,
    pub is_head: bool,
}

/// What the engine must do for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Serve the help page (URI ending in `?`, or `/?h`).
    Help,
    /// Serve a dummy response.
    Respond(Plan),
    /// The request asked for something absurd: answer 400 with this explanation.
    Reject(PlanError),
}

/// A response fully decided from the vocabulary; `loadterm-exchange` carries it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Status code, 100..=999.
    pub status: u16,
    /// Body bytes to send (already 0 for HEAD and for statuses that forbid a body).
    pub size: u64,
    /// The size of the body a GET would get: what `content-length` announces, `size` but for
    /// HEAD, whose response carries the GET's length and no body (RFC 9110 §9.3.2). Every
    /// engine's length comes from here ([`Plan::announced_length`]).
    pub get_size: u64,
    /// Milliseconds to wait before responding (after the request body unless `drain_after`).
    pub delay_ms: u64,
    pub cacheable: bool,
    /// `A>0`: respond first, drain the request body afterwards.
    pub drain_after: bool,
    /// `C`/`K`: what the request forced on the connection (H1 only).
    pub conn: ConnForce,
    /// `k>0`: no content-length, chunked transfer on HTTP/1.1, body of ASCII `1`.
    pub chunked: bool,
    /// `S` (default true): zero-copy paths (splice, tee, vmsplice) allowed for this response.
    pub zero_copy: bool,
    pub body: BodyKind,
    pub is_head: bool,
    /// `k>=2`: httpterm's one-byte chunks (HTTP/1.1), one-byte DATA frames (HTTP/2, HTTP/3).
    pub byte_chunks: bool,
    /// `b`: the content-length to advertise whatever the body is (a lie on purpose).
    pub length: Option<u64>,
    /// `B`: read at most this many request body bytes before responding, the rest after.
    pub body_limit: Option<u64>,
    /// `P`: milliseconds to pause after the response.
    pub pause_ms: u32,
    /// `w`: milliseconds to wait for the next request on the connection (0: the default).
    pub idle_ms: u32,
    /// `e`: the ETag's value (see [`etag`]).
    pub etag: Option<u32>,
    /// `p`: send the body in pieces of 1..=pieces bytes with pauses of 0..=15 ms (0: off; at
    /// most [`body::WINDOW`]).
    pub pieces: u32,
}

impl Plan {
    /// Decide the response for one request. `rng` feeds the `r` (random) suffix.
    pub fn from_request(req: &Query<'_>, rng: &mut Rng) -> Outcome {
        let mut params = Params::default();
        if let Some(query) = query::locate(req.target) {
            if query::is_help(query) {
                return Outcome::Help;
            }
            if let Err(e) = query::parse_into(query, &mut params, rng) {
                return Outcome::Reject(e);
            }
        }
        if let Some(header) = req.control {
            if let Err(e) = query::parse_into(header, &mut params, rng) {
                return Outcome::Reject(e);
            }
        }
        Self::from_params(params, req.is_head, req.target)
    }

    fn from_params(p: Params, is_head: bool, target: &[u8]) -> Outcome {
        let status = match u16::try_from(p.status) {
            Ok(s @ 100..=999) => s,
            _ => return Outcome::Reject(PlanError::Status(p.status)),
        };
        let Ok(size) = u64::try_from(p.size) else {
            return Outcome::Reject(PlanError::Size(p.size));
        };
        let delay_ms = p.delay_ms.max(0) as u64;
        if delay_ms > MAX_DELAY_MS {
            return Outcome::Reject(PlanError::Delay(p.delay_ms));
        }
        // Most requests use none of httpterm's extra letters: they skip their validation.
        let extra = if p.httpterm {
            match Extra::from_params(&p, target) {
                Ok(extra) => extra,
                Err(e) => return Outcome::Reject(e),
            }
        } else {
            Extra::NONE
        };
        let mut plan = Plan {
            status,
            size,
            get_size: size,
            delay_ms,
            cacheable: p.cacheable,
            drain_after: p.drain_after,
            conn: p.conn,
            chunked: p.chunked,
            zero_copy: p.zero_copy,
            body: if p.chunked {
                BodyKind::Ones
            } else if p.random {
                BodyKind::Random
            } else {
                BodyKind::Pattern
            },
            is_head,
            byte_chunks: p.byte_chunks,
            length: extra.length,
            body_limit: extra.body_limit,
            pause_ms: extra.pause_ms,
            idle_ms: extra.idle_ms,
            etag: extra.etag,
            pieces: extra.pieces,
        };
        if !status_allows_body(status) {
            plan.get_size = 0;
        }
        if !response_has_body(is_head, status) {
            plan.size = 0;
        }
        Outcome::Respond(plan)
    }

    /// Interim (1xx) statuses asked for as the final answer: engines send the head and then
    /// end the exchange (close on H1, end the stream on H2/H3).
    pub fn is_informational(&self) -> bool {
        is_interim(self.status)
    }

    /// Whether a content-length header belongs on this response (framing aside).
    pub fn has_length_header(&self) -> bool {
        status_allows_body(self.status) && self.status != 304
    }

    /// The true `content-length` of this response, framing aside: the body's size, or for
    /// HEAD the size the GET's body would have (RFC 9110 §9.3.2), on every protocol.
    pub fn announced_length(&self) -> u64 {
        self.get_size
    }
}

/// httpterm's `b B P w e p`, validated.
struct Extra {
    length: Option<u64>,
    body_limit: Option<u64>,
    pause_ms: u32,
    idle_ms: u32,
    etag: Option<u32>,
    pieces: u32,
}

impl Extra {
    const NONE: Extra = Extra {
        length: None,
        body_limit: None,
        pause_ms: 0,
        idle_ms: 0,
        etag: None,
        pieces: 0,
    };

    fn from_params(p: &Params, target: &[u8]) -> Result<Extra, PlanError> {
        let wait = |key: u8, v: i64| match u32::try_from(v.max(0)) {
            Ok(ms) if u64::from(ms) <= MAX_DELAY_MS => Ok(ms),
            _ => Err(PlanError::Wait(key, v)),
        };
        Ok(Extra {
            length: match p.length {
                -1 => None,
                v if v < -1 => return Err(PlanError::Length(v)),
                v => Some(v as u64),
            },
            body_limit: u64::try_from(p.body_limit).ok(),
            pause_ms: wait(b'P', p.pause_ms)?,
            idle_ms: wait(b'w', p.idle_ms)?,
            etag: p.etag.map(|e| etag(e, target)),
            pieces: match p.pieces {
                None => 0,
                Some(v) if v < 1 => return Err(PlanError::Pieces(v)),
                // A piece is one slice of the static body blocks: at most their window.
                Some(v) => v.min(body::WINDOW as i64) as u32,
            },
        })
    }
}

/// The ETag of `e=<seed>` (httpterm's idea, on the request-target rather than the whole request
/// line so that HTTP/1, /2 and /3 agree): the seed's low 32 bits plus the target read as
/// big-endian 32-bit words (the tail zero-padded), the carries folded back twice. Rendered as 8
/// upper-case hex digits in quotes.
pub fn etag(seed: i64, target: &[u8]) -> u32 {
    let mut sum = u64::from(seed as u32);
    for word in target.chunks(4) {
        let mut be = [0u8; 4];
        be[..word.len()].copy_from_slice(word);
        sum += u64::from(u32::from_be_bytes(be));
    }
    sum = (sum & 0xffff_ffff) + (sum >> 32);
    sum = (sum & 0xffff_ffff) + (sum >> 32);
    sum as u32
}

/// 1xx, 204 and 304 never carry a body.
fn status_allows_body(status: u16) -> bool {
    !(status < 200 || status == 204 || status == 304)
}

/// Whether a response carries a body, whatever its `content-length` says: never to a HEAD
/// request, never with a status that allows none (RFC 9110 §6.4.1). The server's plans and the
/// load client's three protocols decide it here.
pub fn response_has_body(request_is_head: bool, status: u16) -> bool {
    !request_is_head && status_allows_body(status)
}

/// A 1xx response is interim: the final response follows it (RFC 9110 §15.2).
pub fn is_interim(status: u16) -> bool {
    (100..200).contains(&status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(target: &str) -> Outcome {
        let req = Query {
            target: target.as_bytes(),
            control: None,
            is_head: false,
        };
        Plan::from_request(&req, &mut Rng::new(1))
    }

    fn ok(target: &str) -> Plan {
        match plan(target) {
            Outcome::Respond(p) => p,
            other => panic!("{target}: expected a plan, got {other:?}"),
        }
    }

    #[test]
    fn defaults() {
        let p = ok("/");
        assert_eq!((p.status, p.size, p.delay_ms), (200, 0, 0));
        assert!(p.cacheable && !p.chunked && p.zero_copy && !p.drain_after);
        assert_eq!(p.body, BodyKind::Pattern);
    }

    #[test]
    fn help_triggers() {
        assert_eq!(plan("/?"), Outcome::Help);
        assert_eq!(plan("/x?"), Outcome::Help);
        assert_eq!(plan("/?h"), Outcome::Help);
        assert_eq!(plan("/?help"), Outcome::Help);
        assert!(matches!(plan("/?s=10?"), Outcome::Respond(_)));
    }

    #[test]
    fn first_question_mark_applies_everything() {
        let p = ok("/?r=500?s=0?c=0?t=1000");
        assert_eq!(
            (p.status, p.size, p.delay_ms, p.cacheable),
            (500, 0, 1000, false)
        );
    }

    #[test]
    fn head_ignores_size_and_bodyless_statuses() {
        let req = Query {
            target: b"/?s=100",
            control: None,
            is_head: true,
        };
        let Outcome::Respond(p) = Plan::from_request(&req, &mut Rng::new(1)) else {
            panic!()
        };
        assert_eq!(p.size, 0);
        // The response announces the GET's length (RFC 9110 §9.3.2).
        assert_eq!(p.announced_length(), 100);
        assert_eq!(ok("/?s=100").announced_length(), 100);
        assert_eq!(ok("/?r=204&s=5").size, 0);
        assert_eq!(ok("/?r=204&s=5").announced_length(), 0);
        assert_eq!(ok("/?r=304&s=5").size, 0);
        assert_eq!(ok("/?r=103&s=5").size, 0);
        assert_eq!(ok("/?r=404&s=5").size, 5);
    }

    #[test]
    fn bodies_and_interim_responses() {
        for (head, status, body) in [
            (false, 200, true),
            (false, 404, true),
            (true, 200, false),
            (false, 103, false),
            (false, 204, false),
            (false, 304, false),
        ] {
            assert_eq!(response_has_body(head, status), body, "{head} {status}");
        }
        assert!(is_interim(100) && is_interim(103) && is_interim(199));
        assert!(!is_interim(200) && !is_interim(99));
    }

    #[test]
    fn rejects_absurd_values() {
        assert_eq!(plan("/?r=99"), Outcome::Reject(PlanError::Status(99)));
        assert_eq!(plan("/?r=1000"), Outcome::Reject(PlanError::Status(1000)));
        assert_eq!(plan("/?r=-1"), Outcome::Reject(PlanError::Status(-1)));
        assert_eq!(plan("/?s=-1"), Outcome::Reject(PlanError::Size(-1)));
        assert_eq!(plan("/?t=10g"), Outcome::Reject(PlanError::Delay(10 << 30)));
        assert_eq!(ok("/?t=-5").delay_ms, 0);
        // Huge but non-negative sizes are legal: they stream in constant memory.
        assert_eq!(ok("/?s=999999g").size, 999_999u64 << 30);
    }

    #[test]
    fn control_header_overrides_uri() {
        let req = Query {
            target: b"/x?s=10&r=404",
            control: Some(b"s=20"),
            is_head: false,
        };
        let Outcome::Respond(p) = Plan::from_request(&req, &mut Rng::new(1)) else {
            panic!()
        };
        assert_eq!((p.size, p.status), (20, 404));
        let req = Query {
            target: b"/rewritten",
            control: Some(b"r=503"),
            is_head: false,
        };
        let Outcome::Respond(p) = Plan::from_request(&req, &mut Rng::new(1)) else {
            panic!()
        };
        assert_eq!(p.status, 503);
    }

    #[test]
    fn httpterm_parameters_validated() {
        let p = ok("/?b=3&B=10&P=5&w=100&p=4&k=2");
        assert_eq!((p.length, p.body_limit), (Some(3), Some(10)));
        assert_eq!((p.pause_ms, p.idle_ms, p.pieces), (5, 100, 4));
        assert!(p.byte_chunks && p.chunked);
        let p = ok("/");
        assert_eq!(
            (p.length, p.body_limit, p.etag, p.pieces),
            (None, None, None, 0)
        );
        assert_eq!(ok("/?b=0").length, Some(0));
        assert_eq!(ok("/?p=1g").pieces, 1, "no multiplier on p");
        assert_eq!(ok("/?p=999999999").pieces, body::WINDOW as u32);
        assert_eq!(ok("/?B=-1").body_limit, None);
        assert_eq!(plan("/?b=-2"), Outcome::Reject(PlanError::Length(-2)));
        assert_eq!(plan("/?p=0"), Outcome::Reject(PlanError::Pieces(0)));
        assert_eq!(plan("/?p=-3"), Outcome::Reject(PlanError::Pieces(-3)));
        assert_eq!(
            plan("/?P=3600001"),
            Outcome::Reject(PlanError::Wait(b'P', 3_600_001))
        );
        assert_eq!(
            plan("/?w=4000000"),
            Outcome::Reject(PlanError::Wait(b'w', 4_000_000))
        );
        // A drawn value is validated as a written one would be.
        assert_eq!(
            plan("/?t=7200s"),
            Outcome::Reject(PlanError::Delay(7_200_000))
        );
        assert!(matches!(
            plan("/?r=50-60:1"),
            Outcome::Reject(PlanError::Status(50..=60))
        ));
        let Outcome::Reject(e) = plan("/?t=1-10ms:99,5-1ms:1") else {
            panic!()
        };
        let text = e.to_string();
        assert!(
            text.starts_with("t: a range has its low end above"),
            "{text}"
        );
        assert!(text.contains("t=1-10ms:99,1s:1"), "{text}");
    }

    #[test]
    fn etag_is_httpterms_checksum_of_the_target() {
        // "/?e=" is 0x2F3F653D, "1" is padded to 0x31000000; plus the seed 1.
        let want = 0x2F3F_653Du32.wrapping_add(0x3100_0000).wrapping_add(1);
        assert_eq!(ok("/?e=1").etag, Some(want));
        assert_eq!(etag(0, b"\xff\xff\xff\xff\xff\xff\xff\xff"), 0xffff_ffff);
        assert_ne!(ok("/a?e=1").etag, ok("/b?e=1").etag);
        assert_ne!(ok("/?e=1").etag, ok("/?e=2").etag);
    }

    #[test]
    fn body_kinds() {
        assert_eq!(ok("/?R=1").body, BodyKind::Random);
        assert_eq!(ok("/?k=1&R=1").body, BodyKind::Ones);
        assert!(ok("/?k=1").chunked);
        assert!(!ok("/?S=0").zero_copy);
    }
}
