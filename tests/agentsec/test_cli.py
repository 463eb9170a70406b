"""The agentsec command's contract: exit 0 ok, 1 error (one line, no traceback), 2 gate failed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agentsec import outputs

AGENTSEC = str(Path(sys.executable).parent / "agentsec")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENTSEC, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def _assert_one_line_error(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("agentsec: error:"), proc.stderr


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    path = tmp_path / "capture.json"
    leaky = outputs.with_data("identity", no_new_privs=False)
    path.write_text("some banner\n" + outputs.line(leaky) + "\n")
    return path


def test_score_writes_json_and_markdown(tmp_path: Path, capture: Path):
    proc = run(
        "score",
        str(capture),
        "--label",
        "cap",
        "--how",
        "by hand",
        "--out",
        "r",
        "--print-findings",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r" / "cap.json").read_text())
    assert report["target"] == {
        "kind": "captured",
        "how": "by hand",
        "engine": None,
        "image": None,
        "digest": None,
        "flags": [],
        "command": [],
        "preset": None,
    }
    assert report["summary"]["score"] == 3
    assert (tmp_path / "r" / "cap.md").read_text().startswith("# Blast radius: cap")
    assert "PRIV-005" in proc.stdout


@pytest.mark.parametrize(("budget", "code"), [("3", 0), ("2", 2), ("0", 2)])
def test_max_score_gate(tmp_path: Path, capture: Path, budget: str, code: int):
    proc = run(
        "score", str(capture), "--label", "cap", "--how", "h", "--max-score", budget, cwd=tmp_path
    )
    assert proc.returncode == code, proc.stderr
    assert (tmp_path / "reports" / "cap.json").exists()  # the report is written either way
    if code == 2:
        assert "gate failed" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "content", ["", "not json", '{"probe_format": 1, "probe_vers', json.dumps({"probe_format": 1})]
)
def test_bad_capture_is_one_line_and_writes_nothing(tmp_path: Path, content: str):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "keep.json").write_text("{}")
    proc = run("score", str(bad), "--label", "keep", "--how", "h", cwd=tmp_path)
    _assert_one_line_error(proc)
    assert (reports / "keep.json").read_text() == "{}"  # an earlier report is never clobbered
    assert sorted(p.name for p in reports.iterdir()) == ["keep.json"]


def test_missing_capture_file(tmp_path: Path):
    _assert_one_line_error(run("score", "nope.json", "--label", "x", "--how", "h", cwd=tmp_path))


@pytest.mark.parametrize("missing", ["--label", "--how"])
def test_label_and_how_are_required(tmp_path: Path, capture: Path, missing: str):
    args = {"--label": "x", "--how": "h"}
    del args[missing]
    flat = [item for pair in args.items() for item in pair]
    _assert_one_line_error(run("score", str(capture), *flat, cwd=tmp_path))


def test_version(tmp_path: Path):
    proc = run("--version", cwd=tmp_path)
    assert proc.returncode == 0 and "agentsec" in proc.stdout


def test_probe_measures_where_it_runs_and_writes_both_reports(tmp_path: Path):
    # In a fresh network namespace with no route: the real probe, the real command.
    proc = subprocess.run(
        [
            "unshare",
            "--net",
            "--",
            AGENTSEC,
            "probe",
            "--label",
            "here",
            "--how",
            "unshare --net as root",
            "--out",
            str(tmp_path),
            "--max-score",
            "100",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "here.json").read_text())
    assert (
        report["target"]["kind"] == "local" and report["target"]["how"] == "unshare --net as root"
    )
    assert report["summary"]["axes"]["network"]["state"] == "sealed"
    assert "NET-003" in {f["id"] for f in report["summary"]["findings"]}
    assert (tmp_path / "here.md").exists()
