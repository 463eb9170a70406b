"""`agentsec chart`: one row per run, one coloured cell per axis, and the score."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from agentsec.render.chart import THEMES, render_chart_svg
from tests.agentsec.reports import agentsec, sample_set, save_all

SVG = "{http://www.w3.org/2000/svg}"


def test_svg_has_one_row_per_run_and_one_coloured_cell_per_axis():
    reports = sample_set()
    root = ET.fromstring(render_chart_svg(reports, "light").encode())
    cells = [r for r in root.iter(f"{SVG}rect") if r.get("class")]
    axes = len(reports[0]["summary"]["axes"])
    assert len(cells) == len(reports) * axes
    colours = THEMES["light"]
    assert {c.get("fill") for c in cells if c.get("class") == "reachable"} == {
        colours["reachable"]
    }
    assert {c.get("class") for c in cells} == {"sealed", "reachable", "not_measured"}
    texts = [t.text for t in root.iter(f"{SVG}text")]
    for r in reports:
        assert r["label"] in texts


@pytest.mark.parametrize(("name", "marker"), [("chart.svg", "<svg"), ("chart.md", "| Score |")])
def test_chart_command_writes_svg_or_markdown(tmp_path: Path, name: str, marker: str):
    save_all(tmp_path / "r", sample_set())
    out = tmp_path / name
    proc = agentsec("chart", str(tmp_path / "r"), "--out", str(out), "--theme", "dark")
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert marker in text and "4 runs" in proc.stdout
    if name.endswith(".md"):
        rows = [line for line in text.splitlines() if line.startswith("| ")][1:]
        scores = [int(row.split("|")[2].strip().rstrip("+")) for row in rows]
        assert scores == sorted(scores, reverse=True)  # worst first


def test_chart_refuses_other_file_names(tmp_path: Path):
    save_all(tmp_path / "r", sample_set())
    proc = agentsec("chart", str(tmp_path / "r"), "--out", str(tmp_path / "chart.png"))
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and ".svg or .md" in proc.stderr
    assert not (tmp_path / "chart.png").exists()
