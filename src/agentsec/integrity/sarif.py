"""SARIF 2.1.0 of a verifier-integrity document, for GitHub code scanning on the change itself.

Unlike a sandbox's findings, these have a place in the source: each result points at the file
and line the change touched (the line in the tree after it; a finding about what the change
removed points at the file, where GitHub shows it on the pull request). The rules are the
catalogue's checks, with its description and remediation; levels and security severities are
those of the sandbox findings (render/sarif.py).
"""

from __future__ import annotations

import json
from typing import Any

from agentsec import kinds
from agentsec.integrity import catalogue
from agentsec.integrity.baseline import fingerprint
from agentsec.render.sarif import LEVELS, SARIF_SCHEMA, SECURITY_SEVERITY
from agentsec.report import report_filename


def _rule(finding: dict[str, Any]) -> dict[str, Any]:
    known = catalogue.load().checks.get(finding["id"])
    # A report from another agentsec may name a check this one does not know: its own words.
    title = known.title if known else finding["title"]
    severity = known.severity if known else finding["severity"]
    properties: dict[str, Any] = {"tags": ["verifier-integrity", "tests"], "precision": "high"}
    if severity in SECURITY_SEVERITY:
        properties["security-severity"] = SECURITY_SEVERITY[severity]
    return {
        "id": finding["id"],
        "shortDescription": {"text": title},
        "fullDescription": {"text": known.description if known else title},
        "help": {"text": known.remediation if known else title},
        "defaultConfiguration": {"level": LEVELS[severity]},
        "properties": properties,
    }


def _location(finding: dict[str, Any]) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": finding["path"]}}
    if finding.get("line") and finding.get("side") != "before":
        physical["region"] = {"startLine": int(finding["line"])}
    return {"physicalLocation": physical}


def run(doc: dict[str, Any]) -> dict[str, Any]:
    """The SARIF run of one verifier-integrity report."""
    first = {f["id"]: f for f in reversed(doc["findings"])}
    ids = sorted(first)
    index = {check_id: i for i, check_id in enumerate(ids)}
    results = [
        {
            "ruleId": f["id"],
            "ruleIndex": index[f["id"]],
            "level": LEVELS[f["severity"]],
            "message": {"text": f"{f['title']} ({f['severity']}, {f['points']} points): "
                                f"{f['evidence']}"},
            "locations": [_location(f)],
            "partialFingerprints": {"agentsecIntegrity/v1": fingerprint(f)},
            "properties": {"points": f["points"], "side": f.get("side", "after")},
        }
        for f in doc["findings"]
    ]
    return {
        "tool": {"driver": {"name": "agentsec", "version": str(doc["tool_version"]),
                            "rules": [_rule(first[check_id]) for check_id in ids]}},
        "automationDetails": {"id": f"agentsec-integrity/{report_filename(doc['label'])}/"},
        "results": results,
        "properties": {"label": doc["label"], "score": doc["summary"]["score"],
                       "raw_score": doc["summary"]["raw_score"],
                       "score_is_lower_bound": kinds.lower_bound(doc)},
    }


def render(doc: dict[str, Any]) -> str:
    return json.dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run(doc)]},
                      indent=2) + "\n"
