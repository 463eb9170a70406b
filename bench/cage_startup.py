"""Cage start-up cost, measured in the fake internet, with baselines from the same run.

- cold: `agentcage run minimal -- true` (network, firewall, gateway with mitmproxy, sandbox,
  teardown), as a user types it;
- warm: `agentcage exec NAME -- true` into a cage whose gateway is already up (CLI included),
  and the backend's exec alone (no CLI start-up);
- baselines: bare `bwrap --ro-bind / / --unshare-all true`, `python -c pass`, and importing the
  part of mitmproxy the gateway uses (the floor of a cold start: it cannot serve before that).

Run with `python -P` (or from another directory) if bench/ holds a module named like a
standard-library one.

Usage (root): .venv/bin/python bench/cage_startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fakenet import FakeInternet

CLI = [sys.executable, "-m", "agentcage.cli"]


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])} failed: {r.stderr.strip()[-400:]}")
    return elapsed


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agentcage-bench-"))
    os.chmod(work, 0o755)
    project = work / "project"  # beside the state root, never holding it
    project.mkdir()
    env = {**os.environ, "AGENTCAGE_HOME": str(work / "home")}
    try:
        with FakeInternet() as net:
            host_ns = net.add_client().netns  # plays the host's network: never the real one
            uplink = ["--uplink", f"netns:{host_ns}", "--dns", net.dns_address]
            bwrap = [median_ms([timed(["bwrap", "--ro-bind", "/", "/", "--unshare-all", "true"])
                                for _ in range(args.runs)])]
            python = median_ms([timed([sys.executable, "-c", "pass"]) for _ in range(args.runs)])
            preload = "from agentcage.gateway.proxy import preload; preload()"
            mitm = median_ms([timed([sys.executable, "-c", preload]) for _ in range(args.runs)])
            cold = median_ms([timed([*CLI, "run", "minimal", "--project", str(project), *uplink,
                                     "--", "true"], env) for _ in range(args.runs)])
            config = work / "cage.yaml"
            config.write_text(f"name: bench\ndns_servers: [{net.dns_address}]\n"
                              f"gateway: {{uplink: 'netns:{host_ns}'}}\n")
            timed([*CLI, "cage", "create", "-c", str(config), "--project", str(project)], env)
            try:
                warm_cli = median_ms([timed([*CLI, "exec", "bench", "--", "true"], env)
                                      for _ in range(args.runs)])
                warm_backend = median_ms(_backend_exec(work, args.runs))
            finally:
                timed([*CLI, "destroy", "-y", "bench"], env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = bwrap[0]
    rows = [
        ("bwrap alone (baseline)", base),
        ("python -c pass", python),
        ("import the gateway's mitmproxy (floor)", mitm),
        ("agentcage run minimal -- true (cold)", cold),
        ("agentcage exec NAME -- true (gateway up)", warm_cli),
        ("backend exec (gateway up, no CLI)", warm_backend),
    ]
    print(f"{'case':48} {'median ms':>10} {'x bwrap':>8}")
    for name, ms in rows:
        print(f"{name:48} {ms:10.1f} {ms / base:8.1f}")
    print(f"cold start minus the mitmproxy import floor: {cold - mitm:.0f} ms")
    print(f"targets: cold < 1000 ms ({'met' if cold < 1000 else 'NOT met'}), "
          f"exec < 50 ms ({'met' if warm_backend < 50 else 'NOT met'} without CLI start-up)")


def _backend_exec(work: Path, runs: int) -> list[float]:
    from agentcage.cages import CageService
    from agentcage.state import StateStore

    service = CageService(StateStore(work / "home"))
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        service.exec_capture("bench", ["true"])
        samples.append(time.perf_counter() - start)
    return samples


if __name__ == "__main__":
    main()
