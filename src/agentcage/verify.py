"""`agentcage verify NAME`: the cage measured from inside by agentsec's probe, and scored.

A cage's guarantees are claims until something inside it tries them. Verify runs the same probe
`agentsec` runs in any sandbox, through `agentcage exec` (so it sees exactly what a workload
sees: the cage's environment, mounts, seccomp filter and gateway), and goes through agentsec's
own measurement pipeline and gate decision: the same report, saved and recorded in the same
history, held to the same budget and baseline as `agentsec blast-radius`. The report also
carries what the cage's watcher had found when the probe was done (`target.watcher`), so a
saved report of a cage that alarmed says so.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentcage.errors import AgentcageError, StateError
from agentcage.home import HOME_ENV
from agentcage.state import CageDir, StateStore
from agentsec import gate, service
from agentsec.cage_watcher import MAX_SHOWN, CageWatcher, WatcherFinding
from agentsec.errors import AgentsecError
from agentsec.history import DB_NAME
from agentsec.launchers import cage_launch


class VerifyError(AgentcageError):
    """The probe could not be run or read inside the cage, or its report not kept."""


def agentcage_binary() -> str:
    """This installation's own `agentcage`, so verify measures the cage it manages."""
    candidate = Path(sys.executable).parent / "agentcage"
    return str(candidate) if candidate.exists() else "agentcage"


def own_volumes(cage: CageDir) -> list[tuple[str, str]]:
    """The cage's named volumes as agentsec takes them: (path in the cage, host directory).
    Only the cage mounts them; the probe's view is checked against this (agentsec.own_volumes)."""
    from agentcage.backends.profile import load_meta
    from agentcage.backends.volumes import volumes_root

    meta = load_meta(cage.root / "meta.json")
    root = volumes_root(cage)
    return [(target, os.path.realpath(root / name)) for name, target, _ in meta.named_volumes]


def image_has_python(cage: CageDir) -> bool:
    """False for a cage on an image without python3 (the probe needs one: it is lent)."""
    from agentcage.backends.layers import layer_path
    from agentcage.backends.lentpython import has_python
    from agentcage.backends.profile import load_meta

    if load_meta(cage.root / "meta.json").image is None:
        return True  # the host's own root, with the host's python3
    return has_python(str(layer_path(cage)))


def watcher_state(cage: CageDir, enabled: bool, now: float) -> CageWatcher:
    """What the cage's watcher has found (watcher.json, as its gateway last wrote it), as the
    report carries it: the counts of all its findings, the most recent listed."""
    from agentcage import findings

    doc = findings.read(cage)
    state = findings.status(cage, enabled, now, doc)
    listed = [_finding(f) for f in doc["findings"][-MAX_SHOWN:] if isinstance(f, dict)]
    by_budget = tuple((str(k), int(v)) for k, v in state["by_budget"].items()
                      if isinstance(v, int) and v >= 0)
    return CageWatcher(enabled, max(state["findings"], len(listed)), by_budget,
                       state["quarantined"], tuple(listed))


def _finding(doc: dict[str, Any]) -> WatcherFinding:
    at = doc.get("at")
    return WatcherFinding(float(at) if isinstance(at, int | float) else 0.0,
                          str(doc.get("budget", "")), str(doc.get("host", "")),
                          str(doc.get("summary", "")), str(doc.get("action", "")))


def verify_plan(
    name: str,
    *,
    label: str | None,
    out_dir: Path,
    redact: bool = False,
    record: bool = True,
    max_score: int | None = None,
    baseline: Path | None = None,
    fail_on_regression: bool = False,
) -> service.Plan:
    """Where the report goes and what it is held to; a bad baseline is refused here, before
    anything runs in the cage."""
    try:
        gates = gate.Gates.load(max_score, baseline, fail_on_regression)
    except AgentsecError as exc:
        raise VerifyError(f"verify {name}: {exc}") from None
    history = out_dir / DB_NAME if record else None
    return service.Plan(label or f"cage-{name}", out_dir, redact, history, gates)


def verify_cage(
    name: str,
    plan: service.Plan,
    *,
    store: StateStore | None = None,
    env: Mapping[str, str] | None = None,
) -> service.Measurement:
    """Run the probe in cage ``name``, then agentsec's pipeline: score, save, record, gates.
    The report carries what the cage's watcher had found by the end of the run."""
    store = store or StateStore()
    if not store.cage(name).exists():  # said plainly, not as a probe that printed nothing
        raise StateError(f"no cage named {name!r}; see `agentcage ls`")
    # `agentcage exec` in the child must find the cage where this process found it.
    child_env = {**(os.environ if env is None else env), HOME_ENV: str(store.root)}
    how = f"agentcage verify {name}: the probe run inside the cage through agentcage exec"
    flags: tuple[str, ...] = ()
    if not image_has_python(store.cage(name)):
        from agentcage.backends.lentpython import LENT_AT

        flags = ("--lend-python",)
        how += (f", by the host's python3 lent read-only at {LENT_AT} (the cage's image has "
                "none)")
    from agentcage.config.load import load_config

    watching = load_config(store.cage(name).config).watcher.enable
    try:
        launch = cage_launch(name, how, agentcage_bin=agentcage_binary(),
                             own_volumes=own_volumes(store.cage(name)), exec_flags=flags)
        run = launch.run(child_env)
        # the watcher as the probe left it: a cage that alarmed is saved as one
        target = replace(launch.target,
                         watcher=watcher_state(store.cage(name), watching, time.time()))
        return service.measure_output(run.output, target, run.rc, plan)
    except AgentsecError as exc:
        raise VerifyError(f"verify {name}: {exc}") from exc
