"""``agentsec chart``: many runs as one colour-coded chart, one row per run."""

from __future__ import annotations

from pathlib import Path

import click

from agentsec.cliutil import load_reports
from agentsec.errors import AgentsecError
from agentsec.render.chart import THEMES, charted, render_chart_markdown, render_chart_svg
from agentsec.report import write_atomically


@click.command("chart")
@click.argument("reports", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_file",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="chart.svg for a picture, chart.md for a Markdown table.",
)
@click.option("--theme", type=click.Choice(list(THEMES)), default="light", show_default=True)
def command(reports: tuple[Path, ...], out_file: Path, theme: str) -> None:
    """One row per run, one coloured cell per axis, and the score (SVG, or Markdown for .md)."""
    suffix = out_file.suffix.lower()
    if suffix not in (".svg", ".md"):
        raise AgentsecError(f"--out {out_file}: name the file .svg or .md")
    every = load_reports(reports)
    loaded = charted(every)
    if not loaded:
        raise AgentsecError("no blast-radius reports to chart (a chart has a cell per sandbox "
                            "axis; agentsec compare shows verifier-integrity runs)")
    loaded.sort(key=lambda r: (-r["summary"]["score"], r["label"]))
    text = render_chart_svg(loaded, theme) if suffix == ".svg" else render_chart_markdown(loaded)
    write_atomically(out_file, text)
    left = len(every) - len(loaded)
    note = f"; {left} verifier-integrity runs left out: they have no axes" if left else ""
    click.echo(f"wrote {out_file} ({len(loaded)} runs{note})")
