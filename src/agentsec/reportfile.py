"""Saved reports read back: bounded, strict, and checked before any gate compares them.

A baseline is a file anyone could have written, and a gate that passes on a forged one is a
hole in CI. So a report is read with a size cap, as strict UTF-8 and strict JSON (no NaN or
Infinity, no key given twice, no nesting past what agentsec writes), checked against the shipped
schema, then against its own arithmetic: the score is the sum of its findings' fixed weights,
capped at 100, and every count agrees with the finding list. A report that fails is refused in
one line naming the file and the field; it is never repaired.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentsec import catalogue, kinds, schema
from agentsec.catalogue import SEVERITY_ORDER
from agentsec.errors import ReportError
from agentsec.report import TEST_COMBINED, TEST_MATRIX
from agentsec.scoring.assess import MAX_SCORE
from agentsec.untrusted import clean_text, json_problem, read_capped

MAX_REPORT_BYTES = 16 * 1024 * 1024
# agentsec's own reports nest about a dozen levels (the probe output is cut at 8 inside them).
MAX_NESTING = 32
# agentsec's other documents, named when one is given where a report is wanted: they share the
# reports directory, so a shell glob (reports/*.json) hands them over with the reports.
OTHER_DOCUMENTS = {
    TEST_MATRIX: "a matrix table (agentsec matrix)",
    TEST_COMBINED: "a combined promptfoo report (agentsec combine)",
}


class _NonFinite:
    """NaN or Infinity in the text: kept as a marker so the error can name the field."""

    def __init__(self, word: str) -> None:
        self.word = word


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {schema.show(key, 40)} is given twice in one object")
        found[key] = value
    return found


def _walk(value: Any, path: str = "") -> Iterator[tuple[str, Any, int]]:
    """Every value with its path and depth, without recursion (a hostile file may be deep)."""
    stack = [(path, value, 0)]
    while stack:
        where, item, depth = stack.pop()
        yield where, item, depth
        if isinstance(item, dict):
            stack += [(f"{where}.{k}" if where else k, v, depth + 1) for k, v in item.items()]
        elif isinstance(item, list):
            stack += [(f"{where}[{i}]", v, depth + 1) for i, v in enumerate(item)]


def parse_json(text: str, source: str) -> Any:
    """One JSON document, strictly: the errors name ``source`` and the place."""
    try:
        value = json.loads(text, object_pairs_hook=_object, parse_constant=_NonFinite)
    except RecursionError:
        raise ReportError(f"{source} is nested too deeply to be a report") from None
    except ValueError as exc:  # not JSON, a key given twice, an integer of thousands of digits
        raise ReportError(f"{source} is not valid JSON ({json_problem(exc)})") from None
    for where, item, depth in _walk(value):
        if depth > MAX_NESTING:
            raise ReportError(f"{source} is nested deeper than {MAX_NESTING} levels at {where}")
        if isinstance(item, _NonFinite):
            raise ReportError(f"{source}: {where or '(top level)'}: {item.word} is not a number")
    return value


def read_json(path: Path, what: str = "report") -> Any:
    """A JSON file of at most MAX_REPORT_BYTES, strictly parsed."""
    shown, data = read_capped(path, MAX_REPORT_BYTES, ReportError, f"a {what} file")
    if len(data) > MAX_REPORT_BYTES:
        raise ReportError(
            f"{shown} is larger than {MAX_REPORT_BYTES // (1024 * 1024)} MiB: not a {what}"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReportError(
            f"{shown} is not UTF-8 text (byte {exc.start}): not a {what}"
        ) from None
    return parse_json(text, shown)


def _totals(findings: list[dict[str, Any]], summary: dict[str, Any], omitted: int) -> str | None:
    """What in a summary's score and counts does not add up to its findings (of which
    ``omitted`` more are counted and not listed), or None."""
    points = catalogue.load().points
    for index, finding in enumerate(findings):
        weight = points[finding["severity"]]
        if finding["points"] != weight:
            return (
                f"findings[{index}].points: {finding['points']}, but a {finding['severity']} "
                f"finding weighs {weight}"
            )
    total = sum(f["points"] for f in findings)
    if summary["raw_score"] != total and not (omitted and summary["raw_score"] > total):
        return f"raw_score: {summary['raw_score']}, but the findings' weights sum to {total}"
    capped = min(summary["raw_score"], MAX_SCORE)
    if summary["score"] != capped:
        return (
            f"score: {summary['score']}, but the findings' weights sum to "
            f"{summary['raw_score']} (capped at {MAX_SCORE}: {capped})"
        )
    if summary["finding_count"] != len(findings) + omitted:
        shown = f"{len(findings)} findings are listed"
        shown += f", {omitted} omitted" if omitted else ""
        return f"finding_count: {summary['finding_count']}, but {shown}"
    counts = {s: sum(1 for f in findings if f["severity"] == s) for s in SEVERITY_ORDER}
    for severity, count in summary["by_severity"].items():
        listed = counts.get(severity, 0)
        if count != listed and not (omitted and count > listed):
            return (
                f"by_severity.{clean_text(severity, 20)}: {count}, but "
                f"{listed} such findings are listed"
            )
    return None


def _blast_radius_arithmetic(document: dict[str, Any]) -> str | None:
    """What in a blast-radius report that fits the schema still does not add up, or None."""
    summary = document["summary"]
    findings = summary["findings"]
    seen: set[str] = set()
    for index, finding in enumerate(findings):
        if finding["id"] in seen:
            return f"summary.findings[{index}].id: {finding['id']} is listed twice"
        seen.add(finding["id"])
    problem = _totals(findings, summary, 0)
    if problem is not None:
        return f"summary.{problem}"
    partly = any(
        axis["state"] == "not_measured" or axis["not_measured"]
        for axis in summary["axes"].values()
    )
    if summary["score_is_lower_bound"] != partly:
        return (
            f"summary.score_is_lower_bound: {json.dumps(summary['score_is_lower_bound'])}, but "
            f"the axes say {json.dumps(partly)}"
        )
    return None


# The checks whose findings leave part of a verifier-integrity report unmeasured.
UNMEASURED_CHECKS = frozenset({"INT-017", "INT-020"})


def _integrity_arithmetic(document: dict[str, Any]) -> str | None:
    """What in a verifier-integrity report that fits the schema still does not add up."""
    halves = [key for key in ("before", "after", "change") if key in document]
    if halves and len(halves) != 3:
        return "before, after and change: a change is given by all three or none"
    if not halves and "could" not in document:
        return "neither a change (before, after, change) nor a sandbox (could) was checked"
    summary, findings = document["summary"], document["findings"]
    omitted = summary["findings_omitted"]
    problem = _totals(findings, summary, omitted)
    if problem is not None:
        return f"summary.{problem}" if not problem.startswith("findings[") else problem
    said = summary.get("score_is_lower_bound")
    partly = any(f["id"] in UNMEASURED_CHECKS for f in findings)
    if said is not None and not omitted and said != partly:
        return (
            f"summary.score_is_lower_bound: {json.dumps(said)}, but the findings say "
            f"{json.dumps(partly)}"
        )
    return None


_ARITHMETIC = {
    kinds.TEST_BLAST_RADIUS: _blast_radius_arithmetic,
    kinds.TEST_VERIFIER_INTEGRITY: _integrity_arithmetic,
}


def check_report(document: Any, source: str) -> dict[str, Any]:
    """``document`` as a report, or ReportError naming ``source`` and the field at fault."""
    if not isinstance(document, dict) or document.get("tool") != "agentsec":
        raise ReportError(f"{source} is not an agentsec report")
    other = other_document(document)
    if other is not None:
        raise ReportError(f"{source} is {other}, not a report")
    version = document.get("schema_version")
    if not schema.same_value(version, 1):
        raise ReportError(
            f"{source} has schema_version {schema.show(version)}; this agentsec reads 1"
        )
    try:
        schema.check(document, schema.report_schema())
    except schema.Violation as violation:
        raise ReportError(f"{source}: {violation}") from None
    problem = _ARITHMETIC[kinds.kind(document)](document)
    if problem is not None:
        raise ReportError(f"{source}: {problem}")
    return document


def load_report_of(path: Path, wanted: str) -> dict[str, Any]:
    """A saved report of one kind (``kinds.TEST_*``), refused in one line when it is of the
    other (said before anything else is checked: a gate compares like with like)."""
    shown = clean_text(str(path), 200)
    document = read_json(path)
    found = document.get("test") if isinstance(document, dict) else None
    if found != wanted and found in kinds.NOUNS and document.get("tool") == "agentsec":
        raise ReportError(f"{shown} is {kinds.NOUNS[found]}, not {kinds.NOUNS[wanted]}")
    return check_report(document, shown)


def load_report(path: Path) -> dict[str, Any]:
    """A saved report, read and checked whole; ReportError (one line) otherwise."""
    return check_report(read_json(path), clean_text(str(path), 200))


def other_document(document: Any) -> str | None:
    """What a read JSON document is when it is one of agentsec's other documents (a matrix
    table), else None: a report, or one that checking as a report will say what is wrong with."""
    kind = document.get("test") if isinstance(document, dict) else None
    return OTHER_DOCUMENTS.get(kind) if isinstance(kind, str) else None


def report_kind(path: Path) -> str | None:
    """The ``test`` a JSON file in a reports directory declares (a matrix table, a report),
    or None when it cannot be told: then loading it as a report says why."""
    try:
        document = read_json(path)
    except ReportError:
        return None
    kind = document.get("test") if isinstance(document, dict) else None
    return kind if isinstance(kind, str) else None
