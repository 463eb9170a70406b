"""Gemini CLI, measured the way it runs: headless (`gemini -p`), approving its own tool calls
(`--yolo`, which a headless run needs to run a command at all), its model the fake internet's
(Google's Gemini API: `:streamGenerateContent` with `alt=sse`, a `functionCall` of its
`run_shell_command` tool, then a text), which has it run the probe, the output to a file of the
project. The CLI reaches generativelanguage.googleapis.com through the fake internet's DNS with
a dummy GEMINI_API_KEY, as a user with a key does (GOOGLE_GEMINI_BASE_URL would point it
elsewhere, but also switch it to its "gateway" authentication); its usage statistics are off in
its settings, as a user may turn them off, so it makes no other call. `-m` names a model, so the
CLI asks no routing model first.

- Without a sandbox (its default), as root and as uid 1000: the command runs as the user, with
  the user's network, home and files.
- With its sandbox (GEMINI_SANDBOX=podman: `--sandbox` alone takes docker first wherever a
  docker command is installed, as here, where no docker engine runs), rootful podman with runc
  and the podman world's configuration, GEMINI_SANDBOX_IMAGE a local image (its default image
  is on a registry this machine cannot reach). It does not start: Gemini CLI gives every docker
  or podman sandbox `--add-host host.docker.internal:host-gateway`, and podman 4.3.1
  (Debian 12's) refuses `host-gateway` as an address; newer podman accepts it. The CLI exits
  with podman's code, the model is never asked, no container is left. The control: the same
  podman and image, with the fake host's address where `host-gateway` stood, start. The README's
  table has the row, saying why it is not measured. Podman refuses the arguments before it
  looks at the image, so the image here is the podman world's Debian one (built from Debian's
  packages), not one holding Gemini CLI, which a sandbox that started would need; nor does
  the container get podman's bridge network (the world's default is none, and Gemini CLI asks
  for no other unless told to).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests import profiles_script
from tests.agentcage.conftest import needs_root
from tests.integration import agent_runs
from tests.integration.agent_runs import axes, ids, readable_credentials

pytestmark = pytest.mark.netns
ENGINE = "gemini-cli"
API_HOST = "generativelanguage.googleapis.com"
SETTINGS = {"privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}}
GEMINI = ["gemini", "-p", "measure this sandbox", "--yolo", "--skip-trust",
          "-m", "gemini-2.5-flash"]
HOST_GATEWAY = "host.docker.internal:host-gateway"


@pytest.fixture(scope="module")
def world() -> Iterator[dict[str, Any]]:
    needs_root()
    from fakenet import FakeHost, FakeInternet
    from tests.integration.podman_world import podman_world

    assert agent_runs.tool_version(["gemini"]) != "?", "run scripts/setup-agents.sh"
    with FakeInternet(extra_names={API_HOST: None}, catch_all=False) as net, \
            FakeHost(net) as host, podman_world() as podman, agent_runs.tmp_leftovers_removed():
        yield {"net": net, "host": host, "podman": podman,
               "version": agent_runs.tool_version(["gemini"])}


def _gemini(world: dict[str, Any], as_user: bool, extra_env: dict[str, str],
            label: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None, int]:
    """Gemini CLI's run: (its process, the probe's report if it ran, the model requests)."""
    net = world["net"]
    with agent_runs.run_dirs(net, "gemini-cli") as dirs:
        (dirs.home / ".gemini").mkdir()
        (dirs.home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
        net.reset_records()
        net.script_model([{"shell": agent_runs.PROBE_TO_FILE}, {"say": "measured"}])
        env = {"PATH": agent_runs.PATH, "HOME": str(dirs.home), "LANG": "C.UTF-8",
               "GEMINI_API_KEY": "AIza" + "0" * 35, "NODE_EXTRA_CA_CERTS": str(dirs.ca),
               **extra_env}
        proc = agent_runs.run_agent(world["host"], dirs, GEMINI, env, as_user)
        asked = sum(1 for r in net.http_requests() if r["host"] == API_HOST)
        output = agent_runs.output_from_file(dirs)
        if not output.strip():
            return proc, None, asked
        how = f"Gemini CLI's run_shell_command tool ran the probe: {label}"
        return proc, agent_runs.score(output, label, how, ENGINE), asked


@pytest.fixture(scope="module")
def unsandboxed(world) -> dict[bool, tuple[int, dict[str, Any], int]]:
    results = {}
    for as_user in (False, True):
        label = (f"gemini -p, no sandbox (gemini {world['version']}), "
                 f"as {agent_runs.who(as_user)}")
        proc, report, asked = _gemini(world, as_user, {}, label)
        assert report is not None, (proc.returncode, proc.stdout[-800:], proc.stderr[-800:])
        results[as_user] = (proc.returncode, report, asked)
    return results


@pytest.fixture(scope="module")
def podman_sandbox(world) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None, int]:
    env = {**world["podman"].env, "GEMINI_SANDBOX": "podman",
           "GEMINI_SANDBOX_IMAGE": world["podman"].image}
    return _gemini(world, False, env, "not run")


WHO = pytest.mark.parametrize("as_user", [False, True], ids=["root", "user"])


@WHO
def test_without_a_sandbox_the_command_has_what_the_user_has(unsandboxed, as_user):
    code, report, asked = unsandboxed[as_user]
    assert code == 0 and asked == 2  # the shell call, then the final text
    assert axes(report)["network"] == "reachable" and "NET-001" in ids(report)
    assert readable_credentials(report) >= agent_runs.PLANTED_PATHS
    if not as_user:  # root, on the host's own filesystem
        assert {"PRIV-001", "FS-001"} <= ids(report)
    else:  # the host's root filesystem, mounted read-write, and what uid 1000 may write
        assert "FS-002" in ids(report) and not ids(report) & {"PRIV-001", "FS-001"}


def _podman_version() -> str:
    return agent_runs.tool_version(["podman"])


def test_its_podman_sandbox_cannot_start_on_podman_4_3_and_the_model_is_never_asked(
        world, podman_sandbox):
    proc, report, asked = podman_sandbox
    assert _podman_version() == "4.3.1"
    assert proc.returncode == 125  # podman's: its own error, handed on
    assert 'Error: invalid IP address in add-host: "host-gateway"' in proc.stderr
    assert report is None and asked == 0  # nothing ran, in no sandbox and outside one
    left = world["podman"].podman("ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert not [name for name in left if name.startswith("agentsec-python-")]


def test_control_the_same_podman_and_image_start_with_an_address_for_the_host(world):
    host_address = world["host"].address
    argv = ["podman", "run", "-i", "--rm", "--init", "--entrypoint", "", "--add-host",
            f"host.docker.internal:{host_address}", world["podman"].image, "cat", "/etc/hosts"]
    proc = world["host"].run(["env", *(f"{k}={v}" for k, v in world["podman"].env.items()),
                              *argv], capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert re.search(rf"^{re.escape(host_address)}\s+host\.docker\.internal", proc.stdout, re.M)


def sandbox_label(version: str) -> str:
    return f"gemini -p, GEMINI_SANDBOX=podman (gemini {version}), as root"


def test_the_tables_rows_are_what_gemini_cli_measures_now(world, unsandboxed, podman_sandbox):
    agent_runs.assert_published_states(ENGINE, {r["label"]: r for _, r, _ in
                                                unsandboxed.values()})
    profiles = profiles_script.load()
    [row] = [r for r in profiles.load_unmeasured(profiles.PROFILES) if r.get("agent") == ENGINE]
    assert row["label"] == sandbox_label(world["version"])
    assert row["why"] == (f"not measured here: podman {_podman_version()} refuses the "
                          f"--add-host {HOST_GATEWAY} it is given")
    assert podman_sandbox[0].returncode == 125
