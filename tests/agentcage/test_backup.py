"""`cage backup` and `cage restore`: a cage's state in one archive and back, through the CLI
as a user runs it; secrets only where they stay sealed; a damaged or hostile archive refused
in one line with nothing left behind. The cages are made without starting (`--no-start`):
a backup is of the state directory, no network is involved."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.agentcage.conftest import AGENT_UID, make_project, run_cli

CAGE_YAML = """\
name: kept
domains: {mode: allowlist, allow: [api.example]}
container:
  volumes: [".:/workspace:rw", "home:/home/agent"]
secret_injection:
  - {env: API_KEY, inject_to: [api.example]}
"""


@pytest.fixture
def home(user_home: Path) -> Path:
    return user_home


def cli(home: Path, *args: str, env: dict[str, str] | None = None,
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(home, *args, env=env, stdin=stdin)


def cage_dir(home: Path, name: str) -> Path:
    return home / "state" / "cages" / name


@pytest.fixture
def kept(home: Path) -> Path:
    """A cage with what a used one has: the agent's state in its named volume (owned by the
    workload's uid), an audit log, a CA, a secret."""
    project = make_project(home / "work")
    (home / "kept.yaml").write_text(CAGE_YAML)
    r = cli(home, "cage", "create", "-c", "kept.yaml", "--project", str(project),
            "--no-start")
    assert r.returncode == 0, r.stderr
    root = cage_dir(home, "kept")
    agent_home = root / "volumes" / "home"
    (agent_home / ".claude").mkdir(parents=True)
    (agent_home / ".claude" / "session.jsonl").write_text('{"said": "hello"}\n')
    for path in (agent_home, agent_home / ".claude", agent_home / ".claude" / "session.jsonl"):
        os.chown(path, AGENT_UID, AGENT_UID)
    (root / "audit.jsonl").write_text('{"decision": "allowed", "host": "api.example"}\n')
    (root / "ca").mkdir(mode=0o700)
    (root / "ca" / "mitmproxy-ca.pem").write_text("the cage's CA key and certificate\n")
    r = cli(home, "secret", "set", "kept", "API_KEY", stdin="s3cret-value\n")
    assert r.returncode == 0, r.stderr
    return root


def test_a_backup_restores_the_same_cage_and_leaves_its_secrets_out(home, kept):
    archive = home / "kept.tar.gz"
    r = cli(home, "cage", "backup", "kept", "-o", str(archive))
    assert r.returncode == 0, r.stderr
    assert "secrets not included (API_KEY): set them again" in r.stdout, r.stdout
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600  # it holds the CA key
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        assert not any("secrets" in n.split("/") for n in names)  # no store, no key
        assert "s3cret-value" not in json.dumps(names)
    raw = subprocess.run(["sh", "-c", f"zcat {archive}"], capture_output=True).stdout
    assert b"s3cret-value" not in raw

    before = {p.relative_to(kept): p.read_bytes() for p in kept.rglob("*") if p.is_file()
              and p.parts[len(kept.parts)] in ("cage.yaml", "volumes", "audit.jsonl", "ca",
                                               "domains.json", "meta.json")}
    assert cli(home, "destroy", "-y", "kept").returncode == 0
    assert not kept.exists()
    r = cli(home, "cage", "restore", str(archive))
    assert r.returncode == 0, r.stderr
    assert "cage kept: restored (stopped" in r.stdout and "secret set kept KEY" in r.stdout
    after = {p.relative_to(kept): p.read_bytes() for p in kept.rglob("*") if p.is_file()}
    assert all(after.get(k) == v for k, v in before.items()), set(before) - set(after)
    session = kept / "volumes" / "home" / ".claude" / "session.jsonl"
    assert session.stat().st_uid == AGENT_UID  # the agent can still write its own state
    assert stat.S_IMODE(kept.stat().st_mode) == 0o700
    listed = cli(home, "ls").stdout
    assert any(line.split()[::2] == ["stopped", "kept"] for line in listed.splitlines()), listed

    # again, beside it, under another name: its configuration names the new cage
    r = cli(home, "cage", "restore", str(archive), "--name", "copy")
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load((cage_dir(home, "copy") / "cage.yaml").read_text())
    assert doc["name"] == "copy"
    source = json.loads((cage_dir(home, "copy") / "cage.source.json").read_text())
    assert "name: copy\n" in source["text"]
    r = cli(home, "cage", "restore", str(archive))
    assert r.returncode == 1 and "'kept' is in use" in r.stderr


def test_secrets_go_in_only_sealed(home, kept):
    # the encrypted-file store's key lies beside it: taking it would make the archive readable
    r = cli(home, "cage", "backup", "kept", "-o", str(home / "s.tar.gz"), "--with-secrets")
    assert r.returncode == 1 and "set them again after restore" in r.stderr
    assert not (home / "s.tar.gz").exists()
    # systemd-creds' files are sealed by this machine's key: they go in, said so. (The store
    # here is a directory laid out as that backend lays it out: systemd-creds cannot seal on
    # this machine, which has no systemd.)
    shutil.rmtree(kept / "secrets")
    (kept / "secrets").mkdir(mode=0o700)
    (kept / "secrets" / "API_KEY.cred").write_bytes(b"sealed ciphertext")
    r = cli(home, "cage", "backup", "kept", "-o", str(home / "s.tar.gz"), "--with-secrets",
            "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["secrets"]["included"] is True and doc["secrets"]["keys"] == ["API_KEY"]
    assert "this machine only" in doc["secrets"]["sealed_by"]
    with tarfile.open(home / "s.tar.gz") as tar:
        assert "cage/secrets/API_KEY.cred" in tar.getnames()


def _archive(home: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    path = home / "hostile.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        manifest = json.dumps({"format": "agentcage-cage-backup", "version": 1,
                               "name": "evil"}).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data else None)
    return path


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name: str, target: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info, b""


@pytest.mark.parametrize(("members", "says"), [
    ([_file("cage/cage.yaml", b"{}"), _file("cage/../../escaped")], "leaves the backup"),
    ([_file("/etc/evil")], "leaves the backup"),
    ([_file("cage/cage.yaml", b"{}"), _link("cage/volumes/home/x", "/etc/shadow")],
     "not a file or a directory"),
    ([_file("elsewhere/cage.yaml")], "outside cage/"),
    ([_file("cage/meta.json")], "holds no cage.yaml"),
])
def test_a_hostile_archive_is_refused_and_leaves_nothing(home, members, says):
    r = cli(home, "cage", "restore", str(_archive(home, members)))
    assert r.returncode == 1, r.stdout
    [line] = r.stderr.strip().splitlines()
    assert says in line, line
    assert not cage_dir(home, "evil").exists()
    cages = home / "state" / "cages"
    assert not cages.exists() or not list(cages.iterdir())  # no staging left either
    assert not (home / "escaped").exists()


def test_a_truncated_or_foreign_archive_is_refused_in_one_line(home, kept):
    archive = home / "kept.tar.gz"
    assert cli(home, "cage", "backup", "kept", "-o", str(archive)).returncode == 0
    truncated = home / "truncated.tar.gz"
    truncated.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    foreign = home / "foreign.tar.gz"
    with tarfile.open(foreign, "w:gz") as tar:
        tar.addfile(*(lambda i, d: (i, io.BytesIO(d)))(*_file("README", b"hello")))
    for path, says in ((truncated, "not a readable cage backup"),
                       (foreign, "outside cage/"),
                       (home / "missing.tar.gz", "not a readable cage backup")):
        r = cli(home, "cage", "restore", str(path), "--name", "other")
        assert r.returncode == 1, r.stdout
        [line] = r.stderr.strip().splitlines()
        assert says in line and "Traceback" not in r.stderr, line
        assert not cage_dir(home, "other").exists()
    r = cli(home, "cage", "restore", str(archive), "--name", "Not A Name")
    assert r.returncode == 1 and "invalid" in r.stderr
    r = cli(home, "cage", "backup", "nope", "-o", str(home / "x.tar.gz"))
    assert r.returncode == 1 and "no cage named 'nope'" in r.stderr
