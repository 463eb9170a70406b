"""What every server handler in the server process shares: the record writer and connection ids."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from fakenet.records import RecordWriter
from fakenet.serverconfig import ServerConfig


@dataclass
class ServerContext:
    config: ServerConfig
    records: RecordWriter
    _ids: itertools.count = field(default_factory=itertools.count)

    def new_conn_id(self, proto: str) -> str:
        return f"{proto}-{next(self._ids)}"


def peer_host(address: object) -> str:
    """The host part of a socket address tuple, as text."""
    return str(address[0]) if isinstance(address, tuple) and address else "?"


def local_port(writer: asyncio.StreamWriter) -> int:
    return int(writer.get_extra_info("sockname")[1])


def set_nodelay(writer: asyncio.StreamWriter) -> None:
    # Without it, Nagle plus the client's delayed ACK adds ~40 ms to small answers.
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def chunks(reader: asyncio.StreamReader, idle_timeout: float) -> AsyncIterator[bytes]:
    """What the peer sends, chunk by chunk, until it closes, resets or stays silent too long."""
    while True:
        try:
            data = await asyncio.wait_for(reader.read(65536), idle_timeout)
        except (TimeoutError, ConnectionError, OSError):
            return
        if not data:
            return
        yield data


async def close_quietly(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(TimeoutError, ConnectionError, OSError):
        await asyncio.wait_for(writer.wait_closed(), 2.0)
