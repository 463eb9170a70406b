"""``agentsec history [LABEL]``: score and axis states (or a verifier-integrity run's findings)
over time, regressions highlighted."""

from __future__ import annotations

from pathlib import Path

import click
from rich.text import Text

from agentsec.cliutil import GateFailed, console, emit_json
from agentsec.history import DB_NAME, History, Run, regression_between
from agentsec.kinds import TEST_VERIFIER_INTEGRITY
from agentsec.render.lines import Cell, Lines, record, wrapped
from agentsec.render.states import STATE_LABELS
from agentsec.render.terminal import STATE_STYLES, axis_codes, legend
from agentsec.results import document
from agentsec.untrusted import clean_text


def _flag(line: Text, reasons: tuple[str, ...], width: int) -> list[Text]:
    if reasons:
        line.append("  REGRESSION", style="bold red reverse")
    return [line, *(text for reason in reasons
                    for text in wrapped(clean_text(reason), width, indent=6, style="red"))]


def _sandbox_lines(runs: list[Run], regressions: dict[int, tuple[str, ...]],
                   width: int) -> list[Text]:
    axis_ids = list(runs[-1].axes)
    titles = [a.capitalize() for a in axis_ids]
    codes = axis_codes(titles)
    header = [Cell("When", 20), Cell("Score", 6, right=True)] + [Cell(c, len(c)) for c in codes]
    lines = [record(header, "Label")]
    lines[-1].stylize("bold")
    for run in runs:
        cells = [Cell(run.generated_at, 20), Cell(f"{run.score}{'+' if run.lower_bound else ' '}",
                                                     6, "bold", right=True)]
        for axis_id, code in zip(axis_ids, codes):
            state = run.axes.get(axis_id, "not_measured")
            symbol = STATE_LABELS.get(state, STATE_LABELS["not_measured"])[0]
            cells.append(Cell(symbol, len(code), STATE_STYLES.get(state, "magenta")))
        lines += _flag(record(cells, clean_text(run.label)), regressions.get(run.id, ()), width)
    return [*lines, *legend(titles, codes, width, severities=False)]


def _integrity_lines(runs: list[Run], regressions: dict[int, tuple[str, ...]],
                     width: int) -> list[Text]:
    header = [Cell("When", 20), Cell("Score", 6, right=True), Cell("Found", 5, right=True)]
    lines = [Text("Verifier integrity", style="bold"), record(header, "Label")]
    lines[-1].stylize("bold")
    for run in runs:
        cells = [Cell(run.generated_at, 20),
                 Cell(f"{run.score}{'+' if run.lower_bound else ' '}", 6, "bold", right=True),
                 Cell(str(len(run.findings)), 5, right=True)]
        lines += _flag(record(cells, clean_text(run.label)), regressions.get(run.id, ()), width)
    return lines


def _lines(runs: list[Run], regressions: dict[int, tuple[str, ...]], width: int) -> list[Text]:
    """A table of the sandbox runs (a column per axis), then one of the verifier-integrity
    runs (no axes: their findings), each oldest first."""
    if not runs:
        return [Text("no runs recorded")]
    sandboxes = [r for r in runs if r.test != TEST_VERIFIER_INTEGRITY]
    integrity = [r for r in runs if r.test == TEST_VERIFIER_INTEGRITY]
    lines = _sandbox_lines(sandboxes, regressions, width) if sandboxes else []
    if integrity:
        lines += _integrity_lines(integrity, regressions, width)
    return lines


def _regressions(history: History, runs: list[Run]) -> dict[int, tuple[str, ...]]:
    """For each shown run, why it is worse than the previous run of its label (if it is)."""
    found: dict[int, tuple[str, ...]] = {}
    previous: dict[str, dict] = {}
    for run in runs:
        report = history.report(run.id)
        if run.label in previous:
            reasons = regression_between(previous[run.label], report)
            if reasons:
                found[run.id] = reasons
        previous[run.label] = report
    return found


@click.command("history")
@click.argument("label", required=False)
@click.option(
    "--results",
    "results_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("reports"),
    show_default=True,
    help=f"The reports directory whose {DB_NAME} to read.",
)
@click.option("--db", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="A history database elsewhere (overrides --results).")
@click.option("--limit", type=click.IntRange(1, 10000), default=50, show_default=True)
@click.option("--gate", is_flag=True,
              help="Exit 2 when the newest run of LABEL is worse than the run before it.")
@click.option("--json", "as_json", is_flag=True, help="Print a versioned JSON document instead.")
def command(label: str | None, results_dir: Path, db: Path | None, limit: int, gate: bool,
            as_json: bool) -> None:
    """Score and axis states over time (of LABEL, or of every label), regressions highlighted."""
    history = History(db or results_dir / DB_NAME)
    if gate and label is None:
        raise click.UsageError("--gate needs a LABEL")
    runs = history.runs(label, limit=limit)
    regressions = _regressions(history, runs)
    if as_json:
        emit_json(
            document(
                "history",
                label=label,
                runs=[
                    {**run.as_dict(), "regression": list(regressions.get(run.id, ()))}
                    for run in runs
                ],
            )
        )
    else:
        console().print(Lines(lambda width: _lines(runs, regressions, width)))
    if gate and runs and regressions.get(runs[-1].id):
        raise GateFailed(f"the newest run of {label} is worse than the run before it")
