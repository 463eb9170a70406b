"""One relayed mail connection: its two ends, read a line or a literal at a time within bounds,
and what every protocol does to what passes (the inspectors, the login's swap, redaction, the
audit). The protocols (imap.py, smtp.py) say only where a login is and where a message is.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from agentcage.gateway.armour import Armour
from agentcage.gateway.audit import AuditRecord
from agentcage.gateway.relays.settings import PortKind, RelaySettings
from agentcage.inspect.chain import first_block, run_chain
from agentcage.inspect.protocol import InspectionContext, RequestView
from agentcage.policy import Policy
from agentcage.secrets.swap import without_placeholders

LINE_LIMIT = 64 * 1024  # a command or reply line; a longer one ends the connection


class RelayError(Exception):
    """The relay cannot go on: both ends are closed and the reason audited (blocked)."""

    by = "relay"
    inspectors: tuple[dict[str, str], ...] = ()


class Refused(RelayError):
    """The cage sent what may not leave (an inspector blocked it, or its login named another
    secret): closed like an error, audited with the layer that decided."""

    def __init__(self, reason: str, by: str, inspectors: tuple[dict[str, str], ...] = ()):
        super().__init__(reason)
        self.by, self.inspectors = by, inspectors


@dataclass(frozen=True)
class Limits:
    message_bytes: int  # what the cage sends in one command or message (held for the inspectors)
    server_literal_bytes: int  # one literal from the server (held for the redactor)
    idle_seconds: float  # the cage's silence between commands
    reply_seconds: float  # the server's silence when it owes an answer
    handshake_seconds: float = 30.0


class End:
    """One side of the connection (the cage's or the server's), with the bytes it sent."""

    def __init__(self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.name, self.reader, self.writer = name, reader, writer
        self.received = 0  # bytes read from this side
        self.sent = 0  # bytes written to it

    async def line(self, timeout: float) -> bytes:
        """One line, its end included; b"" when the side closed between lines."""
        try:
            async with asyncio.timeout(timeout):
                data = await self.reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            if e.partial:
                raise RelayError(f"the {self.name} closed in the middle of a line") from None
            return b""
        except asyncio.LimitOverrunError:
            raise RelayError(f"a line from the {self.name} over {LINE_LIMIT} bytes") from None
        except TimeoutError:
            raise RelayError(f"the {self.name} was silent for {timeout:g} s") from None
        self.received += len(data)
        return data

    async def exactly(self, size: int, timeout: float) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                data = await self.reader.readexactly(size)
        except asyncio.IncompleteReadError:
            raise RelayError(f"the {self.name} closed in the middle of a literal") from None
        except TimeoutError:
            raise RelayError(f"the {self.name} was silent for {timeout:g} s") from None
        self.received += len(data)
        return data

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()
        self.sent += len(data)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class Conversation:
    """What passes between the cage and one mail server, for the protocol in charge of it."""

    def __init__(self, relay: RelaySettings, port: int, kind: PortKind, cage: End, server: End,
                 armour: Callable[[], Armour], policy: Callable[[], Policy],
                 audit: Callable[[AuditRecord], None], peer: str, limits: Limits):
        self.relay, self.port, self.kind = relay, port, kind
        self.cage, self.server = cage, server
        self._armour, self._policy, self._audit = armour, policy, audit
        self.peer, self.limits = peer, limits
        self.commands: Counter[str] = Counter()
        self.messages = 0
        self.injected: set[str] = set()
        self.redacted: set[str] = set()

    @property
    def host(self) -> str:
        return self.relay.host

    def record(self, decision: str, reason: str, *, method: str = "", path: str = "",
               status: int | None = None, by: str = "relay",
               inspectors: tuple[dict[str, str], ...] = (), injected: tuple[str, ...] = (),
               redacted: tuple[str, ...] = (), **extra: object) -> None:
        """An audit record of this connection (AuditUnavailable propagates: what it audits
        is then refused, as the HTTP path does). `path`: the command as the cage sent it,
        never a login or a message."""
        self._audit(AuditRecord(
            "relay", decision, reason, host=self.host, port=self.port, method=method,
            path=path, status=status, by=by, inspectors=inspectors, secrets_injected=injected,
            secrets_redacted=redacted,
            extra={"protocol": self.kind.name, "peer": self.peer, **extra}))

    def judge(self, method: str, data: bytes) -> tuple[dict[str, str], ...]:
        """The inspectors' decisions on `data`, which the cage sends the server (a command, a
        message): their body phase, as on an HTTP body toward this host. Refused on a block."""
        view = RequestView(method=method, scheme=self.kind.protocol, host=self.host,
                           port=self.port, path="", body=data)
        decisions = run_chain(self._armour().chain, view,
                              InspectionContext(self._policy(), time.time()), phase="body")
        records = tuple(d.as_record() for d in decisions)
        block = first_block(decisions)
        if block is not None:
            raise Refused(f"{method}: {block.reason}", block.inspector, records)
        return records

    def login(self, method: str, decoded: bytes) -> bytes:
        """A login's decoded credentials with the relay's secret swapped in; the rest of them
        judged by the inspectors. Refused when they name another secret."""
        swapped = self._armour().credentials.swap(decoded, self.relay.secret)
        if swapped.blocked:
            raise Refused(f"{method}: {swapped.blocked}", "injection")
        self.judge(method, without_placeholders(decoded))
        self.injected.update(swapped.injected)
        assert isinstance(swapped.value, bytes)
        return swapped.value

    def login_b64(self, method: str, text: bytes) -> bytes:
        """One SASL answer (base64, as SMTP AUTH and IMAP AUTHENTICATE send it) with the
        relay's secret swapped in. An answer that is not base64 is refused: the gateway
        would not know what it carries."""
        if text == b"=":  # an empty initial response
            return text
        try:
            decoded = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise Refused(f"{method}: a login answer that is not base64", "relay") from None
        return base64.b64encode(self.login(method, decoded))

    def redact(self, data: bytes) -> bytes:
        """What the server sent, with every real value of the cage's secrets replaced by its
        placeholder, before the cage sees it."""
        redactor = self._armour().redactor
        if redactor.empty:
            return data
        result = redactor.redact(data)
        self.redacted.update(result.names)
        return result.data

    async def to_cage(self, data: bytes) -> None:
        await self.cage.send(self.redact(data))
