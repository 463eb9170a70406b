"""`agentsec assert` against real sandboxes: absent vs present-denied, untested fails, exit 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

AGENTSEC = str(Path(sys.executable).parent / "agentsec")
# The probe arrives on stdin: a checkout may sit where uid 65534 cannot read it.
AS_NOBODY = "setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 -"


def run_assert(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTSEC, "assert", "--json", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def tree() -> Iterator[Path]:
    # pytest's tmp_path sits under a 0700 directory that uid 65534 cannot enter.
    tmp_path = Path(tempfile.mkdtemp(prefix="agentsec-assert-", dir="/tmp"))
    tmp_path.chmod(0o755)
    (tmp_path / "open.txt").write_text("x")
    (tmp_path / "open.txt").chmod(0o644)
    (tmp_path / "key.json").write_text("the answers")
    (tmp_path / "key.json").chmod(0o600)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "inside").write_text("y")
    locked.chmod(0o700)
    yield tmp_path
    shutil.rmtree(tmp_path)


def _document(proc: subprocess.CompletedProcess[str]) -> dict:
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "path-assertions" and doc["schema_version"] == 1
    return doc


def _by_path(proc: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    return {(r["path"], r["expectation"]): r for r in _document(proc)["results"]}


def test_present_denied_is_told_apart_from_absent(tree: Path):
    proc = run_assert(
        "--kind",
        "command",
        "--template",
        AS_NOBODY,
        "--not-readable",
        str(tree / "key.json"),
        "--not-readable",
        str(tree / "missing.json"),
        "--readable",
        str(tree / "open.txt"),
    )
    assert proc.returncode == 0, proc.stderr
    results = _by_path(proc)
    assert results[(str(tree / "key.json"), "not-readable")]["observed"] == "present, denied"
    assert results[(str(tree / "missing.json"), "not-readable")]["observed"] == "absent"
    assert results[(str(tree / "open.txt"), "readable")]["verdict"] == "pass"


def test_a_violated_expectation_exits_2(tree: Path):
    proc = run_assert("--kind", "local", "--not-readable", str(tree / "open.txt"))
    assert proc.returncode == 2
    assert _by_path(proc)[(str(tree / "open.txt"), "not-readable")]["verdict"] == "fail"


def test_an_expectation_the_probe_cannot_test_fails(tree: Path):
    hidden = tree / "locked" / "inside"
    proc = run_assert("--kind", "command", "--template", AS_NOBODY, "--not-exists", str(hidden))
    assert proc.returncode == 2
    result = _by_path(proc)[(str(hidden), "not-exists")]
    assert result["verdict"] == "untested" and "could not tell" in result["observed"]


def test_bwrap_hides_what_it_does_not_mount(tree: Path):
    proc = run_assert(
        "--kind",
        "bwrap",
        "--not-exists",
        str(tree / "key.json"),
        "--exists",
        "/etc",
        "--",
        "--ro-bind",
        "/usr",
        "/usr",
        "--ro-bind",
        "/etc",
        "/etc",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/bin",
        "/bin",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--unshare-all",
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_nothing_to_assert_is_an_error():
    proc = subprocess.run(
        [AGENTSEC, "assert", "--kind", "local"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
