"""``agentsec integrity diff | could | check``: did a change make the tests pass by weakening
them, could a sandbox let it, or both, in one report.

Thin: open the trees and run the checks (``agentsec.integrity.checks``), or run the probe in
the sandbox (``agentsec.integrity.could``), build the report, then the second half of every
agentsec pipeline (``service.judge``): write it, record it in the history, apply the gates,
write the CI formats. Exit codes: 0 checked, 1 an error (one line), 2 a gate failed; the
reports are written before any gate is applied.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from agentsec.cliutil import (
    GateFailed,
    console,
    emit_json,
    job_summary_path,
    write_outputs,
)
from agentsec.history import DB_NAME
from agentsec.kinds import TEST_VERIFIER_INTEGRITY
from agentsec.render.lines import Lines
from agentsec.report import report_filename, write_atomically

KINDS = ["local", "bwrap", "docker", "podman", "command"]


def _options(*options: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def decorate(func: Any) -> Any:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


# What every integrity command takes: where its report goes and what it is held to, as for a
# measured sandbox (the same gates, history and CI formats).
REPORT = (
    click.option("--json", "as_json", is_flag=True, help="Print the report (JSON) instead."),
    click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
                 default=None, help="Also write integrity_<label>.json and .md here (and record "
                 f"the run in its {DB_NAME})."),
    click.option("--label", default=None, help="Name of this check; names the reports."),
    click.option("--max-score", type=click.IntRange(0, 100), default=None,
                 help="Exit 2 when the score is above this budget (after writing the reports)."),
    click.option("--baseline", type=click.Path(path_type=Path, dir_okay=False), default=None,
                 help="An accepted integrity report: exit 2 on any finding it does not hold."),
    click.option("--fail-on-regression", is_flag=True,
                 help="Exit 2 when this run is worse than the previous run of its label."),
    click.option("--sarif", type=click.Path(path_type=Path, dir_okay=False), default=None,
                 help="Also write SARIF 2.1.0 (GitHub code scanning), each finding at its line."),
    click.option("--junit", type=click.Path(path_type=Path, dir_okay=False), default=None,
                 help="Also write JUnit XML: a test case per check, and per gate."),
    click.option("--job-summary", type=click.Path(path_type=Path, dir_okay=False), default=None,
                 callback=lambda ctx, param, value: job_summary_path(value),
                 help="Append a Markdown job summary to this file ($GITHUB_STEP_SUMMARY)."),
    click.option("--history", "history_db", type=click.Path(path_type=Path, dir_okay=False),
                 default=None, help=f"The run history database (default: {DB_NAME} in --out)."),
    click.option("--no-history", is_flag=True, help="Do not record this run in the history."),
)
SANDBOX = (
    click.option("--kind", type=click.Choice(KINDS), default=None,
                 help="Where to run the probe (as for agentsec assert)."),
    click.option("--inside", "at", default=None,
                 help="Where the sandbox sees PROJECT (default: the same path)."),
    click.option("--config", "config", type=click.Path(path_type=Path, dir_okay=False),
                 default=None, help='More paths: {"verifier": [...], "answers": [...]}.'),
    click.option("--image", default=None, help="The image, for docker and podman."),
    click.option("--template", default=None,
                 help="For --kind command: names {probe} or ends in '-'."),
    click.option("--engine-bin", default=None, help="An engine-compatible CLI to run instead."),
    click.option("--python", default="python3", show_default=True,
                 help="Interpreter in the sandbox."),
)


@click.group("integrity")
def command() -> None:
    """Verifier integrity: whether a change made the tests pass without doing the work, and
    whether a sandbox could let it."""


def _diff_label(before: str, after: str, repo: Path | None) -> str:
    if repo is not None:
        return f"{before}..{after}"
    return f"{Path(before).name or 'before'}..{Path(after).name or 'after'}"


def _gates(opts: dict[str, Any]):
    """The gates, read before anything runs: a bad baseline costs no measurement."""
    from agentsec import gate

    return gate.Gates.load(opts["max_score"], opts["baseline"], opts["fail_on_regression"],
                           kind=TEST_VERIFIER_INTEGRITY)


def _diff_outcome(before: str, after: str, repo: Path | None):
    from agentsec.integrity import checks, tree

    return checks.run(tree.open_trees(before, after, repo))


def _could(project: Path, opts: dict[str, Any], engine_flags: tuple[str, ...]):
    from agentsec.integrity import could
    from agentsec.launchers import assert_launch

    if opts["kind"] is None:
        raise click.UsageError("--kind is needed to run the probe in the sandbox")
    launch = assert_launch(opts["kind"], opts["image"], opts["template"], engine_flags,
                           opts["engine_bin"], opts["python"])
    return could.measure(project, launch, opts["kind"], opts["at"], opts["config"])


def _finish(doc: dict[str, Any], opts: dict[str, Any], gates: Any,
            open_paths: str | None = None) -> None:
    """Write, record, judge, show. ``open_paths``: why `could` fails on its own when neither
    --max-score nor --baseline says what is accepted (its contract: any path open to the
    workload, or not told, fails)."""
    from agentsec import service
    from agentsec.gate import render_gate
    from agentsec.integrity import report
    from agentsec.results import Results

    as_json = bool(opts["as_json"])
    out = console(stderr=as_json)
    stem = report_filename(f"integrity_{doc['label']}")
    out_dir: Path | None = opts["out_dir"]
    saved: tuple[tuple[str, str], ...] = ()
    if out_dir is not None:
        json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
        write_atomically(json_path, json.dumps(doc, indent=2) + "\n")
        write_atomically(md_path, report.markdown(doc))
        out.print(f"reports: {json_path}  {md_path}", markup=False)
        saved = ((doc["label"], str(json_path)),)
    history = opts["history_db"] or (out_dir / DB_NAME if out_dir is not None else None)
    judged = service.judge(doc, None if opts["no_history"] else history, gates)
    verdict, regression = judged.verdict, judged.regression
    write_outputs(Results((doc,), verdict.checks, saved), opts)
    if as_json:
        emit_json(doc)
    else:
        out.print(Lines(lambda width: report.terminal_lines(doc, width)))
    if verdict.baseline is not None:
        out.print(render_gate(verdict.baseline), markup=False)
    if regression is not None and regression.regressed:
        out.print(f"REGRESSION against the previous run of {doc['label']}:", markup=False)
        for reason in regression.reasons:
            out.print(f"  {reason}", markup=False)
    if judged.history_error is not None:
        raise judged.history_error
    failures = [verdict.failures()] if verdict.failed else []
    if open_paths and gates.max_score is None and gates.baseline is None:
        failures.append(open_paths)
    if failures:
        raise GateFailed("; ".join(failures))


def _open_paths(measured: Any) -> str | None:
    failed = measured.failed
    if not failed:
        return None
    return (f"{len(failed)} of {len(measured.results)} of the verifier's paths are open to the "
            "workload, or could not be told")


@command.command("diff")
@click.argument("before")
@click.argument("after")
@click.option("--repo", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="A git repository: BEFORE and AFTER are refs in it (read, never checked out).")
@_options(*REPORT)
def diff(before: str, after: str, repo: Path | None, **opts: Any) -> None:
    """Compare the tree BEFORE an agent's run with the tree AFTER it (two directories, or two
    refs with --repo) and report every way the change passes the tests without the work."""
    from agentsec.integrity import report

    label = opts["label"] or _diff_label(before, after, repo)
    report_filename(f"integrity_{label}")  # refuses a label with nothing usable, before the run
    gates = _gates(opts)
    _finish(report.document(label, outcome=_diff_outcome(before, after, repo)), opts, gates)


@command.command("could", context_settings={"ignore_unknown_options": True})
@click.argument("project", type=click.Path(path_type=Path, file_okay=False, exists=True))
@_options(*SANDBOX, *REPORT)
@click.argument("engine_flags", nargs=-1, type=click.UNPROCESSED)
def could(project: Path, engine_flags: tuple[str, ...], **opts: Any) -> None:
    """Could a workload in this sandbox write PROJECT's tests, their configuration or its CI
    workflows, or read its answer key? Pass or fail per path, as agentsec assert: exit 2 when
    any could be (or the probe could not tell), unless --max-score or --baseline says what
    is accepted."""
    from agentsec.integrity import report

    label = opts["label"] or f"could_{project.resolve().name or 'project'}"
    report_filename(f"integrity_{label}")
    gates = _gates(opts)
    measured = _could(project, opts, engine_flags)
    _finish(report.document(label, could=measured), opts, gates, _open_paths(measured))


@command.command("check", context_settings={"ignore_unknown_options": True})
@click.option("--diff", "trees", nargs=2, default=None, metavar="BEFORE AFTER",
              help="The change to check: two directories, or two refs with --repo.")
@click.option("--repo", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="A git repository the --diff refs are in.")
@click.option("--could", "project", type=click.Path(path_type=Path, file_okay=False,
                                                    exists=True),
              default=None, help="The project whose verifier the sandbox should not reach.")
@_options(*SANDBOX, *REPORT)
@click.argument("engine_flags", nargs=-1, type=click.UNPROCESSED)
def check(trees: tuple[str, str] | None, repo: Path | None, project: Path | None,
          engine_flags: tuple[str, ...], **opts: Any) -> None:
    """Both halves in one report: what the change did to the tests (--diff) and what the
    sandbox could do to them (--could PROJECT --kind ... -- FLAGS). Gated like diff: by
    --max-score, --baseline and --fail-on-regression."""
    from agentsec.integrity import report

    if trees is None and project is None:
        raise click.UsageError("give --diff BEFORE AFTER, --could PROJECT, or both")
    if trees is None and repo is not None:
        raise click.UsageError("--repo names where the --diff refs are: give --diff too")
    if opts["label"]:
        label = opts["label"]
    elif trees is not None:
        label = _diff_label(trees[0], trees[1], repo)
    else:
        assert project is not None
        label = f"could_{project.resolve().name or 'project'}"
    report_filename(f"integrity_{label}")
    gates = _gates(opts)
    outcome = _diff_outcome(trees[0], trees[1], repo) if trees is not None else None
    measured = _could(project, opts, engine_flags) if project is not None else None
    _finish(report.document(label, outcome=outcome, could=measured), opts, gates)
