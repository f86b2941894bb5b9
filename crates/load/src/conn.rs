//! Connection slots: dialing TCP (and TLS, where ALPN picks the protocol) or QUIC, reconnecting
//! as needed, each connection handed to the client of its protocol (`h1`, `h2`, `h3`).

use crate::inflight::End;
use crate::record::ErrorKind;
use crate::sched::Schedules;
use crate::setup::Proto;
use crate::shared::WorkerRef;
use std::time::Duration;

/// Run one connection slot until the worker runs out of work, reconnecting as needed.
pub async fn run(w: WorkerRef, slot: u64) {
    let mut failures = 0u32;
    let mut scheds = Schedules::new(w.pace, w.start, slot, w.setup.streams as u64);
    while w.more() {
        let end = match w.setup.proto {
            Proto::H3 => crate::h3::connection(&w, &mut scheds.streams).await,
            _ => tcp_connection(&w, &mut scheds).await,
        };
        match end {
            Ok(End::Finished) => return,
            Ok(End::Reconnect) => failures = 0,
            Err(kind) => {
                w.error(kind);
                // A connection that cannot be made costs one request of the budget, so that
                // `-n` runs against a dead server end; back off so `-D` runs do not spin.
                let _ = w.take();
                failures += 1;
                tokio::time::sleep(Duration::from_millis(10 * failures.min(20) as u64)).await;
            }
        }
    }
}

async fn tcp_connection(w: &WorkerRef, scheds: &mut Schedules) -> Result<End, ErrorKind> {
    let setup = &w.setup;
    let tcp = tokio::time::timeout(setup.timeout, tokio::net::TcpStream::connect(setup.addr))
        .await
        .map_err(|_| ErrorKind::Connect)?
        .map_err(|_| ErrorKind::Connect)?;
    let _ = tcp.set_nodelay(true);
    match &setup.tls_config {
        None if setup.proto == Proto::H2c => {
            Ok(crate::h2::connection(w, tcp, &mut scheds.streams).await)
        }
        None => Ok(crate::h1::connection(w, tcp, &mut scheds.h1).await),
        Some(cfg) => {
            let connector = tokio_rustls::TlsConnector::from(cfg.clone());
            let tls = tokio::time::timeout(
                setup.timeout,
                connector.connect(setup.server_name.clone(), tcp),
            )
            .await
            .map_err(|_| ErrorKind::Tls)?
            .map_err(|_| ErrorKind::Tls)?;
            if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                Ok(crate::h2::connection(w, tls, &mut scheds.streams).await)
            } else if setup.proto == Proto::H2 {
                Err(ErrorKind::Tls)
            } else {
                Ok(crate::h1::connection(w, tls, &mut scheds.h1).await)
            }
        }
    }
}
