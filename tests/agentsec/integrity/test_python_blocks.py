"""Parsing a modified test file by its blocks (the blocks both sides share parsed once) finds
exactly what parsing each side whole finds, line numbers included; a cut the text cannot make
reliably (inside a multi-line string or bracket) falls back to the whole parse."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentsec.integrity import checks, python_blocks, python_tests
from agentsec.integrity.tree import DirectoryTrees
from tests.agentsec.integrity.corpus import CASES, d, write

# Each pair: (before, after). The after side moves, renames, adds and removes blocks.
DOCSTRING = d('''
    """Tests for calc.

    class NotATest:
    def test_not_a_test():
        assert False
    """
    import pytest

    from calc import add


    def test_add():
        assert add(1, 2) == 3
''')
TRICKY = {
    "module docstring with code at column 0": (DOCSTRING, DOCSTRING.replace(
        "def test_add():", "def test_add_two():")),
    # the cut takes the docstring's inside for a test, whose assertion the change weakens
    "a docstring changed where it reads as code": (DOCSTRING, DOCSTRING.replace(
        "assert False", "assert x")),
    "string at column 0 inside a call": (
        'import pytest\n\nx = f(\n"""\ndef test_fake():\n    pass\n""")\n\n\n'
        "def test_one():\n    assert x == 1\n",
        'import pytest\n\nx = f(\n"""\ndef test_fake():\n    pass\n""")\n\n\n'
        "def test_one():\n    assert x\n"),
    "try at top level": (
        "try:\n    import numpy\nexcept ImportError:\n    numpy = None\n\n\n"
        "def test_a():\n    assert numpy is None or numpy.pi > 3\n",
        "try:\n    import numpy\nexcept ImportError:\n    numpy = None\n\n\n"
        "@pytest.mark.skip\ndef test_a():\n    assert numpy is None or numpy.pi > 3\n"),
    "decorators stacked, blocks moved": (
        "import pytest\n\n\n@pytest.mark.parametrize('n', [1, 2])\n@pytest.mark.slow\n"
        "def test_n(n):\n    assert n > 0\n\n\ndef test_m():\n    assert 1 == 1\n",
        "import pytest\n\n\ndef test_m():\n    assert 1 == 1\n\n\n"
        "@pytest.mark.parametrize('n', [1, 2, 3])\n@pytest.mark.slow\n"
        "def test_n(n):\n    assert n > 0\n\n\npytestmark = pytest.mark.skip\n"),
    "class with a changed method": (
        "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        self.assertEqual(f(), 1)\n\n    def test_b(self):\n        self.assertTrue(g())\n",
        "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        self.assertTrue(f())\n\n    def test_b(self):\n        self.assertTrue(g())\n"),
    "backslash continuation": (
        "x = 1 + \\\n2\n\n\ndef test_x():\n    assert x == 3\n",
        "x = 1 + \\\n2\n\n\ndef test_x():\n    assert x\n"),
    "syntax error after": ("def test_x():\n    assert 1 == 1\n",
                           "def test_x():\n    assert 1 == 1\n\n\ndef broken(:\n    pass\n"),
    "indented first line": ("  x = 1\n", "  x = 2\n"),
    # the changed test_a comes first, an unchanged one of the same name after it
    "a test defined twice": (
        "def test_a():\n    assert f() == 1\n\n\ndef test_a():\n    assert g() == 2\n",
        "def test_a():\n    assert g() == 2\n"),
    "statements sharing a line, names that start like else": (
        "import pytest; import os\nelsewhere = 1\nfinally_ = pytest.mark.skip\n\n\n"
        "def test_a():\n    assert os.sep == '/'\n",
        "import pytest; import os\nelsewhere = 1\nfinally_ = pytest.mark.skip\n\n\n"
        "@finally_\ndef test_a():\n    assert os.sep\n"),
}


def _python_pairs() -> list[tuple[str, str, str]]:
    found = [(name, before, after) for name, (before, after) in TRICKY.items()]
    for case in CASES:
        for path, text in case.before.items():
            after = case.after.get(path)
            if path.endswith(".py") and after is not None and after != text and (
                "test" in path or path.endswith("conftest.py")
            ):
                found.append((f"{case.name}:{path}", text, after))
    return found


PAIRS = _python_pairs()


def _outcome(name: str, before: str, after: str, root: Path) -> tuple:
    path = "tests/conftest.py" if name.endswith("conftest.py") else "tests/test_x.py"
    trees = DirectoryTrees(write(root / "before", {path: before, "src/x.py": "X = 1\n"}),
                           write(root / "after", {path: after, "src/x.py": "X = 2\n"}))
    outcome = checks.run(trees)
    return [f.as_dict() for f in outcome.findings], outcome.tests_before, outcome.tests_after


@pytest.mark.parametrize(("name", "before", "after"), PAIRS, ids=[p[0] for p in PAIRS])
def test_blocks_find_what_the_whole_parse_finds(name: str, before: str, after: str,
                                                tmp_path: Path, monkeypatch):
    """The same findings, at the same lines, and the same test counts (the tests of the
    blocks both sides share are counted, not listed: they could only compare equal)."""
    by_blocks = _outcome(name, before, after, tmp_path / "blocks")
    monkeypatch.setattr(python_tests, "analyse_pair", python_tests.analyse_pair_whole)
    assert by_blocks == _outcome(name, before, after, tmp_path / "whole")


def test_the_corpus_takes_the_block_path():
    """The comparison above means something only if the blocks are used: most corpus files
    must be cut and parsed by their blocks, not fall back to the whole parse."""
    cut = [name for name, before, after in PAIRS if name not in TRICKY
           and (plan := python_blocks.plan(before, after)) is not None
           and python_tests._parse_plan("t.py", plan) is not None]
    assert len(cut) >= len(PAIRS) - len(TRICKY) - 2, len(cut)


@pytest.mark.parametrize("name", ["module docstring with code at column 0",
                                  "a docstring changed where it reads as code",
                                  "string at column 0 inside a call", "backslash continuation",
                                  "syntax error after", "indented first line"])
def test_a_cut_the_text_cannot_make_falls_back(name: str):
    before, after = TRICKY[name]
    plan = python_blocks.plan(before, after)
    assert plan is None or python_tests._parse_plan("t.py", plan) is None


def test_shared_blocks_keep_their_lines_on_each_side():
    """Listed when a module-level skip comes in with the change (every test inherits it), the
    shared tests are at their own lines on each side, and so is the skip."""
    before = "import pytest\n\n\ndef test_a():\n    assert 1 == 1\n"
    after = "import pytest\n\n\ndef test_new():\n    assert 2 == 2\n\n\n" \
            "def test_a():\n    assert 1 == 1\n\n\npytestmark = pytest.mark.skip\n"
    old, new = python_tests.analyse_pair("t.py", before, after)
    assert old is not None and new is not None
    assert [(t.name, t.line) for t in old.tests] == [("test_a", 4)]
    assert [(t.name, t.line) for t in new.tests] == [("test_new", 4), ("test_a", 8)]
    assert {m.line for t in new.tests for m in t.skips} == {12}


def test_shared_tests_are_counted_not_listed():
    before = "import pytest\n\n\n@pytest.mark.parametrize('n', [1, 2])\ndef test_a(n):\n" \
             "    assert n\n\n\ndef test_b():\n    assert 1 == 1\n"
    after = before.replace("assert 1 == 1", "assert 1 == 2")
    old, new = python_tests.analyse_pair("t.py", before, after)
    assert old is not None and new is not None
    assert [t.name for t in old.tests] == [t.name for t in new.tests] == ["test_b"]
    assert old.test_count == new.test_count == 3  # test_a's two cases, and test_b
