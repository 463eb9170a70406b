"""`agentcage secret set|list|rm|rotate-placeholders` as real subprocesses on a running cage:
values only ever go in on stdin (a hidden prompt on a terminal), never come out, and a rotation
reaches the gateway at once."""

from __future__ import annotations

import json
import os
import secrets
import subprocess

import pytest

from tests.agentcage.test_cli import AGENTCAGE, agentcage, create_cage, home  # noqa: F401  (fixture)

pytestmark = pytest.mark.netns

RULES = """
secret_injection:
  - env: API_TOKEN
    inject_to: [api.example.test]
"""


def secret_set(root, name: str, key: str, value: bytes) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTCAGE_HOME": str(root / "home")}
    return subprocess.run([*AGENTCAGE, "secret", "set", name, key], input=value.decode(),
                          env=env, capture_output=True, text=True, timeout=90, cwd=root)


def test_secret_verbs_on_a_running_cage(home, net):  # noqa: F811
    value = "tok-" + secrets.token_hex(16)
    create_cage(home, net, "sec", ["api.example.test"], extra=RULES)
    r = secret_set(home, "sec", "API_TOKEN", value.encode() + b"\n")
    assert r.returncode == 0, r.stderr
    assert "reloaded" in r.stdout and value not in r.stdout + r.stderr
    # a secret no rule names could never be used: refused, with the fix, and not stored
    r = secret_set(home, "sec", "UNBOUND", b"x-" + secrets.token_hex(8).encode())
    assert r.returncode == 1 and "no secret_injection rule or relay for UNBOUND" in r.stderr
    assert r.stderr.count("\n") == 1 and "cage update" in r.stderr
    assert secret_set(home, "sec", "EMPTY", b"").returncode == 1  # an empty value is refused
    # a value no HTTP header can carry is refused before it is stored (the old value stays)
    r = secret_set(home, "sec", "API_TOKEN", b"line-one\nline-two")
    assert r.returncode == 1 and "line break" in r.stderr and "line-one" not in r.stderr
    for bad_name in ("../x", "a b", "K\x01X", "A\n"):
        r = secret_set(home, "sec", bad_name, b"v")
        assert r.returncode == 1 and "Traceback" not in r.stderr, (bad_name, r.stderr)

    listing = agentcage(home, "secret", "list", "sec", "--json")
    assert listing.returncode == 0 and value not in listing.stdout
    doc = json.loads(listing.stdout)
    by_name = {e["name"]: e for e in doc["secrets"]}
    assert by_name["API_TOKEN"]["inject_to"] == ["api.example.test"]
    assert "UNBOUND" not in by_name
    old = by_name["API_TOKEN"]["placeholder"]
    assert agentcage(home, "exec", "sec", "--", "printenv", "API_TOKEN").stdout.strip() == old
    assert "UNBOUND" not in agentcage(home, "exec", "sec", "--", "env").stdout  # no rule, no env

    r = agentcage(home, "secret", "rotate-placeholders", "sec", "API_TOKEN")
    assert r.returncode == 0 and "only the new placeholders" in r.stdout, r.stderr
    new = agentcage(home, "exec", "sec", "--", "printenv", "API_TOKEN").stdout.strip()
    assert new != old and new.startswith("agentcage:secret:API_TOKEN:") and new in r.stdout
    assert agentcage(home, "secret", "rotate-placeholders", "sec", "NOPE").returncode == 1
    # --json (all keys): the document names the old placeholder and the one now in force
    r = agentcage(home, "secret", "rotate-placeholders", "sec", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["tool"], doc["kind"], doc["cage"], doc["applied"]) == (
        "agentcage", "rotated-placeholders", "sec", True)
    (rotated,) = doc["rotated"]
    assert rotated["name"] == "API_TOKEN" and rotated["old"] == new and rotated["new"] != new
    now = agentcage(home, "exec", "sec", "--", "printenv", "API_TOKEN").stdout.strip()
    assert now == rotated["new"] and value not in r.stdout

    # the value set first is still the one in force: the refused ones changed nothing
    marker = secrets.token_hex(6)
    assert agentcage(home, "exec", "sec", "--", "sh", "-c",
                     "curl -sS -m 10 -H \"Authorization: Bearer $API_TOKEN\" "
                     f"https://api.example.test/{marker}").returncode == 0
    (seen,) = [r for r in net.http_requests() if marker in r["path"]]
    auth = {k.lower(): v for k, v in dict(seen["headers"]).items()}["authorization"]
    assert auth == f"Bearer {value}"
    assert agentcage(home, "secret", "rm", "sec", "API_TOKEN").returncode == 0
    assert agentcage(home, "secret", "rm", "sec", "API_TOKEN").returncode == 1
    assert json.loads(agentcage(home, "secret", "list", "sec", "--json").stdout)[
        "secrets"][0]["stored"] is False
    r = agentcage(home, "logs", "sec", "--json")
    assert value not in r.stdout
    assert agentcage(home, "destroy", "sec", "--yes").returncode == 0


def test_secret_set_on_a_terminal_prompts_without_echo(home, net):  # noqa: F811
    """On a real terminal (a pty that is the process's controlling tty) the value is read from a
    hidden prompt: the prompt shows, the typed value is never echoed, and it is stored."""
    import fcntl
    import pty
    import select
    import termios

    value = "typed-" + secrets.token_hex(12)
    create_cage(home, net, "tty", ["api.example.test"], extra=RULES.replace("API_TOKEN", "TYPED"))
    try:
        master, slave = pty.openpty()

        def controlling_tty() -> None:
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

        env = {**os.environ, "AGENTCAGE_HOME": str(home / "home")}
        proc = subprocess.Popen([*AGENTCAGE, "secret", "set", "tty", "TYPED"], stdin=slave,
                                stdout=slave, stderr=slave, env=env, cwd=home,
                                preexec_fn=controlling_tty)
        os.close(slave)
        seen = b""

        def read_until(needle: bytes | None, timeout: float = 60) -> None:
            nonlocal seen
            while needle is None or needle not in seen:
                ready, _, _ = select.select([master], [], [], timeout)
                if not ready:
                    raise AssertionError(f"no {needle!r} on the terminal: {seen!r}")
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the other end closed
                    return
                if not chunk:
                    return
                seen += chunk

        read_until(b"value of TYPED:")
        os.write(master, value.encode() + b"\n")
        read_until(None)
        assert proc.wait(timeout=60) == 0, seen
        os.close(master)
        assert value.encode() not in seen, "the typed value was echoed"
        listing = json.loads(agentcage(home, "secret", "list", "tty", "--json").stdout)
        (entry,) = [e for e in listing["secrets"] if e["name"] == "TYPED"]
        assert entry["stored"]
        placeholder = entry["placeholder"]
        r = agentcage(home, "exec", "tty", "--", "printenv", "TYPED")
        assert r.stdout.strip() == placeholder and value not in r.stdout
    finally:
        assert agentcage(home, "destroy", "tty", "--yes").returncode == 0
