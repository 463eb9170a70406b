"""IMAP through a relay (993: IMAPS, TLS from the first byte).

IMAP lets the server speak when it likes (untagged data, IDLE), so the two directions run
apart. The server's side is a pump: each response (its lines and literals) is redacted, a
literal's count rewritten when redaction changed its length, the capabilities the relay does
not pass hidden, and the whole response written to the cage at once. The cage's side reads one
whole command at a time, its literals included: the gateway answers a synchronizing literal's
`{n}` with its own `+`, so every command is judged whole before a byte of it leaves (APPEND's
message too), and is then sent on a literal at a time after the server's own `+`.

A command whose answer decides what the cage's next line is (AUTHENTICATE, IDLE) or whose
literal needs the server's `+` waits for the server's turn: a continuation, or the command's
tagged completion. LOGIN's two strings and AUTHENTICATE's answers are where the relay's
secret is swapped in. STARTTLS and COMPRESS are never passed (either would hide the rest of
the connection from the gateway), nor a command outside data/mail_relays.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass

from agentcage.gateway.relays.settings import protocols
from agentcage.gateway.relays.wire import Conversation, Refused, RelayError

# a literal's announcement at the end of a line: {n}, non-synchronizing {n+}, literal8 ~{n}
LITERAL = re.compile(rb"(~?)\{(\d{1,10})(\+?)\}\r?\n\Z")
CAPABILITY_RESPONSE = re.compile(rb"^(\* CAPABILITY )([^\r\n]*)", re.IGNORECASE)
CAPABILITY_CODE = re.compile(rb"\[CAPABILITY ([^\]\r\n]*)\]", re.IGNORECASE)


@dataclass(frozen=True)
class Literal:
    prefix: bytes  # b"~" for literal8
    data: bytes
    non_sync: bool  # {n+}: sent without waiting for the server's "+"


@dataclass(frozen=True)
class Command:
    """A command of the cage: its text before each literal, and after the last."""

    texts: tuple[bytes, ...]
    literals: tuple[Literal, ...]

    @property
    def words(self) -> list[bytes]:
        return self.texts[0].split(None, 3)

    @property
    def tag(self) -> bytes:
        return self.words[0] if self.words else b""

    @property
    def name(self) -> str:
        words = self.words
        return words[1].upper().decode("ascii", "replace")[:16] if len(words) > 1 else ""

    def wire(self) -> bytes:
        """The command as it goes to the server."""
        out = bytearray()
        for text, literal in zip(self.texts, self.literals, strict=False):
            out += _announce(text, literal) + literal.data
        return bytes(out + self.texts[-1] + b"\r\n")


def _announce(text: bytes, literal: Literal) -> bytes:
    return b"%s%s{%d%s}\r\n" % (text, literal.prefix, len(literal.data),
                               b"+" if literal.non_sync else b"")


def allowed(command: Command) -> bool:
    p = protocols()
    if command.name not in p.imap_commands:
        return False
    if command.name == "UID":
        words = command.words
        return len(words) > 2 and words[2].upper().decode("ascii", "replace") in \
            p.imap_uid_commands
    return True


def shown_capabilities(line: bytes) -> bytes:
    """A server line with the capabilities the relay does not pass taken out of its
    CAPABILITY response or [CAPABILITY ...] code."""
    p = protocols()

    def keep(words: bytes) -> bytes:
        return b" ".join(w for w in words.split()
                         if p.imap_capability_shown(w.decode("ascii", "replace")))

    line = CAPABILITY_RESPONSE.sub(lambda m: m.group(1) + keep(m.group(2)), line)
    return CAPABILITY_CODE.sub(lambda m: b"[CAPABILITY " + keep(m.group(1)) + b"]", line)


def strings(command: Command) -> list[bytes]:
    """The arguments of a command as IMAP strings (atoms, quoted strings, literals): what
    LOGIN's user name and password are written as."""
    out: list[bytes] = []
    for i, text in enumerate(command.texts):
        out += _tokens(text)
        if i < len(command.literals):
            out.append(command.literals[i].data)
    return out[2:]  # past the tag and the command's name


def _tokens(text: bytes) -> list[bytes]:
    tokens: list[bytes] = []
    i = 0
    while i < len(text):
        if text[i : i + 1] == b" ":
            i += 1
        elif text[i : i + 1] == b'"':
            value = bytearray()
            i += 1
            while i < len(text) and text[i : i + 1] != b'"':
                if text[i : i + 1] == b"\\":
                    i += 1
                value += text[i : i + 1]
                i += 1
            if i >= len(text):
                raise Refused("LOGIN: a quoted string without its end", "relay")
            tokens.append(bytes(value))
            i += 1
        else:
            end = text.find(b" ", i)
            end = len(text) if end < 0 else end
            tokens.append(text[i:end])
            i = end
    return tokens


def as_string(value: bytes) -> tuple[bytes, Literal | None]:
    """`value` written as an IMAP quoted string, or (when it cannot be one: 8-bit data) as a
    synchronizing literal."""
    if all(0 < c < 0x80 for c in value):
        return b'"' + value.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"', None
    return b"", Literal(b"", value, False)


class ServerSide:
    """The pump of the server's responses to the cage, and the turns the cage's side waits
    for."""

    def __init__(self, conv: Conversation):
        self.conv = conv
        self._waiting: tuple[bytes, asyncio.Future[bool], bool] | None = None
        self.logins: dict[bytes, str] = {}  # tag -> the login awaiting its outcome

    async def turn(self, tag: bytes, forward: bool) -> bool:
        """Until the server answers the command `tag`: True for a continuation ("+", passed
        on to the cage when `forward`), False for its tagged completion (passed on)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting = (tag, future, forward)
        try:
            async with asyncio.timeout(self.conv.limits.reply_seconds):
                return await future
        except TimeoutError:
            raise RelayError(f"the server did not answer within "
                             f"{self.conv.limits.reply_seconds:g} s") from None
        finally:
            self._waiting = None

    def _wake(self, value: bool) -> None:
        if self._waiting is not None and not self._waiting[1].done():
            self._waiting[1].set_result(value)

    async def pump(self) -> None:
        conv = self.conv
        limits = conv.limits
        try:
            while True:
                line = await conv.server.line(limits.idle_seconds)
                if not line:
                    return
                if line[:1] == b"+" and self._waiting is not None:
                    if self._waiting[2]:
                        await conv.to_cage(line)
                    self._wake(True)
                    continue
                response, held = bytearray(), 0
                first = line
                while (m := LITERAL.search(line)) is not None:
                    held += int(m.group(2))
                    if held > limits.server_literal_bytes:
                        raise RelayError(f"a response of the server over "
                                         f"{limits.server_literal_bytes} bytes of literals")
                    data = conv.redact(await conv.server.exactly(int(m.group(2)),
                                                                 limits.reply_seconds))
                    response += _announce(conv.redact(line[: m.start()]),
                                          Literal(m.group(1), data, False)) + data
                    line = await conv.server.line(limits.reply_seconds)
                    if not line:
                        raise RelayError("the server closed in the middle of a response")
                response += conv.redact(shown_capabilities(line) if not response else line)
                await conv.cage.send(bytes(response))
                self._completed(first)
        finally:
            self._wake(False)

    def _completed(self, first: bytes) -> None:
        """A tagged completion: wake the turn that waits for it, audit a login's outcome."""
        tag, _, rest = first.partition(b" ")
        if self._waiting is not None and tag == self._waiting[0]:
            self._wake(False)
        method = self.logins.pop(tag, None)
        if method is not None:
            status = rest.split(None, 1)[0].upper() if rest.strip() else b""
            accepted = status == b"OK"
            self.conv.record("allowed" if accepted else "flagged",
                             f"{method}: {'accepted' if accepted else 'refused'} by the server",
                             method=method, injected=tuple(sorted(self.conv.injected)))


class CageSide:
    def __init__(self, conv: Conversation, server: ServerSide):
        self.conv, self.server = conv, server

    async def read(self) -> Command | None:
        """One whole command of the cage, its literals taken (a synchronizing one answered
        with the gateway's own "+"); None when the cage closed between commands."""
        conv, limits = self.conv, self.conv.limits
        line = await conv.cage.line(limits.idle_seconds)
        if not line:
            return None
        texts: list[bytes] = []
        literals: list[Literal] = []
        held = 0
        while (m := LITERAL.search(line)) is not None:
            size = int(m.group(2))
            held += size
            if held > limits.message_bytes:
                raise Refused(f"a command over {limits.message_bytes} bytes", "body-size")
            if not m.group(3):
                await conv.cage.send(b"+ go ahead\r\n")
            texts.append(line[: m.start()])
            literals.append(Literal(m.group(1), await conv.cage.exactly(size,
                                                                        limits.idle_seconds),
                                    bool(m.group(3))))
            line = await conv.cage.line(limits.idle_seconds)
            if not line:
                raise RelayError("the cage closed in the middle of a command")
        texts.append(line.rstrip(b"\r\n"))
        return Command(tuple(texts), tuple(literals))

    async def send(self, command: Command) -> bool:
        """The command to the server, a synchronizing literal only after its "+"; False when
        the server refused it before its end (its answer went to the cage)."""
        server = self.conv.server
        for text, literal in zip(command.texts, command.literals, strict=False):
            await server.send(_announce(text, literal))
            if not literal.non_sync and not await self.server.turn(command.tag, forward=False):
                return False
            await server.send(literal.data)
        await server.send(command.texts[-1] + b"\r\n")
        return True

    async def run(self) -> None:
        conv = self.conv
        while (command := await self.read()) is not None:
            name = command.name
            if not command.tag or not allowed(command):
                conv.record("flagged", f"{name or 'an empty command'}: not relayed",
                            method=name)
                await conv.cage.send((command.tag or b"*")
                                     + b" NO [agentcage] command not relayed\r\n")
                continue
            conv.commands[name] += 1
            if name == "LOGIN":
                await self._login(command)
            elif name == "AUTHENTICATE":
                await self._authenticate(command)
            else:
                await self._plain(command)

    async def _plain(self, command: Command) -> None:
        conv = self.conv
        wire = command.wire()
        inspectors = conv.judge(command.name, wire)
        if command.name == "APPEND":
            conv.messages += 1
        # the command as sent, but of APPEND only its mailbox: never a message
        shown = b" ".join(command.words[:3]) if command.name == "APPEND" else command.texts[0]
        conv.record("allowed", command.name, method=command.name,
                    path=shown.decode("utf-8", "replace")[:512], inspectors=inspectors,
                    bytes=len(wire))
        if not await self.send(command) or command.name != "IDLE":
            return
        if await self.server.turn(command.tag, forward=True):  # "+ idling", passed on
            done = await conv.cage.line(conv.limits.idle_seconds)
            if done and done.strip().upper() != b"DONE":
                raise Refused("IDLE: the cage sent something else than DONE", "relay")
            await conv.server.send(done or b"DONE\r\n")

    async def _login(self, command: Command) -> None:
        conv = self.conv
        args = strings(command)
        if len(args) != 2:
            raise Refused("LOGIN: not a user name and a password", "relay")
        texts, literals = [command.tag + b" LOGIN"], []
        for value in [conv.login("LOGIN", arg) for arg in args]:
            quoted, literal = as_string(value)
            if literal is None:
                texts[-1] += b" " + quoted
            else:
                texts[-1] += b" "
                literals.append(literal)
                texts.append(b"")
        self.server.logins[command.tag] = "LOGIN"
        conv.record("allowed", "LOGIN: the login goes to the server", method="LOGIN",
                    injected=tuple(sorted(conv.injected)))
        await self.send(Command(tuple(texts), tuple(literals)))

    async def _authenticate(self, command: Command) -> None:
        conv = self.conv
        words = command.texts[0].split()
        mechanism = words[2].upper().decode("ascii", "replace")[:20] if len(words) > 2 else ""
        method = f"AUTHENTICATE {mechanism}".strip()
        if command.literals or len(words) > 4 or mechanism not in protocols().mechanisms:
            conv.record("flagged", f"{method}: only PLAIN and LOGIN logins are relayed",
                        method=method)
            await conv.cage.send(command.tag + b" NO [agentcage] only PLAIN and LOGIN "
                                 b"logins are relayed\r\n")
            return
        line = b"%s AUTHENTICATE %s" % (command.tag, mechanism.encode())
        if len(words) == 4:  # SASL-IR: the first answer on the command's line
            line += b" " + conv.login_b64(method, words[3])
        self.server.logins[command.tag] = method
        conv.record("allowed", f"{method}: the login goes to the server", method=method,
                    injected=tuple(sorted(conv.injected)))
        await conv.server.send(line + b"\r\n")
        while await self.server.turn(command.tag, forward=True):
            answer = await conv.cage.line(conv.limits.idle_seconds)
            if not answer:
                return
            if answer.strip() == b"*":
                await conv.server.send(b"*\r\n")
            else:
                await conv.server.send(conv.login_b64(method, answer.strip()) + b"\r\n")


async def relay(conv: Conversation) -> None:
    """The cage's IMAP session with the server, until either side ends it (or fails: the
    first failure is raised, and the other side stopped)."""
    server = ServerSide(conv)
    tasks = [asyncio.create_task(server.pump()), asyncio.create_task(CageSide(conv, server).run())]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
