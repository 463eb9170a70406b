"""The order of configurations: worst first, and still an order where the score hits its cap.

The score is capped at 100, and most sandboxes started by root reach it, so the score alone
cannot tell them apart. Below it come the uncapped sum (``raw_score``) and then the axis band:
how many axes are reachable at critical, at high, at medium, at low severity, then how many are
visible but refused, and how many were not measured. Every table that lists configurations
(``agentsec compare``, ``agentsec matrix``, the README's profiles) sorts by this one key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentsec.catalogue import SEVERITY_ORDER

_BAND_STATES = ("refused", "not_measured")


def axis_band(axes: Mapping[str, Any]) -> tuple[int, ...]:
    """Axes reachable at each severity (critical first), then refused, then not measured."""
    states = [a for a in axes.values() if isinstance(a, Mapping)]
    reachable = [a.get("severity") for a in states if a.get("state") == "reachable"]
    band = [reachable.count(severity) for severity in SEVERITY_ORDER]
    band += [sum(1 for a in states if a.get("state") == state) for state in _BAND_STATES]
    return tuple(band)


def rank_key(report: Mapping[str, Any]) -> tuple[Any, ...]:
    """Sorts worst first: a higher score, then a higher raw score, then a wider axis band."""
    summary = report.get("summary", {})
    band = axis_band(summary.get("axes", {}))
    score = summary.get("score", 0)
    raw = summary.get("raw_score", score)
    return (-score, -raw, *(-n for n in band), str(report.get("label", "")))


def ranked(reports: Iterable[Mapping[str, Any]]) -> list[Any]:
    return sorted(reports, key=rank_key)


def score_text(summary: Mapping[str, Any]) -> str:
    """'100 (raw 163)' where the cap hides part of the sum; the score alone where it does not."""
    score, raw = summary.get("score"), summary.get("raw_score")
    if isinstance(raw, int) and isinstance(score, int) and raw > score:
        return f"{score} (raw {raw})"
    return str(score)
