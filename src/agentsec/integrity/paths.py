"""What kind of file a path is, from the path alone (no content is read to decide).

The rules follow the runners' own defaults: pytest collects ``test_*.py`` and ``*_test.py``;
jest and vitest collect ``*.test.*``, ``*.spec.*`` and files under ``__tests__``; node:test
runs files under ``test/``. A Python or JavaScript file under a ``tests``/``test`` directory is
treated as test code too (helpers there are part of the verifier).
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import PurePosixPath

PY_SUFFIXES = frozenset({".py"})
JS_SUFFIXES = frozenset({".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts"})
# Code in any of these counts as "source" when it is not test code: a change to it is a change
# to the code the tests check.
SOURCE_SUFFIXES = PY_SUFFIXES | JS_SUFFIXES | frozenset(
    {".go", ".rs", ".java", ".kt", ".rb", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs", ".php",
     ".swift", ".scala", ".sh"}
)
TEST_DIRS = frozenset({"tests", "test", "__tests__", "testing"})
FIXTURE_DIRS = frozenset({"fixtures", "__fixtures__", "__snapshots__"})
PYTEST_CONFIGS = frozenset({"pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"})
_JS_TEST_NAME = re.compile(r"\.(test|spec)\.[cm]?[jt]sx?$")
_JS_CONFIG_NAME = re.compile(r"^(jest|vitest|vite)\.(config|workspace)\.[cm]?[jt]s(on)?$")
_WORKFLOW = re.compile(r"^\.github/workflows/[^/]+\.ya?ml$")


class Kind(Enum):
    PY_TEST = "python test"
    PY_CONFTEST = "conftest"
    JS_TEST = "javascript test"
    PYTEST_CONFIG = "pytest configuration"
    JS_CONFIG = "jest/vitest configuration"
    PACKAGE_JSON = "package.json"
    WORKFLOW = "CI workflow"
    FIXTURE = "fixture or snapshot"
    SOURCE = "source"
    OTHER = "other"


def kind_of(path: str) -> Kind:
    pure = PurePosixPath(path)
    name, suffix, parents = pure.name, pure.suffix, pure.parts[:-1]
    if _WORKFLOW.match(path):
        return Kind.WORKFLOW
    if name.endswith(".snap") or any(part in FIXTURE_DIRS for part in parents):
        return Kind.FIXTURE
    if name == "conftest.py":
        return Kind.PY_CONFTEST
    if name in PYTEST_CONFIGS:
        return Kind.PYTEST_CONFIG
    if name == "package.json":
        return Kind.PACKAGE_JSON
    if _JS_CONFIG_NAME.match(name):
        return Kind.JS_CONFIG
    in_test_dir = any(part in TEST_DIRS for part in parents)
    if suffix in PY_SUFFIXES:
        if name.startswith("test_") or name.endswith("_test.py") or in_test_dir:
            return Kind.PY_TEST
        return Kind.SOURCE
    if suffix in JS_SUFFIXES:
        if _JS_TEST_NAME.search(name) or in_test_dir:
            return Kind.JS_TEST
        return Kind.SOURCE
    if suffix in SOURCE_SUFFIXES:
        return Kind.SOURCE
    return Kind.OTHER


def python_module_roots(paths: list[str]) -> frozenset[str]:
    """The top-level names the project's own Python code is imported by: the first directory
    (or module) of each non-test ``.py`` file, under ``src/`` or ``lib/`` when there is one."""
    roots: set[str] = set()
    for path in paths:
        if not path.endswith(".py") or kind_of(path) is not Kind.SOURCE:
            continue
        parts = path.split("/")
        if parts[0] in ("src", "lib") and len(parts) > 1:
            parts = parts[1:]
        roots.add(parts[0].removesuffix(".py"))
    roots.discard("__init__")
    roots.discard("setup")
    return frozenset(roots)
