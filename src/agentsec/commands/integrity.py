"""``agentsec integrity diff``: did a change make the tests pass by weakening them?

Thin: open the two trees, run the checks (``agentsec.integrity.checks``), format, and choose
the exit code: 0 measured, 1 an error (one line), 2 a gate failed (``--max-score``,
``--baseline``). Reports are written before any gate is applied.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from agentsec.cliutil import GateFailed, console, emit_json
from agentsec.errors import AgentsecError
from agentsec.render.lines import Lines
from agentsec.report import report_filename, write_atomically


@click.group("integrity")
def command() -> None:
    """Verifier integrity: whether a change made the tests pass without doing the work."""


def _default_label(before: str, after: str, repo: Path | None) -> str:
    if repo is not None:
        return f"{before}..{after}"
    return f"{Path(before).name or 'before'}..{Path(after).name or 'after'}"


@command.command("diff")
@click.argument("before")
@click.argument("after")
@click.option("--repo", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="A git repository: BEFORE and AFTER are refs in it (read, never checked out).")
@click.option("--json", "as_json", is_flag=True, help="Print a versioned JSON document instead.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Also write integrity_<label>.json and .md to this directory.")
@click.option("--label", default=None, help="Name of this check; names the reports.")
@click.option("--max-score", type=click.IntRange(0, 100), default=None,
              help="Exit 2 when the score is above this budget (after writing the reports).")
@click.option("--baseline", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="An accepted integrity report: exit 2 on any finding it does not hold.")
@click.option("--sarif", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write SARIF 2.1.0 (GitHub code scanning), each finding at its line.")
def diff(before: str, after: str, repo: Path | None, as_json: bool, out_dir: Path | None,
         label: str | None, max_score: int | None, baseline: Path | None,
         sarif: Path | None) -> None:
    """Compare the tree BEFORE an agent's run with the tree AFTER it (two directories, or two
    refs with --repo) and report every way the change passes the tests without the work."""
    # Imported here: every agentsec command loads this module, and only this one needs these.
    from agentsec.integrity import baseline as accepted_findings
    from agentsec.integrity import checks, report, tree
    from agentsec.integrity import sarif as integrity_sarif

    label = label or _default_label(before, after, repo)
    stem = report_filename(f"integrity_{label}")  # refuses a label with nothing usable first
    # read and checked before the run: a bad baseline costs no measurement
    accepted = accepted_findings.load(baseline) if baseline is not None else None
    outcome = checks.run(tree.open_trees(before, after, repo))
    doc = report.document(outcome, label)
    out = console(stderr=as_json)
    if out_dir is not None:
        json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
        write_atomically(json_path, json.dumps(doc, indent=2) + "\n")
        write_atomically(md_path, report.markdown(doc))
        out.print(f"reports: {json_path}  {md_path}", markup=False)
    if sarif is not None:
        write_atomically(sarif, integrity_sarif.render(doc))
    if as_json:
        emit_json(doc)
    else:
        out.print(Lines(lambda width: report.terminal_lines(doc, width)))
    failed = []
    if max_score is not None and outcome.score > max_score:
        failed.append(f"verifier integrity score {outcome.score} is above --max-score "
                      f"{max_score}")
    if accepted is not None:
        new = accepted_findings.new_findings(doc, accepted)
        if new:
            shown = ", ".join(sorted({f["id"] for f in new}))
            noun = "finding" if len(new) == 1 else "findings"
            failed.append(f"{len(new)} {noun} the baseline does not hold ({shown})")
    if failed:
        raise GateFailed("; ".join(failed))


@command.command("could", context_settings={"ignore_unknown_options": True})
@click.argument("project", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--kind", type=click.Choice(["local", "bwrap", "docker", "podman", "command"]),
              required=True, help="Where to run the probe (as for agentsec assert).")
@click.option("--inside", "at", default=None,
              help="Where the sandbox sees PROJECT (default: the same path).")
@click.option("--config", "config", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help='More paths: {"verifier": [...], "answers": [...]}.')
@click.option("--image", default=None, help="The image, for docker and podman.")
@click.option("--template", default=None, help="For --kind command: names {probe} or ends in '-'.")
@click.option("--engine-bin", default=None, help="An engine-compatible CLI to run instead.")
@click.option("--python", default="python3", show_default=True, help="Interpreter in sandbox.")
@click.option("--json", "as_json", is_flag=True, help="Print a versioned JSON document instead.")
@click.argument("engine_flags", nargs=-1, type=click.UNPROCESSED)
def could(project: Path, kind: str, at: str | None, config: Path | None, image: str | None,
          template: str | None, engine_bin: str | None, python: str, as_json: bool,
          engine_flags: tuple[str, ...]) -> None:
    """Could a workload in this sandbox write PROJECT's tests, their configuration or its CI
    workflows, or read its answer key? Pass or fail per path, as agentsec assert: exit 2 when
    any could be (or the probe could not tell)."""
    import dataclasses
    import os

    from agentsec.assertions import check, probe_env
    from agentsec.integrity import verifier_paths
    from agentsec.launchers import assert_launch
    from agentsec.render.records import assertion_lines
    from agentsec.results import document

    project = project.resolve()
    found = verifier_paths.detect(project)
    if config is not None:
        found += verifier_paths.from_config(config)
    if not found:
        raise AgentsecError(f"no tests, test configuration or CI workflow found in {project}; "
                            "name them with --config")
    wanted = verifier_paths.inside(found, at or str(project))
    launch = assert_launch(kind, image, template, engine_flags, engine_bin, python)
    run = launch.run({**os.environ, **probe_env(wanted)})
    results = check(run.output, wanted)
    if as_json:
        emit_json(document("verifier-paths", project=str(project),
                           results=[dataclasses.asdict(r) for r in results]))
    else:
        console().print(assertion_lines(results))
    failed = [r for r in results if r.failed]
    if failed:
        raise GateFailed(f"{len(failed)} of {len(results)} of the verifier's paths are open "
                         "to the workload, or could not be told")
