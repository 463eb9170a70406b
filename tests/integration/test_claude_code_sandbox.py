"""Claude Code's own sandbox, measured the way an agent's sandbox is met: the agent runs the
probe. The real Claude Code (pinned by scripts/setup-agents.sh) runs headless on a host played
by a namespace, as root and as uid 1000, its model the fake internet's model server, which has
its own Bash tool run the probe file with the output going to a file in the working directory;
that file is scored.

Four configurations of its settings (`~/.claude/settings.json`): the sandbox off, on, on with
`sandbox.filesystem.denyRead` over the home's credential files, and on with `socat` missing
(hidden in a mount namespace of that run alone). What the probe reads in the last is the
finding that matters: Claude Code runs the command outside any sandbox, exactly as with the
sandbox off, and exits 0: a user who turned the sandbox on is not told.

The machinery is the agent tests' (agent_runs.py); each run is a row of the README's table,
which must still read what is measured here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.agentcage.conftest import needs_root
from tests.integration import agent_runs
from tests.integration.agent_runs import axes, ids, readable_credentials

pytestmark = pytest.mark.netns
# the proxy the sandbox hands the command asks for the credentials it hands it as well
RUN_PROBE = "AGENTSEC_PROBE_PROXY_AUTH=1 " + agent_runs.PROBE_TO_FILE
HIDE_SOCAT = 'mount --bind /dev/null "$(command -v socat)" && exec "$@"'
ENGINE = "claude-code"
# name: (settings, socat hidden, how the README's table says it)
CONFIGURATIONS = {
    "off": ({"sandbox": {"enabled": False}}, False, "sandbox off"),
    "on": ({"sandbox": {"enabled": True, "autoAllowBashIfSandboxed": True}}, False,
           "sandbox on"),
    "on-socat-missing": ({"sandbox": {"enabled": True, "autoAllowBashIfSandboxed": True}},
                         True, "sandbox on, socat missing"),
    "on-deny-credentials": ({"sandbox": {"enabled": True, "autoAllowBashIfSandboxed": True,
                                         "filesystem": {"denyRead": [
                                             "~/.git-credentials", "~/.aws", "~/.ssh"]}}},
                            False, "sandbox on, denyRead credentials"),
}


@pytest.fixture(scope="module")
def measured() -> Iterator[dict[tuple[str, bool], tuple[int, dict[str, Any]]]]:
    """Each configuration's, run as root and as an ordinary user: (Claude Code's exit code,
    the probe's scored report)."""
    needs_root()
    from agentcage.demo_agents import AGENTS, installed
    from fakenet import FakeHost, FakeInternet

    assert installed(AGENTS["claude-code"]), "claude is not installed: run scripts/setup.sh"
    version = agent_runs.tool_version(["claude"])
    results: dict[tuple[str, bool], tuple[int, dict[str, Any]]] = {}
    with FakeInternet(extra_names={"api.anthropic.com": None}, catch_all=False) as net, \
            FakeHost(net) as host:
        for name, (settings, hide_socat, shown) in CONFIGURATIONS.items():
            for as_user in (False, True):
                label = f"claude -p, {shown} (claude {version}), as {agent_runs.who(as_user)}"
                results[(name, as_user)] = _run(net, host, settings, hide_socat, as_user, label)
    yield results


def _run(net: Any, host: Any, settings: dict[str, Any], hide_socat: bool, as_user: bool,
         label: str) -> tuple[int, dict[str, Any]]:
    with agent_runs.run_dirs(net, "claude-sandbox") as dirs:
        (dirs.home / ".claude").mkdir()
        (dirs.home / ".claude" / "settings.json").write_text(json.dumps(settings))
        (dirs.home / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))
        net.script_model([{"shell": RUN_PROBE}, {"say": "measured"}])
        env = {"PATH": agent_runs.PATH, "HOME": str(dirs.home), "LANG": "C.UTF-8",
               "ANTHROPIC_API_KEY": "sk-ant-api03-" + "0" * 48,
               "NODE_EXTRA_CA_CERTS": str(dirs.ca), "DISABLE_AUTOUPDATER": "1",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
        claude = ["claude", "-p", "measure this sandbox", "--allowedTools", "Bash"]
        # socat hidden in a mount namespace of this run alone, inside the fake host's
        wrap = ["unshare", "--mount", "--propagation", "private", "sh", "-c", HIDE_SOCAT,
                "sh"] if hide_socat else []
        proc = agent_runs.run_agent(host, dirs, claude, env, as_user, wrap=wrap)
        output = agent_runs.output_from_file(dirs)
        assert output.strip(), (label, proc.returncode, proc.stdout[-800:], proc.stderr[-800:])
        how = f"Claude Code's Bash tool ran the probe: {label}"
        return proc.returncode, agent_runs.score(output, label, how, ENGINE)


WHO = pytest.mark.parametrize("as_user", [False, True], ids=["root", "user"])


@WHO
def test_with_the_sandbox_off_the_command_runs_as_the_agent_does(measured, as_user):
    code, report = measured[("off", as_user)]
    assert code == 0
    assert axes(report)["network"] == "reachable"  # the host's network, the internet
    if not as_user:  # root, on the host's own filesystem: system paths writable
        assert {"PRIV-001", "FS-001"} <= ids(report)
    else:
        assert not ids(report) & {"PRIV-001", "FS-001"}


@WHO
def test_with_the_sandbox_on_only_the_working_directory_is_writable(measured, as_user):
    code, report = measured[("on", as_user)]
    off = measured[("off", as_user)][1]
    assert code == 0
    found = ids(report)
    assert "FS-007" in found and "FS-001" not in found  # only the working directory
    assert "PRIV-001" not in found  # a user namespace (started by root: mapped to host root)
    assert axes(report)["network"] != "reachable"  # through its proxy, which refuses
    assert report["summary"]["raw_score"] < off["summary"]["raw_score"]


@WHO
def test_with_socat_missing_the_sandbox_is_silently_not_there(measured, as_user):
    code, report = measured[("on-socat-missing", as_user)]
    off = measured[("off", as_user)][1]
    # Claude Code exits 0, and what its command could reach is what it can with the sandbox
    # off: the same findings, none of the sandbox's
    assert code == 0
    assert ids(report) == ids(off)
    assert axes(report) == axes(off) and axes(report)["network"] == "reachable"


@WHO
def test_deny_read_takes_the_home_credentials_away_and_only_then(measured, as_user):
    planted = agent_runs.PLANTED_PATHS
    on = measured[("on", as_user)][1]
    assert planted <= readable_credentials(on)  # the sandbox alone: readable
    assert planted <= readable_credentials(measured[("off", as_user)][1])
    code, report = measured[("on-deny-credentials", as_user)]
    assert code == 0
    assert readable_credentials(report) & planted == set()
    assert "FS-007" in ids(report)  # still the sandbox: only the working directory writable


def test_the_tables_rows_are_what_claude_code_measures_now(measured):
    agent_runs.assert_published_states(ENGINE, {r["label"]: r for _, r in measured.values()})
