#!/usr/bin/env python3
"""The TLS version, cipher suite and key exchange group a server chose, read off the wire.

Usage: bench/tls-suite.py PORT COMMAND...   (root: a packet socket on lo)

Runs COMMAND (a client of a server on 127.0.0.1:PORT) while capturing loopback, and prints, per
distinct choice, how many connections' ServerHellos carried it: for TCP from the clear TLS
records; for QUIC from the server's Initial packets, decrypted with the keys every QUIC
implementation derives from the client's first Destination Connection ID (RFC 9001 §5.2), by
aioquic. This works for any client, including those that do not print what they negotiated.
TLS 1.2's group is in the ServerKeyExchange message, which follows the ServerHello.
"""
import collections
import socket
import struct
import subprocess
import sys
import time

from aioquic.buffer import Buffer
from aioquic.quic.crypto import CryptoError, CryptoPair
from aioquic.quic.packet import pull_quic_header

SUITES = {
    0x1301: "TLS_AES_128_GCM_SHA256", 0x1302: "TLS_AES_256_GCM_SHA384",
    0x1303: "TLS_CHACHA20_POLY1305_SHA256",
    0xC02B: "ECDHE-ECDSA-AES128-GCM-SHA256", 0xC02C: "ECDHE-ECDSA-AES256-GCM-SHA384",
    0xCCA9: "ECDHE-ECDSA-CHACHA20-POLY1305", 0xC02F: "ECDHE-RSA-AES128-GCM-SHA256",
    0xC030: "ECDHE-RSA-AES256-GCM-SHA384", 0xCCA8: "ECDHE-RSA-CHACHA20-POLY1305",
}
GROUPS = {0x17: "P-256", 0x18: "P-384", 0x19: "P-521", 0x1D: "X25519", 0x1E: "X448",
          0x11EC: "X25519MLKEM768", 0x11EB: "SecP256r1MLKEM768", 0x6399: "X25519Kyber768Draft00"}
VERSIONS = {0x0303: "TLSv1.2", 0x0304: "TLSv1.3"}
SO_RCVBUFFORCE = 33  # Linux; the socket module does not name it
# A HelloRetryRequest is a ServerHello with this random (RFC 8446 §4.1.3).
HRR = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")


def handshake_messages(data):
    """(type, body) of each complete handshake message in `data`."""
    while len(data) >= 4:
        kind, length = data[0], int.from_bytes(data[1:4], "big")
        if len(data) < 4 + length:
            return
        yield kind, data[4:4 + length]
        data = data[4 + length:]


def choice(handshake):
    """(version, suite, group) from a server's handshake bytes, or None if incomplete."""
    version = suite = group = None
    for kind, body in handshake_messages(handshake):
        if kind == 2:  # ServerHello
            sid = body[34]
            at = 35 + sid
            suite = int.from_bytes(body[at:at + 2], "big")
            version = int.from_bytes(body[0:2], "big")
            exts, at = body[at + 5:], 0
            while at + 4 <= len(exts):
                ext, n = struct.unpack("!HH", exts[at:at + 4])
                if ext == 0x2B:
                    version = int.from_bytes(exts[at + 4:at + 6], "big")
                elif ext == 0x33:
                    group = int.from_bytes(exts[at + 4:at + 6], "big")
                at += 4 + n
            if body[2:34] == HRR:
                version = suite = group = None  # the real ServerHello follows
                continue
            if version == 0x0304:
                break
        elif kind == 12 and body[0] == 3:  # TLS 1.2 ServerKeyExchange, named curve
            group = int.from_bytes(body[1:3], "big")
            break
    if suite is None or group is None:
        return None
    return (VERSIONS.get(version, hex(version)), SUITES.get(suite, hex(suite)),
            GROUPS.get(group, hex(group)))


def tls_records(stream):
    """The handshake bytes of a TLS byte stream's leading handshake records."""
    out = b""
    while len(stream) >= 5 and stream[0] == 22:
        n = int.from_bytes(stream[3:5], "big")
        out += stream[5:5 + n]
        stream = stream[5 + n:]
    return out


def varint(buf, at):
    n = 1 << (buf[at] >> 6)
    v = int.from_bytes(buf[at:at + n], "big") & ((1 << (8 * n - 2)) - 1)
    return v, at + n


def crypto_frames(payload, out):
    """Put an Initial packet's CRYPTO frame data into `out` (offset -> bytes)."""
    at = 0
    while at < len(payload):
        kind = payload[at]
        at += 1
        if kind in (0x00, 0x01):  # PADDING, PING
            continue
        if kind in (0x02, 0x03):  # ACK: largest, delay, range count, first range, ranges
            _, at = varint(payload, at)
            _, at = varint(payload, at)
            count, at = varint(payload, at)
            _, at = varint(payload, at)
            for _ in range(2 * count):
                _, at = varint(payload, at)
            if kind == 0x03:
                for _ in range(3):
                    _, at = varint(payload, at)
        elif kind == 0x06:
            offset, at = varint(payload, at)
            n, at = varint(payload, at)
            out[offset] = payload[at:at + n]
            at += n
        else:  # CONNECTION_CLOSE or anything else ends what an Initial tells us
            return


def contiguous(chunks):
    data = b""
    while len(data) in chunks:
        data += chunks[len(data)]
    return data


def header(data, start):
    """A long-header packet's header at `start` and its encrypted part's offset. The fixed bit
    may be greased (RFC 9287: quinn does, from the server's first Initial on); aioquic's parser
    wants it set, and the bit is not covered by header protection."""
    data = bytearray(data[start:])
    data[0] |= 0x40
    buf = Buffer(data=bytes(data))
    h = pull_quic_header(buf, host_cid_length=8)
    return h, buf.tell()


def main():
    port, command = int(sys.argv[1]), sys.argv[2:]
    sniff = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    # Other traffic on lo (a benchmark next door) must not overflow the capture.
    sniff.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
    sniff.bind(("lo", 0))
    sniff.settimeout(0.2)
    tcp = collections.defaultdict(bytes)  # client port -> server's bytes
    # A QUIC connection is (client port, client's connection ID): one client socket may carry many.
    quic_dcid, quic_version = {}, {}  # connection -> the client's first DCID, version
    quic_crypto = collections.defaultdict(dict)  # connection -> {offset: CRYPTO data}
    quic_next = collections.defaultdict(int)  # connection -> next server Initial number
    client = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    ended = None
    while ended is None or time.monotonic() < ended + 0.5:
        if ended is None and client.poll() is not None:
            ended = time.monotonic()
        try:
            frame, addr = sniff.recvfrom(1 << 17)
        except socket.timeout:
            continue
        if addr[2] == socket.PACKET_OUTGOING or frame[12:14] != b"\x08\x00":
            continue
        ip = frame[14:]
        proto, ihl = ip[9], (ip[0] & 15) * 4
        sport, dport = struct.unpack("!HH", ip[ihl:ihl + 4])
        if proto == 6 and sport == port:
            seg = ip[ihl + (ip[ihl + 12] >> 4) * 4:int.from_bytes(ip[2:4], "big")]
            if len(tcp[dport]) < 16384:
                tcp[dport] += seg
        elif proto == 17 and port in (sport, dport):
            data = ip[ihl + 8:]
            if not data or not data[0] & 0x80:
                continue
            if dport == port:  # a client's long-header packet: its first DCID keys the Initials
                h, _ = header(data, 0)
                conn = (sport, h.source_cid)
                if conn not in quic_dcid:
                    quic_dcid[conn], quic_version[conn] = h.destination_cid, h.version
                continue
            start = 0
            while start < len(data):  # coalesced packets (and GSO's concatenated datagrams)
                h, encrypted = header(data, start)
                end = start + h.packet_length
                conn = (dport, h.destination_cid)
                if h.packet_type.name == "INITIAL" and conn in quic_dcid:
                    pair = CryptoPair()
                    pair.setup_initial(quic_dcid[conn], is_client=True, version=quic_version[conn])
                    try:
                        _, payload, number = pair.decrypt_packet(
                            data[start:end], encrypted, quic_next[conn])
                        quic_next[conn] = number + 1
                        crypto_frames(payload, quic_crypto[conn])
                    except CryptoError:  # another connection's, under the same IDs
                        pass
                if h.packet_type.name == "ONE_RTT" or end <= start:
                    break
                start = end
    seen = collections.Counter()
    for stream in tcp.values():
        seen[("TCP",) + (choice(tls_records(stream)) or ("incomplete",))] += 1
    for chunks in quic_crypto.values():
        seen[("QUIC",) + (choice(contiguous(chunks)) or ("incomplete",))] += 1
    for key, n in sorted(seen.items()):
        print(f"{n} connection(s): {' '.join(key)}")
    sys.exit(client.returncode)


if __name__ == "__main__":
    main()
