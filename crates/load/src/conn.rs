//! Connection slots: dialing TCP (and TLS, where ALPN picks the protocol) or QUIC, reconnecting
//! as needed, each connection handed to the client of its protocol (`h1`, `h2`, `h3`).

use crate::inflight::End;
use crate::record::{ConnectFailure, ErrorKind, ALPN_H1, ALPN_H2};
use crate::sched::Schedules;
use crate::setup::ProtoChoice;
use crate::shared::{Budget, WorkerRef};
use std::time::Duration;

/// Run one connection slot until the worker runs out of work, reconnecting as needed.
pub(crate) async fn run(w: WorkerRef, slot: u64) {
    let mut failures = 0u32;
    let mut first_attempt = true;
    let mut scheds = Schedules::new(&w.pace, w.start, slot, w.setup.streams as u64);
    while w.more() {
        let budget = Budget::new(w.setup.requests_per_conn);
        let end = match w.setup.proto {
            ProtoChoice::H3 => crate::h3::connection(&w, &mut scheds.streams, &budget).await,
            _ => tcp_connection(&w, &mut scheds, &budget).await,
        };
        let first = std::mem::replace(&mut first_attempt, false);
        match end {
            // A connection that started all it may (--requests-per-conn) makes way for a new one.
            Ok(End::Finished) if budget.spent() => failures = 0,
            Ok(End::Finished) => return,
            Ok(End::Reconnect) => failures = 0,
            Err(f) => {
                w.failed(&f, first);
                // A connection that cannot be made costs one request of the budget (or one
                // given back), so that `-n` runs against a dead server end; back off so `-D`
                // runs do not spin.
                w.forfeit();
                failures += 1;
                tokio::time::sleep(Duration::from_millis(10 * failures.min(20) as u64)).await;
            }
        }
    }
}

async fn tcp_connection(
    w: &WorkerRef,
    scheds: &mut Schedules,
    budget: &Budget,
) -> Result<End, ConnectFailure> {
    let setup = &w.setup;
    let connect_failed = |why: &dyn std::fmt::Display| {
        ConnectFailure::new(ErrorKind::Connect, format!("{}: {why}", setup.addr))
    };
    let tcp = tokio::time::timeout(setup.timeout, tokio::net::TcpStream::connect(setup.addr))
        .await
        .map_err(|_| connect_failed(&"timed out"))?
        .map_err(|e| connect_failed(&e))?;
    let _ = tcp.set_nodelay(true);
    match &setup.tls_config {
        None if setup.proto == ProtoChoice::H2c => {
            w.startup.connected();
            Ok(crate::h2::connection(w, tcp, &mut scheds.streams, budget).await)
        }
        None => {
            w.startup.connected();
            Ok(crate::h1::connection(w, tcp, &mut scheds.h1, budget).await)
        }
        Some(configs) => {
            let connector = tokio_rustls::TlsConnector::from(configs.pick(w.resume_next()).clone());
            let name = setup.server_name.to_str();
            let tls = tokio::time::timeout(
                setup.timeout,
                connector.connect(setup.server_name.clone(), tcp),
            )
            .await
            .map_err(|_| crate::tls::failure(&name, "handshake timed out"))?
            .map_err(|e| crate::tls::failure(&name, &e.to_string()))?;
            let session = tls.get_ref().1;
            w.rec
                .borrow_mut()
                .handshake(session.handshake_kind() == Some(rustls::HandshakeKind::Resumed));
            let h2 = session.alpn_protocol() == Some(b"h2");
            if setup.proto == ProtoChoice::Alpn {
                w.rec.borrow_mut().alpn |= if h2 { ALPN_H2 } else { ALPN_H1 };
            }
            if h2 {
                w.startup.connected();
                Ok(crate::h2::connection(w, tls, &mut scheds.streams, budget).await)
            } else if setup.proto == ProtoChoice::H2 {
                Err(crate::tls::failure(
                    &name,
                    "the server did not select h2 by ALPN",
                ))
            } else {
                w.startup.connected();
                Ok(crate::h1::connection(w, tls, &mut scheds.h1, budget).await)
            }
        }
    }
}
