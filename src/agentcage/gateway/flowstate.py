"""What the gateway knows about one flow, kept in `flow.metadata` under one key.

Names and verdicts only, never a credential: the bytes of a flow (snapshots for the capture,
the WebSocket tail, a streamed body's state) live in the side tables of the modules that own
them (`recorder`, `websocket`, `redaction`), keyed by the flow object and gone with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

META_KEY = "agentcage"


@dataclass(frozen=True)
class Verdict:
    decision: str  # allowed | flagged | blocked
    reason: str
    by: str


@dataclass
class FlowState:
    target: tuple[str, int] | None = None  # the name and port the flow is for
    path: str | None = None  # the path as the cage sent it (an injected URL is never audited)
    decisions: list[dict[str, str]] = field(default_factory=list)  # inspectors, in order
    injected: tuple[str, ...] = ()  # env names
    redacted: tuple[str, ...] = ()  # env names
    request_verdict: Verdict | None = None  # the `outbound` record, once written
    outcome_verdict: Verdict | None = None  # the `response` record, once written
    forwarded: bool = False  # went upstream (its outbound record was written first)
    responded: bool = False  # the response headers arrived from upstream
    stopped: str | None = None  # why the gateway cut the flow (timeout, bound), for `error`
    stopped_by: str = ""
    captured: bool = False  # its capture line was written
    grant: str | None = None  # the id of the runtime grant its host is reached by

    @property
    def verdict(self) -> Verdict | None:
        """The last word on the flow: what happened to it, else what was decided."""
        return self.outcome_verdict or self.request_verdict

    @property
    def flagged(self) -> bool:
        return any(d.get("action") == "flag" for d in self.decisions)


def state(flow: Any) -> FlowState:
    """The flow's state, created on first use."""
    found = flow.metadata.get(META_KEY)
    if not isinstance(found, FlowState):
        found = flow.metadata[META_KEY] = FlowState()
    return found
