"""Bad input to every entry point of `agentcage`, as a careless user or a hostile one gives it:
config files, arguments, secret names and values, and state files damaged on disk. Each case
gets one clear line on stderr and exit 1: never a traceback, never a hang, and never a change to
saved state (the state directory is compared byte for byte before and after)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from agentcage.backends import host
from agentcage.secrets.cage import gateway_staging_path
from agentcage.state import CageDir, StateStore
from tests.agentcage.conftest import cage_yaml, make_project
from tests.agentcage.test_cli import AGENTCAGE

TIMEOUT = 60  # a bound against hangs, not a performance figure


def run(home: Path, *args: str, stdin: bytes | None = None, cwd: Path | None = None):
    env = {**os.environ, "AGENTCAGE_HOME": str(home / "state")}
    return subprocess.run([*AGENTCAGE, *args], env=env, capture_output=True, timeout=TIMEOUT,
                          cwd=cwd or home, input=stdin if stdin is not None else b"")


def snapshot(root: Path) -> dict[str, str]:
    """Every file under the state root (but the lock and logs that grow by themselves, and the
    exec and command servers' directories: a server started by an earlier command makes its
    lock and log there in the background, and logs the clients it refuses)."""
    found = {}
    by_itself = (".lock", "gateway.log", "audit.jsonl", "gateway.policy.json",
                 "gateway.secrets.json")
    for path in sorted(root.rglob("*")):
        if path.relative_to(root).parts[0] in ("exec", "commands"):
            continue
        # not what the running gateway writes by itself (logs, its acknowledgements, and the
        # temporary file an acknowledgement passes through while it is written: seen here)
        name = path.name
        if name.startswith(".") and name.endswith(".tmp"):
            name = name[1:].rsplit(".", 2)[0]
        if path.is_file() and name not in by_itself:
            found[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def assert_one_line_error(r: subprocess.CompletedProcess[bytes], *needles: str) -> None:
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 1, (r.returncode, err, r.stdout)
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in err, err


@pytest.fixture(scope="module")
def world(net):
    """A running cage, `bad`, whose state the cases must not change."""
    home = Path(tempfile.mkdtemp(prefix="agentcage-bad-"))  # reachable by the cage's uid
    os.chmod(home, 0o755)
    project = make_project(home / "work")
    (home / "cage.yaml").write_text(cage_yaml(net, "bad", ["api.example.test"]))
    r = run(home, "cage", "create", "-c", str(home / "cage.yaml"), "--project", str(project))
    assert r.returncode == 0, r.stderr
    yield home
    run(home, "destroy", "-y", "bad")
    shutil.rmtree(home, ignore_errors=True)


NESTED = "name: a\nx: " + "[" * 20000 + "]" * 20000 + "\n"
BOMB = "name: a\nx:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  {c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True))

CONFIGS = {
    "utf16": ("name: a\n".encode("utf-16"), "not UTF-8"),
    "invalid-utf8": (b"name: a\xff\n", "not UTF-8"),
    "nested": (NESTED.encode(), "nested deeper"),
    "huge-int": (b"name: a\nrate_limit: {burst: " + b"9" * 5000 + b"}\n", "cannot be read"),
    "alias-bomb": (BOMB.encode(), "aliases"),
    "too-big": (b"name: a\n# " + b"x" * (2 << 20) + b"\n", "larger than"),
    "a-list": (b"- name: a\n", "expected a mapping"),
    "empty": (b"", "expected a mapping"),
    "binary": (bytes(range(256)), "not UTF-8"),
    "name-newline": (b'name: "a\\n"\n', "name"),
    "env-empty-key": (b"name: a\ncontainer: {env: {'': x}}\n", "not a variable name"),
    "env-equals-key": (b"name: a\ncontainer: {env: {'A=B': x}}\n", "not a variable name"),
    "escape-volume": (b"name: a\ncontainer: {volumes: ['/etc:/workspace:rw']}\n",
                      "host system directory"),
    "allow-without-mode": (b"name: a\ndomains: {allow: [a.example.com]}\n", "add mode"),
    "image": (b"name: a\ncontainer: {image: 'Node 22!'}\ndomains: {mode: allowlist}\n",
              "container.image"),
    "unknown-key": (b"name: a\nbogus: 1\n", "unknown key"),
    "port-off-loopback": (b"name: a\ncontainer: {ports: ['0.0.0.0:8080:80']}\n",
                          "loopback only"),
}


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_bad_config_files(world, case):
    content, needle = CONFIGS[case]
    path = world / f"{case}.yaml"
    path.write_bytes(content)
    before = snapshot(world / "state")
    r = run(world, "cage", "create", "-c", str(path), "--project", str(world / "work" / "project"))
    assert_one_line_error(r, needle)
    assert snapshot(world / "state") == before


ARGS = {
    "init-into-missing-dir": (["init", "x", "-o", "/nonexistent-dir/cage.yaml"], "cannot write"),
    "init-into-proc": (["init", "x", "-o", "/proc/cage.yaml"], "cannot write"),
    "init-bad-scaffold": (["init", "x", "--scaffold", "nope"], "does not exist"),
    "init-bad-name": (["init", "Bad Name"], "name"),
    "create-missing-file": (["cage", "create", "-c", "/nonexistent.yaml"], "cannot read"),
    "create-a-directory": (["cage", "create", "-c", "/tmp"], "is a directory"),
    "exec-missing-cage": (["exec", "nope", "--", "true"], "no cage named"),
    "exec-bad-name": (["exec", "../x", "--", "true"], "invalid"),
    "logs-missing-cage": (["logs", "nope"], "no cage named"),
    "destroy-missing-cage": (["destroy", "-y", "nope"], "no cage named"),
    "expiry-too-far": (["domain", "add", "bad", "x.example.com", "--expires-in",
                        "99999999999999d"], "expires-in"),
    "expiry-zero": (["domain", "add", "bad", "x.example.com", "--expires-in", "0s"],
                    "expires-in"),
    "expiry-words": (["domain", "add", "bad", "x.example.com", "--expires-in", "soon"],
                     "expires-in"),
    "domain-wildcard": (["domain", "add", "bad", "*"], "domain"),
    "domain-ip": (["domain", "add", "bad", "169.254.169.254"], "domain"),
    "domain-rm-absent": (["domain", "rm", "bad", "absent.example.com"], "not in the domain"),
    "har-into-missing-dir": (["cage", "har", "bad", "-o", "/nonexistent-dir/x.har"], ""),
    "verify-out-proc": (["verify", "bad", "--out", "/proc/x"], ""),
    "verify-missing-cage": (["verify", "nope"], "no cage named"),
    "update-missing-cage": (["cage", "update", "nope", "-c", "/nonexistent.yaml"], ""),
}


@pytest.mark.parametrize("case", sorted(ARGS))
def test_bad_arguments(world, case):
    args, needle = ARGS[case]
    before = snapshot(world / "state")
    r = run(world, *args)
    assert_one_line_error(r, *([needle] if needle else []))
    assert snapshot(world / "state") == before


SECRETS = {
    "dotdot-name": ("../x", b"v", "invalid secret name"),
    "space-name": ("a b", b"v", "invalid secret name"),
    "control-name": ("K\x01X", b"v", "invalid secret name"),
    "newline-name": ("A\n", b"v", "invalid secret name"),
    "empty-value": ("API_TOKEN", b"", "empty"),
    "multiline-value": ("API_TOKEN", b"one\ntwo", "line break"),
    "nul-value": ("API_TOKEN", b"a\x00b", "control character"),
    "no-rule": ("UNRULED", b"v", "no secret_injection rule"),
}


@pytest.mark.parametrize("case", sorted(SECRETS))
def test_bad_secrets(world, case):
    key, value, needle = SECRETS[case]
    before = snapshot(world / "state")
    r = run(world, "secret", "set", "bad", key, stdin=value)
    assert_one_line_error(r, needle)
    assert snapshot(world / "state") == before


DAMAGE = {
    "domains-is-a-list": ("domains.json", b"[]"),
    "domains-allow-string": ("domains.json", b'{"version": 1, "mode": "allowlist", "allow": "x"}'),
    "domains-expiry-words": ("domains.json", b'{"version": 1, "mode": "allowlist", "allow": '
                                             b'[{"pattern": "a.example.com", "expires_at": '
                                             b'"soon"}]}'),
    "domains-not-json": ("domains.json", b"{not json"),
    "meta-missing-field": ("meta.json", b'{"project": "/tmp"}'),
    "meta-not-json": ("meta.json", b"\x00\x01"),
    "config-corrupt": ("cage.yaml", b"name: [unclosed"),
}
COMMANDS = {  # what each damaged file breaks
    "domains.json": (["domain", "list", "bad"], ["domain", "add", "bad", "y.example.com"]),
    "meta.json": (["exec", "bad", "--", "true"], ["ls"]),
    "cage.yaml": (["secret", "list", "bad"], ["cage", "update", "bad", "-c", "cage.yaml"]),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_state_files(world, case):
    name, content = DAMAGE[case]
    path = world / "state" / "cages" / "bad" / name
    original = path.read_bytes()
    path.write_bytes(content)
    try:
        before = snapshot(world / "state")
        for args in COMMANDS[name]:
            r = run(world, *args)
            if args == ["ls"]:  # lists what it can, marks the rest
                assert r.returncode == 0 and b"broken" in r.stdout, r.stderr
                continue
            assert_one_line_error(r, name)
            assert snapshot(world / "state") == before, args
    finally:
        path.write_bytes(original)
    assert run(world, "exec", "bad", "--", "true").returncode == 0  # repaired: works again


@pytest.mark.parametrize("damage", ["truncated", "deleted", "not-an-object"])
def test_destroy_cleans_up_a_running_cage_whose_runtime_file_is_damaged(net, damage):
    home = Path(tempfile.mkdtemp(prefix="agentcage-wreck-"))  # reachable by the cage's uid
    try:
        _destroy_a_wrecked_cage(home, net, damage)
    finally:
        # also when the test fails: what destroy may have left, then the directory
        run(home, "destroy", "-y", "wreck")
        shutil.rmtree(home, ignore_errors=True)


def _destroy_a_wrecked_cage(home: Path, net, damage: str) -> None:
    os.chmod(home, 0o755)
    project = make_project(home / "work")
    (home / "cage.yaml").write_text(cage_yaml(net, "wreck", ["api.example.test"]))
    assert run(home, "cage", "create", "-c", str(home / "cage.yaml"), "--project",
               str(project)).returncode == 0
    runtime_path = home / "state" / "cages" / "wreck" / "runtime.json"
    runtime = json.loads(runtime_path.read_text())
    suffix = runtime["plan"]["suffix"]
    assert f"agc-{suffix}-gw" in os.listdir("/run/netns")  # control
    staged = gateway_staging_path(StateStore(home / "state").cage("wreck"))
    assert staged.exists()
    if damage == "truncated":
        runtime_path.write_text(runtime_path.read_text()[:20])
    elif damage == "deleted":
        runtime_path.unlink()
    else:
        runtime_path.write_text("[1, 2]")
    r = run(home, "destroy", "-y", "wreck")
    assert r.returncode == 0, r.stderr
    assert not [n for n in os.listdir("/run/netns") if suffix in n]  # both namespaces gone
    assert not host.alive(runtime["gateway_pid"])  # killed (a zombie awaiting its reaper is dead)
    assert not staged.exists()  # the staged secrets too
    cgroups = [Path(d) for d in runtime.get("cgroups", [])]
    assert cgroups and not any(d.exists() for d in cgroups)
    assert not (home / "state" / "cages" / "wreck").exists()


def test_a_project_the_cage_user_cannot_reach_is_refused_at_create(net, tmp_path):
    # tmp_path's parents are 0700 root: the cage's uid (the project's owner, 1000) cannot get
    # in. Before, the cage started and every command in it then failed in bwrap.
    project = make_project(tmp_path / "work")
    home = Path(tempfile.mkdtemp(prefix="agentcage-bad-"))
    try:
        (home / "cage.yaml").write_text(cage_yaml(net, "unreachable", []))
        r = run(home, "cage", "create", "-c", str(home / "cage.yaml"), "--project",
                str(project))
        assert_one_line_error(r, "host uid 1000", "project's owner", "container.host_user")
        assert not (home / "state" / "cages" / "unreachable" / "cage.yaml").exists()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_orphaned_cage_namespaces_and_cgroups_are_swept_and_live_ones_kept():
    from agentcage.backends import cgroups, orphans

    orphan, busy = "0rphan", "b0sy00"
    for suffix in (orphan, busy):
        for role in ("gw", "cg"):
            subprocess.run(["ip", "netns", "add", f"agc-{suffix}-{role}"], check=True)
    cgroup = cgroups.CageCgroup(cgroups.detect(), orphan)
    cgroup.create(cgroups.Limits(pids=64))
    sleeper = subprocess.Popen(["nsenter", f"--net=/run/netns/agc-{busy}-gw", "sleep", "60"])
    try:
        mine = {orphan, busy}.__contains__
        assert orphans.sweep(min_age=3600, only=mine) == []  # too young: maybe starting
        removed = orphans.sweep(min_age=0, only=mine)
        assert orphan in removed and f"cgroup {orphan}" in removed
        assert busy not in removed  # a process lives in it: some cage's
        names = os.listdir("/run/netns")
        assert not [n for n in names if orphan in n]
        assert f"agc-{busy}-gw" in names and f"agc-{busy}-cg" in names
        assert not any(d.exists() for d in cgroup.directories().values())
    finally:
        sleeper.kill()
        sleeper.wait()
        for role in ("gw", "cg"):
            for suffix in (orphan, busy):
                subprocess.run(["ip", "netns", "del", f"agc-{suffix}-{role}"],
                               capture_output=True)
        cgroup.destroy(grace=0)


def test_a_missing_command_in_the_cage_is_named_plainly(world):
    r = run(world, "exec", "bad", "--", "no-such-command-here", "x")
    err = r.stderr.decode()
    assert r.returncode == 127 and "no-such-command-here: not found" in err, err
    assert not err.startswith(("4:", "5:", "6:", "7:", "8:", "9:")), err  # not the proof's fd


def test_prune_stops_a_gateway_whose_cage_directory_was_deleted(net):
    home = Path(tempfile.mkdtemp(prefix="agentcage-stray-"))
    os.chmod(home, 0o755)
    project = make_project(home / "work")
    (home / "cage.yaml").write_text(cage_yaml(net, "stray", []))
    assert run(home, "cage", "create", "-c", str(home / "cage.yaml"), "--project",
               str(project)).returncode == 0
    state = home / "state" / "cages" / "stray"
    runtime = json.loads((state / "runtime.json").read_text())
    suffix, pid = runtime["plan"]["suffix"], runtime["gateway_pid"]
    staged = gateway_staging_path(CageDir(state)).parent
    assert staged.is_dir()  # the control: the gateway's staged secrets are there
    shutil.rmtree(home / "state")  # deleted by hand: no command can name this cage any more
    # what a deletion racing the gateway's own writes leaves: the directory, holding only the
    # gateway's heartbeat (no cage any command could name)
    state.mkdir(parents=True)
    (state / "gateway.heartbeat").write_text("")
    assert host.alive(pid)
    other = Path(tempfile.mkdtemp(prefix="agentcage-other-"))  # another user's state root
    try:
        r = run(other, "prune", "-y")
        assert r.returncode == 0 and suffix in r.stdout.decode(), r.stdout + r.stderr
        assert not host.alive(pid)
        assert not [n for n in os.listdir("/run/netns") if suffix in n]
        assert not staged.exists()  # the values go with it, not only the processes
    finally:
        shutil.rmtree(other, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
