"""The demo's last step, "a person's session": `agentcage run claude-code -s ANTHROPIC_API_KEY`
as a developer starts it, in its non-interactive form (the key on stdin instead of a hidden
prompt, `claude -p` instead of the TUI), through the real command line, twice in one project.

The first run asks for the key (stdin) and stores it for the project; Claude Code answers.
The second run asks nothing and resumes the first session (`claude -p --resume ID`): the
model is sent the first question again, which it could only be if the session was kept. The
provider gets the real key in every call; the cage holds only its placeholder.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcage.demo_agents import AGENTS, fake_key, installed
from agentcage.runs import project_cage_name

QUESTION = "what does this project do?"
AGAIN = "and what did I ask you before?"


@dataclass
class PersonSession:
    asked_once: bool  # the first run asked for the key, the second did not
    answered: bool  # Claude Code printed the model's answer, both times
    resumed: bool  # the second run's model call carried the first session
    provider_got_key: bool  # every model call carried the real key
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.asked_once and self.answered and self.resumed and self.provider_got_key
                and not self.problems)


def persons_session(net: Any, scratch: Path, say: Callable[[str], None]) -> PersonSession | None:
    """Two runs of Claude Code in one project; None when Claude Code is not installed."""
    agent = AGENTS["claude-code"]
    if not installed(agent):
        say("a person's session: Claude Code is not installed here; skipping it")
        return None
    scratch.mkdir(mode=0o755)
    project = scratch / "project"
    project.mkdir()
    os.chown(project, 65534, 65534)
    real_key, answer = fake_key(agent), f"it is a demo ({secrets.token_hex(3)})"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
           "AGENTCAGE_HOME": str(scratch / "home")}
    world = ["--uplink", f"netns:{net.add_client().netns}", "--dns", net.dns_address,
             "--trust-network", "10.200.0.0/16", "--upstream-ca", str(net.ca_cert_path)]
    name = project_cage_name("claude-code", project)

    def run(stdin: str, *claude: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agentcage.cli", "run", "claude-code", "-s",
                               agent.key_env, "--project", str(project), *world, "--",
                               "claude", "-p", *claude, "--output-format", "json"],
                              input=stdin, env=env, capture_output=True, text=True,
                              timeout=300, cwd=scratch)

    net.reset_records()
    net.script_model([{"say": answer}])
    say(f"a person's session: `agentcage run claude-code -s {agent.key_env}` in a project, "
        "the key typed once (here: on stdin), then a second run that resumes the first")
    first = run(real_key + "\n", QUESTION)
    session = _reply(first)
    asked = f"{agent.key_env} stored for {name}" in first.stderr
    second = run("", "--resume", str(session.get("session_id", "")), AGAIN)
    again = _reply(second)
    calls = [q for q in net.http_requests() if q["host"] == agent.provider
             and q["path"].split("?")[0] == "/v1/messages"]
    outcome = PersonSession(
        asked_once=asked and "stored for" not in second.stderr,
        answered=session.get("result") == answer and again.get("result") == answer,
        resumed=any(QUESTION in bytes(q["body"]).decode(errors="replace")
                    and AGAIN in bytes(q["body"]).decode(errors="replace") for q in calls),
        provider_got_key=bool(calls) and all(
            dict(q["headers"]).get("x-api-key") == real_key for q in calls))
    for label, r in (("first run", first), ("second run", second)):
        if r.returncode != 0:
            outcome.problems.append(f"{label}: exit {r.returncode}: "
                                    f"{(r.stderr.strip().splitlines() or [''])[-1][:160]}")
        if real_key in r.stdout + r.stderr:
            outcome.problems.append(f"{label}: the real key was printed")
    subprocess.run([sys.executable, "-m", "agentcage.cli", "destroy", "-y", name], env=env,
                   capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    say(f"a person's session: asked for the key once: {_yes(outcome.asked_once)}; Claude Code "
        f"answered: {_yes(outcome.answered)}; the second run resumed the first session: "
        f"{_yes(outcome.resumed)}; {len(calls)} model calls with the real key: "
        f"{_yes(outcome.provider_got_key)}")
    for problem in outcome.problems:
        say(f"  PROBLEM: {problem}")
    return outcome


def _reply(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """`claude -p --output-format json`'s document (its last line), or {}."""
    for line in reversed(r.stdout.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return {}


def _yes(value: bool) -> str:
    return "yes" if value else "NO"
