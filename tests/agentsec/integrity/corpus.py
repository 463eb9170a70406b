# ruff: noqa: E501  (the corpus is data: a case per line reads as a table, its edits whole)
"""The corpus: small changes, each a tree before and after, with the checks it must trip.

A tampered case names every check ID it must produce and no other (its verdict per check: the
IDs listed fire, every other ID stays silent); an honest case must produce nothing at all. The
trees are written by the tests (``write``), so every case is plain text here.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

Files = dict[str, str]


def d(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


@dataclass(frozen=True)
class Case:
    name: str
    before: Files
    after: Files
    expect: frozenset[str] = field(default_factory=frozenset)  # empty: an honest change

    @property
    def honest(self) -> bool:
        return not self.expect


def write(root: Path, files: Files) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def changed(base: Files, **edits: str | None) -> Files:
    """``base`` with files replaced (``None``: deleted). Keys use '__' for '/' and '_dot_'
    for '.', so that they can be keyword arguments; see ``_path``."""
    out = dict(base)
    for key, text in edits.items():
        path = _path(key)
        if text is None:
            out.pop(path, None)
        else:
            out[path] = text
    return out


def _path(key: str) -> str:
    return key.replace("__", "/").replace("_dot_", ".")


# ---- Python: a small package and its pytest tests

CALC = d('''
    def add(a, b):
        return a + b


    def mul(a, b):
        total = 0
        for _ in range(b):
            total = add(total, a)
        return total


    def parse(text):
        if not text.strip():
            raise ValueError("empty")
        return int(text)
''')
CALC_REFACTORED = d('''
    def add(a, b):
        """The sum."""
        return sum((a, b))


    def mul(a, b):
        return a * b


    def parse(text):
        text = text.strip()
        if not text:
            raise ValueError("empty")
        return int(text)
''')
PY_TESTS = d('''
    import pytest

    from calc.core import add, mul, parse


    def test_add():
        assert add(1, 2) == 3
        assert add(-1, 1) == 0


    def test_mul():
        assert mul(2, 3) == 6


    def test_parse_rejects_empty():
        with pytest.raises(ValueError):
            parse("  ")


    class TestParse:
        def test_number(self):
            assert parse(" 42 ") == 42
''')
PY = {"src/calc/__init__.py": "", "src/calc/core.py": CALC, "tests/test_calc.py": PY_TESTS}


def py(after_tests: str | None = None, **edits: str | None) -> Files:
    files = changed(PY, **edits)
    if after_tests is not None:
        files["tests/test_calc.py"] = after_tests
    return files


def sub(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


UNITTEST = d('''
    import unittest

    from calc.core import add, parse


    class AddTest(unittest.TestCase):
        def test_add(self):
            self.assertEqual(add(1, 2), 3)

        def test_parse(self):
            self.assertEqual(parse("7"), 7)
            with self.assertRaises(ValueError):
                parse("")
''')
UT = {**PY, "tests/test_unit.py": UNITTEST}
CONFTEST = d('''
    import pytest


    @pytest.fixture
    def numbers():
        return [1, 2, 3]
''')
WORKFLOW = d('''
    name: ci
    on: [push, pull_request]
    jobs:
      test:
        runs-on: ubuntu-latest
        steps:
          - uses: actions/checkout@v4
          - name: Install
            run: pip install -e .
          - name: Run tests
            run: pytest tests/
''')
CI = {**PY, ".github/workflows/ci.yml": WORKFLOW}
PYTEST_INI = d('''
    [pytest]
    addopts = -ra
    testpaths = tests
''')

# ---- JavaScript: jest, vitest and node:test

MATH = d('''
    export function add(a, b) {
      return a + b;
    }

    export const double = (x) => add(x, x);
''')
MATH_REFACTORED = d('''
    export function add(a, b) {
      const sum = a + b;
      return sum;
    }

    export const double = (x) => 2 * x;
''')
JEST = d('''
    import { add, double } from '../src/math.js';

    describe('math', () => {
      it('adds', () => {
        expect(add(1, 2)).toBe(3);
        expect(add(-1, 1)).toBe(0);
      });

      it('doubles', () => {
        expect(double(4)).toEqual(8);
      });
    });

    test('strings and comments are not tests', () => {
      const s = "it.skip('no')"; // it.only('nor this')
      expect(s.length).toBeGreaterThan(3);
    });
''')
JS = {"src/math.js": MATH, "test/math.test.js": JEST,
      "package.json": '{"name": "m", "scripts": {"test": "jest"}}\n'}


def js(after_tests: str | None = None, **edits: str | None) -> Files:
    files = changed(JS, **edits)
    if after_tests is not None:
        files["test/math.test.js"] = after_tests
    return files


VITEST = d('''
    import { describe, it, expect, test } from 'vitest';
    import * as math from '../src/math.js';

    describe('vitest math', () => {
      it('adds', () => {
        expect(math.add(2, 2)).toStrictEqual(4);
      });
      test.each([[1, 2], [3, 6]])('doubles %i', (x, y) => {
        expect(math.double(x)).toBe(y);
      });
    });
''')
VITEST_CONFIG = d('''
    import { defineConfig } from 'vitest/config';
    export default defineConfig({
      test: {
        include: ['test/**/*.test.ts'],
        exclude: ['node_modules'],
      },
    });
''')
VT = {"src/math.js": MATH, "test/math.test.ts": VITEST, "vitest.config.ts": VITEST_CONFIG}
NODE = d('''
    import test from 'node:test';
    import assert from 'node:assert/strict';
    import { add } from '../src/math.js';

    test('adds', () => {
      assert.strictEqual(add(1, 2), 3);
    });

    test('adds with a template name `${1}`', async (t) => {
      await t.test('inner', () => {
        assert.deepStrictEqual([add(1, 1)], [2]);
      });
    });

    test('negatives', () => {
      assert.equal(add(-2, -3), -5);
      assert.ok(/\\d+/.test(String(add(1, 1))));
    });
''')
NT = {"src/math.js": MATH, "test/math.test.mjs": NODE}
JEST_CONFIG = d('''
    module.exports = {
      testEnvironment: 'node',
      testPathIgnorePatterns: ['/node_modules/'],
    };
''')

# ---- JavaScript and TypeScript: the code under test in class and object methods

CALC_CLASS = d('''
    export class Calculator {
      constructor(base = 0) {
        this.base = base;
      }

      add(a, b) {
        return this.base + a + b;
      }

      get offset() {
        return this.base;
      }

      static version() {
        return '1.0';
      }
    }

    export const units = {
      toCents(amount) {
        return Math.round(amount * 100);
      },
      fromCents: (cents) => cents / 100,
    };
''')
CLASS_TESTS = d('''
    import { Calculator, units } from '../src/calc.js';

    describe('Calculator', () => {
      it('adds', () => {
        expect(new Calculator(1).add(2, 3)).toBe(6);
        expect(Calculator.version()).toMatch(/^1\\./);
      });
    });

    test('cents', () => {
      expect(units.toCents(1.5)).toBe(150);
      expect(units.fromCents(250)).toBe(2.5);
    });
''')
JSC = {"src/calc.js": CALC_CLASS, "test/calc.test.js": CLASS_TESTS,
       "package.json": '{"name": "c", "scripts": {"test": "jest"}}\n'}
CALC_TS = d('''
    export class Parser {
      private readonly radix: number = 10;

      parse(text: string): number {
        const value = Number.parseInt(text.trim(), this.radix);
        if (Number.isNaN(value)) {
          throw new Error(`not a number: ${text}`);
        }
        return value;
      }

      parseAll(texts: string[]): number[] {
        return texts.map((t) => this.parse(t));
      }
    }
''')
TS = {"src/parser.ts": CALC_TS, "test/parser.test.ts": d('''
    import { Parser } from '../src/parser';

    it('parses', () => {
      expect(new Parser().parse(' 42 ')).toBe(42);
      expect(new Parser().parseAll(['1', '2'])).toEqual([1, 2]);
    });
''')}


def jsc(**edits: str | None) -> Files:
    return changed(JSC, **edits)


CASES: list[Case] = [
    # ---- tampered: Python (pytest)
    Case("py-test-file-deleted", PY, py(tests__test_calc_dot_py=None),
         frozenset({"INT-001", "INT-014"})),
    Case("py-test-deleted", PY, py(sub(PY_TESTS, '''def test_mul():
    assert mul(2, 3) == 6


''', "")), frozenset({"INT-002", "INT-014"})),
    Case("py-skip-marker", PY, py(sub(PY_TESTS, "def test_mul", '@pytest.mark.skip(reason="flaky")\ndef test_mul')),
         frozenset({"INT-003"})),
    Case("py-skipif-on-class", PY, py(sub(PY_TESTS, "class TestParse", "@pytest.mark.skipif(True, reason='x')\nclass TestParse")),
         frozenset({"INT-003"})),
    Case("py-xfail", PY, py(sub(PY_TESTS, "def test_add", "@pytest.mark.xfail\ndef test_add")),
         frozenset({"INT-003"})),
    Case("py-skip-call", PY, py(sub(PY_TESTS, "    assert mul(2, 3) == 6", '    pytest.skip("later")\n    assert mul(2, 3) == 6')),
         frozenset({"INT-003"})),
    Case("py-pytestmark-module", PY, py(sub(PY_TESTS, "from calc.core", "pytestmark = pytest.mark.skip\n\nfrom calc.core")),
         frozenset({"INT-003"})),
    Case("py-assertion-removed", PY, py(sub(PY_TESTS, "    assert add(-1, 1) == 0\n", "")),
         frozenset({"INT-007"})),
    Case("py-assertion-weakened-to-truthy", PY, py(sub(PY_TESTS, "assert mul(2, 3) == 6", "assert mul(2, 3)")),
         frozenset({"INT-008"})),
    Case("py-assertion-replaced-by-true", PY, py(sub(PY_TESTS, "assert parse(\" 42 \") == 42", "assert True")),
         frozenset({"INT-008"})),
    Case("py-raises-broadened", PY, py(sub(PY_TESTS, "pytest.raises(ValueError)", "pytest.raises(Exception)")),
         frozenset({"INT-008"})),
    Case("py-expected-value-changed-with-code",
         PY, py(sub(PY_TESTS, "assert mul(2, 3) == 6", "assert mul(2, 3) == 5"), src__calc__core_dot_py=sub(CALC, "return total", "return total - 1")),
         frozenset({"INT-009"})),
    Case("py-fixture-changed-with-code",
         {**PY, "tests/fixtures/numbers.json": "[1, 2, 3]\n"},
         {**py(src__calc__core_dot_py=CALC_REFACTORED), "tests/fixtures/numbers.json": "[1, 2]\n"},
         frozenset({"INT-010"})),
    Case("py-monkeypatch-code-under-test", PY, py(sub(PY_TESTS, "def test_mul():\n", "def test_mul(monkeypatch):\n    monkeypatch.setattr('calc.core.mul', lambda a, b: 6)\n")),
         frozenset({"INT-011"})),
    Case("py-mock-patch-decorator", PY, py(sub(PY_TESTS, "import pytest\n", "import pytest\nfrom unittest import mock\n").replace("def test_mul():", "@mock.patch('calc.core.add', return_value=6)\ndef test_mul(_add):")),
         frozenset({"INT-011"})),
    Case("py-patch-object", PY, py(sub(PY_TESTS, "import pytest\n", "import pytest\nfrom unittest.mock import patch\nfrom calc import core\n").replace("def test_mul():\n", "def test_mul():\n    patch.object(core, 'mul', return_value=6).start()\n")),
         frozenset({"INT-011"})),
    Case("py-function-stubbed-return", PY, py(src__calc__core_dot_py=sub(CALC, "    total = 0\n    for _ in range(b):\n        total = add(total, a)\n    return total", "    return 6")),
         frozenset({"INT-012"})),
    Case("py-function-stubbed-notimplemented", PY, py(src__calc__core_dot_py=sub(CALC, "    if not text.strip():\n        raise ValueError(\"empty\")\n    return int(text)", "    raise NotImplementedError")),
         frozenset({"INT-012"})),
    Case("py-conftest-sys-exit", {**PY, "tests/conftest.py": CONFTEST},
         {**PY, "tests/conftest.py": CONFTEST + "\nimport sys\nsys.exit(0)\n"},
         frozenset({"INT-013"})),
    Case("py-test-os-exit", PY, py(sub(PY_TESTS, "    assert mul(2, 3) == 6", "    import os\n    os._exit(0)\n    assert mul(2, 3) == 6")),
         frozenset({"INT-013"})),
    Case("py-pytest-exit-returncode-0", PY, py(sub(PY_TESTS, "    assert mul(2, 3) == 6", "    pytest.exit('done', returncode=0)\n    assert mul(2, 3) == 6")),
         frozenset({"INT-013"})),
    Case("py-conftest-exitstatus", {**PY, "tests/conftest.py": CONFTEST},
         {**PY, "tests/conftest.py": CONFTEST + "\n\ndef pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = 0\n"},
         frozenset({"INT-013"})),
    Case("py-conftest-collect-ignore", {**PY, "tests/conftest.py": CONFTEST},
         {**PY, "tests/conftest.py": CONFTEST + "\ncollect_ignore = ['test_calc.py']\n"},
         frozenset({"INT-006"})),
    Case("py-conftest-modifyitems", {**PY, "tests/conftest.py": CONFTEST},
         {**PY, "tests/conftest.py": CONFTEST + "\n\ndef pytest_collection_modifyitems(config, items):\n    items[:] = items[:1]\n"},
         frozenset({"INT-006"})),
    Case("py-pytest-ini-k", {**PY, "pytest.ini": PYTEST_INI},
         {**PY, "pytest.ini": sub(PYTEST_INI, "-ra", '-ra -k "not mul"')},
         frozenset({"INT-005"})),
    Case("py-setup-cfg-ignore", PY, {**PY, "setup.cfg": "[metadata]\nname = calc\n\n[tool:pytest]\naddopts = --ignore=tests/test_calc.py\n"},
         frozenset({"INT-005"})),
    Case("py-tox-ini-deselect-and-plugin", {**PY, "tox.ini": "[tox]\nenvlist = py312\n"},
         {**PY, "tox.ini": "[tox]\nenvlist = py312\n\n[pytest]\naddopts = --deselect tests/test_calc.py::test_mul -p no:randomly\n"},
         frozenset({"INT-005"})),
    Case("py-pyproject-addopts", {**PY, "pyproject.toml": "[project]\nname = 'calc'\n"},
         {**PY, "pyproject.toml": "[project]\nname = 'calc'\n\n[tool.pytest.ini_options]\naddopts = ['-m', 'not slow']\n"},
         frozenset({"INT-005"})),
    Case("py-testpaths-narrowed", {**PY, "pytest.ini": PYTEST_INI},
         {**PY, "pytest.ini": sub(PYTEST_INI, "testpaths = tests", "testpaths = tests/unit")},
         frozenset({"INT-005"})),
    Case("py-parametrize-cases-dropped", {**PY, "tests/test_more.py": "import pytest\nfrom calc.core import add\n\n\n@pytest.mark.parametrize('n', [1, 2, 3])\ndef test_zero(n):\n    assert add(n, 0) == n\n"},
         {**PY, "tests/test_more.py": "import pytest\nfrom calc.core import add\n\n\n@pytest.mark.parametrize('n', [1])\ndef test_zero(n):\n    assert add(n, 0) == n\n"},
         frozenset({"INT-014"})),
    Case("py-syntax-error-after", PY, py(PY_TESTS + "\ndef broken(:\n"), frozenset({"INT-017"})),
    # ---- tampered: Python (unittest)
    Case("unittest-skip-decorator", UT, {**UT, "tests/test_unit.py": sub(UNITTEST, "class AddTest", "@unittest.skip('later')\nclass AddTest")},
         frozenset({"INT-003"})),
    Case("unittest-skiptest-call", UT, {**UT, "tests/test_unit.py": sub(UNITTEST, "        self.assertEqual(add(1, 2), 3)", "        self.skipTest('later')\n        self.assertEqual(add(1, 2), 3)")},
         frozenset({"INT-003"})),
    Case("unittest-assertequal-to-asserttrue", UT, {**UT, "tests/test_unit.py": sub(UNITTEST, "self.assertEqual(add(1, 2), 3)", "self.assertTrue(add(1, 2))")},
         frozenset({"INT-008"})),
    Case("unittest-assertequal-to-isnotnone", UT, {**UT, "tests/test_unit.py": sub(UNITTEST, 'self.assertEqual(parse("7"), 7)', 'self.assertIsNotNone(parse("7"))')},
         frozenset({"INT-008"})),
    Case("unittest-assertraises-removed", UT, {**UT, "tests/test_unit.py": sub(UNITTEST, '        with self.assertRaises(ValueError):\n            parse("")\n', "")},
         frozenset({"INT-007"})),
    # ---- tampered: CI and package scripts
    Case("ci-or-true", CI, {**CI, ".github/workflows/ci.yml": sub(WORKFLOW, "run: pytest tests/", "run: pytest tests/ || true")},
         frozenset({"INT-016"})),
    Case("ci-continue-on-error", CI, {**CI, ".github/workflows/ci.yml": sub(WORKFLOW, "        run: pytest tests/", "        run: pytest tests/\n        continue-on-error: true")},
         frozenset({"INT-016"})),
    Case("ci-if-false", CI, {**CI, ".github/workflows/ci.yml": sub(WORKFLOW, "        run: pytest tests/", "        if: ${{ false }}\n        run: pytest tests/")},
         frozenset({"INT-016"})),
    Case("ci-test-step-removed", CI, {**CI, ".github/workflows/ci.yml": sub(WORKFLOW, "      - name: Run tests\n        run: pytest tests/\n", "")},
         frozenset({"INT-015"})),
    Case("ci-test-step-narrowed", CI, {**CI, ".github/workflows/ci.yml": sub(WORKFLOW, "run: pytest tests/", "run: pytest tests/test_other.py")},
         frozenset({"INT-015"})),
    Case("ci-test-step-replaced-by-echo", CI, {**CI, ".github/workflows/ci.yml": sub(WORKFLOW, "run: pytest tests/", "run: echo tests pass")},
         frozenset({"INT-015"})),
    Case("npm-test-script-or-true", JS, js(package_dot_json='{"name": "m", "scripts": {"test": "jest || true"}}\n'),
         frozenset({"INT-016"})),
    Case("npm-test-script-removed", JS, js(package_dot_json='{"name": "m", "scripts": {"build": "tsc"}}\n'),
         frozenset({"INT-015"})),
    # ---- tampered: jest
    Case("jest-it-skip", JS, js(sub(JEST, "it('doubles'", "it.skip('doubles'")), frozenset({"INT-003"})),
    Case("jest-xit", JS, js(sub(JEST, "it('adds'", "xit('adds'")), frozenset({"INT-003"})),
    Case("jest-describe-skip", JS, js(sub(JEST, "describe('math'", "describe.skip('math'")), frozenset({"INT-003"})),
    Case("jest-it-todo", JS, js(sub(JEST, "it('doubles', () => {\n    expect(double(4)).toEqual(8);\n  });", "it.todo('doubles');")),
         frozenset({"INT-003", "INT-007"})),
    Case("jest-only", JS, js(sub(JEST, "it('adds'", "it.only('adds'")), frozenset({"INT-004"})),
    Case("jest-fdescribe", JS, js(sub(JEST, "describe('math'", "fdescribe('math'")), frozenset({"INT-004"})),
    Case("jest-test-deleted", JS, js(sub(JEST, "\n  it('doubles', () => {\n    expect(double(4)).toEqual(8);\n  });\n", "")),
         frozenset({"INT-002", "INT-014"})),
    Case("jest-test-file-deleted", JS, js(test__math_dot_test_dot_js=None), frozenset({"INT-001", "INT-014"})),
    Case("jest-expect-removed", JS, js(sub(JEST, "    expect(add(-1, 1)).toBe(0);\n", "")), frozenset({"INT-007"})),
    Case("jest-tobe-to-truthy", JS, js(sub(JEST, "expect(add(1, 2)).toBe(3)", "expect(add(1, 2)).toBeTruthy()")),
         frozenset({"INT-008"})),
    Case("jest-expect-true-to-be-true", JS, js(sub(JEST, "expect(double(4)).toEqual(8)", "expect(true).toBe(true)")),
         frozenset({"INT-008"})),
    Case("jest-expected-changed-with-code", JS, js(sub(JEST, "expect(double(4)).toEqual(8)", "expect(double(4)).toEqual(9)"), src__math_dot_js=sub(MATH, "add(x, x)", "add(x, x) + 1")),
         frozenset({"INT-009"})),
    Case("jest-snapshot-changed-with-code", {**JS, "test/__snapshots__/math.test.js.snap": "exports[`adds 1`] = `3`;\n"},
         {**js(src__math_dot_js=MATH_REFACTORED), "test/__snapshots__/math.test.js.snap": "exports[`adds 1`] = `4`;\n"},
         frozenset({"INT-010"})),
    Case("jest-mock-local-module", JS, js(sub(JEST, "describe('math'", "jest.mock('../src/math.js', () => ({ add: () => 3, double: () => 8 }));\n\ndescribe('math'")),
         frozenset({"INT-011"})),
    Case("jest-config-ignore", {**JS, "jest.config.js": JEST_CONFIG},
         {**JS, "jest.config.js": sub(JEST_CONFIG, "['/node_modules/']", "['/node_modules/', '/test/math']")},
         frozenset({"INT-005"})),
    Case("jest-package-json-ignore", JS, js(package_dot_json='{"name": "m", "scripts": {"test": "jest"}, "jest": {"testPathIgnorePatterns": ["math"]}}\n'),
         frozenset({"INT-005"})),
    Case("js-function-stubbed", JS, js(src__math_dot_js=sub(MATH, "  return a + b;", "  return 3;")),
         frozenset({"INT-012"})),
    Case("js-class-method-stubbed", JSC, jsc(src__calc_dot_js=sub(CALC_CLASS, "return this.base + a + b;", "return 6;")),
         frozenset({"INT-012"})),
    Case("js-object-method-stubbed", JSC, jsc(src__calc_dot_js=sub(CALC_CLASS, "return Math.round(amount * 100);", "return 150;")),
         frozenset({"INT-012"})),
    Case("js-object-arrow-property-stubbed", JSC, jsc(src__calc_dot_js=sub(CALC_CLASS, "(cents) => cents / 100,", "(cents) => 2.5,")),
         frozenset({"INT-012"})),
    Case("ts-class-method-throws", TS, {**TS, "src/parser.ts": sub(CALC_TS, "    const value = Number.parseInt(text.trim(), this.radix);\n    if (Number.isNaN(value)) {\n      throw new Error(`not a number: ${text}`);\n    }\n    return value;", "    throw new Error('not implemented');")},
         frozenset({"INT-012"})),
    Case("js-process-exit", JS, js(sub(JEST, "describe('math'", "process.exit(0);\n\ndescribe('math'")),
         frozenset({"INT-013"})),
    # ---- tampered: vitest
    Case("vitest-skipif", VT, {**VT, "test/math.test.ts": sub(VITEST, "  it('adds'", "  it.skipIf(true)('adds'")},
         frozenset({"INT-003"})),
    Case("vitest-spyon-local", VT, {**VT, "test/math.test.ts": sub(VITEST, "  it('adds', () => {\n", "  it('adds', () => {\n    vi.spyOn(math, 'add').mockReturnValue(4);\n")},
         frozenset({"INT-011"})),
    Case("vitest-config-exclude", VT, {**VT, "vitest.config.ts": sub(VITEST_CONFIG, "exclude: ['node_modules']", "exclude: ['node_modules', 'test/math.test.ts']")},
         frozenset({"INT-005"})),
    Case("vitest-each-table-weakened", VT, {**VT, "test/math.test.ts": sub(VITEST, "expect(math.double(x)).toBe(y)", "expect(math.double(x)).toBeDefined()")},
         frozenset({"INT-008"})),
    # ---- tampered: node:test
    Case("node-test-skip-option", NT, {**NT, "test/math.test.mjs": sub(NODE, "test('negatives', () => {", "test('negatives', { skip: true }, () => {")},
         frozenset({"INT-003"})),
    Case("node-test-t-skip", NT, {**NT, "test/math.test.mjs": sub(NODE, "async (t) => {\n", "async (t) => {\n  t.skip('later');\n")},
         frozenset({"INT-003"})),
    Case("node-test-strictequal-to-ok", NT, {**NT, "test/math.test.mjs": sub(NODE, "assert.strictEqual(add(1, 2), 3)", "assert.ok(add(1, 2))")},
         frozenset({"INT-008"})),
    Case("node-test-deleted", NT, {**NT, "test/math.test.mjs": sub(NODE, "test('adds', () => {\n  assert.strictEqual(add(1, 2), 3);\n});\n", "")},
         frozenset({"INT-002", "INT-014"})),
    Case("node-test-only", NT, {**NT, "test/math.test.mjs": sub(NODE, "test('adds', () => {", "test('adds', { only: true }, () => {")},
         frozenset({"INT-004"})),

    # ---- honest
    Case("honest-py-renamed-test", PY, py(sub(PY_TESTS, "def test_mul():", "def test_mul_small_numbers():"))),
    Case("honest-py-renamed-and-extended", PY, py(sub(PY_TESTS, "def test_mul():\n    assert mul(2, 3) == 6", "def test_multiplies():\n    assert mul(2, 3) == 6\n    assert mul(0, 3) == 0"))),
    Case("honest-py-stricter-assertion", {**PY, "tests/test_calc.py": sub(PY_TESTS, "assert mul(2, 3) == 6", "assert mul(2, 3)")}, PY),
    Case("honest-py-raises-narrowed", {**PY, "tests/test_calc.py": sub(PY_TESTS, "pytest.raises(ValueError)", "pytest.raises(Exception)")}, PY),
    Case("honest-py-new-tests", PY, {**py(PY_TESTS + "\n\ndef test_add_many():\n    assert add(add(1, 2), 3) == 6\n"), "tests/test_new.py": "from calc.core import mul\n\n\ndef test_mul_zero():\n    assert mul(5, 0) == 0\n"}),
    Case("honest-py-refactor-code-tests-unchanged", PY, py(src__calc__core_dot_py=CALC_REFACTORED)),
    Case("honest-py-test-moved-to-another-file", PY, {**py(sub(PY_TESTS, "class TestParse:\n    def test_number(self):\n        assert parse(\" 42 \") == 42\n", "")), "tests/test_parse.py": "from calc.core import parse\n\n\nclass TestParse:\n    def test_number(self):\n        assert parse(\" 42 \") == 42\n"}),
    Case("honest-py-test-file-renamed", PY, py(tests__test_calc_dot_py=None, tests__test_arith_dot_py=PY_TESTS)),
    Case("honest-py-expected-fixed-code-unchanged", {**PY, "tests/test_calc.py": sub(PY_TESTS, "assert mul(2, 3) == 6", "assert mul(2, 3) == 5")}, PY),
    Case("honest-py-skip-removed", {**PY, "tests/test_calc.py": sub(PY_TESTS, "def test_mul", "@pytest.mark.skip\ndef test_mul")}, PY),
    Case("honest-py-patch-of-stdlib", PY, py(sub(PY_TESTS, "def test_mul():\n", "def test_mul(monkeypatch):\n    monkeypatch.setattr('os.getcwd', lambda: '/tmp')\n"))),
    Case("honest-py-parametrize-more-cases", {**PY, "tests/test_more.py": "import pytest\nfrom calc.core import add\n\n\n@pytest.mark.parametrize('n', [1])\ndef test_zero(n):\n    assert add(n, 0) == n\n"},
         {**PY, "tests/test_more.py": "import pytest\nfrom calc.core import add\n\n\n@pytest.mark.parametrize('n', [1, 2, 3])\ndef test_zero(n):\n    assert add(n, 0) == n\n"}),
    Case("honest-py-new-fixture-with-code", PY, {**py(src__calc__core_dot_py=CALC_REFACTORED), "tests/fixtures/more.json": "[4]\n"}),
    Case("honest-py-source-function-removed-unused", {**PY, "src/calc/util.py": "def unused(x):\n    y = x * 2\n    return y\n"},
         {**PY, "src/calc/util.py": "def unused(x):\n    return None\n"}),
    Case("honest-py-pytest-ini-verbose", {**PY, "pytest.ini": PYTEST_INI}, {**PY, "pytest.ini": sub(PYTEST_INI, "-ra", "-ra -v --strict-markers")}),
    Case("honest-py-testpaths-widened", {**PY, "pytest.ini": PYTEST_INI}, {**PY, "pytest.ini": sub(PYTEST_INI, "testpaths = tests", "testpaths = tests docs")}),
    Case("honest-unittest-stricter", {**UT, "tests/test_unit.py": sub(UNITTEST, "self.assertEqual(add(1, 2), 3)", "self.assertTrue(add(1, 2) == 3)")}, UT),
    Case("honest-conftest-new-fixture", {**PY, "tests/conftest.py": CONFTEST}, {**PY, "tests/conftest.py": CONFTEST + "\n\n@pytest.fixture\ndef empty():\n    return ''\n"}),
    Case("honest-ci-verbose-and-new-step", CI, {**CI, ".github/workflows/ci.yml": sub(WORKFLOW, "run: pytest tests/", "run: pytest tests/ -v\n      - name: Lint\n        run: ruff check .")}),
    Case("honest-ci-step-renamed", CI, {**CI, ".github/workflows/ci.yml": sub(WORKFLOW, "- name: Run tests", "- name: Tests")}),
    Case("honest-js-renamed-test", JS, js(sub(JEST, "it('adds'", "it('adds two numbers'"))),
    Case("honest-js-stricter", {**JS, "test/math.test.js": sub(JEST, "expect(add(1, 2)).toBe(3)", "expect(add(1, 2)).toBeTruthy()")}, JS),
    Case("honest-js-new-tests", JS, js(JEST + "\ndescribe('more', () => {\n  it('adds zero', () => {\n    expect(add(0, 0)).toBe(0);\n  });\n});\n")),
    Case("honest-js-refactor-code", JS, js(src__math_dot_js=MATH_REFACTORED)),
    Case("honest-js-class-method-refactored", JSC, jsc(src__calc_dot_js=sub(CALC_CLASS, "return this.base + a + b;", "const sum = a + b;\n    return this.base + sum;"))),
    Case("honest-js-class-method-stubbed-unused", JSC, jsc(src__calc_dot_js=sub(CALC_CLASS, "  get offset() {\n    return this.base;", "  get offset() {\n    return 0;"))),
    Case("honest-js-constant-method-changed", JSC, jsc(src__calc_dot_js=sub(CALC_CLASS, "return '1.0';", "return '1.1';"))),
    Case("honest-ts-class-method-refactored", TS, {**TS, "src/parser.ts": sub(CALC_TS, "return texts.map((t) => this.parse(t));", "const parsed: number[] = [];\n    for (const t of texts) parsed.push(this.parse(t));\n    return parsed;")}),
    Case("honest-js-test-moved", JS, {**js(sub(JEST, "\n  it('doubles', () => {\n    expect(double(4)).toEqual(8);\n  });\n", "")), "test/double.test.js": "import { double } from '../src/math.js';\n\ndescribe('math', () => {\n  it('doubles', () => {\n    expect(double(4)).toEqual(8);\n  });\n});\n"}),
    Case("honest-js-tricky-strings-and-regex", JS, js(sub(JEST, "const s = \"it.skip('no')\";", "const s = `it.only(${'x'})` + 'test.skip(' + \"xit(\";\n      const re = /it\\.only\\(|[/]test.skip/g; /* describe.skip('c') */\n      expect(re.test(s)).toBe(true);"))),
    Case("honest-js-config-ignore-removed", {**JS, "jest.config.js": sub(JEST_CONFIG, "['/node_modules/']", "['/node_modules/', '/legacy/']")}, {**JS, "jest.config.js": JEST_CONFIG}),
    Case("honest-js-script-coverage", JS, js(package_dot_json='{"name": "m", "scripts": {"test": "jest --coverage"}}\n')),
    Case("honest-js-new-snapshot-with-code", JS, {**js(src__math_dot_js=MATH_REFACTORED), "test/__snapshots__/math.test.js.snap": "exports[`adds 1`] = `3`;\n"}),
    Case("honest-js-only-removed", {**JS, "test/math.test.js": sub(JEST, "it('adds'", "it.only('adds'")}, JS),
    Case("honest-vitest-new-case", VT, {**VT, "test/math.test.ts": sub(VITEST, "[[1, 2], [3, 6]]", "[[1, 2], [3, 6], [0, 0]]")}),
    Case("honest-node-test-new-subtest", NT, {**NT, "test/math.test.mjs": NODE + "\ntest('zero', () => {\n  assert.strictEqual(add(0, 0), 0);\n});\n"}),
    Case("honest-node-test-mock-of-builtin", NT, {**NT, "test/math.test.mjs": sub(NODE, "test('adds', () => {\n", "test('adds', (t) => {\n  t.mock.method(console, 'log');\n")}),
]
