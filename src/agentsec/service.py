"""The one measurement pipeline: run the probe, score, save, record, apply the gates.

Every command that measures goes through here (the CLI's measuring commands, ``matrix``,
``demo``, the console and ``agentcage verify``), so a report is made, saved and judged the same
way wherever it comes from. Plain data in, plain data out: the callers decide what to print.
The order is the contract: the reports are saved before any gate is applied, so a failing gate
keeps its evidence; a history that cannot be written is told after the reports are safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agentsec import catalogue as catalogue_module
from agentsec import gate
from agentsec.history import History, HistoryError, Regression
from agentsec.launchers import Launch
from agentsec.own_volumes import mark_own_volumes
from agentsec.redact import redact as redact_probe
from agentsec.render.markdown import render_markdown
from agentsec.report import Target, build_report, write_report
from agentsec.scoring.assess import assess
from agentsec.untrusted import ProbeOutput


@dataclass(frozen=True)
class SavedReport:
    report: dict[str, Any]
    json_path: Path
    markdown_path: Path


@dataclass(frozen=True)
class Plan:
    """Where a measurement goes and what it is held to."""

    label: str
    out_dir: Path
    redact: bool = False
    history: Path | None = None  # the database the run is recorded in; None: not recorded
    gates: gate.Gates = field(default_factory=gate.Gates)


@dataclass(frozen=True)
class Measurement:
    saved: SavedReport
    verdict: gate.Verdict
    regression: Regression | None = None  # None: not recorded (or the history failed)
    history_error: HistoryError | None = None  # told by the caller once outputs are written

    @property
    def report(self) -> dict[str, Any]:
        return self.saved.report


def score(
    probe: ProbeOutput, *, label: str, target: Target, rc: int, redact: bool
) -> dict[str, Any]:
    """A schema_version 1 report for one probe output."""
    catalogue = catalogue_module.load()
    probe = mark_own_volumes(probe, target.own_volumes)  # before redaction drops the paths
    if redact:
        probe = redact_probe(probe)
        if target.own_volumes:
            target = replace(target, own_volumes=tuple(
                (path, "[redacted]") for path, _ in target.own_volumes))
        if target.watcher is not None:
            target = replace(target, watcher=target.watcher.redacted())
    assessment = assess(probe, catalogue)
    return build_report(
        label=label,
        target=target,
        rc=rc,
        probe=probe,
        assessment=assessment,
        catalogue=catalogue,
        redacted=redact,
    )


def save(report: dict[str, Any], out_dir: Path) -> SavedReport:
    json_path, md_path = write_report(report, render_markdown(report), out_dir)
    return SavedReport(report, json_path, md_path)


@dataclass(frozen=True)
class Judged:
    verdict: gate.Verdict
    regression: Regression | None = None  # None: not recorded (or the history failed)
    history_error: HistoryError | None = None  # told by the caller once outputs are written


def judge(report: dict[str, Any], history: Path | None, gates: gate.Gates) -> Judged:
    """Record a saved report of either kind in the history, then apply the gates: the second
    half of every pipeline, so that a verifier-integrity run is recorded and judged exactly as
    a measured sandbox is."""
    regression, history_error = None, None
    if history is not None:
        try:
            regression = History(history).record(report)
        except HistoryError as error:
            history_error = error
    reasons = regression.reasons if regression is not None else None
    return Judged(gate.decide(report, gates, reasons), regression, history_error)


def measure_output(output: ProbeOutput, target: Target, rc: int, plan: Plan) -> Measurement:
    """Score a probe output, save the reports, record the run, then apply the gates."""
    report = score(output, label=plan.label, target=target, rc=rc, redact=plan.redact)
    saved = save(report, plan.out_dir)
    judged = judge(report, plan.history, plan.gates)
    return Measurement(saved, judged.verdict, judged.regression, judged.history_error)


def measure(launch: Launch, plan: Plan, env: Mapping[str, str] | None = None) -> Measurement:
    """Run the probe as ``launch`` says, then ``measure_output``."""
    run = launch.run(env)
    return measure_output(run.output, launch.target, run.rc, plan)
