"""The ``agentsec`` command. Thin: parse options, call a service, format, choose the exit code.

Exit codes: 0 ok, 1 an error (bad input, a probe that could not run), 2 a gate failed
(``--max-score``, ``--baseline``, ``diff``, ``assert``). Errors are one line on stderr, never a
traceback. Reports are written before any gate is applied, so a failing gate keeps its evidence.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agentsec import __version__, gate, service
from agentsec.assertions import EXPECTATIONS, probe_env
from agentsec.assertions import check as check_paths
from agentsec.errors import AgentsecError, CaptureError, ReportError
from agentsec.launchers import (
    Launch,
    availability,
    bwrap_launch,
    cage_launch,
    command_launch,
    container_launch,
    describe,
    load_presets,
    local_launch,
    preset_launch,
)
from agentsec.matrix import choose_presets, run_matrix, save_matrix
from agentsec.render.html import render_html
from agentsec.render.terminal import findings_table, scores_table
from agentsec.report import TEST_BLAST_RADIUS, Target, write_atomically
from agentsec.runner import run_probe
from agentsec.scoring.rank import ranked
from agentsec.untrusted import parse_probe_output

EXIT_OK, EXIT_ERROR, EXIT_GATE = 0, 1, 2


class GateFailed(Exception):
    """A CI gate tripped: exit 2 after the report has been written."""


def _console() -> Console:
    return Console(highlight=False, soft_wrap=False, emoji=False)


def _options(*options: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def decorate(func: Any) -> Any:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


PROVENANCE = (
    click.option("--label", required=True, help="Name of this measurement; names the reports."),
    click.option("--how", required=True, help="How the sandbox was set up (kept in the report)."),
)
OUT_DIR = click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("reports"),
    show_default=True,
    help="Directory the reports are written to.",
)
GATES = (
    OUT_DIR,
    click.option(
        "--max-score",
        type=click.IntRange(0, 100),
        default=None,
        help="Exit 2 when the score is above this budget.",
    ),
    click.option(
        "--baseline",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="An accepted report: exit 2 when this run is worse in any way.",
    ),
    click.option("--print-findings", is_flag=True, help="Print the finding list too."),
    click.option(
        "--redact",
        is_flag=True,
        help="Strip hostname, paths, user and variable names; keep every score and finding.",
    ),
)
LAUNCH = (
    click.option("--label", default=None, help="Report name (default: derived from the target)."),
    click.option("--how", default=None, help="How it was set up (default: the command line)."),
    click.option(
        "--python",
        default="python3",
        show_default=True,
        help="The interpreter to start inside the sandbox.",
    ),
)


def _finish(saved: service.SavedReport, opts: dict[str, Any]) -> None:
    """Show a saved report, then apply the gates."""
    console = _console()
    report = saved.report
    console.print(scores_table([report]))
    if opts.get("print_findings"):
        console.print(findings_table(report))
    console.print(f"reports: {saved.json_path}  {saved.markdown_path}", markup=False)
    failures = []
    score, budget = report["summary"]["score"], opts.get("max_score")
    if budget is not None and score > budget:
        failures.append(f"score {score} is above the budget --max-score {budget}")
    baseline = opts.get("baseline")
    if baseline is not None:
        result = gate.compare(gate.load_report(baseline), report)
        console.print(gate.render_gate(result), markup=False)
        if result.failed:
            failures.append(f"worse than the baseline {baseline}")
    if failures:
        raise GateFailed("; ".join(failures))


def _measure_and_finish(launch: Launch, label: str, opts: dict[str, Any]) -> None:
    if opts.get("baseline") is not None:
        gate.load_report(opts["baseline"])  # a corrupt baseline fails before anything runs
    run = run_probe(launch.prefix, python=launch.python)
    report = service.score(
        run.output, label=label, target=launch.target, rc=run.rc, redact=opts["redact"]
    )
    _finish(service.save(report, opts["out_dir"]), opts)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentsec")
def cli() -> None:
    """Measure what a sandbox lets an AI agent reach, and score it (0 = nothing reachable)."""


@cli.command()
@_options(*PROVENANCE, *GATES)
def probe(label: str, how: str, **opts: Any) -> None:
    """Measure the sandbox this command runs in (the probe runs as a child process)."""
    _measure_and_finish(local_launch(how, sys.executable), label, opts)


@cli.command()
@click.argument("capture", type=click.Path(path_type=Path, dir_okay=False))
@_options(*PROVENANCE, *GATES)
def score(capture: Path, label: str, how: str, **opts: Any) -> None:
    """Score a probe output captured elsewhere (the probe's one JSON line, saved to a file)."""
    if opts.get("baseline") is not None:
        gate.load_report(opts["baseline"])
    try:
        text = capture.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise CaptureError(f"cannot read {capture}: {exc.strerror}") from exc
    output = parse_probe_output(text, source=str(capture))
    target = Target(kind="captured", how=how)
    report = service.score(output, label=label, target=target, rc=0, redact=opts["redact"])
    _finish(service.save(report, opts["out_dir"]), opts)


@cli.group("blast-radius")
def blast_radius() -> None:
    """Run the probe inside a sandbox and score what it reached."""


def _run_launch(launch: Launch, default_label: str, opts: dict[str, Any]) -> None:
    how = opts["how"] or describe(launch)
    launch = dataclasses.replace(launch, target=dataclasses.replace(launch.target, how=how))
    _measure_and_finish(launch, opts["label"] or default_label, opts)


@blast_radius.command("local")
@_options(*LAUNCH, *GATES)
def br_local(**opts: Any) -> None:
    """No sandbox: measure this process's own environment."""
    _run_launch(local_launch("", opts["python"]), "local", opts)


@blast_radius.command("bwrap")
@click.argument("bwrap_flags", nargs=-1, type=click.UNPROCESSED)
@_options(*LAUNCH, *GATES)
def br_bwrap(bwrap_flags: tuple[str, ...], **opts: Any) -> None:
    """bubblewrap with the flags given after `--`."""
    _run_launch(bwrap_launch(bwrap_flags, "", opts["python"]), "bwrap", opts)


def _container_command(engine: str) -> click.Command:
    @click.argument("image")
    @click.argument("engine_flags", nargs=-1, type=click.UNPROCESSED)
    @click.option("--engine-bin", default=None, help=f"A {engine}-compatible CLI to run instead.")
    @_options(*LAUNCH, *GATES)
    def command(image: str, engine_flags: tuple[str, ...], engine_bin: str | None, **opts: Any):
        launch = container_launch(engine, image, engine_flags, "", engine_bin, opts["python"])
        _run_launch(launch, f"{engine}_{image}", opts)

    command.__doc__ = f"A {engine} container from IMAGE; flags after `--` go to `{engine} run`."
    return click.command(engine)(command)


blast_radius.add_command(_container_command("docker"))
blast_radius.add_command(_container_command("podman"))


@blast_radius.command("cage")
@click.argument("name")
@_options(*LAUNCH, *GATES)
def br_cage(name: str, **opts: Any) -> None:
    """A running agentcage cage, measured from inside through `agentcage exec`."""
    _run_launch(cage_launch(name, "", python=opts["python"]), f"cage-{name}", opts)


@blast_radius.command("command")
@click.argument("template")
@_options(*LAUNCH, *GATES)
def br_command(template: str, **opts: Any) -> None:
    """A command that runs the probe: it names the file as {probe}, or ends in '-' to read the
    probe's source on stdin (e.g. 'ssh box python3 -')."""
    _run_launch(command_launch(template, ""), "command", opts)


@blast_radius.command("preset")
@click.argument("name")
@click.argument("extra_flags", nargs=-1, type=click.UNPROCESSED)
@click.option("--image", default=None, help="The image, for container presets.")
@click.option("--engine-bin", default=None, help="An engine-compatible CLI to run instead.")
@click.option(
    "--as-user", default=None, metavar="UID[:GID]", help="Peer presets, from root: start as."
)
@_options(*LAUNCH, *GATES)
def br_preset(
    name: str,
    extra_flags: tuple[str, ...],
    image: str | None,
    engine_bin: str | None,
    as_user: str | None,
    **opts: Any,
) -> None:
    """A configuration shipped in presets.json (`agentsec presets` lists them)."""
    launch = preset_launch(name, "", image, extra_flags, engine_bin, opts["python"], as_user)
    _run_launch(launch, f"{name}_{image}" if image else name, opts)


@cli.command()
def presets() -> None:
    """The shipped presets, and whether this host can run each one now."""
    table = Table(title="Presets")
    for column in ("Preset", "Engine", "Runnable here", "Rationale / why not"):
        table.add_column(column)
    for preset in load_presets().values():
        state = availability(preset)
        table.add_row(
            preset.name,
            preset.engine,
            Text("yes", style="green") if state.runnable else Text("no", style="red"),
            Text(state.why_not or preset.rationale),
        )
    _console().print(table)


@cli.command()
@click.argument("old", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("new", type=click.Path(path_type=Path, dir_okay=False))
def diff(old: Path, new: Path) -> None:
    """Exit 2 when NEW is worse than the accepted OLD report in any way."""
    result = gate.compare(gate.load_report(old), gate.load_report(new))
    click.echo(gate.render_gate(result))
    if result.failed:
        raise GateFailed(f"{new} is worse than the baseline {old}")


def _load_reports(paths: tuple[Path, ...]) -> list[dict[str, Any]]:
    """Blast-radius reports from files, and from directories (whose other JSON files, such as
    matrix tables, are passed over). A named file that is not a report is an error."""
    reports: list[dict[str, Any]] = []
    for path in paths:
        if not path.is_dir():
            reports.append(gate.load_report(path))
            continue
        for member in sorted(path.glob("*.json")):
            try:
                kind = json.loads(member.read_text(encoding="utf-8")).get("test")
            except (OSError, ValueError, AttributeError):
                kind = None  # unreadable: load_report below says why, in one line
            if kind in (None, TEST_BLAST_RADIUS):
                reports.append(gate.load_report(member))
    if not reports:
        raise ReportError("no reports found in what was given")
    return reports


@cli.command()
@click.argument("reports", nargs=-1, required=True, type=click.Path(path_type=Path))
def compare(reports: tuple[Path, ...]) -> None:
    """Side by side: label, score, raw score, each axis and the findings, one row per report,
    worst first (score, then raw score, then axis band: see agentsec.scoring.rank)."""
    loaded = ranked(_load_reports(reports))
    _console().print(scores_table(loaded, title="Comparison", detailed=True))


def _assert_launch(
    kind: str,
    image: str | None,
    template: str | None,
    engine_flags: tuple[str, ...],
    engine_bin: str | None,
    python: str,
) -> Launch:
    if kind == "local":
        return local_launch("agentsec assert", sys.executable)
    if kind == "bwrap":
        return bwrap_launch(engine_flags, "agentsec assert", python)
    if kind == "command":
        if not template:
            raise AgentsecError("--kind command needs --template 'CMD ... {probe}'")
        return command_launch(template, "agentsec assert")
    if not image:
        raise AgentsecError(f"--kind {kind} needs --image")
    return container_launch(kind, image, engine_flags, "agentsec assert", engine_bin, python)


@cli.command("assert")
@click.option(
    "--kind",
    type=click.Choice(["local", "bwrap", "docker", "podman", "command"]),
    required=True,
    help="Where to run the probe.",
)
@click.option("--image", default=None, help="The image, for docker and podman.")
@click.option("--template", default=None, help="For --kind command: names {probe} or ends in '-'.")
@click.option("--engine-bin", default=None, help="An engine-compatible CLI to run instead.")
@click.option("--python", default="python3", show_default=True, help="Interpreter in sandbox.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@_options(
    *(
        click.option(
            f"--{name}",
            f"expect_{name.replace('-', '_')}",
            multiple=True,
            metavar="PATH",
            help=f"Expect PATH to be {name.replace('-', ' ')}.",
        )
        for name in EXPECTATIONS
    )
)
@click.argument("engine_flags", nargs=-1, type=click.UNPROCESSED)
def assert_paths(
    kind: str,
    image: str | None,
    template: str | None,
    engine_bin: str | None,
    python: str,
    as_json: bool,
    engine_flags: tuple[str, ...],
    **expected: tuple[str, ...],
) -> None:
    """Pass or fail per path, no score: exit 2 when any expectation is violated or untested."""
    wanted = [
        (name, path)
        for name in EXPECTATIONS
        for path in expected[f"expect_{name.replace('-', '_')}"]
    ]
    if not wanted:
        raise AgentsecError("name at least one path, e.g. --not-readable /answers/key.json")
    launch = _assert_launch(kind, image, template, engine_flags, engine_bin, python)
    env = {**os.environ, **probe_env(wanted)}
    run = run_probe(launch.prefix, python=launch.python, env=env)
    results = check_paths(run.output, wanted)
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(r) for r in results], indent=2))
    else:
        table = Table(title="Path assertions")
        for column in ("Result", "Expectation", "Path", "Observed"):
            table.add_column(column)
        for r in results:
            style = "green" if r.verdict == "pass" else "bold red"
            table.add_row(
                Text(r.verdict.upper(), style=style), r.expectation, Text(r.path), Text(r.observed)
            )
        _console().print(table)
    failed = [r for r in results if r.failed]
    if failed:
        raise GateFailed(f"{len(failed)} of {len(results)} path expectations not met")


@cli.command()
@click.argument("reports", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=Path("blast-radius.html"),
    show_default=True,
    help="The HTML file to write.",
)
def report(reports: tuple[Path, ...], out_file: Path) -> None:
    """One self-contained HTML page from saved reports (files or directories)."""
    loaded = _load_reports(reports)
    write_atomically(out_file, render_html(loaded))
    click.echo(f"wrote {out_file} ({len(loaded)} runs)")


@cli.command()
@click.argument("image", required=False)
@click.option("--presets", "preset_list", default=None, help="Comma-separated preset names.")
@click.option("--python", default="python3", show_default=True, help="Interpreter in sandboxes.")
@click.option(
    "--max-score",
    type=click.IntRange(0, 100),
    default=None,
    help="Exit 2 when even the best configuration scores above this budget.",
)
@OUT_DIR
def matrix(
    image: str | None, preset_list: str | None, python: str, max_score: int | None, out_dir: Path
) -> None:
    """Every runnable preset (or --presets a,b) against IMAGE, one row per configuration."""
    names = choose_presets([n.strip() for n in preset_list.split(",")] if preset_list else None)
    console = _console()
    result = run_matrix(
        image, names, out_dir, python, lambda line: console.print(line, markup=False)
    )
    json_path, md_path = save_matrix(result, out_dir)
    reports = ranked(gate.load_report(Path(row["report"])) for row in result.rows)
    if reports:
        console.print(scores_table(reports, title=f"Matrix: {image or 'bubblewrap presets'}"))
    console.print(f"matrix: {json_path}  {md_path}", markup=False)
    best = result.best_score()
    if best is None:
        raise AgentsecError("no configuration could be measured")
    if max_score is not None and best > max_score:
        raise GateFailed(f"the best configuration scores {best}, above --max-score {max_score}")


@cli.command()
@OUT_DIR
def demo(out_dir: Path) -> None:
    """Build a fake internet and measure an open configuration against bubblewrap sandboxes."""
    from agentsec.demo import run_demo  # imported late: it needs root and the namespace tools

    console = _console()
    saved = run_demo(out_dir, console)
    reports = ranked(s.report for s in saved)
    console.print(scores_table(reports, title="Blast radius, fake internet"))
    for item in saved:
        console.print(f"{item.report['label']}: {item.json_path}", markup=False)


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="agentsec", standalone_mode=False)
    except GateFailed as failure:
        click.echo(f"agentsec: gate failed: {failure}", err=True)
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
    except Exception as bug:  # a defect in agentsec itself: still one line, unless debugging
        if os.environ.get("AGENTSEC_DEBUG") == "1":
            raise
        click.echo(
            f"agentsec: internal error: {type(bug).__name__}: {bug} "
            "(set AGENTSEC_DEBUG=1 for the traceback, and please report it)",
            err=True,
        )
        return EXIT_ERROR
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
