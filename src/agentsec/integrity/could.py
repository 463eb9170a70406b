"""The half of a verifier-integrity report measured in the sandbox: could the workload write the
verifier's files or read the answer key?

The verifier's paths are found in the project (``verifier_paths``), the probe is run in the
sandbox with each one expected not writable (answers: not readable), as ``agentsec assert``
runs it, and each path that is open to the workload, or that the probe could not tell about, is
a finding of the catalogue (INT-018, INT-019, INT-020) at its path in the project, so that it
is scored, gated, accepted in a baseline and kept in the history like every other finding.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsec.assertions import PathCheck, check, probe_env
from agentsec.errors import AgentsecError
from agentsec.integrity import catalogue, verifier_paths
from agentsec.integrity.model import Finding
from agentsec.launchers import Launch
from agentsec.untrusted import clean_text

WRITABLE, READABLE, UNTOLD = "INT-018", "INT-019", "INT-020"
CHECK_IDS = (WRITABLE, READABLE, UNTOLD)


@dataclass(frozen=True)
class Measured:
    project: Path
    inside: str  # where the sandbox sees the project
    kind: str  # the launcher: bwrap, docker, ...
    probe_version: str | None
    paths: tuple[verifier_paths.VerifierPath, ...]
    results: tuple[PathCheck, ...]  # one per path, in the same order

    def section(self) -> dict[str, Any]:
        """The report's ``could``."""
        return {
            "project": clean_text(str(self.project), 200),
            "inside": clean_text(self.inside, 200),
            "kind": self.kind,
            "probe_version": self.probe_version,
            "results": [{"path": clean_text(r.path, 200), "expectation": r.expectation,
                         "verdict": r.verdict, "observed": clean_text(r.observed, 200)}
                        for r in self.results],
        }

    @property
    def failed(self) -> list[PathCheck]:
        return [r for r in self.results if r.failed]


def measure(project: Path, launch: Launch, kind: str, at: str | None,
            config: Path | None) -> Measured:
    """Find the project's verifier paths and ask the probe, in the sandbox, about each."""
    project = project.resolve()
    found = verifier_paths.detect(project)
    if config is not None:
        found += verifier_paths.from_config(config)
    if not found:
        raise AgentsecError(f"no tests, test configuration or CI workflow found in {project}; "
                            "name them with --config")
    inside = at or str(project)
    wanted = verifier_paths.inside(found, inside)
    # each (expectation, path in the sandbox) is asked once: the first path found that names it
    where = {verifier_paths.inside([p], inside)[0]: p for p in reversed(found)}
    run = launch.run({**os.environ, **probe_env(wanted)})
    results = check(run.output, wanted)
    paths = tuple(where[(r.expectation, r.path)] for r in results)
    return Measured(project, inside, kind, run.output.version, paths, tuple(results))


def findings(measured: Measured) -> list[Finding]:
    """A finding for each path open to the workload, or that the probe could not tell about."""
    specs = catalogue.load()
    found = []
    for path, result in zip(measured.paths, measured.results):
        if not result.failed:
            continue
        if result.verdict == "untested":
            check_id = UNTOLD
        else:
            check_id = READABLE if result.expectation == "not-readable" else WRITABLE
        spec = specs.check(check_id)
        found.append(Finding(
            id=check_id, title=spec.title, severity=spec.severity,
            points=specs.points_of(check_id), path=clean_text(path.relative, 200), line=None,
            side="sandbox",
            evidence=clean_text(f"{path.why}, expected {result.expectation}: {result.observed}",
                                240)))
    return found
