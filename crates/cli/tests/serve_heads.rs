//! The same request heads over HTTP/1.1, HTTP/2 and HTTP/3 mean the same exchange: repeated
//! fields combine as `loadterm_exchange::HeadBuilder` says (RFC 9110 §5.3: the values joined
//! with ", "), whichever protocol carried them. Each head goes over real sockets to the real
//! server: HTTP/1.1 as text, HTTP/2 as raw frames (prior knowledge on the clear port), HTTP/3
//! with aioquic.

use crate::common::{h2raw, have_aioquic, http1, Server};
use std::io::Write;

/// What an answer came to, as each protocol shows it: the interim statuses, the status, and
/// `x-rsp` (which reports the plan: status, cacheability, size, delay).
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    interim: Vec<u16>,
    status: u16,
    x_rsp: String,
}

/// One row: a request's target, its regular fields in order, a body of this many bytes, and
/// the `x-rsp` its answer must report (any interim 100 must match across protocols and
/// `continues`).
struct Row {
    target: &'static str,
    fields: &'static [(&'static str, &'static str)],
    body: Option<usize>,
    continues: bool,
    x_rsp: &'static str,
}

/// `loadterm_plan::etag(7, b"/?s=6&e=7")`, as sent (checked in the test).
const ETAG: &str = "\"9C65D881\"";

const ROWS: &[Row] = &[
    // Two control fields: both apply, joined as one.
    Row {
        target: "/?s=1",
        fields: &[("x-loadterm", "s=2"), ("x-loadterm", "r=404")],
        body: None,
        continues: false,
        x_rsp: "id=dummy, code=404, cache=1, size=2, time=0 ms (0 real)",
    },
    // The later of two values of one letter wins, as in a query.
    Row {
        target: "/",
        fields: &[("x-loadterm", "s=3&c=0"), ("x-loadterm", "s=5")],
        body: None,
        continues: false,
        x_rsp: "id=dummy, code=200, cache=0, size=5, time=0 ms (0 real)",
    },
    // Two expect fields: 100-continue in either.
    Row {
        target: "/?s=4",
        fields: &[("expect", "100-continue"), ("expect", "x-other")],
        body: Some(3),
        continues: true,
        x_rsp: "id=dummy, code=200, cache=1, size=4, time=0 ms (0 real)",
    },
    Row {
        target: "/?s=4",
        fields: &[("expect", "x-other"), ("expect", "100-continue")],
        body: Some(3),
        continues: true,
        x_rsp: "id=dummy, code=200, cache=1, size=4, time=0 ms (0 real)",
    },
    Row {
        target: "/?s=4",
        fields: &[("expect", "x-other"), ("expect", "x-more")],
        body: Some(3),
        continues: false,
        x_rsp: "id=dummy, code=200, cache=1, size=4, time=0 ms (0 real)",
    },
    // If-Match over two lines, neither the ETag: 412.
    Row {
        target: "/?s=6&e=7",
        fields: &[("if-match", "\"00000001\""), ("if-match", "\"00000002\"")],
        body: None,
        continues: false,
        x_rsp: "id=dummy, code=412, cache=1, size=0, time=0 ms (0 real)",
    },
    // If-None-Match over two lines, the second the ETag of `e=7` on `/?s=6&e=7`: 304.
    Row {
        target: "/?s=6&e=7",
        fields: &[("if-none-match", "\"00000001\""), ("if-none-match", ETAG)],
        body: None,
        continues: false,
        x_rsp: "id=dummy, code=304, cache=1, size=0, time=0 ms (0 real)",
    },
];

fn h1(port: u16, row: &Row) -> Answer {
    let mut s = http1::connect(port);
    let mut req = format!("POST {} HTTP/1.1\r\nHost: x\r\n", row.target);
    if row.body.is_none() {
        req = req.replacen("POST", "GET", 1);
    }
    for (n, v) in row.fields {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    if let Some(n) = row.body {
        req.push_str(&format!("content-length: {n}\r\n\r\n{}", "x".repeat(n)));
    } else {
        req.push_str("\r\n");
    }
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let mut interim = Vec::new();
    loop {
        let r = http1::read_response(&mut s, &mut buf, false);
        if r.status >= 200 {
            return Answer {
                interim,
                status: r.status,
                x_rsp: r.header("x-rsp").unwrap_or_default().to_owned(),
            };
        }
        interim.push(r.status);
    }
}

/// The status and `x-rsp` of an HPACK block as our server encodes it: indexed or literal
/// `:status`, literals without Huffman coding otherwise.
fn h2_head(mut b: &[u8]) -> (u16, String) {
    const STATUSES: [(u8, u16); 7] = [
        (8, 200),
        (9, 204),
        (10, 206),
        (11, 304),
        (12, 400),
        (13, 404),
        (14, 500),
    ];
    let (mut status, mut x_rsp) = (0, String::new());
    let string = |b: &mut &[u8]| {
        assert!(b[0] < 127 && b[0] & 0x80 == 0, "a short raw string");
        let n = b[0] as usize;
        let s = String::from_utf8(b[1..1 + n].to_vec()).unwrap();
        *b = &b[1 + n..];
        s
    };
    while !b.is_empty() {
        let first = b[0];
        b = &b[1..];
        if first & 0x80 != 0 {
            let i = first & 0x7f;
            status = STATUSES
                .iter()
                .find(|(j, _)| *j == i)
                .map_or(status, |s| s.1);
            continue;
        }
        assert_eq!(first & 0xf0, 0, "a literal without indexing");
        // The name's index in the static table, 4-bit prefix (one more byte for 15 and up).
        let mut index = usize::from(first & 0x0f);
        if index == 15 {
            assert!(b[0] < 0x80, "a two-byte index");
            index += usize::from(b[0]);
            b = &b[1..];
        }
        let name = match index {
            0 => string(&mut b),
            8 => ":status".to_owned(),
            _ => String::new(),
        };
        let value = string(&mut b);
        match name.as_str() {
            ":status" => status = value.parse().unwrap(),
            "x-rsp" => x_rsp = value,
            _ => {}
        }
    }
    (status, x_rsp)
}

fn h2(port: u16, row: &Row) -> Answer {
    let mut c = h2raw::open(port);
    let method: &[u8] = if row.body.is_some() { b"POST" } else { b"GET" };
    let mut block = Vec::new();
    h2raw::field(&mut block, ":method", method);
    h2raw::field(&mut block, ":scheme", b"http");
    h2raw::field(&mut block, ":path", row.target.as_bytes());
    h2raw::field(&mut block, ":authority", b"x");
    for (n, v) in row.fields {
        h2raw::field(&mut block, n, v.as_bytes());
    }
    let end = if row.body.is_some() {
        0
    } else {
        h2raw::END_STREAM
    };
    let mut out = h2raw::frame(h2raw::HEADERS, h2raw::END_HEADERS | end, 1, &block);
    if let Some(n) = row.body {
        out.extend(h2raw::frame(
            h2raw::DATA,
            h2raw::END_STREAM,
            1,
            &vec![b'x'; n],
        ));
    }
    c.write_all(&out).unwrap();
    let mut interim = Vec::new();
    loop {
        let (ty, _, stream, payload) = h2raw::next_frame(&mut c).expect("a response");
        if ty != h2raw::HEADERS || stream != 1 {
            continue;
        }
        let (status, x_rsp) = h2_head(&payload);
        if status >= 200 {
            return Answer {
                interim,
                status,
                x_rsp,
            };
        }
        interim.push(status);
    }
}

/// Every row over HTTP/3, on one connection (one aioquic run).
fn h3(port: u16, rows: &[Row]) -> Vec<Answer> {
    let specs: Vec<String> = rows
        .iter()
        .map(|row| {
            let method = if row.body.is_some() { "POST" } else { "GET" };
            let headers: Vec<_> = row.fields.iter().map(|(n, v)| [n, v]).collect();
            let mut spec =
                serde_json::json!({"method": method, "path": row.target, "headers": headers});
            if let Some(n) = row.body {
                spec["data"] = n.into();
            }
            spec.to_string()
        })
        .collect();
    let specs: Vec<&str> = specs.iter().map(String::as_str).collect();
    let answers = crate::common::h3get(port, &[], &specs);
    assert_eq!(answers.len(), rows.len());
    answers
        .iter()
        .map(|r| Answer {
            interim: r["informational"].as_array().map_or(vec![], |a| {
                a.iter().map(|s| s.as_u64().unwrap() as u16).collect()
            }),
            status: r["status"].as_u64().expect("a status") as u16,
            x_rsp: r["headers"]["x-rsp"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        })
        .collect()
}

#[test]
fn repeated_fields_mean_the_same_on_every_protocol() {
    let etag = loadterm_plan::etag(7, b"/?s=6&e=7");
    assert_eq!(ETAG, format!("\"{etag:08X}\""));
    let s = Server::start(&[]);
    let quic = have_aioquic().then(|| h3(s.tls_port, ROWS));
    for (i, row) in ROWS.iter().enumerate() {
        let want = Answer {
            interim: if row.continues { vec![100] } else { vec![] },
            status: row.x_rsp[row.x_rsp.find("code=").unwrap() + 5..][..3]
                .parse()
                .unwrap(),
            x_rsp: row.x_rsp.to_owned(),
        };
        assert_eq!(h1(s.clear_port, row), want, "HTTP/1.1, {:?}", row.fields);
        assert_eq!(h2(s.clear_port, row), want, "HTTP/2, {:?}", row.fields);
        if let Some(h3) = &quic {
            assert_eq!(h3[i], want, "HTTP/3, {:?}", row.fields);
        }
    }
}
