"""Claude Code's start at a terminal, in a cage against without one (see cage_startup.py
`--interactive`): the time from the command to the agent's input prompt on a pty.

Both start in the fake internet's reach (the cage through its gateway, the bare one from a
namespace playing the host's network) with the same answers to the first-run questions: the
cage's from its scaffold's seed, the bare one's written into its home the same way. The cage
is `agentcage run claude-code -s ANTHROPIC_API_KEY` with the key already stored for the
project, as every run after the first one.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from agentcage.runs import project_cage_name
from fakenet import FakeInternet

PROMPT = "❯".encode()  # Claude Code's input line: shown once it is ready for a request
KEY = "sk-ant-api03-" + "b" * 64  # made up: the fake provider takes any
TIMEOUT = 90.0


def to_prompt(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Seconds from starting `argv` on a new pty to Claude Code's prompt on it; then it is
    ended as a person ends it (Ctrl-C twice)."""
    start = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        finally:
            os._exit(127)
    shown, elapsed = b"", None
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and elapsed is None:
            if select.select([fd], [], [], 0.05)[0]:
                try:
                    shown += os.read(fd, 65536)
                except OSError:
                    break
                if PROMPT in shown:
                    elapsed = time.perf_counter() - start
        if elapsed is None:
            raise SystemExit(f"no prompt from {' '.join(argv[:4])}: {shown[-600:]!r}")
        for _ in range(2):
            os.write(fd, b"\x03")
            time.sleep(0.3)
        _drain_until_exit(fd, pid)
    finally:
        os.close(fd)
    return elapsed


def _drain_until_exit(fd: int, pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        if select.select([fd], [], [], 0.1)[0]:
            with contextlib.suppress(OSError):
                os.read(fd, 65536)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _seeded_home(root: Path, project: Path) -> Path:
    """A home for Claude Code on the host, answered as the scaffold's seed answers the cage's."""
    home = root / "host-home"
    home.mkdir()
    (home / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True,
        "projects": {str(project): {"hasTrustDialogAccepted": True}},
        "customApiKeyResponses": {"approved": [KEY[-20:]], "rejected": []}}))
    return home


def measure(runs: int, cli: list[str]) -> None:
    if shutil.which("claude") is None:
        raise SystemExit("claude is not installed: run scripts/setup.sh")
    work = Path(tempfile.mkdtemp(prefix="agentcage-bench-tty-"))
    os.chmod(work, 0o755)
    project = work / "project"
    project.mkdir()
    os.chown(project, 1000, 1000)  # the workload runs as its owner
    samples: dict[str, list[float]] = {"host": [], "cage": []}
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "TERM": "xterm-256color",
           "AGENTCAGE_HOME": str(work / "state")}
    try:
        with FakeInternet(extra_names={"api.anthropic.com": None}, catch_all=False) as net:
            net.script_model([{"say": "ready"}])
            client = net.add_client()  # plays the host's network: never the real one
            world = ["--uplink", f"netns:{client.netns}", "--dns", net.dns_address,
                     "--trust-network", "10.200.0.0/16", "--upstream-ca", str(net.ca_cert_path)]
            name = project_cage_name("claude-code", project)
            subprocess.run([*cli, "secret", "set", name, "ANTHROPIC_API_KEY"], input=KEY,
                           env=env, text=True, check=True, capture_output=True)
            caged = [*cli, "run", "claude-code", "-s", "ANTHROPIC_API_KEY", "--project",
                     str(project), *world]
            host_env = {**env, "HOME": str(_seeded_home(work, project)),
                        "ANTHROPIC_API_KEY": KEY, "NODE_EXTRA_CA_CERTS": str(net.ca_cert_path),
                        "DISABLE_AUTOUPDATER": "1",
                        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
            bare = [*client.exec_prefix, "env", *(f"{k}={v}" for k, v in host_env.items()),
                    "claude"]
            for round_ in range(runs + 1):  # round-robin; the first round warms the caches
                for case, argv, case_env in (("host", bare, env), ("cage", caged, env)):
                    elapsed = to_prompt(argv, case_env, project)
                    if round_:
                        samples[case].append(elapsed)
            subprocess.run([*cli, "destroy", "-y", name], env=env, capture_output=True)
            subprocess.run([*cli, "zygote", "stop"], env=env, capture_output=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    host, cage = (statistics.median(samples[k]) * 1000 for k in ("host", "cage"))
    print(f"median of {runs} rounds, ms from the command to Claude Code's prompt")
    print(f"{'Claude Code on the host, no cage (baseline)':52} {host:10.0f}")
    print(f"{'agentcage run claude-code -s KEY (key stored)':52} {cage:10.0f}")
    ratio = cage / host
    print(f"ratio {ratio:.2f}x; target < 1.3x: {'met' if ratio < 1.3 else 'NOT met'}")
