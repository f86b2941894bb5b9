#!/usr/bin/env bash
# `loadterm ab` on two container images (docs/AB.md, "A/B two container images"): two local
# podman images of this tree's release loadterm, the second's server run with `--burn 3` (a known
# 3% more CPU per request), compared with ab's defaults. The variants are written as seed 000
# wrote its own (`podman run -d --rm --name loadterm-smoke --network host IMAGE …`): ab adds
# what it needs. SHAPE=documented gives ab's documented options instead (`--rm` attached,
# `--cgroup-parent {cgroup} --cpuset-cpus {server_cpus}`); PLAIN=1 runs the same comparison on
# plain processes, for the containers' overhead.
#
#   bench/ab-containers.sh [ab options…]          # e.g. --json c.json --proto h1,h2
#   SHAPE=documented bench/ab-containers.sh [ab options…]
#   PLAIN=1 bench/ab-containers.sh [ab options…]
#   AA=1 bench/ab-containers.sh                   # both variants without --burn (an A/A)
#
# Needs root, podman and runc (scripts/install-test-deps.sh) and `cargo build --release`.
# The images are built from a root file system holding the binary and its libraries (nothing can
# be pulled here) and removed at the end, also when interrupted. podman's default ulimits are
# above this machine's hard limits: a containers.conf of the script's own lowers them
# (CONTAINERS_CONF), so that the variants' lines stay as a user writes them.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/target/release/loadterm
[ -x "$BIN" ] || { echo "build first: cargo build --release" >&2; exit 1; }
BURN=" --burn 3"
[ "${AA:-0}" = 1 ] && BURN=""
SERVE="serve -t 1 --no-quic -L {host}:{clear_port}:{tls_port}"

if [ "${PLAIN:-0}" = 1 ]; then
  exec "$BIN" ab --a "$BIN $SERVE" --b "$BIN $SERVE$BURN" "$@"
fi

work=$(mktemp -d)
tag="loadterm-abc-$$"
cleanup() {
  podman rmi -f "localhost/$tag:a" "localhost/$tag:b" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$work/rootfs/bin"
cp "$BIN" "$work/rootfs/bin/loadterm"
for lib in $(ldd "$BIN" | grep -o '/[^ ]*'); do
  mkdir -p "$work/rootfs$(dirname "$lib")"
  cp -L "$lib" "$work/rootfs$lib"
done
# Two images, as two builds would be: the same tree here, tagged apart.
for t in a b; do
  tar -C "$work/rootfs" -c . | podman import -q - "localhost/$tag:$t" >/dev/null
done
printf '[containers]\ndefault_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]\n' >"$work/containers.conf"
export CONTAINERS_CONF=$work/containers.conf

if [ "${SHAPE:-seed}" = documented ]; then
  POD="podman run --runtime runc --rm --network host --cgroup-parent {cgroup} --cpuset-cpus {server_cpus}"
else
  POD="podman run -d --rm --name loadterm-smoke --network host"
fi
"$BIN" ab \
  --a "$POD localhost/$tag:a /bin/loadterm $SERVE" \
  --b "$POD localhost/$tag:b /bin/loadterm $SERVE$BURN" "$@"
