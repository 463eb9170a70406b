"""The forms the docs give for reading a reports directory and for CI, run as written: a shell
glob over a directory that also holds a matrix table, and the GitHub job-summary option where
$GITHUB_STEP_SUMMARY is not set."""

from __future__ import annotations

import glob
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from agentsec.matrix import MatrixResult, save_matrix
from tests.agentsec import outputs
from tests.agentsec.reports import AGENTSEC, agentsec, leaky, sample_set, save_all


def _reports_dir_with_a_matrix(tmp_path: Path) -> Path:
    reports = tmp_path / "reports"
    reports.mkdir()
    save_all(reports, sample_set()[:2])
    # The table exactly as `agentsec matrix` writes it, beside the reports it ranks.
    table = MatrixResult(image=None, skipped=[{"preset": "docker-default", "why": "no docker"}])
    save_matrix(table, reports)
    return reports


@pytest.mark.parametrize(
    "command",
    [["compare"], ["report", "--out", "{tmp}/page.html"], ["chart", "--out", "{tmp}/c.svg"]],
    ids=lambda c: c[0],
)
def test_a_glob_over_a_reports_directory_passes_over_its_matrix_table(
    tmp_path: Path, command: list[str]
):
    reports = _reports_dir_with_a_matrix(tmp_path)
    named = sorted(glob.glob(str(reports / "*.json")))  # what the shell makes of reports/*.json
    assert any(Path(p).name.startswith("matrix_") for p in named)
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    proc = agentsec(*args, *named)
    assert proc.returncode == 0, proc.stderr
    assert "tool_version" not in proc.stderr


def test_compare_of_the_glob_lists_the_reports_and_not_the_table(tmp_path: Path):
    reports = _reports_dir_with_a_matrix(tmp_path)
    proc = agentsec("compare", "--json", *sorted(glob.glob(str(reports / "*.json"))))
    assert proc.returncode == 0, proc.stderr
    labels = {run["label"] for run in json.loads(proc.stdout)["runs"]}
    assert labels == {r["label"] for r in sample_set()[:2]}


def test_a_matrix_table_given_where_a_report_is_wanted_is_named_for_what_it_is(tmp_path: Path):
    reports = _reports_dir_with_a_matrix(tmp_path)
    table = next(reports.glob("matrix_*.json"))
    for args in (["compare", str(table)], ["diff", str(table), str(table)]):
        proc = agentsec(*args)
        assert proc.returncode == 1
        line = proc.stderr.strip()
        assert len(line.splitlines()) == 1 and "Traceback" not in line
        assert "a matrix table (agentsec matrix)" in line, line
    # A broken report in the glob is still an error: only agentsec's own documents pass over.
    (reports / "zz-broken.json").write_text('{"tool": "agentsec", "schema_version": 1}')
    proc = agentsec("compare", *sorted(glob.glob(str(reports / "*.json"))))
    assert proc.returncode == 1 and "zz-broken.json" in proc.stderr


def test_the_readme_ci_form_outside_github_writes_no_summary_and_still_gates(tmp_path: Path):
    capture = tmp_path / "capture.json"
    capture.write_text(outputs.line(leaky()))
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    # The README's line, through a real shell, where the variable is not set.
    line = (
        f'{shlex.quote(AGENTSEC)} score capture.json --label ci --how h --out r '
        '--job-summary "$GITHUB_STEP_SUMMARY" --max-score 10'
    )
    proc = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr  # the gate still decides, and the report is kept
    assert (tmp_path / "r" / "ci.json").exists()
    assert "no job summary written" in proc.stderr
    assert "Is a directory" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["capture.json", "r"]


def test_a_job_summary_that_is_a_directory_by_name_is_still_refused(tmp_path: Path):
    capture = tmp_path / "capture.json"
    capture.write_text(outputs.line(leaky()))
    proc = agentsec(
        "score", str(capture), "--label", "ci", "--how", "h", "--out", str(tmp_path / "r"),
        "--job-summary", str(tmp_path),
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and str(tmp_path) in proc.stderr
