"""What cages left behind when nothing records them any more: a gateway whose cage's state
directory was deleted, a cage's namespaces whose gateway died and whose runtime.json is gone or
damaged, cgroups whose cage is gone, and staged secrets (values, in memory-backed files) of a
cage whose state directory is gone.

Safe to remove, whoever made them: a running cage always has a live gateway in its gateway
namespace, and a cage being started gets its gateway within seconds, so a pair of cage
namespaces with no process in either, older than `min_age`, belongs to no cage. A cage cgroup
holding no process, whose namespaces are gone, is empty and unused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from agentcage.backends import cgroups, host, netplan
from agentcage.state import CageDir

NETNS_DIR = Path("/run/netns")


def _suffixes() -> set[str]:
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return set()
    return {n[len(netplan.NS_PREFIX):-3] for n in names
            if n.startswith(netplan.NS_PREFIX) and n.endswith(("-gw", "-cg"))}


def sweep(min_age: float = 120.0, only: Callable[[str], bool] = lambda suffix: True
          ) -> list[str]:
    """Remove orphaned cage namespaces and cgroups; the suffixes of those removed."""
    removed = _stop_stray_gateways(only)
    now = time.time()
    for suffix in sorted(_suffixes()):
        if not only(suffix):
            continue
        plan = netplan.NetPlan(suffix=suffix, slot=0, uplink="orphaned")
        names = (plan.gw_ns, plan.cage_ns)
        if any(host.pids_in_netns(n) for n in names):
            continue  # in use: some cage's
        ages = []
        for n in names:
            with contextlib.suppress(FileNotFoundError):
                ages.append(now - (NETNS_DIR / n).stat().st_ctime)
        if ages and min(ages) < min_age:
            continue  # maybe a cage being started right now
        host.run_batch(netplan.teardown_batch(plan), check=False)
        removed.append(suffix)
    removed += _sweep_cgroups(min_age, only, now)
    removed += _sweep_stagings()
    return removed


def _sweep_stagings() -> list[str]:
    """Staged secrets whose cage is gone (its state directory holds no cage and no gateway of
    it runs): their values would otherwise stay in memory-backed files until a reboot."""
    from agentcage.secrets.staging import stale_stagings

    def alive(state_dir: Path) -> bool:
        return CageDir(state_dir).holds_a_cage() or bool(host.gateways_of(state_dir))

    removed = []
    for directory in stale_stagings(alive):
        shutil.rmtree(directory, ignore_errors=True)
        removed.append(f"staged secrets {directory.name}")
    return removed


def _stop_stray_gateways(only: Callable[[str], bool]) -> list[str]:
    """Gateways whose cage's state directory is gone entirely (deleted by hand, or a test's
    temporary directory): nothing can stop them by name any more. Their processes, namespaces
    and cgroup go; the suffixes of those stopped."""
    stopped = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        state_dir = host.gateway_state_dir(int(entry))
        # Gone, or emptied of every mark of a cage (a deletion can race the gateway's own
        # writes there, and leave a directory holding nothing but its heartbeat).
        if state_dir is None or CageDir(state_dir).holds_a_cage():
            continue
        suffix = host.cage_suffix_of(int(entry))
        if suffix is None or not only(suffix):
            continue
        plan = netplan.NetPlan(suffix=suffix, slot=0, uplink="orphaned")
        victims = [int(entry), *host.pids_in_netns(plan.cage_ns), *host.pids_in_netns(plan.gw_ns)]
        host.terminate(sorted(set(victims)), grace=0)
        cgroups.CageCgroup(cgroups.detect(), suffix).destroy(grace=0)
        host.run_batch(netplan.teardown_batch(plan), check=False)
        from agentcage.secrets.cage import unstage_for_gateway

        unstage_for_gateway(CageDir(state_dir))
        stopped.append(suffix)
    return stopped


def _sweep_cgroups(min_age: float, only: Callable[[str], bool], now: float) -> list[str]:
    layout = cgroups.detect()
    live = _suffixes()
    removed = set()
    for parent in layout.parents():
        with contextlib.suppress(OSError):
            for child in parent.iterdir():
                name = child.name
                if (not child.is_dir() or name in live or not only(name)
                        or now - child.stat().st_ctime < min_age):
                    continue
                cage = cgroups.CageCgroup(layout, name)
                if not cage.pids():
                    cage.destroy(grace=0)
                    removed.add(f"cgroup {name}")
    return sorted(removed)
