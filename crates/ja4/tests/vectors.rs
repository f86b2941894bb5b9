//! JA4 against FoxIO's published outputs for real captured ClientHellos, and QUIC Initial
//! decryption against RFC 9001 / RFC 9369 Appendix A.

mod common;

use loadterm_ja4::quic::Reassembler;
use loadterm_ja4::{fingerprint, tcp, HelloTransport};

fn ja4_of(v: &common::Vector) -> loadterm_ja4::Ja4 {
    if let Some(stream) = &v.tcp {
        let tcp::Hello::Complete(hello) = tcp::client_hello(stream).expect(&v.name) else {
            panic!("{}: incomplete", v.name)
        };
        fingerprint(&hello, HelloTransport::Tcp).expect(&v.name)
    } else {
        let mut r = Reassembler::new(8);
        let hello = v
            .quic
            .iter()
            .find_map(|d| r.push(d).ok().flatten())
            .unwrap_or_else(|| panic!("{}: no complete ClientHello", v.name));
        fingerprint(&hello.message, HelloTransport::Quic).expect(&v.name)
    }
}

#[test]
fn foxio_vectors_cover_the_required_cases() {
    let v = common::foxio();
    assert!(v.len() >= 15, "{} vectors", v.len());
    let has = |f: &dyn Fn(&common::Vector) -> bool| v.iter().any(f);
    assert!(has(&|v| v.ja4.starts_with('q')), "QUIC");
    assert!(has(&|v| v.ja4.starts_with("t12")), "TLS 1.2");
    assert!(has(&|v| v.ja4.as_bytes()[3] == b'i'), "no SNI");
    assert!(has(&|v| &v.ja4[8..10] == "00"), "no ALPN");
    // GREASE: some ClientHello's raw bytes hold a GREASE cipher (0x?a?a) that JA4 must skip.
    assert!(has(&|v| v.tcp.as_ref().is_some_and(|t| t
        .windows(2)
        .any(|w| w[0] == w[1] && w[0] & 0x0f == 0x0a))
        && v.ja4_r.is_some()));
}

#[test]
fn foxio_ja4() {
    for v in common::foxio() {
        let got = ja4_of(&v);
        assert_eq!(got.as_str(), v.ja4, "{}", v.name);
    }
}

#[test]
fn foxio_raw_and_original_forms() {
    let mut checked = 0;
    for v in common::foxio() {
        let got = ja4_of(&v);
        if let Some(want) = &v.ja4_r {
            assert_eq!(&got.raw(), want, "ja4_r {}", v.name);
            checked += 1;
        }
        if let Some(want) = &v.ja4_o {
            assert_eq!(&got.original(), want, "ja4_o {}", v.name);
        }
        if let Some(want) = &v.ja4_ro {
            assert_eq!(&got.raw_original(), want, "ja4_ro {}", v.name);
        }
    }
    assert!(checked >= 15, "{checked} raw forms checked");
}

#[test]
fn tcp_hello_arriving_in_pieces() {
    for v in common::foxio() {
        let Some(stream) = &v.tcp else { continue };
        for cut in [1, 5, 6, stream.len() / 2, stream.len() - 1] {
            assert_eq!(
                tcp::client_hello(&stream[..cut]),
                Ok(tcp::Hello::Incomplete),
                "{} cut at {cut}",
                v.name
            );
        }
    }
}

#[test]
fn rfc9001_client_initial_v1() {
    let mut r = Reassembler::new(4);
    let hello = r.push(&common::rfc9001("v1")).unwrap().expect("complete");
    assert_eq!(hello.dcid, common::unhex("8394c8f03e515708"));
    assert_eq!(hello.message, common::rfc9001("client_hello"));
    assert_eq!(r.pending(), 0);
}

#[test]
fn rfc9369_client_initial_v2() {
    let mut r = Reassembler::new(4);
    let hello = r.push(&common::rfc9001("v2")).unwrap().expect("complete");
    assert_eq!(hello.message, common::rfc9001("client_hello"));
}

#[test]
fn rfc9001_tampered_initial_fails_authentication() {
    let mut packet = common::rfc9001("v1");
    packet[100] ^= 0xff;
    assert!(Reassembler::new(4).push(&packet).is_err());
}

#[test]
fn quic_hello_over_several_datagrams_in_any_order() {
    let hello = common::rfc9001("client_hello");
    let dcid = common::unhex("0011223344556677");
    let mut packets = common::seal_initials(&dcid, &hello, 3);
    packets.swap(0, 2);
    let mut r = Reassembler::new(4);
    assert_eq!(r.push(&packets[0]), Ok(None));
    assert_eq!(r.push(&packets[1]), Ok(None));
    assert_eq!(r.pending(), 1);
    let done = r.push(&packets[2]).unwrap().expect("complete");
    assert_eq!((done.dcid, done.message), (dcid, hello));
    assert_eq!(r.pending(), 0);
}

#[test]
fn reassembler_is_bounded() {
    let hello = common::rfc9001("client_hello");
    let a = common::seal_initials(&[1; 8], &hello, 2);
    let b = common::seal_initials(&[2; 8], &hello, 2);
    let mut r = Reassembler::new(1);
    assert_eq!(r.push(&a[0]), Ok(None));
    // A second connection's first packet evicts the first connection's state...
    assert_eq!(r.push(&b[0]), Ok(None));
    assert_eq!(r.pending(), 1);
    // ...whose second packet then starts over and cannot complete it.
    assert_eq!(r.push(&a[1]), Ok(None));
    assert_eq!(r.pending(), 1);
    assert!(
        r.push(&b[1]).unwrap().is_none(),
        "b was evicted by a's restart"
    );
}
