"""The job summary: a short Markdown block for a CI run's summary page (GitHub's
``$GITHUB_STEP_SUMMARY``). Axes first, then the score, then the gates, then the findings folded."""

from __future__ import annotations

from typing import Any

from agentsec import kinds
from agentsec.render.markdown import md
from agentsec.render.states import axis_cell
from agentsec.results import Results


def _run(report: dict[str, Any]) -> list[str]:
    summary = report["summary"]
    axes = summary["axes"].values()
    bound = " (a lower bound: part of the sandbox was not measured)"
    lines = [
        f"### agentsec: {md(report['label'])}",
        "",
        "| " + " | ".join(md(a["title"]) for a in axes) + " |",
        "|" + "|".join(":-:" for _ in axes) + "|",
        "| " + " | ".join(axis_cell(a) for a in axes) + " |",
        "",
        f"**Score: {summary['score']} / 100**"
        + (bound if summary.get("score_is_lower_bound") else "")
        + f" · raw {summary['raw_score']} · probe {md(report['probe']['version'])}"
        + f" · {md(report['target'].get('how') or report['target'].get('kind'))}",
        "",
    ]
    findings = summary["findings"]
    if findings:
        lines += [
            f"<details><summary>{len(findings)} findings</summary>",
            "",
            "| ID | Severity | Points | Finding |",
            "|---|---|--:|---|",
        ]
        lines += [
            f"| {md(f['id'])} | {md(f['severity'])} | {f['points']} | {md(f['title'])} |"
            for f in findings
        ]
        lines += ["", "</details>", ""]
    return lines


def _integrity_run(report: dict[str, Any]) -> list[str]:
    from agentsec.integrity.report import checked

    summary = report["summary"]
    bound = " (a lower bound: part of it could not be checked)"
    lines = [
        f"### agentsec integrity: {md(report['label'])}",
        "",
        f"**Score: {summary['score']} / 100**"
        + (bound if summary.get("score_is_lower_bound") else "")
        + f" · raw {summary['raw_score']} · {md(checked(report))}",
        "",
    ]
    findings = report["findings"]
    if findings:
        lines += [
            f"<details><summary>{summary['finding_count']} findings</summary>",
            "",
            "| ID | Severity | Points | Where | Finding |",
            "|---|---|--:|---|---|",
        ]
        lines += [
            f"| {md(f['id'])} | {md(f['severity'])} | {f['points']} | "
            f"{md(f['path'])}{':' + str(f['line']) if f.get('line') else ''} | {md(f['title'])} |"
            for f in findings
        ]
        lines += ["", "</details>", ""]
    return lines


_RUNS = {kinds.TEST_BLAST_RADIUS: _run, kinds.TEST_VERIFIER_INTEGRITY: _integrity_run}


def render_summary(results: Results) -> str:
    lines: list[str] = []
    for report in results.reports:
        lines += _RUNS[kinds.kind(report)](report)
    if results.gates:
        lines += ["| Gate | Result | Detail |", "|---|---|---|"]
        for gate in results.gates:
            verdict = "✅ passed" if gate.passed else "❌ failed"
            lines.append(f"| {md(gate.name)} | {verdict} | {md(gate.detail)} |")
        lines.append("")
    return "\n".join(lines) + "\n"
