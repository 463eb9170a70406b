"""`agentcage verify NAME`: the cage measured from inside by agentsec's probe, and scored.

A cage's guarantees are claims until something inside it tries them. Verify runs the same probe
`agentsec` runs in any sandbox, through `agentcage exec` (so it sees exactly what a workload
sees: the cage's environment, mounts, seccomp filter and gateway), and writes the same report.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from agentcage.errors import AgentcageError
from agentsec import service
from agentsec.errors import AgentsecError
from agentsec.launchers import cage_launch
from agentsec.runner import run_probe


class VerifyError(AgentcageError):
    """The probe could not be run or read inside the cage."""


def agentcage_binary() -> str:
    """This installation's own `agentcage`, so verify measures the cage it manages."""
    candidate = Path(sys.executable).parent / "agentcage"
    return str(candidate) if candidate.exists() else "agentcage"


def verify_cage(
    name: str,
    *,
    label: str | None,
    out_dir: Path,
    redact: bool,
    env: Mapping[str, str] | None = None,
) -> service.SavedReport:
    """Run the probe in cage ``name``; save the report (schema_version 1) and return it."""
    how = f"agentcage verify {name}: the probe run inside the cage through agentcage exec"
    try:
        launch = cage_launch(name, how, agentcage_bin=agentcage_binary())
        run = run_probe(launch.prefix, python=launch.python, env=env)
        report = service.score(
            run.output,
            label=label or f"cage-{name}",
            target=launch.target,
            rc=run.rc,
            redact=redact,
        )
        return service.save(report, out_dir)
    except AgentsecError as exc:
        raise VerifyError(f"verify {name}: {exc}") from exc
