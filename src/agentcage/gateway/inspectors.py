"""The inspector chain: small named units, each returning a frozen Decision; one registry.

An inspector sees an immutable RequestView and the current Policy, and answers allow, flag or
block. The protocol lives here; the ONE registry, `build_chain` and the ONE chain runner live in
`agentcage.inspect` (registry.py, chain.py): domain, secrets, body-size, entropy, content-type,
then custom inspectors; the first block wins; an inspector that raises is a block (fail closed).

Phases: `headers` inspectors run in mitmproxy's `requestheaders` (before any byte of the body is
read and before any upstream connection); `body` inspectors run in `request`, with
`RequestView.body` set to the DECODED body (Content-Encoding undone; a body that cannot be
decoded is blocked before any inspector runs). Request bodies are never streamed past the
gateway: mitmproxy's `body_size_limit` (narrowed to requests, see gateway.mitmpatch) refuses
anything over `max_request_body`, and `body-size` blocks a declared Content-Length over it in the
headers phase, before a byte of the body is read.
Adding one: a class with `name`, `phase` and `inspect()`, and one line in
`agentcage.inspect.registry.REGISTRY` (or a custom inspector named in cage.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

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
    """What an inspector may look at; built once per request by the addon."""

    method: str
    scheme: str
    host: str
    port: int
    path: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None


@dataclass(frozen=True)
class InspectionContext:
    policy: Policy
    now: float


class Inspector(Protocol):
    name: str
    phase: Phase

    def inspect(self, request: RequestView, ctx: InspectionContext) -> Decision: ...


class DomainInspector:
    """Allow only what the cage's domain policy allows (allowlist, blocklist, grants, expiry)."""

    name = "domain"
    phase: Phase = "headers"

    def inspect(self, request: RequestView, ctx: InspectionContext) -> Decision:
        verdict = ctx.policy.decide(request.host, ctx.now)
        if verdict.allowed:
            return Decision("allow", verdict.reason, self.name)
        return Decision("block", verdict.reason, self.name, severity="warning")
