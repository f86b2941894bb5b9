#!/usr/bin/env python3
"""A userspace delay line: forwards TCP connections and UDP datagrams to a server, holding
every chunk (TCP) or datagram (UDP) for DELAY in each direction, so that a round trip through
it takes at least 2 x DELAY. It stands in for `tc netem delay`, which needs sch_netem, a kernel
module the test machines lack (docs/RELIABILITY-faults.md).

    delayline.py --delay 25ms --tcp 9001=127.0.0.1:8888 --udp 9002=127.0.0.1:8889 ...

Binds 127.0.0.1:PORT for each forward, prints one line `ready` on stdout once every socket is
bound, and runs until killed. TCP keeps byte order and half-closes (EOF is forwarded, delayed
like data); UDP gives each client address its own upstream socket, so the server sees one
peer per client, as through a NAT. Python standard library only (asyncio).
"""

import argparse
import asyncio
import re
import socket
import sys

# Chunks in flight per direction of a TCP connection: a bound, so that a slow reader
# eventually pushes back on the writer (as a full window would).
MAX_QUEUED = 1024
READ_SIZE = 64 * 1024


def parse_delay(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"delay '{text}': expected e.g. 25ms or 0.5s")
    value = float(m.group(1))
    return value / 1000 if m.group(2) == "ms" else value


def parse_forward(text):
    m = re.fullmatch(r"(\d+)=([\w.\-]+):(\d+)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"forward '{text}': expected PORT=HOST:PORT")
    return int(m.group(1)), (m.group(2), int(m.group(3)))


async def pump(reader, writer, delay):
    """Copy reader to writer, each chunk (and the EOF) released `delay` after it was read."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue(MAX_QUEUED)

    async def receive():
        while True:
            chunk = await reader.read(READ_SIZE)
            await queue.put((loop.time() + delay, chunk))
            if not chunk:
                return

    async def release():
        while True:
            due, chunk = await queue.get()
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            if not chunk:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(chunk)
            await writer.drain()

    async with asyncio.TaskGroup() as g:
        g.create_task(receive())
        g.create_task(release())


async def tcp_forward(port, upstream, delay):
    async def connection(c_reader, c_writer):
        try:
            s_reader, s_writer = await asyncio.open_connection(*upstream)
        except OSError:
            c_writer.transport.abort()
            return
        for w in (c_writer, s_writer):
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            async with asyncio.TaskGroup() as g:
                g.create_task(pump(c_reader, s_writer, delay))
                g.create_task(pump(s_reader, c_writer, delay))
        except* OSError:
            # A reset on either side: reset the other too, as a dead path would.
            for w in (c_writer, s_writer):
                w.transport.abort()
        for w in (c_writer, s_writer):
            w.close()

    return await asyncio.start_server(connection, "127.0.0.1", port)


class Upstream(asyncio.DatagramProtocol):
    """One client's socket towards the server: datagrams back go out of the front socket."""

    def __init__(self, front, client, delay):
        self.front, self.client, self.delay = front, client, delay

    def datagram_received(self, data, _addr):
        loop = asyncio.get_running_loop()
        loop.call_later(self.delay, self.front.sendto, data, self.client)

    def error_received(self, exc):
        pass  # ICMP errors (server gone): the datagram is lost, as on a network


class Front(asyncio.DatagramProtocol):
    def __init__(self, upstream, delay):
        self.upstream, self.delay = upstream, delay
        self.transport = None
        # Client address -> its upstream socket's transport (a list of datagrams while it
        # opens). Kept for the life of the process: the delay line serves one test run.
        self.peers = {}

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        loop = asyncio.get_running_loop()
        peer = self.peers.get(addr)
        if isinstance(peer, list):
            peer.append(data)  # upstream socket still opening
            return
        if peer is None:
            self.peers[addr] = [data]
            asyncio.ensure_future(self.open(addr))
            return
        loop.call_later(self.delay, peer.sendto, data)

    async def open(self, addr):
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: Upstream(self.transport, addr, self.delay), remote_addr=self.upstream
        )
        for data in self.peers[addr]:
            loop.call_later(self.delay, transport.sendto, data)
        self.peers[addr] = transport

    def error_received(self, exc):
        pass


async def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--delay", type=parse_delay, required=True, help="one-way delay, e.g. 25ms")
    p.add_argument("--tcp", type=parse_forward, action="append", default=[], metavar="PORT=HOST:PORT")
    p.add_argument("--udp", type=parse_forward, action="append", default=[], metavar="PORT=HOST:PORT")
    a = p.parse_args()
    if not a.tcp and not a.udp:
        p.error("nothing to forward: give --tcp and/or --udp")
    loop = asyncio.get_running_loop()
    try:
        servers = [await tcp_forward(port, up, a.delay) for port, up in a.tcp]
        for port, up in a.udp:
            await loop.create_datagram_endpoint(
                lambda up=up: Front(up, a.delay), local_addr=("127.0.0.1", port)
            )
    except OSError as e:
        sys.exit(f"delayline: cannot listen: {e}")
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers), asyncio.Event().wait())


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
