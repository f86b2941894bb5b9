//! The connection's rules, fed raw frames: each protocol error's code, events whatever the
//! reads' splits, flow control, limits, and random input.

use super::*;
use crate::hpack::put_field;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

fn frame(ty: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = frame_head(payload.len(), ty, flags, id).to_vec();
    f.extend_from_slice(payload);
    f
}

fn setting(id: u16, value: u32) -> Vec<u8> {
    let mut s = id.to_be_bytes().to_vec();
    s.extend_from_slice(&value.to_be_bytes());
    s
}

/// A request head's HPACK block.
fn get(path: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "x"),
    ] {
        put_field(&mut b, n.as_bytes(), v.as_bytes());
    }
    b
}

/// What an event says, owned (the test keeps them past the next `recv`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Headers(u32, Vec<u8>, bool, bool, bool),
    Data(u32, Vec<u8>, bool),
    Reset(u32, u32, bool),
    GoAway(u32, u32),
    Window,
}

fn owned(ev: Event<'_>) -> Ev {
    match ev {
        Event::Headers {
            stream,
            block,
            end_stream,
            first,
            discard,
            ..
        } => Ev::Headers(stream, block.to_vec(), end_stream, first, discard),
        Event::Data {
            stream,
            data,
            end_stream,
            ..
        } => Ev::Data(stream, data.to_vec(), end_stream),
        Event::Reset {
            stream,
            code,
            remote,
            ..
        } => Ev::Reset(stream, code, remote),
        Event::GoAway { last_stream, code } => Ev::GoAway(last_stream, code),
        Event::Window => Ev::Window,
    }
}

/// Feed `input` in pieces of `piece` bytes: the events (DATA pieces of one stream merged), or
/// the connection error.
fn feed(c: &mut Connection, input: &[u8], piece: usize) -> Result<Vec<Ev>, ConnError> {
    let mut evs: Vec<Ev> = Vec::new();
    for mut chunk in input.chunks(piece.max(1)) {
        while let Some(ev) = c.recv(&mut chunk)? {
            match (evs.last_mut(), owned(ev)) {
                (Some(Ev::Data(s, d, e)), Ev::Data(s2, d2, e2)) if *s == s2 && !*e => {
                    d.extend(d2);
                    *e = e2;
                }
                (_, Ev::Data(_, d, false)) if d.is_empty() => {}
                (_, ev) => evs.push(ev),
            }
        }
    }
    Ok(evs)
}

/// The frames queued by the connection: (type, flags, stream, payload).
fn sent(c: &mut Connection) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut out = Vec::new();
    c.take_control(&mut out);
    split(&out)
}

fn split(out: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut b = out.strip_prefix(PREFACE).unwrap_or(out);
    let mut frames = Vec::new();
    while !b.is_empty() {
        let len = frame_len(b);
        frames.push((b[3], b[4], stream_id(b), b[9..9 + len].to_vec()));
        b = &b[9 + len..];
    }
    frames
}

fn server_cfg() -> LocalSettings {
    LocalSettings {
        max_concurrent_streams: 8,
        stream_window: 1 << 20,
        conn_window: 4 << 20,
        max_frame_size: 16_384,
        max_header_list_size: 16 << 10,
        header_table_size: 4096,
    }
}

/// A server past the client's preface and SETTINGS, its own first frames taken.
fn server() -> Connection {
    let mut c = Connection::new(Role::Server, server_cfg());
    let hello = [PREFACE, &frame(SETTINGS, 0, 0, &[])].concat();
    assert_eq!(feed(&mut c, &hello, 1000), Ok(vec![]));
    sent(&mut c);
    c
}

fn conn_error(c: &mut Connection, input: &[u8]) -> u32 {
    let e = feed(c, input, 1 << 20).expect_err("a connection error");
    let f = sent(c);
    let (ty, _, _, p) = f.last().expect("GOAWAY");
    assert_eq!(*ty, GOAWAY);
    assert_eq!(u32::from_be_bytes(p[4..8].try_into().unwrap()), e.code);
    e.code
}

#[test]
fn a_server_sends_its_settings_and_acknowledges_the_clients() {
    let mut c = Connection::new(Role::Server, server_cfg());
    assert_eq!(
        sent(&mut c),
        [
            (
                SETTINGS,
                0,
                0,
                [
                    setting(setting::MAX_CONCURRENT_STREAMS, 8),
                    setting(setting::INITIAL_WINDOW_SIZE, 1 << 20),
                    setting(setting::MAX_HEADER_LIST_SIZE, 16 << 10)
                ]
                .concat()
            ),
            (
                WINDOW_UPDATE,
                0,
                0,
                ((4 << 20) - 65_535u32).to_be_bytes().to_vec()
            ),
        ]
    );
    let hello = [PREFACE, &frame(SETTINGS, 0, 0, &setting(4, 100))].concat();
    assert_eq!(feed(&mut c, &hello, 5), Ok(vec![]));
    assert_eq!(sent(&mut c), [(SETTINGS, flag::ACK, 0, vec![])]);
}

#[test]
fn a_bad_preface_or_a_first_frame_other_than_settings_is_a_protocol_error() {
    let mut c = Connection::new(Role::Server, server_cfg());
    sent(&mut c);
    assert_eq!(
        conn_error(&mut c, b"GET / HTTP/1.1\r\n"),
        code::PROTOCOL_ERROR
    );
    let mut c = Connection::new(Role::Server, server_cfg());
    sent(&mut c);
    let ping_first = [PREFACE, &frame(PING, 0, 0, &[0; 8])].concat();
    assert_eq!(conn_error(&mut c, &ping_first), code::PROTOCOL_ERROR);
}

/// A request with padding, priority, CONTINUATION and padded DATA comes out the same whatever
/// the reads' sizes.
#[test]
fn events_are_the_same_wherever_the_reads_split() {
    let block = get("/?s=1");
    let (a, b) = block.split_at(5);
    let mut headers = vec![3, 0, 0, 0, 0, 16];
    headers.extend_from_slice(a);
    headers.extend([0, 0, 0]);
    let input = [
        frame(HEADERS, flag::PADDED | flag::PRIORITY, 1, &headers),
        frame(CONTINUATION, flag::END_HEADERS, 1, b),
        frame(DATA, flag::PADDED, 1, &[4, b'a', b'b', 0, 0, 0, 0]),
        frame(PRIORITY, 0, 3, &[0, 0, 0, 1, 9]),
        frame(HEADERS, flag::END_HEADERS | flag::END_STREAM, 3, &get("/3")),
        frame(DATA, flag::END_STREAM, 1, b"cd"),
    ]
    .concat();
    let want = vec![
        Ev::Headers(1, block.clone(), false, true, false),
        Ev::Data(1, b"ab".to_vec(), false),
        Ev::Headers(3, get("/3"), true, true, false),
        Ev::Data(1, b"cd".to_vec(), true),
    ];
    for piece in [1, 2, 7, 9, 10, 100, 1000] {
        let mut c = server();
        assert_eq!(
            feed(&mut c, &input, piece),
            Ok(want.clone()),
            "pieces of {piece}"
        );
        assert_eq!(c.open_streams(), 2, "both ended their side, ours is open");
    }
}

#[test]
fn frames_that_break_the_connection_get_goaway_with_their_code() {
    let h1 = frame(HEADERS, flag::END_HEADERS, 1, &get("/"));
    let h1_ended = frame(HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &get("/"));
    let cases: Vec<(&str, Vec<u8>, u32)> = vec![
        (
            "DATA on stream 0",
            frame(DATA, 0, 0, b"x"),
            code::PROTOCOL_ERROR,
        ),
        (
            "DATA on an idle stream",
            frame(DATA, 0, 1, b"x"),
            code::PROTOCOL_ERROR,
        ),
        (
            "HEADERS on stream 0",
            frame(HEADERS, flag::END_HEADERS, 0, &get("/")),
            code::PROTOCOL_ERROR,
        ),
        (
            "even stream",
            frame(HEADERS, flag::END_HEADERS, 2, &get("/")),
            code::PROTOCOL_ERROR,
        ),
        (
            "stream id going down",
            [frame(HEADERS, flag::END_HEADERS, 5, &get("/")), h1.clone()].concat(),
            code::STREAM_CLOSED,
        ),
        (
            "HEADERS on a stream closed by END_STREAM both ways",
            [
                h1_ended.clone(),
                frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]),
                h1_ended.clone(),
            ]
            .concat(),
            code::STREAM_CLOSED,
        ),
        (
            "padding too long",
            frame(HEADERS, flag::END_HEADERS | flag::PADDED, 1, &[9, 0x82]),
            code::PROTOCOL_ERROR,
        ),
        (
            "DATA padding too long",
            [h1.clone(), frame(DATA, flag::PADDED, 1, &[5, 1, 2])].concat(),
            code::PROTOCOL_ERROR,
        ),
        (
            "a block interrupted",
            [
                frame(HEADERS, 0, 1, &get("/")),
                frame(PRIORITY, 0, 3, &[0, 0, 0, 0, 1]),
            ]
            .concat(),
            code::PROTOCOL_ERROR,
        ),
        (
            "CONTINUATION on another stream",
            [
                frame(HEADERS, 0, 1, &get("/")),
                frame(CONTINUATION, flag::END_HEADERS, 3, b""),
            ]
            .concat(),
            code::PROTOCOL_ERROR,
        ),
        (
            "CONTINUATION alone",
            frame(CONTINUATION, flag::END_HEADERS, 1, b""),
            code::PROTOCOL_ERROR,
        ),
        (
            "PRIORITY on stream 0",
            frame(PRIORITY, 0, 0, &[0; 5]),
            code::PROTOCOL_ERROR,
        ),
        (
            "RST_STREAM on stream 0",
            frame(RST_STREAM, 0, 0, &[0; 4]),
            code::PROTOCOL_ERROR,
        ),
        (
            "RST_STREAM on an idle stream",
            frame(RST_STREAM, 0, 1, &[0; 4]),
            code::PROTOCOL_ERROR,
        ),
        (
            "RST_STREAM of 3 bytes",
            [h1.clone(), frame(RST_STREAM, 0, 1, &[0; 3])].concat(),
            code::FRAME_SIZE_ERROR,
        ),
        (
            "SETTINGS on a stream",
            frame(SETTINGS, 0, 1, &[]),
            code::PROTOCOL_ERROR,
        ),
        (
            "SETTINGS ACK with a payload",
            frame(SETTINGS, flag::ACK, 0, &[0; 6]),
            code::FRAME_SIZE_ERROR,
        ),
        (
            "SETTINGS of 5 bytes",
            frame(SETTINGS, 0, 0, &[0; 5]),
            code::FRAME_SIZE_ERROR,
        ),
        (
            "ENABLE_PUSH 2",
            frame(SETTINGS, 0, 0, &setting(2, 2)),
            code::PROTOCOL_ERROR,
        ),
        (
            "INITIAL_WINDOW_SIZE 2^31",
            frame(SETTINGS, 0, 0, &setting(4, 1 << 31)),
            code::FLOW_CONTROL_ERROR,
        ),
        (
            "MAX_FRAME_SIZE too small",
            frame(SETTINGS, 0, 0, &setting(5, 16_383)),
            code::PROTOCOL_ERROR,
        ),
        (
            "MAX_FRAME_SIZE too large",
            frame(SETTINGS, 0, 0, &setting(5, 1 << 24)),
            code::PROTOCOL_ERROR,
        ),
        (
            "PUSH_PROMISE",
            frame(PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2]),
            code::PROTOCOL_ERROR,
        ),
        (
            "PING on a stream",
            frame(PING, 0, 1, &[0; 8]),
            code::PROTOCOL_ERROR,
        ),
        (
            "PING of 7 bytes",
            frame(PING, 0, 0, &[0; 7]),
            code::FRAME_SIZE_ERROR,
        ),
        (
            "GOAWAY on a stream",
            frame(GOAWAY, 0, 1, &[0; 8]),
            code::PROTOCOL_ERROR,
        ),
        (
            "WINDOW_UPDATE of 0",
            frame(WINDOW_UPDATE, 0, 0, &[0; 4]),
            code::PROTOCOL_ERROR,
        ),
        (
            "WINDOW_UPDATE of 3 bytes",
            frame(WINDOW_UPDATE, 0, 0, &[0; 3]),
            code::FRAME_SIZE_ERROR,
        ),
        (
            "WINDOW_UPDATE on an idle stream",
            frame(WINDOW_UPDATE, 0, 1, &[0, 0, 0, 1]),
            code::PROTOCOL_ERROR,
        ),
        (
            "connection window overflow",
            frame(WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes()),
            code::FLOW_CONTROL_ERROR,
        ),
        (
            "stream windows overflowing with a new initial size",
            [
                h1.clone(),
                frame(WINDOW_UPDATE, 0, 1, &0x7fff_0000u32.to_be_bytes()),
                frame(SETTINGS, 0, 0, &setting(4, 0x1_0000)),
            ]
            .concat(),
            code::FLOW_CONTROL_ERROR,
        ),
        (
            "a frame over 16 KiB",
            frame(0x20, 0, 0, &[0; 16_385]),
            code::FRAME_SIZE_ERROR,
        ),
    ];
    for (what, input, want) in cases {
        let mut c = server();
        assert_eq!(conn_error(&mut c, &input), want, "{what}");
        assert!(
            c.recv(&mut &b"more"[..]).is_err(),
            "{what}: nothing read after"
        );
    }
}

/// DATA beyond a window (frames larger than the window it has left): the connection's is a
/// connection error, a stream's a stream error.
#[test]
fn data_beyond_a_window_is_a_flow_control_error() {
    let cfg = |stream_window, conn_window| LocalSettings {
        max_frame_size: 100_000,
        stream_window,
        conn_window,
        ..server_cfg()
    };
    let hello = [
        PREFACE,
        &frame(SETTINGS, 0, 0, &[]),
        &frame(HEADERS, flag::END_HEADERS, 1, &get("/")),
    ]
    .concat();
    let mut c = Connection::new(Role::Server, cfg(1 << 20, 65_535));
    feed(&mut c, &hello, 100).unwrap();
    sent(&mut c);
    assert_eq!(
        conn_error(&mut c, &frame(DATA, 0, 1, &[0; 70_000])),
        code::FLOW_CONTROL_ERROR
    );
    let mut c = Connection::new(Role::Server, cfg(65_535, 1 << 20));
    feed(&mut c, &hello, 100).unwrap();
    let evs = feed(&mut c, &frame(DATA, 0, 1, &[0; 70_000]), 1000).unwrap();
    assert_eq!(evs, [Ev::Reset(1, code::FLOW_CONTROL_ERROR, false)]);
}

#[test]
fn frames_that_break_a_stream_get_rst_stream_with_their_code() {
    let h1 = frame(HEADERS, flag::END_HEADERS, 1, &get("/"));
    let h1_ended = frame(HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &get("/"));
    let cases: Vec<(&str, Vec<u8>, u32)> = vec![
        (
            "DATA after END_STREAM",
            [h1_ended.clone(), frame(DATA, 0, 1, b"x")].concat(),
            code::STREAM_CLOSED,
        ),
        (
            "HEADERS after END_STREAM",
            [h1_ended.clone(), h1_ended.clone()].concat(),
            code::STREAM_CLOSED,
        ),
        (
            "trailers without END_STREAM",
            [
                h1.clone(),
                frame(HEADERS, flag::END_HEADERS, 1, &[0x40, 1, b'x', 1, b'y']),
            ]
            .concat(),
            code::PROTOCOL_ERROR,
        ),
        (
            "a stream depending on itself (HEADERS)",
            frame(
                HEADERS,
                flag::END_HEADERS | flag::PRIORITY,
                1,
                &[[0, 0, 0, 1, 16].as_slice(), &get("/")].concat(),
            ),
            code::PROTOCOL_ERROR,
        ),
        (
            "a stream depending on itself (PRIORITY)",
            frame(PRIORITY, 0, 1, &[0, 0, 0, 1, 16]),
            code::PROTOCOL_ERROR,
        ),
        (
            "PRIORITY of 4 bytes",
            frame(PRIORITY, 0, 1, &[0; 4]),
            code::FRAME_SIZE_ERROR,
        ),
        (
            "WINDOW_UPDATE of 0 on a stream",
            [h1.clone(), frame(WINDOW_UPDATE, 0, 1, &[0; 4])].concat(),
            code::PROTOCOL_ERROR,
        ),
        (
            "stream window overflow",
            [
                h1.clone(),
                frame(WINDOW_UPDATE, 0, 1, &0x7fff_ffffu32.to_be_bytes()),
            ]
            .concat(),
            code::FLOW_CONTROL_ERROR,
        ),
        (
            "DATA on a stream the client reset",
            [
                h1.clone(),
                frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]),
                frame(DATA, 0, 1, b"x"),
            ]
            .concat(),
            code::STREAM_CLOSED,
        ),
    ];
    for (what, input, want) in cases {
        let mut c = server();
        let evs = feed(&mut c, &input, 3).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(evs.contains(&Ev::Reset(1, want, false)), "{what}: {evs:?}");
        let f = sent(&mut c);
        assert!(
            f.contains(&(RST_STREAM, 0, 1, want.to_be_bytes().to_vec())),
            "{what}: {f:?}"
        );
        // The connection goes on.
        let next = frame(HEADERS, flag::END_HEADERS, 5, &get("/"));
        assert!(feed(&mut c, &next, 100).is_ok(), "{what}");
    }
}

/// Checked alike whether the DATA streams by in pieces (2) or comes whole (100).
#[test]
fn content_length_must_match_the_data() {
    for piece in [2, 100] {
        for (data, ok) in [(&b"12345"[..], true), (b"1234", false), (b"123456", false)] {
            let mut c = server();
            feed(
                &mut c,
                &frame(HEADERS, flag::END_HEADERS, 1, &get("/")),
                100,
            )
            .unwrap();
            c.set_content_length(1, 5);
            let evs = feed(&mut c, &frame(DATA, flag::END_STREAM, 1, data), piece).unwrap();
            let reset = evs.contains(&Ev::Reset(1, code::PROTOCOL_ERROR, false));
            assert_eq!(reset, !ok, "{piece} {data:?}: {evs:?}");
            assert_eq!(c.open_streams(), usize::from(ok), "{piece} {data:?}");
        }
    }
}

/// A client's stream events carry the token it opened the stream with.
#[test]
fn a_streams_events_carry_its_token() {
    let mut c = Connection::new(Role::Client, LocalSettings::default());
    let mut out = Vec::new();
    assert_eq!(c.open(&mut out, 7, true, |o| o.push(0x82)), 1);
    assert_eq!(c.open(&mut out, 9, true, |o| o.push(0x82)), 3);
    let input = [
        frame(SETTINGS, 0, 0, &[]),
        frame(HEADERS, flag::END_HEADERS, 1, &[0x88]),
        frame(DATA, flag::END_STREAM, 1, b"hi"),
        frame(RST_STREAM, 0, 3, &[0, 0, 0, 8]),
        frame(DATA, 0, 3, b"late"),
    ]
    .concat();
    let mut rest = &input[..];
    let mut tokens = Vec::new();
    while let Some(ev) = c.recv(&mut rest).unwrap() {
        match ev {
            Event::Headers { token, .. } | Event::Data { token, .. } => tokens.push(token),
            Event::Reset { token, .. } => tokens.push(token),
            _ => {}
        }
    }
    // DATA on the stream the server reset: a stream error on a closed stream, no token.
    assert_eq!(tokens, [Some(7), Some(7), Some(9), None]);
}

#[test]
fn streams_beyond_the_limit_are_refused_and_their_blocks_still_decoded() {
    let mut c = server();
    let mut input = Vec::new();
    for id in (1..=19).step_by(2) {
        input.extend(frame(
            HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            id,
            &get("/"),
        ));
    }
    let evs = feed(&mut c, &input, 1000).unwrap();
    let discarded: Vec<u32> = evs
        .iter()
        .filter_map(|e| match e {
            Ev::Headers(id, _, _, _, true) => Some(*id),
            _ => None,
        })
        .collect();
    assert_eq!(discarded, [17, 19]);
    let refused: Vec<u32> = sent(&mut c)
        .iter()
        .filter(|f| f.0 == RST_STREAM)
        .map(|f| f.2)
        .collect();
    assert_eq!(refused, [17, 19]);
    assert_eq!(c.open_streams(), 8);
}

#[test]
fn received_data_is_returned_once_half_a_window_is_used() {
    let mut c = server();
    feed(
        &mut c,
        &frame(HEADERS, flag::END_HEADERS, 1, &get("/")),
        100,
    )
    .unwrap();
    let chunk = frame(DATA, 0, 1, &[0; 16_384]);
    // The stream's 1 MiB: an update after 512 KiB (32 frames); the connection's 4 MiB: none yet.
    for _ in 0..31 {
        feed(&mut c, &chunk, 1 << 20).unwrap();
    }
    assert_eq!(sent(&mut c), []);
    feed(&mut c, &chunk, 1 << 20).unwrap();
    assert_eq!(
        sent(&mut c),
        [(WINDOW_UPDATE, 0, 1, (512u32 << 10).to_be_bytes().to_vec())]
    );
    // The last frame of the stream returns nothing to the stream.
    feed(
        &mut c,
        &frame(DATA, flag::END_STREAM, 1, &[0; 16_384]).repeat(1),
        1 << 20,
    )
    .unwrap();
    assert_eq!(sent(&mut c), []);
}

#[test]
fn headers_and_data_are_framed_within_the_peers_frame_size_and_windows() {
    let mut c = server();
    feed(
        &mut c,
        &[
            frame(SETTINGS, 0, 0, &setting(4, 100)),
            frame(HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &get("/")),
        ]
        .concat(),
        100,
    )
    .unwrap();
    sent(&mut c);
    let mut out = Vec::new();
    let big = vec![0x82; 40_000];
    assert!(c.headers(&mut out, 1, false, |o| o.extend_from_slice(&big)));
    let f = split(&out);
    let kinds: Vec<_> = f.iter().map(|f| (f.0, f.1, f.3.len())).collect();
    assert_eq!(
        kinds,
        [
            (HEADERS, 0, 16_384),
            (CONTINUATION, 0, 16_384),
            (CONTINUATION, flag::END_HEADERS, 40_000 - 2 * 16_384)
        ]
    );
    assert_eq!(c.send_window(1), 100);
    out.clear();
    assert!(c.data(&mut out, 1, 60, false));
    assert_eq!(c.send_window(1), 40);
    // A larger initial window applies to open streams; the connection has its own.
    let evs = feed(&mut c, &frame(SETTINGS, 0, 0, &setting(4, 70_000)), 100).unwrap();
    assert_eq!(evs, [Ev::Window]);
    assert_eq!(c.send_window(1), 65_535 - 60);
    feed(
        &mut c,
        &frame(WINDOW_UPDATE, 0, 0, &10_000u32.to_be_bytes()),
        100,
    )
    .unwrap();
    assert_eq!(c.send_window(1), 70_000 - 60);
    assert!(c.data(&mut out, 1, 0, true));
    assert!(!c.is_send_open(1), "ended");
    assert!(
        !c.data(&mut out, 1, 0, true),
        "nothing more on an ended stream"
    );
    assert_eq!(c.open_streams(), 0);
}

#[test]
fn a_smaller_peer_table_makes_our_next_block_start_with_a_size_update() {
    let mut c = server();
    feed(
        &mut c,
        &[
            frame(SETTINGS, 0, 0, &setting(1, 0)),
            frame(HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &get("/")),
            frame(HEADERS, flag::END_HEADERS | flag::END_STREAM, 3, &get("/")),
        ]
        .concat(),
        100,
    )
    .unwrap();
    let mut out = Vec::new();
    c.headers(&mut out, 1, true, |o| o.push(0x88));
    c.headers(&mut out, 3, true, |o| o.push(0x88));
    let f = split(&out);
    assert_eq!(f[0].3, [0x20, 0x88]);
    assert_eq!(f[1].3, [0x88]);
}

#[test]
fn graceful_goaway_names_the_last_stream_and_newer_ones_are_not_processed() {
    let mut c = server();
    feed(
        &mut c,
        &frame(HEADERS, flag::END_HEADERS | flag::END_STREAM, 3, &get("/")),
        100,
    )
    .unwrap();
    c.goaway();
    assert_eq!(sent(&mut c), [(GOAWAY, 0, 0, vec![0, 0, 0, 3, 0, 0, 0, 0])]);
    let evs = feed(
        &mut c,
        &frame(HEADERS, flag::END_HEADERS | flag::END_STREAM, 5, &get("/")),
        100,
    )
    .unwrap();
    assert_eq!(evs, [Ev::Headers(5, get("/"), true, true, true)]);
    assert_eq!(c.open_streams(), 1);
}

#[test]
fn frames_for_streams_we_reset_are_dropped_quietly() {
    let mut c = server();
    feed(
        &mut c,
        &frame(HEADERS, flag::END_HEADERS, 1, &get("/")),
        100,
    )
    .unwrap();
    c.reset(1, code::CANCEL);
    assert_eq!(
        sent(&mut c),
        [(RST_STREAM, 0, 1, code::CANCEL.to_be_bytes().to_vec())]
    );
    let late = [
        frame(DATA, 0, 1, b"late"),
        frame(
            HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            1,
            &[0x40, 1, b'x', 1, b'y'],
        ),
        frame(WINDOW_UPDATE, 0, 1, &[0, 0, 0, 1]),
    ]
    .concat();
    let evs = feed(&mut c, &late, 100).unwrap();
    assert_eq!(
        evs,
        [Ev::Headers(
            1,
            vec![0x40, 1, b'x', 1, b'y'],
            true,
            false,
            true
        )]
    );
    assert_eq!(sent(&mut c), [], "no error for them");
}

#[test]
fn pings_are_answered_and_unknown_frames_ignored() {
    let mut c = server();
    let input = [
        frame(PING, 0, 0, b"12345678"),
        frame(PING, flag::ACK, 0, b"abcdefgh"),
        frame(0x42, 0xff, 7, b"whatever"),
        frame(
            GOAWAY,
            0,
            0,
            &[0, 0, 0, 0, 0, 0, 0, 0, b'd', b'e', b'b', b'u', b'g'],
        ),
    ]
    .concat();
    assert_eq!(feed(&mut c, &input, 4), Ok(vec![Ev::GoAway(0, 0)]));
    assert_eq!(sent(&mut c), [(PING, flag::ACK, 0, b"12345678".to_vec())]);
}

#[test]
fn a_flood_of_frames_that_ask_for_nothing_ends_the_connection() {
    let mut c = server();
    let wu = frame(WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes());
    assert!(feed(&mut c, &wu.repeat(1000), 1 << 20).is_ok());
    let e = feed(&mut c, &wu.repeat(100), 1 << 20).unwrap_err();
    assert!(
        e.is_control_flood() && e.code == code::ENHANCE_YOUR_CALM,
        "{e}"
    );
    // Rapid reset: streams opened and reset at once, nothing written in between.
    let mut c = server();
    let mut input = Vec::new();
    for id in (1..3000).step_by(2) {
        input.extend(frame(HEADERS, flag::END_HEADERS, id, &get("/")));
        input.extend(frame(RST_STREAM, 0, id, &[0, 0, 0, 8]));
    }
    let e = feed(&mut c, &input, 1 << 20).unwrap_err();
    assert!(e.is_control_flood(), "{e}");
}

/// A client is the load generator: it opens 100 streams until the server says its limit, and
/// reports what its server does rather than cut it off (no flood budget, no cap on streams reset
/// for the server's errors).
#[test]
fn a_client_assumes_100_streams_and_keeps_no_flood_budget() {
    let mut c = Connection::new(Role::Client, LocalSettings::default());
    let mut input = frame(SETTINGS, 0, 0, &[]);
    input.extend(frame(WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes()).repeat(3000));
    while c.can_open() {
        let id = c.open(&mut Vec::new(), 0, true, |o| o.push(0x82));
        input.extend(frame(RST_STREAM, 0, id, &[0, 0, 0, 8]));
    }
    assert_eq!(c.open_streams(), 100);
    let evs = feed(&mut c, &input, 1 << 20).expect("no flood budget");
    assert_eq!(evs.len(), 3000 + 100);
    assert_eq!(
        c.peer_max_streams(),
        100,
        "the server's SETTINGS said nothing"
    );
    for _ in 0..300 {
        let id = c.open(&mut Vec::new(), 0, true, |o| o.push(0x82));
        c.reset(id, code::PROTOCOL_ERROR);
    }
    assert!(c.failed().is_none());
}

#[test]
fn endless_continuation_is_cut_off() {
    let mut c = server();
    let mut input = frame(HEADERS, 0, 1, &get("/"));
    input.extend(frame(CONTINUATION, 0, 1, &[0x40; 16_000]).repeat(20));
    assert_eq!(conn_error(&mut c, &input), code::ENHANCE_YOUR_CALM);
    // Empty ones add no bytes: their count is bounded.
    let mut c = server();
    let mut input = frame(HEADERS, 0, 1, &get("/"));
    input.extend(frame(CONTINUATION, 0, 1, &[]).repeat(1000));
    assert_eq!(conn_error(&mut c, &input), code::ENHANCE_YOUR_CALM);
}

#[test]
fn a_client_opens_streams_and_reads_responses() {
    let mut c = Connection::new(Role::Client, LocalSettings::default());
    let mut out = Vec::new();
    c.take_control(&mut out);
    assert!(out.starts_with(PREFACE));
    assert_eq!(split(&out), [(SETTINGS, 0, 0, setting(2, 0))]);
    out.clear();
    let id = c.open(&mut out, 0, true, |o| o.push(0x82));
    assert_eq!(id, 1);
    assert_eq!(
        split(&out),
        [(HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, vec![0x82])]
    );
    let response = [
        frame(SETTINGS, 0, 0, &setting(3, 2)),
        frame(HEADERS, flag::END_HEADERS, 1, &[0x88]),
        frame(DATA, flag::END_STREAM, 1, b"hi"),
    ]
    .concat();
    assert_eq!(
        feed(&mut c, &response, 3),
        Ok(vec![
            Ev::Window,
            Ev::Headers(1, vec![0x88], false, true, false),
            Ev::Data(1, b"hi".to_vec(), true)
        ])
    );
    assert_eq!(c.open_streams(), 0);
    assert_eq!(c.peer_max_streams(), 2);
    // A server cannot open streams (no push), and a GOAWAY ends what it did not process.
    let s3 = c.open(&mut out, 0, true, |o| o.push(0x82));
    let s5 = c.open(&mut out, 0, true, |o| o.push(0x82));
    assert_eq!((s3, s5), (3, 5));
    assert!(!c.can_open(), "two at a time, and two are open");
    assert_eq!(
        feed(&mut c, &frame(GOAWAY, 0, 0, &[0, 0, 0, 3, 0, 0, 0, 0]), 100),
        Ok(vec![Ev::GoAway(3, 0)])
    );
    assert_eq!(c.open_streams(), 1);
    assert_eq!(
        conn_error(&mut c, &frame(HEADERS, flag::END_HEADERS, 2, &[0x88])),
        code::PROTOCOL_ERROR
    );
}

/// A connection is at rest only between frames with no stream open and nothing queued; put away
/// and woken, it serves the next stream as before, its buffers grown again only as needed.
#[test]
fn a_connection_at_rest_is_put_away_and_goes_on() {
    let mut c = Connection::new(Role::Server, server_cfg());
    sent(&mut c);
    assert!(!c.at_rest(), "before the peer's SETTINGS");
    let hello = [PREFACE, &frame(SETTINGS, 0, 0, &[])].concat();
    feed(&mut c, &hello, 1000).unwrap();
    sent(&mut c);
    // A head in two frames, fed in pieces: the frame and block buffers grow.
    let mut input = frame(HEADERS, 0, 1, &get("/")[..4]);
    input.extend(frame(CONTINUATION, flag::END_HEADERS, 1, &get("/")[4..]));
    input.extend(frame(DATA, 0, 1, b"ab"));
    let half = input.len() - 3;
    feed(&mut c, &input[..half], 5).unwrap();
    assert!(!c.at_rest(), "a frame half received, a stream open");
    feed(&mut c, &input[half..], 5).unwrap();
    assert!(!c.at_rest(), "a stream open");
    c.reset(1, code::CANCEL);
    assert!(!c.at_rest(), "its RST_STREAM queued");
    sent(&mut c);
    assert!(c.at_rest());
    let d = c.rest();
    assert_eq!(*d.recent_resets, [1], "its recent resets stay");
    let mut c = d.wake(server_cfg());
    assert_eq!(
        c.partial.capacity() + c.streams.capacity() + c.ctl.capacity(),
        0
    );
    let next = frame(HEADERS, flag::END_HEADERS | flag::END_STREAM, 3, &get("/n"));
    assert_eq!(
        feed(&mut c, &next, 4),
        Ok(vec![Ev::Headers(3, get("/n"), true, true, false)])
    );
    // DATA in flight on the stream reset before resting is still dropped quietly.
    assert_eq!(feed(&mut c, &frame(DATA, 0, 1, b"x"), 9), Ok(vec![]));
    assert_eq!(
        feed(
            &mut c,
            &frame(HEADERS, flag::END_HEADERS, 1, &get("/")),
            100
        ),
        Ok(vec![Ev::Headers(1, get("/"), false, false, true)]),
        "nor the stream ids: a lower stream is closed, not new"
    );
}

/// A connection put away and woken goes on exactly as one that was not: the peer's settings
/// (a smaller window and larger frames, its concurrency limit, its HPACK table size), the
/// windows both ways, stream ids and the flood budget all come back; the same input gives the
/// same events and the same frames out.
#[test]
fn a_connection_woken_is_the_connection_put_away() {
    let cfg = LocalSettings {
        conn_window: DEFAULT_WINDOW,
        ..server_cfg()
    };
    let start = || {
        let mut c = Connection::new(Role::Server, cfg.clone());
        let settings = [
            setting(setting::INITIAL_WINDOW_SIZE, 1000),
            setting(setting::MAX_FRAME_SIZE, 40_000),
            setting(setting::MAX_CONCURRENT_STREAMS, 5),
            setting(setting::HEADER_TABLE_SIZE, 0),
        ]
        .concat();
        let mut input = [PREFACE, &frame(SETTINGS, 0, 0, &settings)].concat();
        input.extend(frame(HEADERS, flag::END_HEADERS, 1, &get("/")));
        input.extend(frame(DATA, 0, 1, &[7; 16_000]));
        input.extend(frame(DATA, flag::END_STREAM, 1, &[7; 14_000]));
        // Frames that ask for nothing: most of the flood budget spent.
        for _ in 0..900 {
            input.extend(frame(WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes()));
        }
        feed(&mut c, &input, 1 << 20).unwrap();
        c.reset(1, code::CANCEL);
        sent(&mut c);
        assert!(c.at_rest());
        c
    };
    let run = |c: &mut Connection| {
        let mut next = frame(HEADERS, flag::END_HEADERS, 3, &get("/next"));
        next.extend(frame(DATA, 0, 3, &[7; 3000]));
        let evs = feed(c, &next, 1 << 20);
        let mut out = Vec::new();
        // A head larger than the default frame size.
        c.headers(&mut out, 3, false, |b| b.extend([0x88; 20_000]));
        let n = c.send_window(3).min(c.max_frame());
        if c.data(&mut out, 3, n, false) {
            out.resize(out.len() + n, 0);
        }
        c.take_control(&mut out);
        let pings: Vec<u8> = (0..400).flat_map(|_| frame(PING, 0, 0, &[2; 8])).collect();
        let flood = feed(c, &pings, 1 << 20).map(|_| ());
        (evs, split(&out), c.peer_max_streams(), flood)
    };
    let got = run(&mut start().rest().wake(cfg.clone()));
    let want = run(&mut start());
    assert_eq!(got, want);
    let head = [&[0x20][..], &[0x88; 20_000]].concat();
    assert_eq!(
        want.1,
        [
            (HEADERS, flag::END_HEADERS, 3, head),
            (DATA, 0, 3, vec![0; 1000]),
            (WINDOW_UPDATE, 0, 0, 33_000u32.to_be_bytes().to_vec()),
        ],
        "one HEADERS frame of 20 001 bytes starting with a table size update to 0, DATA within \
         the peer's window of 1000, the connection window returned past its half"
    );
    assert_eq!(want.2, 5);
    assert_eq!(
        want.3,
        Err(ConnError {
            code: code::ENHANCE_YOUR_CALM,
            reason: CONTROL_FLOOD
        }),
        "the flood budget held: 901 frames asking for nothing before, 400 after"
    );
}

/// What a parked connection keeps of the codec's state: 104 bytes, where the whole connection
/// and decoder took 432 and their buffers.
#[test]
fn a_dormant_connection_is_80_bytes() {
    assert_eq!(std::mem::size_of::<Dormant>(), 80);
    assert_eq!(std::mem::size_of::<crate::hpack::DormantDecoder>(), 24);
}

/// Random bytes, and valid streams with bytes flipped, fed in random pieces: errors are fine;
/// panics, loops and buffers beyond a frame are not.
#[test]
fn random_and_mutated_input_never_panics() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rng = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut valid = [PREFACE, &frame(SETTINGS, 0, 0, &setting(4, 10))].concat();
    for id in [1u32, 3] {
        valid.extend(frame(HEADERS, 0, id, &get("/")[..3]));
        valid.extend(frame(CONTINUATION, flag::END_HEADERS, id, &get("/")[3..]));
        valid.extend(frame(DATA, flag::PADDED, id, &[2, b'a', b'b', 0, 0]));
        valid.extend(frame(WINDOW_UPDATE, 0, id, &[0, 0, 0, 9]));
        valid.extend(frame(DATA, flag::END_STREAM, id, b"cd"));
    }
    valid.extend(frame(PING, 0, 0, b"12345678"));
    valid.extend(frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]));
    valid.extend(frame(GOAWAY, 0, 0, &[0, 0, 0, 3, 0, 0, 0, 0]));
    for round in 0..20_000 {
        let mut input = if round % 4 == 0 {
            let n = rng() as usize % 300;
            let mut v = PREFACE.to_vec();
            v.extend((0..n).map(|_| rng() as u8));
            v
        } else {
            let mut v = valid.clone();
            for _ in 0..1 + rng() % 4 {
                let i = rng() as usize % v.len();
                v[i] = rng() as u8;
            }
            v
        };
        input.truncate(rng() as usize % (input.len() + 1));
        let role = if round % 2 == 0 {
            Role::Server
        } else {
            Role::Client
        };
        let mut c = Connection::new(role, server_cfg());
        if role == Role::Client {
            c.open(&mut Vec::new(), 0, true, |o| o.push(0x82));
            c.open(&mut Vec::new(), 0, true, |o| o.push(0x82));
            input.drain(..PREFACE.len().min(input.len()));
        }
        let mut rest = &input[..];
        while !rest.is_empty() {
            let n = 1 + rng() as usize % rest.len();
            let mut piece = &rest[..n];
            let mut failed = false;
            loop {
                match c.recv(&mut piece) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            if failed {
                break;
            }
            rest = &rest[n..];
            let mut out = Vec::new();
            c.take_control(&mut out);
            assert!(out.len() < 1 << 16, "round {round}");
        }
        assert!(c.partial.capacity() <= 9 + 16_384 + 64, "round {round}");
    }
}

/// `Upgrade: h2c`: the client's `HTTP2-Settings` hold before its preface's SETTINGS frame,
/// which still comes and decides last, and only that frame is acknowledged.
#[test]
fn http2_settings_are_the_clients_first_settings_and_get_no_ack() {
    let value = URL_SAFE_NO_PAD.encode([setting(1, 0), setting(4, 100)].concat());
    for (then, window) in [(vec![], 100), (setting(4, 200), 200)] {
        let mut c = Connection::new(Role::Server, server_cfg());
        sent(&mut c);
        c.upgrade_settings(value.as_bytes()).unwrap();
        assert_eq!(sent(&mut c), [], "the 101 acknowledged them");
        let hello = [
            PREFACE,
            &frame(SETTINGS, 0, 0, &then),
            &frame(HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, &get("/")),
        ]
        .concat();
        let evs = feed(&mut c, &hello, 7).unwrap();
        assert!(matches!(evs.last(), Some(Ev::Headers(1, ..))), "{evs:?}");
        assert_eq!(sent(&mut c), [(SETTINGS, flag::ACK, 0, vec![])]);
        assert_eq!(c.send_window(1), window);
        let mut out = Vec::new();
        c.headers(&mut out, 1, false, |o| o.push(0x88));
        assert_eq!(split(&out)[0].3, [0x20, 0x88], "a table size update first");
    }
}

/// `Upgrade: h2c`: stream 1 is the upgrading request's, open for the answer only; the client's
/// next request is stream 3.
#[test]
fn the_upgraded_stream_is_half_closed_remote() {
    let mut c = Connection::new(Role::Server, server_cfg());
    sent(&mut c);
    assert_eq!(c.upgraded_stream(), 1);
    assert!(c.is_send_open(1) && !c.is_recv_open(1));
    let hello = [
        PREFACE,
        &frame(SETTINGS, 0, 0, &[]),
        &frame(HEADERS, flag::END_HEADERS | flag::END_STREAM, 3, &get("/")),
    ]
    .concat();
    let evs = feed(&mut c, &hello, 7).unwrap();
    assert!(matches!(evs.last(), Some(Ev::Headers(3, ..))), "{evs:?}");
    let mut out = Vec::new();
    assert!(c.headers(&mut out, 1, true, |o| o.push(0x88)));
    assert_eq!(c.open_streams(), 1, "stream 1 closed with its answer");
}

/// `HTTP2-Settings` goes through the SETTINGS frame's rules: what a frame may not carry is the
/// same connection error from the field (its GOAWAY after our SETTINGS), and a value that is
/// not base64url without padding a PROTOCOL_ERROR.
#[test]
fn bad_http2_settings_get_the_errors_a_settings_frame_gets() {
    let payloads = [
        vec![0; 5],
        setting(2, 2),
        setting(4, 1 << 31),
        setting(5, 16_383),
        setting(5, 1 << 24),
        [setting(3, 10), setting(2, 2)].concat(),
    ];
    let values = payloads.iter().map(|p| {
        let code = conn_error(&mut server(), &frame(SETTINGS, 0, 0, p));
        (URL_SAFE_NO_PAD.encode(p), code)
    });
    let not_base64url = [
        "AAMAAABk!AAQAAP__",
        "AAMAAABkAAQAAP/+",
        "AAIAAAAB=",
        "AAIAAAAB ",
    ]
    .map(|v| (v.to_string(), code::PROTOCOL_ERROR));
    for (value, want) in values.chain(not_base64url) {
        let mut c = Connection::new(Role::Server, server_cfg());
        let e = c.upgrade_settings(value.as_bytes()).expect_err(&value);
        assert_eq!(e.code, want, "{value}");
        let f = sent(&mut c);
        assert_eq!(f[0].0, SETTINGS, "{value}: ours first");
        let (ty, _, _, p) = f.last().unwrap();
        assert_eq!(
            (*ty, &p[..]),
            (GOAWAY, &[&[0; 4], &want.to_be_bytes()[..]].concat()[..])
        );
        assert_eq!(
            c.recv(&mut &PREFACE[..]),
            Err(e),
            "{value}: nothing read after"
        );
    }
}
