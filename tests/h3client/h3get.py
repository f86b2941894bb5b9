#!/usr/bin/env python3
"""Independent HTTP/3 client (aioquic) used by loadterm's tests.

Usage: h3get.py HOST PORT REQUEST... where each REQUEST is a JSON object:
  {"path": "/?s=10", "method": "GET", "data": 100, "no_length": false, "grease": false,
   "headers": [["x-loadterm", "r=404"]]}
"data" uploads that many bytes (with content-length unless "no_length"); "grease" ends the
request with a reserved frame type before FIN (RFC 9114 §7.2.8), as oha's client does; "raw"
(hex) is sent as the whole request stream instead, for protocol violations (with FIN unless
"no_fin"); "exact_headers" (a list of [name, value], "{authority}" in a value replaced) is
sent as the whole field section, in order and unchecked, for malformed requests; "trailers"
(a list of [name, value]) ends the request with a trailer section. A connection the
server closes reports "closed": its error code for every request still waiting.
{"wait_close": N} sends nothing: it waits up to N seconds for the server to close the
connection and reports "closed" (the error code) and "elapsed" (seconds), or "closed": null,
and "goaway": the stream ID of the server's last GOAWAY, or null when none came;
with "encoder" or "decoder" (hex), those bytes go on aioquic's QPACK encoder or decoder stream
first (with FIN if "fin"), for QPACK instruction stream violations.
Prints one JSON line per request: status, headers, body length and first bytes, elapsed seconds,
the number of DATA events (one per DATA frame when frames arrive apart) and when the last body
bytes arrived.
H3GET_PAD_ALPN=N (environment) offers about N more bytes of made-up ALPN names after h3, so that the
ClientHello no longer fits in one Initial packet (as with post-quantum key shares).
"""
import os
import asyncio
import json
import ssl
import sys
import time

from aioquic.asyncio import connect
from aioquic.buffer import Buffer, BufferReadError
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection, encode_frame
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamDataReceived, StreamReset

GREASE_FRAME_TYPE = 0x1F * 7 + 0x21


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        # aioquic 1.7 checks a response's content-length against its DATA even for HEAD, whose
        # response carries the GET's length and no content (RFC 9110 §9.3.2, RFC 9114 §4.1.2):
        # not on HEAD streams.
        self.head_streams = set()
        check = self.h3._check_content_length

        def check_unless_head(stream):
            if stream.stream_id not in self.head_streams:
                check(stream)

        self.h3._check_content_length = check_unless_head
        self.waiters = {}
        self.results = {}
        self.terminated = None
        # The server's unidirectional streams, raw: aioquic reads GOAWAY but keeps no record.
        self.server_uni = {}

    def _finish(self, sid):
        fut = self.waiters.pop(sid, None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            if self.terminated is not None and not self.terminated.done():
                self.terminated.set_result(event.error_code)
            for sid in list(self.waiters):
                self.results.setdefault(sid, {})["closed"] = event.error_code
                self._finish(sid)
            return
        if isinstance(event, StreamDataReceived) and event.stream_id % 4 == 3:
            self.server_uni.setdefault(event.stream_id, bytearray()).extend(event.data)
        if isinstance(event, StreamReset):
            self.results.setdefault(event.stream_id, {})["reset"] = event.error_code
            self._finish(event.stream_id)
        for ev in self.h3.handle_event(event):
            r = self.results.setdefault(ev.stream_id, {})
            if isinstance(ev, HeadersReceived):
                headers = {k.decode(): v.decode() for k, v in ev.headers}
                if headers.get(":status", "").startswith("1"):
                    r.setdefault("informational", []).append(int(headers[":status"]))
                else:
                    r["headers"] = headers
            elif isinstance(ev, DataReceived):
                r.setdefault("body", bytearray()).extend(ev.data)
                if ev.data:
                    r["data_events"] = r.get("data_events", 0) + 1
                    r["last_data"] = time.monotonic()
            if getattr(ev, "stream_ended", False):
                self._finish(ev.stream_id)

    def goaway(self):
        """The stream ID of the last GOAWAY on the server's control stream, or None."""
        last = None
        for data in self.server_uni.values():
            buf = Buffer(data=bytes(data))
            try:
                if buf.pull_uint_var() != 0:  # not the control stream
                    continue
                while not buf.eof():
                    frame_type, length = buf.pull_uint_var(), buf.pull_uint_var()
                    payload = buf.pull_bytes(length)
                    if frame_type == 0x7:
                        last = Buffer(data=payload).pull_uint_var()
            except BufferReadError:
                pass  # a frame cut short: the rest has not arrived
        return last

    async def wait_close(self, limit):
        self.terminated = asyncio.get_running_loop().create_future()
        start = time.monotonic()
        try:
            code = await asyncio.wait_for(self.terminated, timeout=limit)
        except asyncio.TimeoutError:
            code = None
        return {"closed": code, "elapsed": time.monotonic() - start, "goaway": self.goaway()}

    async def request(self, host, port, spec):
        if "wait_close" in spec:
            for name in ("encoder", "decoder"):
                if name in spec:
                    sid = getattr(self.h3, f"_local_{name}_stream_id")
                    data = bytes.fromhex(spec[name])
                    self._quic.send_stream_data(sid, data, end_stream=spec.get("fin", False))
            self.transmit()
            return await self.wait_close(spec["wait_close"])
        sid = self._quic.get_next_available_stream_id()
        if spec.get("method") == "HEAD":
            self.head_streams.add(sid)
        data = b"x" * spec["data"] if spec.get("data") is not None else None
        headers = [
            (b":method", spec.get("method", "GET").encode()),
            (b":scheme", b"https"),
            (b":authority", f"{host}:{port}".encode()),
            (b":path", spec.get("path", "/").encode()),
        ]
        if data is not None and not spec.get("no_length"):
            headers.append((b"content-length", str(len(data)).encode()))
        headers += [(k.encode(), v.encode()) for k, v in spec.get("headers", [])]
        if "exact_headers" in spec:
            authority = f"{host}:{port}"
            headers = [
                (k.encode(), v.replace("{authority}", authority).encode())
                for k, v in spec["exact_headers"]
            ]
        grease = spec.get("grease", False)
        trailers = [(k.encode(), v.encode()) for k, v in spec.get("trailers", [])]
        if "raw" in spec:
            self._quic.send_stream_data(sid, bytes.fromhex(spec["raw"]), end_stream=not spec.get("no_fin"))
        else:
            self.h3.send_headers(sid, headers, end_stream=data is None and not grease and not trailers)
        if data is not None:
            self.h3.send_data(sid, data, end_stream=not grease and not trailers)
        if trailers:
            self.h3.send_headers(sid, trailers, end_stream=not grease)
        if grease:
            self._quic.send_stream_data(sid, encode_frame(GREASE_FRAME_TYPE, b"grease"), end_stream=True)
        fut = asyncio.get_running_loop().create_future()
        self.waiters[sid] = fut
        start = time.monotonic()
        self.transmit()
        await asyncio.wait_for(fut, timeout=spec.get("timeout", 20))
        r = self.results.pop(sid, {})
        body = bytes(r.get("body", b""))
        headers = r.get("headers", {})
        return {
            "status": int(headers[":status"]) if ":status" in headers else None,
            "headers": {k: v for k, v in headers.items() if not k.startswith(":")},
            "informational": r.get("informational", []),
            "reset": r.get("reset"),
            "closed": r.get("closed"),
            "body_len": len(body),
            "body_head": body[:60].decode("latin-1"),
            "elapsed": time.monotonic() - start,
            "data_events": r.get("data_events", 0),
            "last_data": r["last_data"] - start if "last_data" in r else None,
        }


async def main():
    host, port = sys.argv[1], int(sys.argv[2])
    specs = [json.loads(a) for a in sys.argv[3:]]
    pad = int(os.environ.get("H3GET_PAD_ALPN", "0"))
    alpn = H3_ALPN + ["x-pad-%03d-" % i + "p" * 240 for i in range((pad + 249) // 250)]
    config = QuicConfiguration(alpn_protocols=alpn, is_client=True, verify_mode=ssl.CERT_NONE)
    async with connect(host, port, configuration=config, create_protocol=Client) as client:
        for spec in specs:
            print(json.dumps(await client.request(host, port, spec)), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
