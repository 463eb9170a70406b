"""Running the catalogue over a change: read what differs, analyse it, compare, score.

The service of ``agentsec integrity diff``: it takes the two trees and returns plain data (an
``Outcome``); the command formats it. Each detector is a function of the analysed change that
returns hits for the IDs it declares in ``DETECTORS``; the catalogue and that registry must name
the same IDs, so no check can fire without a title and weight, and no entry sits idle.

A change is judged by what it removes or weakens, never by what it adds: new tests, stricter
assertions and changed code under unchanged tests produce nothing. Tests are matched across the
change by file and name, then by identical body, then by name in another file, then by keeping
every assertion: a renamed or moved test that keeps its assertions is the same test.
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

from agentsec.catalogue import SEVERITY_ORDER
from agentsec.errors import CatalogueError
from agentsec.integrity import catalogue, js_tests, python_tests
from agentsec.integrity import config_checks as cfg
from agentsec.integrity.model import (
    STRONG,
    WEAK,
    FileAnalysis,
    Finding,
    Hit,
    Marker,
    TestCase,
    quote,
)
from agentsec.integrity.paths import (
    FIXTURE_DIRS,
    JS_SUFFIXES,
    TEST_DIRS,
    Kind,
    kind_of,
    python_module_roots,
)
from agentsec.integrity.tree import MAX_FILE_BYTES, Changed, Content, Location, Side, Trees
from agentsec.untrusted import clean_text

T = TypeVar("T")
MAX_SCORE = 100
MAX_FINDINGS = 1000  # the document lists at most this many; the score counts them all
_BINARY_SNIFF = 8192
_TEST_KINDS = (Kind.PY_TEST, Kind.PY_CONFTEST, Kind.JS_TEST)
SIDES: tuple[Side, Side] = ("before", "after")
_READ_KINDS = frozenset({*_TEST_KINDS, Kind.SOURCE, Kind.PYTEST_CONFIG, Kind.JS_CONFIG,
                         Kind.PACKAGE_JSON, Kind.WORKFLOW})


@dataclass(frozen=True)
class Outcome:
    before: Location
    after: Location
    findings: tuple[Finding, ...]
    files_changed: int
    files_analysed: int
    tests_before: int  # in the changed files, counted statically
    tests_after: int

    @property
    def raw_score(self) -> int:
        return sum(f.points for f in self.findings)

    @property
    def score(self) -> int:
        return min(self.raw_score, MAX_SCORE)

    def by_severity(self) -> dict[str, int]:
        counts = Counter(f.severity for f in self.findings)
        return {severity: counts.get(severity, 0) for severity in SEVERITY_ORDER}


def decode(content: Content) -> tuple[str | None, str | None]:
    """(text, None), or (None, why the file is not analysed): too large, binary, not UTF-8."""
    if content.truncated:
        return None, f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB: not analysed"
    if b"\0" in content.data[:_BINARY_SNIFF]:
        return None, "binary (holds NUL bytes): not analysed"
    try:
        return content.data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 (byte {exc.start}): not analysed"


@dataclass
class Change:
    """The change, analysed: what every detector reads."""

    trees: Trees
    changes: list[Changed]
    kinds: dict[str, Kind]
    texts: dict[Side, dict[str, str]]
    problems: dict[str, tuple[Side, str]] = field(default_factory=dict)
    tests: dict[Side, dict[str, FileAnalysis]] = field(default_factory=dict)
    sources: dict[Side, dict[str, FileAnalysis]] = field(default_factory=dict)

    @cached_property
    def status(self) -> dict[str, str]:
        return {c.path: c.status for c in self.changes}

    @cached_property
    def source_changed(self) -> bool:
        return any(kind is Kind.SOURCE for kind in self.kinds.values())

    @cached_property
    def python_roots(self) -> frozenset[str]:
        """The project's own top-level Python modules (reads the after tree's path list)."""
        return python_module_roots(self.trees.paths("after"))

    def analysed(self, side: Side, kinds: Iterable[Kind]) -> dict[str, str]:
        wanted = set(kinds)
        return {p: t for p, t in self.texts[side].items() if self.kinds[p] in wanted}


def _analyse_tests(change: Change) -> None:
    change.tests = {"before": {}, "after": {}}
    python: set[str] = set()
    for side in SIDES:
        for path, text in change.analysed(side, _TEST_KINDS).items():
            if change.kinds[path] is Kind.JS_TEST:
                change.tests[side][path] = js_tests.analyse_test(path, text)
            else:
                python.add(path)
    for path in sorted(python):
        analyses = python_tests.analyse_pair(
            path, change.texts["before"].get(path), change.texts["after"].get(path),
            conftest=change.kinds[path] is Kind.PY_CONFTEST)
        for side, analysis in zip(SIDES, analyses):
            if analysis is not None:
                change.tests[side][path] = analysis
    for side in SIDES:
        for path, analysis in change.tests[side].items():
            if analysis.problem:
                change.problems.setdefault(path, (side, analysis.problem))
    # A file one side cannot read tells nothing about its tests: its tests are left out of
    # both sides rather than reported as deleted or counted as gone.
    for path in change.problems:
        for side in SIDES:
            change.tests[side].pop(path, None)


def _analyse_source(change: Change, side: Side, path: str) -> FileAnalysis | None:
    text = change.texts[side].get(path)
    if text is None:
        return None
    cache = change.sources.setdefault(side, {})
    if path not in cache:
        if path.endswith(".py"):
            cache[path] = python_tests.analyse_source(path, text)
        elif posixpath.splitext(path)[1] in JS_SUFFIXES:
            cache[path] = js_tests.analyse_source(path, text)
        else:
            return None
        if cache[path].problem:
            change.problems.setdefault(path, (side, cache[path].problem or ""))
    return cache[path]


# ---- matching tests across the change


def _lookup(tests: dict[int, TestCase],
            key: Callable[[TestCase], str]) -> Callable[[TestCase], list[TestCase]]:
    """Candidates whose key equals a test's, in the order of ``tests``."""
    index: dict[str, list[TestCase]] = defaultdict(list)
    for test in tests.values():
        index[key(test)].append(test)
    return lambda test: index.get(key(test), [])


def _keeping_assertions(old: TestCase, tests: dict[int, TestCase]) -> list[TestCase]:
    if not old.assertions:
        return []
    wanted = Counter(a.text for a in old.assertions)
    return [t for t in tests.values() if not wanted - Counter(a.text for a in t.assertions)]


def _pair(before: list[TestCase], after: list[TestCase]):
    """(pairs of the same test before and after, tests gone, tests new)."""
    pairs: list[tuple[TestCase, TestCase]] = []

    def _match(left: list[TestCase], unused: dict[int, TestCase],
               candidates_of: Callable[[TestCase], Iterable[TestCase]]) -> list[TestCase]:
        still: list[TestCase] = []
        for test in left:
            candidates = [t for t in candidates_of(test) if id(t) in unused]
            candidates.sort(key=lambda t: t.path != test.path)  # the same file first
            if candidates:
                pairs.append((test, candidates[0]))
                del unused[id(candidates[0])]
            else:
                still.append(test)
        return still

    unused = {id(t): t for t in after}
    by_name: dict[tuple[str, str], list[TestCase]] = defaultdict(list)
    for test in after:
        by_name[(test.path, test.name)].append(test)
    left: list[TestCase] = []
    for test in before:
        same = [t for t in by_name.get((test.path, test.name), []) if id(t) in unused]
        if same:
            pairs.append((test, same[0]))
            del unused[id(same[0])]
        else:
            left.append(test)
    # Then by identical body, then by name in another file (each looked up, not searched),
    # then by keeping every assertion; among candidates, the same file first.
    left = _match(left, unused, _lookup(unused, lambda t: t.body_key))
    left = _match(left, unused, _lookup(unused, lambda t: t.name))
    left = _match(left, unused, lambda old: _keeping_assertions(old, unused))
    return pairs, left, list(unused.values())


def _assertions(count: int) -> str:
    return f"{count} assertion" if count == 1 else f"{count} assertions"


def _strength_at_least(test: TestCase, level: int) -> int:
    return sum(1 for a in test.assertions if a.strength >= level)


def _same_assertions(old: TestCase, new: TestCase) -> bool:
    """Whether two tests check the same things the same way (their lines aside)."""
    return len(old.assertions) == len(new.assertions) and all(
        (a.text, a.strength, a.subject, a.expected) == (b.text, b.strength, b.subject, b.expected)
        for a, b in zip(old.assertions, new.assertions))


def _compare(old: TestCase, new: TestCase, source_changed: bool) -> list[Hit]:
    if _same_assertions(old, new):
        return []
    hits: list[Hit] = []
    name = quote(new.name, 80)
    removed = Counter(a.text for a in old.assertions) - Counter(a.text for a in new.assertions)
    added = Counter(a.text for a in new.assertions) - Counter(a.text for a in old.assertions)
    if len(new.assertions) < len(old.assertions):
        gone = next(iter(removed), "")
        hits.append(Hit("INT-007", new.path, new.line,
                        f"{name}: {_assertions(len(old.assertions))} → {len(new.assertions)}"
                        + (f" (removed `{quote(gone, 100)}`)" if gone else "")))
    elif any(_strength_at_least(new, level) < _strength_at_least(old, level)
             for level in (STRONG, WEAK)):
        strongest = max((a for a in old.assertions if a.text in removed),
                        key=lambda a: a.strength, default=None)
        weakest = min((a for a in new.assertions if a.text in added),
                      key=lambda a: a.strength, default=None)
        shown = (f"`{quote(strongest.text, 90)}` → `{quote(weakest.text, 90)}`"
                 if strongest and weakest else "weaker assertions")
        hits.append(Hit("INT-008", new.path, weakest.line if weakest else new.line,
                        f"{name}: {shown}"))
    if source_changed:
        hits += _expected_changes(old, new, name)
    return hits


def _expected_changes(old: TestCase, new: TestCase, name: str) -> list[Hit]:
    was: dict[str, set[str]] = defaultdict(set)
    for a in old.assertions:
        if a.subject is not None and a.expected is not None:
            was[a.subject].add(a.expected)
    hits: list[Hit] = []
    seen: set[str] = set()
    for a in new.assertions:
        if a.subject is None or a.expected is None or a.subject not in was or a.subject in seen:
            continue
        if a.expected not in was[a.subject]:
            seen.add(a.subject)
            old_value = sorted(was[a.subject])[0]
            hits.append(Hit("INT-009", new.path, a.line,
                            f"{name}: `{quote(a.subject, 60)}` expected `{quote(old_value, 40)}`"
                            f" → `{quote(a.expected, 40)}`"))
    return hits


def _new_markers(old: tuple[Marker, ...], new: tuple[Marker, ...]) -> list[Marker]:
    if not new:
        return []
    count = Counter(m.key for m in old)
    found: list[Marker] = []
    for marker in new:
        if count[marker.key] > 0:
            count[marker.key] -= 1
        else:
            found.append(marker)
    return found


class _Once:
    """Hits for markers shared by many tests (a class's or a describe's skip): one per
    marker, naming how many tests it reaches."""

    def __init__(self, check_id: str, what: str) -> None:
        self.check_id, self.what = check_id, what
        self.tests: dict[tuple[str, int, str], list[str]] = {}
        self.text: dict[tuple[str, int, str], str] = {}

    def add(self, test: TestCase, marker: Marker) -> None:
        key = (test.path, marker.line, marker.key)
        self.tests.setdefault(key, []).append(test.name)
        self.text[key] = marker.text

    def hits(self) -> list[Hit]:
        found: list[Hit] = []
        for (path, line, key), names in self.tests.items():
            reach = quote(names[0], 80) if len(names) == 1 else f"{len(names)} tests"
            shown = quote(self.text[(path, line, key)], 100)
            found.append(Hit(self.check_id, path, line, f"{reach} {self.what} by `{shown}`"))
        return found


def detect_tests(change: Change) -> list[Hit]:
    before = [t for a in change.tests["before"].values() for t in a.tests]
    after = [t for a in change.tests["after"].values() for t in a.tests]
    pairs, gone, new = _pair(before, after)
    hits: list[Hit] = []
    skipped, focused = _Once("INT-003", "skipped"), _Once("INT-004", "focused")
    for old, now in pairs:
        hits += _compare(old, now, change.source_changed)
        for marker in _new_markers(old.skips, now.skips):
            skipped.add(now, marker)
        for marker in _new_markers(old.focused, now.focused):
            focused.add(now, marker)
    for now in new:
        for marker in now.focused:
            focused.add(now, marker)
    hits += skipped.hits() + focused.hits()
    paired_paths = {old.path for old, _ in pairs}
    gone_by_path: dict[str, list[TestCase]] = defaultdict(list)
    for test in gone:
        gone_by_path[test.path].append(test)
    for path, tests in sorted(gone_by_path.items()):
        if change.status.get(path) == "deleted" and path not in paired_paths:
            asserts = sum(len(t.assertions) for t in tests)
            hits.append(Hit("INT-001", path, 0,
                            f"{len(tests)} tests with {_assertions(asserts)}, found nowhere after",
                            side="before"))
            continue
        for test in tests:
            hits.append(Hit("INT-002", path, test.line,
                            f"{quote(test.name, 100)} ({_assertions(len(test.assertions))})",
                            side="before"))
    hits += _count(change)
    return hits


def _count(change: Change) -> list[Hit]:
    old = {p: a.test_count for p, a in change.tests["before"].items()}
    new = {p: a.test_count for p, a in change.tests["after"].items()}
    total_old, total_new = sum(old.values()), sum(new.values())
    if total_new >= total_old:
        return []
    worst = max(old, key=lambda p: old[p] - new.get(p, 0))
    return [Hit("INT-014", worst, 0,
                f"{total_old} tests → {total_new} in the changed files "
                f"({worst}: {old[worst]} → {new.get(worst, 0)})")]


# ---- markers: skips of whole files, patches, exits, hooks


def _marker_hits(change: Change, check_id: str, field_name: str,
                 keep: Callable[[str, Marker], bool] | None = None) -> list[Hit]:
    def markers(side: Side) -> list[tuple[str, Marker]]:
        return [(path, m) for path, a in sorted(change.tests[side].items())
                for m in getattr(a, field_name) if keep is None or keep(path, m)]

    old, new = markers("before"), markers("after")
    remaining = Counter(m.key for _, m in old)
    per_file_old = Counter((p, m.key) for p, m in old)
    per_file_new: Counter[tuple[str, str]] = Counter()
    extra: list[tuple[str, Marker]] = []
    for path, marker in new:
        per_file_new[(path, marker.key)] += 1
        extra.append((path, marker))
    # A marker is new when the change adds more of it than it removes anywhere; those in files
    # that gained it are the ones reported.
    extra.sort(key=lambda pm: per_file_new[(pm[0], pm[1].key)] <= per_file_old[(pm[0], pm[1].key)])
    hits: list[Hit] = []
    for path, marker in extra:
        if remaining[marker.key] > 0:
            remaining[marker.key] -= 1
            continue
        hits.append(Hit(check_id, path, marker.line, f"`{marker.text}`"))
    return hits


def _local_patch(change: Change, path: str, marker: Marker) -> bool:
    module = marker.module
    if module == ".":
        return True
    if module.startswith(("./", "../")):
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), module))
        parts = resolved.split("/")
        return not resolved.startswith("..") and not any(
            p in TEST_DIRS or p in FIXTURE_DIRS or p == "__mocks__" for p in parts[:-1]
        )
    if module.startswith(("/", "@/", "~/", "src/")):
        return True
    return module in change.python_roots


def detect_markers(change: Change) -> list[Hit]:
    return (
        _marker_hits(change, "INT-011", "patches", lambda p, m: _local_patch(change, p, m))
        + _marker_hits(change, "INT-013", "exits")
        + _marker_hits(change, "INT-006", "hooks")
    )


# ---- stubs


# A line a stub body could be (Python), or a stub body (JavaScript): a source file is parsed
# only when its after side holds one. A false alarm costs a parse; a miss would cost a finding,
# so these are wider than the stubs themselves.
_PY_STUB_LINE = re.compile(
    r"^[ \t]+(?:pass|\.\.\.|raise[ \t]+NotImplementedError\b.*|[rRbBuU]?(?:\"\"\"|\'\'\'|\"|\').*"
    r"|return(?:[ \t]+(?:None|True|False|-?[\d.][\w.]*|'[^'\n]*'|\"[^\"\n]*\"|\[\]|\{\}|\(\)"
    r"|[\[({][^\n]*))?)[ \t]*(?:#.*)?$",
    re.MULTILINE,
)
_JS_STUB = re.compile(
    r"\{\s*\}|\breturn\b\s*[^;\n(]*;?\s*\}|\bthrow\s+new\b|=>\s*[-\w'\"`.]+\s*[;,)\n]"
)


def _may_hold_stub(path: str, text: str) -> bool:
    pattern = _PY_STUB_LINE if path.endswith(".py") else _JS_STUB
    return pattern.search(text) is not None


def detect_stubs(change: Change) -> list[Hit]:
    candidates: list[tuple[str, int, str, str]] = []  # path, line, name, stub
    stubbed: list[tuple[str, FileAnalysis]] = []
    for item in change.changes:
        if change.kinds[item.path] is not Kind.SOURCE or item.status != "modified":
            continue
        text = change.texts["after"].get(item.path)
        if text is None or not _may_hold_stub(item.path, text):
            continue
        after = _analyse_source(change, "after", item.path)
        if after is not None and any(f.stub for f in after.functions):
            stubbed.append((item.path, after))
    _read_into(change, [("before", path) for path, _ in stubbed])
    for path, after in stubbed:
        before = _analyse_source(change, "before", path)
        if before is None:
            continue
        worked = {f.name for f in before.functions if f.stub is None}
        candidates += [(path, f.line, f.name, f.stub) for f in after.functions
                       if f.stub and f.name in worked]
    if not candidates:
        return []
    test_paths: list[tuple[Side, str]] = [
        ("after", p) for p in change.trees.paths("after") if kind_of(p) in _TEST_KINDS
    ]
    texts = {}
    for (_, path), content in change.trees.read(test_paths).items():
        text, _ = decode(content)
        if text is not None:
            texts[path] = text
    hits: list[Hit] = []
    for path, line, name, stub in candidates:
        short = name.rsplit(".", 1)[-1]
        word = re.compile(rf"(?<![\w$]){re.escape(short)}(?![\w$])")
        callers = sorted(p for p, text in texts.items() if word.search(text))
        if callers:
            hits.append(Hit("INT-012", path, line,
                            f"{quote(name, 60)}: body is now `{quote(stub, 60)}`; named in "
                            f"{quote(callers[0], 80)}"
                            + (f" and {len(callers) - 1} more" if len(callers) > 1 else "")))
    return hits


# ---- fixtures, configuration, CI


def detect_fixtures(change: Change) -> list[Hit]:
    if not change.source_changed:
        return []
    return [Hit("INT-010", c.path, 0, f"{c.status} with source code in the same change",
                side="before" if c.status == "deleted" else "after")
            for c in change.changes if change.kinds[c.path] is Kind.FIXTURE
            and c.status != "added"]


def _read_configs(
    change: Change, kind: Kind, reader: Callable[[str, str], T | str]
) -> dict[Side, dict[str, T]]:
    """Each side's files of one kind, read; a file that cannot be read is a problem noted."""
    found: dict[Side, dict[str, T]] = {"before": {}, "after": {}}
    for side in SIDES:
        for path, text in change.analysed(side, (kind,)).items():
            value = reader(path, text)
            if isinstance(value, str):
                change.problems.setdefault(path, (side, value))
            else:
                found[side][path] = value
    return found


def detect_config(change: Change) -> list[Hit]:
    pytest_cfg = _read_configs(change, Kind.PYTEST_CONFIG, cfg.read_pytest_config)
    js_cfg = _read_configs(change, Kind.JS_CONFIG, cfg.read_js_config)
    packages = _read_configs(change, Kind.PACKAGE_JSON, cfg.read_package_json)
    for side in SIDES:
        for path, package in packages[side].items():
            js_cfg[side][path] = package.jest
    hits = cfg.pytest_config_hits(pytest_cfg["before"], pytest_cfg["after"])
    hits += cfg.js_config_hits(js_cfg["before"], js_cfg["after"])
    for path in sorted(set(packages["before"]) | set(packages["after"])):
        hits += cfg.script_hits(path, packages["before"].get(path), packages["after"].get(path))
    workflows = _read_configs(change, Kind.WORKFLOW, cfg.read_workflow)
    hits += cfg.workflow_hits(workflows["before"], workflows["after"])
    return hits


def detect_unanalysed(change: Change) -> list[Hit]:
    return [Hit("INT-017", path, 0, clean_text(why, 160), side=side)
            for path, (side, why) in sorted(change.problems.items())]


# Every detector, and the IDs it may return. The catalogue must list exactly these IDs.
DETECTORS: tuple[tuple[tuple[str, ...], Callable[[Change], list[Hit]]], ...] = (
    (("INT-001", "INT-002", "INT-003", "INT-004", "INT-007", "INT-008", "INT-009", "INT-014"),
     detect_tests),
    (("INT-006", "INT-011", "INT-013"), detect_markers),
    (("INT-012",), detect_stubs),
    (("INT-010",), detect_fixtures),
    (("INT-005", "INT-015", "INT-016"), detect_config),
    (("INT-017",), detect_unanalysed),  # last: the others add the problems they meet
)


def registry_ids() -> set[str]:
    return {check_id for ids, _ in DETECTORS for check_id in ids}


def _verify_registry(known: set[str]) -> None:
    from agentsec.integrity.could import CHECK_IDS as measured_in_the_sandbox

    declared = registry_ids() | set(measured_in_the_sandbox)
    if declared != known:
        raise CatalogueError(
            "integrity catalogue and detectors disagree: "
            f"no detector for {sorted(known - declared)}, no entry for {sorted(declared - known)}"
        )


def _read_into(change: Change, keys: list[tuple[Side, str]]) -> None:
    for (side, path), content in change.trees.read(keys).items():
        text, problem = decode(content)
        if text is None:
            change.problems.setdefault(path, (side, problem or ""))
        else:
            change.texts[side][path] = text


def read_change(trees: Trees) -> Change:
    """The change with every changed file that a check reads, decoded (or noted as not)."""
    changes = trees.changes()
    kinds = {c.path: kind_of(c.path) for c in changes}
    change = Change(trees, changes, kinds, {"before": {}, "after": {}})
    wanted = [c for c in changes if kinds[c.path] in _READ_KINDS]
    # Source files are read for the stub check only, and only when modified; other languages'
    # source is not analysed at all.
    wanted = [c for c in wanted if kinds[c.path] is not Kind.SOURCE or (
        c.status == "modified" and (c.path.endswith(".py")
                                    or posixpath.splitext(c.path)[1] in JS_SUFFIXES))]
    # Of a source file only the after side is read here; its before side only when the after
    # side shows a stub (detect_stubs).
    keys: list[tuple[Side, str]] = [
        (side, c.path) for side, absent in zip(SIDES, ("added", "deleted")) for c in wanted
        if c.status != absent and (side == "after" or kinds[c.path] is not Kind.SOURCE)
    ]
    _read_into(change, keys)
    # Neither side of a file that one side cannot read is analysed: half a comparison would
    # read as everything deleted or everything added.
    for path in change.problems:
        for side in SIDES:
            change.texts[side].pop(path, None)
    return change


def run(trees: Trees) -> Outcome:
    """Every check over the change between the two trees."""
    specs = catalogue.load()
    _verify_registry(set(specs.checks))
    change = read_change(trees)
    _analyse_tests(change)
    hits: list[Hit] = []
    for ids, detector in DETECTORS:
        for hit in detector(change):
            if hit.check_id not in ids:
                raise CatalogueError(f"{detector.__name__} returned {hit.check_id}")
            hits.append(hit)
    findings = [
        Finding(
            id=hit.check_id,
            title=specs.check(hit.check_id).title,
            severity=specs.check(hit.check_id).severity,
            points=specs.points_of(hit.check_id),
            path=clean_text(hit.path, 200),
            line=hit.line or None,
            side=hit.side,
            evidence=clean_text(hit.evidence, 240),
        )
        for hit in hits
    ]
    order = {severity: rank for rank, severity in enumerate(SEVERITY_ORDER)}
    findings.sort(key=lambda f: (order[f.severity], f.id, f.path, f.line or 0))
    return Outcome(
        before=trees.before,
        after=trees.after,
        findings=tuple(findings),
        files_changed=len(change.changes),
        files_analysed=len(set(change.texts["before"]) | set(change.texts["after"])),
        tests_before=sum(a.test_count for a in change.tests["before"].values()),
        tests_after=sum(a.test_count for a in change.tests["after"].values()),
    )
