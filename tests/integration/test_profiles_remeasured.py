"""The README's sandbox table, measured again: every row this host can run is run the way
scripts/profiles.py ran it (its own `measure`, into a directory of the test's), and each saved
profile's axis states must still hold; every row it cannot run must still fail for the reason
the table gives.

A changed state fails here until `scripts/profiles.py measure` records it (with the README's
table and chart): the published table is never older than what this machine measures. The
cage's row comes from `agentcage demo` and is not run here; the cage is measured by its own
tests (agentcage verify).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests import profiles_script

pytestmark = pytest.mark.netns


def states(report: dict[str, Any]) -> dict[str, str]:
    return {name: axis["state"] for name, axis in report["summary"]["axes"].items()}


@pytest.fixture(scope="module")
def profiles():
    return profiles_script.load()


@pytest.fixture(scope="module")
def remeasured(profiles, tmp_path_factory) -> dict[str, dict[str, Any]]:
    runnable = [row for row in profiles.rows() if profiles.why_not(row) is None]
    saved = profiles.measure(tmp_path_factory.mktemp("remeasured"), only=runnable)
    return {json.loads(path.read_text())["label"]: json.loads(path.read_text())
            for path in saved.values()}


def test_every_row_measured_again_keeps_the_states_the_table_shows(profiles, remeasured):
    published = {r["label"]: r for r in profiles.load(profiles.PROFILES)
                 if r["target"]["kind"] == "preset"}
    # the same configurations at the same versions: a new version is a new row to measure
    assert set(remeasured) == set(published)
    changed = {label: (states(published[label]), states(report))
               for label, report in remeasured.items()
               if states(report) != states(published[label])}
    assert changed == {}, "re-measure with scripts/profiles.py measure: " + json.dumps(changed)
    assert all(r["probe"]["version"] == published[r["label"]]["probe"]["version"]
               for r in remeasured.values())


def test_the_rows_not_measured_still_cannot_run_here_for_the_reason_given(profiles):
    unmeasured = profiles.load_unmeasured(profiles.PROFILES)
    assert unmeasured
    for row in unmeasured:
        why = profiles.why_not(profiles.Row(row["preset"], row["who"]))
        assert why is not None and row["why"] == f"not measured here: {why}", row


def test_the_only_row_not_run_here_is_the_cages(profiles, remeasured):
    others = [r for r in profiles.load(profiles.PROFILES) if r["label"] not in remeasured]
    assert [r["target"]["kind"] for r in others] == ["cage"]
