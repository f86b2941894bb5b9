//! Exchanges planned with the worker thread's own random generator (for the `r` suffix).

use loadterm_exchange::{Exchange, Request};
use loadterm_plan::Rng;
use std::cell::RefCell;
use std::time::Instant;

thread_local! {
    static RNG: RefCell<Rng> = RefCell::new(Rng::from_entropy());
}

pub fn exchange(req: &Request<'_>, t_first: Instant) -> Exchange {
    RNG.with(|r| Exchange::new(req, &mut r.borrow_mut(), t_first))
}
