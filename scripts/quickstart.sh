#!/usr/bin/env bash
# The main job in one command: build loadterm, start the dummy server on loopback (clear port 8888,
# TLS + QUIC port 8889, a freshly generated self-signed certificate), load it over HTTP/1.1, HTTP/2
# and HTTP/3 with loadterm's own load generator (verifying the certificate), then stop the server.
set -euo pipefail
cd "$(dirname "$0")/.."

if ss -Hlntu 2>/dev/null | grep -qE '127\.0\.0\.1:888[89]|\*:888[89]|0\.0\.0\.0:888[89]'; then
  echo "quickstart: port 8888 or 8889 is already in use on this machine; stop that server first" >&2
  exit 1
fi

for tool in cc make; do
  if ! command -v "$tool" >/dev/null; then
    echo "quickstart: the build needs a C compiler and make (aws-lc-rs, jemalloc): apt-get install build-essential" >&2
    exit 1
  fi
done
cargo build --release --locked
bin=target/release/loadterm
cert=target/quickstart-cert.pem

"$bin" serve --cert-out "$cert" &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT

for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/8889) 2>/dev/null && break
  sleep 0.1
done

echo; echo "== HTTP/1.1, clear, pipelined =="
"$bin" load --h1 -c 50 -m 10 -n 100000 'http://127.0.0.1:8888/?s=1k'
echo; echo "== HTTP/2 over TLS =="
"$bin" load --h2 --cacert "$cert" -c 50 -m 10 -n 50000 'https://127.0.0.1:8889/?s=1k'
echo; echo "== HTTP/3 over QUIC =="
"$bin" load --h3 --cacert "$cert" -c 10 -m 10 -n 20000 'https://127.0.0.1:8889/?s=1k'
echo; echo "== open loop, 2000 req/s for 5 s, server delay 1-10 ms (latency corrected for coordinated omission) =="
"$bin" load --h2 --cacert "$cert" -c 20 --rate 2000 -D 5s 'https://127.0.0.1:8889/?s=1k&t=10r'
