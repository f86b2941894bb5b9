//! Arbitrary bytes as an HTTP/3 request stream and as a response stream, fed in two pieces, the
//! field sections QPACK-decoded as the server and the load client do. Must never panic, and
//! must always end in an event or an error at the end of the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadterm_h3::message::{Message, MessageEvent};
use loadterm_h3::qpack;

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |&b| b as usize % (data.len() + 1));
    let (a, b) = data.split_at(split);
    let mut decoder = qpack::QpackDecoder::default();
    for mut m in [Message::request(4096), Message::response(4096)] {
        'pieces: for (piece, fin) in [(a, false), (b, true)] {
            let mut at = 0;
            loop {
                let Ok((n, event)) = m.poll(&piece[at..], fin) else {
                    break 'pieces;
                };
                at += n;
                match event {
                    None => {
                        assert!(!fin && at == piece.len());
                        break;
                    }
                    Some(MessageEvent::Headers | MessageEvent::Trailers | MessageEvent::Interim(_)) => {
                        let _ = decoder.decode(m.section(), 4096, |_, _| {});
                    }
                    Some(MessageEvent::End | MessageEvent::TooLarge) => break 'pieces,
                    Some(MessageEvent::Data(_)) => {}
                }
            }
        }
    }
});
