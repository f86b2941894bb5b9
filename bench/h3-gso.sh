#!/usr/bin/env bash
# A QUIC server's UDP system calls per request, counted in the kernel by bpftrace on the syscall
# tracepoints (no ptrace, so the server runs at its own pace): sendmsg calls, datagrams per call
# (the UDP_SEGMENT control message's GSO size against the bytes sent), bytes per call; recvmmsg
# calls, datagrams per call (UDP_GRO included) and empty ones; all system calls by number.
# Also the loopback's UDP receive-buffer drops during the run (/proc/net/snmp, whole machine).
#
# Starts SERVER (a command with {clear_port} {tls_port}) on core $SERVER_CPU, runs CLIENT (with
# {tls_port} {requests}) on core $CLIENT_CPU, and divides by REQUESTS:
#
#   bench/h3-gso.sh 'target/release/loadterm serve -t 1 -L 127.0.0.1:{clear_port}:{tls_port}' \
#       'target/release/loadterm load --h3 -k -c 50 -m 10 -t 1 -n {requests} https://127.0.0.1:{tls_port}/?s=256k' 2000
#
# Needs root and bpftrace (apt install bpftrace). BT_OUT=FILE keeps bpftrace's histograms.
set -euo pipefail
server=$1 client=$2 requests=$3
SERVER_CPU=${SERVER_CPU:-0} CLIENT_CPU=${CLIENT_CPU:-1}
CLEAR_PORT=${CLEAR_PORT:-18888} TLS_PORT=${TLS_PORT:-18889}
command -v bpftrace >/dev/null || { echo "needs bpftrace (apt install bpftrace)" >&2; exit 1; }
if ss -Hlntu | grep -qE ":($CLEAR_PORT|$TLS_PORT)\b"; then
  echo "port $CLEAR_PORT or $TLS_PORT is already in use" >&2; exit 1
fi
fill() { local s=${1//\{clear_port\}/$CLEAR_PORT}; s=${s//\{tls_port\}/$TLS_PORT}; echo "${s//\{requests\}/$requests}"; }
# Udp: RcvbufErrors, the fifth counter of the second Udp line.
drops() { awk '/^Udp:/ { n++ } /^Udp:/ && n == 2 { print $6 }' /proc/net/snmp; }

# struct user_msghdr: msg_control at 32, msg_controllen at 40; struct mmsghdr is 64 bytes with
# msg_len at 56; a cmsghdr is {u64 len, i32 level, i32 type} and data, 8-byte aligned.
# SOL_UDP = 17, UDP_SEGMENT = 103, UDP_GRO = 104.
read -r -d '' program <<'EOF' || true
tracepoint:syscalls:sys_enter_sendmsg /pid == $1/ {
  $m = (uint64)args->msg;
  $ctl = *(uint64 *)uptr($m + 32); $clen = *(uint64 *)uptr($m + 40);
  $off = (uint64)0; $g = (uint64)0;
  unroll(4) {
    if ($off + 16 <= $clen) {
      $len = *(uint64 *)uptr($ctl + $off);
      if (*(int32 *)uptr($ctl + $off + 8) == 17 && *(int32 *)uptr($ctl + $off + 12) == 103) {
        $g = (uint64)*(uint16 *)uptr($ctl + $off + 16);
      }
      $off = $off + (($len + 7) & ~(uint64)7);
    }
  }
  @gso[tid] = $g; @insend[tid] = 1;
}
tracepoint:syscalls:sys_exit_sendmsg /@insend[tid]/ {
  $g = @gso[tid]; delete(@gso[tid]); delete(@insend[tid]); $r = args->ret;
  if ($r > 0) {
    $segs = $g > 0 ? (((uint64)$r + $g - 1) / $g) : (uint64)1;
    @send_calls = count(); @send_bytes = sum($r); @send_datagrams = sum($segs);
    @datagrams_per_send = lhist($segs, 0, 65, 1);
  } else { @send_errors = count(); }
}
tracepoint:syscalls:sys_enter_recvmmsg /pid == $1/ { @inrecv[tid] = args->mmsg; }
tracepoint:syscalls:sys_exit_recvmmsg /@inrecv[tid]/ {
  $v = (uint64)@inrecv[tid]; delete(@inrecv[tid]); $r = args->ret;
  if ($r > 0) {
    @recv_calls = count(); @recv_msgs = sum($r);
    $i = (uint64)0; $d = (uint64)0;
    unroll(32) {
      if ($i < (uint64)$r) {
        $h = $v + $i * 64;
        $len = (uint64)*(uint32 *)uptr($h + 56);
        $ctl = *(uint64 *)uptr($h + 32); $clen = *(uint64 *)uptr($h + 40);
        $g = (uint64)0; $off = (uint64)0;
        unroll(3) {
          if ($off + 16 <= $clen) {
            $cl = *(uint64 *)uptr($ctl + $off);
            if (*(int32 *)uptr($ctl + $off + 8) == 17 && *(int32 *)uptr($ctl + $off + 12) == 104) {
              $g = (uint64)*(int32 *)uptr($ctl + $off + 16);
            }
            $off = $off + (($cl + 7) & ~(uint64)7);
          }
        }
        $n = $g > 0 ? ($len + $g - 1) / $g : (uint64)1;
        $d = $d + $n;
        if ($n > 1) { @recv_gro_msgs = count(); }
        $i = $i + 1;
      }
    }
    @recv_datagrams = sum($d); @datagrams_per_recv = lhist($d, 0, 65, 1);
  } else { @recv_empty = count(); }
}
tracepoint:raw_syscalls:sys_enter /pid == $1/ { @syscall_nr[args->id] = count(); @syscalls = count(); }
EOF

taskset -c "$SERVER_CPU" sh -c "exec $(fill "$server")" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$TLS_PORT") 2>/dev/null && break; sleep 0.05; done
out=${BT_OUT:-$(mktemp)}
bpftrace -e "$program" "$pid" >"$out" 2>/dev/null &
bt=$!
for _ in $(seq 600); do grep -q Attaching "$out" && break; sleep 0.05; done
sleep 1
d0=$(drops)
report=$(taskset -c "$CLIENT_CPU" sh -c "$(fill "$client")" 2>&1)
d1=$(drops)
kill -INT "$bt"; wait "$bt" 2>/dev/null || true
kill "$pid"; wait "$pid" 2>/dev/null || true
echo "$report" | grep -E 'succeeded|req/s' || true

get() { awk -v k="@$1:" '$1 == k { print $2; exit }' "$out"; }
awk -v n="$requests" -v sc="$(get send_calls)" -v sd="$(get send_datagrams)" -v sb="$(get send_bytes)" \
  -v rc="$(get recv_calls)" -v rd="$(get recv_datagrams)" -v re="$(get recv_empty)" \
  -v rg="$(get recv_gro_msgs)" -v all="$(get syscalls)" -v drops=$((d1 - d0)) 'BEGIN {
  printf "per request: %.2f sendmsg, %.1f datagrams sent, %.0f bytes sent\n", sc / n, sd / n, sb / n
  printf "per sendmsg: %.2f datagrams, %.0f bytes (%d calls)\n", sd / sc, sb / sc, sc
  printf "per request: %.2f recvmmsg with data + %.2f empty (EAGAIN), %.2f datagrams received\n", rc / n, re / n, rd / n
  printf "per recvmmsg with data: %.2f datagrams; messages holding more than one (GRO): %d\n", rd / rc, rg
  printf "per request: %.2f system calls in all\n", all / n
  printf "UDP receive-buffer drops on the machine during the run: %d (%.2f per request)\n", drops, drops / n
}'
awk '/^@datagrams_per_send:/ { p = 1; print "datagrams per sendmsg:"; next } p && /^$/ { exit } p' "$out"
awk '/^@syscall_nr\[/ { gsub(/[@a-z_\[\]:]/, "", $1); printf "%s:%s ", $1, $2 } END { print "(system call number: count)" }' "$out"
[ -n "${BT_OUT:-}" ] || rm -f "$out"
