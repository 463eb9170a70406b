"""`agentsec integrity diff` in CI: SARIF that GitHub takes (valid SARIF 2.1.0, each finding at
its file and line), a baseline that accepts the findings someone has looked at and fails on any
other (refused in one line when it is not an integrity report), and the shipped workflow's step
run as GitHub runs it, on a pull request in a real git repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.agentsec.integrity.corpus import PY, PY_TESTS, py, sub, write
from tests.agentsec.integrity.test_cli import TAMPERED, agentsec, assert_one_line_error, trees
from tests.agentsec.test_formats import _sarif_validator

EXAMPLE = Path(__file__).parents[3] / "examples" / "github" / "verifier-integrity.yml"
# Two more ways past the tests, on top of the skip the tampered tree already has.
WORSE = py(sub(sub(PY_TESTS, "def test_mul", "@pytest.mark.skip\ndef test_mul"),
               "def test_add", "@pytest.mark.xfail\ndef test_add"))


def test_sarif_is_valid_and_points_at_the_line(tmp_path: Path):
    before, after = trees(tmp_path, PY, TAMPERED)
    proc = agentsec(before, after, "--sarif", "a.sarif", "--label", "run-1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    sarif = json.loads((tmp_path / "a.sarif").read_text())
    _sarif_validator().validate(sarif)
    (run,) = sarif["runs"]
    (result,) = run["results"]
    assert result["ruleId"] == "INT-003" and result["level"] == "error"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "tests/test_calc.py"
    assert location["region"]["startLine"] == 11
    (rule,) = run["tool"]["driver"]["rules"]
    assert rule["id"] == "INT-003" and rule["properties"]["security-severity"] == "8.0"
    assert run["automationDetails"]["id"] == "agentsec-integrity/run-1/"


def test_an_honest_change_writes_sarif_with_no_result(tmp_path: Path):
    before, after = trees(tmp_path, PY, py(sub(PY_TESTS, "def test_mul():", "def test_times():")))
    assert agentsec(before, after, "--sarif", "a.sarif", cwd=tmp_path).returncode == 0
    sarif = json.loads((tmp_path / "a.sarif").read_text())
    _sarif_validator().validate(sarif)
    assert sarif["runs"][0]["results"] == []


def test_a_baseline_accepts_what_it_holds_and_fails_on_anything_new(tmp_path: Path):
    before, after = trees(tmp_path, PY, TAMPERED)
    accepted = agentsec(before, after, "--json", cwd=tmp_path)
    (tmp_path / "accepted.json").write_text(accepted.stdout)
    same = agentsec(before, after, "--baseline", "accepted.json", cwd=tmp_path)
    assert same.returncode == 0, same.stderr  # the finding it holds is accepted
    worse_dir = tmp_path / "worse"
    _, worse = trees(worse_dir, PY, WORSE)
    proc = agentsec(before, worse, "--baseline", "accepted.json", "--sarif", "w.sarif",
                    cwd=tmp_path)
    assert proc.returncode == 2
    assert "1 finding the baseline does not hold (INT-003)" in proc.stderr, proc.stderr
    assert (tmp_path / "w.sarif").exists()  # written before the gate


@pytest.mark.parametrize(("text", "needle"), [
    ('{"tool": "agentsec", "test": "sandbox-blast-radius", "schema_version": 1}',
     "b.json is a blast-radius report, not a verifier-integrity report"),
    ('{"tool": "agentsec", "test": "verifier-integrity", "schema_version": 2, "findings": []}',
     "schema_version 2"),
    ('{"tool": "agentsec", "test": "verifier-integrity", "schema_version": 1, "findings": [1]}',
     "b.json: tool_version: missing"),
    (json.dumps({"tool": "agentsec", "test": "verifier-integrity", "schema_version": 1,
                 "tool_version": "0", "generated_at": "2026-01-01T00:00:00Z", "label": "x",
                 "summary": {"score": 0, "raw_score": 0, "finding_count": 1,
                             "findings_omitted": 0, "by_severity": {
                                 "critical": 0, "high": 0, "medium": 0, "low": 0, "info": 0}},
                 "could": {"project": "p", "inside": "p", "kind": "bwrap",
                           "probe_version": None, "results": []},
                 "findings": [1]}),
     "b.json: findings[0]: expected an object, got 1"),
    ('{"tool": "agentsec", "test": "verifier-integrity", "schema_version": 1, "label": "x", '
     '"summary": {}, "findings": []}', "b.json: tool_version: missing"),
    ('{"tool": "agentsec", "test": "verifier-integrity", "schema_version": 1, "tool_version": '
     '"0", "generated_at": "2026-01-01T00:00:00Z", "label": "x", "summary": {"score": 15, '
     '"raw_score": 15, "finding_count": 0, "findings_omitted": 0, "by_severity": {"critical": 0,'
     ' "high": 0, "medium": 0, "low": 0, "info": 0}}, "could": {"project": "p", "inside": "p",'
     ' "kind": "bwrap", "probe_version": null, "results": []}, "findings": []}',
     "summary.raw_score: 15, but the findings' weights sum to 0"),
    ('{"tool": "agentsec", "test": "verifier-integrity"', "not valid JSON"),
])
def test_a_bad_baseline_is_one_line_and_costs_no_run(tmp_path: Path, text: str, needle: str):
    before, after = trees(tmp_path, PY, TAMPERED)
    (tmp_path / "b.json").write_text(text)
    proc = agentsec(before, after, "--baseline", "b.json", "--sarif", "a.sarif", cwd=tmp_path)
    assert_one_line_error(proc, needle)
    assert not (tmp_path / "a.sarif").exists()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True, timeout=60)


def test_the_shipped_workflow_step_gates_a_tampered_pull_request(tmp_path: Path):
    workflow = yaml.safe_load(EXAMPLE.read_text())
    steps = workflow["jobs"]["integrity"]["steps"]
    (step,) = [s for s in steps if "agentsec integrity diff" in s.get("run", "")]
    assert any(s.get("uses", "").startswith("github/codeql-action/upload-sarif") and
               s["with"]["sarif_file"] == "integrity.sarif" for s in steps)
    repo = tmp_path / "repo"
    write(repo, PY)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    _git(repo, "checkout", "-qb", "agent")
    write(repo, TAMPERED)
    _git(repo, "commit", "-qam", "the agent's change")
    # the step's own script, with what GitHub would put in its environment
    env = {**os.environ, "BASE": "main", "PR": "7",
           "BASELINE": ".github/agentsec-integrity-accepted.json",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}

    def run_step() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=120)

    summary = tmp_path / "summary.md"
    env["GITHUB_STEP_SUMMARY"] = str(summary)
    first = run_step()
    assert first.returncode == 2, first.stderr  # --max-score 0: any finding fails the job
    _sarif_validator().validate(json.loads((repo / "integrity.sarif").read_text()))
    assert "INT-003" in summary.read_text() and "### agentsec integrity: pr-7" in \
        summary.read_text()
    junit = ET.parse(repo / "integrity.xml").getroot()
    assert junit.get("failures") == "2"  # INT-003, and the gate
    report = repo / "integrity-reports" / "integrity_pr-7.json"
    assert json.loads(report.read_text())["summary"]["score"] == 15
    # someone looks at it and accepts it: the same change passes, against the baseline
    (repo / ".github").mkdir()
    shutil.copy(report, repo / ".github" / "agentsec-integrity-accepted.json")
    again = run_step()
    assert again.returncode == 0, again.stderr
