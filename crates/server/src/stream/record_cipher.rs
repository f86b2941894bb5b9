//! Record sealing with aws-lc's streaming AEAD ciphers (`EVP_CIPHER`, through aws-lc-sys): a
//! record's plaintext pieces (frame headers, body slices where they lie, the TLS 1.3 content
//! type) are encrypted straight into the outgoing buffer. aws-lc-rs's AEAD keys seal in place
//! only, so each record's plaintext was first copied into the buffer: that copy was 6.5% of the
//! server's CPU on HTTP/2 over TLS with 256 KiB responses (docs/PERFORMANCE.md, "Round 3 (issue
//! 41), closing").
//!
//! All the unsafe code of record sealing is here: the context is owned, used only through
//! `&mut self`, and every call's lengths are checked before it is made.

use aws_lc_sys as sys;
use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};

/// The nonce's length: the IV of every TLS AEAD suite.
pub(crate) const NONCE_LEN: usize = 12;
/// The tag's length: every TLS AEAD suite's.
pub(crate) const TAG_LEN: usize = 16;

/// The AEAD ciphers of TLS's suites.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Algorithm {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

/// aws-lc refused a call (a key of the wrong length, an allocation that failed).
#[derive(Debug)]
pub(crate) struct SealError;

/// A key ready to seal records, each under its own nonce.
pub(crate) struct RecordCipher(NonNull<sys::EVP_CIPHER_CTX>);

// SAFETY: the context is aws-lc's heap object, owned here and reached only through `&mut self`:
// it may move between threads.
unsafe impl Send for RecordCipher {}

impl Drop for RecordCipher {
    fn drop(&mut self) {
        // SAFETY: allocated by `EVP_CIPHER_CTX_new` in `new`, freed once; the key is cleared.
        unsafe { sys::EVP_CIPHER_CTX_free(self.0.as_ptr()) }
    }
}

fn check(ret: c_int) -> Result<(), SealError> {
    if ret == 1 {
        Ok(())
    } else {
        Err(SealError)
    }
}

impl RecordCipher {
    pub(crate) fn new(alg: Algorithm, key: &[u8]) -> Result<Self, SealError> {
        // SAFETY: the cipher functions return pointers to aws-lc's static descriptions.
        let (cipher, key_len) = unsafe {
            match alg {
                Algorithm::Aes128Gcm => (sys::EVP_aes_128_gcm(), 16),
                Algorithm::Aes256Gcm => (sys::EVP_aes_256_gcm(), 32),
                Algorithm::Chacha20Poly1305 => (sys::EVP_chacha20_poly1305(), 32),
            }
        };
        if key.len() != key_len {
            return Err(SealError);
        }
        // SAFETY: a new context, freed by `Drop` from here on.
        let this = Self(NonNull::new(unsafe { sys::EVP_CIPHER_CTX_new() }).ok_or(SealError)?);
        // The key once (its schedule, GCM's table); the nonce per record. Both ciphers' default
        // IV length is `NONCE_LEN`.
        // SAFETY: `key` holds the cipher's key length, checked above.
        check(unsafe {
            sys::EVP_EncryptInit_ex(
                this.0.as_ptr(),
                cipher,
                ptr::null_mut(),
                key.as_ptr(),
                ptr::null(),
            )
        })?;
        Ok(this)
    }

    /// Append to `out` the ciphertext of `pieces` (in order, `len` bytes in all), sealed under
    /// `nonce` with `aad`, then the tag.
    pub(crate) fn seal_append<'a>(
        &mut self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        pieces: impl IntoIterator<Item = &'a [u8]>,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), SealError> {
        let ctx = self.0.as_ptr();
        out.reserve(len + TAG_LEN);
        let spare = &mut out.spare_capacity_mut()[..len + TAG_LEN];
        let mut at = 0;
        let mut n: c_int = 0;
        // SAFETY: the context is ours and keyed; each write goes to `spare[at..]`, whose room
        // is checked first; an AEAD cipher's update writes exactly its input's length (checked
        // after), and its final call writes nothing (the tag's room follows all the same).
        unsafe {
            check(sys::EVP_EncryptInit_ex(
                ctx,
                ptr::null(),
                ptr::null_mut(),
                ptr::null(),
                nonce.as_ptr(),
            ))?;
            // A null output: the input is additional data.
            check(sys::EVP_EncryptUpdate(
                ctx,
                ptr::null_mut(),
                &mut n,
                aad.as_ptr(),
                c_int::try_from(aad.len()).map_err(|_| SealError)?,
            ))?;
            for piece in pieces.into_iter().filter(|p| !p.is_empty()) {
                if piece.len() > len - at {
                    return Err(SealError);
                }
                check(sys::EVP_EncryptUpdate(
                    ctx,
                    spare[at..].as_mut_ptr().cast(),
                    &mut n,
                    piece.as_ptr(),
                    c_int::try_from(piece.len()).map_err(|_| SealError)?,
                ))?;
                if usize::try_from(n) != Ok(piece.len()) {
                    return Err(SealError);
                }
                at += piece.len();
            }
            if at != len {
                return Err(SealError);
            }
            check(sys::EVP_EncryptFinal_ex(
                ctx,
                spare[at..].as_mut_ptr().cast(),
                &mut n,
            ))?;
            let tag: &mut [MaybeUninit<u8>] = &mut spare[len..];
            check(sys::EVP_CIPHER_CTX_ctrl(
                ctx,
                sys::EVP_CTRL_AEAD_GET_TAG,
                TAG_LEN as c_int,
                tag.as_mut_ptr().cast(),
            ))?;
            out.set_len(out.len() + len + TAG_LEN);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::aead::{
        Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305,
    };

    /// Sealed in pieces here, the record opens with aws-lc-rs's one-shot AEAD, for each suite's
    /// cipher and for pieces cut at every kind of place (empty, one byte, across blocks).
    #[test]
    fn records_sealed_in_pieces_open_with_the_one_shot_aead() {
        let plain: Vec<u8> = (0..40_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let cuts: &[&[usize]] = &[
            &[],
            &[0],
            &[1],
            &[9, 9 + 16_375],
            &[15, 16, 17, 4_000, 39_999],
        ];
        for (alg, open_alg, key_len) in [
            (Algorithm::Aes128Gcm, &AES_128_GCM, 16),
            (Algorithm::Aes256Gcm, &AES_256_GCM, 32),
            (Algorithm::Chacha20Poly1305, &CHACHA20_POLY1305, 32),
        ] {
            let key: Vec<u8> = (0..key_len as u8).collect();
            let mut cipher = RecordCipher::new(alg, &key).unwrap();
            for (i, cut) in cuts.iter().enumerate() {
                let nonce = [i as u8; NONCE_LEN];
                let mut bounds = vec![0];
                bounds.extend_from_slice(cut);
                bounds.push(plain.len());
                let pieces = bounds.windows(2).map(|w| &plain[w[0]..w[1]]);
                let mut out = b"prefix".to_vec();
                cipher
                    .seal_append(&nonce, b"aad", pieces, plain.len(), &mut out)
                    .unwrap();
                assert_eq!(out.len(), 6 + plain.len() + TAG_LEN);
                let opener = LessSafeKey::new(UnboundKey::new(open_alg, &key).unwrap());
                let opened = opener
                    .open_in_place(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(b"aad"),
                        &mut out[6..],
                    )
                    .unwrap_or_else(|_| panic!("{alg:?}, cuts {cut:?}: does not open"));
                assert_eq!(opened, &plain[..], "{alg:?}, cuts {cut:?}");
            }
        }
    }

    #[test]
    fn pieces_longer_or_shorter_than_said_are_refused() {
        let mut cipher = RecordCipher::new(Algorithm::Aes128Gcm, &[1; 16]).unwrap();
        let mut out = Vec::new();
        let nonce = [0; NONCE_LEN];
        assert!(cipher
            .seal_append(&nonce, b"", [&b"abc"[..]], 2, &mut out)
            .is_err());
        assert!(cipher
            .seal_append(&nonce, b"", [&b"abc"[..]], 4, &mut out)
            .is_err());
        assert!(out.is_empty());
        assert!(RecordCipher::new(Algorithm::Aes256Gcm, &[1; 16]).is_err());
    }
}
