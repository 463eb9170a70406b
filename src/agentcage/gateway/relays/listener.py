"""The relays' listeners on the gateway's address, and what happens to each connection: TLS
from the cage (587: after the gateway's own STARTTLS), the host it names chosen, the server
dialled through the one upstream connector and its TLS verified, then the protocol's session.
Every connection is audited when it opens (before anything is dialled) and when it ends; one
that fails, or sends what may not leave, is ended on both sides and audited as blocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentcage.gateway.armour import Armour
from agentcage.gateway.audit import AuditRecord, AuditUnavailable
from agentcage.gateway.relays import imap, smtp
from agentcage.gateway.relays.settings import PortKind, RelaySettings, protocols, relay_ports
from agentcage.gateway.relays.tls import RelayTls
from agentcage.gateway.relays.wire import (
    LINE_LIMIT,
    Conversation,
    End,
    Limits,
    Refused,
    RelayError,
    Watch,
    shut,
)
from agentcage.gateway.upstream import UpstreamConnector
from agentcage.policy import Policy

BACKLOG = 64
SERVER_LITERAL_BYTES = 64 * 1024 * 1024  # one fetched message, held while it is redacted
# How long each side may be silent: an IMAP client idles up to 29 minutes (RFC 3501's
# autologout is at least 30); SMTP's own timeouts are 5 to 10 minutes (RFC 5321).
IDLE_SECONDS = {"imap": 31 * 60.0, "smtp": 10 * 60.0}
REPLY_SECONDS = {"imap": 5 * 60.0, "smtp": 10 * 60.0}


def relay_gate(relays: Sequence[RelaySettings]) -> Callable[[str, int], str | None]:
    """The relays' connector's verdict on a name: only a relay's host, on its ports."""
    targets = {(relay.host, port) for relay in relays for port in relay.ports}
    return lambda host, port: None if (host, port) in targets else "not a mail relay of the cage"


class MailRelays:
    def __init__(self, relays: Sequence[RelaySettings], address: str,
                 connector: UpstreamConnector, tls: RelayTls, armour: Callable[[], Armour],
                 policy: Callable[[], Policy], audit: Callable[[AuditRecord], None],
                 message_bytes: int, watch: Watch | None = None):
        self.relays, self.address, self.connector, self.tls = tuple(relays), address, connector, tls
        self.armour, self.policy, self.audit = armour, policy, audit
        self.watch = watch  # the watcher's budgets, when it is on
        self.message_bytes = message_bytes
        self.servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task] = set()

    async def start(self) -> None:
        """A listener on the gateway's address for every relay port (made on this thread, in
        the gateway's namespace: the cage reaches it, nothing else does)."""
        for port in relay_ports(self.relays):
            self.servers.append(await asyncio.start_server(
                functools.partial(self._accepted, port=port), self.address, port,
                limit=LINE_LIMIT, backlog=BACKLOG))

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  port: int) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer, port))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    def _record(self, decision: str, reason: str, host: str, port: int, kind: PortKind,
                peer: str, by: str = "relay", **fields: Any) -> None:
        self.audit(AuditRecord("relay", decision, reason, host=host, port=port, by=by,
                               extra={"protocol": kind.name, "peer": peer, **fields}))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     port: int) -> None:
        kind = protocols().ports[port]
        limits = Limits(self.message_bytes, SERVER_LITERAL_BYTES, IDLE_SECONDS[kind.protocol],
                        REPLY_SECONDS[kind.protocol])
        peer_info = writer.get_extra_info("peername") or ("?", 0)
        peer = f"{peer_info[0]}:{peer_info[1]}"
        cage = End("cage", reader, writer)
        hosts = {relay.host: relay for relay in self.relays if port in relay.ports}
        host, conv, server = "", None, None
        started = time.monotonic()
        ending: tuple[str, str, str, tuple[dict[str, str], ...]]
        try:
            if kind.tls == "starttls":
                await smtp.starttls_front(cage, limits)
            host = await self._tls_from_cage(cage, hosts, limits)
            why = shut(self.policy())
            if why is not None:
                raise Refused(why, "policy")
            self._record("allowed", f"{kind.name} relay to {host}", host, port, kind, peer)
            server = End("server", *await self._dial(host, port))
            if kind.tls == "implicit":
                await server.start_tls(self.tls.upstream, server_side=False,
                                       server_hostname=host, timeout=limits.handshake_seconds)
            else:
                await smtp.upstream_starttls(server, host, self.tls.upstream, limits)
            conv = Conversation(hosts[host], port, kind, cage, server, self.armour, self.policy,
                                self.audit, peer, limits, self.watch)
            if kind.protocol == "imap":
                await imap.relay(conv)
            else:
                await smtp.relay(conv, greeting=kind.tls == "implicit")
            ending = ("allowed", "closed", "relay", ())
        except smtp.QuitBeforeTls:
            ending = ("allowed", "the cage quit before STARTTLS", "relay", ())
        except Refused as e:
            ending = ("blocked", str(e), e.by, e.inspectors)
        except (RelayError, OSError, TimeoutError) as e:
            ending = ("blocked", f"relay error: {_said(e)}", "relay", ())
        except Exception as e:  # fail closed: whatever broke ends the connection, audited
            ending = ("blocked", f"relay failed: {type(e).__name__}: {e}", "relay", ())
        finally:
            cage.close()
            if server is not None:
                server.close()
        decision, reason, by, inspectors = ending
        totals: dict[str, Any] = {"seconds": round(time.monotonic() - started, 3),
                                  "bytes_from_cage": cage.received, "bytes_to_cage": cage.sent}
        if conv is not None:
            totals.update(commands=dict(conv.commands), messages=conv.messages,
                          bytes_to_server=conv.server.sent,
                          bytes_from_server=conv.server.received)
        with contextlib.suppress(AuditUnavailable):  # nothing is left to refuse
            self.audit(AuditRecord(
                "relay", decision, reason, host=host, port=port, by=by, inspectors=inspectors,
                secrets_injected=tuple(sorted(conv.injected)) if conv else (),
                secrets_redacted=tuple(sorted(conv.redacted)) if conv else (),
                extra={"protocol": kind.name, "peer": peer, **totals}))

    async def _tls_from_cage(self, cage: End, hosts: dict[str, RelaySettings],
                             limits: Limits) -> str:
        """The cage's TLS handshake, ended by the gateway; the relay host it named."""
        context, seen = self.tls.for_cage(tuple(hosts))
        try:
            await cage.start_tls(context, server_side=True, timeout=limits.handshake_seconds)
        except (OSError, RelayError) as e:
            if "asked" in seen and "host" not in seen:
                raise Refused(f"no mail relay for {seen['asked'] or 'a nameless TLS request'} "
                              "on this port", "relay") from None
            raise RelayError(f"TLS with the cage failed: {_said(e)}") from None
        host = seen.get("host")
        if host is None:
            raise RelayError("TLS with the cage named no relay")
        return host

    async def _dial(self, host: str, port: int,
                    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """host:port through the upstream connector (the name checked, resolved by the
        gateway, every address checked, the socket made in the uplink namespace)."""
        sock: socket.socket = await self.connector.dial(host, port)
        loop = asyncio.get_running_loop()
        try:
            reader = asyncio.StreamReader(limit=LINE_LIMIT)
            transport, protocol = await loop.connect_accepted_socket(
                lambda: asyncio.StreamReaderProtocol(reader), sock)
        except BaseException:
            sock.close()
            raise
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _said(error: BaseException) -> str:
    text = str(error) or getattr(error, "strerror", None) or type(error).__name__
    return text.replace("\n", " ")[:300]
