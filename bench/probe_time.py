"""Wall time of the agentsec probe against the public agentsec-pack probe, in the same run.

Three clients of a fake internet (fakenet), each running both probes with /usr/bin/python3 under
`ip netns exec` (ours with AGENTSEC_PROBE_TARGETS pointing at fakenet's targets file; the public
one has no such setting and tries its own fixed list, which fakenet's resolver answers or drops):
  (a) isolated: loopback only, no route;
  (b) blackhole, drop: every packet silently discarded (connects and lookups time out);
  (c) blackhole, reject: NXDOMAIN for every name, RST / ICMP unreachable for everything else.
Runs are interleaved across the cases and the two probes, and a bare `python3 -c pass` in the
same namespace is timed alongside as the baseline, so the ratios hold on a busy machine. Wall
time includes the interpreter's start-up. Needs root.

The public probe is not part of this repository and is not fetched from the network here (this
machine has none): pass the path of its `agentsec/probe/blast_probe.py`, from a checkout of
github.com/binary-knight/agentsec-pack, with --public-probe (or AGENTSEC_PUBLIC_PROBE). In the
drop case it waits out every timeout one after another (tens of seconds a run), so it is run
--public-drop-runs times there (default 1).

    .venv/bin/python bench/probe_time.py --public-probe PATH [--runs N] [--check]
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
PUBLIC_HARD_LIMIT_S = 600.0  # the public probe runs its timeouts one after another


@dataclass(frozen=True)
class Case:
    label: str
    target_s: float  # the goal: ours must stay under it
    match_public: bool  # and, where true, take no longer than the public probe (10% noise)


CASES = {
    "isolated": Case("(a) isolated, no network", 0.08, True),
    "drop": Case("(b) blackhole, drop", 2.5, False),
    "reject": Case("(c) blackhole, reject", 0.15, True),
}
NOISE = 1.10


@dataclass
class Samples:
    probe: list[float] = field(default_factory=list)
    reported: list[float] = field(default_factory=list)  # the probe's own elapsed_s
    public: list[float] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)


def timed(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[-2:])} failed ({result.returncode}): "
                         f"{result.stderr.strip()[-500:]}")
    return elapsed, result.stdout


def measure(clients: dict[str, Client], public: Path, runs: int, public_drop_runs: int,
            timeout_s: float) -> dict[str, Samples]:
    samples = {name: Samples() for name in clients}
    hard_limit = timeout_s + DEADLINE_SLACK_S + 30  # only so a hung probe cannot hang the bench
    for run in range(runs):
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
            if name != "drop" or run < public_drop_runs:
                public_wall, out = timed([*client.exec_prefix, PYTHON, str(public)], env,
                                         PUBLIC_HARD_LIMIT_S)
                json.loads(out)  # it printed its one JSON document: it really ran
                samples[name].public.append(public_wall)
    return samples


def report(samples: dict[str, Samples], runs: int, timeout_s: float) -> bool:
    deadline = timeout_s + DEADLINE_SLACK_S
    print(f"probe wall time, median of {runs} runs (start-up included), /usr/bin/python3 under "
          f"ip netns exec, AGENTSEC_PROBE_TIMEOUT={timeout_s:g} s (deadline {deadline:g} s)")
    header = (f"{'case':<25} {'ours':>7} {'says':>6} {'public':>7} {'x pub':>6} "
              f"{'python':>7} {'target':>7}  ok")
    print(header)
    print("-" * len(header))
    all_ok = True
    for name, s in samples.items():
        case = CASES[name]
        wall, public = statistics.median(s.probe), statistics.median(s.public)
        ok = wall < case.target_s and (not case.match_public or wall <= public * NOISE)
        all_ok &= ok
        print(f"{case.label:<25} {wall:>6.3f}s {statistics.median(s.reported):>5.3f}s "
              f"{public:>6.3f}s {wall / public:>5.2f}x {statistics.median(s.baseline):>6.3f}s "
              f"{'<' + format(case.target_s, 'g') + 's':>7}  {'yes' if ok else 'NO'}")
    print("ours/public: this probe / the public agentsec-pack probe, same namespace, same runs;\n"
          "says: the probe's own elapsed_s; python: `python3 -c pass`. ok: under the target,\n"
          f"and for (a) and (c) within {NOISE - 1:.0%} of the public probe's time.")
    return all_ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--public-probe", type=Path,
                        default=os.environ.get("AGENTSEC_PUBLIC_PROBE"),
                        help="path of agentsec-pack's agentsec/probe/blast_probe.py "
                             "(default: $AGENTSEC_PUBLIC_PROBE)")
    parser.add_argument("--runs", type=int, default=5, help="runs per case (default 5)")
    parser.add_argument("--public-drop-runs", type=int, default=1,
                        help="runs of the public probe in the drop case (default 1)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a case misses its target")
    args = parser.parse_args()
    if args.runs < 1 or args.public_drop_runs < 1:
        parser.error("--runs and --public-drop-runs must be at least 1")
    if args.public_probe is None or not Path(args.public_probe).is_file():
        parser.error("the public probe is timed in the same run, not quoted: pass --public-probe "
                     "with the path of blast_probe.py from a checkout of "
                     "github.com/binary-knight/agentsec-pack (agentsec/probe/blast_probe.py)")
    if os.geteuid() != 0:
        print("probe_time: needs root (it builds network namespaces)", file=sys.stderr)
        return 1
    timeout_s = float(os.environ.get("AGENTSEC_PROBE_TIMEOUT", DEFAULT_TIMEOUT_S))
    with FakeInternet() as net:
        clients = {
            "isolated": net.add_isolated_client(),
            "drop": net.add_blackhole_client("drop"),
            "reject": net.add_blackhole_client("reject"),
        }
        samples = measure(clients, Path(args.public_probe), args.runs, args.public_drop_runs,
                          timeout_s)
    ok = report(samples, args.runs, timeout_s)
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
