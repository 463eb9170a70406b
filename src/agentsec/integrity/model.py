"""What the analysers find in one file: plain, frozen data the checks compare before and after.

Python (``python_tests``) and JavaScript (``js_tests``) fill the same shapes, so one set of
checks covers both languages. Texts here are already shortened and cleaned for quoting.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentsec.catalogue import Severity
from agentsec.untrusted import clean_text

EVIDENCE_CHARS = 200  # the most code a finding ever quotes

# How much an assertion pins down. Weakening is a move down this scale.
TRIVIAL = 0  # can never fail: assert True, expect(1).toBe(1), assertEqual(x, x)
WEAK = 1  # checks truthiness or existence only: assert x, assertTrue, toBeDefined()
STRONG = 2  # checks a value, a relation, a specific exception


def quote(code: str, limit: int = EVIDENCE_CHARS) -> str:
    """Code from the tree, fit to quote: one line, controls replaced, at most ``limit`` chars."""
    return clean_text(" ".join(code.split()), limit)


@dataclass(frozen=True)
class Assertion:
    line: int
    text: str  # normalised source, quoted
    strength: int
    # For `assert f(x) == 3` and its kin: the checked expression, and the literal it must equal.
    subject: str | None = None
    expected: str | None = None


@dataclass(frozen=True)
class Marker:
    """A construct found at a line: a skip, an exit, a patch, a hook. ``key`` says which ones
    are the same construct in the trees before and after (line numbers move; keys do not)."""

    line: int
    key: str
    text: str
    # For patches: the module the patched target lives in: a top-level Python module name, "."
    # for a Python relative import, or the path a JavaScript module was imported by ("./x").
    # The checks decide whether that is the project's own code.
    module: str = ""


@dataclass(frozen=True)
class TestCase:
    __test__ = False  # not a pytest test class, though its name starts with "Test"

    path: str
    name: str  # qualified: Class.test_x, or "describe > it"
    line: int
    assertions: tuple[Assertion, ...]
    skips: tuple[Marker, ...] = ()
    focused: tuple[Marker, ...] = ()
    body_key: str = ""  # equal for two tests whose bodies are the same code
    cases: int = 1  # how many tests a runner collects from it (parametrize cases)


@dataclass(frozen=True)
class FunctionBody:
    """A function in source code, for the stub check."""

    name: str  # qualified
    line: int
    stub: str | None  # what its whole body is, when that is a stub ("return 0", "pass")


@dataclass(frozen=True)
class FileAnalysis:
    path: str
    tests: tuple[TestCase, ...] = ()
    patches: tuple[Marker, ...] = ()
    exits: tuple[Marker, ...] = ()
    hooks: tuple[Marker, ...] = ()
    functions: tuple[FunctionBody, ...] = ()
    # Why the file could not be analysed (then everything else is empty).
    problem: str | None = None
    # Tests counted and not listed: the unchanged code both sides of a file share, whose tests
    # could only compare equal (python_tests.analyse_pair).
    unlisted_cases: int = 0

    @property
    def test_count(self) -> int:
        return sum(t.cases for t in self.tests) + self.unlisted_cases


@dataclass(frozen=True)
class Hit:
    """One occurrence of a check: the catalogue turns it into a finding (title, severity,
    points). ``line`` is 0 when unknown; evidence is already quoted."""

    check_id: str
    path: str
    line: int
    evidence: str
    side: str = "after"  # which tree `line` is in: "before" for what the change removed


@dataclass(frozen=True)
class Finding:
    """A hit as the report lists it: the catalogue's title, severity and points added."""

    id: str
    title: str
    severity: Severity
    points: int
    path: str
    line: int | None
    side: str  # "before" or "after": the tree `line` is in; "sandbox" for what could measured
    evidence: str

    def as_dict(self) -> dict[str, object]:
        return {"id": self.id, "title": self.title, "severity": self.severity,
                "points": self.points, "path": self.path, "line": self.line,
                "side": self.side, "evidence": self.evidence}
