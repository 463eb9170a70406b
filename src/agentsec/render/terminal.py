"""Rich renderables for the terminal. Text from reports is passed as Text, never as markup."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.table import Table
from rich.text import Text

from agentsec.render.states import axis_cell

_STATE_STYLES = {
    "sealed": "green",
    "refused": "yellow",
    "reachable": "bold red",
    "not_measured": "magenta",
}


def _axis_text(axis: dict[str, Any]) -> Text:
    return Text(axis_cell(axis), style=_STATE_STYLES.get(axis.get("state"), "magenta"))


def _score_text(summary: dict[str, Any]) -> Text:
    text = Text(str(summary["score"]), style="bold")
    if summary.get("score_is_lower_bound"):
        text.append(" (lower bound)", style="magenta")
    return text


def scores_table(
    reports: Iterable[dict[str, Any]], title: str | None = None, detailed: bool = False
) -> Table:
    """One row per report: label, score, a cell per axis; raw score and finding IDs if detailed."""
    reports = list(reports)
    table = Table(title=title, show_lines=detailed)
    table.add_column("Configuration", no_wrap=True)
    table.add_column("Score", justify="right", no_wrap=True)
    if detailed:
        table.add_column("Raw", justify="right")
    if reports:
        for axis in reports[0]["summary"]["axes"].values():
            table.add_column(axis["title"])
    if detailed:
        table.add_column("Findings")
    for report in reports:
        summary = report["summary"]
        row: list[Text | str] = [Text(report["label"]), _score_text(summary)]
        if detailed:
            row.append(str(summary["raw_score"]))
        row += [_axis_text(a) for a in summary["axes"].values()]
        if detailed:
            row.append(Text(" ".join(f["id"] for f in summary["findings"])))
        table.add_row(*row)
    return table


def findings_table(report: dict[str, Any]) -> Table:
    table = Table(title=Text(f"Findings: {report['label']}"))
    for column in ("ID", "Severity", "Pts", "Finding", "Evidence"):
        table.add_column(column, justify="right" if column == "Pts" else "left")
    for f in report["summary"]["findings"]:
        table.add_row(
            f["id"],
            f["severity"],
            str(f["points"]),
            Text(f["title"]),
            Text("\n".join(f["evidence"])),
        )
    return table
