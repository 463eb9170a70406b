"""The ``agentsec`` command. Thin: parse options, call a service, format, choose the exit code.

Exit codes: 0 ok, 1 an error (bad input, a probe that could not run), 2 a gate failed
(``--max-score``, ``--baseline``, ``diff``, ``assert``). Errors are one line on stderr, never a
traceback. Reports are written before any gate is applied, so a failing gate keeps its evidence.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from agentsec import __version__, gate, service
from agentsec.assertions import EXPECTATIONS, probe_env
from agentsec.assertions import check as check_paths
from agentsec.cliutil import (
    GateFailed,
    complete_cages,
    complete_presets,
    emit_json,
    load_reports,
)
from agentsec.cliutil import (
    console as _console_for,
)
from agentsec.commands import register
from agentsec.errors import AgentsecError
from agentsec.formats import Format, render
from agentsec.history import DB_NAME
from agentsec.launchers import (
    Launch,
    assert_launch,
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
from agentsec.render.records import assertion_lines, preset_lines
from agentsec.render.terminal import findings_table, scores_table
from agentsec.report import Target, write_atomically
from agentsec.reportfile import load_report
from agentsec.results import Results, document
from agentsec.scoring.rank import ranked
from agentsec.untrusted import read_capture

EXIT_OK, EXIT_ERROR, EXIT_GATE = 0, 1, 2
JSON_FLAG = click.option(
    "--json", "as_json", is_flag=True, help="Print a versioned JSON document instead."
)


def _console(as_json: bool = False):
    # With --json, stdout carries the document alone; everything a person reads goes to stderr.
    return _console_for(stderr=as_json)


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
    JSON_FLAG,
    click.option(
        "--sarif",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="Also write SARIF 2.1.0 (GitHub code scanning) to this file.",
    ),
    click.option(
        "--junit",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="Also write JUnit XML to this file.",
    ),
    click.option(
        "--job-summary",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        callback=lambda ctx, param, value: _job_summary_path(value),
        help="Append a Markdown job summary to this file (e.g. $GITHUB_STEP_SUMMARY; "
        "empty, as that variable is outside GitHub: none is written).",
    ),
    click.option(
        "--history",
        "history_db",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help=f"The run history database (default: {DB_NAME} in the --out directory).",
    ),
    click.option("--no-history", is_flag=True, help="Do not record this run in the history."),
    click.option(
        "--fail-on-regression",
        is_flag=True,
        help="Exit 2 when this run is worse than the previous run of the same label.",
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


def _job_summary_path(value: Path | None) -> Path | None:
    """The job summary file, or None for an empty value: ``--job-summary "$GITHUB_STEP_SUMMARY"``
    is the documented form, and the variable is unset outside GitHub's runners. An empty path
    reaches click as ".", which would be refused as a directory."""
    if value is None or str(value) not in ("", "."):
        return value
    click.echo(
        "agentsec: no job summary written: --job-summary is empty "
        "($GITHUB_STEP_SUMMARY is set on GitHub's runners only)",
        err=True,
    )
    return None


def _plan(label: str, opts: dict[str, Any]) -> service.Plan:
    """The pipeline's plan from the measuring options. The baseline is read and checked here,
    before anything runs, so a bad one costs no measurement."""
    history = opts.get("history_db") or opts["out_dir"] / DB_NAME
    if opts.get("no_history"):
        history = None
    gates = gate.Gates.load(
        opts.get("max_score"), opts.get("baseline"), bool(opts.get("fail_on_regression"))
    )
    return service.Plan(label, opts["out_dir"], bool(opts.get("redact")), history, gates)


def _write_outputs(results: Results, opts: dict[str, Any]) -> None:
    for option, fmt in (("sarif", Format.SARIF), ("junit", Format.JUNIT)):
        if opts.get(option) is not None:
            write_atomically(opts[option], render(fmt, results))
    summary = opts.get("job_summary")
    if summary is not None:
        # Appended, not replaced: a CI job's summary file collects every step's section.
        try:
            with summary.open("a", encoding="utf-8") as handle:
                handle.write(render(Format.SUMMARY, results))
        except OSError as exc:
            raise AgentsecError(f"cannot write the job summary {summary}: {exc.strerror}") from exc


def _finish(measured: service.Measurement, opts: dict[str, Any]) -> None:
    """Show a measured run, write the CI formats, then tell the history error or the gates."""
    as_json = bool(opts.get("as_json"))
    console = _console(as_json)

    def say(text: str) -> None:
        console.print(text, markup=False)

    saved, verdict, regression = measured.saved, measured.verdict, measured.regression
    report = saved.report
    if not as_json:
        console.print(scores_table([report]))
        if opts.get("print_findings"):
            console.print(findings_table(report))
    say(f"reports: {saved.json_path}  {saved.markdown_path}")
    if verdict.baseline is not None:
        say(gate.render_gate(verdict.baseline))
    if regression is not None and regression.regressed:
        say(f"REGRESSION against the previous run of {report['label']}:")
        for reason in regression.reasons:
            say(f"  {reason}")
    results = Results((report,), verdict.checks, ((report["label"], str(saved.json_path)),))
    _write_outputs(results, opts)
    if measured.history_error is not None:
        raise measured.history_error
    if as_json:
        emit_json(
            document(
                "run",
                report=report,
                gates=[check.as_dict() for check in results.gates],
                failed=results.failed,
                regression=None
                if regression is None
                else {"regressed": regression.regressed, "reasons": list(regression.reasons)},
                files={"json": str(saved.json_path), "markdown": str(saved.markdown_path)},
            )
        )
    if verdict.failed:
        raise GateFailed(verdict.failures())


def _measure_and_finish(launch: Launch, label: str, opts: dict[str, Any]) -> None:
    _finish(service.measure(launch, _plan(label, opts)), opts)


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
    plan = _plan(label, opts)
    output = read_capture(capture)
    _finish(service.measure_output(output, Target(kind="captured", how=how), 0, plan), opts)


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
@click.argument("name", shell_complete=complete_cages)
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
@click.argument("name", shell_complete=complete_presets)
@click.argument("extra_flags", nargs=-1, type=click.UNPROCESSED)
@click.option("--image", default=None,
              help="The image, for container presets (nspawn: the root directory).")
@click.option("--engine-bin", default=None, help="An engine-compatible CLI to run instead.")
@click.option("--as-user", default=None, metavar="UID[:GID]",
              help="Peer and rootless presets, from root: start as.")
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
@JSON_FLAG
def presets(as_json: bool) -> None:
    """The shipped presets, and whether this host can run each one now."""
    rows = [(preset, availability(preset)) for preset in load_presets().values()]
    if as_json:
        emit_json(
            document(
                "presets",
                presets=[
                    {
                        "name": p.name,
                        "engine": p.engine,
                        "runnable": state.runnable,
                        "why_not": state.why_not or None,
                        "rationale": p.rationale,
                        "flags": list(p.flags),
                        "needs_image": p.needs_image,
                        "runtime": p.runtime,
                    }
                    for p, state in rows
                ],
            )
        )
        return
    _console().print(preset_lines(rows))


@cli.command()
@click.argument("old", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("new", type=click.Path(path_type=Path, dir_okay=False))
@JSON_FLAG
def diff(old: Path, new: Path, as_json: bool) -> None:
    """Exit 2 when NEW is worse than the accepted OLD report in any way."""
    result = gate.compare(load_report(old), load_report(new))
    if as_json:
        groups = ("new", "worse", "widened", "unmeasured", "fixed", "noted")
        emit_json(
            document(
                "diff",
                baseline=str(old),
                report=str(new),
                failed=result.failed,
                incompatible=list(result.incompatible),
                **{
                    g: [dataclasses.asdict(c) for c in getattr(result, g)] for g in groups
                },
            )
        )
    else:
        click.echo(gate.render_gate(result))
    if result.failed:
        raise GateFailed(f"{new} is worse than the baseline {old}")


@cli.command()
@click.argument("reports", nargs=-1, required=True, type=click.Path(path_type=Path))
@JSON_FLAG
def compare(reports: tuple[Path, ...], as_json: bool) -> None:
    """Side by side: label, score, raw score, each axis and the findings, one row per report,
    worst first (score, then raw score, then axis band: see agentsec.scoring.rank)."""
    loaded = ranked(load_reports(reports))
    if as_json:
        rows = [
            {
                "label": r["label"],
                "score": r["summary"]["score"],
                "raw_score": r["summary"]["raw_score"],
                "score_is_lower_bound": r["summary"].get("score_is_lower_bound", False),
                "axes": {k: a["state"] for k, a in r["summary"]["axes"].items()},
                "findings": [f["id"] for f in r["summary"]["findings"]],
                "probe_version": r["probe"]["version"],
            }
            for r in loaded
        ]
        emit_json(document("comparison", runs=rows))
        return
    _console().print(scores_table(loaded, title="Comparison", detailed=True))


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
@JSON_FLAG
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
    launch = assert_launch(kind, image, template, engine_flags, engine_bin, python)
    env = {**os.environ, **probe_env(wanted)}
    run = launch.run(env)
    results = check_paths(run.output, wanted)
    if as_json:
        emit_json(document("path-assertions", results=[dataclasses.asdict(r) for r in results]))
    else:
        _console().print(assertion_lines(results))
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
    help="The file to write.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice([f.value for f in Format]),
    default=Format.HTML.value,
    show_default=True,
    help="html: one self-contained page; or any other format agentsec writes.",
)
def report(reports: tuple[Path, ...], out_file: Path, fmt: str) -> None:
    """One self-contained HTML page (or --format) from saved reports (files or directories)."""
    loaded = load_reports(reports)
    write_atomically(out_file, render(Format(fmt), Results(tuple(loaded))))
    click.echo(f"wrote {out_file} ({len(loaded)} runs)")


@cli.command()
@click.argument("image", required=False)
@click.option(
    "--presets",
    "preset_list",
    default=None,
    shell_complete=complete_presets,
    help="Comma-separated preset names.",
)
@click.option("--python", default="python3", show_default=True, help="Interpreter in sandboxes.")
@click.option(
    "--max-score",
    type=click.IntRange(0, 100),
    default=None,
    help="Exit 2 when even the best configuration scores above this budget.",
)
@click.option(
    "--on",
    "where",
    type=click.Choice(["here", "k8s"]),
    default="here",
    show_default=True,
    help="k8s: each container preset as a Job of the cluster kubectl reaches.",
)
@click.option("--namespace", default=None, help="The Jobs' namespace (--on k8s).")
@click.option("--kubectl", "kubectl", default="kubectl", show_default=True,
              help="The kubectl to run the Jobs with (--on k8s).")
@OUT_DIR
@JSON_FLAG
def matrix(
    image: str | None,
    preset_list: str | None,
    python: str,
    max_score: int | None,
    where: str,
    namespace: str | None,
    kubectl: str,
    out_dir: Path,
    as_json: bool,
) -> None:
    """Every runnable preset (or --presets a,b) against IMAGE, one row per configuration."""
    names = choose_presets([n.strip() for n in preset_list.split(",")] if preset_list else None)
    console = _console(as_json)
    kube = None
    if where == "k8s":
        from agentsec.kube_jobs import Kubectl

        kube = Kubectl(kubectl, namespace)
    result = run_matrix(
        image, names, out_dir, python, lambda line: console.print(line, markup=False), kube
    )
    json_path, md_path = save_matrix(result, out_dir)
    reports = ranked(load_report(Path(row["report"])) for row in result.rows)
    if as_json:
        emit_json(result.as_dict())
    elif reports:
        where_run = " as Kubernetes Jobs" if kube is not None else ""
        console.print(scores_table(
            reports, title=f"Matrix: {image or 'bubblewrap presets'}{where_run}"))
    console.print(f"matrix: {json_path}  {md_path}", markup=False)
    best = result.best_score()
    if best is None:
        raise AgentsecError("no configuration could be measured")
    if max_score is not None and best > max_score:
        raise GateFailed(f"the best configuration scores {best}, above --max-score {max_score}")


@cli.command()
@OUT_DIR
@JSON_FLAG
def demo(out_dir: Path, as_json: bool) -> None:
    """Build a fake internet and measure an open configuration against bubblewrap sandboxes."""
    from agentsec.demo import run_demo  # imported late: it needs root and the namespace tools

    console = _console(as_json)
    saved = run_demo(out_dir, console)
    reports = ranked(s.report for s in saved)
    if as_json:
        emit_json(document("demo", reports=reports))
    else:
        console.print(scores_table(reports, title="Blast radius, fake internet"))
    for item in saved:
        console.print(f"{item.report['label']}: {item.json_path}", markup=False)


register(cli)


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
