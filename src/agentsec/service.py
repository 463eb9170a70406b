"""Measure, score, save: the services the CLI composes. Plain data in, plain data out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsec import catalogue as catalogue_module
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


def score(
    probe: ProbeOutput, *, label: str, target: Target, rc: int, redact: bool
) -> dict[str, Any]:
    """A schema_version 1 report for one probe output."""
    catalogue = catalogue_module.load()
    if redact:
        probe = redact_probe(probe)
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
