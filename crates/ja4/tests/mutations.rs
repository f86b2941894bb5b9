//! The parse paths against hostile input: many random mutations and truncations of real
//! ClientHellos and Initial datagrams must give an answer or an error, never a panic.
//! (fuzz/ja4.sh runs the same with many more iterations.)

mod common;

use loadterm_ja4::quic::Reassembler;
use loadterm_ja4::{fingerprint, tcp, HelloTransport};
use rand::{Rng, SeedableRng};

/// Iterations per seed input; `LOADTERM_FUZZ_ITERS` raises it for long runs.
fn iterations() -> usize {
    std::env::var("LOADTERM_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

fn mutate(rng: &mut impl Rng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..rng.random_range(1..8) {
        if v.is_empty() {
            break;
        }
        let i = rng.random_range(0..v.len());
        match rng.random_range(0..5) {
            0 => v[i] = rng.random(),
            1 => v[i] ^= 1 << rng.random_range(0..8),
            2 => v.truncate(i),
            3 => {
                v.remove(i);
            }
            _ => v.insert(i, rng.random()),
        }
    }
    v
}

fn seed() -> u64 {
    let s = rand::random();
    eprintln!("seed {s} (set LOADTERM_FUZZ_SEED to replay)");
    std::env::var("LOADTERM_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(s)
}

#[test]
fn mutated_tls_client_hellos_never_panic() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed());
    let mut outcomes = [0usize; 3];
    for v in common::foxio() {
        let Some(stream) = &v.tcp else { continue };
        for _ in 0..iterations() {
            let m = mutate(&mut rng, stream);
            let i = match tcp::client_hello(&m) {
                Ok(tcp::Hello::Complete(hello)) => {
                    let _ = fingerprint(&hello, HelloTransport::Tcp);
                    // The fingerprint function alone, on the message without records.
                    let _ = fingerprint(&m[5.min(m.len())..], HelloTransport::Tcp);
                    0
                }
                Ok(tcp::Hello::Incomplete) => 1,
                Err(_) => 2,
            };
            outcomes[i] += 1;
        }
    }
    // The mutations reach every outcome (a fuzzer that only ever errors tests nothing).
    assert!(outcomes.iter().all(|&n| n > 0), "{outcomes:?}");
}

#[test]
fn mutated_quic_initials_never_panic() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed());
    let hello = common::rfc9001("client_hello");
    let mut inputs: Vec<Vec<u8>> = common::foxio().into_iter().flat_map(|v| v.quic).collect();
    inputs.push(common::rfc9001("v1"));
    inputs.push(common::rfc9001("v2"));
    inputs.extend(common::seal_initials(&[7; 8], &hello, 2));
    let mut r = Reassembler::new(16);
    for input in &inputs {
        for _ in 0..iterations() {
            let _ = r.push(&mutate(&mut rng, input));
            assert!(r.pending() <= 16);
        }
    }
    // Decrypted-then-mutated CRYPTO content: sealed ClientHellos with random damage inside.
    for _ in 0..iterations() {
        let m = mutate(&mut rng, &hello);
        for d in common::seal_initials(&[9; 8], &m, 2) {
            if let Ok(Some(h)) = r.push(&d) {
                let _ = fingerprint(&h.message, HelloTransport::Quic);
            }
        }
    }
}
