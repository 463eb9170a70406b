"""Configurations that all hit the cap of 100 are still ordered: raw score, then axis band."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentsec import service
from agentsec.report import Target
from agentsec.scoring.rank import axis_band, rank_key, ranked, score_text
from agentsec.untrusted import parse_probe_output
from tests.agentsec import outputs
from tests.probe.conftest import launch_probe, require_namespaces

AGENTSEC = str(Path(sys.executable).parent / "agentsec")


def _report(output: dict[str, Any], label: str) -> dict[str, Any]:
    probe = parse_probe_output(outputs.line(output))
    return service.score(probe, label=label, target=Target(kind="captured", how="h"), rc=0,
                         redact=False)


def _axes(**states: tuple[str, str | None]) -> dict[str, Any]:
    return {name: {"state": state, "severity": severity} for name, (state, severity) in
            states.items()}


def test_the_band_counts_reachable_axes_by_severity_then_refused_then_not_measured():
    band = axis_band(_axes(a=("reachable", "critical"), b=("reachable", "low"),
                           c=("refused", None), d=("not_measured", None), e=("sealed", None)))
    assert band == (1, 0, 0, 1, 0, 1, 1)


def test_ties_at_the_cap_are_broken_by_raw_score_then_band_then_label():
    def summary(raw: int, **axes: tuple[str, str | None]) -> dict[str, Any]:
        return {"score": 100, "raw_score": raw, "axes": _axes(**axes)}

    reports = [
        {"label": "a-narrow", "summary": summary(150, x=("reachable", "high"))},
        {"label": "b-wide", "summary": summary(150, x=("reachable", "critical"))},
        {"label": "c-most", "summary": summary(170, x=("reachable", "low"))},
        {"label": "d-under", "summary": {"score": 90, "raw_score": 90, "axes": {}}},
    ]
    assert [r["label"] for r in ranked(reports)] == ["c-most", "b-wide", "a-narrow", "d-under"]
    assert rank_key(reports[0]) < rank_key(reports[3])


@pytest.mark.parametrize(("score", "raw", "text"), [(100, 163, "100 (raw 163)"), (40, 40, "40")])
def test_score_text_shows_what_the_cap_hides(score: int, raw: int, text: str):
    assert score_text({"score": score, "raw_score": raw}) == text


def test_a_report_from_the_catalogue_ranks_by_its_summary():
    low = _report(outputs.with_data("identity", no_new_privs=False), "low")
    high = _report(outputs.with_data("filesystem", core_pattern_writable=True), "high")
    assert [r["label"] for r in ranked([low, high])] == ["high", "low"]


CAPPED = {
    # root in the host's pid namespace: everything the next one has, and the host's processes
    "a-root-host-pids": ("unshare", "--net", "--"),
    # root with a pid namespace of its own
    "b-root-own-pids": ("unshare", "--net", "--pid", "--fork", "--mount-proc", "--"),
    # and its own UTS and IPC namespaces too
    "c-root-own-uts": ("unshare", "--net", "--uts", "--ipc", "--pid", "--fork", "--mount-proc",
                       "--"),
}


@pytest.mark.netns
def test_compare_orders_real_runs_that_all_hit_the_cap(tmp_path: Path):
    require_namespaces()
    paths = []
    raws = {}
    for label, wrapper in CAPPED.items():
        run = launch_probe(wrapper=wrapper, env={"HOME": str(tmp_path)})
        report = service.score(parse_probe_output(run.stdout), label=label,
                               target=Target(kind="local", how=" ".join(wrapper)), rc=0,
                               redact=False)
        assert report["summary"]["score"] == 100
        raws[label] = report["summary"]["raw_score"]
        paths.append(service.save(report, tmp_path / "reports").json_path)
    expected = sorted(raws, key=lambda label: -raws[label])
    assert len(set(raws.values())) == len(raws), raws  # the raw scores tell them apart
    # Named so that file order differs from rank order: compare must sort them itself.
    result = subprocess.run([AGENTSEC, "compare", *map(str, reversed(paths))],
                            capture_output=True, text=True, timeout=60,
                            env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    shown = [label for line in result.stdout.splitlines() for label in raws if label in line]
    assert shown == expected
    assert json.loads(paths[0].read_text())["summary"]["raw_score"] == raws["a-root-host-pids"]
