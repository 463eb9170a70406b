"""`agentsec combine`: what promptfoo saw the agent do, next to what its sandbox lets it reach.

The two files cannot prove they describe the same agent: the user asserts it with
``--deployed-in``, and the result states that assumption first, as the condition of every line
after it. The overlap lists each OWASP agentic category where an attack succeeded in promptfoo
and the sandbox has a finding of the same category: the places where a working attack meets an
open door.
"""

from __future__ import annotations

from typing import Any

from agentsec import catalogue
from agentsec.promptfoo.evalfile import Eval, categories, plugin_map
from agentsec.report import TEST_COMBINED
from agentsec.results import document


def combine(ev: Eval, report: dict[str, Any], deployed_in: str, promptfoo_path: str,
            sandbox_path: str) -> dict[str, Any]:
    titles = catalogue.load().owasp_titles
    summary = report["summary"]
    failed_by_category: dict[str, list[dict[str, Any]]] = {}
    unmapped = []
    for row in ev.failures:
        found = categories(row.plugin_id)
        if not found:
            unmapped.append({"description": row.description, "plugin": row.plugin_id})
        for code in found:
            failed_by_category.setdefault(code, []).append(
                {"description": row.description, "plugin": row.plugin_id, "reason": row.reason}
            )
    findings_by_category: dict[str, list[dict[str, Any]]] = {}
    for finding in summary["findings"]:
        if finding.get("points", 0) == 0:
            continue  # a note is not an open door
        for owasp in finding.get("owasp", []):
            findings_by_category.setdefault(owasp["id"], []).append(
                {"id": finding["id"], "title": finding["title"], "severity": finding["severity"]}
            )
    overlap = [
        {
            "category": code,
            "title": titles.get(code, ""),
            "failed_tests": failed_by_category[code],
            "sandbox_findings": findings_by_category[code],
        }
        for code in sorted(set(failed_by_category) & set(findings_by_category))
    ]
    mapping = plugin_map()
    return document(
        TEST_COMBINED,
        test=TEST_COMBINED,
        assumption={
            "deployed_in": deployed_in,
            "statement": (
                f"The user asserts that the agent promptfoo evaluated runs in {deployed_in}, "
                f"the sandbox measured in {sandbox_path}. Neither file can show this; every "
                "conclusion below holds only if it is true."
            ),
        },
        promptfoo={
            "file": promptfoo_path,
            "eval_id": ev.eval_id,
            "rows": len(ev.rows),
            "failed": len(ev.failures),
            "unmapped_failures": unmapped,
        },
        sandbox={
            "file": sandbox_path,
            "label": report["label"],
            "score": summary["score"],
            "score_is_lower_bound": summary.get("score_is_lower_bound", False),
            "axes": {key: axis["state"] for key, axis in summary["axes"].items()},
        },
        overlap=overlap,
        mapping_source={k: mapping[k] for k in ("source", "package", "retrieved")},
    )
