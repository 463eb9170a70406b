"""How an axis state reads in every format, in one place."""

from __future__ import annotations

from typing import Any

STATE_LABELS = {
    "sealed": ("✓", "sealed"),
    "refused": ("◐", "visible but refused"),
    "reachable": ("✕", "reachable"),
    "not_measured": ("?", "not measured"),
}


def axis_cell(axis: dict[str, Any]) -> str:
    """'✕ reachable (high)', '? not measured', ... for one axis of a report's summary."""
    symbol, words = STATE_LABELS.get(str(axis.get("state")), ("?", "not measured"))
    if axis.get("state") == "reachable" and axis.get("severity"):
        return f"{symbol} {words} ({axis['severity']})"
    if axis.get("state") != "not_measured" and axis.get("not_measured"):
        return f"{symbol} {words}, partly not measured"
    return f"{symbol} {words}"
