//! Arbitrary bytes as a chunked body, whole and in two pieces: the strict decoder must never
//! panic, never take more than it is given, and reach the same outcome however the input is
//! split. Must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadterm_codec::chunked::ChunkedDecoder;

fuzz_target!(|data: &[u8]| {
    let mut whole = ChunkedDecoder::new();
    let once = whole.feed(data);
    if let Ok(n) = once {
        assert!(n <= data.len());
        assert!(n == data.len() || whole.is_done());
    }
    let split = data.first().map_or(0, |&b| b as usize % (data.len() + 1));
    let (a, b) = data.split_at(split);
    let mut pieces = ChunkedDecoder::new();
    let twice = pieces.feed(a).and_then(|n| match n < a.len() {
        true => Ok(n),
        false => pieces.feed(b).map(|m| n + m),
    });
    assert_eq!(once, twice);
    assert_eq!(whole.is_done(), pieces.is_done());
    assert_eq!(whole.data_bytes(), pieces.data_bytes());
});
