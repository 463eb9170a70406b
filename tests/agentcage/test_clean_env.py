"""Nothing of the caller's environment reaches a cage: not its processes (bwrap's own init, the
cage's PID 1, included), not its gateway. A canary exported before every CLI verb that starts
something must be in no process of the cage or the gateway, seen from inside and from the host.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentcage.backends import host
from agentcage.backends.netplan import NetPlan
from tests.agentcage.conftest import make_project
from tests.agentcage.test_cli import AGENTCAGE, agentcage, home, run_args  # noqa: F401
from tests.terminal_driver import drive

CANARY_NAME = "AGENTCAGE_TEST_CANARY_TOKEN"
CANARY = "canary-" + os.urandom(8).hex()
# Every environment the cage can read, one variable per line.
DUMP_ENVIRONS = "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' <$f; done; env"


def _env(home_dir: Path) -> dict[str, str]:
    return {**os.environ, "AGENTCAGE_HOME": str(home_dir / "home"), CANARY_NAME: CANARY,
            "HOME": "/root/canary-home-" + CANARY}


def cli(home_dir: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AGENTCAGE, *args], env=_env(home_dir), capture_output=True,
                          text=True, timeout=timeout, cwd=home_dir, stdin=subprocess.DEVNULL)


def environ_of(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def cage_processes(home_dir: Path, name: str) -> list[int]:
    import json

    runtime = json.loads((home_dir / "home" / "cages" / name / "runtime.json").read_text())
    plan = NetPlan.from_dict(runtime["plan"])
    pids = host.pids_in_netns(plan.cage_ns) + host.pids_in_netns(plan.gw_ns)
    return sorted({*pids, int(runtime["gateway_pid"])})


def assert_no_canary_on_host(home_dir: Path, name: str) -> None:
    pids = cage_processes(home_dir, name)
    cmdlines = [Path(f"/proc/{p}/cmdline").read_bytes() for p in pids
                if Path(f"/proc/{p}/cmdline").exists()]
    # the service workload (each exec is a sandbox of its own; this one is seen from the host)
    assert any(c.startswith(b"sleep\x00300") for c in cmdlines), cmdlines
    assert any(b"agentcage.gateway" in c for c in cmdlines), cmdlines
    leaking = [p for p in pids if CANARY.encode() in environ_of(p)]
    assert leaking == [], f"processes holding the caller's environment: {leaking}"


def cage_config(home_dir: Path, net, name: str) -> Path:
    path = home_dir / f"{name}.yaml"
    args = run_args(net)
    uplink, dns = args[1], args[3]
    path.write_text(f"""
name: {name}
lifecycle: service
container:
  command: ["sleep", "300"]
domains: {{mode: allowlist, allow: [allowed.example.test]}}
dns_servers: [{dns}]
gateway:
  uplink: "{uplink}"
  trusted_networks: [10.200.0.0/16]
  upstream_ca_files: ["{net.ca_cert_path}"]
""")
    return path


@pytest.mark.netns
def test_canary_reaches_no_process_of_a_created_started_and_execd_cage(home, net):  # noqa: F811
    project = make_project(home / "work")
    config = cage_config(home, net, "clean")
    r = cli(home, "cage", "create", "-c", str(config), "--project", str(project))
    assert r.returncode == 0, r.stderr
    # control: the canary is in the CLI's own environment, so the checks below can see it
    probe = subprocess.run([sys.executable, "-c", f"import os; print(os.environ['{CANARY_NAME}'])"],
                           env=_env(home), capture_output=True, text=True)
    assert probe.stdout.strip() == CANARY

    inside = cli(home, "exec", "clean", "--", "sh", "-c", DUMP_ENVIRONS)
    assert inside.returncode == 0, inside.stderr
    assert "PATH=" in inside.stdout  # the dump read something
    assert CANARY not in inside.stdout
    assert "canary-home" not in inside.stdout
    assert_no_canary_on_host(home, "clean")

    assert cli(home, "stop", "clean").returncode == 0
    assert cli(home, "start", "clean").returncode == 0
    inside = cli(home, "exec", "clean", "--", "sh", "-c", DUMP_ENVIRONS)
    assert inside.returncode == 0 and "PATH=" in inside.stdout
    assert CANARY not in inside.stdout
    assert_no_canary_on_host(home, "clean")


@pytest.mark.netns
def test_canary_reaches_no_process_of_an_ephemeral_run(home, net):  # noqa: F811
    project = make_project(home / "work")
    r = cli(home, "run", "minimal", "--project", str(project), *run_args(net), "--",
            "sh", "-c", DUMP_ENVIRONS)
    assert r.returncode == 0, r.stderr
    assert "PATH=" in r.stdout and CANARY not in r.stdout


@pytest.mark.netns
def test_canary_reaches_no_process_of_an_interactive_shell(home, net):  # noqa: F811
    project = make_project(home / "work")
    config = cage_config(home, net, "shellenv")
    assert cli(home, "cage", "create", "-c", str(config), "--project",
               str(project)).returncode == 0
    shown, rc = drive([*AGENTCAGE, "shell", "shellenv"],
                      [f"{DUMP_ENVIRONS} | grep -c {CANARY}\r".encode(),
                       b"echo marker-$((40+2))\r", b"exit 7\r"], _env(home))
    assert "marker-42" in shown, shown  # the shell ran the commands
    assert rc == 7, shown  # and its status is the CLI's
    counts = [line.strip() for line in shown.splitlines() if line.strip().isdigit()]
    assert counts == ["0"], shown
    assert_no_canary_on_host(home, "shellenv")
