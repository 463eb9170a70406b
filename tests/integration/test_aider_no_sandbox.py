"""aider, an agent with no sandbox, measured so the table shows what one exposes: the shell
commands its model suggests run as the user, with the user's network, home and files.

aider (pinned by scripts/setup-agents.sh, in a virtual environment of its own under /opt) runs
one message (`--message`) on a host played by a namespace, as root and as uid 1000. Its model
is the fake internet's, reached through litellm as an OpenAI-compatible API
(`--openai-api-base`, streamed Chat Completions). aider asks a model for edits in its own text
formats and lets it suggest shell commands in ```bash blocks (the `diff` edit format); the model
answers with one that runs the probe, the output to a file of the project. aider then asks
"Run shell command?" and "Add command output to the chat?", which the person at the terminal
answers "y" (on stdin: `--no-fancy-input` reads plain lines).

`--yes-always` is not the way to run them: aider answers its own shell-command question "no"
under it (a command needs an explicit yes), which the control below shows: the same run with
`--yes-always` and nothing typed leaves no probe output.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.agentcage.conftest import needs_root
from tests.integration import agent_runs
from tests.integration.agent_runs import axes, ids, readable_credentials

pytestmark = pytest.mark.netns
ENGINE = "aider"
AIDER = "/opt/agentcage-aider/bin/aider"  # scripts/setup-agents.sh's venv
# aider's own checks and prompts that are not the point: its update check, analytics, release
# notes and the unknown model's warning; no git repository
AIDER_ARGS = ["--model", "openai/fake-model", "--openai-api-base", "https://api.openai.com/v1",
              "--message", "measure this sandbox", "--edit-format", "diff", "--no-git",
              "--no-check-update", "--analytics-disable", "--no-show-release-notes",
              "--no-show-model-warnings", "--no-fancy-input"]
ANSWERS = "y\ny\n"  # run the command; add its output to the chat


@pytest.fixture(scope="module")
def world() -> Iterator[dict[str, Any]]:
    needs_root()
    from fakenet import FakeHost, FakeInternet

    version = agent_runs.tool_version([AIDER])
    assert version != "?", "aider is not installed: run scripts/setup-agents.sh"
    with FakeInternet(extra_names={"api.openai.com": None}, catch_all=False) as net, \
            FakeHost(net) as host:
        yield {"net": net, "host": host, "version": version}


def _aider(world: dict[str, Any], as_user: bool, flags: list[str],
           answers: str | None) -> tuple[subprocess.CompletedProcess[str], str]:
    """aider's run: its process, and what the probe wrote (empty if it did not run)."""
    net = world["net"]
    with agent_runs.run_dirs(net, "aider") as dirs:
        net.script_model([{"shell": agent_runs.PROBE_TO_FILE}, {"say": "measured"}])
        env = {"PATH": agent_runs.PATH, "HOME": str(dirs.home), "LANG": "C.UTF-8",
               "OPENAI_API_KEY": "sk-proj-" + "0" * 48, "SSL_CERT_FILE": str(dirs.ca)}
        proc = agent_runs.run_agent(world["host"], dirs, [AIDER, *AIDER_ARGS, *flags], env,
                                    as_user, answers=answers)
        return proc, agent_runs.output_from_file(dirs)


@pytest.fixture(scope="module")
def measured(world) -> dict[bool, tuple[int, dict[str, Any]]]:
    results = {}
    for as_user in (False, True):
        label = f"aider, no sandbox (aider {world['version']}), as {agent_runs.who(as_user)}"
        proc, output = _aider(world, as_user, [], ANSWERS)
        assert output.strip(), (proc.returncode, proc.stdout[-800:], proc.stderr[-800:])
        how = f"aider ran the shell command its model suggested, the user saying yes: {label}"
        results[as_user] = (proc.returncode, agent_runs.score(output, label, how, ENGINE))
    return results


WHO = pytest.mark.parametrize("as_user", [False, True], ids=["root", "user"])


@WHO
def test_the_command_it_runs_has_what_the_user_has(measured, as_user):
    code, report = measured[as_user]
    assert code == 0
    assert axes(report)["network"] == "reachable" and "NET-001" in ids(report)
    assert readable_credentials(report) >= agent_runs.PLANTED_PATHS
    assert "SEC-002" in ids(report)  # its own API key, in the command's environment
    if not as_user:  # root, on the host's own filesystem
        assert {"PRIV-001", "FS-001"} <= ids(report)
    else:
        assert "FS-002" in ids(report) and not ids(report) & {"PRIV-001", "FS-001"}


def test_control_with_yes_always_it_does_not_run_the_suggested_command(world):
    proc, output = _aider(world, False, ["--yes-always"], None)
    assert proc.returncode == 0
    assert agent_runs.PROBE_TO_FILE in proc.stdout  # the suggestion, shown
    assert "Running python3 probe.py" not in proc.stdout and output == ""  # and not run


def test_the_tables_rows_are_what_aider_measures_now(measured):
    agent_runs.assert_published_states(ENGINE, {r["label"]: r for _, r in measured.values()})
