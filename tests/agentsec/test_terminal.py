"""Terminal output at 80 columns and through a pipe: every line readable, every name whole."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from agentsec.launchers import availability, load_presets
from agentsec.render.records import preset_lines
from agentsec.render.terminal import axis_codes, findings_table, scores_table
from tests.agentsec import outputs
from tests.agentsec.reports import LONG_LABEL, agentsec, report, sample_set, save_all

ANSI = re.compile(r"\x1b\[")


def _width(line: str) -> int:
    return cell_len(line)


def _render(renderable, width: int = 80) -> str:
    console = Console(width=width, file=open(os.devnull, "w"), soft_wrap=True)  # noqa: SIM115
    with console.capture() as capture:
        console.print(renderable)
    return capture.get()


@pytest.mark.parametrize("width", [80, 60, 120])
def test_scores_fit_the_width_and_keep_every_label_whole(width: int):
    reports = sample_set()
    text = _render(scores_table(reports, title="Comparison", detailed=True), width)
    lines = text.splitlines()
    labels = [r["label"] for r in reports]
    for label in labels:
        assert any(line.rstrip().endswith(label) for line in lines), label
    for line in lines:
        # A label runs on past the edge rather than being cut; everything else fits.
        fixed = next((line.rstrip()[: -len(x)] for x in labels if line.rstrip().endswith(x)), line)
        assert _width(fixed) <= width, line
    assert "…" not in text


def test_every_symbol_in_a_row_is_explained_by_the_legend():
    text = _render(scores_table(sample_set()))
    assert "✕H" in text and "? " in text  # reachable (high); not measured
    legend = text[text.index("legend:"):]
    for needle in ("✓ sealed", "✕ reachable", "? not measured", "H=high", "Pri=privilege",
                   "Net=network", "score+ a lower bound"):
        assert needle in legend
    assert re.search(r"^\s+0\+ ", text, re.M)  # the not-measured run's score is a lower bound


def test_axis_codes_tell_every_axis_apart():
    titles = ["Privilege", "Processes", "Persistence", "Network"]
    codes = axis_codes(titles)
    assert len(set(codes)) == len(codes) == 4 and all(len(c) == 3 for c in codes)
    assert axis_codes(["Process", "Processes"]) == ["Process", "Processe"]


def test_findings_list_evidence_whole_below_each_finding():
    long_path = "/home/agent/" + "deeply/" * 12 + "credentials.json"
    out = outputs.with_data(
        "credentials",
        files=[{"path": long_path, "exists": True, "readable": True, "agent_login": False,
                "via": "home"}],
    )
    text = _render(findings_table(report(out, "creds")))
    assert long_path in text.splitlines()[2].strip() or long_path in text
    assert any(line.strip() == long_path for line in text.splitlines())


def test_hostile_label_prints_as_itself():
    r = report(outputs.sealed(), "[bold red]x[/bold red]")
    assert "[bold red]x[/bold red]" in _render(scores_table([r]))


def test_preset_names_are_whole_at_80_columns():
    rows = [(p, availability(p)) for p in load_presets().values()]
    lines = _render(preset_lines(rows)).splitlines()
    for preset in load_presets().values():
        assert any(line.split()[-1:] == [preset.name] for line in lines), preset.name
    assert all(_width(line) <= 80 for line in lines)


def test_compare_piped_prints_no_blank_columns_and_no_cut_names(tmp_path: Path):
    save_all(tmp_path, sample_set())
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = agentsec("compare", str(tmp_path), env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert not ANSI.search(out) and "…" not in out
    for label in (LONG_LABEL, "bwrap-hardened", "docker-default_python_3.12-slim"):
        assert any(line.rstrip().endswith(label) for line in out.splitlines()), label
    row = next(line for line in out.splitlines() if line.rstrip().endswith("bwrap-hardened"))
    assert row.split()[:9] == ["0", "0", "✓", "✓", "✓", "✓", "✓", "✓", "✓"]


def test_presets_piped_keeps_every_name_copyable():
    proc = agentsec("presets")
    assert proc.returncode == 0, proc.stderr
    words = {line.split()[-1] for line in proc.stdout.splitlines() if line.strip()}
    assert set(load_presets()) <= words


def test_a_hostile_report_file_is_cleaned_before_the_terminal(tmp_path: Path):
    # A report from elsewhere (a CI artifact, a colleague) can hold anything: it is cleaned at
    # untrusted.py like a probe output before it reaches the terminal.
    r = report(outputs.sealed(), "fine")
    r["label"] = "evil\x1b]0;owned\x07\x1b[2J\u202ename"
    r["summary"]["findings"] = [{**f, "title": "x\x1b[31mred"} for f in r["summary"]["findings"]]
    (tmp_path / "evil.json").write_text(json.dumps(r))
    proc = agentsec("compare", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\u202e" not in proc.stdout
    assert "evil" in proc.stdout and "name" in proc.stdout
