"""Run history in SQLite: recorded on every run, read back, regressions found and gated."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from agentsec.history import DB_NAME, History, HistoryError
from tests.agentsec import outputs
from tests.agentsec.reports import agentsec, leaky, report


def _capture(tmp_path: Path, output: dict, name: str = "capture.json") -> Path:
    path = tmp_path / name
    path.write_text(outputs.line(output))
    return path


def _score(tmp_path: Path, capture: Path, *extra: str, label: str = "ci"):
    return agentsec("score", str(capture), "--label", label, "--how", "h", "--out",
                    str(tmp_path / "reports"), *extra)


def test_every_run_is_recorded_and_read_back(tmp_path: Path):
    history = History(tmp_path / DB_NAME)
    assert not history.record(report(outputs.sealed(), "a")).regressed
    history.record(report(outputs.sealed(), "b"))
    history.record(report(outputs.sealed(), "a"))
    assert [r.label for r in history.runs()] == ["a", "b", "a"]
    assert [r.score for r in history.runs("a")] == [0, 0]
    assert history.labels() == ["a", "b"]
    assert set(history.runs("a")[0].axes.values()) == {"sealed"}


def test_a_worse_run_of_the_same_label_is_a_regression(tmp_path: Path):
    history = History(tmp_path / DB_NAME)
    history.record(report(outputs.sealed(), "a"))
    assert not history.record(report(outputs.sealed(), "other")).regressed  # other label
    regression = history.record(report(leaky(), "a"))
    assert regression.regressed
    assert regression.reasons[0].startswith("score rose from 0 to")
    assert any("PRIV-001" in reason for reason in regression.reasons)
    assert not history.record(report(outputs.sealed(), "a")).regressed  # an improvement


def test_history_command_highlights_the_regression_and_gates_on_it(tmp_path: Path):
    sealed, worse = _capture(tmp_path, outputs.sealed()), _capture(tmp_path, leaky(), "l.json")
    assert _score(tmp_path, sealed).returncode == 0
    proc = _score(tmp_path, worse)
    assert proc.returncode == 0 and "REGRESSION against the previous run of ci" in proc.stdout
    shown = agentsec("history", "ci", "--results", str(tmp_path / "reports"))
    assert shown.returncode == 0, shown.stderr
    last = [line for line in shown.stdout.splitlines() if line.rstrip().endswith("REGRESSION")]
    assert len(last) == 1 and " ci  REGRESSION" in last[0]
    gated = agentsec("history", "ci", "--gate", "--results", str(tmp_path / "reports"))
    assert gated.returncode == 2 and "worse than the run before it" in gated.stderr


def test_fail_on_regression_gates_the_run_itself(tmp_path: Path):
    sealed, worse = _capture(tmp_path, outputs.sealed()), _capture(tmp_path, leaky(), "l.json")
    assert _score(tmp_path, sealed, "--fail-on-regression").returncode == 0  # the first run
    proc = _score(tmp_path, worse, "--fail-on-regression", "--json")
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["regression"]["regressed"] is True
    assert [g["name"] for g in doc["gates"] if not g["passed"]] == ["regression"]
    assert (tmp_path / "reports" / "ci.json").exists()  # the evidence is written first


def test_no_history_records_nothing(tmp_path: Path):
    assert _score(tmp_path, _capture(tmp_path, outputs.sealed()), "--no-history").returncode == 0
    assert not (tmp_path / "reports" / DB_NAME).exists()


@pytest.mark.parametrize(
    "content",
    [b"this is not a database at all" * 10, b"SQLite format 3\x00" + b"\x00" * 30],
)
def test_a_corrupt_history_is_refused_in_one_line_and_left_untouched(tmp_path: Path,
                                                                     content: bytes):
    db = tmp_path / "reports" / DB_NAME
    db.parent.mkdir()
    db.write_bytes(content)
    sarif = tmp_path / "ci.sarif"
    proc = _score(tmp_path, _capture(tmp_path, outputs.sealed()), "--sarif", str(sarif))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "history" in proc.stderr
    assert db.read_bytes() == content
    assert sarif.exists()  # the CI files are written before the history is told to be broken
    shown = agentsec("history", "--results", str(tmp_path / "reports"))
    assert shown.returncode == 1 and shown.stderr.startswith("agentsec: error:")


def test_another_sqlite_database_is_not_taken_for_a_history(tmp_path: Path):
    db = tmp_path / DB_NAME
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER)")
    with pytest.raises(HistoryError, match="not an agentsec history"):
        History(db).record(report(outputs.sealed(), "a"))
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert tables == {"accounts"}


def test_missing_history_is_a_clear_error(tmp_path: Path):
    proc = agentsec("history", "--results", str(tmp_path))
    assert proc.returncode == 1 and "no run has been recorded" in proc.stderr
