"""Reports in the terminal: one run per line, one symbol per axis, a legend, the name whole.

Seven axes as words do not fit 80 columns; seven two-character symbols do. Every listing ends
with a legend, so a reader (or a pipe into a file) never has to guess what "✕H" means. Text from
reports is passed as Text, never as markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.text import Text

from agentsec.render.lines import Cell, Lines, record, wrapped
from agentsec.render.states import STATE_LABELS

STATE_STYLES = {
    "sealed": "green",
    "refused": "yellow",
    "reachable": "bold red",
    "not_measured": "magenta",
}
SEVERITY_LETTERS = {"critical": "C", "high": "H", "medium": "M", "low": "L", "info": "I"}
PARTLY = "*"  # the axis has a state, but part of it could not be measured
LOWER_BOUND = "+"  # the score is a lower bound: something was not measured


def axis_codes(titles: Sequence[str]) -> list[str]:
    """The shortest prefix length (at least three letters) that tells every axis apart."""
    longest = max((len(t) for t in titles), default=3)
    for size in range(3, longest + 1):
        codes = [t[:size] for t in titles]
        if len(set(codes)) == len(codes):
            return codes
    return list(titles)


def axis_symbol(axis: dict[str, Any]) -> tuple[str, str]:
    """Two characters for one axis, and its style: '✕H' reachable (high), '✓*' partly measured."""
    state = str(axis.get("state"))
    symbol, _ = STATE_LABELS.get(state, STATE_LABELS["not_measured"])
    suffix = " "
    if state == "reachable" and axis.get("severity"):
        suffix = SEVERITY_LETTERS.get(axis["severity"], "?")
    elif state != "not_measured" and axis.get("not_measured"):
        suffix = PARTLY
    return symbol + suffix, STATE_STYLES.get(state, "magenta")


def _score_cell(summary: dict[str, Any]) -> Cell:
    text = str(summary["score"]) + (LOWER_BOUND if summary.get("score_is_lower_bound") else " ")
    return Cell(text, 6, style="bold", right=True)


def legend(
    titles: Sequence[str], codes: Sequence[str], width: int, severities: bool = True
) -> list[Text]:
    """What the symbols mean, in three lines a reader can find each symbol in."""
    states = "  ".join(f"{sym} {words}" for sym, words in STATE_LABELS.values())
    levels = " ".join(f"{letter}={name}" for name, letter in SEVERITY_LETTERS.items())
    axes = " ".join(f"{code}={title.lower()}" for code, title in zip(codes, titles))
    marks = f"{PARTLY} partly not measured;  score{LOWER_BOUND} a lower bound"
    parts = [
        f"legend: {states}",
        f"after ✕ the worst severity: {levels};  {marks}" if severities else marks,
        f"axes: {axes}",
    ]
    return [line for part in parts for line in wrapped(part, width, indent=0, style="dim")]


def _scores(reports: list[dict[str, Any]], title: str | None, detailed: bool, width: int):
    lines: list[Text] = []
    if title:
        lines.append(Text(title, style="bold"))
    if not reports:
        return [*lines, Text("no runs")]
    axes = list(reports[0]["summary"]["axes"].values())
    titles = [a["title"] for a in axes]
    codes = axis_codes(titles)
    header = [Cell("Score", 6, right=True)]
    if detailed:
        header.append(Cell("Raw", 4, right=True))
    header += [Cell(code, len(code)) for code in codes]
    lines.append(record(header, "Configuration"))
    lines[-1].stylize("bold")
    for report in reports:
        summary = report["summary"]
        cells = [_score_cell(summary)]
        if detailed:
            cells.append(Cell(str(summary["raw_score"]), 4, right=True))
        by_id = summary["axes"]
        for axis_id, code in zip(reports[0]["summary"]["axes"], codes):
            symbol, style = axis_symbol(by_id.get(axis_id, {"state": "not_measured"}))
            cells.append(Cell(symbol, len(code), style=style))
        lines.append(record(cells, report["label"]))
        if detailed:
            ids = " ".join(f["id"] for f in summary["findings"]) or "no findings"
            lines += wrapped(f"findings: {ids}", width, indent=7, style="dim")
    lines += legend(titles, codes, width)
    return lines


def scores_table(
    reports: Iterable[dict[str, Any]], title: str | None = None, detailed: bool = False
) -> Lines:
    """One line per run: score, a symbol per axis, the label; raw score and findings if detailed."""
    reports = list(reports)
    return Lines(lambda width: _scores(reports, title, detailed, width))


def _findings(report: dict[str, Any], width: int) -> list[Text]:
    lines = [Text(f"Findings: {report['label']}", style="bold")]
    findings = report["summary"]["findings"]
    if not findings:
        return [*lines, Text("no findings")]
    for f in findings:
        cells = [Cell(f["id"], 9), Cell(f["severity"], 8), Cell(str(f["points"]), 3, right=True)]
        lines.append(record(cells, f["title"]))
        for item in f["evidence"]:
            lines += wrapped(item, width, indent=6, style="dim")
    return lines


def findings_table(report: dict[str, Any]) -> Lines:
    """One line per finding (ID, severity, points, title), its evidence indented below."""
    return Lines(lambda width: _findings(report, width))


def _integrity(reports: list[dict[str, Any]], title: str | None, detailed: bool, width: int):
    from agentsec.integrity.report import checked

    lines: list[Text] = [Text(title, style="bold")] if title else []
    if not reports:
        return [*lines, Text("no runs")]
    letters = [(severity, letter) for severity, letter in SEVERITY_LETTERS.items()
               if severity != "info"]
    header = [Cell("Score", 6, right=True)]
    if detailed:
        header.append(Cell("Raw", 4, right=True))
    header += [Cell(letter, 3, right=True) for _, letter in letters]
    lines.append(record(header, "Run"))
    lines[-1].stylize("bold")
    for report in reports:
        summary = report["summary"]
        cells = [_score_cell(summary)]
        if detailed:
            cells.append(Cell(str(summary["raw_score"]), 4, right=True))
        for severity, _ in letters:
            count = summary["by_severity"].get(severity, 0)
            cells.append(Cell(str(count), 3, "bold red" if count else "green", right=True))
        lines.append(record(cells, report["label"]))
        if detailed:
            lines += wrapped(f"checked: {checked(report)}", width, indent=7, style="dim")
            ids = " ".join(sorted({f["id"] for f in report["findings"]})) or "no findings"
            lines += wrapped(f"findings: {ids}", width, indent=7, style="dim")
    counts = " ".join(f"{letter}={severity}" for severity, letter in letters)
    lines += wrapped(f"findings by severity: {counts};  score{LOWER_BOUND} a lower bound",
                     width, indent=0, style="dim")
    return lines


def integrity_table(
    reports: Iterable[dict[str, Any]], title: str | None = None, detailed: bool = False
) -> Lines:
    """One line per verifier-integrity run: score, its findings by severity, the label; what it
    checked and its findings' IDs below if detailed. No axes: it measured no sandbox's reach."""
    reports = list(reports)
    return Lines(lambda width: _integrity(reports, title, detailed, width))
