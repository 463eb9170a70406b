"""How the gateway reaches upstreams: its own DNS client and the one place connections are made.

mitmproxy opens upstream connections with `asyncio.open_connection(name, port)`, which calls the
event loop's `create_connection`. The gateway runs mitmproxy on `GatewayEventLoop`, whose
`create_connection` is the last gate before a SYN leaves: the host must be a name the policy
allows (never an IP literal), it is resolved by the gateway's own client against the configured
DNS servers, every address must be public (or in a trusted test network) and must not be the
uplink host's own (see uplink.py), and the connect is bounded by a timeout. The address that
was checked is the address that is dialled: no time-of-check/time-of-use gap for DNS rebinding.
Every upstream socket, TCP and DNS, is made in the uplink namespace; nothing else leaves.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Callable, Sequence

from dnslib import QTYPE, RCODE, DNSRecord

from agentcage.addresses import UpstreamAddressRule, parse_ip
from agentcage.gateway.uplink import Uplink


class UpstreamRefused(ConnectionRefusedError):
    """The gateway refused to dial (policy, non-public address, resolution failure)."""


class UpstreamResolver:
    """A-record lookups against fixed servers, with a small TTL cache. No AAAA: IPv6 is off."""

    def __init__(self, servers: Sequence[str], uplink: Uplink, timeout: float = 2.0,
                 max_entries: int = 1024):
        self.servers = tuple(servers)
        self.uplink = uplink
        self.timeout = timeout
        self.max_entries = max_entries
        self._cache: dict[str, tuple[float, tuple[str, ...]]] = {}

    async def resolve(self, name: str) -> tuple[str, ...]:
        hit = self._cache.get(name)
        if hit and hit[0] > time.monotonic():
            return hit[1]
        last_error = "no DNS servers configured"
        for server in self.servers:
            try:
                addrs, ttl = await self._query(server, name)
            except (OSError, TimeoutError, ValueError) as e:
                last_error = f"{server}: {e or type(e).__name__}"
                continue
            if len(self._cache) >= self.max_entries:
                self._cache.clear()
            self._cache[name] = (time.monotonic() + max(1, min(ttl, 60)), addrs)
            return addrs
        raise UpstreamRefused(f"cannot resolve {name}: {last_error}")

    async def _query(self, server: str, name: str) -> tuple[tuple[str, ...], int]:
        loop = asyncio.get_running_loop()
        query = DNSRecord.question(name, "A")
        query.header.id = random.randrange(1, 65535)
        ip = parse_ip(server)
        family = socket.AF_INET6 if ip is not None and ip.version == 6 else socket.AF_INET
        sock = await self.uplink.socket(family, socket.SOCK_DGRAM)
        try:
            await loop.sock_connect(sock, (server, 53))
            await loop.sock_sendall(sock, query.pack())
            async with asyncio.timeout(self.timeout):
                while True:
                    data = await loop.sock_recv(sock, 4096)
                    reply = DNSRecord.parse(data)
                    if reply.header.id == query.header.id:
                        break
        finally:
            sock.close()
        if reply.header.rcode != RCODE.NOERROR:
            raise ValueError(f"{name}: {RCODE.get(reply.header.rcode)}")
        addrs = tuple(str(rr.rdata) for rr in reply.rr if rr.rtype == QTYPE.A)
        if not addrs:
            raise ValueError(f"{name}: no A record")
        ttl = min(rr.ttl for rr in reply.rr if rr.rtype == QTYPE.A)
        return addrs, ttl


class UpstreamConnector:
    """Resolve, check and dial. `name_allowed(host, port)` is the policy's stateless verdict."""

    def __init__(
        self,
        resolver: UpstreamResolver,
        addresses: UpstreamAddressRule,
        name_allowed: Callable[[str, int], str | None],
        timeout: float,
    ):
        self.resolver = resolver
        self.uplink = resolver.uplink
        self.addresses = addresses
        self.name_allowed = name_allowed
        self.timeout = timeout

    async def target(self, host: str, port: int) -> str:
        """The checked address to dial for host:port, or UpstreamRefused."""
        if parse_ip(host) is not None:
            raise UpstreamRefused(f"agentcage: refusing to dial IP literal {host}")
        if (why := self.name_allowed(host, port)) is not None:
            raise UpstreamRefused(f"agentcage: refusing {host}:{port}: {why}")
        addrs = await self.resolver.resolve(host)
        refused = [a for a in addrs if not self.addresses.allows(a)]
        if refused:
            raise UpstreamRefused(
                f"agentcage: {host} resolves to non-public address {refused[0]} (anti-rebinding)"
            )
        # Public is not enough: the host's own addresses (its public ones included) would lead
        # to the host's services. Every address is asked, as with the rule above.
        for address in addrs:
            route = await self.uplink.route(address)
            if route != "unicast":
                raise UpstreamRefused(
                    f"agentcage: {host} resolves to {address}, which the uplink routes as "
                    f"{route}, not to another machine (anti-rebinding: the host itself)"
                )
        return addrs[0]

    async def dial(self, host: str, port: int) -> socket.socket:
        """A TCP socket connected to host:port: the name checked and resolved (`target`), the
        socket made in the uplink namespace, the connect bounded by `timeout`. The one way an
        upstream connection is made: mitmproxy's (through `GatewayEventLoop`) and the mail
        relays' (gateway/relays)."""
        address = await self.target(host, port)
        ip = parse_ip(address)
        family = socket.AF_INET6 if ip is not None and ip.version == 6 else socket.AF_INET
        sock = await self.uplink.socket(family, socket.SOCK_STREAM)
        loop = asyncio.get_running_loop()
        try:
            try:
                async with asyncio.timeout(self.timeout):
                    await loop.sock_connect(sock, (address, port))
            except TimeoutError:  # said in words: mitmproxy reports str(error), empty otherwise
                raise TimeoutError(f"agentcage: connect to {host}:{port} ({address}) timed out "
                                   f"after {self.timeout} s") from None
        except BaseException:
            sock.close()
            raise
        return sock


class GatewayEventLoop(asyncio.SelectorEventLoop):
    """The event loop of the gateway process: every outbound TCP connection passes `connector`."""

    connector: UpstreamConnector | None = None

    async def create_connection(self, protocol_factory, host=None, port=None, **kwargs):
        if self.connector is None:
            raise UpstreamRefused("agentcage: no upstream connector installed")
        if kwargs.get("sock") is not None or host is None or port is None:
            raise UpstreamRefused("agentcage: only host:port connections are allowed")
        if kwargs.pop("local_addr", None) is not None:
            raise UpstreamRefused("agentcage: upstream connections choose no local address")
        sock = await self.connector.dial(str(host), int(port))
        try:
            return await super().create_connection(protocol_factory, sock=sock, **kwargs)
        except BaseException:
            sock.close()
            raise
