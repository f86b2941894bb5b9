//! The UDP socket under the QUIC driver (quinn's, with GSO and GRO). Every datagram received is
//! shown to the anti-amplification guard and, with `--ja4`, to the QUIC fingerprint reader before
//! quinn-proto sees it; every datagram sent goes through the guard.

use super::amplification::AmplificationGuard;
use crate::ja4::QuicFingerprints;
use quinn::udp::{RecvMeta, Transmit};
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

#[derive(Debug)]
pub(super) struct Socket {
    inner: Arc<dyn quinn::AsyncUdpSocket>,
    guard: AmplificationGuard,
    fingerprints: Option<Arc<QuicFingerprints>>,
}

impl Socket {
    pub(super) fn new(
        inner: Arc<dyn quinn::AsyncUdpSocket>,
        fingerprints: Option<Arc<QuicFingerprints>>,
    ) -> Socket {
        Socket {
            inner,
            guard: AmplificationGuard::default(),
            fingerprints,
        }
    }
}

impl quinn::AsyncUdpSocket for Socket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn quinn::UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.guard.send(transmit, |t| self.inner.try_send(t))
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let n = match self.inner.poll_recv(cx, bufs, meta) {
            Poll::Ready(Ok(n)) => n,
            other => return other,
        };
        let mut now = None;
        for (buf, m) in bufs.iter().zip(meta.iter()).take(n) {
            // With GRO one buffer holds several datagrams, `stride` bytes apart.
            for datagram in buf[..m.len].chunks(m.stride.max(1)) {
                if let Some(f) = &self.fingerprints {
                    f.observe(m.addr, datagram);
                }
                self.guard.received(m.addr, datagram, &mut now);
            }
        }
        Poll::Ready(Ok(n))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}
