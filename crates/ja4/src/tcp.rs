//! The ClientHello at the start of a TLS-over-TCP stream: it may arrive in pieces and may span
//! several handshake records (a client may fragment it; post-quantum key shares make it large).

use crate::{Error, MAX_CLIENT_HELLO};
use std::borrow::Cow;
use tls_parser::TlsRecordType;

/// What the bytes received so far hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Hello<'a> {
    /// Not complete yet: read more (the caller bounds how much and how long).
    Incomplete,
    /// The whole ClientHello handshake message (borrowed when it sits in one record).
    Complete(Cow<'a, [u8]>),
}

/// Look for a complete ClientHello at the start of `stream` (the first bytes a client sent).
/// Errors: the stream does not start with handshake records, their first message is not a
/// ClientHello, or it is larger than [`MAX_CLIENT_HELLO`].
pub fn client_hello(stream: &[u8]) -> Result<Hello<'_>, Error> {
    let mut rest = stream;
    let mut joined: Option<Vec<u8>> = None;
    let mut first: &[u8] = &[];
    loop {
        if rest.is_empty() {
            return Ok(Hello::Incomplete);
        }
        // Decide on the record type as soon as its first byte is here, not once it is whole.
        if rest[0] != TlsRecordType::Handshake.0 {
            return Err(Error::NotHandshake);
        }
        // Wait for the whole record (5-byte header, then its length) before parsing it.
        if rest.len() < 5 || rest.len() < 5 + usize::from(u16::from_be_bytes([rest[3], rest[4]])) {
            return Ok(Hello::Incomplete);
        }
        let (next, record) =
            tls_parser::parse_tls_raw_record(rest).map_err(|_| Error::NotHandshake)?;
        rest = next;
        if record.hdr.version.0 >> 8 != 3 {
            return Err(Error::NotHandshake);
        }
        let have: &[u8] = match &mut joined {
            None if first.is_empty() => {
                first = record.data;
                first
            }
            None => {
                let mut v = first.to_vec();
                v.extend_from_slice(record.data);
                joined.insert(v)
            }
            Some(v) => {
                v.extend_from_slice(record.data);
                v
            }
        };
        if let Some(&ty) = have.first() {
            if ty != 1 {
                return Err(Error::NotClientHello);
            }
        }
        if have.len() < 4 {
            continue;
        }
        let total =
            4 + (usize::from(have[1]) << 16 | usize::from(have[2]) << 8 | usize::from(have[3]));
        if total > MAX_CLIENT_HELLO {
            return Err(Error::TooLarge);
        }
        if have.len() >= total {
            return Ok(Hello::Complete(match joined {
                Some(mut v) => {
                    v.truncate(total);
                    Cow::Owned(v)
                }
                None => Cow::Borrowed(&first[..total]),
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(payload: &[u8]) -> Vec<u8> {
        let mut r = vec![
            0x16,
            0x03,
            0x01,
            (payload.len() >> 8) as u8,
            payload.len() as u8,
        ];
        r.extend_from_slice(payload);
        r
    }

    #[test]
    fn one_record_byte_by_byte() {
        let msg = [1u8, 0, 0, 3, 0xaa, 0xbb, 0xcc];
        let stream = record(&msg);
        for n in 0..stream.len() {
            assert_eq!(client_hello(&stream[..n]), Ok(Hello::Incomplete), "{n}");
        }
        assert_eq!(
            client_hello(&stream),
            Ok(Hello::Complete(Cow::Borrowed(&msg[..])))
        );
    }

    #[test]
    fn fragmented_over_records() {
        let msg = [1u8, 0, 0, 3, 0xaa, 0xbb, 0xcc];
        let mut stream = record(&msg[..2]);
        stream.extend(record(&msg[2..5]));
        stream.extend(record(&msg[5..]));
        assert_eq!(
            client_hello(&stream),
            Ok(Hello::Complete(Cow::Owned(msg.to_vec())))
        );
    }

    #[test]
    fn rejections() {
        assert_eq!(
            client_hello(b"GET / HTTP/1.1\r\n"),
            Err(Error::NotHandshake)
        );
        assert_eq!(
            client_hello(&record(&[2, 0, 0, 0])),
            Err(Error::NotClientHello)
        );
        assert_eq!(client_hello(&record(&[1, 1, 0, 0])), Err(Error::TooLarge));
        assert_eq!(
            client_hello(&[0x16, 0x07, 0x01, 0, 1, 1]),
            Err(Error::NotHandshake)
        );
    }
}
