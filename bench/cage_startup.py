"""Cage start-up cost, measured in the fake internet, each target against its baseline in one run.

Targets (the `agentcage` console script, as a user types it):
- first cage: `agentcage run minimal -- true` with no gateway zygote and no command server
  running (the run starts both, and its gateway is forked from the zygote): < 1 s;
- later cages: the same with the zygote and the command server up (served): < 300 ms;
- exec: `agentcage exec NAME -- true` into a cage whose gateway is up (the lean path): < 100 ms,
  and < 2.5x `python -c pass`;
- `agentcage start` of a stopped cage and `cage create` (which starts it), each < 1x a later
  `run`; `agentcage ls` < 2x `python -c pass`.
Baselines, in the same run:
- a cage whose gateway is spawned, as every cage's was (AGENTCAGE_ZYGOTE=off);
- a later cage run in-process, as every `run` was before the command server
  (AGENTCAGE_COMMAND_SERVER=off);
- exec through the full CLI (`agentcage exec NAME true`: no `--`, so click parses it);
- bare `bwrap --ro-bind / / --unshare-all true`, `python -c pass`, importing the part of
  mitmproxy the gateway uses (the floor of a start that has to import it), and the backend's
  exec alone (no CLI start-up);
- with `--before DIR`, `run` (a first cage, then a later one: its own zygote up) and `exec`
  of an earlier source tree of agentcage (DIR/src, e.g. `git archive COMMIT src | tar -x -C
  DIR`), run as `python -m agentcage.cli` with it first on PYTHONPATH: the code before these
  measures, in the same run.

The cases are measured round-robin (one sample of each per round, medians reported) so that a
change of the machine's load during the run weighs on all of them alike. Python writes its
bytecode caches as an installed package has them (PYTHONDONTWRITEBYTECODE is dropped, and one
round is run first and not counted).

Run with `python -P` (or from another directory) if bench/ holds a module named like a
standard-library one.

With `--interactive`, instead: a person's start of Claude Code. From `agentcage run
claude-code -s ANTHROPIC_API_KEY` (the key stored for the project, as after a first run) to
Claude Code's input prompt on the screen (a pty), against the same Claude Code started
without a cage (on the host's network, with a home answered the same way: onboarding done,
the key accepted), in one run, round-robin: target < 1.3x.

Usage (root): .venv/bin/python -P bench/cage_startup.py [--runs N] [--before DIR]
              .venv/bin/python -P bench/cage_startup.py --interactive [--runs N]
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
from collections.abc import Callable
from pathlib import Path

from fakenet import FakeHost, FakeInternet

SCRIPT = Path(sys.executable).parent / "agentcage"
CLI = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "agentcage.cli"]


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])} failed: {r.stderr.strip()[-400:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--before", type=Path, help="an earlier source tree to measure too")
    parser.add_argument("--interactive", action="store_true",
                        help="time Claude Code's prompt in a cage against on the host")
    args = parser.parse_args()
    if args.interactive:
        sys.path.append(str(Path(__file__).parent))  # appended: shadows nothing
        from interactive_startup import measure

        measure(args.runs, CLI)
        return
    work = Path(tempfile.mkdtemp(prefix="agentcage-bench-"))
    os.chmod(work, 0o755)
    project = work / "project"  # beside the state root, never holding it
    project.mkdir()
    os.chown(project, 65534, 65534)  # not root's: the workload runs as its owner (host_user)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["AGENTCAGE_HOME"] = str(work / "home")
    spawned_env = {**env, "AGENTCAGE_ZYGOTE": "off"}
    in_process_env = {**env, "AGENTCAGE_COMMAND_SERVER": "off"}
    try:
        with FakeInternet() as net, FakeHost(net) as fake_host:
            host_ns = net.add_client().netns  # plays the host's network: never the real one
            run = [*CLI, "run", "minimal", "--project", str(project), "--uplink",
                   f"netns:{host_ns}", "--dns", net.dns_address, "--", "true"]
            stop_zygote = [*CLI, "zygote", "stop"]
            config = work / "cage.yaml"
            config.write_text(f"name: bench\ndns_servers: [{net.dns_address}]\n"
                              f"gateway: {{uplink: 'netns:{host_ns}'}}\n")
            create = [*CLI, "cage", "create", "-c", str(config), "--project", str(project)]
            timed(create, env)
            # The README's flow, init then create of the scaffold unedited, whose uplink is the
            # host's: on a host played by a namespace (never the real one's), against a later
            # `run` there.
            scaffold = work / "scaf.yaml"
            timed([*CLI, "init", "scaf", "--scaffold", "minimal", "-o", str(scaffold)], env)
            create_scaffold = fake_host.command([*CLI, "cage", "create", "-c", str(scaffold),
                                                 "--project", str(project)])
            run_on_host = fake_host.command([*CLI, "run", "minimal", "--project", str(project),
                                             "--", "true"])
            host_env = {**env, "AGENTCAGE_HOME": str(work / "host-home")}  # its own zygote
            timed(create_scaffold, host_env)

            def stop() -> None:
                timed([*CLI, "stop", "bench"], env)

            def destroy() -> None:
                timed([*CLI, "destroy", "-y", "bench"], env)

            def first() -> float:
                # not counted: the case is a host with no zygote and no command server running
                # (`zygote stop` stops the exec server too)
                timed(stop_zygote, env)
                elapsed = timed(run, env)
                # nor are the servers' start-ups (a person's next command comes later than the
                # next case here): the command server's that the run began, the exec server's
                # that an exec begins
                timed([*CLI, "exec", "bench", "--", "true"], env)
                deadline = time.monotonic() + 30
                while not all(list((work / "home" / kind).glob("*.sock"))
                              for kind in ("commands", "exec")):
                    if time.monotonic() > deadline:
                        raise SystemExit("no command or exec server came up after a first cage")
                    time.sleep(0.05)
                return elapsed

            preload = "from agentcage.gateway.proxy import preload; preload()"
            cases: dict[str, Callable[[], float]] = {
                "bwrap": lambda: timed(["bwrap", "--ro-bind", "/", "/", "--unshare-all",
                                        "true"]),
                "python": lambda: timed([sys.executable, "-c", "pass"], env),
                "mitmproxy": lambda: timed([sys.executable, "-c", preload], env),
                "spawned": lambda: timed(run, spawned_env),
                "first": first,
                "later": lambda: timed(run, env),
                "later_off": lambda: timed(run, in_process_env),
                "exec_full": lambda: timed([*CLI, "exec", "bench", "true"], env),
                "exec": lambda: timed([*CLI, "exec", "bench", "--", "true"], env),
                "backend": lambda: _backend_exec(work),
                "start": lambda: _after(stop, lambda: timed([*CLI, "start", "bench"], env)),
                "create": lambda: _after(destroy, lambda: timed(create, env)),
                "ls": lambda: timed([*CLI, "ls"], env),
                "run_on_host": lambda: timed(run_on_host, host_env),
                "create_scaffold": lambda: _after(
                    lambda: timed(fake_host.command([*CLI, "destroy", "-y", "scaf"]), host_env),
                    lambda: timed(create_scaffold, host_env)),
            }
            if args.before:
                old = {**env, "PYTHONPATH": str(args.before.resolve() / "src")}
                old_cli = [sys.executable, "-m", "agentcage.cli"]
                # its zygote (if it has one) was stopped by "first": a first cage, then a later
                cases["before_run"] = lambda: timed([*old_cli, *run[len(CLI):]], old)
                cases["before_later"] = lambda: timed([*old_cli, *run[len(CLI):]], old)
                cases["before_exec"] = lambda: timed([*old_cli, "exec", "bench", "--", "true"],
                                                     old)
            samples: dict[str, list[float]] = {name: [] for name in cases}
            try:
                for round_ in range(args.runs + 1):
                    for name, case in cases.items():  # "later" follows "first": zygote up
                        elapsed = case()
                        if round_:  # the first round warms the caches: not counted
                            samples[name].append(elapsed)
            finally:
                timed([*CLI, "destroy", "-y", "bench"], env)
                timed(fake_host.command([*CLI, "destroy", "-y", "scaf"]), host_env)
                timed(fake_host.command(stop_zygote), host_env)
                timed(stop_zygote, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report({name: statistics.median(v) * 1000 for name, v in samples.items()}, args.runs)


def report(ms: dict[str, float], runs: int) -> None:
    base = ms["bwrap"]
    rows = [
        ("bwrap alone (baseline)", "bwrap"),
        ("python -c pass", "python"),
        ("import the gateway's mitmproxy (floor w/o zygote)", "mitmproxy"),
        ("run, gateway spawned (AGENTCAGE_ZYGOTE=off)", "spawned"),
        ("run, first cage (starts the zygote)", "first"),
        ("run, later cages (zygote up)", "later"),
        ("run, later cages, in-process (no command server)", "later_off"),
        ("exec through the full CLI (click)", "exec_full"),
        ("exec through the CLI (lean path)", "exec"),
        ("backend exec (no CLI start-up)", "backend"),
        ("cage start of a stopped cage", "start"),
        ("cage create (a cage.yaml of the user's; it starts)", "create"),
        ("ls", "ls"),
        ("run, later cages, on a fake host", "run_on_host"),
        ("cage create of a scaffold unedited, on a fake host", "create_scaffold"),
    ]
    if "before_run" in ms:
        rows += [("run, first cage, the code before (--before)", "before_run"),
                 ("run, later cages, the code before (--before)", "before_later"),
                 ("exec, the code before (--before)", "before_exec")]
    print(f"median of {runs} rounds")
    print(f"{'case':52} {'median ms':>10} {'x bwrap':>8}")
    for label, key in rows:
        print(f"{label:52} {ms[key]:10.1f} {ms[key] / base:8.1f}")

    def verdict(name: str, key: str, target: float, against: str) -> str:
        met = "met" if ms[key] < target else "NOT met"
        return (f"{name}: {ms[key]:.0f} ms < {target:.0f} ms {met}; "
                f"{ms[against] / ms[key]:.1f}x faster than {against} ({ms[against]:.0f} ms)")

    before = "before_run" in ms
    print(verdict("first cage", "first", 1000, "before_run" if before else "spawned"))
    print(verdict("later cages", "later", 300, "before_later" if before else "spawned"))
    print(verdict("exec", "exec", 100, "before_exec" if "before_exec" in ms else "exec_full"))

    def ratio(name: str, key: str, target: float, against: str) -> str:
        value = ms[key] / ms[against]
        return (f"{name}: {value:.2f}x {against} (target < {target}x) "
                f"{'met' if value < target else 'NOT met'}")

    print(ratio("exec", "exec", 2.5, "python"))
    print(ratio("cage start", "start", 1.0, "later"))
    print(ratio("cage create", "create", 1.0, "later"))
    print(ratio("cage create of a scaffold", "create_scaffold", 1.0, "run_on_host"))
    print(ratio("ls", "ls", 2.0, "python"))


def _after(first: Callable[[], None], case: Callable[[], float]) -> float:
    """`case`'s time, after `first` (not counted: it makes the state the case starts from)."""
    first()
    return case()


def _backend_exec(work: Path) -> float:
    from agentcage.cages import CageService
    from agentcage.state import StateStore

    service = CageService(StateStore(work / "home"))
    start = time.perf_counter()
    service.exec_capture("bench", ["true"])
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
