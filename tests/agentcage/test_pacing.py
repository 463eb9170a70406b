"""Pacing a body to the upstream: the wait between slices, over real loopback TCP connections
(end to end, with memory and an upstream that stops reading: test_uploads_world.py)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from agentcage.gateway.pacing import SendPacer, UpstreamSendPausedHook, until_drained

BURST = 8 * 1024 * 1024  # far more than the kernel's buffers take: the transport keeps the rest


@dataclass
class Waited:
    drained: bool  # what `until_drained` returned
    seconds: float
    left: int  # bytes still in the transport's buffer when it returned


def wait_after_burst(*, peer_reads: bool, connection_ends_after: float, stall: float) -> Waited:
    """Write BURST to a loopback peer that reads everything or nothing, then wait as the pacer
    does; the connection's task ends after `connection_ends_after` seconds."""

    async def peer(reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        while peer_reads and await reader.read(1 << 20):
            pass
        await asyncio.sleep(3600)

    async def main() -> Waited:
        server = await asyncio.start_server(peer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        connection = asyncio.ensure_future(asyncio.sleep(connection_ends_after))
        writer.write(b"x" * BURST)
        assert writer.transport.get_write_buffer_size() > 0
        started = time.monotonic()
        drained = await until_drained(writer, connection, stall)
        waited = Waited(drained, time.monotonic() - started,
                        writer.transport.get_write_buffer_size())
        writer.transport.abort()
        server.close()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        return waited

    return asyncio.run(main())


def test_the_wait_ends_once_a_reading_upstream_took_the_slice():
    waited = wait_after_burst(peer_reads=True, connection_ends_after=3600, stall=30)
    assert waited.drained
    assert waited.left <= 64 * 1024  # below asyncio's high-water mark: the next slice may go


def test_an_upstream_that_takes_nothing_ends_pacing_after_the_stall():
    waited = wait_after_burst(peer_reads=False, connection_ends_after=3600, stall=0.3)
    assert not waited.drained
    assert waited.left > 0  # still there: it was not a drain that ended the wait
    assert waited.seconds < 10  # the kernel's buffers filled (progress), then one stall


def test_the_wait_ends_when_the_connection_ends():
    """An upstream that takes nothing, but whose connection is closed meanwhile (a timeout,
    a killed flow): the wait ends with the connection's task, without waiting for the stall."""
    waited = wait_after_burst(peer_reads=False, connection_ends_after=0.2, stall=30)
    assert waited.drained
    assert waited.left > 0 and waited.seconds < 10


def test_the_pause_is_a_blocking_hook_of_its_own_name():
    """mitmproxy pauses only the layer that yields a blocking command and delivers the hook to
    the addon method of that name (`SendPacer`'s)."""
    assert UpstreamSendPausedHook.blocking is True
    assert hasattr(SendPacer(), UpstreamSendPausedHook.name)
