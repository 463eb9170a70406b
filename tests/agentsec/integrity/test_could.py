"""`agentsec integrity could`, against real bubblewrap sandboxes: a project whose tests, test
configuration and CI workflow the sandbox leaves writable fails, path by path; the same project
bound read-only passes; an answer key the sandbox does not have is absent, one it can read
fails; bad input is one line."""

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
BASE = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
        "--die-with-parent"]


@pytest.fixture
def project() -> Iterator[Path]:
    # /tmp, not pytest's 0700 tmp_path: the sandbox sees the host's tree through its own binds
    root = Path(tempfile.mkdtemp(prefix="agentsec-could-", dir="/tmp"))
    root.chmod(0o755)
    for relative, text in {
        "tests/test_calc.py": "def test_add():\n    assert 1 + 1 == 2\n",
        "tests/unit/conftest.py": "",
        "conftest.py": "",
        "pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-q'\n",
        ".github/workflows/ci.yml": "jobs: {}\n",
        "src/calc.py": "def add(a, b):\n    return a + b\n",
        "answers/key.json": '{"add": 2}\n',
        "node_modules/x/conftest.py": "",  # never looked into
    }.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    yield root
    shutil.rmtree(root)


def could(project: Path, *args: str, flags: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENTSEC, "integrity", "could", str(project), "--kind", "bwrap",
                           "--json", *args, "--", *flags],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def _report(proc: subprocess.CompletedProcess[str]) -> dict:
    doc = json.loads(proc.stdout)
    assert doc["test"] == "verifier-integrity" and doc["schema_version"] == 1, proc.stderr
    return doc


def _results(proc: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    return {r["path"]: r for r in _report(proc)["could"]["results"]}


def _findings(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return {f["path"]: f["id"] for f in _report(proc)["findings"]}


def test_a_project_bound_writable_fails_on_each_verifier_path(project: Path):
    proc = could(project, flags=[*BASE, "--bind", str(project), str(project)])
    assert proc.returncode == 2, proc.stderr
    results = _results(proc)
    expected = {str(project / p) for p in ("tests", "conftest.py", "tests/unit/conftest.py",
                                           "pyproject.toml", ".github/workflows")}
    assert set(results) == expected, set(results) ^ expected
    for result in results.values():
        assert result["expectation"] == "not-writable" and result["verdict"] == "fail", result
        assert "writable" in result["observed"] and "not writable" not in result["observed"]
    assert "of the verifier's paths are open" in proc.stderr
    # each open path is a finding at its place in the project, scored like any other
    assert _findings(proc) == {p: "INT-018" for p in ("tests", "conftest.py", "pyproject.toml",
                                                     "tests/unit/conftest.py",
                                                     ".github/workflows")}
    assert _report(proc)["summary"]["score"] == 75


def test_the_same_project_read_only_passes(project: Path):
    proc = could(project, flags=BASE)  # / read-only: the project with it
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = _results(proc)
    assert len(results) == 5
    assert {r["verdict"] for r in results.values()} == {"pass"}
    assert all("not writable" in r["observed"] for r in results.values())
    assert _report(proc)["findings"] == [] and _report(proc)["summary"]["score"] == 0


def test_the_project_where_the_sandbox_sees_it(project: Path):
    flags = [*BASE, "--tmpfs", "/mnt", "--bind", str(project), "/mnt/workspace"]
    proc = could(project, "--inside", "/mnt/workspace", flags=flags)
    assert proc.returncode == 2
    results = _results(proc)
    tests = results["/mnt/workspace/tests"]
    assert tests["verdict"] == "fail" and "writable" in tests["observed"]
    assert all(path.startswith("/mnt/workspace/") for path in results)


def test_an_answer_key_absent_in_the_sandbox_passes_and_a_readable_one_fails(project: Path,
                                                                            tmp_path: Path):
    config = tmp_path / "verifier.json"
    config.write_text(json.dumps({"answers": ["answers/key.json"], "verifier": ["src"]}))
    hidden = could(project, "--config", str(config),
                   flags=[*BASE, "--tmpfs", str(project / "answers")])
    key = str(project / "answers" / "key.json")
    result = _results(hidden)[key]
    assert result["expectation"] == "not-readable" and result["verdict"] == "pass"
    assert result["observed"] == "absent"
    assert _results(hidden)[str(project / "src")]["verdict"] == "pass"  # read-only
    assert "answers/key.json" not in _findings(hidden)
    shown = could(project, "--config", str(config), flags=BASE)
    assert shown.returncode == 2
    assert _results(shown)[key]["verdict"] == "fail"  # there, and readable
    assert _findings(shown) == {"answers/key.json": "INT-019"}  # critical: the answers


@pytest.mark.parametrize(("text", "why"), [
    ("{", "not a JSON object"),
    ('{"answers": "answers/key.json"}', "must be a list of paths"),
    ('{"answers": ["../../etc/shadow"]}', "not a path inside the project"),
    ('{"grader": []}', "only the keys verifier and answers"),
])
def test_a_bad_config_is_one_line(project: Path, tmp_path: Path, text: str, why: str):
    config = tmp_path / "verifier.json"
    config.write_text(text)
    proc = could(project, "--config", str(config), flags=BASE)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and why in proc.stderr, proc.stderr


def test_a_project_with_no_verifier_is_told_so(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("nothing to test\n")
    proc = could(tmp_path, flags=BASE)
    assert proc.returncode == 1 and "no tests, test configuration or CI workflow" in proc.stderr
    relative = could(tmp_path, "--inside", "workspace", flags=BASE)
    assert relative.returncode == 1


def test_check_puts_both_halves_in_one_report(project: Path, tmp_path: Path):
    """The sandbox that could write the tests, and the change that did skip one: one report,
    one score, one SARIF, one gate."""
    from tests.agentsec.integrity.corpus import PY, write
    from tests.agentsec.integrity.test_cli import TAMPERED

    before, after = write(tmp_path / "before", PY), write(tmp_path / "after", TAMPERED)
    proc = subprocess.run(
        [AGENTSEC, "integrity", "check", "--diff", str(before), str(after), "--could",
         str(project), "--kind", "bwrap", "--json", "--sarif", str(tmp_path / "s.sarif"),
         "--max-score", "0", "--", *BASE, "--bind", str(project), str(project)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    doc = _report(proc)
    assert {"before", "after", "change", "could"} <= set(doc)
    assert sorted({f["id"] for f in doc["findings"]}) == ["INT-003", "INT-018"]
    assert doc["summary"]["score"] == 90 and doc["summary"]["finding_count"] == 6
    sarif = json.loads((tmp_path / "s.sarif").read_text())
    located = {r["ruleId"]: r["locations"][0]["physicalLocation"] for r in
               sarif["runs"][0]["results"]}
    assert located["INT-003"]["region"]["startLine"] == 11  # the change: at its line
    assert "region" not in located["INT-018"]  # the sandbox: at the path, no line
    proc = subprocess.run([AGENTSEC, "integrity", "check", "--json"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and "give --diff BEFORE AFTER, --could PROJECT" in proc.stderr


def test_a_baseline_accepts_a_sandbox_that_binds_the_project_writable(project: Path,
                                                                      tmp_path: Path):
    """Most agent sandboxes bind their project writable: once accepted, the same sandbox passes,
    and only what the baseline does not hold fails (here: the answers made readable)."""
    writable = [*BASE, "--bind", str(project), str(project)]
    first = could(project, "--out", str(tmp_path / "r"), "--label", "agent", flags=writable)
    assert first.returncode == 2  # could's own gate: any path open fails
    accepted = tmp_path / "r" / "integrity_agent.json"
    again = could(project, "--baseline", str(accepted), flags=writable)
    assert again.returncode == 0, again.stderr
    config = tmp_path / "verifier.json"
    config.write_text(json.dumps({"answers": ["answers/key.json"]}))
    more = could(project, "--baseline", str(accepted), "--config", str(config), flags=writable)
    assert more.returncode == 2 and "(INT-019)" in more.stderr, more.stderr
