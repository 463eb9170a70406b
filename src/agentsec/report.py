"""The report envelope (schema_version 1) and writing it to disk without ever half-writing it."""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentsec import __version__
from agentsec.cage_watcher import CageWatcher
from agentsec.catalogue import Catalogue
from agentsec.errors import AgentsecError, OutputError
from agentsec.kinds import TEST_BLAST_RADIUS
from agentsec.scoring.assess import Assessment
from agentsec.untrusted import ProbeOutput, clean_text

SCHEMA_VERSION = 1
# The other documents agentsec writes, often into the same reports directory as the reports.
TEST_MATRIX = "sandbox-blast-radius-matrix"
TEST_COMBINED = "promptfoo-sandbox-combined"
_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Target:
    """What was measured and how, so anyone can reproduce the number."""

    kind: str  # local | captured | bwrap | docker | podman | command | preset | netns
    how: str
    engine: str | None = None
    image: str | None = None
    digest: str | None = None
    flags: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    preset: str | None = None
    # (path in the sandbox, host directory): volumes the launcher says the sandbox alone keeps
    # (own_volumes.py checks each against what the probe saw before it counts)
    own_volumes: tuple[tuple[str, str], ...] = ()
    # a cage's: what its watcher had found when it was measured (cage_watcher.py)
    watcher: CageWatcher | None = None

    def as_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "kind": self.kind,
            "how": self.how,
            "engine": self.engine,
            "image": self.image,
            "digest": self.digest,
            "flags": list(self.flags),
            "command": list(self.command),
            "preset": self.preset,
        }
        if self.own_volumes:
            doc["own_volumes"] = [{"path": p, "source": s} for p, s in self.own_volumes]
        if self.watcher is not None:
            doc["watcher"] = self.watcher.as_dict()
        return doc


def report_filename(label: str) -> str:
    """A file name for a label: the label itself when it is safe, a slug of it otherwise."""
    slug = _UNSAFE_FILENAME.sub("_", label).strip("._")
    if not slug:
        raise AgentsecError(f"label {label!r} has no characters usable in a file name")
    return slug[:120]


def _finding_dict(finding: Any, catalogue: Catalogue) -> dict[str, Any]:
    return {
        "id": finding.id,
        "title": finding.title,
        "severity": finding.severity,
        "points": finding.points,
        "category": finding.axis,
        "kind": finding.kind,
        "evidence": list(finding.evidence),
        "detail": list(finding.detail),
        "owasp": [{"id": code, "title": catalogue.owasp_titles[code]} for code in finding.owasp],
        "remediation": {"flags": list(finding.flags), "advice": finding.advice},
    }


def build_report(
    *,
    label: str,
    target: Target,
    rc: int,
    probe: ProbeOutput,
    assessment: Assessment,
    catalogue: Catalogue,
    redacted: bool,
    generated_at: datetime | None = None,
) -> dict[str, Any]:
    generated = (generated_at or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "tool": "agentsec",
        "tool_version": __version__,
        "test": TEST_BLAST_RADIUS,
        "schema_version": SCHEMA_VERSION,
        "label": clean_text(label, 120),
        "generated_at": generated,
        "redacted": redacted,
        "target": target.as_dict(),
        "rc": rc,
        "probe": {
            "version": probe.version,
            "targets_overridden": probe.targets_overridden,
            "faults_injected": probe.faults_injected,
            "ignored_lines": probe.ignored_lines,
            "output": probe.raw,
        },
        "summary": {
            "score": assessment.score,
            "raw_score": assessment.raw_score,
            "score_is_lower_bound": assessment.score_is_lower_bound,
            "finding_count": len(assessment.findings),
            "by_severity": assessment.by_severity(),
            "axes": {
                axis.id: {
                    "title": axis.title,
                    "state": axis.state,
                    "severity": axis.severity,
                    "not_measured": list(axis.not_measured),
                }
                for axis in assessment.axes
            },
            "recommended_flags": list(assessment.recommended_flags),
            "findings": [_finding_dict(f, catalogue) for f in assessment.findings],
        },
        "owasp_source": catalogue.owasp_source,
    }


def write_atomically(path: Path, text: str) -> None:
    """Write a file so a reader sees the old content or the new, never a torn one. A place
    that cannot take it (read-only, /proc, a file where a directory should be, a full disk) is
    an OutputError naming the file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise _output_error(path, exc) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _output_error(path, exc) from None
        raise


def _output_error(path: Path, exc: OSError) -> OutputError:
    where = clean_text(str(path), 200)
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        return OutputError(f"cannot write {where}: a file stands where a directory is needed")
    return OutputError(f"cannot write {where}: {exc.strerror or exc}")


def write_report(report: dict[str, Any], markdown: str, out_dir: Path) -> tuple[Path, Path]:
    stem = report_filename(report["label"])
    json_path = out_dir / f"{stem}.json"
    md_path = out_dir / f"{stem}.md"
    write_atomically(json_path, json.dumps(report, indent=2, sort_keys=False) + "\n")
    write_atomically(md_path, markdown)
    return json_path, md_path
