"""A rootless cage's start against root's, in one run: `agentcage run minimal -c cage.yaml --
true` on a host played by a namespace (fakenet.FakeHost), by root and by an ordinary user
(uid 1000), each a later cage (its state root's gateway zygote up; the user's rootless holder
running). Target: rootless < 1.3x root.

Both use the same cage.yaml (no limits: a user's cages get them only from a cgroup that root
delegates, which is not what is timed here). Cases alternate, medians of `--runs`, one round
first not counted (caches, the zygotes, the holder).

Usage (root): .venv/bin/python -P bench/rootless_startup.py [--runs 9]
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

from fakenet import FakeHost, FakeInternet

USER = 1000
TARGET = 1.3
REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "agentcage"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agentcage-bench-"))
    os.chmod(work, 0o755)
    samples: dict[str, list[float]] = {"root": [], "rootless": []}
    try:
        with FakeInternet() as net, FakeHost(net) as host:
            host.open_to_users([sys.base_prefix, sys.prefix, REPO])
            homes = {mode: work / mode for mode in samples}
            for home in homes.values():
                (home / "project").mkdir(parents=True)
                for path in (home, home / "project"):
                    os.chown(path, USER, USER)
            config = work / "cage.yaml"
            config.write_text("name: bench\ncontainer: {limits: none}\n")
            os.chmod(config, 0o644)
            as_user = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "--"]

            def run(mode: str) -> float:
                home = homes[mode]
                env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8",
                       "AGENTCAGE_HOME": str(home / "state")}
                argv = [*(as_user if mode == "rootless" else []), str(SCRIPT), "run", "minimal",
                        "-c", str(config), "--project", str(home / "project"), "--", "true"]
                start = time.perf_counter()
                r = host.run(argv, env=env, cwd=home, capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=120)
                elapsed = time.perf_counter() - start
                if r.returncode != 0:
                    raise SystemExit(f"{mode} run failed: {r.stderr.strip()[-600:]}")
                return elapsed

            for round_ in range(args.runs + 1):
                for mode in samples:
                    elapsed = run(mode)
                    if round_:
                        samples[mode].append(elapsed)
                        print(f"  {mode}: {elapsed * 1000:.0f} ms", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    root, user = (statistics.median(samples[m]) * 1000 for m in ("root", "rootless"))
    ratio = user / root
    print(f"median of {args.runs}: later run as root {root:.0f} ms, rootless {user:.0f} ms: "
          f"{ratio:.2f}x (target < {TARGET}x) {'met' if ratio < TARGET else 'NOT met'}")


if __name__ == "__main__":
    main()
