//! The plan for a request, with the worker thread's own random generator (for the `r` suffix).

use loadterm_plan::{Outcome, Plan, Request, Rng};
use std::cell::RefCell;

thread_local! {
    static RNG: RefCell<Rng> = RefCell::new(Rng::from_entropy());
}

pub fn plan(req: &Request<'_>) -> Outcome {
    RNG.with(|r| Plan::from_request(req, &mut r.borrow_mut()))
}
