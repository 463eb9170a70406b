"""A developer at a keyboard: `agentcage run claude-code -s ANTHROPIC_API_KEY` (and `run codex
-s OPENAI_API_KEY`, `run pi -s ANTHROPIC_API_KEY`) at a terminal, as the README has it, driven
through tmux on a host played by a namespace, with the real agent CLIs installed from npm and
the fake internet's model server as their provider.

What a person meets, and what is asserted on the screen: a hidden prompt for the key (typed,
never echoed, never on any command line), then the agent's own input prompt with no first-run
dialog (theme, "use this API key?", security notes, trust of the folder), a request typed
there and the model's answer shown; the provider got the real key, the cage only its
placeholder; the next run asks nothing and shows no dialog; `claude --resume` finds the first
session, `pi --continue` the last one.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentcage.demo_agents import AGENTS, fake_key, installed
from agentcage.runs import project_cage_name
from tests.agentcage.conftest import AGENT_UID, make_project, needs_root, watcher_findings
from tests.agentcage.hosted import AsUser, OnHost, delegated_cgroups, open_to_users
from tests.tmux_screen import Screen

AGENTCAGE = str(Path(sys.executable).with_name("agentcage"))  # the console script
# What a first start of each agent asks, in its own words: none of it may show.
DIALOGS = {
    "claude-code": ("Choose the text style", "Detected a custom API key", "Security notes",
                    "Quick safety check", "trust this folder", "Select login method"),
    "codex": ("Do you trust", "trust the files", "Failed to set trust", "Sign in with ChatGPT",
              "failed to persist config"),
    "pi": ("No models available", "/login", "Error:", "Connection error"),
}
# The agent's own input prompt: Claude Code's empty `❯` line, Codex's composer hint, pi's
# header of keys (its editor has no prompt of its own).
READY = {"claude-code": r"^❯\s*$", "codex": r"Ask Codex to do anything",
         "pi": r"ctrl\+c/ctrl\+d clear/exit"}


@pytest.fixture(scope="module")
def world():
    needs_root()
    from fakenet import FakeInternet

    names = {"api.anthropic.com": None, "api.openai.com": None}
    with FakeInternet(extra_names=names, catch_all=False) as net:
        yield net


@pytest.fixture(params=["root", "rootless"])
def on_host(world, request) -> Iterator[OnHost]:
    """The fake host, the CLI run by root, or by an ordinary user (uid 1000: rootless cages,
    with the cgroup root delegates to that user once)."""
    from fakenet import FakeHost

    home = Path(tempfile.mkdtemp(prefix="agentcage-keyboard-"))
    os.chmod(home, 0o755)
    delegation = (delegated_cgroups(AGENT_UID) if request.param == "rootless"
                  else contextlib.nullcontext())
    try:
        with delegation, FakeHost(world) as host:
            if request.param == "rootless":
                open_to_users(host)
                cli: OnHost = AsUser(host, home, AGENT_UID, world)
            else:
                cli = OnHost(host, home)
            yield cli
            cli.destroy_all()  # the kept state of the project's runs too
    finally:
        shutil.rmtree(home, ignore_errors=True)


class Terminal:
    """Screens opened on the fake host, closed at the end."""

    def __init__(self, cli: OnHost, world):
        self.cli, self.world, self.screens = cli, world, []

    def run(self, project: Path, *args: str) -> Screen:
        """`agentcage run ARGS` at a fresh terminal, in `project`, with the fake internet's
        private addresses and test CA (the only options a real user would not give)."""
        ours, command = list(args), []
        if "--" in ours:
            ours, command = ours[:ours.index("--")], ours[ours.index("--"):]
        ca = self.cli.ca_path or self.world.ca_cert_path
        world = ["--trust-network", "10.200.0.0/16", "--upstream-ca", str(ca)]
        line = " ".join([*self.cli.as_user, AGENTCAGE, "run", *ours, *world, *command])
        env = {"PATH": os.environ["PATH"], "AGENTCAGE_HOME": str(self.cli.state),
               "LANG": "C.UTF-8", "HOME": str(self.cli.home)}
        screen = Screen(self.cli.host.run, self.cli.home / f"tmux-{len(self.screens)}.sock",
                        line, env, project)
        self.screens.append(screen)
        return screen

    def close(self) -> None:
        for screen in self.screens:
            screen.close()


@pytest.fixture
def terminal(on_host, world) -> Iterator[Terminal]:
    t = Terminal(on_host, world)
    try:
        yield t
    finally:
        t.close()


def _command_lines(cli: OnHost) -> str:
    return cli.sh("ps -eo args").stdout


def _model_calls(world, agent) -> list[dict]:
    path = "/v1/messages" if agent.key_env == "ANTHROPIC_API_KEY" else "/v1/responses"
    return [r for r in world.http_requests()
            if r["host"] == agent.provider and r["path"].split("?")[0] == path]


def _first_session(agent_name: str, screen: Screen, cli: OnHost, world, project: Path) -> str:
    """The first run of the project, typed as a person does; what the screen showed."""
    agent = AGENTS[agent_name]
    real_key = fake_key(agent)
    answer = f"the answer is {secrets.token_hex(4)}"
    world.reset_records()
    world.script_model([{"say": answer}])
    name = project_cage_name(agent.scaffold, project)
    screen.wait_for(rf"{agent.key_env} for {name} \(hidden")
    screen.paste(real_key + "\n")
    screen.wait_for(f"{agent.key_env} stored for {name}")
    assert real_key not in _command_lines(cli)  # never on a command line
    screen.wait_for(READY[agent_name])
    screen.submit("tell me the answer")
    screen.wait_for(answer)
    shown = screen.text()
    assert real_key not in shown  # never echoed
    for dialog in DIALOGS[agent_name]:
        assert dialog not in shown, dialog
    # the provider got the real key in every call; the cage held only the placeholder
    calls = _model_calls(world, agent)
    assert calls, "the model was never called"
    for call in calls:
        headers = {k.lower(): v for k, v in dict(call["headers"]).items()}
        assert all(headers.get(k) == v for k, v in agent.credential(real_key).items()), headers
    placeholder = cli("exec", name, "--", "printenv", agent.key_env).stdout.strip()
    assert placeholder.startswith(f"agentcage:secret:{agent.key_env}:")
    assert real_key not in cli("exec", name, "--", "sh", "-c",
                               "cat /proc/*/environ; grep -rs . ~").stdout
    # a person's session is no false alarm (a finding is written to watcher.json at once)
    assert watcher_findings(cli.state, name) == []
    return shown


@pytest.mark.netns
def test_claude_code_at_a_terminal_asks_once_and_remembers(on_host, world, terminal):
    assert installed(AGENTS["claude-code"]), "claude is not installed: run scripts/setup.sh"
    project = make_project(on_host.home / "work" / "cc")
    screen = terminal.run(project, "claude-code", "-s", "ANTHROPIC_API_KEY")
    _first_session("claude-code", screen, on_host, world, project)
    answer = screen.wait_for(r"the answer is \w+").group(0)
    screen.keys("C-c")
    screen.keys("C-c")  # twice: how a person ends a Claude Code session
    session = screen.wait_for(r"claude --resume ([0-9a-f-]{36})").group(1)
    assert screen.exit_code() == 0

    # the next run of the project: no key question, no dialog, the prompt at once
    again = terminal.run(project, "claude-code", "-s", "ANTHROPIC_API_KEY")
    again.wait_for(READY["claude-code"])
    shown = again.text()
    assert "(hidden" not in shown and "stored for" not in shown
    for dialog in DIALOGS["claude-code"]:
        assert dialog not in shown, dialog
    again.keys("C-c")
    again.keys("C-c")
    assert again.exit_code() == 0

    # and the first session is there to resume, with what was said in it
    resumed = terminal.run(project, "claude-code", "--", "claude", "--resume", session)
    resumed.wait_for(answer)
    resumed.wait_for(READY["claude-code"])
    resumed.keys("C-c")
    resumed.keys("C-c")
    assert resumed.exit_code() == 0


@pytest.mark.netns
def test_codex_at_a_terminal_asks_once_and_remembers(on_host, world, terminal):
    assert installed(AGENTS["codex"]), "codex is not installed: run scripts/setup.sh"
    project = make_project(on_host.home / "work" / "cx")
    screen = terminal.run(project, "codex", "-s", "OPENAI_API_KEY")
    _first_session("codex", screen, on_host, world, project)
    screen.keys("C-c")
    assert screen.exit_code() == 0
    # Codex's TUI wrote what it records to its own configuration, in the kept home
    name = project_cage_name("codex", project)
    config = on_host.state / "cages" / name / "volumes" / "home" / ".codex" / "config.toml"
    assert 'trust_level = "trusted"' in config.read_text()

    again = terminal.run(project, "codex", "-s", "OPENAI_API_KEY")
    again.wait_for(READY["codex"])
    shown = again.text()
    assert "(hidden" not in shown and "stored for" not in shown
    for dialog in DIALOGS["codex"]:
        assert dialog not in shown, dialog
    again.keys("C-c")
    assert again.exit_code() == 0


@pytest.mark.netns
def test_pi_at_a_terminal_asks_once_and_continues_its_session(on_host, world, terminal):
    assert installed(AGENTS["pi"]), "pi is not installed: run scripts/setup.sh"
    project = make_project(on_host.home / "work" / "pi")
    screen = terminal.run(project, "pi", "-s", "ANTHROPIC_API_KEY")
    _first_session("pi", screen, on_host, world, project)
    answer = screen.wait_for(r"the answer is \w+").group(0)
    screen.keys("C-d")  # how a person leaves pi, at an empty editor
    assert screen.exit_code() == 0
    # pi's session is in the kept home, for --continue
    name = project_cage_name("pi", project)
    sessions = on_host.state / "cages" / name / "volumes" / "home" / ".pi" / "agent" / "sessions"
    assert any(answer in p.read_text() for p in sessions.rglob("*.jsonl")), answer

    again = terminal.run(project, "pi", "-s", "ANTHROPIC_API_KEY")
    again.wait_for(READY["pi"])
    shown = again.text()
    assert "(hidden" not in shown and "stored for" not in shown
    for dialog in DIALOGS["pi"]:
        assert dialog not in shown, dialog
    again.keys("C-d")
    assert again.exit_code() == 0

    continued = terminal.run(project, "pi", "--", "pi", "--continue")
    continued.wait_for(answer)  # the first session, with what was said in it
    continued.keys("C-d")
    assert continued.exit_code() == 0


@pytest.mark.netns
def test_a_claude_subscription_token_is_a_bearer_toward_anthropic_only(on_host, world):
    """`-s CLAUDE_CODE_OAUTH_TOKEN` in place of the API key: Claude Code finds that one alone in
    the cage (no ANTHROPIC_API_KEY placeholder to prefer), and the provider gets the real token
    as a Bearer; toward any other host the placeholder is refused."""
    assert installed(AGENTS["claude-code"]), "claude is not installed: run scripts/setup.sh"
    token = "sk-ant-oat01-" + secrets.token_urlsafe(48)
    answer = f"subscribed {secrets.token_hex(4)}"
    world.reset_records()
    world.script_model([{"say": answer}])
    project = make_project(on_host.home / "work" / "oauth")
    name = project_cage_name("claude-code", project)
    ca = on_host.ca_path or world.ca_cert_path
    world_args = ["--trust-network", "10.200.0.0/16", "--upstream-ca", str(ca)]
    # another provider allowed for this run: the token's placeholder may still not go there
    r = on_host("run", "claude-code", "-s", "CLAUDE_CODE_OAUTH_TOKEN", "--project", str(project),
                "--allow", "api.openai.com", *world_args, "--", "sh", "-c",
                'echo "api-key:${ANTHROPIC_API_KEY:-none}"; claude -p "hello"; '
                'curl -sS -m 8 https://api.openai.com/v1/x '
                '-H "Authorization: Bearer $CLAUDE_CODE_OAUTH_TOKEN"',
                stdin=token + "\n", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("api-key:none\n") and answer in r.stdout, r.stdout
    refusal = json.loads(r.stdout.strip().splitlines()[-1])
    assert refusal["blocked"] is True and refusal["by"] == "secrets", refusal
    calls = _model_calls(world, AGENTS["claude-code"])
    assert calls
    for call in calls:
        headers = {k.lower(): v for k, v in dict(call["headers"]).items()}
        assert headers.get("authorization") == f"Bearer {token}" and "x-api-key" not in headers
    assert not [q for q in world.http_requests() if q["host"] != "api.anthropic.com"]
    assert token not in r.stdout + r.stderr
    assert on_host("destroy", "-y", name).returncode == 0
