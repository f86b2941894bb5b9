//! Differential test of the HTTP/1.x request parser (head and chunked body) against a reference
//! model written plainly from RFC 9112: httparse for the tokenising, then the framing rules
//! (§6: Transfer-Encoding and Content-Length; §7.1: chunked). Generated and mutated requests in
//! request-smuggling shapes. Two properties, in both modes:
//! - loadterm never accepts what the reference rejects;
//! - when both accept: same head length, method, target, Host and body framing, and a chunked
//!   body ends at the same byte.
//!
//! `DIFF_ITERS` (inputs, default 20 000), `DIFF_SECONDS` (run for that long instead) and
//! `DIFF_SEED` scale it; `fuzz/differential.sh` runs it for minutes in release mode.

use loadterm_plan::Rng;
use loadterm_server::h1::body::RequestBody;
use loadterm_server::h1::head::{self, BodyFraming, Parsed, RequestHead};
use std::time::{Duration, Instant};

/// What the reference makes of a head.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Partial,
    Reject(&'static str),
    Accept(Reference),
}

#[derive(Debug, PartialEq, Eq)]
struct Reference {
    len: usize,
    method: Vec<u8>,
    target: Vec<u8>,
    /// The last Host value (lenient mode keeps the last of several).
    host: Option<Vec<u8>>,
    framing: BodyFraming,
}

/// httparse, then RFC 9112's framing rules.
fn reference_head(buf: &[u8], lenient: bool) -> Verdict {
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Verdict::Partial,
        Err(_) => return Verdict::Reject("httparse"),
    };
    let (method, target, version) = (req.method.unwrap(), req.path.unwrap(), req.version.unwrap());
    let mut host = None;
    let mut lengths: Vec<u64> = Vec::new();
    let mut codings: Vec<String> = Vec::new();
    let mut te = false;
    for h in req.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or("\u{fffd}");
        if h.name.eq_ignore_ascii_case("host") {
            host = Some(h.value.to_vec());
        } else if h.name.eq_ignore_ascii_case("content-length") {
            // RFC 9110 §8.6: 1*DIGIT; a list of identical values MAY be accepted.
            for v in value.split(',').map(|v| v.trim_matches([' ', '\t'])) {
                if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Verdict::Reject("Content-Length not 1*DIGIT");
                }
                match v.parse::<u64>() {
                    Ok(n) => lengths.push(n),
                    Err(_) => return Verdict::Reject("Content-Length overflow"),
                }
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            te = true;
            codings.extend(
                value
                    .split(',')
                    .map(|c| c.trim_matches([' ', '\t']).to_ascii_lowercase())
                    .filter(|c| !c.is_empty()),
            );
        }
    }
    if lengths.windows(2).any(|w| w[0] != w[1]) {
        return Verdict::Reject("Content-Length values differ");
    }
    if method == "CONNECT" {
        return Verdict::Reject("CONNECT is a tunnel, not a message");
    }
    let framing = if te {
        // §6.1: HTTP/1.0 with Transfer-Encoding is faulty framing (lenient mode takes it).
        if version == 0 && !lenient {
            return Verdict::Reject("Transfer-Encoding on HTTP/1.0");
        }
        // §6.1/§6.3: chunked last, once; anything else cannot be framed; with Content-Length,
        // the server MAY reject (and does).
        if codings.last().map(String::as_str) != Some("chunked")
            || codings.iter().filter(|c| *c == "chunked").count() > 1
        {
            return Verdict::Reject("chunked not the single final coding");
        }
        if !lengths.is_empty() {
            return Verdict::Reject("Transfer-Encoding with Content-Length");
        }
        BodyFraming::Chunked
    } else {
        match lengths.first() {
            None | Some(0) => BodyFraming::None,
            Some(&n) => BodyFraming::Length(n),
        }
    };
    Verdict::Accept(Reference {
        len,
        method: method.as_bytes().to_vec(),
        target: target.as_bytes().to_vec(),
        host,
        framing,
    })
}

fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// RFC 9112 §7.1 chunked-body: `Some(Ok(n))` ends at byte n, `Some(Err)` is malformed, `None`
/// incomplete. Written from the ABNF, line by line, with no limits.
fn reference_chunked(b: &[u8]) -> Option<Result<usize, &'static str>> {
    let mut i = 0;
    // Take a line ending in CRLF; a bare CR or LF inside it is an error.
    let line = |i: usize| -> Option<Result<(&[u8], usize), &'static str>> {
        let rest = &b[i..];
        let lf = rest.iter().position(|&c| c == b'\n')?;
        if lf == 0 || rest[lf - 1] != b'\r' || rest[..lf - 1].contains(&b'\r') {
            return Some(Err("line not ended by CRLF"));
        }
        Some(Ok((&rest[..lf - 1], i + lf + 1)))
    };
    loop {
        let (l, next) = match line(i)? {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        let digits = l.iter().take_while(|c| c.is_ascii_hexdigit()).count();
        if digits == 0 {
            return Some(Err("no chunk-size"));
        }
        let Ok(size) = u64::from_str_radix(std::str::from_utf8(&l[..digits]).unwrap(), 16) else {
            return Some(Err("chunk-size overflow"));
        };
        if !chunk_ext(&l[digits..]) {
            return Some(Err("bad chunk-ext"));
        }
        i = next;
        if size == 0 {
            break;
        }
        let end = i.checked_add(usize::try_from(size).ok()?)?;
        if b.len() < end + 2 {
            return None;
        }
        if &b[end..end + 2] != b"\r\n" {
            return Some(Err("chunk-data not followed by CRLF"));
        }
        i = end + 2;
    }
    // trailer-section CRLF
    loop {
        let (l, next) = match line(i)? {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        i = next;
        if l.is_empty() {
            return Some(Ok(i));
        }
        let colon = l.iter().position(|&c| c == b':');
        let ok = colon.is_some_and(|c| {
            c > 0
                && l[..c].iter().all(|&x| tchar(x))
                && l[c + 1..]
                    .iter()
                    .all(|&x| x == b'\t' || (x >= b' ' && x != 0x7f))
        });
        if !ok {
            return Some(Err("bad trailer field"));
        }
    }
}

/// `*( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )`.
fn chunk_ext(mut s: &[u8]) -> bool {
    let bws = |s: &mut &[u8]| {
        while let [b' ' | b'\t', rest @ ..] = *s {
            *s = rest;
        }
    };
    let token = |s: &mut &[u8]| {
        let n = s.iter().take_while(|&&c| tchar(c)).count();
        *s = &s[n..];
        n > 0
    };
    loop {
        bws(&mut s);
        match s {
            [] => return true,
            [b';', rest @ ..] => s = rest,
            _ => return false,
        }
        bws(&mut s);
        if !token(&mut s) {
            return false;
        }
        let mut t = s;
        bws(&mut t);
        if let [b'=', rest @ ..] = t {
            s = rest;
            bws(&mut s);
            if let [b'"', rest @ ..] = s {
                // quoted-string
                s = rest;
                loop {
                    match s {
                        [b'"', rest @ ..] => {
                            s = rest;
                            break;
                        }
                        [b'\\', c, rest @ ..] if *c == b'\t' || (*c >= b' ' && *c != 0x7f) => {
                            s = rest
                        }
                        [c, rest @ ..]
                            if *c == b'\t'
                                || *c == b' '
                                || *c == 0x21
                                || (0x23..=0x5b).contains(c)
                                || (0x5d..=0x7e).contains(c)
                                || *c >= 0x80 =>
                        {
                            s = rest
                        }
                        _ => return false,
                    }
                }
            } else if !token(&mut s) {
                return false;
            }
        }
    }
}

/// Pieces of requests in smuggling shapes.
const METHODS: &[&str] = &[
    "GET", "POST", "PUT", "HEAD", "OPTIONS", "CONNECT", "get", "G T",
];
const TARGETS: &[&str] = &[
    "/",
    "/?s=1",
    "*",
    "http://a.example/p?q",
    "a.example:443",
    "/caf\u{e9}",
    "/%zz",
    "/a#f",
    "//x",
    "/a{b}",
];
const VERSIONS: &[&str] = &[
    "HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "http/1.1",
];
const EOLS: &[&str] = &["\r\n", "\r\n", "\r\n", "\r\n", "\r\n", "\n", "\r", "\r\r\n"];
const FIELDS: &[&str] = &[
    "Host: x",
    "Host: a.example:80",
    "Host: a, b",
    "Host:",
    "Host: u@h",
    "Content-Length: 5",
    "Content-Length: 0",
    "Content-Length: 5, 5",
    "Content-Length: 5, 6",
    "Content-Length: +5",
    "Content-Length:  5 ",
    "Content-Length: 99999999999999999999",
    "Transfer-Encoding: chunked",
    "Transfer-Encoding: Chunked",
    "Transfer-Encoding: chunked, identity",
    "Transfer-Encoding: gzip, chunked",
    "Transfer-Encoding: chunked, chunked",
    "Transfer-Encoding:",
    "Transfer-Encoding: ,chunked,",
    "Transfer-Encoding : chunked",
    " Transfer-Encoding: chunked",
    "Transfer-Encoding:\tchunked",
    "Transfer-Encoding: \x0bchunked",
    "Transfer-Encoding: xchunked",
    "Transfer_Encoding: chunked",
    "X: y",
    "X: a\x00b",
    "Expect: 100-continue",
    "Connection: close",
];
const SIZE_LINES: &[&str] = &[
    "5",
    "5",
    "5;",
    "5;a",
    "5;a=b",
    "5;a=\"q\\\"x\"",
    "5;a=\"unterminated",
    "5 ",
    "5 ;a",
    "5; a = b",
    "5;bad[=x",
    "5;a=\x01",
    "5;a\x00",
    "05",
    "0x5",
    "-5",
    "",
];
const BYTES: &[u8] = b" \t\r\n:;,=\"\\\x00\x7f\xffa0/";

struct Gen {
    rng: Rng,
}

impl Gen {
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.rng.next_u32() as usize % from.len()]
    }

    fn below(&mut self, n: u32) -> u32 {
        self.rng.next_u32() % n
    }

    fn request(&mut self, out: &mut Vec<u8>) {
        let eol = |g: &mut Gen| {
            if g.below(8) == 0 {
                g.pick(EOLS)
            } else {
                "\r\n"
            }
        };
        let line = format!(
            "{} {} {}{}",
            self.pick(METHODS),
            self.pick(TARGETS),
            self.pick(VERSIONS),
            eol(self)
        );
        out.extend_from_slice(line.as_bytes());
        if self.below(5) != 0 {
            out.extend_from_slice(b"Host: x\r\n");
        }
        for _ in 0..self.below(4) {
            let f = if self.below(2) == 0 {
                self.pick(FIELDS)
            } else {
                self.pick(&["Content-Length: 5", "Transfer-Encoding: chunked", "X: y"])
            };
            out.extend_from_slice(f.as_bytes());
            out.extend_from_slice(eol(self).as_bytes());
        }
        out.extend_from_slice(eol(self).as_bytes());
        // A body, chunked-shaped or not; with an extension of every length now and then.
        for _ in 0..self.below(3) {
            let mut size = self.pick(SIZE_LINES).to_string();
            if self.below(20) == 0 {
                size.push_str(&format!(";x={}", "e".repeat(self.below(6000) as usize)));
            }
            out.extend_from_slice(size.as_bytes());
            out.extend_from_slice(eol(self).as_bytes());
            out.extend_from_slice(b"hello");
            out.extend_from_slice(eol(self).as_bytes());
        }
        if self.below(2) == 0 {
            out.extend_from_slice(b"0");
            out.extend_from_slice(eol(self).as_bytes());
            if self.below(3) == 0 {
                out.extend_from_slice(b"T: v");
                out.extend_from_slice(eol(self).as_bytes());
            }
            out.extend_from_slice(eol(self).as_bytes());
        }
        out.extend_from_slice(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n");
    }

    fn mutate(&mut self, buf: &mut Vec<u8>) {
        for _ in 0..1 + self.below(3) {
            let at = self.below(buf.len() as u32) as usize;
            match self.below(4) {
                0 => buf[at] = BYTES[self.below(BYTES.len() as u32) as usize],
                1 => {
                    buf.remove(at);
                }
                2 => buf.insert(at, BYTES[self.below(BYTES.len() as u32) as usize]),
                _ => {
                    // Duplicate the line that holds `at`.
                    let start = buf[..at]
                        .iter()
                        .rposition(|&b| b == b'\n')
                        .map_or(0, |i| i + 1);
                    let end = buf[at..]
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(buf.len(), |i| at + i + 1);
                    let line = buf[start..end].to_vec();
                    buf.splice(start..start, line);
                }
            }
        }
    }
}

/// Compares loadterm with the reference on one input: whether loadterm accepted the head, and
/// a finding's description if the two differ.
fn check(buf: &[u8], lenient: bool, head: &mut RequestHead) -> (bool, Option<String>) {
    let ours = head::parse(buf, head, lenient);
    let theirs = reference_head(buf, lenient);
    let reference = match (&ours, theirs) {
        (Parsed::Complete, Verdict::Accept(r)) => r,
        (Parsed::Complete, other) => {
            return (true, Some(format!("accepted, reference says {other:?}")))
        }
        _ => return (false, None),
    };
    (true, compare(buf, head, reference))
}

/// Both accepted the head: the finding if what they read differs.
fn compare(buf: &[u8], head: &RequestHead, reference: Reference) -> Option<String> {
    let host = head.host.clone().map(|r| buf[r].to_vec());
    let got = Reference {
        len: head.len,
        method: buf[head.method.clone()].to_vec(),
        target: head.request.target_bytes().to_vec(),
        host,
        framing: head.body.unwrap_or(BodyFraming::None),
    };
    if got != reference {
        return Some(format!("disagree: ours {got:?}, reference {reference:?}"));
    }
    if got.framing == BodyFraming::Chunked {
        let body = &buf[head.len..];
        let mut dec = RequestBody::new(BodyFraming::Chunked);
        let ours = dec.feed(body);
        match (ours, reference_chunked(body)) {
            (Ok(n), Some(Ok(m))) if dec.is_done() && n != m => {
                return Some(format!("chunked body ends at {n}, reference at {m}"))
            }
            (Ok(_), Some(Err(why))) if dec.is_done() => {
                return Some(format!("chunked body accepted, reference: {why}"))
            }
            (Ok(_), None) if dec.is_done() => {
                return Some("chunked body ended, reference wants more".into())
            }
            _ => {}
        }
    }
    None
}

#[test]
fn loadterm_accepts_no_more_than_the_reference_and_agrees_with_it() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let seed = env("DIFF_SEED").unwrap_or(0x5EED) as u32;
    let deadline = env("DIFF_SECONDS").map(|s| Instant::now() + Duration::from_secs(s));
    let iters = if deadline.is_some() {
        u64::MAX
    } else {
        env("DIFF_ITERS").unwrap_or(20_000)
    };
    let mut g = Gen {
        rng: Rng::new(seed),
    };
    let mut head = RequestHead::default();
    let mut buf = Vec::new();
    let mut findings = Vec::new();
    let (mut inputs, mut accepted) = (0u64, 0u64);
    let t0 = Instant::now();
    while inputs < iters && deadline.is_none_or(|d| inputs % 1024 != 0 || Instant::now() < d) {
        buf.clear();
        g.request(&mut buf);
        if g.below(3) == 0 {
            g.mutate(&mut buf);
        }
        for lenient in [false, true] {
            let (ok, finding) = check(&buf, lenient, &mut head);
            if let Some(f) = finding {
                findings.push(format!(
                    "{f} (lenient={lenient}): {:?}",
                    String::from_utf8_lossy(&buf)
                ));
            }
            accepted += u64::from(ok && !lenient);
        }
        inputs += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "differential: seed {seed:#x}, {inputs} inputs ({accepted} accepted in strict mode) \
         in {secs:.2} s, {:.0} inputs/s, {} findings",
        inputs as f64 / secs,
        findings.len()
    );
    for f in findings.iter().take(20) {
        println!("  {f}");
    }
    assert!(
        findings.is_empty(),
        "{} findings, first: {}",
        findings.len(),
        findings[0]
    );
    // The generator must reach the interesting paths, not only the refusals.
    assert!(
        accepted * 50 > inputs,
        "only {accepted} of {inputs} accepted"
    );
}
