//! HTTP/3 load: quinn for QUIC, HTTP/3 from `loadterm-h3` (the wire code the server uses too):
//! one task per stream slot, requests prebuilt per URL and written as `Bytes` without copies,
//! response bodies counted from quinn's chunks, never copied. No grease (oha's client sends
//! some, the `h3` crate's by default).

mod stream;

use crate::inflight::End;
use crate::record::{ConnectFailure, ErrorKind};
use crate::sched::Schedule;
use crate::shared::{Budget, WorkerRef};
use loadterm_h3::frame::{self, code};
use loadterm_h3::reader::Reader;
use std::cell::Cell;
use std::rc::Rc;

/// One HTTP/3 connection: `scheds` holds one schedule per concurrent stream slot.
pub(crate) async fn connection(
    w: &WorkerRef,
    scheds: &mut [Schedule],
    budget: &Budget,
) -> Result<End, ConnectFailure> {
    let setup = w.setup.clone();
    let endpoint = w.endpoint.as_ref().expect("H3 workers have an endpoint");
    let config = setup
        .quic_config
        .as_ref()
        .expect("H3 setup has a QUIC config")
        .pick(w.resume_next())
        .clone();
    let name = setup.server_name.to_str();
    let connect_failed = |why: &dyn std::fmt::Display| connect_failed(setup.addr, why);
    let connecting = endpoint
        .connect_with(config, setup.addr, &name)
        .map_err(|e| connect_failed(&e))?;
    // --0rtt: with a ticket, requests go out at once as early data; whether the server took
    // it is known once the handshake is over.
    let connecting = if setup.zero_rtt {
        match connecting.into_0rtt() {
            Ok((conn, accepted)) => {
                w.startup.connected();
                w.rec.borrow_mut().handshake(false);
                let worker = w.clone();
                tokio::task::spawn_local(async move {
                    if accepted.await {
                        worker.rec.borrow_mut().handshakes.early_data += 1;
                    }
                });
                return serve(w, conn, scheds, budget).await;
            }
            Err(connecting) => connecting,
        }
    } else {
        connecting
    };
    let handshake = tokio::time::timeout(setup.timeout, connecting);
    // Until a connection was made, a UDP port nothing listens on (a server without QUIC) is
    // told by the ICMP port unreachable it answers with; quinn ignores it and would wait for
    // the whole --timeout.
    let conn = if w.startup.any_connected() {
        handshake.await
    } else {
        tokio::select! {
            r = handshake => r,
            () = udp_refused(setup.addr) => {
                return Err(connect_failed(
                    &"nothing listens on this UDP port (ICMP port unreachable): no HTTP/3 there",
                ))
            }
        }
    };
    let conn = conn
        .map_err(|_| connect_failed(&"timed out"))?
        .map_err(|e| match e {
            // The handshake failed on our side (e.g. certificate verification): rustls's
            // reason is in the transport error.
            quinn::ConnectionError::TransportError(t) => crate::tls::failure(&name, &t.reason),
            quinn::ConnectionError::ConnectionClosed(c) => {
                crate::tls::failure(&name, &format!("closed by the server: {c}"))
            }
            e => connect_failed(&e),
        })?;
    w.startup.connected();
    // Counted full here; `Handshakes::settle_quic` tells the resumed ones apart at the end.
    w.rec.borrow_mut().handshake(false);
    serve(w, conn, scheds, budget).await
}

fn connect_failed(addr: std::net::SocketAddr, why: &dyn std::fmt::Display) -> ConnectFailure {
    ConnectFailure::new(ErrorKind::Connect, format!("QUIC {addr}: {why}"))
}

/// Requests on an established (or 0-RTT) connection until the slots are done.
async fn serve(
    w: &WorkerRef,
    conn: quinn::Connection,
    scheds: &mut [Schedule],
    budget: &Budget,
) -> Result<End, ConnectFailure> {
    let connect_failed = |why: &dyn std::fmt::Display| connect_failed(w.setup.addr, why);
    // Our control stream, with empty SETTINGS; open as long as the connection.
    let mut hello = vec![frame::STREAM_CONTROL as u8];
    frame::put_frame(&mut hello, frame::SETTINGS, &[]);
    let mut control = conn.open_uni().await.map_err(|e| connect_failed(&e))?;
    control
        .write_all(&hello)
        .await
        .map_err(|e| connect_failed(&e))?;
    // The stream ID of the server's GOAWAY, once it came.
    let goaway = Rc::new(Cell::new(None));
    let peer = tokio::task::spawn_local(server_streams(conn.clone(), goaway.clone()));
    // A request completed on this connection: requests it left unprocessed may be sent again.
    let progressed = Cell::new(false);
    let loops = scheds
        .iter_mut()
        .map(|sched| stream::stream_loop(w, &conn, sched, &goaway, &progressed, budget));
    let ends = futures::future::join_all(loops).await;
    peer.abort();
    conn.close(code::NO_ERROR.into(), b"done");
    Ok(if ends.iter().all(|e| matches!(e, End::Finished)) {
        End::Finished
    } else {
        End::Reconnect
    })
}

/// Returns if a datagram to `addr` is refused (ICMP port unreachable, reported on a connected
/// UDP socket); never otherwise. The datagram is empty: a QUIC server drops it unread.
async fn udp_refused(addr: std::net::SocketAddr) {
    let refused = async {
        let any: std::net::SocketAddr = if addr.is_ipv6() {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        };
        let sock = tokio::net::UdpSocket::bind(any).await.ok()?;
        sock.connect(addr).await.ok()?;
        sock.send(&[]).await.ok()?;
        let mut buf = [0u8; 1];
        loop {
            match sock.recv(&mut buf).await {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Some(()),
                Err(_) => return None,
                Ok(_) => {}
            }
        }
    };
    if refused.await.is_none() {
        std::future::pending::<()>().await;
    }
}

/// The server's unidirectional streams: its control stream (watched for GOAWAY, whose stream
/// ID goes to `goaway`) and the rest (QPACK streams, grease), drained.
async fn server_streams(conn: quinn::Connection, goaway: Rc<Cell<Option<u64>>>) {
    while let Ok(recv) = conn.accept_uni().await {
        let goaway = goaway.clone();
        tokio::task::spawn_local(async move {
            let mut r = Reader::new(recv);
            if let Ok(Some(frame::STREAM_CONTROL)) = r.varint().await {
                while let Ok(Some((ty, len))) = r.frame_head().await {
                    let payload = match ty {
                        // One integer: 1 to 8 bytes.
                        frame::GOAWAY if (1..=8).contains(&len) => r.payload(len as usize).await,
                        _ => r.skip(len).await.map(|()| bytes::Bytes::new()),
                    };
                    let Ok(payload) = payload else { return };
                    if ty == frame::GOAWAY {
                        // A later GOAWAY may only lower the ID (RFC 9114 §5.2).
                        let id = goaway_id(&payload);
                        goaway.set(Some(goaway.get().map_or(id, |g| g.min(id))));
                    }
                }
            } else {
                while let Ok(Some(_)) = r.varint().await {}
            }
        });
    }
}

/// A GOAWAY's stream ID (RFC 9114 §5.2: requests on streams from it on were not processed);
/// a malformed one tells nothing, so it marks no request unprocessed.
fn goaway_id(payload: &[u8]) -> u64 {
    match frame::get_varint(payload) {
        Some((id, n)) if n == payload.len() => id,
        _ => u64::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::goaway_id;
    use loadterm_h3::frame;

    #[test]
    fn goaway_payloads() {
        for id in [0, 4, 64, 16_384, 1 << 40] {
            let mut p = Vec::new();
            frame::put_varint(&mut p, id);
            assert_eq!(goaway_id(&p), id);
        }
        // Empty, cut short, or with bytes after the integer: claims nothing.
        assert_eq!(goaway_id(&[]), u64::MAX);
        assert_eq!(goaway_id(&[0x40]), u64::MAX);
        assert_eq!(goaway_id(&[0x04, 0x00]), u64::MAX);
    }
}
