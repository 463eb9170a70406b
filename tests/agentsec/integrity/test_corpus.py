"""The corpus through the real checks: each tampered case trips exactly the checks it names,
every catalogue ID is tripped by some case, and no honest case trips anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentsec.integrity import catalogue, checks, could
from agentsec.integrity.tree import DirectoryTrees
from tests.agentsec.integrity.corpus import CASES, Case, write


def run_case(case: Case, root: Path) -> checks.Outcome:
    before = write(root / "before", case.before)
    after = write(root / "after", case.after)
    return checks.run(DirectoryTrees(before, after))


@pytest.mark.parametrize("case", [c for c in CASES if not c.honest], ids=lambda c: c.name)
def test_tampered_case_trips_exactly_its_checks(case: Case, tmp_path: Path):
    outcome = run_case(case, tmp_path)
    found = {f.id for f in outcome.findings}
    assert found == case.expect, [f.as_dict() for f in outcome.findings]
    assert outcome.score > 0 or found == {"INT-017"}  # INT-017 alone weighs nothing


@pytest.mark.parametrize("case", [c for c in CASES if c.honest], ids=lambda c: c.name)
def test_honest_case_trips_nothing(case: Case, tmp_path: Path):
    outcome = run_case(case, tmp_path)
    assert outcome.findings == (), [f.as_dict() for f in outcome.findings]
    assert outcome.score == 0


def test_every_catalogue_id_is_exercised_by_a_tampered_case():
    """Every check of a change; those measured in a sandbox (could) are exercised in real
    bubblewrap by test_could.py."""
    exercised = {check_id for case in CASES if not case.honest for check_id in case.expect}
    assert set(catalogue.load().checks) - set(could.CHECK_IDS) <= exercised
    assert exercised <= set(catalogue.load().checks)  # and the corpus names no unknown ID


def test_false_positive_rate_on_honest_cases_is_zero(tmp_path: Path):
    honest = [c for c in CASES if c.honest]
    assert len(honest) >= 20
    flagged = [c.name for i, c in enumerate(honest) if run_case(c, tmp_path / str(i)).findings]
    rate = len(flagged) / len(honest)
    assert rate == 0, flagged


def test_the_corpus_covers_each_runner():
    names = " ".join(c.name for c in CASES)
    for runner in ("py-", "unittest-", "jest-", "vitest-", "node-test-", "ci-", "npm-"):
        assert f" {runner}" in f" {names}", runner
    for runner in ("honest-py-", "honest-unittest-", "honest-js-", "honest-vitest-",
                   "honest-node-test-", "honest-ci-"):
        assert runner in names, runner


# Where each configuration finding of the corpus is: (path, line, side). SARIF points at it.
CONFIG_LINES = {
    "py-pytest-ini-k": ("pytest.ini", 2, "after"),
    "py-setup-cfg-ignore": ("setup.cfg", 5, "after"),
    "py-tox-ini-deselect-and-plugin": ("tox.ini", 5, "after"),
    "py-pyproject-addopts": ("pyproject.toml", 5, "after"),
    "py-testpaths-narrowed": ("pytest.ini", 3, "after"),
    "jest-config-ignore": ("jest.config.js", 3, "after"),
    "jest-package-json-ignore": ("package.json", 1, "after"),
    "vitest-config-exclude": ("vitest.config.ts", 5, "after"),
    "npm-test-script-or-true": ("package.json", 1, "after"),
    "npm-test-script-removed": ("package.json", 1, "before"),
    "ci-or-true": (".github/workflows/ci.yml", 11, "after"),
}


@pytest.mark.parametrize("name", sorted(CONFIG_LINES))
def test_configuration_findings_point_at_the_setting(name: str, tmp_path: Path):
    (case,) = [c for c in CASES if c.name == name]
    findings = run_case(case, tmp_path).findings
    assert findings
    assert {(f.path, f.line, f.side) for f in findings} == {CONFIG_LINES[name]}


def test_a_jest_key_in_package_json_is_found_inside_its_object(tmp_path: Path):
    package = ('{\n  "name": "m",\n  "exclude": ["x"],\n  "scripts": {"test": "jest"},\n'
               '  "jest": {\n    "testPathIgnorePatterns": ["math"]\n  }\n}\n')
    before = {"package.json": '{"name": "m", "scripts": {"test": "jest"}}\n',
              "src/m.js": "export const a = 1;\n"}
    outcome = run_case(Case("t", before, {**before, "package.json": package},
                            frozenset({"INT-005"})), tmp_path)
    (finding,) = outcome.findings
    assert (finding.line, finding.path) == (6, "package.json")
    assert finding.evidence.startswith("jest.testPathIgnorePatterns gained")
