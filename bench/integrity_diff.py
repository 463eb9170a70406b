"""`agentsec integrity diff --repo` against `git diff --stat` of the same change, in one run.

A repository of 2,000 files is made in a temporary directory: 1,000 Python modules and 1,000
test files holding 5,000 tests (five each, a mix of pytest functions and unittest methods),
committed; then a 200-file change is committed on top: 100 modules refactored, and 100 test
files each given a new test and a renamed one (an honest change: it must score 0). Timed, in
turns, for the same two commits:
  git        `git diff --stat BASE HEAD` (the baseline: git reading the same change);
  service    the integrity checks run in this process (`checks.run` over `GitTrees`): what
             `integrity diff` costs beyond starting an interpreter;
  command    `agentsec integrity diff --repo DIR BASE HEAD --json`, the whole console script,
             interpreter start and imports included.
Printed: each median, and the service's and the command's ratio to git. Target: service < 5x.
The command's ratio is dominated by the interpreter's start (about 0.3 s here; `agentsec
--version` alone shows it), which no change to the checks can remove.

What the service spends its time on, and what was done about it, is in docs/integrity.md
("Speed"). The ratio moves with the machine's load (git's few milliseconds less than the
service's Python): compare two versions by running them in turns, e.g. an older checkout's
with PYTHONPATH=OLD/src, as docs/integrity.md's numbers were.

    .venv/bin/python bench/integrity_diff.py [--rounds 7] [--check]

With --check the exit code is 2 when the target is missed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentsec.integrity import checks
from agentsec.integrity.tree import GitTrees

MODULES, TESTS_PER_FILE, CHANGED_MODULES, CHANGED_TESTS = 1000, 5, 100, 100
TARGET = 5.0
AGENTSEC = str(Path(sys.executable).parent / "agentsec")
ENV = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.test",
       "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.test"}


def module(i: int, refactored: bool = False) -> str:
    body = ("    return sum(values) * factor\n" if refactored else
            "    total = 0\n    for value in values:\n        total += value * factor\n"
            "    return total\n")
    return (f'"""Module {i}."""\n\n\ndef scale_{i}(values, factor={i % 7 + 1}):\n{body}\n\n'
            f"def label_{i}(name):\n    return f\"{{name}}-{i}\"\n")


def test_file(i: int, changed: bool = False) -> str:
    first = "test_scale_renamed" if changed else "test_scale"
    extra = (f"\n\ndef test_scale_empty():\n    assert scale_{i}([]) == 0\n" if changed else "")
    return (
        f"import unittest\n\nimport pytest\n\nfrom pkg.mod_{i} import label_{i}, scale_{i}\n\n\n"
        f"def {first}():\n    assert scale_{i}([1, 2], 1) == 3\n\n\n"
        f"@pytest.mark.parametrize('n', [1, 2])\ndef test_label(n):\n"
        f"    assert label_{i}(str(n)) == f'{{n}}-{i}'\n\n\n"
        f"def test_raises():\n    with pytest.raises(TypeError):\n        scale_{i}(None)\n\n\n"
        f"class Label{i}Test(unittest.TestCase):\n    def test_plain(self):\n"
        f"        self.assertEqual(label_{i}('a'), 'a-{i}')\n\n"
        f"    def test_type(self):\n        self.assertIsInstance(label_{i}('b'), str)\n"
        + extra
    )


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=ENV).stdout


def build(root: Path) -> Path:
    repo = root / "repo"
    (repo / "src" / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    for i in range(MODULES):
        (repo / "src" / "pkg" / f"mod_{i}.py").write_text(module(i))
        (repo / "tests" / f"test_mod_{i}.py").write_text(test_file(i))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "tag", "base")
    step = MODULES // CHANGED_MODULES
    for i in range(0, MODULES, step):
        (repo / "src" / "pkg" / f"mod_{i}.py").write_text(module(i, refactored=True))
    for i in range(step // 2, MODULES, MODULES // CHANGED_TESTS):
        (repo / "tests" / f"test_mod_{i}.py").write_text(test_file(i, changed=True))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "change")
    return repo


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="agentsec-bench-integrity-"))
    try:
        repo = build(root)
        stat = git(repo, "diff", "--stat", "base", "HEAD").strip().splitlines()[-1]
        outcome = checks.run(GitTrees(repo, "base", "HEAD"))
        assert outcome.findings == (), [f.as_dict() for f in outcome.findings]
        print(f"repository: {2 * MODULES} files, {MODULES * TESTS_PER_FILE} tests; change:{stat}")
        print(f"tests in the changed files: {outcome.tests_before} before, "
              f"{outcome.tests_after} after; findings: {len(outcome.findings)}")
        times: dict[str, list[float]] = {"git": [], "service": [], "command": []}
        command = [AGENTSEC, "integrity", "diff", "--repo", str(repo), "base", "HEAD", "--json"]
        for _ in range(args.rounds):  # in turns, so load on the machine hits all alike
            times["git"].append(timed(lambda: git(repo, "diff", "--stat", "base", "HEAD")))
            times["service"].append(timed(lambda: checks.run(GitTrees(repo, "base", "HEAD"))))
            times["command"].append(timed(lambda: subprocess.run(
                command, check=True, capture_output=True, env=ENV)))
        medians = {name: statistics.median(values) for name, values in times.items()}
        for name, value in medians.items():
            print(f"{name:8} {value * 1000:8.1f} ms (median of {args.rounds})")
        service = medians["service"] / medians["git"]
        print(f"service: {service:.2f}x git diff --stat (target < {TARGET})")
        print(f"command: {medians['command'] / medians['git']:.2f}x git diff --stat "
              "(interpreter start and imports included)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.check and service >= TARGET:
        sys.exit(2)


if __name__ == "__main__":
    main()
