"""A verifier-integrity run is a report like a measured sandbox's: recorded in the history,
written as JUnit, read by `compare`, `report`, `diff` and the console (each in its own shape,
never as a sandbox with seven axes), judged by the same gates; a truncated, foreign or
other-kind file is one line and exit 1. Everything here runs the real console scripts."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from agentsec.history import DB_NAME
from tests.agentsec import browser
from tests.agentsec import console as ui
from tests.agentsec.integrity.corpus import PY, PY_TESTS, py, sub
from tests.agentsec.integrity.test_cli import TAMPERED, assert_one_line_error, trees
from tests.agentsec.reports import AGENTSEC, leaky, report, save_all

TIMEOUT = 120  # a bound against hangs
WORSE = py(sub(sub(PY_TESTS, "def test_mul", "@pytest.mark.skip\ndef test_mul"),
               "    assert add(-1, 1) == 0\n", ""))
# The document `integrity diff --json` printed before the report gained could, its lower bound
# and its history: accepted baselines committed in repositories look like this.
FIRST_FORMAT = {
    "tool": "agentsec", "test": "verifier-integrity", "schema_version": 1,
    "tool_version": "0.1.0", "generated_at": "2026-01-01T00:00:00Z", "label": "main..HEAD",
    "before": {"kind": "git", "path": ".", "ref": "main", "commit": "a" * 40},
    "after": {"kind": "git", "path": ".", "ref": "HEAD", "commit": "b" * 40},
    "change": {"files_changed": 3, "files_analysed": 2, "tests_before": 4, "tests_after": 4},
    "summary": {"score": 15, "raw_score": 15, "finding_count": 1, "findings_omitted": 0,
                "by_severity": {"critical": 0, "high": 1, "medium": 0, "low": 0, "info": 0}},
    "findings": [{"id": "INT-003", "title": "Test skipped, marked xfail or todo",
                  "severity": "high", "points": 15, "path": "tests/test_calc.py", "line": 11,
                  "side": "after", "evidence": "test_mul skipped by `@pytest.mark.skip`"}],
}


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENTSEC, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "80", "NO_COLOR": "1"})


def integrity_diff(tmp_path: Path, after: dict[str, str], *args: str,
                   name: str = "x") -> subprocess.CompletedProcess[str]:
    before_dir, after_dir = trees(tmp_path / name, PY, after)
    return run("integrity", "diff", before_dir, after_dir, *args, cwd=tmp_path)


def test_a_run_is_recorded_in_the_history_and_a_worse_one_is_a_regression(tmp_path: Path):
    first = integrity_diff(tmp_path, TAMPERED, "--out", "r", "--label", "pr", name="a")
    assert first.returncode == 0, first.stderr
    worse = integrity_diff(tmp_path, WORSE, "--out", "r", "--label", "pr",
                           "--fail-on-regression", name="b")
    assert worse.returncode == 2, worse.stderr
    assert "REGRESSION against the previous run of pr" in worse.stdout
    assert "INT-007" in worse.stdout and "gate failed" in worse.stderr
    listed = run("history", "pr", "--results", "r", "--json", cwd=tmp_path)
    runs = json.loads(listed.stdout)["runs"]
    assert [(r["test"], r["score"], r["axes"]) for r in runs] == [
        ("verifier-integrity", 15, {}), ("verifier-integrity", 30, {})]
    assert runs[-1]["regression"] and runs[-1]["findings"] == ["INT-003", "INT-007"]
    table = run("history", "--results", "r", cwd=tmp_path).stdout
    assert "Verifier integrity" in table and "REGRESSION" in table
    assert "legend" not in table  # no axis symbols to explain
    assert all(len(line) <= 80 for line in table.splitlines()), table


def test_junit_has_a_case_per_check_and_per_gate(tmp_path: Path):
    proc = integrity_diff(tmp_path, TAMPERED, "--junit", "j.xml", "--max-score", "0")
    assert proc.returncode == 2
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite is not None
    cases = {c.get("name", ""): c for c in suite.findall("testcase")}
    failed = sorted(name for name, c in cases.items() if c.find("failure") is not None)
    assert failed == ["INT-003 Test skipped, marked xfail or todo", "gate max-score"]
    assert "tests/test_calc.py:11" in (cases[failed[0]].find("failure").text or "")
    assert len(cases) == 17 + 1  # the change's checks (no sandbox measured), and the gate
    assert suite.get("failures") == "2" and suite.get("errors") == "0"


def test_compare_report_and_diff_read_both_kinds(tmp_path: Path):
    save_all(tmp_path / "r", [report(leaky(), "sandbox-1")])
    saved = integrity_diff(tmp_path, TAMPERED, "--out", "r", "--label", "agent-pr-7")
    assert saved.returncode == 0
    table = run("compare", "r", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    sandbox, integrity = table.stdout.split("Verifier integrity")
    assert "sandbox-1" in sandbox and "agent-pr-7" not in sandbox
    assert "agent-pr-7" in integrity and "checked:" in integrity and "INT-003" in integrity
    assert "✓" not in integrity and "✕" not in integrity  # no axis symbols for it
    # a path longer than the line runs on whole, on a line of its own; the rest fits 80 columns
    assert all(len(line) <= 80 for line in table.stdout.splitlines()
               if str(tmp_path) not in line), table.stdout
    rows = json.loads(run("compare", "r", "--json", cwd=tmp_path).stdout)["runs"]
    by_label = {row["label"]: row for row in rows}
    mine = by_label["agent-pr-7"]
    assert mine["test"] == "verifier-integrity" and "axes" not in mine
    assert mine["findings"] == ["INT-003"] and len(by_label["sandbox-1"]["axes"]) == 7
    page = run("report", "r", "--out", "page.html", cwd=tmp_path)
    assert page.returncode == 0 and "(2 runs)" in page.stdout, page.stderr
    html = (tmp_path / "page.html").read_text()
    assert "Verifier integrity: the change" in html and "tests/test_calc.py:11" in html
    # two integrity reports compare like two sandbox reports: exit 2 on a new finding
    worse = integrity_diff(tmp_path, WORSE, "--out", "w", "--label", "agent-pr-7", name="w")
    assert worse.returncode == 0
    gate = run("diff", "r/integrity_agent-pr-7.json", "w/integrity_agent-pr-7.json",
               cwd=tmp_path)
    assert gate.returncode == 2 and "FAIL  INT-007: new:" in gate.stdout, gate.stdout
    mixed = run("diff", "r/sandbox-1.json", "r/integrity_agent-pr-7.json", cwd=tmp_path)
    assert mixed.returncode == 2 and "only reports of one kind compare" in mixed.stdout


def test_the_first_format_is_still_a_report_and_a_baseline(tmp_path: Path):
    (tmp_path / "old.json").write_text(json.dumps(FIRST_FORMAT))
    shown = run("compare", "old.json", cwd=tmp_path)
    assert shown.returncode == 0 and "main..HEAD" in shown.stdout, shown.stderr
    proc = integrity_diff(tmp_path, TAMPERED, "--baseline", "old.json")
    assert proc.returncode == 0, proc.stderr  # it holds the same finding


@pytest.mark.parametrize(("text", "needle"), [
    (json.dumps(FIRST_FORMAT)[:200], "not valid JSON"),
    ('{"tool": "something-else", "findings": []}', "is not an agentsec report"),
    ("[1, 2]", "is not an agentsec report"),
    (json.dumps({**FIRST_FORMAT, "summary": {**FIRST_FORMAT["summary"], "score": 0}}),
     "summary.score: 0, but the findings' weights sum to 15"),
    (json.dumps({k: v for k, v in FIRST_FORMAT.items() if k != "change"}),
     "a change is given by all three or none"),
    (json.dumps({k: v for k, v in FIRST_FORMAT.items()
                 if k not in ("before", "after", "change")}),
     "neither a change (before, after, change) nor a sandbox (could) was checked"),
])
def test_a_bad_integrity_report_is_one_line(tmp_path: Path, text: str, needle: str):
    (tmp_path / "bad.json").write_text(text)
    for command in (["compare", "bad.json"], ["report", "bad.json", "--out", "p.html"]):
        assert_one_line_error(run(*command, cwd=tmp_path), needle)
    assert not (tmp_path / "p.html").exists()


def test_a_report_of_the_other_kind_is_no_baseline(tmp_path: Path):
    save_all(tmp_path / "r", [report(leaky(), "sandbox-1")])
    proc = integrity_diff(tmp_path, TAMPERED, "--baseline", "r/sandbox-1.json", "--sarif", "s")
    assert_one_line_error(proc, "is a blast-radius report, not a verifier-integrity report")
    assert not (tmp_path / "s").exists()  # refused before the run
    (tmp_path / "old.json").write_text(json.dumps(FIRST_FORMAT))
    capture = tmp_path / "capture.json"
    capture.write_text(json.dumps(report(leaky(), "x")["probe"]["output"]) + "\n")
    scored = run("score", str(capture), "--label", "s", "--how", "t", "--baseline", "old.json",
                 "--out", "r2", cwd=tmp_path)
    assert_one_line_error(scored, "is a verifier-integrity report, not a blast-radius report")


def test_a_history_of_the_first_schema_takes_integrity_runs(tmp_path: Path):
    """A history written before it knew the kind of its runs: read as it is, and given the
    column when an integrity run is recorded; nothing it held is lost."""
    db = tmp_path / "r" / DB_NAME
    db.parent.mkdir()
    old = report(leaky(), "sandbox-1")
    with sqlite3.connect(db) as conn:
        conn.executescript(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, label TEXT NOT NULL, "
            "generated_at TEXT NOT NULL, recorded_at TEXT NOT NULL, score INTEGER NOT NULL, "
            "raw_score INTEGER NOT NULL, lower_bound INTEGER NOT NULL, probe_version TEXT NOT "
            "NULL, axes TEXT NOT NULL, findings TEXT NOT NULL, report TEXT NOT NULL);"
            "PRAGMA user_version = 1;")
        conn.execute("INSERT INTO runs (label, generated_at, recorded_at, score, raw_score, "
                     "lower_bound, probe_version, axes, findings, report) VALUES "
                     "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     ("sandbox-1", old["generated_at"], old["generated_at"],
                      old["summary"]["score"], old["summary"]["raw_score"], 0,
                      old["probe"]["version"], json.dumps(
                          {k: a["state"] for k, a in old["summary"]["axes"].items()}),
                      json.dumps([f["id"] for f in old["summary"]["findings"]]),
                      json.dumps(old)))
    conn.close()
    before = json.loads(run("history", "--results", "r", "--json", cwd=tmp_path).stdout)
    assert [r["test"] for r in before["runs"]] == ["sandbox-blast-radius"]
    with sqlite3.connect(db) as conn:  # reading changed nothing
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    conn.close()
    assert integrity_diff(tmp_path, TAMPERED, "--out", "r", "--label", "pr").returncode == 0
    after = json.loads(run("history", "--results", "r", "--json", cwd=tmp_path).stdout)
    assert [(r["label"], r["test"]) for r in after["runs"]] == [
        ("sandbox-1", "sandbox-blast-radius"), ("pr", "verifier-integrity")]
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    conn.close()


def test_the_console_shows_an_integrity_run_by_its_findings(tmp_path: Path):
    results = tmp_path / "r"
    save_all(results, [report(leaky(), "sandbox-1")])
    assert integrity_diff(tmp_path, TAMPERED, "--out", "r", "--label", "pr").returncode == 0
    with ui.running(results) as console:
        rows = {r["label"]: r for r in console.api("GET", "/api/runs").json()["runs"]}
        assert rows["pr"]["test"] == "verifier-integrity" and rows["pr"]["findings"] == [
            "INT-003"]
        assert "axes" not in rows["pr"] and len(rows["sandbox-1"]["axes"]) == 7
        history = console.api("GET", "/api/history?label=pr").json()["runs"]
        assert [(r["test"], r["score"]) for r in history] == [("verifier-integrity", 15)]
        page = browser.dom(console.url)
    assert "Verifier integrity: the change" in page and "tests/test_calc.py:11" in page
    assert "<div>skipped" not in page  # every report was read
    section = page.split('id="run-')[2] if page.index("pr<") > page.index("sandbox-1") \
        else page.split('id="run-')[1]
    assert 'class="axes"' not in section  # its own shape: no sandbox band
