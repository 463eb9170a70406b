"""A small IMAPS server (port 993): enough IMAP4rev1 for a client's login (LOGIN, AUTHENTICATE
PLAIN and LOGIN, with or without an initial response), SELECT, FETCH, APPEND, IDLE and LOGOUT.
Python's standard library has none. Its greeting advertises what a real server might and a
relay must not pass on (STARTTLS, COMPRESS=DEFLATE, AUTH=CRAM-MD5); it refuses them all the
same. Every byte it reads is recorded (sink records, proto "imaps"), and each login and
appended message as a mail record.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re

from fakenet.context import ServerContext, close_quietly, local_port, peer_host
from fakenet.mailstore import MailStore, Session

CAPABILITIES = (b"IMAP4rev1 LITERAL+ IDLE AUTH=PLAIN AUTH=LOGIN AUTH=CRAM-MD5 STARTTLS "
                b"COMPRESS=DEFLATE")
_LITERAL = re.compile(rb"\{(\d{1,9})(\+?)\}\r?\n\Z")


async def handle_imaps(ctx: ServerContext, store: MailStore, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
    session = Session(ctx, "imaps", local_port(writer), peer_host(writer.get_extra_info(
        "peername")), reader, writer)
    try:
        await session.send(b"* OK [CAPABILITY " + CAPABILITIES + b"] fakenet IMAP ready\r\n")
        await _serve(session, store)
    except (ConnectionError, OSError):
        pass
    finally:
        await close_quietly(writer)


async def _command(session: Session) -> tuple[bytes, list[bytes]] | None:
    """One command: its line(s) with each literal replaced by `{}`, and the literals."""
    line = await session.line()
    if not line:
        return None
    text, literals = b"", []
    while (m := _LITERAL.search(line)) is not None:
        if not m.group(2):
            await session.send(b"+ Ready for literal data\r\n")
        literals.append(await session.exactly(int(m.group(1))))
        text += line[: m.start()] + b"{}"
        line = await session.line()
        if not line:
            return None
    return text + line.rstrip(b"\r\n"), literals


def _strings(text: bytes, literals: list[bytes]) -> list[bytes]:
    """Atoms, quoted strings and literals of a command's arguments, in order."""
    out, pending = [], list(literals)
    for m in re.finditer(rb'"((?:[^"\\]|\\.)*)"|\{\}|(\S+)', text):
        if m.group(0) == b"{}":
            out.append(pending.pop(0) if pending else b"")
        elif m.group(1) is not None:
            out.append(re.sub(rb"\\(.)", rb"\1", m.group(1)))
        else:
            out.append(m.group(2))
    return out


async def _serve(session: Session, store: MailStore) -> None:
    user: str | None = None
    mailbox: list[bytes] = []
    while (command := await _command(session)) is not None:
        text, literals = command
        words = _strings(text, literals)
        if len(words) < 2:
            await session.send(b"* BAD no command\r\n")
            continue
        tag, name, args = words[0], words[1].upper(), words[2:]
        if name == b"CAPABILITY":
            await session.send(b"* CAPABILITY " + CAPABILITIES + b"\r\n" + tag
                               + b" OK CAPABILITY completed\r\n")
        elif name == b"NOOP":
            await session.send(tag + b" OK NOOP completed\r\n")
        elif name == b"LOGIN" and len(args) == 2:
            user = await _login(session, tag, "LOGIN", args[0], args[1], store)
        elif name == b"AUTHENTICATE" and args and args[0].upper() in (b"PLAIN", b"LOGIN"):
            user = await _authenticate(session, tag, args, store)
        elif name in (b"SELECT", b"EXAMINE") and user is not None:
            mailbox = store.mailboxes.get(user, [])
            await session.send(b"* %d EXISTS\r\n* 0 RECENT\r\n* FLAGS (\\Seen)\r\n"
                               b"%s OK [READ-WRITE] SELECT completed\r\n" % (len(mailbox), tag))
        elif name == b"FETCH" and user is not None and args and args[0].isdigit():
            await _fetch(session, tag, mailbox, int(args[0]))
        elif name == b"APPEND" and user is not None and literals:
            store.mailboxes.setdefault(user, []).append(literals[-1])
            session.event("message", user=user, data=literals[-1])
            await session.send(tag + b" OK APPEND completed\r\n")
        elif name == b"IDLE" and user is not None:
            await session.send(b"+ idling\r\n")
            done = await session.line()
            session.event("idle", done=done.decode("latin-1").strip())
            await session.send(tag + b" OK IDLE terminated\r\n")
        elif name == b"LOGOUT":
            await session.send(b"* BYE fakenet logging out\r\n" + tag + b" OK LOGOUT completed\r\n")
            return
        else:
            session.event("refused", command=name.decode("latin-1"))
            await session.send(tag + b" BAD " + name + b" not supported here\r\n")


async def _fetch(session: Session, tag: bytes, mailbox: list[bytes], number: int) -> None:
    if not 1 <= number <= len(mailbox):
        await session.send(tag + b" NO no such message\r\n")
        return
    message = mailbox[number - 1]
    await session.send(b"* %d FETCH (RFC822 {%d}\r\n%s)\r\n%s OK FETCH completed\r\n"
                       % (number, len(message), message, tag))


async def _login(session: Session, tag: bytes, mechanism: str, user: bytes, password: bytes,
                 store: MailStore) -> str | None:
    name, secret = user.decode("utf-8", "replace"), password.decode("utf-8", "replace")
    ok = store.login(name, secret)
    session.event("login", mechanism=mechanism, user=name, password=secret, ok=ok)
    said = b" (password " + password + b")"
    if ok:
        await session.send(tag + b" OK [CAPABILITY " + CAPABILITIES + b"] logged in" + said
                           + b"\r\n")
        return name
    await session.send(tag + b" NO [AUTHENTICATIONFAILED] invalid credentials" + said + b"\r\n")
    return None


async def _authenticate(session: Session, tag: bytes, args: list[bytes],
                        store: MailStore) -> str | None:
    mechanism = args[0].upper().decode()
    answers = [args[1]] if len(args) > 1 else []
    wanted = 1 if mechanism == "PLAIN" else 2
    prompts = [b"", base64.b64encode(b"Username:"), base64.b64encode(b"Password:")]
    while len(answers) < wanted:
        prompt = b"" if mechanism == "PLAIN" else prompts[len(answers) + 1]
        await session.send(b"+ " + prompt + b"\r\n")
        answer = (await session.line()).strip()
        if answer in (b"*", b""):
            await session.send(tag + b" BAD AUTHENTICATE cancelled\r\n")
            return None
        answers.append(answer)
    try:
        decoded = [base64.b64decode(a, validate=True) for a in answers]
    except (binascii.Error, ValueError):
        await session.send(tag + b" BAD not base64\r\n")
        return None
    if mechanism == "PLAIN":
        parts = decoded[0].split(b"\0")
        if len(parts) != 3:
            await session.send(tag + b" BAD not a PLAIN answer\r\n")
            return None
        user, password = parts[1], parts[2]
    else:
        user, password = decoded
    return await _login(session, tag, f"AUTHENTICATE {mechanism}", user, password, store)
