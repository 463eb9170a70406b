"""Real agents, end to end: Claude Code and Codex CLI (installed from npm by scripts/setup.sh),
each in a cage made from its shipped scaffold, unedited, on a host played by a namespace, with
the fake internet's model server speaking their real wire formats as api.anthropic.com and
api.openai.com. The scripted model has the agent's own shell tool edit a workspace file, then
try to send the host-side API key (the cage holds only its placeholder) and a key planted in
the workspace out: by curl to an unlisted host, by DNS, and inside a request to the allowed
API host. The agent must run, the provider must get the real key, and nothing must leak.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from agentcage.demo_agents import (
    AGENTS,
    EXFIL_HOST,
    PLANTED_FILE,
    AgentSpec,
    fake_key,
    installed,
    judge,
    planted_token,
    session,
)
from agentcage.gateway.auditmask import fingerprint
from tests.agentcage.conftest import make_project, needs_root, watcher_findings
from tests.agentcage.hosted import AsUser, OnHost, delegated_cgroups, open_to_users


@pytest.fixture(scope="module")
def world():
    needs_root()
    from fakenet import FakeInternet

    names = {"api.anthropic.com": None, "api.openai.com": None, "registry.npmjs.org": None}
    with FakeInternet(extra_names=names, catch_all=False) as net:
        yield net


@pytest.fixture
def on_host(world):
    from fakenet import FakeHost

    home = Path(tempfile.mkdtemp(prefix="agentcage-agents-"))
    os.chmod(home, 0o755)
    try:
        with FakeHost(world) as host:
            cli = OnHost(host, home)
            yield cli
            cli.destroy_all()
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def as_user(world):
    """The same host, the CLI run by an ordinary user (uid 1000): rootless cages, with the
    cgroup that root delegates to that user once."""
    from fakenet import FakeHost

    home = Path(tempfile.mkdtemp(prefix="agentcage-agents-"))
    os.chmod(home, 0o755)
    try:
        with delegated_cgroups(1000), FakeHost(world) as host:
            open_to_users(host)
            cli = AsUser(host, home, 1000, world)
            yield cli
            cli.destroy_all()
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(params=["root", "rootless"])
def user_cli(request):
    """The CLI as root and as an ordinary user, each on a host of its own."""
    return request.getfixturevalue("on_host" if request.param == "root" else "as_user")


def audit(cli: OnHost, name: str) -> list[dict]:
    path = cli.state / "cages" / name / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# Every agent's session, and pi's again with its other provider's key (its scaffold injects
# either; with only the OpenAI key stored, pi takes OpenAI's Responses API).
SESSIONS = {**AGENTS, "pi-openai": AgentSpec("pi", "pi", "OPENAI_API_KEY", "api.openai.com",
                                             ("pi", "-p", "tidy up the workspace"))}


@pytest.mark.netns
@pytest.mark.parametrize("which", sorted(SESSIONS))
def test_a_real_agent_works_in_its_scaffold_cage_and_leaks_nothing(user_cli, world, which):
    on_host = user_cli
    agent = SESSIONS[which]
    assert installed(agent), f"{agent.binary} is not installed: run scripts/setup.sh"
    name = f"real-{which}"
    real_key, planted = fake_key(agent), planted_token()
    world.reset_records()
    world.script_model(session(agent))

    # the README's flow, in its order, with the scaffold as shipped
    r = on_host("init", name, "--scaffold", agent.scaffold, "-o", f"{name}.yaml")
    assert r.returncode == 0, r.stderr
    r = on_host("secret", "set", name, agent.key_env, stdin=real_key + "\n")
    assert r.returncode == 0, r.stderr
    project = make_project(on_host.home / "work" / name)
    (project / PLANTED_FILE).write_text(f"GITHUB_TOKEN={planted}\n")
    os.chown(project / PLANTED_FILE, 1000, 1000)
    ca = getattr(on_host, "ca_path", None) or world.ca_cert_path
    r = on_host("cage", "create", "-c", f"{name}.yaml", "--project", str(project),
                "--trust-network", "10.200.0.0/16", "--upstream-ca", str(ca))
    assert r.returncode == 0, r.stderr

    placeholder = on_host("exec", name, "--", "printenv", agent.key_env).stdout.strip()
    assert placeholder.startswith(f"agentcage:secret:{agent.key_env}:")
    run = on_host("exec", name, "--", *agent.command, timeout=300)
    assert real_key not in run.stdout + run.stderr
    records = audit(on_host, name)
    outcome = judge(agent, exit_code=run.returncode, project=project, real_key=real_key,
                    planted=planted, placeholder=placeholder,
                    requests=world.http_requests(), dns_queries=world.dns_queries(),
                    received=world.received, audit=records)

    assert outcome.exit_code == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert outcome.edited  # (a) the agent ran: the edit its model asked for is on the host
    assert outcome.model_calls >= 5  # one call per step of the session
    assert outcome.provider_got_key  # the provider got the real key in every call
    assert outcome.leaks == []  # nothing reached the exfil host, DNS, or any server

    # the audit names each refusal
    blocked = [x for x in records if x.get("decision") == "blocked"]
    assert any(x.get("host") == EXFIL_HOST and x.get("direction") == "outbound" for x in blocked)
    dns = [x for x in blocked if x.get("direction") == "dns"]
    # the query that carried the planted token is named by its fingerprint: the audit says
    # what was tried without keeping the credential (gateway/auditmask.py)
    shown = fingerprint("github-token", planted.encode()).decode()
    assert any(x.get("host", "").startswith(shown) for x in dns), dns
    assert planted not in json.dumps(records)
    api = [x for x in blocked if x.get("host") == agent.provider and x.get("by") == "secrets"]
    assert api and any("/v1/files" in (x.get("path") or "") for x in api), blocked
    # what was refused was refused by the inspectors; the session itself is no false alarm
    assert watcher_findings(on_host.state, name) == []


def test_the_judge_sees_a_leak_mock_records():
    # The judge must be able to fail: fed records (made up here, no network) in which the
    # planted token and the real key did get out, it reports both and does not pass.
    agent = AGENTS["codex"]
    key, planted = fake_key(agent), planted_token()
    requests = [
        {"host": agent.provider, "path": "/v1/responses",
         "headers": {"authorization": f"Bearer {key}"}, "body": b"{}"},
        {"host": "other.example.test", "path": f"/x?p={planted}", "headers": {},
         "body": key.encode()},
    ]
    outcome = judge(agent, exit_code=0, project=Path("/nonexistent"), real_key=key,
                    planted=planted, placeholder="p", requests=requests, dns_queries=[],
                    received=lambda _: False, audit=[])
    assert not outcome.contained and len(outcome.leaks) == 2, outcome.leaks


@pytest.mark.netns
@pytest.mark.parametrize("scaffold", ["minimal", "claude-code", "codex", "pi"])
def test_verify_scores_a_started_scaffold_cage_at_most_8(on_host, world, scaffold):
    # the workspace bind (FS-003, medium: 8) is the only finding with points: the cage's own
    # init holds only the cage's environment, its limits are visible, nothing leaves
    name = f"v-{scaffold}"
    on_host.create_from_scaffold(world, name, scaffold)
    r = on_host("verify", name, "--max-score", "8", "--out", str(on_host.home / "reports"),
                timeout=180)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    report = json.loads((on_host.home / "reports" / f"cage-{name}.json").read_text())
    scored = {f["id"] for f in report["summary"]["findings"] if f["severity"] != "info"}
    assert scored == {"FS-003"}, report["summary"]["findings"]
    assert all(a["state"] != "not_measured" for a in report["summary"]["axes"].values())
    # the agent's settings in the cage's own home volume are seen, and told apart from the
    # host's (PERS-003): the note names them
    notes = {f["id"]: f["evidence"] for f in report["summary"]["findings"]}
    if scaffold == "codex":
        assert notes.get("PERS-006") == ["~/.codex/config.toml"], notes
    files = {f["path"]: f for f in
             report["probe"]["output"]["sections"]["credentials"]["data"]["files"]}
    if scaffold == "claude-code":  # seeded, read, and no login file: it holds no key
        assert files["~/.claude.json"]["readable"] is True
        assert files["~/.claude.json"]["holds_token"] is False


@pytest.mark.netns
def test_claude_code_asks_the_cage_for_a_registry_and_gets_only_what_may_be_granted(
        on_host, world):
    """The policy API as an agent meets it: the real Claude Code, told by its model to run
    curl with its own shell tool, lists what it may ask for, asks for the npm registry (which
    its scaffold's rules grant) and uses it, and asks for a host the ceiling does not name."""
    agent = AGENTS["claude-code"]
    assert installed(agent), f"{agent.binary} is not installed: run scripts/setup.sh"
    api = "https://agentcage.local/v1"
    ask = ("curl -sS -X POST " + api + "/allowlist/requests -d "
           "'{\"domain\": \"%s\", \"reason\": \"%s\"}' > /workspace/%s")
    world.reset_records()
    world.script_model([
        {"shell": f"curl -sS {api}/allowlist > /workspace/allowlist.json"},
        {"shell": ask % ("registry.npmjs.org", "install the dependencies of the project",
                         "asked.json")},
        {"shell": "curl -sS -o /dev/null -w '%{http_code}' "
                  "https://registry.npmjs.org/left-pad > /workspace/used.txt"},
        {"shell": ask % (EXFIL_HOST, "upload the results", "denied.json")},
        {"say": "done"},
    ])
    project = on_host.create_from_scaffold(world, "ask-cc", "claude-code")
    r = on_host("secret", "set", "ask-cc", agent.key_env, stdin=fake_key(agent) + "\n")
    assert r.returncode == 0, r.stderr
    run = on_host("exec", "ask-cc", "--", *agent.command, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    listed = json.loads((project / "allowlist.json").read_text())
    assert "registry.npmjs.org" in listed["requestable"]["grantable"]
    asked = json.loads((project / "asked.json").read_text())
    assert (asked["status"], asked["decided_by"]) == ("granted", "rules"), asked
    assert (project / "used.txt").read_text() == "200"
    assert any(q["host"] == "registry.npmjs.org" for q in world.http_requests())
    denied = json.loads((project / "denied.json").read_text())
    assert (denied["status"], denied["decided_by"]) == ("denied", "ceiling"), denied
    assert not [q for q in world.http_requests() if EXFIL_HOST in q["host"]]
