"""Placeholders: the decoy values a cage sees instead of its secrets.

Format `agentcage:secret:<ENV>:<32 hex>`: 128 random bits from `secrets`, so a placeholder says
which variable it stands for but nothing about the value, and cannot be guessed by the cage.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

PREFIX = "agentcage:secret:"
ENV_SYNTAX = r"[A-Za-z_][A-Za-z0-9_]*"
_PLACEHOLDER = rf"agentcage:secret:({ENV_SYNTAX}):([0-9a-f]{{32}})(?![0-9a-f])"
PLACEHOLDER_RE = re.compile(_PLACEHOLDER)
PLACEHOLDER_BYTES_RE = re.compile(_PLACEHOLDER.encode())
_ENV_RE = re.compile(rf"^{ENV_SYNTAX}\Z")  # \Z: "$" would accept a trailing newline


@dataclass(frozen=True)
class Placeholder:
    env: str
    token: str  # 32 lower-case hex characters

    def __str__(self) -> str:
        return f"{PREFIX}{self.env}:{self.token}"

    @property
    def text(self) -> str:
        return str(self)


def check_env_name(env: str) -> str:
    if not _ENV_RE.match(env):
        raise ValueError(f"invalid secret name {env!r}: use letters, digits and '_' (A_KEY)")
    return env


def mint(env: str) -> Placeholder:
    """A fresh placeholder for `env`; every call gives a new one (rotation)."""
    return Placeholder(check_env_name(env), secrets.token_hex(16))


def parse(text: str) -> Placeholder:
    """The placeholder `text` is exactly; ValueError otherwise."""
    m = PLACEHOLDER_RE.fullmatch(text)
    if m is None:
        raise ValueError("not a placeholder: expected agentcage:secret:<ENV>:<32 hex>")
    return Placeholder(m.group(1), m.group(2))


def find(text: str | bytes) -> Iterator[tuple[int, int, Placeholder]]:
    """Every placeholder in `text`, as (start, end, placeholder)."""
    if isinstance(text, bytes):
        for raw in PLACEHOLDER_BYTES_RE.finditer(text):
            found = Placeholder(raw.group(1).decode(), raw.group(2).decode())
            yield raw.start(), raw.end(), found
    else:
        for m in PLACEHOLDER_RE.finditer(text):
            yield m.start(), m.end(), Placeholder(m.group(1), m.group(2))
