"""A cage's watcher in its report (target.watcher): saved and read back through the schema,
said in the Markdown and the HTML report, its untrusted text cleaned, its hosts and summaries
gone with --redact, and a report without it (every report before it) still schema_version 1.
The cage side, with findings a real watcher made, is tests/agentcage/test_watcher_world.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentsec import service
from agentsec.cage_watcher import MAX_SHOWN, CageWatcher, WatcherFinding
from agentsec.errors import ReportError
from agentsec.render.html import render_html
from agentsec.render.markdown import render_markdown
from agentsec.report import Target
from agentsec.reportfile import load_report
from agentsec.untrusted import parse_probe_output
from tests.agentsec import outputs

AT = 1767225600.0  # 2026-01-01T00:00:00Z
ALARMED = CageWatcher(
    enabled=True, finding_count=2, by_budget=(("reassembly", 1), ("beacon", 1)),
    quarantined=False, findings=(
        WatcherFinding(AT, "reassembly", "key.example.test",
                       "a credential put together from 10 requests to key.example.test",
                       "revoked grant 0a1b2c"),
        WatcherFinding(AT + 60, "beacon", "beacon.example.test",
                       "8 requests at one steady interval", "recorded")))


def scored(watcher: CageWatcher | None, redact: bool = False) -> dict:
    target = Target(kind="cage", how="agentcage verify c", engine="agentcage",
                    watcher=watcher)
    return service.score(parse_probe_output(outputs.line(outputs.sealed())), label="cage-c",
                         target=target, rc=0, redact=redact)


def saved(report: dict, tmp_path: Path) -> dict:
    path = service.save(report, tmp_path).json_path
    return load_report(path)  # the schema check, as any gate reads it back


def test_a_report_of_a_cage_that_alarmed_carries_its_findings(tmp_path):
    report = saved(scored(ALARMED), tmp_path)
    watcher = report["target"]["watcher"]
    assert watcher["finding_count"] == 2 and watcher["by_budget"] == {"reassembly": 1,
                                                                      "beacon": 1}
    assert [f["budget"] for f in watcher["findings"]] == ["reassembly", "beacon"]
    assert watcher["findings"][0] == {
        "at": "2026-01-01T00:00:00Z", "budget": "reassembly", "host": "key.example.test",
        "summary": "a credential put together from 10 requests to key.example.test",
        "action": "revoked grant 0a1b2c"}
    markdown = (tmp_path / "cage-c.md").read_text()
    assert "## Watcher" in markdown
    assert ("The cage's watcher had 2 finding(s) when it was measured (reassembly 1, beacon 1):"
            " the cage alarmed.") in markdown
    assert "| 2026-01-01T00:00:00Z | reassembly | key.example.test |" in markdown
    page = render_html([report])
    assert 'class="panel watcher alarmed"' in page
    assert "2 finding(s) when it was measured" in page and "beacon.example.test" in page


def test_a_clean_cage_says_so_and_a_report_without_a_watcher_is_as_before(tmp_path):
    clean = saved(scored(CageWatcher(enabled=True, finding_count=0)), tmp_path)
    assert clean["target"]["watcher"] == {"enabled": True, "finding_count": 0,
                                          "by_budget": {}, "quarantined": False,
                                          "findings": []}
    assert "had no finding when it was measured" in render_markdown(clean)
    off = scored(CageWatcher(enabled=False, finding_count=0))
    assert "The cage's watcher was off." in render_markdown(off)
    # any other sandbox's report: no watcher, no section, the same schema
    plain = saved(scored(None), tmp_path / "plain")
    assert "watcher" not in plain["target"] and plain["schema_version"] == 1
    assert "## Watcher" not in render_markdown(plain)
    assert "aria-label=\"watcher\"" not in render_html([plain])


def test_its_text_is_cleaned_escaped_and_bounded(tmp_path):
    hostile = CageWatcher(enabled=True, finding_count=MAX_SHOWN + 5,
                          by_budget=(("label", MAX_SHOWN + 5),), findings=tuple(
        WatcherFinding(AT + i, "label", f"x{i}.example.test",
                       "\x1b[31m<script>alert(1)</script> | # *" + "z" * 1000, "recorded")
        for i in range(MAX_SHOWN + 5)))
    report = saved(scored(hostile), tmp_path)
    listed = report["target"]["watcher"]["findings"]
    assert len(listed) == MAX_SHOWN and listed[-1]["host"] == f"x{MAX_SHOWN + 4}.example.test"
    assert all("\x1b" not in f["summary"] and len(f["summary"]) <= 300 for f in listed)
    markdown = render_markdown(report)
    assert f"The {MAX_SHOWN} most recent:" in markdown
    assert "<script>" not in markdown and "\\<script\\>" in markdown
    page = render_html([report])
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_redaction_keeps_the_counts_and_drops_hosts_and_summaries(tmp_path):
    report = saved(scored(ALARMED, redact=True), tmp_path)
    watcher = report["target"]["watcher"]
    assert watcher["finding_count"] == 2 and watcher["by_budget"]["reassembly"] == 1
    assert [f["host"] for f in watcher["findings"]] == ["[host 1]", "[host 2]"]
    assert {f["summary"] for f in watcher["findings"]} == {"[redacted]"}
    assert "example.test" not in json.dumps(report)


@pytest.mark.parametrize(("change", "where"), [
    (lambda w: w.update(finding_count=-1), "target.watcher.finding_count"),
    (lambda w: w.update(seen="everything"), "target.watcher"),
    (lambda w: w["findings"][0].pop("host"), "target.watcher.findings[0]"),
    (lambda w: w["by_budget"].update(beacon="1"), "target.watcher.by_budget.beacon"),
])
def test_a_forged_watcher_is_refused_when_the_report_is_read(tmp_path, change, where):
    report = scored(ALARMED)
    change(report["target"]["watcher"])
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(report))
    with pytest.raises(ReportError, match=where.replace("[", r"\[").replace("]", r"\]")):
        load_report(path)
