"""The two kinds of report agentsec writes, told apart in one place: by their ``test``.

A blast-radius report (``sandbox-blast-radius``) holds what the probe reached from inside a
sandbox: the target, the probe's output, seven axes, and its findings under ``summary``. A
verifier-integrity report (``verifier-integrity``) holds what a change did to the tests (the
two trees and the change) and what a sandbox could do to them (``could``), either or both, and
its findings at the top level, each at a file and line. Both are schema_version 1 reports of
one schema file (``data/report.schema.json``, a branch per kind), read by one loader, scored
with the same weights, judged by the same gates and kept in the same history; each output
format looks the kind up here and renders it its own way.
"""

from __future__ import annotations

from typing import Any

TEST_BLAST_RADIUS = "sandbox-blast-radius"
TEST_VERIFIER_INTEGRITY = "verifier-integrity"
NOUNS = {
    TEST_BLAST_RADIUS: "a blast-radius report",
    TEST_VERIFIER_INTEGRITY: "a verifier-integrity report",
}


def kind(report: dict[str, Any]) -> str:
    """The report's kind (its ``test``); a checked report always has one of NOUNS."""
    return str(report.get("test", TEST_BLAST_RADIUS))


def is_integrity(report: dict[str, Any]) -> bool:
    return kind(report) == TEST_VERIFIER_INTEGRITY


def findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings a report lists, wherever its kind keeps them."""
    found = report["findings"] if is_integrity(report) else report["summary"]["findings"]
    return list(found)


def lower_bound(report: dict[str, Any]) -> bool:
    return bool(report["summary"].get("score_is_lower_bound", False))
