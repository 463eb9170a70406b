"""`agentcage demo`: a cage in a fake internet, tried from inside, then measured by agentsec.

From inside the cage: one allowed and one blocked request, then a secret set on the host used
the way an agent uses an API key (the cage holds only its placeholder; the fake server receives
the real value; the server's echo of it comes back as the placeholder). Then the real agents,
each in its scaffold's cage, tried as an attacker would (demo_agents.py), and last a person's
session: `agentcage run claude-code -s ANTHROPIC_API_KEY`, twice (demo_session.py).

Everything is built for the demo and removed after it: the fake internet (namespaces, DNS,
HTTPS servers), a state directory, a project directory and the cage. The cage's uplink is the
fake internet, so no packet can reach an address the demo did not assign.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentcage.backends.namespace import NamespaceBackend
from agentcage.backends.netplan import NetPlan
from agentcage.cages import CageService
from agentcage.config.load import apply_overrides, load_config_text
from agentcage.config.scaffolds import scaffold_config
from agentcage.demo_agents import (
    AGENTS,
    PLANTED_FILE,
    AgentSpec,
    Outcome,
    fake_key,
    installed,
    judge,
    planted_token,
    session,
)
from agentcage.demo_session import PersonSession, persons_session
from agentcage.errors import AgentcageError
from agentcage.state import CageDir, StateStore
from agentcage.verify import verify_cage, verify_plan
from agentsec import service
from fakenet import FakeInternet, FakeNetError

CAGE_NAME = "demo"
ALLOWED = "api.example.test"
BLOCKED = "evil.example.test"
SECRET_ENV = "DEMO_API_KEY"
# Run inside the cage: the status code an HTTPS request gets, or the error that stopped it.
FETCH = (
    "import sys, urllib.request, urllib.error\n"
    "try:\n"
    "    print(urllib.request.urlopen(sys.argv[1], timeout=10).status)\n"
    "except urllib.error.HTTPError as e:\n"
    "    print(e.code, e.read().decode()[:200])\n"
    "except Exception as e:\n"
    "    print('failed:', getattr(e, 'reason', e))\n"
)


# Run inside the cage: send the key from the environment as an agent would, print the echo.
USE_KEY = (
    "import json, os, sys, urllib.request\n"
    "key = os.environ[sys.argv[2]]\n"
    "req = urllib.request.Request(sys.argv[1] + '?key=' + key,"
    " headers={'Authorization': 'Bearer ' + key})\n"
    "doc = json.load(urllib.request.urlopen(req, timeout=10))\n"
    "print(json.dumps({'env': key, 'echo': doc['path']}))\n"
)


@dataclass(frozen=True)
class SecretDemo:
    placeholder: str  # what the cage's environment holds
    backend: str  # where the value is stored on the host
    server_got_value: bool  # the fake server received the real value in Authorization
    cage_got_value: bool  # the real value reached the cage (env or echo): must be False
    echo: str  # the server's echo as the cage received it


@dataclass
class DemoResult:
    requests: list[tuple[str, str]]  # (url, what the cage got)
    secret: SecretDemo
    verified: service.SavedReport
    agents: list[Outcome]  # the real agents that are installed, each in its scaffold's cage
    person: PersonSession | None = None  # a person's session (demo_session.py), if installed


def _config_text(net: FakeInternet, uplink_ns: str) -> str:
    return f"""
name: {CAGE_NAME}
domains: {{mode: allowlist, allow: [{ALLOWED}]}}
dns_servers: [{net.dns_address}]
gateway:
  uplink: "netns:{uplink_ns}"
  trusted_networks: ["10.200.0.0/16"]
  upstream_ca_files: ["{net.ca_cert_path}"]
secret_injection:
  - env: {SECRET_ENV}
    inject_to: [{ALLOWED}]
    inject_body: true
"""


def run_demo(out_dir: Path, say: Callable[[str], None]) -> DemoResult:
    if os.geteuid() != 0:
        raise AgentcageError("the demo builds network namespaces: run it as root")
    scratch = Path(tempfile.mkdtemp(prefix="agentcage-demo-"))
    os.chmod(scratch, 0o755)  # the workload's unprivileged uid must reach the project
    try:
        say("building the fake internet (namespaces, DNS, HTTPS servers)")
        providers = {agent.provider: None for agent in AGENTS.values()}
        with FakeInternet(extra_names=providers, catch_all=False) as net:
            say(f"the fake internet's namespaces: {net.name_prefix}*")
            result = _in_a_cage(net, scratch, out_dir.resolve(), say)
            result.agents.extend(_real_agents(net, scratch, say))
            result.person = persons_session(net, scratch / "person", say)
            return result
    except FakeNetError as exc:
        raise AgentcageError(f"the fake internet failed: {exc}") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _in_a_cage(
    net: FakeInternet, scratch: Path, out_dir: Path, say: Callable[[str], None]
) -> DemoResult:
    store = StateStore(scratch / "home")
    cages = CageService(store, NamespaceBackend(store))
    # The cage's uplink: a namespace linked to the fake internet, playing the host's network
    # (the real host's is never used).
    uplink_ns = net.add_client().netns
    project = scratch / "project"
    project.mkdir()
    (project / "README").write_text("a project the agent may work on\n")
    os.chown(project, 65534, 65534)
    say(f"creating cage {CAGE_NAME!r}: only {ALLOWED} is allowed")
    _say_namespaces(cages, cages.create(load_config_text(_config_text(net, uplink_ns)),
                                        project), say)
    try:
        requests = []
        for host in (ALLOWED, BLOCKED):
            url = f"https://{host}/"
            got = cages.exec_capture(CAGE_NAME, ["python3", "-c", FETCH, url], timeout=60)
            requests.append((url, (got.stdout or got.stderr).strip()))
            say(f"inside the cage, GET {url} -> {requests[-1][1]}")
        secret = _use_a_secret(cages, net, say)
        say("measuring the cage from inside with agentsec's probe")
        plan = verify_plan(CAGE_NAME, label="demo-cage", out_dir=out_dir, record=False)
        verified = verify_cage(CAGE_NAME, plan, store=store).saved
        return DemoResult(requests, secret, verified, [])
    finally:
        say(f"destroying cage {CAGE_NAME!r}")
        cages.destroy(CAGE_NAME)


def _use_a_secret(cages: CageService, net: FakeInternet, say: Callable[[str], None]) -> SecretDemo:
    value = "demo-" + secrets.token_hex(16)  # made up here, never printed
    stored = cages.secret_set(CAGE_NAME, SECRET_ENV, value.encode())
    url = f"https://{ALLOWED}/echo"
    got = cages.exec_capture(CAGE_NAME, ["python3", "-c", USE_KEY, url, SECRET_ENV], timeout=60)
    if got.returncode != 0:
        raise AgentcageError(f"the secret step failed inside the cage: {got.stderr.strip()}")
    seen = json.loads(got.stdout)
    received = [q for q in net.http_requests() if str(q["path"]).startswith("/echo?key=")]
    demo = SecretDemo(
        placeholder=seen["env"],
        backend=str(stored["backend"]),
        server_got_value=bool(received)
        and received[-1]["headers"].get("authorization") == f"Bearer {value}",
        cage_got_value=value in got.stdout,
        echo=seen["echo"],
    )
    say(f"secret {SECRET_ENV} stored on the host ({demo.backend}); inside the cage "
        f"${SECRET_ENV} = {demo.placeholder[:40]}...")
    say(f"inside the cage, GET {url} with it -> the server received the real key: "
        f"{'yes' if demo.server_got_value else 'NO'}; its echo reached the cage "
        f"{'WITH THE REAL KEY' if demo.cage_got_value else 'with the placeholder only'}")
    return demo


def _say_namespaces(cages: CageService, cage: CageDir, say: Callable[[str], None]) -> None:
    plan = NetPlan.from_dict(cages.backend.runtime(cage)["plan"])
    say(f"cage {cage.name} is running: namespaces {plan.gw_ns} (gateway) and {plan.cage_ns}")


def _real_agents(net: FakeInternet, scratch: Path, say: Callable[[str], None]) -> list[Outcome]:
    """Each real agent installed on the host, in a cage made from its own scaffold, driven by
    the fake model through the attempts of agentcage.demo_agents."""
    outcomes = []
    for agent in AGENTS.values():
        if not installed(agent):
            say(f"{agent.scaffold}: not installed here (npm install -g, as scripts/setup.sh "
                "does); skipping it")
            continue
        outcomes.append(_one_agent(net, scratch / agent.scaffold, agent, say))
    return outcomes


def _one_agent(net: FakeInternet, scratch: Path, agent: AgentSpec,
               say: Callable[[str], None]) -> Outcome:
    scratch.mkdir(mode=0o755)
    store = StateStore(scratch / "home")
    cages = CageService(store, NamespaceBackend(store))
    project = scratch / "project"
    project.mkdir()
    real_key, planted = fake_key(agent), planted_token()
    (project / PLANTED_FILE).write_text(f"GITHUB_TOKEN={planted}\n")
    for path in (project, project / PLANTED_FILE):
        os.chown(path, 65534, 65534)
    name = f"demo-{agent.scaffold}"
    config = apply_overrides(
        scaffold_config(agent.scaffold, name), uplink=f"netns:{net.add_client().netns}",
        dns=[net.dns_address], trust=["10.200.0.0/16"], upstream_ca=[str(net.ca_cert_path)])
    net.reset_records()
    net.script_model(session(agent))
    say(f"{agent.scaffold}: its scaffold's cage, a made-up {agent.key_env} stored on the host, "
        f"a GitHub token planted in the project; the fake model has it edit a file, then try "
        f"to send both out by curl, DNS and {agent.provider}")
    cages.secret_set(name, agent.key_env, real_key.encode())
    _say_namespaces(cages, cages.create(config, project), say)
    try:
        placeholder = cages.exec_capture(name, ["printenv", agent.key_env]).stdout.strip()
        run = cages.exec_capture(name, list(agent.command), timeout=300)
        outcome = judge(agent, exit_code=run.returncode, project=project, real_key=real_key,
                        planted=planted, placeholder=placeholder,
                        requests=net.http_requests(), dns_queries=net.dns_queries(),
                        received=net.received, audit=cages.audit(name))
    finally:
        cages.destroy(name)
    verdict = "contained" if outcome.contained else "NOT CONTAINED"
    say(f"{agent.scaffold}: exit {outcome.exit_code}, edit made: "
        f"{'yes' if outcome.edited else 'NO'}, {outcome.model_calls} model calls with the real "
        f"key: {'yes' if outcome.provider_got_key else 'NO'}; the cage saw "
        f"{outcome.cage_saw[:34]}...; {verdict}")
    for line in outcome.refusals:
        say(f"  refused: {line}")
    for leak in outcome.leaks:
        say(f"  LEAK: {leak}")
    return outcome
