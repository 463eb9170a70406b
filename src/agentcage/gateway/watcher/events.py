"""What the watcher is told, and what a budget answers."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Sent(NamedTuple):
    """One request about to leave the gateway, as the cage sent it (before injection: no
    secret value is in it, only placeholders). A NamedTuple, immutable as a frozen dataclass
    is, and made for every request in a quarter of the time."""

    host: str
    port: int
    method: str
    target: str  # path and query
    headers: tuple[tuple[str, str], ...]
    body: bytes
    at: float
    model_host: bool = False  # one of the model's own hosts (settings.model_hosts)
    grant: str | None = None  # the runtime grant the host is reached by, if any
    flow: str = ""  # the gateway's id of the flow (as in the capture)

    def size(self) -> int:
        headers = self.headers
        return (len(self.method) + len(self.target) + len(self.body) + 4 * len(headers)
                + sum(map(len, itertools.chain.from_iterable(headers))))

    def head(self) -> bytes:
        """The request line and headers, as bytes."""
        return request_line(self) + header_block(self.headers)


def request_line(s: Sent) -> bytes:
    return f"{s.method} {s.target}\r\n".encode("utf-8", "surrogateescape")


def header_block(headers: tuple[tuple[str, str], ...]) -> bytes:
    """The headers and the blank line after them."""
    return ("".join([f"{k}: {v}\r\n" for k, v in headers]) + "\r\n").encode(
        "utf-8", "surrogateescape")


@dataclass(frozen=True)
class Crossing:
    """A budget crossed: which, about what, and the evidence (amounts, never the bytes)."""

    budget: str
    host: str  # the host, or the zone, it is about
    summary: str  # one line for a person
    evidence: dict[str, Any] = field(default_factory=dict)
    grant: str | None = None  # the runtime grant involved, which the action may revoke
