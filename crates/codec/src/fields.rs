//! Field validation, the same rules for HTTP/2 (RFC 9113 §8.1.1, §8.2, §8.3) and HTTP/3
//! (RFC 9114 §4.1.2, §4.2, §4.3), sans-I/O: fed each decoded field line in order, a
//! [`RequestFields`] tells a well-formed request's facts from a malformed one, which the server
//! resets (HTTP/2: PROTOCOL_ERROR, HTTP/3: H3_MESSAGE_ERROR); [`ResponseFields`] does the same
//! for the load generator's responses. One pass, byte-table lookups (values eight bytes at a
//! time), and no allocation once the buffers are warm: it runs on every message.

use crate::syntax::{content_length, is_tchar};

/// Why a message's field section is malformed: its stream is reset (HTTP/2 PROTOCOL_ERROR,
/// HTTP/3 H3_MESSAGE_ERROR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    #[error("field name empty, upper-case or not a token")]
    BadName,
    #[error("field value with NUL, CR, LF or leading/trailing whitespace")]
    BadValue,
    #[error("connection-specific field")]
    ConnectionSpecific,
    #[error("te other than \"trailers\"")]
    Te,
    #[error("pseudo-header after a regular field")]
    PseudoAfterRegular,
    #[error("pseudo-header sent twice")]
    DuplicatePseudo,
    #[error("unknown pseudo-header")]
    UnknownPseudo,
    #[error("response pseudo-header in a request")]
    ResponsePseudo,
    #[error(":protocol (extended CONNECT) is not supported")]
    ExtendedConnect,
    #[error(":method missing")]
    NoMethod,
    #[error(":scheme missing")]
    NoScheme,
    #[error(":path missing or empty")]
    NoPath,
    #[error(":authority and host both missing or empty")]
    NoAuthority,
    #[error(":authority and host disagree")]
    AuthorityMismatch,
    #[error("host sent twice")]
    DuplicateHost,
    #[error("CONNECT without :authority, or with :scheme or :path")]
    Connect,
    #[error("content-length not a decimal number, or sent twice")]
    ContentLength,
    #[error("content-length differs from the DATA received")]
    BodyMismatch,
    #[error(":status missing or not three digits")]
    BadStatus,
    #[error("request pseudo-header in a response")]
    RequestPseudo,
    #[error("pseudo-header in trailers")]
    PseudoInTrailers,
}

/// Bytes allowed in a field name: RFC 9110 tchar without upper-case letters (RFC 9114 §4.2).
const NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        t[i] = is_tchar(c) && !c.is_ascii_uppercase();
        i += 1;
    }
    t
};

/// Bytes never allowed in a field value (RFC 9114 §4.2, RFC 9110 §5.5).
const BAD_VALUE: [bool; 256] = {
    let mut t = [false; 256];
    t[0] = true;
    t[b'\r' as usize] = true;
    t[b'\n' as usize] = true;
    t
};

fn is_ws(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn valid_value(v: &[u8]) -> bool {
    match (v.first(), v.last()) {
        (Some(&a), Some(&z)) if is_ws(a) || is_ws(z) => false,
        _ => !has_bad_byte(v),
    }
}

/// Whether `v` holds a `BAD_VALUE` byte: eight bytes at a time, the rest one at a time (every
/// field value of every message passes here; a byte-table lookup per byte was the field rules'
/// largest cost). A byte is NUL, CR or LF when it, or it xor CR, or it xor LF is zero; the
/// zero-byte test `(x - 0x01…) & !x & 0x80…` is exact as to whether a word has one.
fn has_bad_byte(v: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = ONES * 0x80;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let mut words = v.chunks_exact(8);
    for w in &mut words {
        let x = u64::from_ne_bytes(w.try_into().expect("8 bytes"));
        if zero(x) | zero(x ^ (ONES * u64::from(b'\r'))) | zero(x ^ (ONES * u64::from(b'\n'))) != 0
        {
            return true;
        }
    }
    words.remainder().iter().any(|&b| BAD_VALUE[b as usize])
}

// Pseudo-headers seen, as bits.
const METHOD: u8 = 1;
const SCHEME: u8 = 2;
const AUTHORITY: u8 = 4;
const PATH: u8 = 8;
const HOST: u8 = 16;
const LENGTH: u8 = 32;
const REGULAR: u8 = 64;
const CONNECT: u8 = 128;
/// A response's `:status` (a response has no `:method`: the bit is free).
const STATUS: u8 = METHOD;

/// A request's facts once its fields are valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestFacts {
    /// `content-length`, which the DATA frames must then add up to.
    pub content_length: Option<u64>,
    /// A well-formed CONNECT (§4.4): a tunnel request, not one for a resource.
    pub connect: bool,
}

/// Validates one request field section at a time; reused from request to request.
#[derive(Debug, Default)]
pub struct RequestFields {
    seen: u8,
    path_empty: bool,
    content_length: u64,
    authority: Vec<u8>,
    host: Vec<u8>,
    /// The first fault: the QPACK decoder's callback cannot stop early, so later fields are
    /// only skipped.
    error: Option<FieldError>,
}

impl RequestFields {
    /// Start a new field section.
    pub fn begin(&mut self) {
        self.seen = 0;
        self.path_empty = false;
        self.content_length = 0;
        self.authority.clear();
        self.host.clear();
        self.error = None;
    }

    /// The next field line, in the order received.
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.error.is_none() {
            if let Err(e) = self.check(name, value) {
                self.error = Some(e);
            }
        }
    }

    fn check(&mut self, name: &[u8], value: &[u8]) -> Result<(), FieldError> {
        if !valid_value(value) {
            return Err(FieldError::BadValue);
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.seen & REGULAR != 0 {
                return Err(FieldError::PseudoAfterRegular);
            }
            let bit = match pseudo {
                b"method" => METHOD,
                b"scheme" => SCHEME,
                b"authority" => AUTHORITY,
                b"path" => PATH,
                b"status" => return Err(FieldError::ResponsePseudo),
                b"protocol" => return Err(FieldError::ExtendedConnect),
                _ => return Err(FieldError::UnknownPseudo),
            };
            if self.seen & bit != 0 {
                return Err(FieldError::DuplicatePseudo);
            }
            self.seen |= bit;
            match bit {
                METHOD if value == b"CONNECT" => self.seen |= CONNECT,
                AUTHORITY => self.authority.extend_from_slice(value),
                PATH => self.path_empty = value.is_empty(),
                _ => {}
            }
            return Ok(());
        }
        regular(name, value)?;
        self.seen |= REGULAR;
        match name {
            b"host" => {
                if self.seen & HOST != 0 {
                    return Err(FieldError::DuplicateHost);
                }
                self.seen |= HOST;
                self.host.extend_from_slice(value);
            }
            b"content-length" => {
                if self.seen & LENGTH != 0 {
                    return Err(FieldError::ContentLength);
                }
                self.seen |= LENGTH;
                self.content_length = content_length(value).ok_or(FieldError::ContentLength)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The verdict on the whole section.
    pub fn finish(&self) -> Result<RequestFacts, FieldError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let seen = self.seen;
        if seen & METHOD == 0 {
            return Err(FieldError::NoMethod);
        }
        if seen & CONNECT != 0 {
            // §4.4: only :method and :authority.
            if seen & AUTHORITY == 0 || self.authority.is_empty() || seen & (SCHEME | PATH) != 0 {
                return Err(FieldError::Connect);
            }
        } else {
            if seen & SCHEME == 0 {
                return Err(FieldError::NoScheme);
            }
            if seen & PATH == 0 || self.path_empty {
                return Err(FieldError::NoPath);
            }
            // §4.3.1: http and https (all we serve) need an authority, and neither field may
            // be empty.
            let empty = |bit: u8, v: &[u8]| seen & bit != 0 && v.is_empty();
            if seen & (AUTHORITY | HOST) == 0
                || empty(AUTHORITY, &self.authority)
                || empty(HOST, &self.host)
            {
                return Err(FieldError::NoAuthority);
            }
        }
        if seen & AUTHORITY != 0
            && seen & HOST != 0
            && !self.authority.eq_ignore_ascii_case(&self.host)
        {
            return Err(FieldError::AuthorityMismatch);
        }
        Ok(RequestFacts {
            content_length: (seen & LENGTH != 0).then_some(self.content_length),
            connect: seen & CONNECT != 0,
        })
    }
}

/// The rules for any regular field (§4.2): its name, and the connection-specific fields.
fn regular(name: &[u8], value: &[u8]) -> Result<(), FieldError> {
    if name.is_empty() || !name.iter().all(|&b| NAME[b as usize]) {
        return Err(FieldError::BadName);
    }
    match name {
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade" => {
            Err(FieldError::ConnectionSpecific)
        }
        b"te" if !value.eq_ignore_ascii_case(b"trailers") => Err(FieldError::Te),
        _ => Ok(()),
    }
}

/// A trailer section's field line (§4.1.2): no pseudo-headers, and the rules of any field.
pub fn trailer_field(name: &[u8], value: &[u8]) -> Result<(), FieldError> {
    if name.starts_with(b":") {
        return Err(FieldError::PseudoInTrailers);
    }
    if !valid_value(value) {
        return Err(FieldError::BadValue);
    }
    regular(name, value)
}

/// A response's facts once its fields are valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseFacts {
    /// 0 for trailers.
    pub status: u16,
    pub content_length: Option<u64>,
    /// Regular fields, counted as HTTP/1.1 would spell them (`name: value\r\n`).
    pub field_bytes: u64,
}

/// Validates one response field section (or trailer section) at a time; allocates nothing.
#[derive(Debug, Default)]
pub struct ResponseFields {
    trailers: bool,
    seen: u8,
    facts: Option<ResponseFacts>,
    error: Option<FieldError>,
}

impl ResponseFields {
    /// Start a new section: a response head, or `trailers`.
    pub fn begin(&mut self, trailers: bool) {
        self.trailers = trailers;
        self.seen = 0;
        self.facts = Some(ResponseFacts {
            status: 0,
            content_length: None,
            field_bytes: 0,
        });
        self.error = None;
    }

    /// The next field line, in the order received.
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.error.is_none() {
            if let Err(e) = self.check(name, value) {
                self.error = Some(e);
            }
        }
    }

    fn check(&mut self, name: &[u8], value: &[u8]) -> Result<(), FieldError> {
        if !valid_value(value) {
            return Err(FieldError::BadValue);
        }
        let facts = self.facts.as_mut().expect("begin() first");
        if self.trailers {
            trailer_field(name, value)?;
            facts.field_bytes += (name.len() + value.len() + 4) as u64;
            return Ok(());
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.seen & REGULAR != 0 {
                return Err(FieldError::PseudoAfterRegular);
            }
            if pseudo != b"status" {
                return Err(match pseudo {
                    b"method" | b"scheme" | b"authority" | b"path" | b"protocol" => {
                        FieldError::RequestPseudo
                    }
                    _ => FieldError::UnknownPseudo,
                });
            }
            if self.seen & STATUS != 0 {
                return Err(FieldError::DuplicatePseudo);
            }
            self.seen |= STATUS;
            facts.status = match *value {
                [a @ b'1'..=b'9', b, c] if b.is_ascii_digit() && c.is_ascii_digit() => {
                    (a - b'0') as u16 * 100 + (b - b'0') as u16 * 10 + (c - b'0') as u16
                }
                _ => return Err(FieldError::BadStatus),
            };
            return Ok(());
        }
        regular(name, value)?;
        self.seen |= REGULAR;
        facts.field_bytes += (name.len() + value.len() + 4) as u64;
        if name == b"content-length" {
            let n = content_length(value).ok_or(FieldError::ContentLength)?;
            // Repeated only with the same value (RFC 9110 §8.6).
            if facts.content_length.is_some_and(|l| l != n) {
                return Err(FieldError::ContentLength);
            }
            facts.content_length = Some(n);
        }
        Ok(())
    }

    /// The verdict on the whole section.
    pub fn finish(&self) -> Result<ResponseFacts, FieldError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let facts = self.facts.expect("begin() first");
        if !self.trailers && self.seen & STATUS == 0 {
            return Err(FieldError::BadStatus);
        }
        Ok(facts)
    }
}

/// DATA bytes against a message's `content-length` (§4.1.2), counted as they arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLength {
    expected: Option<u64>,
    received: u64,
}

impl BodyLength {
    pub fn new(expected: Option<u64>) -> BodyLength {
        BodyLength {
            expected,
            received: 0,
        }
    }

    /// `n` more DATA bytes: an error as soon as they exceed the length.
    pub fn data(&mut self, n: u64) -> Result<(), FieldError> {
        self.received += n;
        match self.expected {
            Some(e) if self.received > e => Err(FieldError::BodyMismatch),
            _ => Ok(()),
        }
    }

    /// The stream ended: an error if fewer bytes came than the length.
    pub fn end(&self) -> Result<(), FieldError> {
        match self.expected {
            Some(e) if self.received != e => Err(FieldError::BodyMismatch),
            _ => Ok(()),
        }
    }

    /// DATA bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use FieldError::*;

    /// Each byte never allowed in a value, at every position of values long enough for whole
    /// words and a rest: found; every other byte: not.
    #[test]
    fn bad_value_bytes_are_found_anywhere() {
        for len in [1, 7, 8, 9, 16, 23, 40] {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut v = vec![b'x'; len];
                    v[at] = b;
                    assert_eq!(
                        has_bad_byte(&v),
                        BAD_VALUE[b as usize],
                        "byte {b:#x} at {at} of {len}"
                    );
                }
            }
        }
    }

    const BASE: &[(&str, &str)] = &[
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a.example"),
        (":path", "/"),
    ];

    type Verdict = Result<RequestFacts, FieldError>;
    type Fields = Vec<(&'static str, &'static str)>;

    fn verdict(fields: &[(&str, &str)]) -> Verdict {
        let mut v = RequestFields::default();
        // Twice on one validator: reuse must not carry state over.
        for _ in 0..2 {
            v.begin();
            for (n, val) in fields {
                v.field(n.as_bytes(), val.as_bytes());
            }
        }
        v.finish()
    }

    fn with(extra: &[(&'static str, &'static str)]) -> Fields {
        BASE.iter().chain(extra).copied().collect()
    }

    #[test]
    fn rules() {
        let ok = Ok(RequestFacts {
            content_length: None,
            connect: false,
        });
        let cases: Vec<(&str, Fields, Verdict)> = vec![
            ("plain GET", with(&[]), ok),
            (
                "regular fields",
                with(&[("accept", "*/*"), ("te", "trailers"), ("x-a", "b c")]),
                ok,
            ),
            (
                "content-length",
                with(&[("content-length", "12")]),
                Ok(RequestFacts {
                    content_length: Some(12),
                    connect: false,
                }),
            ),
            ("host agrees", with(&[("host", "A.example")]), ok),
            (
                "host alone",
                vec![
                    (":method", "GET"),
                    (":scheme", "http"),
                    (":path", "/"),
                    ("host", "h"),
                ],
                ok,
            ),
            (
                "CONNECT",
                vec![(":method", "CONNECT"), (":authority", "h:443")],
                Ok(RequestFacts {
                    content_length: None,
                    connect: true,
                }),
            ),
            ("upper-case name", with(&[("Accept", "x")]), Err(BadName)),
            ("empty name", with(&[("", "x")]), Err(BadName)),
            ("name with space", with(&[("a b", "x")]), Err(BadName)),
            (
                "connection",
                with(&[("connection", "close")]),
                Err(ConnectionSpecific),
            ),
            (
                "keep-alive",
                with(&[("keep-alive", "5")]),
                Err(ConnectionSpecific),
            ),
            (
                "proxy-connection",
                with(&[("proxy-connection", "x")]),
                Err(ConnectionSpecific),
            ),
            (
                "transfer-encoding",
                with(&[("transfer-encoding", "chunked")]),
                Err(ConnectionSpecific),
            ),
            (
                "upgrade",
                with(&[("upgrade", "h2c")]),
                Err(ConnectionSpecific),
            ),
            ("te gzip", with(&[("te", "gzip")]), Err(Te)),
            (
                "pseudo after regular",
                vec![
                    (":method", "GET"),
                    ("a", "b"),
                    (":scheme", "https"),
                    (":path", "/"),
                ],
                Err(PseudoAfterRegular),
            ),
            (
                "duplicate :path",
                with(&[(":path", "/")]),
                Err(DuplicatePseudo),
            ),
            ("unknown pseudo", with(&[(":foo", "x")]), Err(UnknownPseudo)),
            (
                "response pseudo",
                with(&[(":status", "200")]),
                Err(ResponsePseudo),
            ),
            (
                "extended CONNECT",
                with(&[(":protocol", "websocket")]),
                Err(ExtendedConnect),
            ),
            ("no :method", BASE[1..].to_vec(), Err(NoMethod)),
            (
                "no :scheme",
                vec![(":method", "GET"), (":authority", "a"), (":path", "/")],
                Err(NoScheme),
            ),
            ("no :path", BASE[..3].to_vec(), Err(NoPath)),
            (
                "empty :path",
                vec![
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":authority", "a"),
                    (":path", ""),
                ],
                Err(NoPath),
            ),
            (
                "no authority",
                vec![(":method", "GET"), (":scheme", "https"), (":path", "/")],
                Err(NoAuthority),
            ),
            (
                "empty :authority",
                vec![
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":authority", ""),
                    (":path", "/"),
                ],
                Err(NoAuthority),
            ),
            (
                "host disagrees",
                with(&[("host", "b.example")]),
                Err(AuthorityMismatch),
            ),
            (
                "host twice",
                with(&[("host", "a.example"), ("host", "a.example")]),
                Err(DuplicateHost),
            ),
            (
                "CONNECT without :authority",
                vec![(":method", "CONNECT")],
                Err(Connect),
            ),
            (
                "CONNECT with :path",
                vec![
                    (":method", "CONNECT"),
                    (":authority", "h:443"),
                    (":path", "/"),
                ],
                Err(Connect),
            ),
            (
                "CONNECT with :scheme",
                vec![
                    (":method", "CONNECT"),
                    (":scheme", "https"),
                    (":authority", "h:443"),
                ],
                Err(Connect),
            ),
            ("value with NUL", with(&[("a", "b\0c")]), Err(BadValue)),
            ("value with CR", with(&[("a", "b\rc")]), Err(BadValue)),
            ("value with LF", with(&[("a", "b\nc")]), Err(BadValue)),
            ("leading space", with(&[("a", " b")]), Err(BadValue)),
            ("trailing tab", with(&[("a", "b\t")]), Err(BadValue)),
            (
                "content-length sign",
                with(&[("content-length", "+1")]),
                Err(ContentLength),
            ),
            (
                "content-length empty",
                with(&[("content-length", "")]),
                Err(ContentLength),
            ),
            (
                "content-length overflow",
                with(&[("content-length", "99999999999999999999")]),
                Err(ContentLength),
            ),
            (
                "content-length twice",
                with(&[("content-length", "1"), ("content-length", "1")]),
                Err(ContentLength),
            ),
        ];
        for (what, fields, want) in cases {
            assert_eq!(verdict(&fields), want, "{what}");
        }
    }

    #[test]
    fn body_length() {
        let mut b = BodyLength::new(Some(5));
        assert_eq!(b.data(3), Ok(()));
        assert_eq!(b.end(), Err(BodyMismatch));
        assert_eq!(b.data(2), Ok(()));
        assert_eq!(b.end(), Ok(()));
        assert_eq!(b.data(1), Err(BodyMismatch));
        let mut b = BodyLength::new(None);
        assert_eq!(b.data(7), Ok(()));
        assert_eq!(b.end(), Ok(()));
        assert_eq!(b.received(), 7);
    }

    type ResponseVerdict = Result<ResponseFacts, FieldError>;

    fn response(trailers: bool, fields: &[(&str, &str)]) -> ResponseVerdict {
        let mut v = ResponseFields::default();
        v.begin(trailers);
        for (n, val) in fields {
            v.field(n.as_bytes(), val.as_bytes());
        }
        v.finish()
    }

    #[test]
    fn response_rules() {
        let ok = |status, content_length, field_bytes| {
            Ok(ResponseFacts {
                status,
                content_length,
                field_bytes,
            })
        };
        let cases: Vec<(&str, bool, Fields, ResponseVerdict)> = vec![
            (
                "200",
                false,
                vec![(":status", "200"), ("a", "b")],
                ok(200, None, 6),
            ),
            (
                "content-length twice, same",
                false,
                vec![
                    (":status", "200"),
                    ("content-length", "1"),
                    ("content-length", "1"),
                ],
                ok(200, Some(1), 2 * 19),
            ),
            ("trailers", true, vec![("x-t", "1")], ok(0, None, 8)),
            ("no :status", false, vec![("a", "b")], Err(BadStatus)),
            (
                ":status twice",
                false,
                vec![(":status", "200"), (":status", "200")],
                Err(DuplicatePseudo),
            ),
            (
                ":status not 3 digits",
                false,
                vec![(":status", "20")],
                Err(BadStatus),
            ),
            (
                ":status 099",
                false,
                vec![(":status", "099")],
                Err(BadStatus),
            ),
            (
                ":status after a field",
                false,
                vec![("a", "b"), (":status", "200")],
                Err(PseudoAfterRegular),
            ),
            (
                "request pseudo",
                false,
                vec![(":status", "200"), (":path", "/")],
                Err(RequestPseudo),
            ),
            (
                "unknown pseudo",
                false,
                vec![(":x", "1")],
                Err(UnknownPseudo),
            ),
            (
                "pseudo in trailers",
                true,
                vec![(":status", "200")],
                Err(PseudoInTrailers),
            ),
            (
                "upper-case name",
                false,
                vec![(":status", "200"), ("Server", "x")],
                Err(BadName),
            ),
            (
                "connection-specific",
                false,
                vec![(":status", "200"), ("transfer-encoding", "chunked")],
                Err(ConnectionSpecific),
            ),
            (
                "content-length differing",
                false,
                vec![
                    (":status", "200"),
                    ("content-length", "1"),
                    ("content-length", "2"),
                ],
                Err(ContentLength),
            ),
            (
                "value with LF",
                false,
                vec![(":status", "200"), ("a", "b\nc")],
                Err(BadValue),
            ),
        ];
        for (what, trailers, fields, want) in cases {
            assert_eq!(response(trailers, &fields), want, "{what}");
        }
    }
}
