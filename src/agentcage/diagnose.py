"""`agentcage gateway status|logs|firewall NAME` and `gateway exec NAME -- CMD`: looking into
a cage's gateway, never changing it.

- `status`: the gateway's process, namespaces, addresses and what it enforces, from the
  cage's runtime state and the gateway's settings, and /proc.
- `logs`: the gateway's own log (what it wrote to stderr: start-up, errors), not the audit log
  (`agentcage logs NAME`).
- `firewall`: the nftables ruleset of the gateway's namespace, listed by agentcage itself.
- `exec -- CMD`: CMD in the gateway's network namespace, with no capability at all and no way
  to gain one (as root: as nobody; rootless: as the user, uid 0 of the namespace with none of
  its capabilities): `ss -tn`, `ip addr` and the like work; changing an address, a route or
  the firewall is refused by the kernel. CMD sees the host's filesystem as that uid does, and
  nothing of the cage's workload.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from typing import Any

from agentcage import rootless
from agentcage.backends import netplan, workload
from agentcage.errors import BackendError
from agentcage.state import CageDir, read_json

NOBODY = 65534
LOG_LINES = 40


def _plan(cage: CageDir) -> tuple[dict, netplan.NetPlan]:
    workload.running_target(cage)  # refuses a cage, or a gateway, that is not running
    runtime = read_json(cage.runtime, dict)
    return runtime, netplan.NetPlan.from_dict(runtime["plan"])


def status(cage: CageDir) -> dict[str, Any]:
    runtime, plan = _plan(cage)
    settings = read_json(cage.gateway_settings, dict)
    started = runtime.get("started_at")
    return {
        "cage": cage.name,
        "status": runtime.get("status"),
        "pid": runtime.get("gateway_pid"),
        "up_seconds": round(time.time() - started, 1) if started else None,
        "mode": "rootless" if rootless.active() else "root",
        "gateway_namespace": plan.gw_ns,
        "cage_namespace": plan.cage_ns,
        "gateway_address": plan.gateway_address,
        "cage_address": plan.cage_address,
        "uplink": plan.uplink,
        "dns_servers": settings.get("dns_servers", []),
        "tcp_ports": settings.get("tcp_ports", []),
        "trusted_networks": settings.get("trusted_networks", []),
        "rate_limit": {"requests_per_second": settings.get("rate_per_second"),
                       "burst": settings.get("rate_burst")},
        "log": str(cage.gateway_log),
        "audit": str(cage.audit),
    }


def log_tail(cage: CageDir, lines: int = LOG_LINES) -> list[str]:
    try:
        text = cage.gateway_log.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return text.splitlines()[-lines:]


def firewall(cage: CageDir) -> str:
    _, plan = _plan(cage)
    r = subprocess.run(netplan.in_ns(plan.gw_ns, ["nft", "list", "ruleset"]),
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise BackendError(f"cannot list the gateway's firewall: {r.stderr.strip()}")
    return r.stdout


def without_privileges() -> list[str]:
    """setpriv's arguments for a command that can change nothing in the gateway's namespace."""
    drop = ["--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    if rootless.active():
        # the user's uid is the namespace's root: kept, with no capability and none to come
        return ["setpriv", *drop, "--securebits=+noroot,+noroot_locked", "--"]
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *drop,
            "--"]


def exec_argv(cage: CageDir, command: Sequence[str]) -> list[str]:
    if not command:
        raise BackendError("give the command after --, e.g. agentcage gateway exec NAME -- ss -tn")
    _, plan = _plan(cage)
    return netplan.in_ns(plan.gw_ns, [*without_privileges(), *command])
