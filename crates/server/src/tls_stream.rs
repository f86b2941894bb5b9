//! The server's TLS stream: rustls's unbuffered API (`UnbufferedServerConnection`) over a byte
//! stream, with the ciphertext buffers (and the rare plaintext left over from a read) owned
//! here. They are held while the connection is busy and given back to the thread's pool
//! (`h1::buffers`) once it turns idle (`release`), so that a parked connection keeps rustls's
//! state (keys, sequence numbers) and nothing else: the buffered `ServerConnection` kept a
//! 4 KiB record buffer for ever.
//!
//! Records are encrypted straight into the outgoing buffer, up to `WRITE_BATCH` bytes of
//! plaintext per write call, and each batch leaves in one write to the socket.

use crate::h1::buffers;
use rustls::server::{ServerConfig, ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncryptError, InsufficientSizeError, UnbufferedStatus,
    WriteTraffic,
};
use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The largest TLS record on the wire (RFC 8446 §5.2): the incoming buffer always has room
/// for a whole one.
const MAX_RECORD: usize = 5 + (1 << 14) + 256;
/// Ciphertext read at once at least, when no record is begun: the pool's buffer size.
const READ_SIZE: usize = 16 * 1024;
/// Plaintext encrypted per write call, as much as rustls's buffered connection took (its
/// default buffer limit): one write to the socket per 64 KiB.
const WRITE_BATCH: usize = 64 * 1024;
/// Whole slices of a vectored write are taken up to this much plaintext, rather than a slice
/// cut short of the batch: a cut would leave a short record at every batch's end (a response's
/// head before its 64 KiB body slices).
const WRITE_SLACK: usize = 1 << 14;

/// A TLS connection after its handshake (and during it, inside `Handshake`).
pub(crate) struct TlsStream<IO> {
    io: IO,
    /// Boxed: moving a stream (into the parking lot, into a task) moves a pointer.
    conn: Box<UnbufferedServerConnection>,
    /// Ciphertext read: `incoming[in_start..in_end]` is not processed yet; the rest is room
    /// (the vector's length is its initialized room).
    incoming: Vec<u8>,
    in_start: usize,
    in_end: usize,
    /// Ciphertext to send: `outgoing[out_start..out_end]`.
    outgoing: Vec<u8>,
    out_start: usize,
    out_end: usize,
    /// Plaintext decrypted and not read yet (a record longer than the reader's buffer, or data
    /// that came with the handshake's last flight): `plain[plain_start..]`.
    plain: Vec<u8>,
    plain_start: usize,
    read_end: ReadEnd,
    /// Our close_notify is queued (or the connection failed): nothing more is encrypted.
    write_closed: bool,
    /// The connection failed: rustls's error, returned by every later call.
    failed: Option<rustls::Error>,
}

/// How far the peer's side has come.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ReadEnd {
    Open,
    /// Its close_notify came: reads return end of stream.
    CloseNotify,
    /// The socket ended without a close_notify: reads fail (`UnexpectedEof`), as rustls's
    /// buffered reader does.
    Eof,
}

/// Where processing the records read so far stopped.
enum Processed {
    /// The handshake needs more bytes from the peer.
    Handshaking,
    /// Established (or closed both ways): more records need more bytes from the peer.
    Established,
}

/// Start a server-side TLS connection over `io`: the handshake, as a future (each poll a step
/// of it: `handshake_turns` gates them) whose output is the established stream.
pub(crate) fn accept<IO>(
    io: IO,
    config: Arc<ServerConfig>,
) -> Result<Handshake<IO>, rustls::Error> {
    let conn = Box::new(UnbufferedServerConnection::new(config)?);
    Ok(Handshake {
        stream: Some(TlsStream::from_parts(io, conn)),
    })
}

/// A quiet stream put away while its connection is parked: rustls's state, inline (one
/// allocation for the whole parked session, where the stream's own box was another), and the
/// stream's socket-less IO.
pub(crate) struct Parked<IO> {
    io: IO,
    conn: UnbufferedServerConnection,
}

impl<IO> Parked<IO> {
    pub(crate) fn get_mut(&mut self) -> &mut IO {
        &mut self.io
    }

    /// The stream again, as it was put away.
    pub(crate) fn resume(self) -> TlsStream<IO> {
        TlsStream::from_parts(self.io, Box::new(self.conn))
    }
}

/// A TLS handshake in progress (`accept`). Errors carry rustls's error inside (`InvalidData`),
/// or are the socket's, or `UnexpectedEof`: `tls::failure` classifies them.
pub(crate) struct Handshake<IO> {
    stream: Option<TlsStream<IO>>,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Future for Handshake<IO> {
    type Output = io::Result<TlsStream<IO>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let stream = this
            .stream
            .as_mut()
            .expect("a handshake is not polled once done");
        ready!(stream.poll_handshake(cx))?;
        let mut stream = this.stream.take().expect("checked above");
        // The handshake's buffers are not kept for the first request: it may be long in coming.
        stream.release();
        Poll::Ready(Ok(stream))
    }
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl<IO> TlsStream<IO> {
    fn from_parts(io: IO, conn: Box<UnbufferedServerConnection>) -> Self {
        TlsStream {
            io,
            conn,
            incoming: Vec::new(),
            in_start: 0,
            in_end: 0,
            outgoing: Vec::new(),
            out_start: 0,
            out_end: 0,
            plain: Vec::new(),
            plain_start: 0,
            read_end: ReadEnd::Open,
            write_closed: false,
            failed: None,
        }
    }

    /// Put a quiet stream (`is_quiet`) away for its connection to be parked; `None` (the
    /// stream dropped) if it is not.
    pub(crate) fn park(self) -> Option<Parked<IO>> {
        if !self.is_quiet() {
            return None;
        }
        let TlsStream {
            io,
            conn,
            incoming,
            outgoing,
            ..
        } = self;
        buffers::give(incoming);
        buffers::give(outgoing);
        Some(Parked { io, conn: *conn })
    }

    pub(crate) fn get_ref(&self) -> &IO {
        &self.io
    }

    /// The protocol the handshake chose by ALPN.
    pub(crate) fn alpn_protocol(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// Nothing to read or to send is held here (nor in rustls, which this stream empties at
    /// each step), and the connection is open: its next bytes come from the socket.
    pub(crate) fn is_quiet(&self) -> bool {
        self.in_start == self.in_end
            && self.out_start == self.out_end
            && self.plain_start == self.plain.len()
            && self.read_end == ReadEnd::Open
            && self.failed.is_none()
    }

    /// Give the buffers that hold nothing back (to the thread's pool, or free them).
    pub(crate) fn release(&mut self) {
        if self.in_start == self.in_end {
            buffers::give(std::mem::take(&mut self.incoming));
            (self.in_start, self.in_end) = (0, 0);
        }
        if self.out_start == self.out_end {
            buffers::give(std::mem::take(&mut self.outgoing));
            (self.out_start, self.out_end) = (0, 0);
        }
        if self.plain_start == self.plain.len() {
            self.plain = Vec::new();
            self.plain_start = 0;
        }
    }

    /// The bytes of buffer this stream holds (rustls's own state aside).
    #[cfg(test)]
    pub(crate) fn buffer_capacity(&self) -> usize {
        self.incoming.capacity() + self.outgoing.capacity() + self.plain.capacity()
    }

    fn check(&self) -> io::Result<()> {
        match &self.failed {
            Some(e) => Err(tls_error(e.clone())),
            None => Ok(()),
        }
    }

    /// Process the records read so far until more bytes are needed: plaintext goes to `to`
    /// while it has room, the rest to `plain`; handshake records to send to `outgoing`.
    fn process(&mut self, mut to: Option<&mut ReadBuf<'_>>) -> io::Result<Processed> {
        self.check()?;
        loop {
            let UnbufferedStatus { mut discard, state } = self
                .conn
                .process_tls_records(&mut self.incoming[self.in_start..self.in_end]);
            let state = match state {
                Ok(state) => state,
                Err(e) => {
                    self.in_start += discard;
                    return Err(self.fail(e));
                }
            };
            let outcome = match state {
                ConnectionState::ReadTraffic(mut traffic) => {
                    let mut outcome = None;
                    while let Some(record) = traffic.next_record() {
                        match record {
                            Ok(record) => {
                                discard += record.discard;
                                deliver(
                                    record.payload,
                                    to.as_deref_mut(),
                                    &mut self.plain,
                                    &mut self.plain_start,
                                );
                            }
                            Err(e) => {
                                outcome = Some(Err(e));
                                break;
                            }
                        }
                    }
                    outcome
                }
                ConnectionState::EncodeTlsData(mut data) => {
                    match encode(&mut data, &mut self.outgoing, self.out_start, self.out_end) {
                        Ok((start, end)) => {
                            (self.out_start, self.out_end) = (start, end);
                            None
                        }
                        Err(e) => Some(Err(e)),
                    }
                }
                // Sent later, in order, with whatever follows: rustls needs no more of it.
                ConnectionState::TransmitTlsData(transmit) => {
                    transmit.done();
                    None
                }
                ConnectionState::BlockedHandshake => Some(Ok(Processed::Handshaking)),
                ConnectionState::WriteTraffic(_) | ConnectionState::Closed => {
                    Some(Ok(Processed::Established))
                }
                ConnectionState::PeerClosed => {
                    if self.read_end == ReadEnd::Open {
                        self.read_end = ReadEnd::CloseNotify;
                    }
                    None
                }
                // Early data is not accepted (`max_early_data_size` is 0), and no other state
                // is expected of a server.
                _ => Some(Err(rustls::Error::General(
                    "unexpected TLS connection state".into(),
                ))),
            };
            self.in_start += discard;
            if self.in_start == self.in_end {
                (self.in_start, self.in_end) = (0, 0);
            }
            match outcome {
                None => {}
                // rustls lets a server send before the client's Finished (0.5-RTT data): the
                // handshake is over only once that has come.
                Some(Ok(Processed::Established)) if self.conn.is_handshaking() => {
                    return Ok(Processed::Handshaking)
                }
                Some(Ok(p)) => return Ok(p),
                Some(Err(e)) => return Err(self.fail(e)),
            }
        }
    }

    /// The connection failed with `e`: remember it, and queue the alert rustls has for it.
    fn fail(&mut self, e: rustls::Error) -> io::Error {
        self.failed = Some(e.clone());
        self.write_closed = true;
        // rustls queues a fatal alert with its error; it is handed out as handshake data.
        loop {
            let UnbufferedStatus { state, .. } = self.conn.process_tls_records(&mut []);
            match state {
                Ok(ConnectionState::EncodeTlsData(mut data)) => {
                    match encode(&mut data, &mut self.outgoing, self.out_start, self.out_end) {
                        Ok((start, end)) => (self.out_start, self.out_end) = (start, end),
                        Err(_) => break,
                    }
                }
                Ok(ConnectionState::TransmitTlsData(transmit)) => transmit.done(),
                _ => break,
            }
        }
        tls_error(e)
    }

    /// Hand out what rustls queued to send (a key update) until it can encrypt application
    /// data; the caller then takes the `WriteTraffic` state with `traffic`.
    fn prepare_write(&mut self) -> io::Result<()> {
        self.check()?;
        if self.write_closed {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        loop {
            let UnbufferedStatus { state, .. } = self.conn.process_tls_records(&mut []);
            match state {
                Ok(ConnectionState::EncodeTlsData(mut data)) => {
                    (self.out_start, self.out_end) =
                        encode(&mut data, &mut self.outgoing, self.out_start, self.out_end)
                            .map_err(tls_error)?;
                }
                Ok(ConnectionState::TransmitTlsData(transmit)) => transmit.done(),
                Ok(ConnectionState::PeerClosed) => {
                    if self.read_end == ReadEnd::Open {
                        self.read_end = ReadEnd::CloseNotify;
                    }
                }
                Ok(ConnectionState::WriteTraffic(_)) => return Ok(()),
                Ok(_) => return Err(io::ErrorKind::NotConnected.into()),
                Err(e) => return Err(tls_error(e)),
            }
        }
    }
}

/// rustls's state for encrypting, once `prepare_write` has handed out what was queued.
fn traffic(
    conn: &mut UnbufferedServerConnection,
) -> io::Result<WriteTraffic<'_, ServerConnectionData>> {
    match conn.process_tls_records(&mut []).state {
        Ok(ConnectionState::WriteTraffic(traffic)) => Ok(traffic),
        _ => Err(io::ErrorKind::NotConnected.into()),
    }
}

/// Copy a record's plaintext to the reader's buffer, and what does not fit to `plain`.
fn deliver(payload: &[u8], to: Option<&mut ReadBuf<'_>>, plain: &mut Vec<u8>, start: &mut usize) {
    let n = match to {
        // Only once `plain` is read: it comes first.
        Some(to) if *start == plain.len() => {
            let n = to.remaining().min(payload.len());
            to.put_slice(&payload[..n]);
            n
        }
        _ => 0,
    };
    if n < payload.len() {
        if *start == plain.len() {
            plain.clear();
            *start = 0;
        }
        plain.extend_from_slice(&payload[n..]);
    }
}

/// Room for `need` more bytes after `end` in `buf` (`buf[start..end]` pending), moving the
/// pending bytes to the front or growing it as needed: the new `(start, end)`.
fn room(buf: &mut Vec<u8>, start: usize, end: usize, need: usize) -> (usize, usize) {
    if buf.len() - end >= need {
        return (start, end);
    }
    if start > 0 {
        buf.copy_within(start..end, 0);
    }
    let end = end - start;
    if buf.len() - end < need {
        if buf.capacity() == 0 {
            *buf = buffers::take(end + need);
        }
        // Initialized once per buffer: rustls writes into slices.
        let len = buf.capacity().max(end + need);
        buf.resize(len, 0);
    }
    (0, end)
}

/// A handshake record (or alert) appended to `out[start..end]`: the new `(start, end)`.
fn encode(
    data: &mut rustls::unbuffered::EncodeTlsData<'_, ServerConnectionData>,
    out: &mut Vec<u8>,
    start: usize,
    end: usize,
) -> Result<(usize, usize), rustls::Error> {
    let (mut start, mut end) = (start, end);
    loop {
        match data.encode(&mut out[end..]) {
            Ok(n) => return Ok((start, end + n)),
            Err(EncodeError::InsufficientSize(InsufficientSizeError { required_size })) => {
                (start, end) = room(out, start, end, required_size);
            }
            Err(EncodeError::AlreadyEncoded) => return Ok((start, end)),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> TlsStream<IO> {
    /// Drive the handshake until it is over and its last flight sent.
    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let processed = match self.process(None) {
                Ok(p) => p,
                Err(e) => {
                    // The alert goes out if the socket takes it at once; the error stands.
                    let _ = self.poll_send(cx);
                    return Poll::Ready(Err(e));
                }
            };
            // Our flight first: the peer waits for it.
            ready!(self.poll_send(cx))?;
            match processed {
                Processed::Established => return Poll::Ready(Ok(())),
                Processed::Handshaking => {
                    if ready!(self.poll_fill(cx))? == 0 {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "tls handshake eof",
                        )));
                    }
                }
            }
        }
    }

    /// Read more ciphertext from the socket: the bytes read (0 at its end).
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let pending = &self.incoming[self.in_start..self.in_end];
        // Room for the rest of the record begun, or a pooled buffer's worth: a whole record
        // always fits, and the pool's 16 KiB buffers are not regrown for requests.
        let need = match pending {
            [_, _, _, hi, lo, ..] => {
                (5 + usize::from(u16::from_be_bytes([*hi, *lo]))).saturating_sub(pending.len())
            }
            _ => READ_SIZE - pending.len(),
        }
        .clamp(1, MAX_RECORD);
        (self.in_start, self.in_end) = room(&mut self.incoming, self.in_start, self.in_end, need);
        let mut buf = ReadBuf::new(&mut self.incoming[self.in_end..]);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut buf))?;
        let n = buf.filled().len();
        self.in_end += n;
        Poll::Ready(Ok(n))
    }

    /// Send the pending ciphertext, all of it.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.out_start < self.out_end {
            let n =
                ready!(Pin::new(&mut self.io)
                    .poll_write(cx, &self.outgoing[self.out_start..self.out_end]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out_start += n;
        }
        (self.out_start, self.out_end) = (0, 0);
        Poll::Ready(Ok(()))
    }

    /// Encrypt `bufs` (whole slices while the batch has room, see `WRITE_SLACK`) into the
    /// outgoing buffer: the plaintext bytes taken.
    fn encrypt(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.prepare_write()?;
        let mut traffic = traffic(&mut self.conn)?;
        let (out, mut start, mut end) = (&mut self.outgoing, self.out_start, self.out_end);
        let mut taken = 0;
        let mut failed = None;
        for b in bufs {
            let n = if taken == 0 {
                b.len().min(WRITE_BATCH)
            } else if taken + b.len() <= WRITE_BATCH + WRITE_SLACK {
                b.len()
            } else {
                break;
            };
            loop {
                match traffic.encrypt(&b[..n], &mut out[end..]) {
                    Ok(written) => {
                        end += written;
                        break;
                    }
                    Err(EncryptError::InsufficientSize(InsufficientSizeError {
                        required_size,
                    })) => (start, end) = room(out, start, end, required_size),
                    Err(e @ EncryptError::EncryptExhausted) => {
                        failed = Some(io::Error::new(io::ErrorKind::BrokenPipe, e));
                        break;
                    }
                }
            }
            if failed.is_some() {
                break;
            }
            taken += n;
            if taken >= WRITE_BATCH {
                break;
            }
        }
        (self.out_start, self.out_end) = (start, end);
        match failed {
            // What was encrypted before is taken; the error comes with the next write.
            Some(e) if taken == 0 => Err(e),
            _ => Ok(taken),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if this.plain_start < this.plain.len() {
                let n = buf.remaining().min(this.plain.len() - this.plain_start);
                buf.put_slice(&this.plain[this.plain_start..this.plain_start + n]);
                this.plain_start += n;
                if this.plain_start == this.plain.len() {
                    this.plain.clear();
                    this.plain_start = 0;
                }
                return Poll::Ready(Ok(()));
            }
            this.check()?;
            match this.read_end {
                ReadEnd::Open => {}
                ReadEnd::CloseNotify => return Poll::Ready(Ok(())),
                ReadEnd::Eof => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "peer closed connection without sending TLS close_notify",
                    )))
                }
            }
            let before = buf.filled().len();
            if let Err(e) = this.process(Some(buf)) {
                let _ = this.poll_send(cx);
                return Poll::Ready(Err(e));
            }
            if buf.filled().len() > before {
                return Poll::Ready(Ok(()));
            }
            if this.read_end != ReadEnd::Open || this.plain_start < this.plain.len() {
                continue;
            }
            // What rustls answered (a key update) leaves when the socket takes it.
            if let Poll::Ready(Err(e)) = this.poll_send(cx) {
                return Poll::Ready(Err(e));
            }
            if ready!(this.poll_fill(cx))? == 0 {
                this.read_end = ReadEnd::Eof;
            }
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(data)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if bufs.iter().all(|b| b.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        // A batch already waits: it goes first.
        if this.out_end - this.out_start >= WRITE_BATCH {
            ready!(this.poll_send(cx))?;
        }
        let taken = this.encrypt(bufs)?;
        // Sent now if the socket takes it; else by the next write or the flush.
        if let Poll::Ready(Err(e)) = this.poll_send(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(taken))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    /// close_notify, then the socket's FIN.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.write_closed {
            // A connection that cannot encrypt any more (failed, or not established) is shut
            // down without a close_notify.
            if this.prepare_write().is_ok() {
                if let Ok(mut traffic) = traffic(&mut this.conn) {
                    let (out, mut start, mut end) =
                        (&mut this.outgoing, this.out_start, this.out_end);
                    loop {
                        match traffic.queue_close_notify(&mut out[end..]) {
                            Ok(n) => break end += n,
                            Err(EncryptError::InsufficientSize(InsufficientSizeError {
                                required_size,
                            })) => (start, end) = room(out, start, end, required_size),
                            Err(EncryptError::EncryptExhausted) => break,
                        }
                    }
                    (this.out_start, this.out_end) = (start, end);
                }
            }
            this.write_closed = true;
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::tls_sim_tests::identity;
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    /// An established pair over an in-memory stream: a rustls client (tokio_rustls) and this
    /// stream.
    async fn pair() -> (
        tokio_rustls::client::TlsStream<DuplexStream>,
        TlsStream<DuplexStream>,
    ) {
        let (identity, roots) = identity();
        let config = Arc::new(identity.rustls_config(&[b"http/1.1"], false).unwrap());
        let (client, server) = tokio::io::duplex(1 << 20);
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let client_cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from("localhost").unwrap();
        let connecting =
            tokio_rustls::TlsConnector::from(Arc::new(client_cfg)).connect(name, client);
        let (client, server) = tokio::join!(connecting, accept(server, config).unwrap());
        (client.unwrap(), server.unwrap())
    }

    /// The server reads a request and answers 100 KiB (several batches of records).
    async fn exchange(
        client: &mut tokio_rustls::client::TlsStream<DuplexStream>,
        server: &mut TlsStream<DuplexStream>,
    ) {
        let answer = vec![b'x'; 100 * 1024];
        client.write_all(b"request").await.unwrap();
        client.flush().await.unwrap();
        let mut request = [0u8; 7];
        server.read_exact(&mut request).await.unwrap();
        assert_eq!(&request, b"request");
        let reading = async {
            let mut got = vec![0u8; answer.len()];
            client.read_exact(&mut got).await.unwrap();
            got
        };
        let writing = async {
            server.write_all(&answer).await.unwrap();
            server.flush().await.unwrap();
        };
        let (got, ()) = tokio::join!(reading, writing);
        assert!(got == answer, "the answer came back changed");
    }

    /// A quiet stream parks (as an idle connection's does) without a buffer: rustls's state
    /// is all that is left, and the stream it resumes as holds none either.
    #[tokio::test]
    async fn a_parked_stream_holds_no_buffer() {
        let (mut client, mut server) = pair().await;
        exchange(&mut client, &mut server).await;
        assert!(server.buffer_capacity() > 0, "the exchange used buffers");
        let parked = server.park().expect("a quiet stream parks");
        assert_eq!(parked.resume().buffer_capacity(), 0);
    }

    /// A parked stream resumes: it serves the next exchange, and closes with a close_notify
    /// that the client reads as the end of the stream.
    #[tokio::test]
    async fn a_parked_stream_serves_again_and_closes_cleanly() {
        let (mut client, mut server) = pair().await;
        exchange(&mut client, &mut server).await;
        let mut server = server.park().expect("a quiet stream parks").resume();
        exchange(&mut client, &mut server).await;
        server.shutdown().await.unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        client.shutdown().await.unwrap();
        assert_eq!(server.read(&mut [0u8; 1]).await.unwrap(), 0, "close_notify");
    }
}
