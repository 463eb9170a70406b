"""The inspector protocol: what every inspector sees, what it answers, and the one it must have.

An inspector is a small named unit: `name`, `phase` and `inspect(request, ctx) -> Decision`. It
sees an immutable RequestView and the current Policy and answers allow, flag or block. The ONE
registry and `build_chain` are in `registry.py`, the ONE chain runner in `chain.py`: domain,
secrets, body-size, entropy, content-type, then custom inspectors; the first block wins; an
inspector that raises is a block (fail closed).

Phases: `headers` inspectors run before any byte of the body is read and before any upstream
connection; `body` inspectors see `RequestView.body` set to the DECODED body (Content-Encoding
undone within a bound; a body that cannot be decoded is blocked before any inspector runs).
Request bodies are never streamed past the gateway uninspected.

Adding one: a class with `name`, `phase` and `inspect()`, and one line in `registry.REGISTRY`
(or a custom inspector named in cage.yaml, importing what it needs from this module).
Nothing here knows the proxy.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal, Protocol

from agentcage.inspect.runs import ByteIndex
from agentcage.policy import Policy

Action = Literal["allow", "flag", "block"]
Phase = Literal["headers", "body"]


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    inspector: str
    severity: str = "info"

    def as_record(self) -> dict[str, str]:
        return {
            "name": self.inspector,
            "action": self.action,
            "reason": self.reason,
            "severity": self.severity,
        }


@dataclass(frozen=True)
class RequestView:
    """What an inspector may look at; built once per request (or WebSocket message)."""

    method: str
    scheme: str
    host: str
    port: int
    path: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None

    @functools.cached_property
    def body_index(self) -> ByteIndex:
        """The body's runs of token characters, found once for every inspector of this
        request, and gone with it (a cache that outlived the request would hold its body)."""
        return ByteIndex(self.body or b"")


@dataclass(frozen=True)
class InspectionContext:
    policy: Policy
    now: float


class Inspector(Protocol):
    name: str
    phase: Phase

    def inspect(self, request: RequestView, ctx: InspectionContext) -> Decision: ...
