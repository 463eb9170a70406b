"""What the fake mail servers share (imapserver.py, smtpserver.py): the accounts a test set
(`FakeInternet.set_mail_account`, read at every login), the mailboxes (in the server process's
memory: what SMTP delivers to an account, IMAP serves), and the line and literal reading
both need.

Each account's INBOX starts with one message that holds the account's password, and both
servers say the password they were given in their answer to a login, as a careless server
could: what a test needs to show that whatever the server echoes reaches a client behind the
cage's gateway as the placeholder.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from fakenet.context import ServerContext

LINE_LIMIT = 64 * 1024
IDLE_TIMEOUT = 60.0


def mail_tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    context.sni_callback = _remember_sni
    return context


def _remember_sni(ssl_object: ssl.SSLObject, server_name: str | None,
                  _context: ssl.SSLContext) -> None:
    ssl_object.fakenet_sni = server_name  # type: ignore[attr-defined]


def sni_of(writer: asyncio.StreamWriter) -> str | None:
    ssl_object = writer.get_extra_info("ssl_object")
    return getattr(ssl_object, "fakenet_sni", None) if ssl_object is not None else None


def welcome(user: str, password: str) -> bytes:
    return (f"From: postmaster@mail.example.test\r\nTo: {user}\r\nSubject: welcome\r\n\r\n"
            f"Your password is {password}\r\n").encode()


@dataclass
class MailStore:
    accounts_file: str | None
    mailboxes: dict[str, list[bytes]] = field(default_factory=dict)

    def password(self, user: str) -> str | None:
        if not self.accounts_file:
            return None
        try:
            accounts = json.loads(Path(self.accounts_file).read_text())
        except (OSError, ValueError):
            return None
        password = accounts.get(user)
        return password if isinstance(password, str) else None

    def login(self, user: str, password: str) -> bool:
        expected = self.password(user)
        if expected is None or password != expected:
            return False
        self.mailboxes.setdefault(user, [welcome(user, expected)])
        return True

    def deliver(self, recipients: list[str], message: bytes) -> None:
        for address in recipients:
            if self.password(address) is not None:
                self.mailboxes.setdefault(address, [welcome(address, self.password(address)
                                                            or "")]).append(message)


class Session:
    """One connection of a mail server: its reader and writer, and what it received recorded
    (the bytes as sink records under `proto`, events as mail records)."""

    def __init__(self, ctx: ServerContext, proto: str, port: int, peer: str,
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.ctx, self.proto, self.port, self.peer = ctx, proto, port, peer
        self.reader, self.writer = reader, writer
        self.conn = ctx.new_conn_id(proto)
        self.sni = sni_of(writer)

    async def line(self) -> bytes:
        try:
            data = await asyncio.wait_for(self.reader.readuntil(b"\n"), IDLE_TIMEOUT)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError, OSError):
            return b""
        self.ctx.records.sink(self.proto, self.port, self.peer, self.conn, data)
        return data

    async def exactly(self, size: int) -> bytes:
        try:
            data = await asyncio.wait_for(self.reader.readexactly(size), IDLE_TIMEOUT)
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError, OSError):
            return b""
        self.ctx.records.sink(self.proto, self.port, self.peer, self.conn, data)
        return data

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    def event(self, event: str, **fields: object) -> None:
        self.ctx.records.mail({"proto": self.proto, "port": self.port, "peer": self.peer,
                               "sni": self.sni, "event": event, **fields})
