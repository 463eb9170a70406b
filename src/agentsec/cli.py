"""The ``agentsec`` command. Thin: parse options, call a service, format, choose the exit code.

Exit codes: 0 ok, 1 an error (bad input, a probe that could not run), 2 a gate failed
(``--max-score``). Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from agentsec import __version__, service
from agentsec.errors import AgentsecError, CaptureError
from agentsec.render.terminal import findings_table, scores_table
from agentsec.report import Target
from agentsec.runner import run_probe
from agentsec.untrusted import parse_probe_output

EXIT_OK, EXIT_ERROR, EXIT_GATE = 0, 1, 2


class GateFailed(Exception):
    """A CI gate tripped: exit 2 after the report has been written."""


def _console() -> Console:
    return Console(highlight=False, soft_wrap=False)


def _finish(saved: service.SavedReport, max_score: int | None, print_findings: bool) -> None:
    console = _console()
    report = saved.report
    console.print(scores_table([report]))
    if print_findings:
        console.print(findings_table(report))
    console.print(f"reports: {saved.json_path}  {saved.markdown_path}", markup=False)
    score = report["summary"]["score"]
    if max_score is not None and score > max_score:
        raise GateFailed(f"score {score} is above the budget --max-score {max_score}")


common_options = [
    click.option(
        "--label", required=True, help="Name of this measurement; names the report files."
    ),
    click.option(
        "--how", required=True, help="How the sandbox was set up (recorded in the report)."
    ),
    click.option(
        "--out",
        "out_dir",
        type=click.Path(path_type=Path),
        default=Path("reports"),
        show_default=True,
        help="Directory for <label>.json and <label>.md.",
    ),
    click.option(
        "--max-score",
        type=click.IntRange(0, 100),
        default=None,
        help="Exit 2 when the score is above this budget.",
    ),
    click.option("--print-findings", is_flag=True, help="Print the finding list too."),
    click.option(
        "--redact",
        is_flag=True,
        help="Strip hostname, paths, user and variable names; keep every score and finding.",
    ),
]


def with_common_options(func):  # type: ignore[no-untyped-def]
    for option in reversed(common_options):
        func = option(func)
    return func


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentsec")
def cli() -> None:
    """Measure what a sandbox lets an AI agent reach, and score it (0 = nothing reachable)."""


@cli.command()
@with_common_options
def probe(
    label: str, how: str, out_dir: Path, max_score: int | None, print_findings: bool, redact: bool
) -> None:
    """Measure the sandbox this command runs in (the probe runs as a child process)."""
    run = run_probe()
    report = service.score(
        run.output, label=label, target=Target(kind="local", how=how), rc=run.rc, redact=redact
    )
    _finish(service.save(report, out_dir), max_score, print_findings)


@cli.command()
@click.argument("capture", type=click.Path(path_type=Path, dir_okay=False))
@with_common_options
def score(
    capture: Path,
    label: str,
    how: str,
    out_dir: Path,
    max_score: int | None,
    print_findings: bool,
    redact: bool,
) -> None:
    """Score a probe output captured elsewhere (the probe's one JSON line, saved to a file)."""
    try:
        text = capture.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise CaptureError(f"cannot read {capture}: {exc.strerror}") from exc
    output = parse_probe_output(text, source=str(capture))
    report = service.score(
        output, label=label, target=Target(kind="captured", how=how), rc=0, redact=redact
    )
    _finish(service.save(report, out_dir), max_score, print_findings)


@cli.command()
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path), default=Path("reports"), show_default=True
)
def demo(out_dir: Path) -> None:
    """Build a fake internet and measure an open configuration against bubblewrap sandboxes."""
    from agentsec.demo import run_demo  # imported late: it needs root and the namespace tools

    saved = run_demo(out_dir, progress=_console())
    console = _console()
    console.print(scores_table([s.report for s in saved], title="Blast radius, fake internet"))
    for item in saved:
        console.print(
            f"{item.report['label']}: {item.json_path}  {item.markdown_path}", markup=False
        )


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="agentsec", standalone_mode=False)
    except GateFailed as gate:
        click.echo(f"agentsec: gate failed: {gate}", err=True)
        return EXIT_GATE
    except AgentsecError as error:
        click.echo(f"agentsec: error: {error}", err=True)
        return EXIT_ERROR
    except click.exceptions.Abort:
        click.echo("agentsec: aborted", err=True)
        return EXIT_ERROR
    except click.ClickException as error:
        # Usage errors are errors (1), so that 2 always means "a gate failed".
        click.echo(f"agentsec: error: {error.format_message()}", err=True)
        return EXIT_ERROR
    except KeyboardInterrupt:
        click.echo("agentsec: interrupted", err=True)
        return 130
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
