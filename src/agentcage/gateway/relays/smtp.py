"""SMTP through a relay: 465 (SMTPS, TLS from the first byte) and 587 (submission: the gateway
answers the cage's STARTTLS itself, and asks the server for its own before anything else).

The relay is lockstep: one command of the cage at a time is judged, sent on, and the server's
whole reply read, redacted and passed back before the cage's next line is read. So the
gateway always knows what that line is: a command, a login's answer (after a 334) or a message
(after a 354), and nothing of the cage's reaches the server in a state the gateway did not
see. PIPELINING, CHUNKING (BDAT), a second STARTTLS and the SASL mechanisms whose credentials
cannot be swapped are not passed: the EHLO answer names only what the relay relays.
"""

from __future__ import annotations

import ssl

from agentcage.gateway.relays.settings import protocols
from agentcage.gateway.relays.wire import Conversation, End, Limits, Refused, RelayError

GREETING = b"220 agentcage mail relay ESMTP\r\n"
MAX_REPLY_LINES = 128
MAX_PLAIN_COMMANDS = 16  # before STARTTLS on 587: EHLO, NOOP, RSET... then TLS or goodbye
UPSTREAM_EHLO = b"EHLO [127.0.0.1]\r\n"  # before TLS: the cage's own name is not sent unjudged


class QuitBeforeTls(Exception):
    """The cage said QUIT on 587 before STARTTLS: nothing was relayed."""


async def starttls_front(cage: End, limits: Limits) -> None:
    """The cage's side of 587 before TLS: the gateway greets, offers STARTTLS alone, and
    returns once the cage asked for it (the TLS handshake is the caller's)."""
    await cage.send(GREETING)
    for _ in range(MAX_PLAIN_COMMANDS):
        line = await cage.line(limits.handshake_seconds)
        if not line:
            raise RelayError("the cage closed before STARTTLS")
        verb = line.split(None, 1)[0].upper() if line.strip() else b""
        if verb == b"EHLO":
            await cage.send(b"250-agentcage mail relay\r\n250 STARTTLS\r\n")
        elif verb in (b"HELO", b"NOOP", b"RSET"):
            await cage.send(b"250 2.0.0 agentcage mail relay\r\n")
        elif verb == b"STARTTLS":
            await cage.send(b"220 2.0.0 Ready to start TLS\r\n")
            return
        elif verb == b"QUIT":
            await cage.send(b"221 2.0.0 Bye\r\n")
            raise QuitBeforeTls()
        else:
            await cage.send(b"530 5.7.0 Must issue a STARTTLS command first\r\n")
    raise RelayError(f"no STARTTLS in the cage's first {MAX_PLAIN_COMMANDS} commands")


async def read_reply(server: End, timeout: float) -> tuple[int, list[bytes]]:
    """One reply of the server: its code and its lines (`250-...` until `250 ...`)."""
    lines: list[bytes] = []
    while len(lines) < MAX_REPLY_LINES:
        line = await server.line(timeout)
        if not line:
            raise RelayError("the server closed the connection")
        if len(line) < 4 or not line[:3].isdigit() or line[3:4] not in (b" ", b"-", b"\r", b"\n"):
            raise RelayError("a reply from the server that is not SMTP")
        lines.append(line)
        if line[3:4] != b"-":
            return int(line[:3]), lines
    raise RelayError(f"a reply of the server over {MAX_REPLY_LINES} lines")


async def upstream_starttls(server: End, host: str, context: ssl.SSLContext,
                            limits: Limits) -> None:
    """The server's side of 587: its greeting, EHLO, STARTTLS and the TLS handshake, before
    anything of the cage's is sent (a server that offers no STARTTLS gets no login)."""
    code, lines = await read_reply(server, limits.reply_seconds)
    if code != 220:
        raise RelayError(f"the server refused the connection: {_text(lines[0])}")
    await server.send(UPSTREAM_EHLO)
    code, lines = await read_reply(server, limits.reply_seconds)
    if code != 250 or not any(line[4:].strip().upper() == b"STARTTLS" for line in lines[1:]):
        raise RelayError("the server offers no STARTTLS: the login would travel in the clear")
    await server.send(b"STARTTLS\r\n")
    code, lines = await read_reply(server, limits.reply_seconds)
    if code != 220:
        raise RelayError(f"the server refused STARTTLS: {_text(lines[0])}")
    await server.start_tls(context, server_side=False, server_hostname=host,
                           timeout=limits.handshake_seconds)


def shown_ehlo(lines: list[bytes]) -> bytes:
    """The EHLO answer as the cage gets it: the greeting line and the keywords the relay
    passes (AUTH with only the mechanisms whose credentials it swaps)."""
    kept = [lines[0][4:]]
    mechanisms = protocols().mechanisms
    for line in lines[1:]:
        words = line[4:].split()
        if not words:
            continue
        keyword = words[0].upper().decode("ascii", "replace")
        if keyword not in protocols().smtp_keywords:
            continue
        if keyword == "AUTH":
            words = [words[0], *(w for w in words[1:]
                                 if w.upper().decode("ascii", "replace") in mechanisms)]
            if len(words) == 1:
                continue
        kept.append(b" ".join(words) + b"\r\n")
    code = lines[0][:3]
    return b"".join(code + (b"-" if i < len(kept) - 1 else b" ") + text
                    for i, text in enumerate(kept))


async def relay(conv: Conversation, greeting: bool) -> None:
    """The cage's SMTP session with the server, to its end (QUIT, or either side closing).
    `greeting`: the server's greeting is still to be read (465; on 587 it came before TLS)."""
    limits = conv.limits
    if greeting:
        code, lines = await read_reply(conv.server, limits.reply_seconds)
        await conv.to_cage(b"".join(lines))
        if code != 220:
            return
    commands = protocols().smtp_commands
    envelope: dict[str, list[str]] = {"from": [], "to": []}
    while True:
        line = await conv.cage.line(limits.idle_seconds)
        if not line:
            return
        verb = _verb(line)
        if verb not in commands:
            conv.record("flagged", f"{verb or 'an empty line'}: not relayed", method=verb)
            await conv.cage.send(b"502 5.5.1 agentcage: command not relayed\r\n")
            continue
        conv.commands[verb] += 1
        if verb == "AUTH":
            await _auth(conv, line)
            continue
        if verb == "DATA":
            await _data(conv, envelope)
            envelope = {"from": [], "to": []}
            continue
        inspectors = conv.judge(verb, line)
        text = _text(line)
        if verb in ("MAIL", "RCPT"):
            envelope["from" if verb == "MAIL" else "to"].append(_address(text))
        elif verb == "RSET":
            envelope = {"from": [], "to": []}
        conv.record("allowed", verb, method=verb, path=text, inspectors=inspectors)
        await conv.server.send(line)
        code, lines = await read_reply(conv.server, limits.reply_seconds)
        await conv.to_cage(shown_ehlo(lines) if verb == "EHLO" and code == 250
                           else b"".join(lines))
        if verb == "QUIT":
            return


async def _auth(conv: Conversation, line: bytes) -> None:
    """AUTH PLAIN or LOGIN (with or without an initial response): each answer of the cage
    decoded, the relay's secret swapped in, encoded again; the outcome audited."""
    words = line.split()
    mechanism = words[1].upper().decode("ascii", "replace")[:20] if len(words) > 1 else ""
    method = f"AUTH {mechanism}".strip()
    if mechanism not in protocols().mechanisms or len(words) > 3:
        conv.record("flagged", f"{method}: only PLAIN and LOGIN logins are relayed",
                    method=method)
        await conv.cage.send(b"504 5.5.4 agentcage: only AUTH PLAIN and LOGIN are relayed\r\n")
        return
    command = b"AUTH " + mechanism.encode()
    if len(words) == 3:
        command += b" " + conv.login_b64(method, words[2])
    conv.record("allowed", f"{method}: the login goes to the server", method=method,
                injected=tuple(sorted(conv.injected)))
    await conv.server.send(command + b"\r\n")
    while True:
        code, lines = await read_reply(conv.server, conv.limits.reply_seconds)
        await conv.to_cage(b"".join(lines))
        if code != 334:
            break
        answer = await conv.cage.line(conv.limits.idle_seconds)
        if not answer:
            return
        if answer.strip() == b"*":
            await conv.server.send(b"*\r\n")
            continue
        await conv.server.send(conv.login_b64(method, answer.strip()) + b"\r\n")
    accepted = code == 235
    conv.record("allowed" if accepted else "flagged",
                f"{method}: {'accepted' if accepted else 'refused'} by the server",
                method=method, status=code, injected=tuple(sorted(conv.injected)))


async def _data(conv: Conversation, envelope: dict[str, list[str]]) -> None:
    """DATA: the whole message held (within `message_bytes`) and judged before a byte of it
    goes to the server; a blocked one is refused to the cage (554) and the connection ended
    (the server, still waiting for the message, gets none)."""
    limits = conv.limits
    conv.record("allowed", "DATA", method="DATA")
    await conv.server.send(b"DATA\r\n")
    code, lines = await read_reply(conv.server, limits.reply_seconds)
    await conv.to_cage(b"".join(lines))
    if code != 354:
        return
    message = await conv.cage.until_line(b".\r\n", limits.idle_seconds, limits.message_bytes)
    if message is None:
        await conv.cage.send(b"552 5.3.4 agentcage: message over the relay's limit\r\n")
        raise Refused(f"a message over {limits.message_bytes} bytes", "body-size")
    try:
        inspectors = conv.judge("DATA", message)
    except Refused as refused:
        await conv.cage.send(b"554 5.7.1 agentcage: blocked by " + refused.by.encode()
                             + b": " + _text(str(refused)).encode()[:400] + b"\r\n")
        raise
    conv.messages += 1
    conv.record("allowed", "message", method="DATA", inspectors=inspectors,
                bytes=len(message), mail_from=envelope["from"], rcpt_to=envelope["to"])
    await conv.server.send(message + b".\r\n")
    code, lines = await read_reply(conv.server, limits.reply_seconds)
    await conv.to_cage(b"".join(lines))


def _address(text: str) -> str:
    """The address of a MAIL FROM:<a> or RCPT TO:<a> line (its parameters left out)."""
    _, _, rest = text.partition(":")
    rest = rest.strip()
    if rest.startswith("<") and ">" in rest:
        return rest[1:rest.index(">")]
    return rest.split(" ", 1)[0]


def _verb(line: bytes) -> str:
    words = line.split(None, 1)
    return words[0].upper().decode("ascii", "replace")[:16] if words else ""


def _text(line: bytes | str) -> str:
    """A line for the audit or a reply: one line of printable text, clipped."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    return "".join(c if c.isprintable() else " " for c in text).strip()[:512]
