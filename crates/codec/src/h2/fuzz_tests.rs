//! The HTTP/2 fuzz targets' bodies (`crate::h2::fuzz`, which `fuzz/` runs under
//! cargo-fuzz on nightly) on stable, in CI: a seeded stream of mutations of valid client
//! conversations — frame-aware (frames dropped, repeated, swapped, spliced from another
//! conversation, their type, flags, stream or length changed, payloads cut) and on the bytes
//! (bit flips, random bytes, truncations, splices, insertions) — for a bounded number of
//! inputs. `LOADTERM_FUZZ_SEED` and `LOADTERM_FUZZ_ITERS` replay or lengthen a run; the seed is
//! printed (`--nocapture`) so that a failing run can be repeated.

use crate::h2::{flag, fuzz, setting, PREFACE};
use crate::h2::{CONTINUATION, DATA, GOAWAY, HEADERS, PING, PRIORITY, RST_STREAM};
use crate::h2::{SETTINGS, WINDOW_UPDATE};
use crate::hpack::put_field;

/// Inputs per run in CI (each runs both bodies; `frames` twice): about 4 s of CPU in a debug build.
const ITERS: u64 = 120_000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[derive(Clone)]
struct Frame {
    ty: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
    /// The length the header announces, when a mutation made it lie.
    len: Option<usize>,
}

fn f(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Frame {
    Frame {
        ty,
        flags,
        stream,
        payload: payload.to_vec(),
        len: None,
    }
}

fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in fields {
        put_field(&mut b, n.as_bytes(), v.as_bytes());
    }
    b
}

const GET: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "https"),
    (":path", "/?s=1k"),
    (":authority", "x"),
];

/// Valid client conversations after the preface, one per shape a server meets: plain GETs,
/// a head in CONTINUATIONs, an indexed field, a POST with padded DATA and trailers, a
/// content-length, control frames (PING, PRIORITY, WINDOW_UPDATE, SETTINGS with every
/// parameter, RST_STREAM, GOAWAY).
fn conversations() -> Vec<Vec<Frame>> {
    let mut settings = Vec::new();
    for (id, v) in [
        (setting::HEADER_TABLE_SIZE, 256u32),
        (setting::ENABLE_PUSH, 0),
        (setting::MAX_CONCURRENT_STREAMS, 10),
        (setting::INITIAL_WINDOW_SIZE, 1 << 20),
        (setting::MAX_FRAME_SIZE, 32_768),
        (setting::MAX_HEADER_LIST_SIZE, 8192),
    ] {
        settings.extend_from_slice(&id.to_be_bytes());
        settings.extend_from_slice(&v.to_be_bytes());
    }
    let get = block(GET);
    // A literal with incremental indexing, then the same field by its index (62).
    let mut indexed = get.clone();
    indexed.extend_from_slice(&[0x40, 3, b'x', b'-', b'n', 2, b'h', b'i']);
    let mut again = get.clone();
    again.push(0x80 | 62);
    let post = block(&[
        (":method", "POST"),
        (":scheme", "https"),
        (":path", "/?s=10"),
        (":authority", "x"),
        ("content-length", "4"),
        ("te", "trailers"),
    ]);
    let trailer = block(&[("x-sum", "1")]);
    let end = flag::END_HEADERS | flag::END_STREAM;
    vec![
        vec![
            f(SETTINGS, 0, 0, &settings),
            f(HEADERS, end, 1, &get),
            f(HEADERS, end, 3, &get),
            f(SETTINGS, flag::ACK, 0, &[]),
        ],
        vec![
            f(SETTINGS, 0, 0, &[]),
            f(HEADERS, flag::END_STREAM, 1, &get[..5]),
            f(CONTINUATION, 0, 1, &get[5..9]),
            f(CONTINUATION, flag::END_HEADERS, 1, &get[9..]),
            f(HEADERS, end, 3, &indexed),
            f(HEADERS, end, 5, &again),
        ],
        vec![
            f(SETTINGS, 0, 0, &[]),
            f(HEADERS, flag::END_HEADERS, 1, &post),
            f(DATA, flag::PADDED, 1, &[3, b'a', b'b', 0, 0, 0]),
            f(WINDOW_UPDATE, 0, 0, &[0, 1, 0, 0]),
            f(DATA, 0, 1, b"cd"),
            f(HEADERS, end, 1, &trailer),
        ],
        vec![
            f(SETTINGS, 0, 0, &[]),
            f(PING, 0, 0, b"01234567"),
            f(PRIORITY, 0, 1, &[0, 0, 0, 0, 16]),
            f(
                HEADERS,
                end | flag::PRIORITY,
                1,
                &[&[0, 0, 0, 0, 16][..], &get].concat(),
            ),
            f(HEADERS, flag::END_HEADERS, 3, &post),
            f(RST_STREAM, 0, 3, &[0, 0, 0, 8]),
            f(WINDOW_UPDATE, 0, 1, &[0, 0, 1, 0]),
            f(GOAWAY, 0, 0, &[0, 0, 0, 0, 0, 0, 0, 0]),
        ],
    ]
}

fn serialize(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::new();
    for fr in frames {
        let len = fr.len.unwrap_or(fr.payload.len()) as u32;
        out.extend_from_slice(&len.to_be_bytes()[1..]);
        out.extend_from_slice(&[fr.ty, fr.flags]);
        out.extend_from_slice(&fr.stream.to_be_bytes());
        out.extend_from_slice(&fr.payload);
    }
    out
}

/// One frame-aware mutation of `frames`; `other` is another conversation to splice from.
fn mutate_frames(rng: &mut Rng, frames: &mut Vec<Frame>, other: &[Frame]) {
    let i = rng.below(frames.len());
    match rng.below(9) {
        0 => {
            frames.remove(i);
        }
        1 => frames.insert(i, frames[i].clone()),
        2 => {
            let j = rng.below(frames.len());
            frames.swap(i, j);
        }
        3 => frames.insert(i, other[rng.below(other.len())].clone()),
        4 => frames[i].ty = rng.below(12) as u8,
        5 => frames[i].flags ^= 1 << rng.below(8),
        6 => {
            frames[i].stream = match rng.below(4) {
                0 => 0,
                1 => frames[i].stream + 2,
                2 => frames[i].stream.saturating_sub(2),
                _ => rng.next() as u32,
            }
        }
        7 => {
            let len = frames[i].payload.len();
            frames[i].len = Some(match rng.below(3) {
                0 => len + 1 + rng.below(20),
                1 => len.saturating_sub(1 + rng.below(4)),
                _ => rng.below(1 << 24),
            });
        }
        _ => {
            let keep = rng.below(frames[i].payload.len() + 1);
            frames[i].payload.truncate(keep);
        }
    }
}

/// One mutation of the serialized bytes.
fn mutate_bytes(rng: &mut Rng, bytes: &mut Vec<u8>, other: &[u8]) {
    if bytes.is_empty() {
        bytes.extend_from_slice(other);
        return;
    }
    let i = rng.below(bytes.len());
    match rng.below(5) {
        0 => bytes[i] ^= 1 << rng.below(8),
        1 => bytes[i] = rng.next() as u8,
        2 => bytes.truncate(i),
        3 => {
            let j = rng.below(other.len());
            bytes.truncate(i);
            bytes.extend_from_slice(&other[j..]);
        }
        _ => {
            let n = 1 + rng.below(16);
            let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            bytes.splice(i..i, junk);
        }
    }
}

#[test]
fn mutated_conversations_meet_the_fuzz_targets_checks() {
    let seed = std::env::var("LOADTERM_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x6c6f_6164_7465_726d_u64);
    let iters = std::env::var("LOADTERM_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ITERS);
    println!("LOADTERM_FUZZ_SEED={seed} LOADTERM_FUZZ_ITERS={iters}");
    let mut rng = Rng(seed | 1);
    let base = conversations();
    for _ in 0..iters {
        let mut frames = base[rng.below(base.len())].clone();
        let other = &base[rng.below(base.len())];
        for _ in 0..rng.below(4) {
            mutate_frames(&mut rng, &mut frames, other);
        }
        let mut bytes = serialize(&frames);
        // Most inputs keep their frames whole: byte mutations on one in three.
        if rng.below(3) == 0 {
            let other = serialize(other);
            for _ in 0..1 + rng.below(3) {
                mutate_bytes(&mut rng, &mut bytes, &other);
            }
        }
        let mut conn = PREFACE.to_vec();
        conn.extend_from_slice(&bytes);
        let found = std::panic::catch_unwind(|| {
            fuzz::frames(&bytes);
            fuzz::server(&conn);
        });
        // The input, to replay it with the fuzz targets or to keep it as a regression test.
        assert!(
            found.is_ok(),
            "finding on input {bytes:02x?} (after the preface)"
        );
    }
}

/// Unmutated, every conversation is served without an error: the mutations start from valid
/// HTTP/2, so what they find is the mutation's doing.
#[test]
fn the_conversations_are_valid() {
    use crate::h2::{Connection, LocalSettings, Role};
    for (i, frames) in conversations().iter().enumerate() {
        let mut c = Connection::new(Role::Server, LocalSettings::default());
        let mut input = PREFACE.to_vec();
        input.extend(serialize(frames));
        let mut rest = &input[..];
        loop {
            match c.recv(&mut rest) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => panic!("conversation {i}: {e:?}"),
            }
        }
        assert!(rest.is_empty(), "conversation {i}");
    }
}

/// Inputs the mutations found, kept once fixed.
#[test]
fn findings_stay_fixed() {
    // Trailers without END_STREAM (a stream error) whose block a HEADERS interrupts (a
    // connection error): the stream's Reset event came when the bytes came one at a time, and
    // not when they came whole.
    let mut interrupted = serialize(&conversations()[2][..3]);
    interrupted.extend(serialize(&[
        f(HEADERS, 0, 1, b"cd"),
        f(
            HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            1,
            &[0, 5, b'x'],
        ),
    ]));
    fuzz::frames(&interrupted);
}
