"""An accepted verifier-integrity document, and what a new one finds beyond it.

A repository may live with a finding it has looked at (a test deleted on purpose, say): the
baseline is the document of that accepted change, and ``--baseline`` fails only on findings it
does not hold, matched by check, file and evidence (line numbers move; those do not). The file
is untrusted like any report: read bounded and strictly, refused in one line when it is not a
verifier-integrity document.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentsec.errors import ReportError
from agentsec.integrity.report import SCHEMA_VERSION, TEST_VERIFIER_INTEGRITY
from agentsec.integrity.sarif import fingerprint
from agentsec.reportfile import read_json
from agentsec.untrusted import clean_text


def load(path: Path) -> frozenset[str]:
    """The fingerprints of the findings a baseline accepts."""
    shown = clean_text(str(path), 200)
    doc = read_json(path, "verifier-integrity report")
    if not isinstance(doc, dict) or doc.get("tool") != "agentsec" or \
            doc.get("test") != TEST_VERIFIER_INTEGRITY:
        raise ReportError(f"{shown} is not a verifier-integrity report "
                          "(agentsec integrity diff --json or --out)")
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise ReportError(f"{shown} has schema_version {clean_text(repr(version), 20)}; "
                          f"this agentsec reads {SCHEMA_VERSION}")
    findings = doc.get("findings")
    if not isinstance(findings, list):
        raise ReportError(f"{shown}: findings: not a list")
    accepted = set()
    for index, finding in enumerate(findings):
        if not (isinstance(finding, dict) and all(
                isinstance(finding.get(key), str) for key in ("id", "path", "evidence"))):
            raise ReportError(f"{shown}: findings[{index}]: needs id, path and evidence")
        accepted.add(fingerprint(finding))
    return frozenset(accepted)


def new_findings(doc: dict[str, Any], accepted: frozenset[str]) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if fingerprint(f) not in accepted]
