//! The server's TLS stream, with the buffers owned here: they are held while the connection is
//! busy and given back to the thread's pool (`buffers`) once it turns idle, so that a
//! parked connection keeps its keys and sequence numbers and nothing else (the buffered
//! `ServerConnection` kept a 4 KiB record buffer for ever).
//!
//! The handshake runs on rustls's unbuffered API (`UnbufferedServerConnection`). Once it is
//! over, rustls hands the traffic secrets over (`dangerous_into_kernel_connection`, the path
//! meant for kernel TLS) and keeps only its key schedule, for key updates (`KernelConnection`).
//! Records are then sealed here, encrypted from where the plaintext lies straight into the
//! outgoing buffer (`record_cipher`: rustls's unbuffered `encrypt` copies each record a second
//! time, and aws-lc's TLS sealing keys, which rustls's encrypters use, refuse a first record
//! whose sequence number is not 0, as it is not after the session tickets), and opened in place
//! in the read buffer with rustls's decrypter for the suite.

use super::record_cipher::{self, Algorithm, RecordCipher, NONCE_LEN, TAG_LEN};
use crate::buffers;
use rustls::crypto::cipher::{AeadKey, InboundOpaqueMessage, MessageDecrypter, OutboundChunks};
use rustls::kernel::KernelConnection;
use rustls::server::{ServerConfig, ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, InsufficientSizeError, UnbufferedStatus};
use rustls::{
    AlertDescription, ConnectionTrafficSecrets, ContentType, ProtocolVersion, SupportedCipherSuite,
};
use std::future::Future;
use std::io::{self, IoSlice};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The largest plaintext of a record (RFC 8446 §5.1).
const MAX_FRAGMENT: usize = 1 << 14;
/// The largest record on the wire (RFC 8446 §5.2): the read buffer always has room for one.
const MAX_RECORD: usize = 5 + MAX_FRAGMENT + 256;
/// Ciphertext read at once at least, when no record is begun: the pool's buffer size.
const READ_SIZE: usize = 16 * 1024;
/// Plaintext encrypted per write call, as much as rustls's buffered connection took (its
/// default buffer limit): one write to the socket per 64 KiB.
pub(crate) const WRITE_BATCH: usize = 64 * 1024;
/// Slices of a vectored write taken per call: records are cut across them.
const WRITE_SLICES: usize = 16;
/// Records encrypted under one key before TLS 1.3 moves to the next (a key update), below
/// the suite's confidentiality limit as rustls keeps it.
const KEY_UPDATE_MARGIN: u64 = 1 << 10;

/// A TLS listener's rustls configuration, as this stream needs it: rustls hands the traffic
/// secrets over after the handshake.
pub(crate) fn server_config(mut config: ServerConfig) -> Arc<ServerConfig> {
    config.enable_secret_extraction = true;
    Arc::new(config)
}

/// Start a server-side TLS connection over `io`: the handshake, as a future (each poll a step
/// of it: `handshake_turns` gates them) whose output is the established stream.
/// `config` comes from `server_config`.
pub(crate) fn accept<IO>(
    io: IO,
    config: Arc<ServerConfig>,
) -> Result<Handshake<IO>, rustls::Error> {
    Ok(Handshake {
        hs: Some(Hs {
            io,
            conn: Box::new(UnbufferedServerConnection::new(config)?),
            incoming: Buf::default(),
            outgoing: Vec::new(),
            out_start: 0,
            out_end: 0,
            plain: Vec::new(),
        }),
    })
}

/// A TLS handshake in progress (`accept`). Errors carry rustls's error inside (`InvalidData`),
/// or are the socket's, or `UnexpectedEof`: `tls::failure` classifies them.
pub(crate) struct Handshake<IO> {
    hs: Option<Hs<IO>>,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Future for Handshake<IO> {
    type Output = io::Result<TlsStream<IO>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let hs = this
            .hs
            .as_mut()
            .expect("a handshake is not polled once done");
        ready!(hs.poll_handshake(cx))?;
        let hs = this.hs.take().expect("checked above");
        Poll::Ready(hs.established())
    }
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// A read buffer: `data[start..]` read and not used yet; its spare capacity is room, read into
/// without being initialized first (`read_buf`).
#[derive(Default)]
struct Buf {
    data: Vec<u8>,
    start: usize,
}

impl Buf {
    fn pending(&self) -> &[u8] {
        &self.data[self.start..]
    }

    fn is_empty(&self) -> bool {
        self.start == self.data.len()
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.data.len() {
            self.data.clear();
            self.start = 0;
        }
    }

    /// Read more from `io`: the bytes read (0 at its end).
    fn poll_fill<IO: AsyncRead + Unpin>(
        &mut self,
        io: &mut IO,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        let pending = self.pending();
        // Room for the rest of the record begun, or a pooled buffer's worth: a whole record
        // always fits, and the pool's 16 KiB buffers are not regrown for requests.
        let need = match pending {
            [_, _, _, hi, lo, ..] => {
                (5 + usize::from(u16::from_be_bytes([*hi, *lo]))).saturating_sub(pending.len())
            }
            _ => READ_SIZE - pending.len(),
        }
        .clamp(1, MAX_RECORD);
        if self.data.capacity() - self.data.len() < need {
            if self.data.capacity() == 0 {
                self.data = buffers::take(need);
            } else {
                self.data.drain(..self.start);
                self.start = 0;
                self.data.reserve(need);
            }
        }
        std::pin::pin!(io.read_buf(&mut self.data)).poll(cx)
    }

    /// Give the buffer back if it holds nothing.
    fn release(&mut self) {
        if self.is_empty() {
            give_back(std::mem::take(&mut self.data));
            self.start = 0;
        }
    }
}

/// Give an emptied buffer to the thread's pool, or free it if it grew past the pool's size:
/// shrinking it would copy it.
fn give_back(buf: Vec<u8>) {
    if buf.capacity() <= READ_SIZE {
        buffers::give(buf);
    }
}

/// Write `buf[*sent..]` to `io`, all of it, counting what went in `sent`.
fn poll_write_all<IO: AsyncWrite + Unpin>(
    io: &mut IO,
    cx: &mut Context<'_>,
    buf: &[u8],
    sent: &mut usize,
) -> Poll<io::Result<()>> {
    while *sent < buf.len() {
        let n = ready!(Pin::new(&mut *io).poll_write(cx, &buf[*sent..]))?;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        *sent += n;
    }
    Poll::Ready(Ok(()))
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
        // Initialized once per buffer: rustls encodes into a slice.
        let len = buf.capacity().max(end + need);
        buf.resize(len, 0);
    }
    (0, end)
}

/// The handshake's state: rustls's whole connection, and flat buffers.
struct Hs<IO> {
    io: IO,
    conn: Box<UnbufferedServerConnection>,
    incoming: Buf,
    /// The flights to send: `outgoing[out_start..out_end]`.
    outgoing: Vec<u8>,
    out_start: usize,
    out_end: usize,
    /// Application data that came with the client's last flight.
    plain: Vec<u8>,
}

/// Where processing the handshake records read so far stopped.
enum Processed {
    /// More bytes from the peer are needed.
    Handshaking,
    /// The handshake is over.
    Done,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Hs<IO> {
    /// Drive the handshake until it is over and its last flight sent.
    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let processed = match self.process() {
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
                Processed::Done => return Poll::Ready(Ok(())),
                Processed::Handshaking => {
                    if ready!(self.incoming.poll_fill(&mut self.io, cx))? == 0 {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "tls handshake eof",
                        )));
                    }
                }
            }
        }
    }

    /// Process the records read so far until more are needed or the handshake is over.
    fn process(&mut self) -> io::Result<Processed> {
        loop {
            let Buf { data, start } = &mut self.incoming;
            let UnbufferedStatus { mut discard, state } =
                self.conn.process_tls_records(&mut data[*start..]);
            let state = match state {
                Ok(state) => state,
                Err(e) => {
                    self.incoming.consume(discard);
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
                                self.plain.extend_from_slice(record.payload);
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
                // Sent before the handshake is said over, in order with what follows.
                ConnectionState::TransmitTlsData(transmit) => {
                    transmit.done();
                    None
                }
                ConnectionState::BlockedHandshake => Some(Ok(Processed::Handshaking)),
                ConnectionState::WriteTraffic(_) => Some(Ok(Processed::Done)),
                // Closed or failed before the handshake was over; early data is not accepted
                // (`max_early_data_size` is 0).
                _ => Some(Err(rustls::Error::HandshakeNotComplete)),
            };
            self.incoming.consume(discard);
            match outcome {
                None => {}
                // rustls lets a server send before the client's Finished (0.5-RTT data): the
                // handshake is over only once that has come.
                Some(Ok(Processed::Done)) if self.conn.is_handshaking() => {
                    return Ok(Processed::Handshaking)
                }
                Some(Ok(p)) => return Ok(p),
                Some(Err(e)) => return Err(self.fail(e)),
            }
        }
    }

    /// The handshake failed with `e`: queue the alert rustls has for it.
    fn fail(&mut self, e: rustls::Error) -> io::Error {
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

    /// Send the flights encoded so far, all of them.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let flights = &self.outgoing[..self.out_end];
        ready!(poll_write_all(
            &mut self.io,
            cx,
            flights,
            &mut self.out_start
        ))?;
        (self.out_start, self.out_end) = (0, 0);
        Poll::Ready(Ok(()))
    }

    /// The established stream: rustls's secrets taken over, the handshake's buffers given
    /// back (the first request may be long in coming).
    fn established(self) -> io::Result<TlsStream<IO>> {
        let Hs {
            io,
            conn,
            mut incoming,
            outgoing,
            plain,
            ..
        } = self;
        let h2 = conn.alpn_protocol() == Some(b"h2");
        let (secrets, kernel) = conn.dangerous_into_kernel_connection().map_err(tls_error)?;
        let suite = kernel.negotiated_cipher_suite();
        let (tx_seq, tx) = secrets.tx;
        let (rx_seq, rx) = secrets.rx;
        let tls13 = kernel.protocol_version() == ProtocolVersion::TLSv1_3;
        let traffic = Traffic {
            tx: sealer(tx, tls13)?,
            tx_seq,
            rx: decrypter(suite, rx)?,
            rx_seq,
            limit: records_per_key(suite),
            kernel,
        };
        buffers::give(outgoing);
        incoming.release();
        Ok(TlsStream {
            io,
            traffic: Box::new(traffic),
            incoming,
            out: Vec::new(),
            out_sent: 0,
            plain_start: 0,
            plain,
            read_end: ReadEnd::Open,
            write_closed: false,
            failed: None,
            h2,
        })
    }
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

/// Records sealed under one key before ours moves on (TLS 1.3) or the connection fails (TLS
/// 1.2), below the suite's confidentiality limit.
fn records_per_key(suite: SupportedCipherSuite) -> u64 {
    match suite {
        SupportedCipherSuite::Tls13(s) => &s.common,
        SupportedCipherSuite::Tls12(s) => &s.common,
    }
    .confidentiality_limit
    .saturating_sub(KEY_UPDATE_MARGIN)
}

/// A traffic secret's key and IV.
fn key_iv(
    secrets: ConnectionTrafficSecrets,
) -> io::Result<(
    rustls::crypto::cipher::AeadKey,
    rustls::crypto::cipher::Iv,
    bool,
)> {
    match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv }
        | ConnectionTrafficSecrets::Aes256Gcm { key, iv } => Ok((key, iv, false)),
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => Ok((key, iv, true)),
        _ => Err(tls_error(rustls::Error::General(
            "unsupported record protection".into(),
        ))),
    }
}

/// The record sealer for a traffic secret.
fn sealer(secrets: ConnectionTrafficSecrets, tls13: bool) -> io::Result<Sealer> {
    let alg = match &secrets {
        ConnectionTrafficSecrets::Aes128Gcm { .. } => Algorithm::Aes128Gcm,
        ConnectionTrafficSecrets::Aes256Gcm { .. } => Algorithm::Aes256Gcm,
        _ => Algorithm::Chacha20Poly1305,
    };
    let (key, iv, _) = key_iv(secrets)?;
    let cipher = RecordCipher::new(alg, key.as_ref())
        .map_err(|_| tls_error(rustls::Error::General("bad traffic key".into())))?;
    let mut nonce_base = [0u8; NONCE_LEN];
    nonce_base.copy_from_slice(iv.as_ref());
    Ok(Sealer {
        cipher: Some(cipher),
        key: Box::new(key),
        alg,
        iv: nonce_base,
        tls13,
    })
}

/// The record decrypter of `suite` for a traffic secret (see `encrypter`).
fn decrypter(
    suite: SupportedCipherSuite,
    secrets: ConnectionTrafficSecrets,
) -> io::Result<Box<dyn MessageDecrypter>> {
    let (key, iv, chacha) = key_iv(secrets)?;
    Ok(match suite {
        SupportedCipherSuite::Tls13(s) => s.aead_alg.decrypter(key, iv),
        SupportedCipherSuite::Tls12(s) if chacha => s.aead_alg.decrypter(key, iv.as_ref()),
        SupportedCipherSuite::Tls12(s) => s.aead_alg.decrypter(key, &iv.as_ref()[..4]),
    })
}

/// Record protection for what this server sends (RFC 8446 §5.2, RFC 5288, RFC 7905): the
/// per-record nonce is the IV XOR the sequence number (TLS 1.2's AES-GCM sends its last 8
/// bytes as the explicit nonce, as rustls does).
struct Sealer {
    /// Dropped while the connection is parked (`sleep`), made again from `key` for the next
    /// record: aws-lc's context holds the expanded key and GHASH's table, the key 40 bytes.
    cipher: Option<RecordCipher>,
    key: Box<AeadKey>,
    alg: Algorithm,
    iv: [u8; NONCE_LEN],
    tls13: bool,
}

/// The slices of `payload`, in order.
fn pieces<'a>(payload: &OutboundChunks<'a>) -> impl Iterator<Item = &'a [u8]> {
    let (single, chunks, start, end): (_, &[&'a [u8]], _, _) = match *payload {
        OutboundChunks::Single(s) => (Some(s), &[], 0, 0),
        OutboundChunks::Multiple { chunks, start, end } => (None, chunks, start, end),
    };
    let mut at = 0;
    single.into_iter().chain(chunks.iter().filter_map(move |c| {
        let (from, to) = (at.max(start), (at + c.len()).min(end));
        let piece = (from < to).then(|| &c[from - at..to - at]);
        at += c.len();
        piece
    }))
}

impl Sealer {
    /// One record of `typ` with `payload` (at most `MAX_FRAGMENT` bytes), appended to `out`:
    /// the plaintext encrypted from where it lies.
    fn seal(
        &mut self,
        seq: u64,
        typ: ContentType,
        payload: &OutboundChunks<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), rustls::Error> {
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
            *n ^= s;
        }
        let plain = payload.len() + usize::from(self.tls13);
        let explicit_nonce = self.explicit_nonce();
        let (outer, len) = match (self.tls13, explicit_nonce) {
            (true, _) => (ContentType::ApplicationData, plain + TAG_LEN),
            (false, true) => (typ, 8 + plain + TAG_LEN),
            (false, false) => (typ, plain + TAG_LEN),
        };
        let header = [u8::from(outer), 3, 3, (len >> 8) as u8, len as u8];
        out.reserve(5 + len);
        let start = out.len();
        out.extend_from_slice(&header);
        if explicit_nonce {
            out.extend_from_slice(&nonce[4..]);
        }
        let typ = [u8::from(typ)];
        let tls13 = self.tls13;
        let sealed = self.cipher().and_then(|cipher| {
            if tls13 {
                let pieces = pieces(payload).chain([&typ[..]]);
                cipher.seal_append(&nonce, &header, pieces, plain, out)
            } else {
                let mut aad = [0u8; 13];
                aad[..8].copy_from_slice(&seq.to_be_bytes());
                aad[8..11].copy_from_slice(&header[..3]);
                aad[11..].copy_from_slice(&(payload.len() as u16).to_be_bytes());
                cipher.seal_append(&nonce, &aad, pieces(payload), plain, out)
            }
        });
        sealed.map_err(|record_cipher::SealError| {
            out.truncate(start);
            rustls::Error::EncryptError
        })
    }

    /// TLS 1.2's AES-GCM sends the nonce's last 8 bytes before each record (RFC 5288).
    fn explicit_nonce(&self) -> bool {
        !self.tls13 && !matches!(self.alg, Algorithm::Chacha20Poly1305)
    }

    /// The cipher, made again from the key after `sleep`.
    fn cipher(&mut self) -> Result<&mut RecordCipher, record_cipher::SealError> {
        match self.cipher {
            Some(ref mut cipher) => Ok(cipher),
            None => Ok(self
                .cipher
                .insert(RecordCipher::new(self.alg, (*self.key).as_ref())?)),
        }
    }

    /// Drop the cipher's context until the next record (a parked connection).
    fn sleep(&mut self) {
        self.cipher = None;
    }
}

/// An established connection's record protection: rustls's key schedule (`kernel`, for key
/// updates), the current keys and sequence numbers. 632 bytes: parked with an HTTP/2
/// connection's `Resting` (128), it fills jemalloc's 768-byte size class (`workers::H2Idle`),
/// where a field more would move it to the 896-byte one.
struct Traffic {
    kernel: KernelConnection<ServerConnectionData>,
    tx: Sealer,
    tx_seq: u64,
    rx: Box<dyn MessageDecrypter>,
    rx_seq: u64,
    /// `tx_seq` at which our key moves on (TLS 1.3) or the connection fails (TLS 1.2):
    /// `records_per_key`, or 0 once the peer asked for a key update (before our next record).
    limit: u64,
}

impl Traffic {
    /// One record of `typ` with `payload` (at most `MAX_FRAGMENT` bytes), appended to `out`;
    /// under TLS 1.3 the keys move on (a key update before it) once `limit` records went or
    /// the peer asked.
    fn seal(
        &mut self,
        typ: ContentType,
        payload: OutboundChunks<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), rustls::Error> {
        if self.tx_seq >= self.limit {
            if !self.tx.tls13 {
                return Err(rustls::Error::EncryptError);
            }
            // KeyUpdate, update_not_requested (RFC 8446 §4.6.3), under the old key.
            let update: &[u8] = &[24, 0, 0, 1, 0];
            self.tx
                .seal(self.tx_seq, ContentType::Handshake, &update.into(), out)?;
            let (seq, secrets) = self.kernel.update_tx_secret()?;
            self.tx = sealer(secrets, true).map_err(|_| rustls::Error::EncryptError)?;
            self.tx_seq = seq;
            self.limit = records_per_key(self.kernel.negotiated_cipher_suite());
        }
        self.tx.seal(self.tx_seq, typ, &payload, out)?;
        self.tx_seq += 1;
        Ok(())
    }
}

/// A TLS connection after its handshake.
pub(crate) struct TlsStream<IO> {
    io: IO,
    /// Boxed: moving a stream (into a task, into the parking lot) moves a pointer.
    traffic: Box<Traffic>,
    /// Ciphertext read and not decrypted yet.
    incoming: Buf,
    /// Records to send: `out[out_sent..]`.
    out: Vec<u8>,
    out_sent: usize,
    /// Plaintext decrypted and not read yet (a record longer than the reader's buffer, or data
    /// that came with the handshake): `plain[plain_start..]`.
    plain: Vec<u8>,
    plain_start: usize,
    read_end: ReadEnd,
    /// Our close_notify is queued (or the connection failed): nothing more is encrypted.
    write_closed: bool,
    /// The connection failed: the error every later call returns.
    failed: Option<rustls::Error>,
    /// ALPN chose HTTP/2.
    h2: bool,
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

/// A quiet stream put away while its connection is parked: the record protection, inline (one
/// allocation for the whole parked session), and nothing else: what TLS runs over is made again
/// around the socket (`TlsInner::attach`), and the parker knows which protocol ALPN chose.
pub(crate) struct Parked<IO> {
    traffic: Traffic,
    io: PhantomData<fn() -> IO>,
}

impl<IO> Parked<IO> {
    /// The stream again, over `io` (its IO made again), `h2` if ALPN chose HTTP/2.
    pub(crate) fn resume(self, io: IO, h2: bool) -> TlsStream<IO> {
        TlsStream {
            io,
            traffic: Box::new(self.traffic),
            incoming: Buf::default(),
            out: Vec::new(),
            out_sent: 0,
            plain: Vec::new(),
            plain_start: 0,
            read_end: ReadEnd::Open,
            write_closed: false,
            failed: None,
            h2,
        }
    }
}

impl<IO> TlsStream<IO> {
    pub(crate) fn get_ref(&self) -> &IO {
        &self.io
    }

    /// ALPN chose HTTP/2.
    pub(crate) fn is_h2(&self) -> bool {
        self.h2
    }

    /// Nothing to read or to send is held here, and the connection is open: its next bytes
    /// come from the socket.
    pub(crate) fn is_quiet(&self) -> bool {
        self.incoming.is_empty()
            && self.out.is_empty()
            && self.plain_start == self.plain.len()
            && self.read_end == ReadEnd::Open
            && !self.write_closed
    }

    /// Give the buffers that hold nothing back (to the thread's pool, or free them).
    pub(crate) fn release(&mut self) {
        self.incoming.release();
        if self.out.is_empty() {
            give_back(std::mem::take(&mut self.out));
        }
        if self.plain_start == self.plain.len() {
            self.plain = Vec::new();
            self.plain_start = 0;
        }
    }

    /// Put a quiet stream (`is_quiet`) away for its connection to be parked: its IO, to take
    /// the socket out of, and the rest (`Parked`); `None` (the stream dropped) if it is not
    /// quiet.
    pub(crate) fn park(mut self) -> Option<(IO, Parked<IO>)> {
        if !self.is_quiet() {
            return None;
        }
        self.release();
        self.traffic.tx.sleep();
        let parked = Parked {
            traffic: *self.traffic,
            io: PhantomData,
        };
        Some((self.io, parked))
    }

    /// The bytes of buffer this stream holds (the record protection aside).
    #[cfg(test)]
    pub(crate) fn buffer_capacity(&self) -> usize {
        self.incoming.data.capacity() + self.out.capacity() + self.plain.capacity()
    }

    fn check(&self) -> io::Result<()> {
        match &self.failed {
            Some(e) => Err(tls_error(e.clone())),
            None => Ok(()),
        }
    }

    /// The connection failed with `e`: remember it, and queue a fatal `alert` unless the
    /// peer's alert ended it.
    fn fail(&mut self, e: rustls::Error, alert: Option<AlertDescription>) -> io::Error {
        if let (Some(alert), false) = (alert, self.write_closed) {
            let payload: &[u8] = &[2, u8::from(alert)];
            let _ = self
                .traffic
                .seal(ContentType::Alert, payload.into(), &mut self.out);
        }
        self.write_closed = true;
        self.failed = Some(e.clone());
        tls_error(e)
    }

    /// Decrypt the whole records read so far: application data to `to` while it has room, the
    /// rest to `plain`; alerts and key updates handled. Stops after a close_notify.
    fn decrypt(&mut self, mut to: Option<&mut ReadBuf<'_>>) -> io::Result<()> {
        while self.read_end == ReadEnd::Open {
            let pending = self.incoming.pending();
            let available = pending.len();
            let [typ, v1, v2, hi, lo, ..] = *pending else {
                return Ok(());
            };
            let len = usize::from(u16::from_be_bytes([hi, lo]));
            if len > MAX_RECORD - 5 {
                return Err(self.fail(
                    rustls::Error::PeerSentOversizedRecord,
                    Some(AlertDescription::RecordOverflow),
                ));
            }
            if available < 5 + len {
                return Ok(());
            }
            let (start, traffic) = (self.incoming.start, &mut self.traffic);
            let record = &mut self.incoming.data[start + 5..start + 5 + len];
            let msg = InboundOpaqueMessage::new(
                ContentType::from(typ),
                ProtocolVersion::from(u16::from_be_bytes([v1, v2])),
                record,
            );
            let plain = match traffic.rx.decrypt(msg, traffic.rx_seq) {
                Ok(plain) => plain,
                Err(e) => {
                    self.incoming.consume(5 + len);
                    return Err(self.fail(e, Some(AlertDescription::BadRecordMac)));
                }
            };
            traffic.rx_seq += 1;
            let outcome = match (plain.typ, plain.payload) {
                (_, payload) if payload.len() > MAX_FRAGMENT => Err((
                    rustls::Error::PeerSentOversizedRecord,
                    Some(AlertDescription::RecordOverflow),
                )),
                (ContentType::ApplicationData, payload) => {
                    deliver(
                        payload,
                        to.as_deref_mut(),
                        &mut self.plain,
                        &mut self.plain_start,
                    );
                    Ok(None)
                }
                (ContentType::Alert, [_, 0]) => {
                    self.read_end = ReadEnd::CloseNotify;
                    Ok(None)
                }
                // user_canceled changes nothing (a close_notify follows); any other alert ends
                // the connection, as rustls has it.
                (ContentType::Alert, [1, 90]) => Ok(None),
                (ContentType::Alert, [_, desc]) => Err((
                    rustls::Error::AlertReceived(AlertDescription::from(*desc)),
                    None,
                )),
                // KeyUpdate (RFC 8446 §4.6.3): the peer's next records are under its next key;
                // if it asks, ours move on too.
                (ContentType::Handshake, &[24, 0, 0, 1, requested @ (0 | 1)])
                    if traffic.tx.tls13 =>
                {
                    Ok(Some(requested == 1))
                }
                _ => Err((
                    rustls::Error::General("unexpected message after the handshake".into()),
                    Some(AlertDescription::UnexpectedMessage),
                )),
            };
            self.incoming.consume(5 + len);
            match outcome {
                Ok(None) => {}
                Ok(Some(requested)) => {
                    if let Err(e) = self.key_update(requested) {
                        return Err(self.fail(e, Some(AlertDescription::InternalError)));
                    }
                }
                Err((e, alert)) => return Err(self.fail(e, alert)),
            }
        }
        Ok(())
    }

    /// The peer's key update: its next key; and ours, after a KeyUpdate of our own, if asked.
    fn key_update(&mut self, requested: bool) -> Result<(), rustls::Error> {
        let traffic = &mut self.traffic;
        let (seq, secrets) = traffic.kernel.update_rx_secret()?;
        let suite = traffic.kernel.negotiated_cipher_suite();
        traffic.rx = decrypter(suite, secrets).map_err(|_| rustls::Error::DecryptError)?;
        traffic.rx_seq = seq;
        // Answered before our next record (RFC 8446 §4.6.3): `seal` sends our KeyUpdate first.
        if requested {
            traffic.limit = 0;
        }
        Ok(())
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

impl<IO: AsyncRead + AsyncWrite + Unpin> TlsStream<IO> {
    /// Send the records sealed so far, all of them.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(poll_write_all(
            &mut self.io,
            cx,
            &self.out,
            &mut self.out_sent
        ))?;
        self.out.clear();
        self.out_sent = 0;
        Poll::Ready(Ok(()))
    }

    /// Seal `bufs` (up to `WRITE_BATCH` bytes, records cut across slices) into the outgoing
    /// buffer: the plaintext bytes taken.
    fn encrypt(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.check()?;
        if self.write_closed {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let mut slices: [&[u8]; WRITE_SLICES] = [&[]; WRITE_SLICES];
        let (mut count, mut taken) = (0, 0);
        for b in bufs.iter().filter(|b| !b.is_empty()).take(WRITE_SLICES) {
            let n = b.len().min(WRITE_BATCH - taken);
            slices[count] = &b[..n];
            count += 1;
            taken += n;
            if taken == WRITE_BATCH {
                break;
            }
        }
        // Room for the whole batch at once: a buffer grown record by record is copied as it
        // grows (2.4% of the server's CPU at 256 KiB).
        let need = taken + taken.div_ceil(MAX_FRAGMENT) * 64;
        if self.out.capacity() - self.out.len() < need {
            if self.out.is_empty() {
                give_back(std::mem::replace(&mut self.out, buffers::take(need)));
            } else {
                self.out.reserve(need);
            }
        }
        let mut rest = OutboundChunks::new(&slices[..count]);
        while !rest.is_empty() {
            let (record, tail) = rest.split_at(MAX_FRAGMENT);
            if let Err(e) = self
                .traffic
                .seal(ContentType::ApplicationData, record, &mut self.out)
            {
                return Err(self.fail(e, None));
            }
            rest = tail;
        }
        Ok(taken)
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
            let decrypted = this.decrypt(Some(buf));
            // What this connection has to say (an alert, a key update) leaves if the socket
            // takes it at once.
            if !this.out.is_empty() {
                if let (Poll::Ready(Err(e)), Ok(())) = (this.poll_send(cx), &decrypted) {
                    return Poll::Ready(Err(e));
                }
            }
            decrypted?;
            if buf.filled().len() > before {
                return Poll::Ready(Ok(()));
            }
            if this.read_end != ReadEnd::Open || this.plain_start < this.plain.len() {
                continue;
            }
            match this.incoming.poll_fill(&mut this.io, cx) {
                // Waiting for the peer: an idle connection (HTTP/2's, or HTTP/1's before it
                // parks) holds no buffer that is empty.
                Poll::Pending => {
                    this.release();
                    return Poll::Pending;
                }
                Poll::Ready(n) => {
                    if n? == 0 {
                        this.read_end = ReadEnd::Eof;
                    }
                }
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
        if !this.out.is_empty() {
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
            let payload: &[u8] = &[1, 0];
            // A connection that cannot encrypt any more is shut down without one.
            let _ = this
                .traffic
                .seal(ContentType::Alert, payload.into(), &mut this.out);
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
        pair_with(None).await
    }

    /// `pair`, the client offering only `suite` if given.
    async fn pair_with(
        suite: Option<rustls::SupportedCipherSuite>,
    ) -> (
        tokio_rustls::client::TlsStream<DuplexStream>,
        TlsStream<DuplexStream>,
    ) {
        let (identity, roots) = identity();
        let config = server_config(identity.rustls_config(&[b"http/1.1"], false).unwrap());
        let (client, server) = tokio::io::duplex(1 << 20);
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        if let Some(suite) = suite {
            provider.cipher_suites = vec![suite];
        }
        let versions = match suite {
            Some(suite) => vec![suite.version()],
            None => vec![&rustls::version::TLS13, &rustls::version::TLS12],
        };
        let client_cfg = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&versions)
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
        let (io, parked) = server.park().expect("a quiet stream parks");
        assert_eq!(parked.resume(io, false).buffer_capacity(), 0);
    }

    /// A stream waiting for the peer (an HTTP/2 connection's, which does not park) holds no
    /// buffer either.
    #[tokio::test]
    async fn a_stream_waiting_to_read_holds_no_buffer() {
        let (mut client, mut server) = pair().await;
        exchange(&mut client, &mut server).await;
        assert!(server.buffer_capacity() > 0, "the exchange used buffers");
        std::future::poll_fn(|cx| {
            let mut byte = [0u8; 1];
            let read = Pin::new(&mut server).poll_read(cx, &mut ReadBuf::new(&mut byte));
            assert!(read.is_pending(), "nothing was sent");
            Poll::Ready(())
        })
        .await;
        assert_eq!(server.buffer_capacity(), 0);
    }

    /// A parked stream resumes: it serves the next exchange, and closes with a close_notify
    /// that the client reads as the end of the stream.
    #[tokio::test]
    async fn a_parked_stream_serves_again_and_closes_cleanly() {
        let (mut client, mut server) = pair().await;
        exchange(&mut client, &mut server).await;
        let (io, parked) = server.park().expect("a quiet stream parks");
        let mut server = parked.resume(io, false);
        exchange(&mut client, &mut server).await;
        server.shutdown().await.unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        client.shutdown().await.unwrap();
        assert_eq!(server.read(&mut [0u8; 1]).await.unwrap(), 0, "close_notify");
    }

    /// Every suite the provider has (TLS 1.3 and 1.2; AES-GCM, whose TLS 1.2 records carry an
    /// explicit nonce, and ChaCha20-Poly1305) carries data both ways and closes cleanly.
    #[tokio::test]
    async fn every_suite_carries_data_both_ways() {
        for suite in rustls::crypto::aws_lc_rs::default_provider().cipher_suites {
            let (mut client, mut server) = pair_with(Some(suite)).await;
            assert_eq!(client.get_ref().1.negotiated_cipher_suite(), Some(suite));
            exchange(&mut client, &mut server).await;
            exchange(&mut client, &mut server).await;
            server.shutdown().await.unwrap();
            let mut rest = Vec::new();
            client.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty(), "{suite:?}");
        }
    }

    /// A client's key update (asking for ours): the server reads under the client's next key
    /// and answers under its own next one.
    #[tokio::test]
    async fn a_key_update_is_followed_both_ways() {
        let (mut client, mut server) = pair().await;
        exchange(&mut client, &mut server).await;
        let before = server.traffic.tx_seq;
        client.get_mut().1.refresh_traffic_keys().unwrap();
        exchange(&mut client, &mut server).await;
        // Our sequence numbers started again under the next key.
        assert!(
            server.traffic.tx_seq < before,
            "{before} records, no key update"
        );
        exchange(&mut client, &mut server).await;
    }
}
