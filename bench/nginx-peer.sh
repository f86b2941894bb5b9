#!/usr/bin/env bash
# nginx as the peer of bench/peer-compare.sh: static files for `?s=1k` and `?s=256k`, one worker,
# sendfile, TLS 1.3 and HTTP/2 on the TLS port (Debian's nginx 1.22: no HTTP/3), access log off,
# keep-alive without a request limit. Everything lives under $NGINX_PEER_DIR (/tmp/nginx-peer).
#
#   PEER_NAME=nginx PEER_CMD='bench/nginx-peer.sh {clear_port} {tls_port}' \
#     ROWS="h1-256k h1-1k-m1 h1-1k-m10 h1tls-256k h2tls-256k h2tls-1k" bench/peer-compare.sh
set -euo pipefail
clear=${1:?usage: nginx-peer.sh CLEAR_PORT TLS_PORT} tls=${2:?usage: nginx-peer.sh CLEAR_PORT TLS_PORT}
d=${NGINX_PEER_DIR:-/tmp/nginx-peer}
command -v nginx >/dev/null || { echo "nginx is missing (apt install nginx)" >&2; exit 1; }
mkdir -p "$d/www"
[ -f "$d/www/1k" ] || head -c 1024 /dev/zero | tr '\0' x >"$d/www/1k"
[ -f "$d/www/256k" ] || head -c 262144 /dev/zero | tr '\0' x >"$d/www/256k"
[ -f "$d/key.pem" ] || openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj /CN=localhost -days 30 -keyout "$d/key.pem" -out "$d/cert.pem" 2>/dev/null
cat >"$d/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $d/nginx.pid;
error_log $d/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 10000000;
  server {
    listen 127.0.0.1:$clear;
    listen 127.0.0.1:$tls ssl http2;
    ssl_certificate $d/cert.pem;
    ssl_certificate_key $d/key.pem;
    ssl_protocols TLSv1.3;
    root $d/www;
    location = / { try_files /\$arg_s =404; }
  }
}
CONF
exec nginx -c "$d/nginx.conf" -p "$d"
