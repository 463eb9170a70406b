"""The verifier-integrity document (schema_version 1), its Markdown, and its terminal lines.

Pure functions of an ``Outcome``: the command decides where the text goes. Every string from the
trees was cleaned and capped where it was read (``checks``); Markdown escapes it again, and the
terminal gets it as Text, never as markup.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from rich.text import Text

from agentsec import __version__
from agentsec.integrity.checks import MAX_FINDINGS, Outcome
from agentsec.render.lines import Cell, record, wrapped
from agentsec.render.markdown import md
from agentsec.untrusted import clean_text

TEST_VERIFIER_INTEGRITY = "verifier-integrity"
SCHEMA_VERSION = 1


def document(outcome: Outcome, label: str, generated_at: datetime | None = None) -> dict[str, Any]:
    generated = (generated_at or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    listed = outcome.findings[:MAX_FINDINGS]
    return {
        "tool": "agentsec",
        "test": TEST_VERIFIER_INTEGRITY,
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "generated_at": generated,
        "label": clean_text(label, 120),
        "before": outcome.before.as_dict(),
        "after": outcome.after.as_dict(),
        "change": {
            "files_changed": outcome.files_changed,
            "files_analysed": outcome.files_analysed,
            "tests_before": outcome.tests_before,
            "tests_after": outcome.tests_after,
        },
        "summary": {
            "score": outcome.score,
            "raw_score": outcome.raw_score,
            "finding_count": len(outcome.findings),
            "by_severity": outcome.by_severity(),
            # The findings past MAX_FINDINGS are counted above and left out of the list below.
            "findings_omitted": len(outcome.findings) - len(listed),
        },
        "findings": [f.as_dict() for f in listed],
    }


def _where(finding: dict[str, Any]) -> str:
    line = f":{finding['line']}" if finding.get("line") else ""
    side = " (before)" if finding.get("side") == "before" else ""
    return f"{finding['path']}{line}{side}"


def score_line(doc: dict[str, Any]) -> str:
    summary = doc["summary"]
    count = summary["finding_count"]
    noun = "finding" if count == 1 else "findings"
    raw = f" (raw {summary['raw_score']})" if summary["raw_score"] != summary["score"] else ""
    return f"verifier integrity: score {summary['score']} / 100{raw}, {count} {noun}"


def markdown(doc: dict[str, Any]) -> str:
    def side(s: dict[str, Any]) -> str:
        if s["kind"] == "git":
            return f"{md(s['path'])} at {md(s['ref'])} ({s['commit']})"
        return md(s["path"])

    change = doc["change"]
    lines = [
        f"# Verifier integrity: {md(doc['label'])}",
        "",
        f"**Score: {doc['summary']['score']} / 100** (raw {doc['summary']['raw_score']})",
        "",
        f"- before: {side(doc['before'])}",
        f"- after: {side(doc['after'])}",
        f"- files changed: {change['files_changed']}, analysed: {change['files_analysed']}",
        f"- tests in the changed files: {change['tests_before']} before, "
        f"{change['tests_after']} after",
        f"- generated {doc['generated_at']} by agentsec {doc['tool_version']}",
        "",
    ]
    if not doc["findings"]:
        lines.append("No findings: nothing in this change passes the tests without the work.")
        return "\n".join(lines) + "\n"
    lines += ["| ID | Severity | Points | Where | Evidence |", "|---|---|--:|---|---|"]
    for f in doc["findings"]:
        lines.append(f"| {f['id']} | {f['severity']} | {f['points']} | {md(_where(f))} | "
                     f"{md(f['title'])}: {md(f['evidence'])} |")
    omitted = doc["summary"]["findings_omitted"]
    if omitted:
        lines += ["", f"{omitted} more findings are counted in the score and not listed."]
    return "\n".join(lines) + "\n"


def terminal_lines(doc: dict[str, Any], width: int) -> list[Text]:
    """One line per finding (ID, severity, points, title), where and what indented below."""
    lines: list[Text] = []
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
