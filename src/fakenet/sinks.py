"""Exfil sinks (record every byte, answer nothing) and echo servers (record, send it back)."""

from __future__ import annotations

import asyncio

from fakenet.context import ServerContext, chunks, close_quietly, local_port, peer_host, set_nodelay


async def handle_tcp(ctx: ServerContext, echo: bool,
                     reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    set_nodelay(writer)
    peer, port = peer_host(writer.get_extra_info("peername")), local_port(writer)
    conn = ctx.new_conn_id("tcp")
    try:
        async for data in chunks(reader, ctx.config.sink_idle_timeout):
            ctx.records.sink("tcp", port, peer, conn, data)
            if echo:
                writer.write(data)
                await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        await close_quietly(writer)


class UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, ctx: ServerContext, echo: bool, port: int) -> None:
        self._ctx, self._echo, self._port = ctx, echo, port
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.DatagramTransport)
        self._transport = transport

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        self._ctx.records.sink("udp", self._port, peer_host(addr), self._ctx.new_conn_id("udp"),
                               data)
        if self._echo and self._transport is not None:
            self._transport.sendto(data, addr)

    def error_received(self, exc: Exception) -> None:
        pass  # an ICMP error for an echo reply: nothing to do

