"""Wall time of the agentsec probe where the network gives nothing back.

Three clients of a fake internet (fakenet), each running the probe with /usr/bin/python3 under
`ip netns exec`, with AGENTSEC_PROBE_TARGETS pointing at fakenet's targets file:
  (a) isolated: loopback only, no route;
  (b) blackhole, drop: every packet silently discarded (connects and lookups time out);
  (c) blackhole, reject: NXDOMAIN for every name, RST / ICMP unreachable for everything else.
Runs are interleaved across the cases, and a bare `python3 -c pass` in the same namespace is timed
alongside as the baseline, so the ratios hold on a busy machine. Needs root.

    .venv/bin/python bench/probe_time.py [--runs N] [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from fakenet import Client, FakeInternet

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "src" / "agentsec" / "probe" / "blast_probe.py"
PYTHON = "/usr/bin/python3"
DEFAULT_TIMEOUT_S = 2.0  # the probe's AGENTSEC_PROBE_TIMEOUT default
DEADLINE_SLACK_S = 1.0  # the probe promises to finish within timeout + this


@dataclass(frozen=True)
class Case:
    label: str
    target_s: float  # the goal set in the issue
    public_s: float  # the public probe, same situation, for reference


CASES = {
    "isolated": Case("(a) isolated, no network", 0.15, 0.08),
    "drop": Case("(b) blackhole, drop", 2.5, 44.1),
    "reject": Case("(c) blackhole, reject", 0.15, 0.09),
}


@dataclass
class Samples:
    probe: list[float] = field(default_factory=list)
    reported: list[float] = field(default_factory=list)  # the probe's own elapsed_s
    baseline: list[float] = field(default_factory=list)


def timed(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[-2:])} failed ({result.returncode}): "
                         f"{result.stderr.strip()[-500:]}")
    return elapsed, result.stdout


def measure(clients: dict[str, Client], runs: int, timeout_s: float) -> dict[str, Samples]:
    samples = {name: Samples() for name in clients}
    hard_limit = timeout_s + DEADLINE_SLACK_S + 30  # only so a hung probe cannot hang the bench
    for _ in range(runs):
        for name, client in clients.items():
            env = dict(os.environ, AGENTSEC_PROBE_TARGETS=str(client.probe_targets_file),
                       AGENTSEC_PROBE_TIMEOUT=f"{timeout_s:g}")
            base, _ = timed([*client.exec_prefix, PYTHON, "-c", "pass"], env, hard_limit)
            wall, out = timed([*client.exec_prefix, PYTHON, str(PROBE)], env, hard_limit)
            report = json.loads(out)
            if not report.get("targets", {}).get("overridden"):
                raise SystemExit("the probe did not take the fakenet targets file")
            samples[name].baseline.append(base)
            samples[name].probe.append(wall)
            samples[name].reported.append(float(report.get("elapsed_s", "nan")))
    return samples


def report(samples: dict[str, Samples], runs: int, timeout_s: float) -> bool:
    deadline = timeout_s + DEADLINE_SLACK_S
    print(f"agentsec probe wall time: median of {runs} runs, /usr/bin/python3 under ip netns exec, "
          f"AGENTSEC_PROBE_TIMEOUT={timeout_s:g} s (deadline {deadline:g} s)")
    header = (f"{'case':<26} {'median':>8} {'probe says':>10} {'baseline':>9} {'x base':>7} "
              f"{'/deadline':>9} {'target':>8} {'public':>8} {'x public':>8}  ok")
    print(header)
    print("-" * len(header))
    all_ok = True
    for name, s in samples.items():
        case = CASES[name]
        wall, base = statistics.median(s.probe), statistics.median(s.baseline)
        ok = wall < case.target_s
        all_ok &= ok
        print(f"{case.label:<26} {wall:>7.3f}s {statistics.median(s.reported):>9.3f}s "
              f"{base:>8.3f}s {wall / base:>6.1f}x {wall / deadline:>9.2f} "
              f"{'<' + format(case.target_s, 'g') + 's':>8} {case.public_s:>7g}s "
              f"{wall / case.public_s:>7.2f}x  {'yes' if ok else 'NO'}")
    print("baseline: `python3 -c pass` in the same namespace, same runs; 'probe says': its "
          "elapsed_s; public: the public probe's time in the same situation.")
    return all_ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per case (default 5)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a case misses its target")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if os.geteuid() != 0:
        print("probe_time: needs root (it builds network namespaces)", file=sys.stderr)
        return 1
    if not PROBE.exists():
        print(f"probe_time: no probe at {PROBE}", file=sys.stderr)
        return 1
    timeout_s = float(os.environ.get("AGENTSEC_PROBE_TIMEOUT", DEFAULT_TIMEOUT_S))
    with FakeInternet() as net:
        clients = {
            "isolated": net.add_isolated_client(),
            "drop": net.add_blackhole_client("drop"),
            "reject": net.add_blackhole_client("reject"),
        }
        samples = measure(clients, args.runs, timeout_s)
    ok = report(samples, args.runs, timeout_s)
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
