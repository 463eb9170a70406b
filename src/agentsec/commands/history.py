"""``agentsec history [LABEL]``: score and axis states over time, regressions highlighted."""

from __future__ import annotations

from pathlib import Path

import click
from rich.text import Text

from agentsec.cliutil import GateFailed, console, emit_json
from agentsec.history import DB_NAME, History, Run, regression_between
from agentsec.render.lines import Cell, Lines, record, wrapped
from agentsec.render.states import STATE_LABELS
from agentsec.render.terminal import STATE_STYLES, axis_codes, legend
from agentsec.results import document
from agentsec.untrusted import clean_text


def _lines(runs: list[Run], regressions: dict[int, tuple[str, ...]], width: int) -> list[Text]:
    if not runs:
        return [Text("no runs recorded")]
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
        reasons = regressions.get(run.id, ())
        line = record(cells, clean_text(run.label))
        if reasons:
            line.append("  REGRESSION", style="bold red reverse")
        lines.append(line)
        for reason in reasons:
            lines += wrapped(clean_text(reason), width, indent=6, style="red")
    return [*lines, *legend(titles, codes, width, severities=False)]


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
