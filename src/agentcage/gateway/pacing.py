"""Sending a large body upstream no faster than the upstream takes it.

mitmproxy turns a whole request body into ciphertext in one go and writes all of it into the
upstream transport's buffer, where it waits while the socket drains: a buffered upload cost its
plaintext (kept for the inspectors and the audit) plus all of its ciphertext. The TLS layer's
patched `send_data` (`mitmpatch.encrypt_in_slices`) encrypts a slice at a time; toward an
upstream, it asks before each further slice for the transport to drain, through a blocking hook
(`UpstreamSendPausedHook`): mitmproxy pauses that one layer, queues what arrives for it, and
resumes it when the hook completes, as it does for its own TLS hooks. `SendPacer` completes the
hook once the transport's buffer is below asyncio's low-water mark, so the ciphertext in memory
stays near one slice.

Pacing holds a flow up by at most `STALL_SECONDS` beyond what the upstream does: the wait ends
when the connection ends, and an upstream that takes nothing for `STALL_SECONDS` (one that
answered early and stopped reading, or one that hangs) ends pacing for the rest of that body,
which is then written at once, as mitmproxy alone would (and the layer sees the early answer).
The upstream timeouts (`timeouts.py`) stay in charge of hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from mitmproxy.connection import Client, Connection
from mitmproxy.proxy.commands import StartHook

from agentcage.gateway import connections

STALL_SECONDS = 2.0  # long enough for a slow upstream to show progress, short for a stuck one


@dataclass
class SendWindow:
    """One body on its way upstream; `unpaced` is set once pacing gave up on it."""

    client: Client
    server: Connection
    unpaced: bool = False


@dataclass
class UpstreamSendPausedHook(StartHook):
    """The TLS layer toward `data.server` waits to send the next slice of a body."""

    name = "agentcage_upstream_send_paused"
    data: SendWindow


async def until_drained(writer: Any, connection_task: Any, stall: float) -> bool:
    """Wait until `writer`'s buffer drained or its connection's task ended: True. False when
    the buffer did not shrink for `stall` seconds."""
    transport = writer.transport
    drain = asyncio.ensure_future(writer.drain())
    try:
        last = transport.get_write_buffer_size()
        while True:
            done, _ = await asyncio.wait({drain, connection_task}, timeout=stall,
                                         return_when=asyncio.FIRST_COMPLETED)
            if done:
                return True
            now = transport.get_write_buffer_size()
            if now >= last:
                return False
            last = now
    finally:
        if drain.done():
            with contextlib.suppress(BaseException):
                drain.exception()  # a lost connection: its handler reports it
        else:
            drain.cancel()


class SendPacer:
    """The addon that completes `UpstreamSendPausedHook` when the upstream took the last slice."""

    def __init__(self, stall: float = STALL_SECONDS) -> None:
        self.stall = stall

    async def agentcage_upstream_send_paused(self, window: SendWindow) -> None:
        handler = connections.handler_of(window.client)
        io = handler.transports.get(window.server) if handler is not None else None
        if io is None or io.writer is None or io.handler is None:
            return  # the connection is gone: nothing to wait for
        if not await until_drained(io.writer, io.handler, self.stall):
            window.unpaced = True
