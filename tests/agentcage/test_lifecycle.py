"""Living with a cage: secrets set before it exists, a changed cage.yaml applied without losing
secrets, CA, logs or grants, destroy that keeps secrets, and no destruction without consent."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path

import pytest

from tests.agentcage.conftest import cage_yaml, make_project
from tests.agentcage.test_cli import AGENTCAGE, agentcage, create_cage, home  # noqa: F401

RULE = """
secret_injection:
  - env: API_TOKEN
    inject_to: [api.example.test]
"""


def secret_set(root: Path, name: str, key: str, value: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTCAGE_HOME": str(root / "home")}
    return subprocess.run([*AGENTCAGE, "secret", "set", name, key], input=value, env=env,
                          capture_output=True, text=True, timeout=90, cwd=root)


def sent_authorization(net, marker: str) -> str:
    (seen,) = [r for r in net.http_requests() if marker in r["path"]]
    return {k.lower(): v for k, v in dict(seen["headers"]).items()}["authorization"]


def call_api(root: Path, name: str, net) -> str:
    """Make the cage send its API_TOKEN; what the server received."""
    marker = secrets.token_hex(6)
    r = agentcage(root, "exec", name, "--", "sh", "-c",
                  "curl -sS -m 10 -o /dev/null -H \"Authorization: Bearer $API_TOKEN\" "
                  f"https://api.example.test/{marker}")
    assert r.returncode == 0, r.stderr
    return sent_authorization(net, marker)


@pytest.mark.netns
def test_secret_set_before_create_then_update_and_destroy_keeping_secrets(home, net):  # noqa: F811
    value = "tok-" + secrets.token_hex(12)
    project = make_project(home / "work")
    config = home / "cage.yaml"
    config.write_text(cage_yaml(net, "life", ["api.example.test"], extra=RULE))

    # the order docs/cage.md allows: init, secret set, and only then cage create
    r = secret_set(home, "life", "API_TOKEN", value)
    assert r.returncode == 0 and "not created yet" in r.stdout, r.stderr
    listed = json.loads(agentcage(home, "secret", "list", "life", "--json").stdout)
    assert [e["name"] for e in listed["secrets"] if e["stored"]] == ["API_TOKEN"]
    # a secret is not a cage: the name is listed as keeping it, and nothing runs
    listing = json.loads(agentcage(home, "ls", "--json").stdout)["cages"]
    assert listing == [{"name": "life", "status": "kept", "lifecycle": "-",
                        "kept": ["secrets"]}]
    r = agentcage(home, "cage", "create", "-c", str(config), "--project", str(project))
    assert r.returncode == 0, r.stderr
    assert call_api(home, "life", net) == f"Bearer {value}"

    # a second create of the same name is refused and points at update
    r = agentcage(home, "cage", "create", "-c", str(config), "--project", str(project))
    assert r.returncode == 1 and "cage update" in r.stderr

    state = home / "home" / "cages" / "life"
    ca = (state / "ca" / "mitmproxy-ca-cert.pem").read_bytes()
    assert agentcage(home, "domain", "add", "life", "granted.example.test",
                     "--expires-in", "2h").returncode == 0
    audit_lines = len((state / "audit.jsonl").read_text().splitlines())
    placeholder = agentcage(home, "exec", "life", "--", "printenv", "API_TOKEN").stdout.strip()

    # domains only: applied live, no restart
    pid = json.loads((state / "runtime.json").read_text())["gateway_pid"]
    config.write_text(cage_yaml(net, "life", ["api.example.test", "allowed.example.test"],
                                extra=RULE))
    r = agentcage(home, "cage", "update", "life", "-c", str(config))
    assert r.returncode == 0 and "domains" in r.stdout and "live" in r.stdout, r.stdout
    assert json.loads((state / "runtime.json").read_text())["gateway_pid"] == pid
    ok = agentcage(home, "exec", "life", "--", "sh", "-c", "curl -sS -m 10 -o /dev/null -w "
                   "'%{http_code}' https://allowed.example.test/")
    assert ok.stdout == "200"
    patterns = {r["pattern"] for r in json.loads(
        agentcage(home, "domain", "list", "life", "--json").stdout)["rules"]}
    assert {"granted.example.test", "allowed.example.test"} <= patterns  # the grant survived

    # more than domains: restarted, and everything that was the cage's is still its own
    config.write_text(cage_yaml(net, "life", ["api.example.test"],
                                extra=RULE + "container: {env: {STAGE: two}}\n"))
    r = agentcage(home, "cage", "update", "life", "-c", str(config))
    assert r.returncode == 0 and "restarted" in r.stdout, r.stdout
    assert agentcage(home, "exec", "life", "--", "printenv", "STAGE").stdout.strip() == "two"
    assert (state / "ca" / "mitmproxy-ca-cert.pem").read_bytes() == ca
    assert len((state / "audit.jsonl").read_text().splitlines()) >= audit_lines
    assert agentcage(home, "exec", "life", "--", "printenv",
                     "API_TOKEN").stdout.strip() == placeholder
    assert call_api(home, "life", net) == f"Bearer {value}"
    assert agentcage(home, "cage", "update", "life", "-c", str(config)).stdout.strip() \
        == "cage life: no change"

    # destroy keeping the secrets; the next create of the name has them, placeholder and all
    assert agentcage(home, "destroy", "life", "-y", "--keep-secrets").returncode == 0
    assert not (state / "cage.yaml").exists() and (state / "secrets").is_dir()
    r = agentcage(home, "cage", "create", "-c", str(config), "--project", str(project))
    assert r.returncode == 0, r.stderr
    assert agentcage(home, "exec", "life", "--", "printenv",
                     "API_TOKEN").stdout.strip() == placeholder
    assert call_api(home, "life", net) == f"Bearer {value}"
    assert agentcage(home, "destroy", "life", "-y").returncode == 0
    assert not state.exists()


@pytest.mark.netns
def test_a_failed_create_keeps_secrets_set_before_it(home, net):  # noqa: F811
    config = home / "cage.yaml"
    config.write_text(cage_yaml(net, "early", ["api.example.test"], extra=RULE))
    assert secret_set(home, "early", "API_TOKEN", "tok-x").returncode == 0
    r = agentcage(home, "cage", "create", "-c", str(config), "--project",
                  str(home / "no-such-project"))
    assert r.returncode == 1
    state = home / "home" / "cages" / "early"
    assert sorted(p.name for p in state.iterdir() if not p.name.startswith(".")) == ["secrets"]


@pytest.mark.netns
def test_destroy_and_prune_need_consent(home, net):  # noqa: F811
    create_cage(home, net, "keep", [])
    env = {**os.environ, "AGENTCAGE_HOME": str(home / "home")}
    for args in (["destroy", "keep"], ["prune"]):
        # "n" piped in, as in `echo n | agentcage destroy keep`: no terminal, no consent
        r = subprocess.run([*AGENTCAGE, *args], input="n\n", env=env, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 1 and "add -y" in r.stderr, r.stderr
        r = subprocess.run([*AGENTCAGE, *args], input="y\n", env=env, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 1 and "add -y" in r.stderr, r.stderr
    assert "keep" in agentcage(home, "ls").stdout
    assert agentcage(home, "exec", "keep", "--", "true").returncode == 0  # untouched
    assert agentcage(home, "destroy", "keep", "-y").returncode == 0


VOLUME = """
container:
  volumes: [".:/workspace:rw", "home:/home/agent", "cache:/home/agent/.cache:rw"]
"""


@pytest.mark.netns
def test_a_cages_named_volumes_outlive_exec_stop_start_update_and_destroy_keep_state(
        home, net):  # noqa: F811
    project = make_project(home / "work")
    config = home / "cage.yaml"
    config.write_text(cage_yaml(net, "vols", [], extra=VOLUME))
    r = agentcage(home, "cage", "create", "-c", str(config), "--project", str(project))
    assert r.returncode == 0, r.stderr
    write = "echo one > ~/a; echo two > ~/.cache/b"
    read = "cat ~/a ~/.cache/b"
    assert agentcage(home, "exec", "vols", "--", "sh", "-c", write).returncode == 0
    assert agentcage(home, "exec", "vols", "--", "sh", "-c", read).stdout == "one\ntwo\n"
    assert agentcage(home, "restart", "vols").returncode == 0
    config.write_text(cage_yaml(net, "vols", ["api.example.test"], extra=VOLUME))
    assert agentcage(home, "cage", "update", "vols", "-c", str(config)).returncode == 0
    assert agentcage(home, "exec", "vols", "--", "sh", "-c", read).stdout == "one\ntwo\n"
    # the volumes are on the host, the workload's, and nowhere in the host's mount table
    state = home / "home" / "cages" / "vols"
    for volume in ("home", "cache"):
        st = (state / "volumes" / volume).stat()
        assert (st.st_uid, st.st_mode & 0o777) == (1000, 0o700), volume
    assert "agentcage-volumes" not in Path("/proc/self/mountinfo").read_text()
    # the cage sees its volumes, not the state directory they are kept in
    r = agentcage(home, "exec", "vols", "--", "sh", "-c", f"ls {state} 2>&1; grep -c "
                  "agentcage-volumes /proc/self/mountinfo")
    assert "No such file" in r.stdout and r.stdout.strip().endswith("0"), r.stdout

    assert agentcage(home, "destroy", "vols", "-y", "--keep-state").returncode == 0
    assert sorted(p.name for p in state.iterdir() if not p.name.startswith(".")) == ["volumes"]
    assert json.loads(agentcage(home, "ls", "--json").stdout)["cages"][0]["status"] == "kept"
    r = agentcage(home, "cage", "create", "-c", str(config), "--project", str(project))
    assert r.returncode == 0, r.stderr
    assert agentcage(home, "exec", "vols", "--", "sh", "-c", read).stdout == "one\ntwo\n"
    assert agentcage(home, "destroy", "vols", "-y").returncode == 0
    assert not state.exists()
