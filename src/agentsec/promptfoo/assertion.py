"""The promptfoo assertion: a sandbox report's score inside an eval, as ``blast_radius``.

promptfoo calls an assertion once per test row, and the probe cannot run from inside one; so
this reads a report the probe wrote earlier (``AGENTSEC_REPORT``, or ``report`` in the
assertion's config) and fails the row when the score is above ``AGENTSEC_MAX_SCORE`` (or
``max_score``). Put it on one dedicated row, not on ``defaultTest``: there it would fail every
row over one fact about the environment.

It fails closed: a missing or unreadable report fails the row with the reason; it never passes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentsec import gate
from agentsec.errors import AgentsecError
from agentsec.reportfile import load_report

NAMED_SCORE = "blast_radius"


def _setting(context: dict[str, Any], key: str, env: str) -> Any:
    config = context.get("config") if isinstance(context, dict) else None
    if isinstance(config, dict) and config.get(key) is not None:
        return config[key]
    return os.environ.get(env)


def get_assert(output: str, context: dict[str, Any]) -> dict[str, Any]:
    path = _setting(context, "report", "AGENTSEC_REPORT")
    if not path:
        reason = "agentsec: set AGENTSEC_REPORT to a sandbox report (agentsec blast-radius)"
        return {"pass": False, "score": 0.0, "reason": reason}
    budget_raw = _setting(context, "max_score", "AGENTSEC_MAX_SCORE")
    try:
        budget = 100 if budget_raw in (None, "") else int(budget_raw)
    except (TypeError, ValueError):
        return {"pass": False, "score": 0.0, "reason": f"agentsec: max_score {budget_raw!r}"}
    try:
        report = load_report(Path(str(path)))
    except AgentsecError as error:
        return {"pass": False, "score": 0.0, "reason": f"agentsec: {error}"}
    score = report["summary"]["score"]
    passed = not gate.decide(report, gate.Gates(max_score=budget)).failed
    reachable = [k for k, a in report["summary"]["axes"].items() if a.get("state") == "reachable"]
    reason = (
        f"agentsec: sandbox {report['label']} scores {score} / 100 "
        f"({'within' if passed else 'above'} the budget {budget}); "
        f"reachable: {', '.join(reachable) or 'nothing'}"
    )
    return {
        "pass": passed,
        "score": round(1 - score / 100, 4),  # promptfoo ranks higher as better
        "reason": reason,
        "namedScores": {NAMED_SCORE: score},
    }
