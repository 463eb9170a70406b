"""The gateway container's entrypoint when what Kubernetes mounted is wrong: it ends with one
line and exit 1 before anything listens (the pod's agent then never starts: fail closed).
Run as the real command, on real files; the network side is test_pod_world.py."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from agentcage.config.load import load_config_text
from agentcage.kube import layout
from agentcage.kube.export import export
from agentcage.kube.sidecar import follow
from tests.agentcage.kube.test_export import CAGE

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def mounted(tmp_path):
    """The ConfigMap's files, an empty keys directory, and the other volumes (state in
    memory, as the exported pod has it)."""
    config = export(load_config_text(CAGE).spec(), "pod", base=Path("/")).exported.objects[0]
    (tmp_path / "config").mkdir()
    for key, text in config["data"].items():
        (tmp_path / "config" / key).write_text(text)
    for name in ("keys", "audit", "public"):
        (tmp_path / name).mkdir()
    state = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="agentcage-sidecar-test-"))
    try:
        yield tmp_path, state
    finally:
        subprocess.run(["rm", "-rf", str(state)], check=False)


def sidecar(root: Path, state: Path) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "agentcage.kube.sidecar", "--config", str(root / "config"),
            "--keys", str(root / "keys"), "--state", str(state), "--audit",
            str(root / "audit"), "--public", str(root / "public")]
    return subprocess.run(args, capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO / "src")})


def test_a_key_missing_from_the_secret_stops_the_gateway_with_one_line(mounted):
    root, state = mounted
    r = sidecar(root, state)
    assert r.returncode == 1
    (line,) = r.stderr.strip().splitlines()
    assert "has no API_KEY" in line and "kubectl create secret generic" in line
    assert not (state / layout.READY_FILE).exists()
    assert not (root / "public" / layout.CA_FILE).exists()  # the agent's side waits for it


def test_an_empty_key_and_a_state_volume_on_disk_are_refused(mounted, tmp_path):
    root, state = mounted
    (root / "keys" / "API_KEY").write_text("\n")
    r = sidecar(root, state)
    assert r.returncode == 1 and "has an empty API_KEY" in r.stderr
    (root / "keys" / "API_KEY").write_text("sk-value\n")
    on_disk = tmp_path / "state-on-disk"
    on_disk.mkdir()
    r = sidecar(root, on_disk)
    assert r.returncode == 1
    (line,) = r.stderr.strip().splitlines()
    assert "must be in memory" in line and "sk-value" not in line


def test_a_missing_configmap_is_said_as_such(mounted):
    root, state = mounted
    (root / "config" / layout.PLACEHOLDERS_KEY).unlink()
    r = sidecar(root, state)
    assert r.returncode == 1 and "is the cage's ConfigMap mounted?" in r.stderr


def test_the_audit_follower_copies_whole_lines_only(tmp_path):
    path = tmp_path / "audit.jsonl"
    path.write_text('{"a": 1}\n{"b"')
    out, stop = io.StringIO(), threading.Event()
    stop.set()  # one pass, as at the end
    follow(path, out, stop)
    assert out.getvalue() == '{"a": 1}\n'


def test_a_restarted_gateway_container_keeps_its_ca_and_is_not_ready_until_it_is(mounted):
    """The kubelet restarts a sidecar that ended, in the same pod: the agent's processes trust
    the CA they were given, so the second start publishes the same one."""
    from agentcage.kube.sidecar import prepare

    root, state = mounted
    (root / "keys" / "API_KEY").write_text("sk-value\n")
    args = (root / "config", root / "keys", state, root / "audit", root / "public",
            Path("/etc/ssl/certs/ca-certificates.crt"))
    prepare(*args)
    first = (root / "public" / layout.CA_FILE).read_bytes()
    (state / layout.READY_FILE).write_text("")  # the first run got ready
    prepare(*args)
    assert (root / "public" / layout.CA_FILE).read_bytes() == first
    assert not (state / layout.READY_FILE).exists()
