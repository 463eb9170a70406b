"""SARIF 2.1.0 of a verifier-integrity document, for GitHub code scanning on the change itself.

Unlike a sandbox's findings, these have a place in the source: each result points at the file
and line the change touched (the line in the tree after it; a finding about what the change
removed points at the file, where GitHub shows it on the pull request). The rules are the
catalogue's checks, with its description and remediation; levels and security severities are
those of the sandbox findings (render/sarif.py).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agentsec.integrity import catalogue
from agentsec.render.sarif import LEVELS, SARIF_SCHEMA, SECURITY_SEVERITY
from agentsec.report import report_filename


def _rule(check_id: str) -> dict[str, Any]:
    spec = catalogue.load().check(check_id)
    properties: dict[str, Any] = {"tags": ["verifier-integrity", "tests"], "precision": "high"}
    if spec.severity in SECURITY_SEVERITY:
        properties["security-severity"] = SECURITY_SEVERITY[spec.severity]
    return {
        "id": spec.id,
        "shortDescription": {"text": spec.title},
        "fullDescription": {"text": spec.description},
        "help": {"text": spec.remediation},
        "defaultConfiguration": {"level": LEVELS[spec.severity]},
        "properties": properties,
    }


def _location(finding: dict[str, Any]) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": finding["path"]}}
    if finding.get("line") and finding.get("side") != "before":
        physical["region"] = {"startLine": int(finding["line"])}
    return {"physicalLocation": physical}


def fingerprint(finding: dict[str, Any]) -> str:
    """Stable across runs of the same change, and across line moves: check, file, evidence."""
    key = "\0".join((finding["id"], finding["path"], finding["evidence"]))
    return hashlib.sha256(key.encode()).hexdigest()


def render(doc: dict[str, Any]) -> str:
    ids = sorted({f["id"] for f in doc["findings"]})
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
    run = {
        "tool": {"driver": {"name": "agentsec", "version": str(doc["tool_version"]),
                            "rules": [_rule(check_id) for check_id in ids]}},
        "automationDetails": {"id": f"agentsec-integrity/{report_filename(doc['label'])}/"},
        "results": results,
        "properties": {"label": doc["label"], "score": doc["summary"]["score"],
                       "raw_score": doc["summary"]["raw_score"]},
    }
    return json.dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]},
                      indent=2) + "\n"
