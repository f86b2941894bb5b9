//! Stable stand-in for the fuzz target (fuzz/): pseudo-random and mutated request streams through
//! the head parser, the body decoder and `Plan::from_request` must never panic, and must stay consistent.

use loadterm_plan::{Outcome, Plan, Query, Rng};
use loadterm_server::h1::body::RequestBody;
use loadterm_server::h1::head::{parse, BodyFraming, Parsed, RequestHead};

const SEEDS: &[&[u8]] = &[
    b"GET /?s=1k&r=404&t=5&c=0&k=1&C=1&K=0&A=1&S=0&R=1 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /?s=0x10kr HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x\r\nhello\r\n0\r\nT: v\r\n\r\n",
    b"PUT /a?b?s=-9999999999999999999999g HTTP/1.0\r\nContent-Length: 3\r\nx-loadterm: r=1kkkkkkkkkk\r\n\r\nabc",
    b"HEAD /? HTTP/1.1\r\nExpect: 100-continue\r\nConnection: keep-alive, close\r\n\r\n",
];

fn exercise(data: &[u8]) {
    let mut head = RequestHead::default();
    if parse(data, &mut head, false) == Parsed::Complete {
        assert!(head.len <= data.len());
        let s = (head.request).summary(loadterm_exchange::Version::Http11, false, 0, false);
        let req = Query {
            target: s.target,
            control: s.control,
            is_head: s.is_head,
        };
        if let Outcome::Respond(p) = Plan::from_request(&req, &mut Rng::new(1)) {
            assert!((100..=999).contains(&p.status));
            assert!(p.delay_ms <= loadterm_plan::MAX_DELAY_MS);
        }
        let mut dec = RequestBody::new(head.body.unwrap_or(BodyFraming::None));
        if let Ok(n) = dec.feed(&data[head.len..]) {
            assert!(n <= data.len() - head.len);
        }
    }
    let _ = Plan::from_request(
        &Query {
            target: data,
            control: Some(data),
            is_head: false,
        },
        &mut Rng::new(2),
    );
}

#[test]
fn random_and_mutated_requests_never_panic() {
    let mut rng = Rng::new(0xC0FFEE);
    let mut buf = Vec::new();
    for i in 0..1_000_000u32 {
        buf.clear();
        if i % 2 == 0 {
            // Mutations of valid requests: byte flips, truncations, duplications.
            buf.extend_from_slice(SEEDS[(rng.next_u32() as usize) % SEEDS.len()]);
            for _ in 0..1 + rng.next_u32() % 4 {
                let at = rng.next_u32() as usize % buf.len();
                match rng.next_u32() % 3 {
                    0 => buf[at] = rng.next_u32() as u8,
                    1 => buf.truncate(at.max(1)),
                    _ => {
                        let tail = buf[at..].to_vec();
                        buf.extend_from_slice(&tail);
                    }
                }
            }
        } else {
            // Random bytes drawn from an HTTP-ish alphabet.
            const ALPHABET: &[u8] = b"GET /?=&;,skrtcACKkSR0123456789xXgGmM-+ \r\n:HTP1.";
            let len = rng.next_u32() % 200;
            buf.extend((0..len).map(|_| ALPHABET[rng.next_u32() as usize % ALPHABET.len()]));
        }
        exercise(&buf);
    }
}
