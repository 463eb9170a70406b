"""SARIF 2.1.0 for GitHub code scanning: one run per report, one result per finding.

GitHub wants, beyond the OASIS schema: a location on every result, a distinct
``automationDetails.id`` per run (two runs of one tool otherwise overwrite each other), and a
``security-severity`` string on each rule to rank alerts. A sandbox has no source line, so each
result points at the report file that holds the evidence, line 1.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agentsec import kinds
from agentsec.report import report_filename
from agentsec.results import Results

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {"critical": "error", "high": "error", "medium": "warning", "low": "note", "info": "note"}
# GitHub's bands: critical > 9.0, high 7.0-8.9, medium 4.0-6.9, low 0.1-3.9.
SECURITY_SEVERITY = {"critical": "9.5", "high": "8.0", "medium": "5.5", "low": "2.0"}


def _rule(finding: dict[str, Any]) -> dict[str, Any]:
    advice = finding["remediation"].get("advice") or finding["title"]
    flags = " ".join(finding["remediation"].get("flags") or [])
    help_text = advice + (f" Launcher flags: {flags}" if flags else "")
    properties: dict[str, Any] = {
        "tags": ["security", "sandbox", finding["category"], *(o["id"] for o in finding["owasp"])],
        "precision": "high",
    }
    if finding["severity"] in SECURITY_SEVERITY:
        properties["security-severity"] = SECURITY_SEVERITY[finding["severity"]]
    return {
        "id": finding["id"],
        "shortDescription": {"text": finding["title"]},
        "fullDescription": {"text": finding["title"]},
        "help": {"text": help_text},
        "defaultConfiguration": {"level": LEVELS[finding["severity"]]},
        "properties": properties,
    }


def _fingerprint(label: str, finding_id: str) -> str:
    return hashlib.sha256(f"{label}\0{finding_id}".encode()).hexdigest()


def _run(report: dict[str, Any], artifact: str) -> dict[str, Any]:
    summary = report["summary"]
    findings = summary["findings"]
    rules, results = [], []
    for index, finding in enumerate(findings):
        rules.append(_rule(finding))
        text = f"{report['label']}: {finding['title']} ({finding['severity']}, "
        text += f"{finding['points']} points)"
        if finding["evidence"]:
            text += ": " + "; ".join(finding["evidence"])
        results.append(
            {
                "ruleId": finding["id"],
                "ruleIndex": index,
                "level": LEVELS[finding["severity"]],
                "message": {"text": text},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": artifact},
                            "region": {"startLine": 1},
                        }
                    }
                ],
                "partialFingerprints": {
                    "agentsecFinding/v1": _fingerprint(report["label"], finding["id"])
                },
                "properties": {"evidence": list(finding["evidence"]), "points": finding["points"]},
            }
        )
    return {
        "tool": {
            "driver": {
                "name": "agentsec",
                "version": str(report.get("tool_version", "")),
                "rules": rules,
            }
        },
        "automationDetails": {"id": f"agentsec/{report_filename(report['label'])}/"},
        "results": results,
        "properties": {
            "label": report["label"],
            "score": summary["score"],
            "raw_score": summary["raw_score"],
            "score_is_lower_bound": summary.get("score_is_lower_bound", False),
            "axes": {key: axis["state"] for key, axis in summary["axes"].items()},
        },
    }


def render_sarif(results: Results) -> str:
    from agentsec.integrity import sarif as integrity_sarif  # it builds on this module

    runs = []
    for report in results.reports:
        if kinds.is_integrity(report):  # its findings are at a file and line of the change
            runs.append(integrity_sarif.run(report))
            continue
        artifact = results.path_of(report["label"]) or (
            f"reports/{report_filename(report['label'])}.json"
        )
        runs.append(_run(report, artifact))
    return json.dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": runs}, indent=2) + "\n"
