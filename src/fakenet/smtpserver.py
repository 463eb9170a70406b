"""A small SMTP server: SMTPS (465, TLS from the first byte) and submission (587, STARTTLS
required before AUTH), speaking EHLO, STARTTLS, AUTH PLAIN and LOGIN (with or without an
initial response), MAIL, RCPT, DATA, RSET, NOOP and QUIT. Mail needs a login, as a
submission server's does. Its EHLO offers what a relay must not pass on (PIPELINING, CHUNKING,
AUTH CRAM-MD5). Every byte it reads is recorded (sink records, proto "smtps" or "smtp"), and
each login and message as a mail record; a message to an account's address lands in that
account's INBOX (imapserver.py serves it).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ssl

from fakenet.context import ServerContext, close_quietly, local_port, peer_host
from fakenet.mailstore import MailStore, Session, sni_of


async def handle_smtp(ctx: ServerContext, store: MailStore, tls: ssl.SSLContext, implicit: bool,
                      reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    session = Session(ctx, "smtps" if implicit else "smtp", local_port(writer),
                      peer_host(writer.get_extra_info("peername")), reader, writer)
    try:
        await session.send(b"220 fakenet ESMTP ready\r\n")
        await _serve(session, store, tls, secure=implicit)
    except (ConnectionError, OSError):
        pass
    finally:
        await close_quietly(writer)


def _ehlo(secure: bool) -> bytes:
    keywords = [b"PIPELINING", b"SIZE 10485760", b"8BITMIME", b"CHUNKING"]
    keywords += [b"AUTH CRAM-MD5 PLAIN LOGIN"] if secure else [b"STARTTLS"]
    return b"250-fakenet\r\n" + b"".join(
        b"250" + (b" " if i == len(keywords) - 1 else b"-") + k + b"\r\n"
        for i, k in enumerate(keywords))


async def _serve(session: Session, store: MailStore, tls: ssl.SSLContext, secure: bool) -> None:
    user: str | None = None
    sender, recipients = "", list[str]()
    while line := await session.line():
        verb, _, arg = line.strip().partition(b" ")
        verb = verb.upper()
        if verb in (b"EHLO", b"HELO"):
            await session.send(_ehlo(secure) if verb == b"EHLO" else b"250 fakenet\r\n")
        elif verb == b"STARTTLS" and not secure:
            await session.send(b"220 2.0.0 Ready to start TLS\r\n")
            await session.writer.start_tls(tls)
            secure, session.sni = True, sni_of(session.writer)
        elif verb == b"AUTH" and secure:
            user = await _auth(session, arg.split(), store)
        elif verb == b"MAIL" and user is not None:
            sender, recipients = arg.decode("utf-8", "replace"), []
            await session.send(b"250 2.1.0 OK\r\n")
        elif verb == b"RCPT" and user is not None and sender:
            recipients.append(arg.decode("utf-8", "replace").split(":", 1)[-1].strip(" <>"))
            await session.send(b"250 2.1.5 OK\r\n")
        elif verb == b"DATA" and recipients:
            await session.send(b"354 End data with <CR><LF>.<CR><LF>\r\n")
            message = await _message(session)
            if message is None:
                return
            store.deliver(recipients, message)
            session.event("message", user=user, mail_from=sender, rcpt_to=recipients,
                          data=message)
            sender, recipients = "", []
            await session.send(b"250 2.0.0 OK queued\r\n")
        elif verb in (b"MAIL", b"RCPT", b"DATA"):
            await session.send(b"530 5.7.0 Authentication required\r\n")
        elif verb == b"RSET":
            sender, recipients = "", []
            await session.send(b"250 2.0.0 OK\r\n")
        elif verb == b"NOOP":
            await session.send(b"250 2.0.0 OK\r\n")
        elif verb == b"QUIT":
            await session.send(b"221 2.0.0 Bye\r\n")
            return
        else:
            session.event("refused", command=verb.decode("latin-1"))
            await session.send(b"502 5.5.2 command not supported here\r\n")


async def _message(session: Session) -> bytes | None:
    message = bytearray()
    while True:
        line = await session.line()
        if not line:
            return None
        if line in (b".\r\n", b".\n"):
            return bytes(message)
        message += line[1:] if line.startswith(b"..") else line


async def _auth(session: Session, words: list[bytes], store: MailStore) -> str | None:
    mechanism = words[0].upper().decode("latin-1") if words else ""
    if mechanism not in ("PLAIN", "LOGIN"):
        await session.send(b"504 5.5.4 mechanism not supported here\r\n")
        return None
    answers = words[1:2]
    prompts = [b"", base64.b64encode(b"Username:"), base64.b64encode(b"Password:")]
    wanted = 1 if mechanism == "PLAIN" else 2
    while len(answers) < wanted:
        prompt = b"" if mechanism == "PLAIN" else prompts[len(answers) + 1]
        await session.send(b"334 " + prompt + b"\r\n")
        answer = (await session.line()).strip()
        if answer in (b"*", b""):
            await session.send(b"501 5.7.0 AUTH cancelled\r\n")
            return None
        answers.append(answer)
    try:
        decoded = [base64.b64decode(a, validate=True) for a in answers]
    except (binascii.Error, ValueError):
        await session.send(b"501 5.5.2 not base64\r\n")
        return None
    parts = decoded[0].split(b"\0") if mechanism == "PLAIN" else [b"", *decoded]
    if len(parts) != 3:
        await session.send(b"501 5.5.2 not a PLAIN answer\r\n")
        return None
    user, password = parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
    ok = store.login(user, password)
    session.event("login", mechanism=f"AUTH {mechanism}", user=user, password=password, ok=ok)
    said = b" (password " + parts[2] + b")"
    if ok:
        await session.send(b"235 2.7.0 Authentication successful" + said + b"\r\n")
        return user
    await session.send(b"535 5.7.8 Authentication credentials invalid" + said + b"\r\n")
    return None
