"""A sandbox's own volumes (agentsec.own_volumes): a launcher's declaration counts only where
the probe saw that volume mounted, and only for what lies in it; the score is the same with
--redact."""

from __future__ import annotations

from typing import Any

import pytest

from agentsec import catalogue
from agentsec.own_volumes import mark_own_volumes
from agentsec.report import Target
from agentsec.scoring.assess import assess
from agentsec.service import score
from agentsec.untrusted import parse_probe_output
from tests.agentsec import outputs

SOURCE = "/root/.config/agentcage/cages/c/volumes/home"
DECLARED = (("/home/agent", SOURCE),)


def _settings(mountpoint: str = "/home/agent", root: str = SOURCE, **extra: Any):
    target = {"path": "~/.codex/config.toml", "kind": "agent", "exists": True,
              "appendable": True, "via": "home",
              "mount": {"mountpoint": mountpoint, "root": root}, **extra}
    return outputs.with_data("persistence", targets=[target])


def _ids(output: dict[str, Any], declared=DECLARED, redact: bool = False) -> set[str]:
    target = Target(kind="cage", how="test", own_volumes=declared)
    report = score(parse_probe_output(outputs.line(output)), label="t", target=target, rc=0,
                   redact=redact)
    return {f["id"] for f in report["summary"]["findings"]}


def test_an_agents_settings_in_a_declared_and_mounted_volume_are_its_own():
    found = _ids(_settings())
    assert "PERS-006" in found and "PERS-003" not in found


@pytest.mark.parametrize(("mountpoint", "root", "declared"), [
    ("/home/agent", SOURCE, ()),  # nothing declared: the host's, as ever
    ("/home", SOURCE, DECLARED),  # mounted elsewhere than declared
    ("/home/agent", "/home/alice", DECLARED),  # another directory mounted there
    ("/home/agent", "/", DECLARED),  # a whole filesystem is no volume
    ("/home/agent", "/cages/c/volumes/other", DECLARED),  # another volume's directory
])
def test_anything_else_is_scored_as_persistence_outside(mountpoint, root, declared):
    found = _ids(_settings(mountpoint, root), declared)
    assert "PERS-003" in found and "PERS-006" not in found


def test_a_volume_on_a_filesystem_of_its_own_matches_by_its_path_within_it():
    # /root on a filesystem of its own: mountinfo's root is the path within that filesystem
    assert "PERS-006" in _ids(_settings(root="/.config/agentcage/cages/c/volumes/home"))


def test_redaction_keeps_the_findings_and_drops_the_paths():
    target = Target(kind="cage", how="test", own_volumes=DECLARED)
    report = score(parse_probe_output(outputs.line(_settings())), label="t", target=target,
                   rc=0, redact=True)
    assert {f["id"] for f in report["summary"]["findings"]} == _ids(_settings())
    assert SOURCE not in str(report)
    assert report["target"]["own_volumes"] == [{"path": "/home/agent", "source": "[redacted]"}]


def test_marking_leaves_the_probe_output_it_was_given_alone():
    probe = parse_probe_output(outputs.line(_settings()))
    marked = mark_own_volumes(probe, DECLARED)
    assert marked.sections["persistence"].data["targets"][0]["own_volume"] is True
    assert "own_volume" not in probe.sections["persistence"].data["targets"][0]
    # a probe output carrying the mark itself is scored as it says; only the launcher's
    # declaration, checked by agentsec, puts it there in a report (see service.score)
    result = assess(marked, catalogue.load())
    assert "PERS-006" in {f.id for f in result.findings}
