//! Arbitrary bytes as a whole client connection to the server role, answered as the server's
//! engine does (HPACK decoded, fields checked, every request answered with a head and a body,
//! resets and failures reported back): never a panic, and the bytes queued stay bounded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadterm_codec::fields::RequestFields;
use loadterm_codec::h2::{code, Connection, Event, LocalSettings, Role};
use loadterm_codec::hpack::{HpackDecoder, HpackError};

fuzz_target!(|data: &[u8]| {
    let mut c = Connection::new(Role::Server, LocalSettings::default());
    let mut decoder = HpackDecoder::default();
    let mut fields = RequestFields::default();
    let mut out = Vec::new();
    let mut answer = Vec::new();
    // The first byte picks the read size, so that frames straddle reads.
    let piece = 1 + data.first().copied().unwrap_or(0) as usize * 7;
    'read: for mut chunk in data.chunks(piece) {
        loop {
            match c.recv(&mut chunk) {
                Ok(Some(Event::Headers { stream, block, first, discard, .. })) => {
                    fields.begin();
                    let decoded = decoder.decode(block, 16 << 10, |n, v| fields.field(n, v));
                    if decoded == Err(HpackError::Invalid) {
                        c.fail(code::COMPRESSION_ERROR, "invalid HPACK");
                    } else if !discard && first {
                        match fields.finish() {
                            Ok(_) => answer.push(stream),
                            Err(_) => c.reset(stream, code::PROTOCOL_ERROR),
                        }
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => break 'read,
            }
        }
        for stream in answer.drain(..) {
            c.headers(&mut out, stream, false, |o| o.push(0x88));
            let n = c.send_window(stream).min(c.max_frame()).min(100);
            c.data(&mut out, stream, n, true);
            out.resize(out.len() + n, b'x');
        }
        c.take_control(&mut out);
        assert!(out.len() < 1 << 22);
        out.clear();
    }
});
