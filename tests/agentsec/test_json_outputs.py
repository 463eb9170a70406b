"""`--json` on every agentsec command that prints data: a versioned document on stdout alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.agentsec import outputs
from tests.agentsec.reports import agentsec, report, sample_set, save_all


def _doc(proc) -> dict:
    assert proc.returncode in (0, 2), proc.stderr
    doc = json.loads(proc.stdout)  # stdout is the document and nothing else
    assert doc["tool"] == "agentsec" and doc["schema_version"] == 1
    return doc


@pytest.fixture
def saved(tmp_path: Path) -> list[Path]:
    return save_all(tmp_path / "reports", sample_set())


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    path = tmp_path / "capture.json"
    path.write_text(outputs.line(outputs.with_data("identity", no_new_privs=False)))
    return path


def test_presets_json_lists_every_preset():
    doc = _doc(agentsec("presets", "--json"))
    assert doc["kind"] == "presets"
    by_name = {p["name"]: p for p in doc["presets"]}
    assert by_name["bwrap-hardened"]["engine"] == "bwrap"
    assert isinstance(by_name["docker-default"]["runnable"], bool)


def test_compare_json_has_one_row_per_run(saved: list[Path]):
    doc = _doc(agentsec("compare", str(saved[0].parent), "--json"))
    assert doc["kind"] == "comparison"
    assert {r["label"] for r in doc["runs"]} == {r["label"] for r in sample_set()}
    sealed = next(r for r in doc["runs"] if r["label"] == "bwrap-hardened")
    assert set(sealed["axes"].values()) == {"sealed"}


def test_diff_json_says_what_got_worse(tmp_path: Path):
    old = tmp_path / "old.json"
    new = tmp_path / "new.json"
    old.write_text(json.dumps(report(outputs.sealed(), "x")))
    new.write_text(json.dumps(report(outputs.with_data("identity", no_new_privs=False), "x")))
    proc = agentsec("diff", str(old), str(new), "--json")
    assert proc.returncode == 2
    doc = _doc(proc)
    assert doc["kind"] == "diff" and doc["failed"] is True
    assert [c["finding_id"] for c in doc["new"]] == ["PRIV-005"]


def test_score_json_is_the_run_with_its_gates(tmp_path: Path, capture: Path):
    proc = agentsec("score", str(capture), "--label", "cap", "--how", "h", "--out",
                    str(tmp_path / "r"), "--max-score", "0", "--json")
    assert proc.returncode == 2
    doc = _doc(proc)
    assert doc["kind"] == "run" and doc["report"]["summary"]["score"] == 3
    assert doc["gates"] == [
        {"name": "max-score", "passed": False, "detail": "score 3, budget --max-score 0"}
    ]
    assert doc["files"]["json"].endswith("cap.json")
    assert "reports:" in proc.stderr  # what a person reads went to stderr


def test_history_json(tmp_path: Path, capture: Path):
    for _ in range(2):
        agentsec("score", str(capture), "--label", "cap", "--how", "h", "--out", str(tmp_path))
    doc = _doc(agentsec("history", "cap", "--results", str(tmp_path), "--json"))
    assert doc["kind"] == "history" and [r["score"] for r in doc["runs"]] == [3, 3]


def test_assert_json_is_versioned(tmp_path: Path):
    proc = agentsec("assert", "--kind", "local", "--not-exists", str(tmp_path / "nope"), "--json")
    doc = _doc(proc)
    assert doc["kind"] == "path-assertions"
    assert doc["results"][0]["verdict"] == "pass"
