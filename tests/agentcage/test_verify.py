"""`agentcage verify`: the cage measured from inside by agentsec's probe, in the fake internet.

The control is the same probe in an open namespace of the same fake internet (tests/integration),
where NET-001/NET-002 fire; inside the cage they must not.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agentcage.conftest import start_cage

AGENTCAGE = str(Path(sys.executable).parent / "agentcage")
AGENTSEC = str(Path(sys.executable).parent / "agentsec")


@pytest.fixture(scope="module")
def verified(net, tmp_path_factory):
    out = tmp_path_factory.mktemp("verify")
    cage = start_cage(net, "verifyme", ["api.example.test"])
    handle = next(cage)
    try:
        env = {**os.environ, "AGENTCAGE_HOME": str(handle.service.store.root)}
        passing = subprocess.run(
            [AGENTCAGE, "verify", "verifyme", "--out", str(out), "--max-score", "100"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        failing = subprocess.run(
            [
                AGENTCAGE,
                "verify",
                "verifyme",
                "--out",
                str(out),
                "--label",
                "strict",
                "--max-score",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        missing = subprocess.run(
            [AGENTCAGE, "verify", "no-such-cage", "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        report = json.loads((out / "cage-verifyme.json").read_text())
        # A baseline the cage is worse than: its own report without one finding, sums fixed.
        accepted = _without_first_finding(report)
        base = tmp_path_factory.mktemp("baselines")
        (base / "accepted.json").write_text(json.dumps(accepted))
        forged = {**accepted, "summary": {**accepted["summary"], "score": 1e308}}
        (base / "forged.json").write_text(json.dumps(forged))
        gated = {
            baseline: subprocess.run(
                [AGENTCAGE, "verify", "verifyme", "--out", str(out), "--label", f"vs-{baseline}",
                 "--baseline", str(base / f"{baseline}.json")],
                capture_output=True, text=True, timeout=120, env=env,
            )
            for baseline in ("accepted", "forged")
        }
        return passing, failing, missing, report, handle.audit(), gated, out
    finally:
        cage.close()  # destroys the cage and checks nothing of it is left


def _without_first_finding(report):
    summary = dict(report["summary"])
    dropped, *kept = summary["findings"]
    summary["findings"] = kept
    summary["raw_score"] -= dropped["points"]
    summary["score"] = min(100, summary["raw_score"])
    summary["finding_count"] -= 1
    summary["by_severity"] = {**summary["by_severity"],
                              dropped["severity"]: summary["by_severity"][dropped["severity"]] - 1}
    return {**report, "summary": summary}


def _ids(report) -> set[str]:
    return {f["id"] for f in report["summary"]["findings"]}


def test_verify_writes_a_report_of_the_cage(verified):
    passing, _, _, report, *_ = verified
    assert passing.returncode == 0, passing.stderr
    assert report["target"]["kind"] == "cage" and report["target"]["engine"] == "agentcage"
    assert report["schema_version"] == 1


def test_nothing_leaves_the_cage_and_every_axis_is_measured(verified):
    _, _, _, report, *_ = verified
    found = _ids(report)
    # The gateway intercepts 80/443 for every address; the probe sees that, asks the proxy,
    # and the proxy refuses: no egress, no metadata, no DNS channel, no UDP.
    assert {"NET-010", "NET-011"} <= found
    assert not found & {
        "NET-001",
        "NET-002",
        "NET-004",
        "NET-005",
        "NET-006",
        "NET-007",
        "NET-008",
        "NET-009",
    }
    axes = report["summary"]["axes"]
    assert axes["network"]["state"] in ("refused", "sealed")
    assert all(axis["state"] != "not_measured" for axis in axes.values()), axes


def test_the_workload_layers_hold(verified):
    found = _ids(verified[3])
    # unprivileged host uid, seccomp, no_new_privs, read-only root, masked .git/hooks, own pids
    assert not found & {
        "PRIV-001",
        "PRIV-002",
        "PRIV-003",
        "PRIV-004",
        "PRIV-005",
        "PRIV-006",
        "PRIV-008",
        "FS-001",
        "FS-002",
        "PERS-005",
        "PROC-001",
        "SEC-001",
        "SEC-003",
        "SEC-005",
        "SEC-009",
        "RES-001",  # the cage's memory, pids and cpu limits are visible from inside
    }
    assert "FS-003" in found  # control: the writable project mount is reported


def test_the_probe_tunnels_were_refused_and_audited_by_the_gateway(verified):
    audit = verified[4]
    blocked = {r.get("host") for r in audit if r.get("decision") == "blocked"}
    assert "example.com" in blocked  # the probe's allowlist control
    assert not any(r.get("decision") == "allowed" and r.get("host") == "example.com" for r in audit)


def test_the_max_score_gate_exits_2_and_a_missing_cage_exits_1(verified):
    _, failing, missing, report, *_ = verified
    assert report["summary"]["score"] > 0  # FS-003 at least: the project is mounted writable
    assert failing.returncode == 2 and "gate failed" in failing.stderr
    assert "--max-score 0" in failing.stderr
    # said plainly, not wrapped as a probe output that held no JSON
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.strip() == "error: no cage named 'no-such-cage'; see `agentcage ls`"


def test_verify_is_held_to_a_baseline_by_agentsec_gate(verified):
    gated, out = verified[5], verified[6]
    worse = gated["accepted"]
    assert worse.returncode == 2, worse.stderr
    assert "FAIL" in worse.stdout and "worse than the baseline" in worse.stderr
    assert json.loads((out / "vs-accepted.json").read_text())["label"] == "vs-accepted"
    forged = gated["forged"]  # refused before anything runs in the cage, in one line
    assert forged.returncode == 1, forged.stderr
    assert forged.stderr.strip().splitlines() == [forged.stderr.strip()]
    assert "forged.json: summary.score: expected an integer" in forged.stderr
    assert not (out / "vs-forged.json").exists()


def test_verify_records_its_runs_in_agentsec_history(verified):
    out = verified[6]
    db = out / "history.sqlite"
    with sqlite3.connect(db) as conn:
        labels = [row[0] for row in conn.execute("SELECT label FROM runs ORDER BY id")]
    conn.close()
    assert labels == ["cage-verifyme", "strict", "vs-accepted"]  # not the refused forged one
    history = subprocess.run([AGENTSEC, "history", "--db", str(db), "--json"],
                             capture_output=True, text=True, timeout=60)
    assert history.returncode == 0, history.stderr
    assert [r["label"] for r in json.loads(history.stdout)["runs"]] == labels
