#!/usr/bin/env bash
# Two "hosts" on this machine for `loadterm ab --server-host`: two network namespaces joined by
# a veth pair, with addresses from 198.18.0.0/15 (RFC 2544's benchmarking range) that exist only
# inside them: 198.18.0.1 the server host, 198.18.0.2 the client host. The agent runs in the
# server one with fresh credentials (mutual TLS and a token), `loadterm ab` with the options
# given here in the client one; ab's output is printed and its exit status returned. Everything
# made is removed on exit, also when interrupted. Needs root.
#
#   bench/ab-two-hosts.sh --a 'target/release/loadterm serve --listen {host}:{clear_port}' \
#       --b 'target/release/loadterm serve --listen {host}:{clear_port} --burn 3'
#
# LOADTERM: the binary (default target/release/loadterm). The servers are pinned by the agent to
# --server-cpus (default 0), the load clients by ab to --client-cpus (default 1).
set -euo pipefail
LOADTERM=$(realpath "${LOADTERM:-target/release/loadterm}")
if [ "$(id -u)" != 0 ]; then
    echo "ab-two-hosts.sh: needs root (network namespaces and cgroups)" >&2
    exit 2
fi
id=$$
server=lt-srv-$id
client=lt-cli-$id
work=$(mktemp -d /tmp/ab-two-hosts.XXXXXX)
agent=
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    if [ -n "$agent" ]; then
        kill -TERM "$agent" 2>/dev/null || true
        wait "$agent" 2>/dev/null || true
    fi
    ip netns del "$server" 2>/dev/null || true
    ip netns del "$client" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$server"
ip netns add "$client"
ip link add "vs$id" type veth peer name "vc$id"
ip link set "vs$id" netns "$server"
ip link set "vc$id" netns "$client"
ip -n "$server" addr add 198.18.0.1/30 dev "vs$id"
ip -n "$client" addr add 198.18.0.2/30 dev "vc$id"
for ns in "$server" "$client"; do
    ip -n "$ns" link set lo up
done
ip -n "$server" link set "vs$id" up
ip -n "$client" link set "vc$id" up

"$LOADTERM" agent --init "$work/auth" --name 198.18.0.1 >/dev/null
# nsenter, not `ip netns exec`: that mounts a sysfs of its own, without the cgroup hierarchies
# the agent measures the servers in.
nsenter --net="/run/netns/$server" "$LOADTERM" agent --listen 198.18.0.1:7878 --auth "$work/auth" \
    2>"$work/agent.log" &
agent=$!
for _ in $(seq 100); do
    grep -q "listening on" "$work/agent.log" 2>/dev/null && break
    sleep 0.1
done
grep -q "listening on" "$work/agent.log" || { cat "$work/agent.log" >&2; exit 1; }

status=0
nsenter --net="/run/netns/$client" "$LOADTERM" ab --server-host https://198.18.0.1:7878 \
    --agent-auth "$work/auth" "$@" || status=$?
echo "--- agent's log" >&2
cat "$work/agent.log" >&2
exit "$status"
