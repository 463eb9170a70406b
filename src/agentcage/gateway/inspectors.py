"""The inspector chain: small named units, each returning a frozen Decision; one registry.

An inspector sees an immutable RequestView and the current Policy, and answers allow, flag or
block. The chain runs in registry order; the first block wins; an inspector that raises is a
block (fail closed). Issue 5 adds secrets, body-size, entropy and content-type here.

Phases: `headers` inspectors run in mitmproxy's `requestheaders` (before any byte of the body is
read and before any upstream connection); `body` inspectors run in `request`, with
`RequestView.body` set — or None when the body was larger than `max_request_body` and streamed,
which a body inspector must treat as "could not inspect" (block), never as "empty".
Adding one: a class with `name`, `phase` and `inspect()`, and one line in REGISTRY.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


# The registry: the one place that lists inspectors, in the order they run.
REGISTRY: dict[str, Callable[[], Inspector]] = {
    "domain": DomainInspector,
}


def build_chain(names: Sequence[str] | None = None) -> tuple[Inspector, ...]:
    selected = list(REGISTRY) if names is None else list(names)
    unknown = [n for n in selected if n not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown inspectors: {unknown}; known: {list(REGISTRY)}")
    return tuple(REGISTRY[n]() for n in selected)


@dataclass(frozen=True)
class ChainResult:
    decisions: tuple[Decision, ...]

    @property
    def blocked_by(self) -> Decision | None:
        return next((d for d in self.decisions if d.action == "block"), None)

    @property
    def flagged(self) -> bool:
        return any(d.action == "flag" for d in self.decisions)


def run_chain(
    chain: Sequence[Inspector], phase: Phase, request: RequestView, ctx: InspectionContext
) -> ChainResult:
    """Run the inspectors of `phase` in order; stop at the first block; a raise is a block."""
    decisions: list[Decision] = []
    for inspector in chain:
        if inspector.phase != phase:
            continue
        try:
            decision = inspector.inspect(request, ctx)
            if not isinstance(decision, Decision):
                raise TypeError(f"returned {type(decision).__name__}, not Decision")
        except Exception as e:  # fail closed: a broken inspector blocks
            decision = Decision(
                "block", f"inspector error: {type(e).__name__}: {e}", inspector.name, "error"
            )
        decisions.append(decision)
        if decision.action == "block":
            break
    return ChainResult(tuple(decisions))
