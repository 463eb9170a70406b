"""The other listings of the agentsec CLI (presets, path assertions), one record per line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text

from agentsec.render.lines import Cell, Lines, record, wrapped


def _presets(rows: Sequence[tuple[Any, Any]], width: int) -> list[Text]:
    lines = [Text("Presets (runnable here? engine, name; why below)", style="bold")]
    for preset, state in rows:
        runnable = Cell("yes" if state.runnable else "no", 3, "green" if state.runnable else "red")
        lines.append(record([runnable, Cell(preset.engine, 6)], preset.name, name_style="bold"))
        lines += wrapped(state.why_not or preset.rationale, width, indent=11, style="dim")
    return lines


def preset_lines(rows: Sequence[tuple[Any, Any]]) -> Lines:
    """One preset per line with its name whole (it is what `blast-radius preset` takes), then
    its rationale, or why this host cannot run it, wrapped below."""
    rows = list(rows)
    return Lines(lambda width: _presets(rows, width))


def _assertions(results: Sequence[Any], width: int) -> list[Text]:
    lines = [Text("Path assertions", style="bold")]
    for r in results:
        style = "green" if r.verdict == "pass" else "bold red"
        cells = [Cell(r.verdict.upper(), 4, style), Cell(r.expectation, 12)]
        lines.append(record(cells, r.path))
        lines += wrapped(f"observed: {r.observed}", width, indent=5, style="dim")
    return lines


def assertion_lines(results: Sequence[Any]) -> Lines:
    results = list(results)
    return Lines(lambda width: _assertions(results, width))
