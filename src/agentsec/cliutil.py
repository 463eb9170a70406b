"""What every agentsec command shares: consoles, the gate exception, loading saved reports,
printing a JSON document, and shell-completion sources."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
from click.shell_completion import CompletionItem
from rich.console import Console

from agentsec import kinds
from agentsec.errors import AgentsecError, ReportError
from agentsec.report import write_atomically
from agentsec.reportfile import (
    check_report,
    load_report,
    other_document,
    read_json,
    report_kind,
)
from agentsec.results import Results
from agentsec.untrusted import clean_report, clean_text

AGENTCAGE_LS_TIMEOUT_S = 3


class GateFailed(Exception):
    """A CI gate tripped: exit 2 after the report has been written."""


def job_summary_path(value: Path | None) -> Path | None:
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


def write_outputs(results: Results, opts: dict[str, Any]) -> None:
    """The CI formats a run was asked for: --sarif, --junit (written whole), --job-summary
    (appended: a CI job's summary file collects every step's section)."""
    from agentsec.formats import Format, render  # every renderer: loaded when one is wanted

    for option, fmt in (("sarif", Format.SARIF), ("junit", Format.JUNIT)):
        if opts.get(option) is not None:
            write_atomically(opts[option], render(fmt, results))
    summary = opts.get("job_summary")
    if summary is not None:
        try:
            with summary.open("a", encoding="utf-8") as handle:
                handle.write(render(Format.SUMMARY, results))
        except OSError as exc:
            raise AgentsecError(f"cannot write the job summary {summary}: {exc.strerror}") from exc


def console(stderr: bool = False) -> Console:
    # soft_wrap: rich never crops or re-wraps a line; the renderers lay lines out for the width
    # themselves and let a long name run on whole (see render/lines.py).
    return Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)


def emit_json(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def load_reports(paths: tuple[Path, ...] | list[Path]) -> list[dict[str, Any]]:
    """Reports of both kinds from files, and from directories (whose other JSON files, such as
    matrix tables, are passed over), each cleaned: a report file may come from anywhere. A named
    file that is not a report is an error, but for agentsec's own other documents, passed over
    as in a directory: ``reports/*.json`` names the matrix table beside the reports."""
    reports: list[dict[str, Any]] = []
    passed_over: list[str] = []
    for path in paths:
        if not path.is_dir():
            document = read_json(path)  # once: what it is, then the report it may be
            other = other_document(document)
            if other is None:
                reports.append(clean_report(check_report(document, clean_text(str(path), 200))))
            else:
                passed_over.append(f"{clean_text(str(path), 200)} is {other}")
            continue
        for member in sorted(path.glob("*.json")):
            # None: not readable as JSON, and load_report says why, in one line
            if report_kind(member) in (None, *kinds.NOUNS):
                reports.append(clean_report(load_report(member)))
    if not reports:
        why = f" ({'; '.join(passed_over)})" if passed_over else ""
        raise ReportError(f"no reports found in what was given{why}")
    return reports


# ---- shell completion: cheap, and silent on any failure (a completion must never crash a shell)


def complete_presets(ctx: Any, param: Any, incomplete: str) -> list[CompletionItem]:
    from agentsec.launchers import load_presets

    try:
        presets = load_presets()
    except Exception:  # a broken install completes nothing rather than printing a traceback
        return []
    head, _, last = incomplete.rpartition(",")
    prefix = f"{head}," if head else ""
    return [
        CompletionItem(prefix + name, help=preset.engine)
        for name, preset in presets.items()
        if name.startswith(last)
    ]


def cage_names() -> list[str]:
    """Cage names from `agentcage ls --json` (agentsec never imports agentcage)."""
    binary = shutil.which("agentcage") or str(Path(sys.executable).parent / "agentcage")
    try:
        proc = subprocess.run(
            [binary, "ls", "--json"],
            capture_output=True,
            text=True,
            timeout=AGENTCAGE_LS_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        doc = json.loads(proc.stdout)
        return [str(c["name"]) for c in doc.get("cages", [])]
    except (OSError, ValueError, KeyError, TypeError, subprocess.SubprocessError):
        return []


def complete_cages(ctx: Any, param: Any, incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(name) for name in cage_names() if name.startswith(incomplete)]
