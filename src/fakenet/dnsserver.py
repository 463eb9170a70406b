"""The authoritative DNS server: answers from the zone, logs every question, UDP and TCP."""

from __future__ import annotations

import asyncio
import struct

from dnslib import AAAA, QTYPE, RCODE, RR, A, DNSError, DNSRecord

from fakenet.context import ServerContext, chunks, close_quietly, local_port, peer_host, set_nodelay
from fakenet.zone import normalize_name

_RDATA = {"A": A, "AAAA": AAAA}


class DnsAnswerer:
    """Pure question -> answer logic, kept apart from sockets so it is easy to reason about."""

    def __init__(self, zone: dict[str, dict[str, list[str]]],
                 catch_all: dict[str, list[str]] | None, ttl: int) -> None:
        self._zone = {normalize_name(k): v for k, v in zone.items()}
        self._catch_all = catch_all
        self._ttl = ttl

    def answer(self, query: DNSRecord) -> DNSRecord:
        reply = query.reply(ra=1, aa=1)
        for question in query.questions:
            name = normalize_name(str(question.qname))
            records = self._zone.get(name, self._catch_all)
            if records is None:
                reply.header.rcode = RCODE.NXDOMAIN
                continue
            qtype = QTYPE[question.qtype]
            rdata = _RDATA.get(str(qtype))
            if rdata is None:
                continue
            # A name that exists but has no record of this type: empty NOERROR, like a real server.
            for address in records.get(str(qtype), []):
                reply.add_answer(RR(question.qname, question.qtype, rdata=rdata(address),
                                    ttl=self._ttl))
        return reply


def _respond(ctx: ServerContext, answerer: DnsAnswerer, data: bytes, peer: str,
             transport: str) -> bytes | None:
    try:
        query = DNSRecord.parse(data)
    except (DNSError, ValueError, IndexError, struct.error):
        return None  # the raw bytes are already in the sink records
    if query.header.qr:
        return None  # a response sent to us: nothing to answer
    for question in query.questions:
        ctx.records.dns(normalize_name(str(question.qname)), str(QTYPE[question.qtype]),
                        peer, transport)
    return answerer.answer(query).pack()


class DnsUdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, ctx: ServerContext, answerer: DnsAnswerer, port: int) -> None:
        self._ctx, self._answerer, self._port = ctx, answerer, port
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.DatagramTransport)
        self._transport = transport

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        peer = peer_host(addr)
        self._ctx.records.sink("udp", self._port, peer, self._ctx.new_conn_id("udp"), data)
        reply = _respond(self._ctx, self._answerer, data, peer, "udp")
        if reply is not None and self._transport is not None:
            if len(reply) > 512:  # classic limit without EDNS: truncate, the client retries on TCP
                reply = DNSRecord.parse(reply).truncate().pack()
            self._transport.sendto(reply, addr)


async def handle_dns_tcp(ctx: ServerContext, answerer: DnsAnswerer,
                         reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    set_nodelay(writer)
    peer, port = peer_host(writer.get_extra_info("peername")), local_port(writer)
    conn = ctx.new_conn_id("tcp")
    buf = bytearray()
    try:
        async for data in chunks(reader, ctx.config.sink_idle_timeout):
            ctx.records.sink("tcp", port, peer, conn, data)
            buf += data
            # Messages are framed by a two-byte length (RFC 1035 4.2.2).
            while len(buf) >= 2 and len(buf) >= 2 + int.from_bytes(buf[:2], "big"):
                size = int.from_bytes(buf[:2], "big")
                message = bytes(buf[2:2 + size])
                del buf[:2 + size]
                reply = _respond(ctx, answerer, message, peer, "tcp")
                if reply is None:
                    return
                writer.write(len(reply).to_bytes(2, "big") + reply)
                await writer.drain()
    finally:
        await close_quietly(writer)
