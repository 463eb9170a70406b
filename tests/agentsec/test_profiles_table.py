"""The README's profiles table is generated from the reports in docs/profiles, and only its block
is ever rewritten."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from agentsec import service
from agentsec.report import Target
from agentsec.scoring.rank import rank_key
from agentsec.untrusted import parse_probe_output
from tests import profiles_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def profiles():
    return profiles_script.load()


def test_the_readme_table_is_what_the_reports_say(profiles):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(profiles.START)[1].split(profiles.END)[0]
    assert block == "\n" + profiles.render(profiles.load(profiles.PROFILES),
                                           profiles.load_unmeasured(profiles.PROFILES))


def test_the_table_holds_every_preset_as_its_kind_is_started_and_the_cage(profiles):
    """One row per (preset, who starts it): measured, or saying why it was not."""
    reports = profiles.load(profiles.PROFILES)
    unmeasured = profiles.load_unmeasured(profiles.PROFILES)
    shown = {(r["target"]["preset"], r["label"].rpartition(", ")[2]) for r in reports
             if r["target"]["kind"] == "preset"}
    shown |= {(r["preset"], r["label"].rpartition(", ")[2]) for r in unmeasured}
    who = {"root": ("as root", "as uid 65534"), "user": ("as uid 1000",),
           "rootless": ("as an ordinary user",)}
    for row in profiles.rows():
        assert any((row.preset, text) in shown for text in who[row.who]), row
    assert len(shown) == len(profiles.rows())
    assert all(r["why"].startswith("not measured here: ") for r in unmeasured)
    assert {r["preset"] for r in unmeasured} >= {"docker-default", "docker-hardened"}
    assert any(r["target"]["kind"] == "cage" for r in reports)
    assert all(r["redacted"] for r in reports)


def test_the_chart_beside_the_table_is_drawn_from_the_same_reports(profiles):
    chart = (profiles.PROFILES / profiles.CHART).read_text(encoding="utf-8")
    reports = profiles.load(profiles.PROFILES)
    assert f"<title>agentsec: {len(reports)} runs," in chart
    for report in reports:
        assert f">{html.escape(report['label'])}</text>" in chart, report["label"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"docs/profiles/{profiles.CHART}" in readme


def test_rows_are_ranked_worst_first_even_past_the_cap(profiles):
    reports = profiles.load(profiles.PROFILES)
    table = profiles.render(reports)
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    shown = [row.split(" | ")[0][2:] for row in rows[1:]]
    assert shown == [r["label"] for r in sorted(reports, key=rank_key)]
    capped = [r for r in reports if r["summary"]["score"] == 100]
    assert len(capped) >= 2  # the cap is hit more than once, and the raw scores still rank
    assert all(f"(raw {r['summary']['raw_score']})" in table for r in capped
               if r["summary"]["raw_score"] > 100)


def test_only_the_block_is_rewritten(profiles, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nbefore\n{profiles.START}\nold\n{profiles.END}\nafter\n")
    assert profiles.rewrite_readme("| new |\n", readme) is True
    assert readme.read_text() == (f"# Title\n\nbefore\n{profiles.START}\n| new |\n"
                                  f"{profiles.END}\nafter\n")
    assert profiles.rewrite_readme("| new |\n", readme) is False


def test_a_readme_without_one_block_is_refused(profiles, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"{profiles.START}\n{profiles.START}\n{profiles.END}\n")
    with pytest.raises(SystemExit):
        profiles.rewrite_readme("x\n", readme)


def test_the_saved_reports_score_as_this_scorer_scores_them(profiles):
    """A scorer change that moves a profile must come with a regenerated table."""
    for report in profiles.load(profiles.PROFILES):
        probe = parse_probe_output(json.dumps(report["probe"]["output"]))
        rescored = service.score(probe, label=report["label"], rc=0, redact=True,
                                 target=Target(kind="captured", how=""))
        assert rescored["summary"]["score"] == report["summary"]["score"], report["label"]
        assert rescored["summary"]["raw_score"] == report["summary"]["raw_score"]
        assert ([f["id"] for f in rescored["summary"]["findings"]]
                == [f["id"] for f in report["summary"]["findings"]])
