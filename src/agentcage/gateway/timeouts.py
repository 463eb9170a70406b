"""First-byte and idle timeouts of flows that went upstream (mitmproxy has neither).

A forwarded flow is watched from the moment its request leaves until its response ends:
- `first_byte`: the upstream must start answering within this many seconds of the request;
- `idle`: once it answers, it must not fall silent for longer than this.
The clock runs only while the gateway waits on the upstream alone: while the request is still
being sent, while a slow client has not taken what already arrived, or while the gateway has
not read what the upstream sent, it is the upstream that waits, and the clock restarts. The
upstream's progress is read from the kernel (TCP_INFO's bytes received), not from mitmproxy.
When a clock runs out, `on_timeout(flow, reason)` cuts the flow (and the caller audits it).
The connect timeout is the connector's (`upstream.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import socket
import struct
import termios
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentcage.gateway import connections
from agentcage.gateway.audit import say

_TCPI_BYTES_RECEIVED = 128  # offset of tcpi_bytes_received in struct tcp_info (Linux >= 4.1)
_TCP_INFO_SIZE = 256


@dataclass
class _Watch:
    phase: str  # "first byte" | "idle"
    since: float  # last progress (monotonic)
    mark: tuple[int | None, bool] | None = None  # the last progress reading


def upstream_bytes_received(transport: Any) -> int | None:
    """Bytes the kernel has received on the flow's upstream socket (None: unknown)."""
    with contextlib.suppress(Exception):
        sock = transport.get_extra_info("socket")
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
        if len(info) >= _TCPI_BYTES_RECEIVED + 8:
            return int(struct.unpack_from("Q", info, _TCPI_BYTES_RECEIVED)[0])
    return None


def _unread(transport: Any) -> int:
    with contextlib.suppress(Exception):
        sock = transport.get_extra_info("socket")
        buf = bytearray(4)
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, buf)
        return int.from_bytes(buf, "little")
    return 0


def _pending(transport: Any) -> int:
    with contextlib.suppress(Exception):
        return int(transport.get_write_buffer_size())
    return 0


def progress(flow: Any) -> tuple[int | None, bool]:
    """(bytes the upstream sent so far, whether someone other than the upstream is being
    waited on). Either changing means the upstream is not the one holding the flow up."""
    server = connections.transport(flow, "server")
    client = connections.transport(flow, "client")
    if server is None:
        return None, False
    waiting_elsewhere = (_pending(server) > 0 or _unread(server) > 0
                         or (client is not None and _pending(client) > 0))
    return upstream_bytes_received(server), waiting_elsewhere


class UpstreamWatchdog:
    def __init__(self, first_byte: float, idle: float,
                 on_timeout: Callable[[Any, str], None],
                 clock: Callable[[], float] = time.monotonic,
                 probe: Callable[[Any], tuple[int | None, bool]] = progress):
        self.limits = {"first byte": first_byte, "idle": idle}
        self.on_timeout = on_timeout
        self.clock = clock
        self.probe = probe
        self._flows: weakref.WeakKeyDictionary[Any, _Watch] = weakref.WeakKeyDictionary()

    def forwarded(self, flow: Any) -> None:
        self._flows[flow] = _Watch("first byte", self.clock())

    def responded(self, flow: Any) -> None:
        if flow in self._flows:
            self._flows[flow] = _Watch("idle", self.clock())

    def done(self, flow: Any) -> None:
        self._flows.pop(flow, None)

    def __len__(self) -> int:
        return len(self._flows)

    def check(self) -> None:
        """One pass over the watched flows; cuts those whose clock ran out."""
        now = self.clock()
        for flow, watch in list(self._flows.items()):
            mark = self.probe(flow)
            if mark[1] or (watch.mark is not None and mark != watch.mark):
                watch.since = now
            watch.mark = mark
            limit = self.limits[watch.phase]
            if now - watch.since > limit:
                self.done(flow)
                what = ("sent no response" if watch.phase == "first byte"
                        else "sent nothing more")
                try:
                    self.on_timeout(flow, f"the upstream {what} for {limit:g} s "
                                          f"({watch.phase} timeout)")
                except Exception as e:  # the other flows are still watched
                    say(f"timeout handling failed: {type(e).__name__}: {e}")

    async def run(self, interval: float = 0.5) -> None:
        while True:
            await asyncio.sleep(interval)
            self.check()
