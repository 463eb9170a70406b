"""`agentcage export k8s NAME --with-secrets`, as a user runs it on a cage they made: the
stored key goes into the Secret's file (the owner's alone), under the placeholder the cage
already shows, and nothing of it anywhere else. The cage is on an image in the tests' podman
storage; it is created, never started (no network is involved)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.agentcage.conftest import make_project
from tests.integration.podman_world import IMAGE, podman_world

REPO = Path(__file__).resolve().parents[3]
VALUE = "sk-stored-" + os.urandom(8).hex()


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A directory the agent's uid can reach (pytest's own are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="agentcage-export-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_stored_cages_key_is_exported_only_into_its_secret(tmp_path):
    project = make_project(tmp_path)  # the agent's uid's
    (tmp_path / "cage.yaml").write_text(f"""
name: stored
container:
  image: {IMAGE}
  user: "1000:1000"
domains: {{mode: allowlist, allow: [api.example.test]}}
secret_injection:
  - env: API_KEY
    inject_to: [api.example.test]
""")
    with podman_world() as world:
        env = {**os.environ, **world.env, "AGENTCAGE_HOME": str(tmp_path / "state"),
               "PYTHONPATH": str(REPO / "src")}

        def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "agentcage.cli", *args], cwd=tmp_path,
                                  env=env, input=stdin, capture_output=True, text=True,
                                  timeout=300)

        r = cli("cage", "create", "-c", "cage.yaml", "--project", str(project), "--no-start")
        assert r.returncode == 0, r.stderr
        try:
            r = cli("secret", "set", "stored", "API_KEY", stdin=VALUE)
            assert r.returncode == 0, r.stderr
            shown = r.stdout.split("the cage sees ")[1].split()[0]
            r = cli("export", "k8s", "stored", "--with-secrets", "-o", "out", "--json")
            assert r.returncode == 0, r.stderr
            doc = json.loads(r.stdout)
            assert doc["keys_included"] is True
        finally:
            cli("destroy", "-y", "stored")
    out = tmp_path / "out"
    (secret_file,) = out.glob("*-secret-*.yaml")
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    secret = yaml.safe_load(secret_file.read_text())
    assert base64.b64decode(secret["data"]["API_KEY"]).decode() == VALUE
    config = yaml.safe_load(next(out.glob("*-configmap-*-gateway.yaml")).read_text())
    assert json.loads(config["data"]["placeholders.json"]) == {"API_KEY": shown}
    others = [p for p in out.rglob("*") if p.is_file() and p != secret_file]
    assert others and not any(VALUE in p.read_text() for p in others)
    encoded = base64.b64encode(VALUE.encode()).decode()
    assert not any(encoded in p.read_text() for p in others)
