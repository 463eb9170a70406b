"""The baseline gate: anything worse fails (exit 2), fixes pass with a hint, mismatches fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentsec import gate, reportfile, service
from agentsec.errors import ReportError
from agentsec.report import Target
from agentsec.untrusted import parse_probe_output
from tests.agentsec import outputs

AGENTSEC = str(Path(sys.executable).parent / "agentsec")


def _report(output: dict[str, Any], redact: bool = False) -> dict[str, Any]:
    probe = parse_probe_output(outputs.line(output))
    return service.score(
        probe, label="r", target=Target(kind="captured", how="h"), rc=0, redact=redact
    )


def _creds(*paths: str) -> dict[str, Any]:
    return outputs.with_data(
        "credentials",
        files=[
            {"path": p, "exists": True, "readable": True, "agent_login": False, "via": "home"}
            for p in paths
        ],
    )


def test_an_unchanged_run_passes():
    result = gate.compare(_report(_creds("~/.netrc")), _report(_creds("~/.netrc")))
    assert not result.failed
    assert gate.render_gate(result) == "no change against the baseline"


def test_a_new_finding_fails():
    result = gate.compare(_report(outputs.sealed()), _report(_creds("~/.netrc")))
    assert result.failed and [c.finding_id for c in result.new] == ["SEC-003"]


def test_widened_evidence_fails():
    result = gate.compare(_report(_creds("~/.netrc")), _report(_creds("~/.netrc", "~/.npmrc")))
    assert result.failed
    assert [c.finding_id for c in result.widened] == ["SEC-003"]
    assert "~/.npmrc" in result.widened[0].what


def test_a_severity_rise_fails():
    old = _report(
        outputs.with_data("filesystem", writable_dirs=[{"path": "/opt", "writable": True}])
    )
    new = _report(
        outputs.with_data(
            "filesystem",
            writable_dirs=[{"path": "/opt", "writable": True}, {"path": "/etc", "writable": True}],
        )
    )
    result = gate.compare(old, new)
    assert [c.finding_id for c in result.worse] == ["FS-001"]


def test_a_fixed_finding_passes_with_a_hint():
    result = gate.compare(_report(_creds("~/.netrc")), _report(outputs.sealed()))
    assert not result.failed
    assert [c.finding_id for c in result.fixed] == ["SEC-003"]
    assert "record a new baseline" in gate.render_gate(result)


def test_a_new_info_finding_is_noted_and_passes():
    old = _report(outputs.with_data("network", no_route=False))
    result = gate.compare(old, _report(outputs.sealed()))  # sealed has NET-003 (info)
    assert not result.failed
    assert [c.finding_id for c in result.noted] == ["NET-003"]


def test_an_axis_that_becomes_not_measured_fails():
    result = gate.compare(_report(outputs.sealed()), _report(outputs.failed("network")))
    assert result.failed
    assert [c.finding_id for c in result.unmeasured] == ["network"]


def test_a_probe_version_mismatch_fails():
    newer = outputs.sealed()
    newer["probe_version"] = "9.9.9"
    result = gate.compare(_report(outputs.sealed()), _report(newer))
    assert result.failed and "probe versions differ" in result.incompatible[0]


def test_a_redaction_mismatch_fails():
    result = gate.compare(_report(outputs.sealed()), _report(outputs.sealed(), redact=True))
    assert result.failed and "redacted" in result.incompatible[0]


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{",
        "[]",
        json.dumps({"tool": "agentsec"}),
        json.dumps({"tool": "other", "schema_version": 1}),
        json.dumps({"tool": "agentsec", "schema_version": 1, "summary": {"findings": [1]}}),
    ],
)
def test_corrupt_reports_are_report_errors(tmp_path: Path, content: str):
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(ReportError):
        reportfile.load_report(path)


def _save(tmp_path: Path, name: str, report: dict[str, Any]) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(report))
    return path


def test_diff_exit_codes(tmp_path: Path):
    accepted = _save(tmp_path, "accepted", _report(_creds("~/.netrc")))
    same = _save(tmp_path, "same", _report(_creds("~/.netrc")))
    worse = _save(tmp_path, "worse", _report(_creds("~/.netrc", "~/.npmrc")))
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"tool": "agentsec", "schema_')

    def diff(old: Path, new: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [AGENTSEC, "diff", str(old), str(new)], capture_output=True, text=True, timeout=60
        )

    assert diff(accepted, same).returncode == 0
    failing = diff(accepted, worse)
    assert failing.returncode == 2 and "~/.npmrc" in failing.stdout
    broken = diff(corrupt, same)
    assert broken.returncode == 1 and "Traceback" not in broken.stderr
    assert len(broken.stderr.strip().splitlines()) == 1


def test_score_with_a_baseline(tmp_path: Path):
    accepted = _save(tmp_path, "accepted", _report(outputs.sealed()))
    capture = tmp_path / "capture.json"
    capture.write_text(outputs.line(_creds("~/.netrc")))
    proc = subprocess.run(
        [
            AGENTSEC,
            "score",
            str(capture),
            "--label",
            "now",
            "--how",
            "h",
            "--baseline",
            str(accepted),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "SEC-003" in proc.stdout
    assert (tmp_path / "reports" / "now.json").exists()


def test_compare_shows_every_report(tmp_path: Path):
    first = _save(tmp_path, "a", {**_report(outputs.sealed()), "label": "sealed-run"})
    second = _save(tmp_path, "b", {**_report(_creds("~/.netrc")), "label": "leaky-run"})
    proc = subprocess.run(
        [AGENTSEC, "compare", str(first), str(second)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "200", "PATH": "/usr/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "sealed-run" in proc.stdout and "leaky-run" in proc.stdout
    assert "SEC-003" in proc.stdout
