"""A report as Markdown: the axes first, then the score, provenance and the findings."""

from __future__ import annotations

import re
from typing import Any

from agentsec.cage_watcher import watcher_line
from agentsec.render.states import axis_cell

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|#])")


def md(text: Any) -> str:
    """Escape text from a report (ultimately from inside a sandbox) for Markdown."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).splitlines()))


def _score_line(summary: dict[str, Any]) -> str:
    line = f"**Score: {summary['score']} / 100** (raw {summary['raw_score']})"
    if summary.get("score_is_lower_bound"):
        line += " — a lower bound: part of the sandbox was not measured"
    return line


def _axes_table(summary: dict[str, Any]) -> list[str]:
    axes = summary["axes"]
    lines = [
        "| " + " | ".join(md(a["title"]) for a in axes.values()) + " |",
        "|" + "|".join(":-:" for _ in axes) + "|",
        "| " + " | ".join(axis_cell(a) for a in axes.values()) + " |",
    ]
    for axis in axes.values():
        for reason in axis.get("not_measured", []):
            lines.append(f"\n- {md(axis['title'])} not measured: {md(reason)}")
    return lines


def _provenance(report: dict[str, Any]) -> list[str]:
    target = report["target"]
    probe = report["probe"]
    rows = [
        ("label", report["label"]),
        ("how", target.get("how")),
        ("kind", target.get("kind")),
        ("engine", target.get("engine")),
        ("image", target.get("image")),
        ("digest", target.get("digest")),
        ("flags", " ".join(target.get("flags") or []) or None),
        ("command", " ".join(target.get("command") or []) or None),
        ("preset", target.get("preset")),
        ("probe version", probe.get("version")),
        ("generated", report["generated_at"]),
        ("redacted", "yes" if report.get("redacted") else "no"),
    ]
    lines = ["| | |", "|---|---|"]
    lines += [f"| {key} | {md(value)} |" for key, value in rows if value]
    if probe.get("targets_overridden"):
        lines.append(
            "\n> The probe's fixed target list was overridden for this run (a test world)."
        )
    if probe.get("faults_injected"):
        lines.append(f"\n> Faults were injected into: {md(', '.join(probe['faults_injected']))}.")
    return lines


def _watcher(report: dict[str, Any]) -> list[str]:
    watcher = report["target"].get("watcher")
    if watcher is None:
        return []
    lines = ["## Watcher", "", md(watcher_line(watcher))]
    if watcher["findings"]:
        lines += ["", "| When | Budget | Host | What | Action |", "|---|---|---|---|---|"]
        lines += [f"| {f['at']} | {md(f['budget'])} | {md(f['host'])} | {md(f['summary'])} "
                  f"| {md(f['action'])} |" for f in watcher["findings"]]
    return [*lines, ""]


def _findings(summary: dict[str, Any]) -> list[str]:
    if not summary["findings"]:
        return ["No findings."]
    lines = ["| ID | Severity | Points | Finding | Evidence |", "|---|---|--:|---|---|"]
    for f in summary["findings"]:
        evidence = "<br>".join(md(e) for e in f["evidence"])
        lines.append(
            f"| {f['id']} | {f['severity']} | {f['points']} | {md(f['title'])} | {evidence} |"
        )
    return lines


def _remediation(summary: dict[str, Any]) -> list[str]:
    lines = []
    if summary["recommended_flags"]:
        flags = " ".join(summary["recommended_flags"])
        lines += ["Recommended launcher flags (Docker/Podman):", "", f"    {flags}", ""]
    advice = {f["id"]: f["remediation"]["advice"] for f in summary["findings"]}
    lines += [f"- **{fid}**: {md(text)}" for fid, text in advice.items() if text]
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    summary = report["summary"]
    parts = [
        f"# Blast radius: {md(report['label'])}",
        "",
        *_axes_table(summary),
        "",
        _score_line(summary),
        "",
        "## Provenance",
        "",
        *_provenance(report),
        "",
        *_watcher(report),
        "## Findings",
        "",
        *_findings(summary),
        "",
        "## Remediation",
        "",
        *_remediation(summary),
        "",
    ]
    return "\n".join(parts)
