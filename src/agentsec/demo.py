"""``agentsec demo``: four configurations measured in a fake internet, side by side.

The probe never runs where a packet could reach an address this demo did not assign: the open
configuration runs in a namespace linked only to the fake internet (whose DNS answers the probe's
fixed names with its own addresses), and the bubblewrap sandboxes run inside that same namespace.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from rich.console import Console

from agentsec import service
from agentsec.errors import AgentsecError
from agentsec.launchers import Launch, describe, preset_launch
from agentsec.report import Target
from fakenet import FakeInternet, FakeNetError

# A variable the open configurations can see, to show that names (never values) are reported.
DEMO_SECRET_NAME = "DEMO_SERVICE_TOKEN"
SYSTEM_PYTHON = "/usr/bin/python3"


def _demo_launches(exec_prefix: tuple[str, ...]) -> list[tuple[str, Launch]]:
    open_config = Launch(
        prefix=exec_prefix,
        python=SYSTEM_PYTHON,
        target=Target(
            kind="netns",
            how="root, no sandbox, in a namespace linked to the fake internet",
            command=(*exec_prefix, SYSTEM_PYTHON, "-"),
        ),
    )
    launches = [("open-root", open_config)]
    for preset in ("bwrap-unshare-all-as-root", "bwrap-unshare-all", "bwrap-hardened"):
        launch = preset_launch(preset, "", python=SYSTEM_PYTHON)
        launch = dataclasses.replace(launch, prefix=(*exec_prefix, *launch.prefix))
        how = f"preset {preset} inside the fake-internet namespace: {describe(launch)}"
        command = (*launch.prefix, SYSTEM_PYTHON, "-")
        target = dataclasses.replace(launch.target, how=how, command=command)
        launches.append((preset, dataclasses.replace(launch, target=target)))
    return launches


def run_demo(out_dir: Path, console: Console) -> list[service.SavedReport]:
    if os.geteuid() != 0:
        raise AgentsecError("the demo builds network namespaces: run it as root")
    console.print("building the fake internet (namespaces, DNS, HTTPS, sinks)", markup=False)
    try:
        with FakeInternet() as net:
            return _measure_all(net, out_dir, console)
    except FakeNetError as exc:
        raise AgentsecError(f"the fake internet failed: {exc}") from exc


def _measure_all(net: FakeInternet, out_dir: Path, console: Console) -> list[service.SavedReport]:
    client = net.add_client()
    env = dict(os.environ)
    # Inline, so sandboxes with a private /tmp still see the fake internet's targets.
    env["AGENTSEC_PROBE_TARGETS"] = client.probe_targets_file.read_text()
    env[DEMO_SECRET_NAME] = "demo-value-never-reported"
    saved = []
    for label, launch in _demo_launches(tuple(client.exec_prefix)):
        started = time.monotonic()
        with console.status(f"measuring {label}"):
            measured = service.measure(launch, service.Plan(f"demo-{label}", out_dir), env)
        saved.append(measured.saved)
        score = measured.report["summary"]["score"]
        elapsed = time.monotonic() - started
        console.print(f"measured {label}: score {score} ({elapsed:.1f} s)", markup=False)
    return saved
