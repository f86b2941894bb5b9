//! The HTTP/1.x connection decision (haterm's table, docs/COMPATIBILITY.md), as a pure function of the request and
//! the plan; only [`crate::Exchange`] calls it. One deliberate fix: a body that cannot be framed (HTTP/1.0 + `k=1`) is always
//! close-delimited, never left unframed on an open connection.

use loadterm_plan::{response_has_body, ConnForce, Plan};

/// What the engine learnt from the request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H1Request {
    /// HTTP/1.1 or newer (major > 1, or 1 with minor >= 1).
    pub is_11: bool,
    /// `Connection` carries a `close` token.
    pub conn_close: bool,
    /// `Connection` carries a `keep-alive` token.
    pub conn_keep_alive: bool,
    pub is_head: bool,
}

impl H1Request {
    pub const HTTP11: H1Request = H1Request {
        is_11: true,
        conn_close: false,
        conn_keep_alive: false,
        is_head: false,
    };
    pub const HTTP10: H1Request = H1Request {
        is_11: false,
        conn_close: false,
        conn_keep_alive: false,
        is_head: false,
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnHeader {
    Close,
    KeepAlive,
}

/// How the response goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    /// `HTTP/1.1` status line (else `HTTP/1.0`).
    pub response_11: bool,
    pub content_length: Option<u64>,
    pub chunked_te: bool,
    pub conn_header: Option<ConnHeader>,
    /// The connection stays open after this response.
    pub keep_alive: bool,
}

#[inline]
pub fn framing(req: &H1Request, plan: &Plan) -> Framing {
    let response_11 = req.is_11;
    // The server's intent ("ka" bit 0 in haterm): version default, then C/K.
    let want_ka = match plan.conn {
        ConnForce::None => req.is_11,
        ConnForce::Close => false,
        ConnForce::KeepAlive => true,
    };
    // `b`: the length to advertise, whatever the body (not with chunks, which carry none).
    let forced = plan
        .length
        .filter(|_| !plan.chunked && plan.has_length_header());
    let content_length = forced
        .or((!plan.chunked && want_ka && plan.has_length_header())
            .then_some(plan.announced_length()));
    // A length that lies breaks the connection's framing for the client: close after it, so
    // the lie shows as a truncated (or overlong) response and not as a garbled next one.
    let lying = !plan.is_head && forced.is_some_and(|b| b != plan.size);
    let has_body = response_has_body(plan.is_head, plan.status);
    let chunked_te = plan.chunked && response_11 && has_body;
    // The body's end is known without closing: a length, chunking, or no body at all.
    let bodyless = !has_body;
    let delimited = content_length.is_some() || chunked_te || bodyless;
    let client_ka = if req.is_11 {
        !req.conn_close
    } else {
        req.conn_keep_alive && !req.conn_close
    };
    let keep_alive = client_ka && want_ka && delimited && !plan.is_informational() && !lying;
    let conn_header = if keep_alive && !response_11 {
        Some(ConnHeader::KeepAlive)
    } else if !keep_alive && response_11 {
        Some(ConnHeader::Close)
    } else {
        None
    };
    Framing {
        response_11,
        content_length,
        chunked_te,
        conn_header,
        keep_alive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadterm_plan::{Outcome, Query, Rng};

    fn frame(target: &str, req: H1Request) -> Framing {
        let r = Query {
            target: target.as_bytes(),
            control: None,
            is_head: req.is_head,
        };
        let Outcome::Respond(plan) = Plan::from_request(&r, &mut Rng::new(1)) else {
            panic!()
        };
        framing(&req, &plan)
    }

    const KA10: H1Request = H1Request {
        conn_keep_alive: true,
        ..H1Request::HTTP10
    };
    const CLOSE11: H1Request = H1Request {
        conn_close: true,
        ..H1Request::HTTP11
    };

    /// Every row of haterm's table (with the unframed-body row fixed).
    #[test]
    fn decision_table() {
        use ConnHeader::*;
        let f = |resp11, cl: Option<u64>, te, hdr, ka| Framing {
            response_11: resp11,
            content_length: cl,
            chunked_te: te,
            conn_header: hdr,
            keep_alive: ka,
        };
        assert_eq!(
            frame("/?s=10", H1Request::HTTP10),
            f(false, None, false, None, false)
        );
        assert_eq!(frame("/?s=10", KA10), f(false, None, false, None, false));
        assert_eq!(
            frame("/?s=10&K=1", H1Request::HTTP10),
            f(false, Some(10), false, None, false)
        );
        assert_eq!(
            frame("/?s=10&C=0", H1Request::HTTP10),
            f(false, Some(10), false, None, false)
        );
        assert_eq!(
            frame("/?s=10&K=1", KA10),
            f(false, Some(10), false, Some(KeepAlive), true)
        );
        assert_eq!(
            frame("/?s=10", H1Request::HTTP11),
            f(true, Some(10), false, None, true)
        );
        assert_eq!(
            frame("/?s=10", CLOSE11),
            f(true, Some(10), false, Some(Close), false)
        );
        assert_eq!(
            frame("/?s=10&K=1", CLOSE11),
            f(true, Some(10), false, Some(Close), false)
        );
        assert_eq!(
            frame("/?s=10&C=1", H1Request::HTTP11),
            f(true, None, false, Some(Close), false)
        );
        assert_eq!(
            frame("/?s=10&K=0", H1Request::HTTP11),
            f(true, None, false, Some(Close), false)
        );
        assert_eq!(
            frame("/?s=10&k=1", H1Request::HTTP11),
            f(true, None, true, None, true)
        );
        assert_eq!(
            frame("/?s=10&k=1&C=1", H1Request::HTTP11),
            f(true, None, true, Some(Close), false)
        );
        assert_eq!(
            frame("/?s=10&k=1", H1Request::HTTP10),
            f(false, None, false, None, false)
        );
        // haterm leaves this body unframed on an open connection; we close.
        assert_eq!(
            frame("/?s=10&k=1&K=1", KA10),
            f(false, None, false, None, false)
        );
        assert_eq!(
            frame("/?s=10&k=1", KA10),
            f(false, None, false, None, false)
        );
        let head = H1Request {
            is_head: true,
            ..H1Request::HTTP11
        };
        // HEAD announces the GET's length (RFC 9110 §9.3.2), and keeps the connection.
        assert_eq!(frame("/?s=10", head), f(true, Some(10), false, None, true));
        assert_eq!(frame("/?s=10&k=1", head), f(true, None, false, None, true));
    }

    #[test]
    fn lying_lengths_close() {
        use ConnHeader::*;
        let fr = frame("/?s=10&b=4", H1Request::HTTP11);
        assert_eq!(
            (fr.content_length, fr.keep_alive, fr.conn_header),
            (Some(4), false, Some(Close))
        );
        let fr = frame("/?s=10&b=99", H1Request::HTTP11);
        assert_eq!((fr.content_length, fr.keep_alive), (Some(99), false));
        // The truth, or a HEAD's length, keeps the connection.
        let fr = frame("/?s=10&b=10", H1Request::HTTP11);
        assert_eq!((fr.content_length, fr.keep_alive), (Some(10), true));
        let head = H1Request {
            is_head: true,
            ..H1Request::HTTP11
        };
        let fr = frame("/?s=10&b=7", head);
        assert_eq!((fr.content_length, fr.keep_alive), (Some(7), true));
        // b even in close mode (where haterm sends no length), never with chunks or on a 304.
        let fr = frame("/?s=10&b=3", H1Request::HTTP10);
        assert_eq!((fr.content_length, fr.keep_alive), (Some(3), false));
        let fr = frame("/?s=10&b=3&k=1", H1Request::HTTP11);
        assert_eq!((fr.content_length, fr.chunked_te), (None, true));
        let fr = frame("/?r=304&b=3", H1Request::HTTP11);
        assert_eq!((fr.content_length, fr.keep_alive), (None, true));
    }

    #[test]
    fn bodyless_statuses() {
        let fr = frame("/?r=204&s=5", H1Request::HTTP11);
        assert_eq!((fr.content_length, fr.keep_alive), (None, true));
        let fr = frame("/?r=304&s=5", H1Request::HTTP11);
        assert_eq!((fr.content_length, fr.keep_alive), (None, true));
        // A 1xx as the final answer cannot be followed by anything: close.
        let fr = frame("/?r=103", H1Request::HTTP11);
        assert!(!fr.keep_alive && fr.content_length.is_none());
    }
}
