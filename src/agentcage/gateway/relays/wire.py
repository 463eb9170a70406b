"""One relayed mail connection: its two ends, read a line or a literal at a time within bounds,
and what every protocol does to what passes (the inspectors, the login's swap, redaction, the
audit). The protocols (imap.py, smtp.py) say only where a login is and where a message is.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import ssl
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


# The watcher's ear (Watcher.relayed): told of what the cage sends a mail server (host, port,
# the command, its bytes); why it must not go, or None
Watch = Callable[[str, int, str, bytes], str | None]


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
    """One side of the connection (the cage's or the server's): its bytes read into a buffer
    of the relay's own, and its TLS done here, over memory (an SSLObject), not by asyncio.
    So TLS begins exactly where the protocol says: a byte that came before it (a plaintext
    command after STARTTLS: the classic injection) is refused, never read as if it had come
    through TLS; and a message is found in the buffer, not read a line at a time."""

    CHUNK = 64 * 1024

    def __init__(self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.name, self._reader, self.writer = name, reader, writer
        self._buffer = bytearray()  # what this side sent (decrypted), not yet taken
        self._tls: ssl.SSLObject | None = None
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.received = 0  # bytes read from this side
        self.sent = 0  # bytes written to it

    async def start_tls(self, context: ssl.SSLContext, *, server_side: bool, timeout: float,
                        server_hostname: str | None = None) -> None:
        """TLS from here on (its handshake done within `timeout`). Refused when this side
        already sent more than the protocol allowed before it."""
        if self._buffer:
            raise RelayError(f"the {self.name} sent data before TLS began")
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=server_side,
                                     server_hostname=server_hostname)
        try:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        self._tls.do_handshake()
                        break
                    except ssl.SSLWantReadError:
                        await self._flush()
                        if not await self._feed():
                            raise RelayError(f"the {self.name} closed during the TLS "
                                             "handshake") from None
                    except ssl.SSLError:
                        with contextlib.suppress(OSError):
                            await self._flush()  # the alert that says why
                        raise
        except TimeoutError:
            raise RelayError(f"no TLS handshake with the {self.name} within {timeout:g} s") \
                from None
        await self._flush()

    async def _feed(self) -> bool:
        """Raw bytes from the socket into TLS; False at its end."""
        data = await self._reader.read(self.CHUNK)
        if not data:
            self._incoming.write_eof()
            return False
        self._incoming.write(data)
        return True

    async def _flush(self) -> None:
        if self._outgoing.pending:
            self.writer.write(self._outgoing.read())
            await self.writer.drain()

    async def _fill(self) -> bool:
        """More of what this side sent into the buffer; False at its end."""
        if self._tls is None:
            data = await self._reader.read(self.CHUNK)
        else:
            while True:
                try:
                    data = self._tls.read(self.CHUNK)
                    break
                except ssl.SSLWantReadError:
                    await self._flush()  # what TLS itself has to say (a key update)
                    if not await self._feed():
                        return False
                except ssl.SSLZeroReturnError:
                    return False
            await self._flush()
        self._buffer += data
        self.received += len(data)
        return bool(data)

    async def _more(self, timeout: float, what: str) -> bool:
        try:
            async with asyncio.timeout(timeout):
                return await self._fill()
        except TimeoutError:
            raise RelayError(f"the {self.name} was silent for {timeout:g} s") from None
        except ssl.SSLError as e:
            raise RelayError(f"TLS with the {self.name} failed in {what}: "
                             f"{e.reason or e}") from None

    def _take(self, end: int, skip: int | None = None) -> bytes:
        data = bytes(self._buffer[:end])
        del self._buffer[: end if skip is None else skip]
        return data

    async def line(self, timeout: float) -> bytes:
        """One line, its end included; b"" when the side closed between lines."""
        scan = 0
        while (found := self._buffer.find(b"\n", scan)) < 0:
            if len(self._buffer) > LINE_LIMIT:
                raise RelayError(f"a line from the {self.name} over {LINE_LIMIT} bytes")
            scan = len(self._buffer)
            if not await self._more(timeout, "a line"):
                if self._buffer:
                    raise RelayError(f"the {self.name} closed in the middle of a line")
                return b""
        return self._take(found + 1)

    async def exactly(self, size: int, timeout: float) -> bytes:
        while len(self._buffer) < size:
            if not await self._more(timeout, "a literal"):
                raise RelayError(f"the {self.name} closed in the middle of a literal")
        return self._take(size)

    async def until_line(self, marker: bytes, timeout: float, limit: int) -> bytes | None:
        """Everything before the first line that is exactly `marker` (taken too: SMTP's
        end of data, ".\r\n"); None once more than `limit` bytes came without it."""
        scan = 0
        while True:
            if self._buffer.startswith(marker):
                return self._take(0, len(marker))
            found = self._buffer.find(b"\n" + marker, scan)
            if found >= 0:
                return self._take(found + 1, found + 1 + len(marker))
            if len(self._buffer) > limit:
                return None
            scan = max(0, len(self._buffer) - len(marker))
            if not await self._more(timeout, "a message"):
                raise RelayError(f"the {self.name} closed in the middle of a message")

    async def send(self, data: bytes) -> None:
        if self._tls is None:
            self.writer.write(data)
        else:
            view = memoryview(data)
            while view:
                view = view[self._tls.write(view):]
            self.writer.write(self._outgoing.read())
        await self.writer.drain()
        self.sent += len(data)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


def shut(policy: Policy) -> str | None:
    """Why nothing may go to a mail server now, or None. The relays' hosts are cage.yaml's
    `relays`, not the allowlist, but what narrows the whole cage narrows them too: a policy
    that blocks all (domains.json unreadable) and the watcher's quarantine, which leaves the
    model's hosts alone reachable (a mail host is never one)."""
    if policy.deny_reason is not None:
        return policy.deny_reason
    if policy.quarantined:
        return "quarantined by the watcher"
    return None


class Conversation:
    """What passes between the cage and one mail server, for the protocol in charge of it."""

    def __init__(self, relay: RelaySettings, port: int, kind: PortKind, cage: End, server: End,
                 armour: Callable[[], Armour], policy: Callable[[], Policy],
                 audit: Callable[[AuditRecord], None], peer: str, limits: Limits,
                 watch: Watch | None = None):
        self.relay, self.port, self.kind = relay, port, kind
        self.cage, self.server = cage, server
        self._armour, self._policy, self._audit = armour, policy, audit
        self._watch = watch
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
        message): their body phase, as on an HTTP body toward this host. Refused on a block,
        and while the cage's policy refuses everything (see `shut`). Then the watcher's
        budgets are told of it (what a mail carries counts as a request's body does), and it
        is refused if what they found narrowed the cage so far (a quarantine begun)."""
        why = shut(self._policy())
        if why is not None:
            raise Refused(f"{method}: {why}", "policy")
        view = RequestView(method=method, scheme=self.kind.protocol, host=self.host,
                           port=self.port, path="", body=data)
        decisions = run_chain(self._armour().chain, view,
                              InspectionContext(self._policy(), time.time()), phase="body")
        records = tuple(d.as_record() for d in decisions)
        block = first_block(decisions)
        if block is not None:
            raise Refused(f"{method}: {block.reason}", block.inspector, records)
        if self._watch is not None:  # counted by the watcher's budgets as a request is
            why = self._watch(self.host, self.port, method, data)
            if why is not None:
                raise Refused(f"{method}: {why}", "watcher", records)
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
