"""What `agentcage secret set|list|rm|rotate-placeholders` do, as plain functions for the CLI.

Values come in as bytes (read by `read_value` from a hidden prompt or stdin, never argv) and
never come out: listings carry names, bindings and placeholders only.
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from agentcage.secrets.book import PlaceholderBook, Rotation
from agentcage.secrets.placeholders import Placeholder, check_env_name
from agentcage.secrets.rules import InjectionRule
from agentcage.secrets.store import SecretStore


@dataclass(frozen=True)
class SecretEntry:
    name: str
    stored: bool  # False: a rule names it but no value was set yet
    placeholder: str | None
    inject_to: tuple[str, ...]  # empty: no rule, the value is never injected
    inject_headers: bool = False
    inject_body: bool = False


def read_value(stdin: BinaryIO | None = None, prompt: str = "secret value: ",
               one_line: bool = False, terminal: int | None = None) -> bytes:
    """The value from a hidden prompt when stdin is a terminal, else all of stdin (one trailing
    newline removed), or with `one_line` its next line only, read a byte at a time so that the
    rest of stdin is left for what reads it next (`run -s`: the caged command). Never from
    argv. An empty value is refused. `terminal`: a descriptor of the person's terminal, where
    the prompt is shown when this process has no controlling terminal of its own (a command
    served by the command server: getpass then turns off the echo of stdin's terminal and
    reads the value there, as it does in a process without one)."""
    stream = stdin if stdin is not None else sys.stdin.buffer
    if stream.isatty():
        if terminal is None:
            value = getpass.getpass(prompt).encode()
        else:
            with open(terminal, "w", closefd=False) as shown:
                value = getpass.getpass(prompt, stream=shown).encode()
    else:
        value = _line(stream.fileno()) if one_line else stream.read()
        if value.endswith(b"\r\n"):
            value = value[:-2]
        elif value.endswith(b"\n"):
            value = value[:-1]
    if not value:
        raise ValueError("empty secret value refused")
    return value


def _line(fd: int, limit: int = 64 * 1024) -> bytes:
    """One line of `fd` (its newline included), unbuffered."""
    import os

    line = bytearray()
    while len(line) < limit:
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
        if byte == b"\n":
            break
    return bytes(line)


def check_value(name: str, value: bytes) -> bytes:
    """Refuse a value no request could carry: the gateway puts it in an HTTP header, where a
    line break, NUL or other control character is not allowed (every request would then be
    refused, and the agent would see only an authentication error)."""
    for i, byte in enumerate(value):
        if (byte < 0x20 and byte != 0x09) or byte == 0x7F:
            what = "a line break" if byte in (0x0A, 0x0D) else f"control character {byte:#04x}"
            raise ValueError(f"the value of {name} holds {what} at byte {i}, which no HTTP "
                             "header can carry; store the value without it")
    return value


def set_secret(store: SecretStore, book: PlaceholderBook, name: str, value: bytes) -> Placeholder:
    """Store `value` under `name`; its placeholder is kept (or minted on first set)."""
    check_env_name(name)
    store.set(name, value)
    return book.ensure(name)


def remove_secret(store: SecretStore, book: PlaceholderBook, name: str) -> bool:
    removed = store.remove(name)
    book.drop(name)
    return removed


def rotate_placeholders(
    book: PlaceholderBook, names: Iterable[str] | None = None
) -> list[Rotation]:
    """New placeholders (all, or `names`); re-stage and reload the gateway afterwards."""
    known = book.load()
    chosen = None if names is None else list(names)
    for name in chosen or ():
        if name not in known:
            raise ValueError(f"no placeholder for {name}; set the secret first")
    return book.rotate(chosen)


def list_secrets(
    store: SecretStore, book: PlaceholderBook, rules: Sequence[InjectionRule] = ()
) -> list[SecretEntry]:
    stored = set(store.names())
    book_entries = book.load()
    by_env = {r.env: r for r in rules}
    entries = []
    for name in sorted(stored | set(by_env)):
        rule = by_env.get(name)
        ph = book_entries.get(name)
        entries.append(
            SecretEntry(
                name=name,
                stored=name in stored,
                placeholder=str(ph) if ph else None,
                inject_to=tuple(str(p) for p in rule.inject_to) if rule else (),
                inject_headers=bool(rule and rule.inject_headers),
                inject_body=bool(rule and rule.inject_body),
            )
        )
    return entries


def cage_environment(book: PlaceholderBook, rules: Sequence[InjectionRule]) -> dict[str, str]:
    """ENV -> placeholder for every secret with a rule: what the cage's environment gets in
    place of the real variables (which the backend must remove)."""
    return {r.env: str(book.ensure(r.env)) for r in rules}
