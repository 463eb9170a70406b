"""The verifier-integrity report (schema_version 1), its Markdown, and its terminal lines.

Pure functions of what was checked (the change's ``Outcome``, the sandbox's ``Measured``, or
both): the command decides where the text goes. Every string from the
trees was cleaned and capped where it was read (``checks``); Markdown escapes it again, and the
terminal gets it as Text, never as markup.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import Any

from rich.text import Text

from agentsec import __version__
from agentsec.catalogue import SEVERITY_ORDER
from agentsec.integrity.checks import MAX_FINDINGS, Outcome
from agentsec.integrity.could import Measured
from agentsec.integrity.could import findings as could_findings
from agentsec.kinds import TEST_VERIFIER_INTEGRITY
from agentsec.render.lines import Cell, record, wrapped
from agentsec.render.markdown import md
from agentsec.reportfile import UNMEASURED_CHECKS
from agentsec.untrusted import clean_text

SCHEMA_VERSION = 1
MAX_SCORE = 100


def document(label: str, outcome: Outcome | None = None, could: Measured | None = None,
             generated_at: datetime | None = None) -> dict[str, Any]:
    """The report of a run: the change (``outcome``), the sandbox (``could``), or both."""
    generated = (generated_at or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    findings = list(outcome.findings) if outcome is not None else []
    if could is not None:
        findings += could_findings(could)
    order = {severity: rank for rank, severity in enumerate(SEVERITY_ORDER)}
    findings.sort(key=lambda f: (order[f.severity], f.id, f.path, f.line or 0))
    listed = findings[:MAX_FINDINGS]
    raw = sum(f.points for f in findings)
    counts = Counter(f.severity for f in findings)
    doc: dict[str, Any] = {
        "tool": "agentsec",
        "test": TEST_VERIFIER_INTEGRITY,
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "generated_at": generated,
        "label": clean_text(label, 120),
    }
    if outcome is not None:
        doc["before"] = outcome.before.as_dict()
        doc["after"] = outcome.after.as_dict()
        doc["change"] = {
            "files_changed": outcome.files_changed,
            "files_analysed": outcome.files_analysed,
            "tests_before": outcome.tests_before,
            "tests_after": outcome.tests_after,
        }
    if could is not None:
        doc["could"] = could.section()
    doc["summary"] = {
        "score": min(raw, MAX_SCORE),
        "raw_score": raw,
        # a file not analysed, a path the probe could not tell about: there may be more
        "score_is_lower_bound": any(f.id in UNMEASURED_CHECKS for f in findings),
        "finding_count": len(findings),
        "by_severity": {severity: counts.get(severity, 0) for severity in SEVERITY_ORDER},
        # The findings past MAX_FINDINGS are counted above and left out of the list below.
        "findings_omitted": len(findings) - len(listed),
    }
    doc["findings"] = [f.as_dict() for f in listed]
    return doc


def _where(finding: dict[str, Any]) -> str:
    line = f":{finding['line']}" if finding.get("line") else ""
    side = {"before": " (before)", "sandbox": " (in the sandbox)"}.get(finding.get("side", ""), "")
    return f"{finding['path']}{line}{side}"


def score_line(doc: dict[str, Any]) -> str:
    summary = doc["summary"]
    count = summary["finding_count"]
    noun = "finding" if count == 1 else "findings"
    raw = f" (raw {summary['raw_score']})" if summary["raw_score"] != summary["score"] else ""
    bound = " (a lower bound)" if summary.get("score_is_lower_bound") else ""
    return f"verifier integrity: score {summary['score']} / 100{raw}{bound}, {count} {noun}"


def _side(s: dict[str, Any]) -> str:
    if s["kind"] == "git":
        return f"{md(s['path'])} at {md(s['ref'])} ({s['commit']})"
    return md(s["path"])


def checked(doc: dict[str, Any]) -> str:
    """What the run looked at, in a few words: the change, the sandbox, or both."""
    parts = []
    if "change" in doc:
        parts.append(f"the change from {doc['before'].get('ref') or doc['before']['path']} "
                     f"to {doc['after'].get('ref') or doc['after']['path']}")
    if "could" in doc:
        parts.append(f"a {doc['could']['kind']} sandbox on {doc['could']['project']}")
    return "; ".join(parts)


def markdown(doc: dict[str, Any]) -> str:
    summary = doc["summary"]
    lines = [
        f"# Verifier integrity: {md(doc['label'])}",
        "",
        f"**Score: {summary['score']} / 100** (raw {summary['raw_score']})"
        + (" — a lower bound: part of it could not be checked"
           if summary.get("score_is_lower_bound") else ""),
        "",
    ]
    if "change" in doc:
        change = doc["change"]
        lines += [
            f"- before: {_side(doc['before'])}",
            f"- after: {_side(doc['after'])}",
            f"- files changed: {change['files_changed']}, analysed: {change['files_analysed']}",
            f"- tests in the changed files: {change['tests_before']} before, "
            f"{change['tests_after']} after",
        ]
    if "could" in doc:
        could = doc["could"]
        lines.append(f"- sandbox: {md(could['kind'])}, the project {md(could['project'])} seen "
                     f"at {md(could['inside'])}, probe {md(could['probe_version'] or '?')}")
    lines += [f"- generated {doc['generated_at']} by agentsec {doc['tool_version']}", ""]
    if "could" in doc:
        lines += ["| Path in the sandbox | Expected | Verdict | Observed |", "|---|---|---|---|"]
        lines += [f"| {md(r['path'])} | {r['expectation']} | {r['verdict']} | "
                  f"{md(r['observed'])} |" for r in doc["could"]["results"]]
        lines.append("")
    if not doc["findings"]:
        lines.append("No findings: nothing here passes the tests without the work.")
        return "\n".join(lines) + "\n"
    lines += ["| ID | Severity | Points | Where | Evidence |", "|---|---|--:|---|---|"]
    for f in doc["findings"]:
        lines.append(f"| {f['id']} | {f['severity']} | {f['points']} | {md(_where(f))} | "
                     f"{md(f['title'])}: {md(f['evidence'])} |")
    omitted = summary["findings_omitted"]
    if omitted:
        lines += ["", f"{omitted} more findings are counted in the score and not listed."]
    return "\n".join(lines) + "\n"


def terminal_lines(doc: dict[str, Any], width: int) -> list[Text]:
    """The sandbox's paths (when could ran), then one line per finding (ID, severity, points,
    title), where and what indented below, then the score."""
    lines: list[Text] = []
    for r in doc.get("could", {}).get("results", []):
        style = "green" if r["verdict"] == "pass" else "bold red"
        cells = [Cell(r["verdict"].upper(), 8, style), Cell(r["expectation"], 12)]
        lines.append(record(cells, r["path"]))
        lines += wrapped(f"observed: {r['observed']}", width, indent=9, style="dim")
    if doc["findings"]:
        header = record([Cell("ID", 7), Cell("Severity", 8), Cell("Pts", 3, right=True)],
                         "Check")
        header.stylize("bold")
        lines.append(header)
    for f in doc["findings"]:
        cells = [Cell(f["id"], 7), Cell(f["severity"], 8), Cell(str(f["points"]), 3, right=True)]
        lines.append(record(cells, f["title"]))
        lines += wrapped(_where(f), width, indent=6)
        lines += wrapped(f["evidence"], width, indent=8, style="dim")
    omitted = doc["summary"]["findings_omitted"]
    if omitted:
        lines.append(Text(f"{omitted} more findings not listed (see --json)", style="dim"))
    lines.append(Text(score_line(doc), style="bold"))
    return lines
