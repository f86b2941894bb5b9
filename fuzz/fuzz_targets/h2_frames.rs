//! Arbitrary bytes after a valid client preface and SETTINGS, as the frames a server reads:
//! the frame decoder (headers, lengths, padding, priority, CONTINUATION) must never panic, and
//! must reach the same events and outcome whether the bytes come whole or one at a time.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadterm_codec::h2::{Connection, Event, LocalSettings, Role, PREFACE};

/// The events as owned text, and how the input ended.
fn run(input: &[u8], piece: usize) -> (Vec<String>, Option<u32>) {
    let mut c = Connection::new(Role::Server, LocalSettings::default());
    let mut seen = Vec::new();
    let hello = [PREFACE, &[0, 0, 0, 4, 0, 0, 0, 0, 0]].concat();
    for mut chunk in hello.chunks(piece).chain(input.chunks(piece)) {
        loop {
            match c.recv(&mut chunk) {
                Ok(Some(Event::Data { stream, data, end_stream })) => {
                    // Pieces of one frame depend on the reads: merged by stream.
                    seen.push(format!("data {stream} {} {end_stream}", data.len()))
                }
                Ok(Some(ev)) => seen.push(format!("{ev:?}")),
                Ok(None) => break,
                Err(e) => return (seen, Some(e.code)),
            }
        }
    }
    (seen, None)
}

fn merged(events: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in events {
        if let (Some(last), Some(rest)) = (out.last_mut(), e.strip_prefix("data ")) {
            let (a, b): (Vec<&str>, Vec<&str>) = (
                last.strip_prefix("data ").unwrap_or("").split(' ').collect(),
                rest.split(' ').collect(),
            );
            if a.len() == 3 && a[0] == b[0] && a[2] == "false" {
                let n: usize = a[1].parse().unwrap_or(0) + b[1].parse::<usize>().unwrap_or(0);
                *last = format!("data {} {n} {}", b[0], b[2]);
                continue;
            }
        }
        if e.starts_with("data ") && e.ends_with(" 0 false") {
            continue;
        }
        out.push(e);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let (whole, end) = run(data, usize::MAX);
    let (bytewise, end1) = run(data, 1);
    assert_eq!(end, end1);
    assert_eq!(merged(whole), merged(bytewise));
});
