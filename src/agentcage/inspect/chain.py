"""Running a chain: in order, first block wins, and an inspector that raises is a block.

The ONE chain runner: the gateway's addon calls `run_chain(chain, view, ctx, phase=...)` in
`requestheaders` (phase "headers") and `request` / WebSocket messages (phase "body"); without a
phase every inspector given runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentcage.inspect.protocol import Decision, InspectionContext, Inspector, Phase, RequestView


def _name_of(inspector: object) -> str:
    name = getattr(inspector, "name", None)
    return name if isinstance(name, str) and name else type(inspector).__name__


def run_one(inspector: Inspector, request: RequestView, ctx: InspectionContext) -> Decision:
    """One inspector's decision; any exception or a non-Decision answer becomes a block."""
    name = _name_of(inspector)
    try:
        decision = inspector.inspect(request, ctx)
    except Exception as e:  # fail closed: a broken inspector must not let traffic through
        return Decision("block", f"inspector {name} failed: {type(e).__name__}: {e}", name, "error")
    if not isinstance(decision, Decision):
        return Decision(
            "block",
            f"inspector {name} returned {type(decision).__name__}, not a Decision",
            name,
            "error",
        )
    return decision


def run_chain(
    inspectors: Sequence[Inspector],
    request: RequestView,
    ctx: InspectionContext,
    phase: Phase | None = None,
) -> list[Decision]:
    """Every decision up to and including the first block (of `phase`'s inspectors only, when
    given; an inspector whose phase cannot be read is run, so a broken one still blocks)."""
    decisions: list[Decision] = []
    for inspector in inspectors:
        if phase is not None and getattr(inspector, "phase", phase) != phase:
            continue
        decision = run_one(inspector, request, ctx)
        decisions.append(decision)
        if decision.action == "block":
            break
    return decisions


def first_block(decisions: Sequence[Decision]) -> Decision | None:
    return next((d for d in decisions if d.action == "block"), None)
