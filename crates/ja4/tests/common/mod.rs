//! The test-vector files under tests/vectors/ (see their headers for where the facts come from).

#![allow(dead_code)] // Each test binary uses part of this module.

pub(crate) fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// One flow of tests/vectors/foxio.txt.
#[derive(Debug, Default, Clone)]
pub(crate) struct Vector {
    pub name: String,
    pub ja4: String,
    pub ja4_r: Option<String>,
    pub ja4_o: Option<String>,
    pub ja4_ro: Option<String>,
    /// The spec's ALPN characters where FoxIO's tools print others (see the file's header).
    pub alpn_spec: Option<String>,
    /// TLS records holding the ClientHello (TCP).
    pub tcp: Option<Vec<u8>>,
    /// Client Initial datagrams (QUIC).
    pub quic: Vec<Vec<u8>>,
}

pub(crate) fn foxio() -> Vec<Vector> {
    let text = include_str!("../vectors/foxio.txt");
    let mut out: Vec<Vector> = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[') {
            out.push(Vector {
                name: name.trim_end_matches(']').to_string(),
                ..Default::default()
            });
            continue;
        }
        let v = out.last_mut().expect("a [block] first");
        let (key, value) = line.split_once(' ').expect("key value");
        match key {
            "ja4" => v.ja4 = value.to_string(),
            "ja4_r" => v.ja4_r = Some(value.to_string()),
            "ja4_o" => v.ja4_o = Some(value.to_string()),
            "ja4_ro" => v.ja4_ro = Some(value.to_string()),
            "alpn_spec" => v.alpn_spec = Some(value.to_string()),
            "tcp" => v.tcp = Some(unhex(value)),
            "quic" => v.quic.push(unhex(value)),
            other => panic!("unknown key {other}"),
        }
    }
    for v in &mut out {
        if let Some(alpn) = v.alpn_spec.clone() {
            for s in [
                Some(&mut v.ja4),
                v.ja4_r.as_mut(),
                v.ja4_o.as_mut(),
                v.ja4_ro.as_mut(),
            ]
            .into_iter()
            .flatten()
            {
                s.replace_range(8..10, &alpn);
            }
        }
    }
    out
}

/// A `[name]` value of tests/vectors/rfc9001.txt.
pub(crate) fn rfc9001(name: &str) -> Vec<u8> {
    let text = include_str!("../vectors/rfc9001.txt");
    let mut hex = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        if let Some(n) = line.strip_prefix('[') {
            inside = n.trim_end_matches(']') == name;
            continue;
        }
        if inside {
            hex.push_str(line.trim());
        }
    }
    assert!(!hex.is_empty(), "no [{name}] in rfc9001.txt");
    unhex(&hex)
}

/// Client Initial packets (QUIC v1, one per datagram, 1200 bytes each) carrying `message` split
/// into `parts` CRYPTO frames, sealed with rustls's client-side Initial keys for `dcid`: what a
/// client with a ClientHello too large for one packet sends.
pub(crate) fn seal_initials(dcid: &[u8], message: &[u8], parts: usize) -> Vec<Vec<u8>> {
    use rustls::quic::{Keys, Version};
    let suite = rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .unwrap();
    let keys = Keys::initial(
        Version::V1,
        suite,
        suite.quic.unwrap(),
        dcid,
        rustls::Side::Client,
    )
    .local;
    let chunk = message.len().div_ceil(parts).max(1);
    message
        .chunks(chunk)
        .enumerate()
        .map(|(i, data)| {
            let pn = i as u32;
            let offset = (i * chunk) as u32;
            let mut header = vec![0xc3, 0, 0, 0, 1, dcid.len() as u8];
            header.extend_from_slice(dcid);
            header.extend_from_slice(&[0, 0]); // no SCID, no token
            let pn_offset = header.len() + 2;
            let payload_len = 1200 - pn_offset - 4;
            header.extend_from_slice(&(0x4000 | (payload_len as u16 + 4)).to_be_bytes());
            header.extend_from_slice(&pn.to_be_bytes());
            let mut payload = vec![0x06];
            payload.extend_from_slice(&(0x8000_0000 | offset).to_be_bytes());
            payload.extend_from_slice(&(0x4000 | data.len() as u16).to_be_bytes());
            payload.extend_from_slice(data);
            payload.resize(payload_len - 16, 0); // PADDING; the tag fills the rest
            let tag = keys
                .packet
                .encrypt_in_place(u64::from(pn), &header, &mut payload)
                .unwrap();
            let mut packet = header;
            packet.extend_from_slice(&payload);
            packet.extend_from_slice(tag.as_ref());
            let sample: Vec<u8> = packet[pn_offset + 4..pn_offset + 20].to_vec();
            let (first, rest) = packet.split_at_mut(1);
            keys.header
                .encrypt_in_place(
                    &sample,
                    &mut first[0],
                    &mut rest[pn_offset - 1..pn_offset + 3],
                )
                .unwrap();
            packet
        })
        .collect()
}
