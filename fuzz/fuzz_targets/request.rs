//! Arbitrary bytes as an HTTP/1.x request stream: head parser, body decoder, and the plan for
//! whatever target and control header come out. Must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadterm_plan::{Plan, Query, Rng};
use loadterm_server::h1::body::RequestBody;
use loadterm_server::h1::head::{parse, BodyFraming, Parsed, RequestHead};

fuzz_target!(|data: &[u8]| {
    let mut head = RequestHead::default();
    // The first byte picks strict or lenient mode, so both are explored.
    let lenient = data.first().is_some_and(|b| b & 1 == 1);
    if parse(data, &mut head, lenient) == Parsed::Complete {
        let s = head.request.summary(loadterm_exchange::Version::Http11, false, 0, false);
        let req = Query { target: s.target, control: s.control, is_head: s.is_head };
        let _ = Plan::from_request(&req, &mut Rng::new(1));
        let mut dec = RequestBody::new(head.body.unwrap_or(BodyFraming::None));
        let _ = dec.feed(&data[head.len..]);
    }
    let _ = Plan::from_request(&Query { target: data, control: Some(data), is_head: false }, &mut Rng::new(2));
});
