//! The request head as the exchange reads it, built field by field by every engine (HTTP/1.x
//! from its text, HTTP/2 from HPACK, HTTP/3 from QPACK): the one place that decides which
//! fields matter and how repeated ones combine, so that the same head means the same thing on
//! every protocol.
//!
//! A field sent twice is one field whose value is the lines' values joined with `", "` (RFC
//! 9110 §5.3), in their order:
//! - `x-loadterm`: the joined value is read as one vocabulary string (`,` and the space after
//!   it separate parameters), so both lines apply, and a letter in the later line overrides the
//!   same letter in the earlier one, as a repeated query parameter does;
//! - `expect`: a list of expectations (§10.1.1); `100-continue` is expected when any member
//!   of it is `100-continue` (case-insensitive). Other expectations are ignored, not refused
//!   with 417;
//! - `if-match`, `if-none-match`: lists of entity-tags, compared member by member;
//! - `connection` (HTTP/1.x; malformed in HTTP/2 and HTTP/3, which refuse it before): the
//!   `close` and `keep-alive` options of every line.
//!
//! Every other field is counted (for `x-req`'s size) and otherwise ignored.

use crate::{RequestSummary, Version};
use loadterm_plan::CONTROL_HEADER;

/// A request head, fed field by field ([`HeadBuilder::field`]) and read as a
/// [`RequestSummary`]. Reused between requests: [`HeadBuilder::begin`] clears it, keeping its
/// buffers.
#[derive(Debug, Default)]
pub struct HeadBuilder {
    method: Method,
    /// The method's length, for `x-req`'s size.
    method_len: usize,
    target: Vec<u8>,
    control: Option<Vec<u8>>,
    expect_continue: bool,
    if_match: Option<Vec<u8>>,
    if_none_match: Option<Vec<u8>>,
    conn_close: bool,
    conn_keep_alive: bool,
    /// Regular fields' size as HTTP/1.1 lines (`name: value\r\n`).
    field_bytes: usize,
}

/// What the exchange tells apart of the method.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Head,
    #[default]
    Other,
}

impl HeadBuilder {
    /// A new request head.
    pub fn begin(&mut self) {
        self.method = Method::Other;
        self.method_len = 0;
        self.target.clear();
        self.control = None;
        self.expect_continue = false;
        self.if_match = None;
        self.if_none_match = None;
        self.conn_close = false;
        self.conn_keep_alive = false;
        self.field_bytes = 0;
    }

    /// The method (HTTP/1.x's request line, `:method`).
    pub fn method(&mut self, method: &[u8]) {
        self.method_len = method.len();
        self.method = match method {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            _ => Method::Other,
        };
    }

    /// The request-target (HTTP/1.x's request line, `:path`), as sent: no percent-decoding.
    pub fn target(&mut self, target: &[u8]) {
        self.target.clear();
        self.target.extend_from_slice(target);
    }

    /// One field line, its name in any case (HTTP/1.x's are case-insensitive; HTTP/2's and
    /// HTTP/3's are lower case). The pseudo-fields `:method` and `:path` are taken as
    /// [`HeadBuilder::method`] and [`HeadBuilder::target`], other pseudo-fields ignored.
    #[inline]
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        if let Some(pseudo) = name.strip_prefix(b":") {
            match pseudo {
                b"method" => self.method(value),
                b"path" => self.target(value),
                _ => {}
            }
            return;
        }
        self.field_bytes += name.len() + value.len() + 4;
        let is = |known: &str| name.eq_ignore_ascii_case(known.as_bytes());
        // By length first: most fields are none of these.
        match name.len() {
            6 if is("expect") => {
                self.expect_continue |=
                    members(value).any(|m| m.eq_ignore_ascii_case(b"100-continue"));
            }
            8 if is("if-match") => join(&mut self.if_match, value),
            10 if is(CONTROL_HEADER) => join(&mut self.control, value),
            10 if is("connection") => {
                for option in members(value) {
                    self.conn_close |= option.eq_ignore_ascii_case(b"close");
                    self.conn_keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
                }
            }
            13 if is("if-none-match") => join(&mut self.if_none_match, value),
            _ => {}
        }
    }

    /// The request-target as the exchange reads it: an empty `:path` is `/`.
    pub fn target_bytes(&self) -> &[u8] {
        if self.target.is_empty() {
            b"/"
        } else {
            &self.target
        }
    }

    /// The method is HEAD.
    pub fn is_head(&self) -> bool {
        self.method == Method::Head
    }

    /// The head's size as HTTP/1.1 text, every field as `name: value\r\n`: what `x-req`
    /// reports for HTTP/2 and HTTP/3 (HTTP/1.x reports the bytes it read).
    pub fn text_size(&self) -> u64 {
        crate::head_bytes(self.method_len, self.target_bytes().len(), self.field_bytes)
    }

    /// What the exchange needs of this head, on `version`: `has_body`, a request body follows;
    /// `head_bytes`, the head's size for `x-req`; `date`, as [`RequestSummary::date`].
    pub fn summary(
        &self,
        version: Version,
        has_body: bool,
        head_bytes: u64,
        date: bool,
    ) -> RequestSummary<'_> {
        RequestSummary {
            version,
            is_head: self.method == Method::Head,
            target: self.target_bytes(),
            control: self.control.as_deref(),
            expect_continue: self.expect_continue,
            conn_close: self.conn_close,
            conn_keep_alive: self.conn_keep_alive,
            has_body,
            head_bytes,
            date,
            is_get: self.method == Method::Get,
            if_match: self.if_match.as_deref(),
            if_none_match: self.if_none_match.as_deref(),
        }
    }
}

/// A repeated field's value: the earlier lines', then `", "` and this one's (RFC 9110 §5.3).
fn join(slot: &mut Option<Vec<u8>>, value: &[u8]) {
    match slot {
        Some(v) => {
            v.extend_from_slice(b", ");
            v.extend_from_slice(value);
        }
        None => *slot = Some(value.to_vec()),
    }
}

/// The members of a list-valued field (RFC 9110 §5.6.1), empty ones skipped.
fn members(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|m| !m.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(fields: &[(&str, &str)]) -> HeadBuilder {
        let mut h = HeadBuilder::default();
        h.begin();
        for (n, v) in fields {
            h.field(n.as_bytes(), v.as_bytes());
        }
        h
    }

    #[test]
    fn repeated_fields_are_joined_with_comma_space() {
        let h = head(&[
            (":method", "GET"),
            (":path", "/?s=1"),
            ("x-loadterm", "s=2"),
            ("X-Loadterm", "r=404"),
            ("if-none-match", "\"a\""),
            ("If-None-Match", "W/\"b\""),
        ]);
        let s = h.summary(Version::H2, false, 0, false);
        assert_eq!(s.control, Some(&b"s=2, r=404"[..]));
        assert_eq!(s.if_none_match, Some(&b"\"a\", W/\"b\""[..]));
        assert_eq!(s.if_match, None);
        assert!(s.is_get && !s.is_head);
        assert_eq!(s.target, b"/?s=1");
    }

    #[test]
    fn any_member_of_expect_asks_for_100_continue() {
        for (fields, want) in [
            (&[("expect", "100-continue")][..], true),
            (&[("Expect", "100-CONTINUE")], true),
            (&[("expect", "100-continue"), ("expect", "x-other")], true),
            (&[("expect", "x-other"), ("expect", "100-continue")], true),
            (&[("expect", "x-other, 100-continue")], true),
            (&[("expect", "x-other")], false),
            (&[], false),
        ] {
            let s = head(fields)
                .summary(Version::Http11, true, 0, false)
                .expect_continue;
            assert_eq!(s, want, "{fields:?}");
        }
    }

    #[test]
    fn connection_options_of_every_line() {
        let h = head(&[("Connection", "foo, Keep-Alive"), ("connection", "close")]);
        let s = h.summary(Version::Http10, false, 0, false);
        assert!(s.conn_close && s.conn_keep_alive);
    }

    #[test]
    fn text_size_counts_regular_fields_as_lines() {
        let h = head(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", ""),
            ("ab", "cd"),
        ]);
        // "GET / HTTP/1.1\r\n" (16) + "ab: cd\r\n" (8).
        assert_eq!(h.text_size(), 24);
        assert_eq!(h.target_bytes(), b"/");
    }
}
