"""The cage's DNS server. It never forwards a query: no name the agent chooses leaves the gateway.

Allowed names get an A record pointing at the gateway itself (the proxy resolves the real
upstream later, by itself, only for allowed names), and so do the mail relays' hosts (the
relays listen on the gateway's address, see relays/); every other name gets the sinkhole address
198.51.100.1 (or NXDOMAIN), at once. AAAA (IPv6 is off) and other types get an empty answer.
Every query is audited with its decision before it is answered; one that cannot be audited
gets SERVFAIL.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import Callable

from dnslib import QTYPE, RCODE, RR, A, DNSRecord

from agentcage.gateway.audit import AuditRecord
from agentcage.gateway.settings import SINKHOLE_ADDRESS
from agentcage.policy import Policy

ANSWER_TTL = 5


class CageResolver:
    def __init__(
        self,
        gateway_address: str,
        policy: Callable[[], Policy],
        audit: Callable[[AuditRecord], None],
        blocked_answer: str = "sinkhole",
        served_here: frozenset[str] = frozenset(),
        relayed: frozenset[str] = frozenset(),
    ):
        """`served_here`: names the gateway answers itself (the policy API's): answered with
        its own address, never looked up anywhere. `relayed`: the mail relays' hosts, answered
        with the gateway's address too (only their relay ports lead anywhere: the proxy's
        policy still decides HTTP to them)."""
        self.gateway_address = gateway_address
        self.policy = policy
        self.audit = audit
        self.blocked_answer = blocked_answer
        self.served_here = served_here
        self.relayed = relayed

    def answer(self, data: bytes) -> bytes | None:
        """The reply to one wire-format query (None: drop it, it is not DNS)."""
        try:
            query = DNSRecord.parse(data)
        except Exception:
            return None
        reply = query.reply()
        if len(query.questions) != 1:
            reply.header.rcode = RCODE.FORMERR
            return reply.pack()
        question = query.questions[0]
        name = str(question.qname).rstrip(".").lower()
        qtype = QTYPE.get(question.qtype, str(question.qtype))
        try:
            if name in self.served_here:
                allowed, reason = True, "the cage's policy API (answered by the gateway)"
            elif name in self.relayed:
                allowed, reason = True, "a mail relay of the cage (answered by the gateway)"
            else:
                verdict = self.policy().decide(name)
                allowed, reason = verdict.allowed, verdict.reason
        except Exception as e:  # fail closed
            allowed, reason = False, f"resolver error: {type(e).__name__}"
        try:  # audited before it is answered: a query that cannot be audited is refused
            self.audit(AuditRecord("dns", "allowed" if allowed else "blocked", reason,
                                   host=name, method=qtype, by="resolver"))
        except Exception:
            refused = query.reply()
            refused.header.rcode = RCODE.SERVFAIL
            return refused.pack()
        if allowed:
            if question.qtype == QTYPE.A:
                reply.add_answer(RR(question.qname, QTYPE.A, rdata=A(self.gateway_address),
                                    ttl=ANSWER_TTL))
        elif self.blocked_answer == "nxdomain":
            reply.header.rcode = RCODE.NXDOMAIN
        elif question.qtype == QTYPE.A:
            reply.add_answer(RR(question.qname, QTYPE.A, rdata=A(SINKHOLE_ADDRESS),
                                ttl=ANSWER_TTL))
        return reply.pack()


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, resolver: CageResolver):
        self.resolver = resolver
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        reply = self.resolver.answer(data)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)


async def _tcp_client(resolver: CageResolver, reader, writer) -> None:
    try:
        while True:
            async with asyncio.timeout(10):
                size = struct.unpack("!H", await reader.readexactly(2))[0]
                data = await reader.readexactly(size)
            reply = resolver.answer(data)
            if reply is None:
                break
            writer.write(struct.pack("!H", len(reply)) + reply)
            await writer.drain()
    except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve(resolver: CageResolver, host: str, port: int):
    """Start UDP and TCP listeners; returns (udp transport, tcp server)."""
    loop = asyncio.get_running_loop()
    udp, _ = await loop.create_datagram_endpoint(lambda: _Udp(resolver), local_addr=(host, port))
    tcp = await asyncio.start_server(lambda r, w: _tcp_client(resolver, r, w), host, port)
    return udp, tcp


class ResolverThread:
    """The resolver on its own thread and event loop. On the proxy's loop, every answer waited
    behind whatever the proxy was doing: under 200 concurrent TLS connections that was seconds,
    near the cage's resolver timeout. Here an answer waits at most for the interpreter to
    switch threads. The policy is read through one reference and the audit log takes a lock,
    so both are safe to share. Create it from the thread that entered the gateway's network
    namespace: a new thread inherits its creator's."""

    def __init__(self, resolver: CageResolver, host: str, port: int):
        self.resolver, self.host, self.port = resolver, host, port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Listen, or raise what stopped the listeners from starting."""
        self._thread = threading.Thread(target=self._run, name="cage-resolver", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise RuntimeError("the resolver did not start")
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        try:
            udp, tcp = loop.run_until_complete(serve(self.resolver, self.host, self.port))
        except BaseException as e:
            self._error = e
            self._started.set()
            loop.close()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            udp.close()
            tcp.close()
            loop.run_until_complete(tcp.wait_closed())
            loop.close()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
