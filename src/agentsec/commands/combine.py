"""``agentsec combine``: a promptfoo eval and a sandbox report, joined."""

from __future__ import annotations

from pathlib import Path

import click

from agentsec.cliutil import emit_json
from agentsec.promptfoo.combine import combine
from agentsec.promptfoo.evalfile import load_eval
from agentsec.render.combined import render_combined_markdown
from agentsec.report import write_atomically
from agentsec.reportfile import load_report
from agentsec.untrusted import clean_report


@click.command("combine")
@click.option("--promptfoo", "promptfoo_file", required=True,
              type=click.Path(path_type=Path, dir_okay=False),
              help="promptfoo's eval output (promptfoo eval -o out.json).")
@click.option("--sandbox", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The agentsec report of the sandbox the agent runs in.")
@click.option("--deployed-in", required=True,
              help="Your statement of where the tested agent runs (e.g. the preset name).")
@click.option("--out", "out_file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write the Markdown here instead of printing it.")
@click.option("--json", "as_json", is_flag=True, help="Print a versioned JSON document instead.")
def command(promptfoo_file: Path, sandbox: Path, deployed_in: str, out_file: Path | None,
            as_json: bool) -> None:
    """Join a promptfoo eval with a sandbox report: which successful attacks meet open doors."""
    report = clean_report(load_report(sandbox))
    doc = combine(load_eval(promptfoo_file), report, deployed_in, str(promptfoo_file),
                  str(sandbox))
    if as_json:
        emit_json(doc)
        return
    text = render_combined_markdown(doc)
    if out_file is None:
        click.echo(text, nl=False)
    else:
        write_atomically(out_file, text)
        click.echo(f"wrote {out_file}")
