"""Runner configuration and CI: what selects the tests and what decides that they failed.

- pytest: ``addopts`` and the collection settings of pytest.ini / tox.ini ``[pytest]``,
  setup.cfg ``[tool:pytest]`` and pyproject.toml ``[tool.pytest.ini_options]``;
- jest and vitest: ``jest.config.*``, ``vitest.config.*``, ``vite.config.*`` (read with the
  tokenizer: the keys below anywhere in the file, so an ``exclude`` of another tool's options
  counts too) and the ``jest`` object of package.json;
- package.json ``scripts.test``;
- GitHub Actions: the steps of ``.github/workflows/*.yml`` whose ``run`` runs the tests.

Each side is read from the files the change touched; an untouched file reads the same before and
after, so it can add nothing to a difference. A Makefile's test target, tox's ``commands`` and
other CI systems are not read.

PyYAML (workflows) and tomllib (pyproject.toml; tomli before Python 3.11, where agentsec also
runs) are imported when a file needs them: most changes touch neither.
"""

from __future__ import annotations

import configparser
import json
import re
import shlex
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from agentsec.integrity.js_tokens import LineIndex, TokenizeError, match_brackets, tokenize
from agentsec.integrity.model import Hit, quote

# --- commands


TEST_COMMAND = re.compile(
    r"(?<![\w./-])(?:pytest|py\.test|tox|nox|unittest|jest|vitest|mocha|ava"
    r"|(?:npm|pnpm|yarn|bun)\s+(?:run\s+)?test|npx\s+(?:jest|vitest|mocha)"
    r"|make\s+(?:-\S+\s+)*(?:\S+\s+)*test\w*|go\s+test|cargo\s+test|node\s+--test|deno\s+test)"
    r"(?![\w-])"
)
# What lets a failing command pass.
MASKS = re.compile(
    r"\|\|\s*(?:true|:|exit\s+0|echo)\b|;\s*(?:true|exit\s+0)\s*$|^\s*set\s+\+e\b"
    r"|\bexit\s+0\s*$|--passWithNoTests|--no-fail\b",
    re.MULTILINE,
)
# Options that run fewer tests, and whether each takes the next word as its value.
_DESELECT = {
    "-k": True, "-m": True, "--deselect": True, "--ignore": True, "--ignore-glob": True,
    "-p": True, "--co": False, "--collect-only": False, "--collectonly": False, "--lf": False,
    "--last-failed": False, "-t": True, "--testNamePattern": True,
    "--testPathIgnorePatterns": True, "--exclude": True, "--onlyChanged": False, "-o": False,
    "--changedSince": True, "--findRelatedTests": True, "--lastCommit": False,
    "--test-name-pattern": True, "--test-skip-pattern": True,
}


def deselecting(words: Iterable[str]) -> list[str]:
    """The options among ``words`` that deselect tests, each with its value."""
    words = list(words)
    found: list[str] = []
    for index, word in enumerate(words):
        flag, eq, _ = word.partition("=")
        if flag in _DESELECT:
            if eq:
                found.append(word)
            elif _DESELECT[flag] and index + 1 < len(words):
                following = words[index + 1]
                if flag != "-p" or following.startswith("no:"):
                    found.append(f"{flag} {following}")
            elif not _DESELECT[flag]:
                found.append(flag)
        elif word.startswith(("-k", "-m")) and len(word) > 2 and not word.startswith("--"):
            found.append(f"{word[:2]} {word[2:]}")
        elif word.startswith("-pno:"):
            found.append(f"-p {word[2:]}")
    return found


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=False)
    except ValueError:  # an unbalanced quote: words as written
        return command.split()


def command_change(before: str, after: str) -> tuple[str, str] | None:
    """(check id, why) when a test command changed in a way that runs or checks less: masking
    its failure (INT-016), no longer running a test runner, losing words, or gaining
    deselecting options (INT-015). Options merely added (-v, --cov) are no finding."""
    masked = [m.group().strip() for m in MASKS.finditer(after)]
    if masked and not MASKS.search(before):
        return "INT-016", f"now `{quote(masked[0], 40)}`"
    if TEST_COMMAND.search(before) and not TEST_COMMAND.search(after):
        return "INT-015", "no longer runs the tests"
    old, new = _words(before), _words(after)
    lost = [w for w in old if w not in new]
    if lost:
        return "INT-015", f"lost `{quote(' '.join(lost), 60)}`"
    gained = Counter(deselecting(new)) - Counter(deselecting(old))
    if gained:
        return "INT-015", f"gained `{quote(' '.join(gained), 60)}`"
    return None


def key_line(text: str, key: str, after: str | None = None, quoted: bool = False) -> int:
    """The line (from 1) where ``key`` is set: ``key =`` or ``key:`` opening a line of an INI
    or TOML file, or ``"key":`` anywhere (``quoted``, JSON); looked for after the first match
    of the pattern ``after`` (a section header, the key of an enclosing object) when that is
    given. 0 when it is not found."""
    start = 0
    if after is not None:
        header = re.search(after, text, re.MULTILINE)
        if header is None:
            return 0
        start = header.end()
    name = re.escape(key)
    pattern = (re.compile(rf"[\"']{name}[\"'][ \t]*:") if quoted
               else re.compile(rf"^[ \t]*{name}[ \t]*[=:]", re.MULTILINE | re.IGNORECASE))
    found = pattern.search(text, start)
    return text.count("\n", 0, found.start()) + 1 if found else 0


def _shown(before: str, after: str | None) -> str:
    old = quote(before, 80)
    return f"`{old}` removed" if after is None else f"`{old}` → `{quote(after, 80)}`"


# --- pytest configuration

# The collection settings, and which direction of change narrows collection.
_NARROWED_BY_LOSS = ("testpaths", "python_files", "python_classes", "python_functions")
_NARROWED_BY_GAIN = ("norecursedirs",)
_PYTEST_SECTIONS = {"pytest.ini": "pytest", "tox.ini": "pytest", "setup.cfg": "tool:pytest"}


@dataclass
class PytestConfig:
    addopts: list[str] = field(default_factory=list)
    lists: dict[str, list[str]] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # where each setting is (0: unknown)


def _as_list(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    return str(value).split()


def read_pytest_config(path: str, text: str) -> PytestConfig | str:
    """The pytest settings a file holds (empty when it has no pytest section), or why it could
    not be read."""
    name = PurePosixPath(path).name
    settings: dict[str, Any] = {}
    section = r"^\[tool\.pytest(?:\.ini_options)?\]"
    if name == "pyproject.toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:
            import tomli as tomllib
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            return f"malformed TOML ({quote(str(exc), 80)}): not analysed"
        tool = data.get("tool", {})
        pytest_table = tool.get("pytest", {}) if isinstance(tool, dict) else {}
        if isinstance(pytest_table, dict):
            ini = pytest_table.get("ini_options", {})
            settings = ini if isinstance(ini, dict) else {}
            settings = {**{k: v for k, v in pytest_table.items() if k != "ini_options"},
                        **settings}
    else:
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            parser.read_string(text, source=path)
        except configparser.Error as exc:
            return f"malformed INI ({quote(str(exc).splitlines()[0], 80)}): not analysed"
        name_of_section = _PYTEST_SECTIONS.get(name, "pytest")
        if parser.has_section(name_of_section):
            settings = dict(parser.items(name_of_section))
        section = rf"^\[{re.escape(name_of_section)}\]"
    config = PytestConfig()
    addopts = settings.get("addopts", "")
    config.addopts = deselecting(
        [str(a) for a in addopts] if isinstance(addopts, list) else _words(str(addopts))
    )
    for key in (*_NARROWED_BY_LOSS, *_NARROWED_BY_GAIN):
        if key in settings:
            config.lists[key] = _as_list(settings[key])
    for key in ("addopts", *config.lists):
        config.lines[key] = key_line(text, key, section)
    return config


def pytest_config_hits(
    before: dict[str, PytestConfig], after: dict[str, PytestConfig]
) -> list[Hit]:
    hits: list[Hit] = []
    old = Counter(item for c in before.values() for item in c.addopts)
    for path, config in sorted(after.items()):
        for item in config.addopts:
            if old[item] > 0:
                old[item] -= 1
                continue
            hits.append(Hit("INT-005", path, config.lines.get("addopts", 0),
                            f"addopts gained `{quote(item, 120)}`"))
    for key in (*_NARROWED_BY_LOSS, *_NARROWED_BY_GAIN):
        was = {v for c in before.values() for v in c.lists.get(key, [])}
        had_key = any(key in c.lists for c in before.values())
        for path, config in sorted(after.items()):
            if key not in config.lists:
                continue
            now = set(config.lists[key])
            if key in _NARROWED_BY_GAIN:
                changed = sorted(now - was)
                why = f"{key} gained `{quote(' '.join(changed), 100)}`"
            elif had_key:
                changed = sorted(was - now)
                why = f"{key} lost `{quote(' '.join(changed), 100)}`"
            else:
                changed = sorted(now)
                why = f"{key} set to `{quote(' '.join(changed), 100)}` (was every test)"
            if changed:
                hits.append(Hit("INT-005", path, config.lines.get(key, 0), why))
    return hits


# --- jest and vitest configuration

_IGNORE_KEYS = frozenset({"testPathIgnorePatterns", "modulePathIgnorePatterns", "exclude",
                          "testIgnore"})
_NARROW_KEYS = frozenset({"testMatch", "testRegex", "include", "roots", "testNamePattern"})
_FLAG_KEYS = frozenset({"passWithNoTests", "onlyChanged"})


@dataclass
class JsConfig:
    # key -> the string values it lists (ignore and narrow keys), or "true" for a flag key.
    values: dict[str, list[str]] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # where each key is (0: unknown)
    prefix: str = ""  # how its keys are named in evidence: "jest." in a package.json


def _json_config(obj: Any, text: str, within: str | None = None, prefix: str = "") -> JsConfig:
    """The keys of a jest/vitest configuration object read from JSON; ``within``: the pattern
    of the key that holds it in ``text`` (package.json's "jest"), for the keys' lines."""
    config = JsConfig(prefix=prefix)
    if not isinstance(obj, dict):
        return config
    for key, value in obj.items():
        if key in _IGNORE_KEYS | _NARROW_KEYS:
            config.values[key] = [str(v) for v in value] if isinstance(value, list) else [
                str(value)
            ]
        elif key in _FLAG_KEYS and value is True:
            config.values[key] = ["true"]
        else:
            continue
        config.lines[key] = key_line(text, key, within, quoted=True)
    return config


def read_js_config(path: str, text: str) -> JsConfig | str:
    if path.endswith(".json"):
        try:
            return _json_config(json.loads(text), text)
        except (ValueError, RecursionError):
            return "malformed JSON: not analysed"
    try:
        tokens = tokenize(text)
    except (TokenizeError, RecursionError) as exc:
        return f"{exc}: not analysed"
    match = match_brackets(tokens)
    config = JsConfig()
    lines = LineIndex(text)
    for index, token in enumerate(tokens[:-2]):
        key = token.text.strip("'\"") if token.kind == "str" else token.text
        if token.kind not in ("name", "str") or not tokens[index + 1].is_punct(":"):
            continue
        value = tokens[index + 2]
        if key in _IGNORE_KEYS | _NARROW_KEYS:
            if value.is_punct("[") and match[index + 2] > index:
                items = tokens[index + 3: match[index + 2]]
                listed = [t.text[1:-1] for t in items if t.kind in ("str", "template")]
                listed += [t.text for t in items if t.kind == "regex"]
            else:
                listed = [value.text.strip("'\"`")]
            config.values.setdefault(key, []).extend(listed)
        elif key in _FLAG_KEYS and value.is_name("true"):
            config.values[key] = ["true"]
        else:
            continue
        config.lines.setdefault(key, lines.line(token.start))
    return config


def js_config_hits(before: dict[str, JsConfig], after: dict[str, JsConfig]) -> list[Hit]:
    hits: list[Hit] = []
    keys = _IGNORE_KEYS | _NARROW_KEYS | _FLAG_KEYS
    for key in sorted(keys):
        was = Counter(v for c in before.values() for v in c.values.get(key, []))
        for path, config in sorted(after.items()):
            now = config.values.get(key)
            if now is None:
                continue
            line, named = config.lines.get(key, 0), config.prefix + key
            if key in _NARROW_KEYS:
                lost = [v for v in was if v not in now]
                if lost and was:
                    hits.append(Hit("INT-005", path, line,
                                    f"{named} lost `{quote(' '.join(lost), 100)}`"))
                continue
            gained = Counter(now) - was
            if gained:
                shown = "true" if key in _FLAG_KEYS else " ".join(gained)
                hits.append(Hit("INT-005", path, line, f"{named} gained `{quote(shown, 100)}`"))
    return hits


# --- package.json


@dataclass
class PackageJson:
    jest: JsConfig
    test_script: str | None
    test_line: int = 0  # where scripts.test is (0: unknown)


_SCRIPTS_KEY = r"[\"']scripts[\"'][ \t]*:"


def read_package_json(path: str, text: str) -> PackageJson | str:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return "malformed JSON: not analysed"
    if not isinstance(data, dict):
        return PackageJson(JsConfig(prefix="jest."), None)
    scripts = data.get("scripts")
    script = scripts.get("test") if isinstance(scripts, dict) else None
    jest = _json_config(data.get("jest"), text, r"[\"']jest[\"'][ \t]*:", prefix="jest.")
    if not isinstance(script, str):
        return PackageJson(jest, None)
    return PackageJson(jest, script, key_line(text, "test", _SCRIPTS_KEY, quoted=True))


def script_hits(path: str, before: PackageJson | None, after: PackageJson | None) -> list[Hit]:
    """scripts.test of one package.json, before and after."""
    old = before.test_script if before else None
    new = after.test_script if after else None
    if old is None or old == new:
        return []
    if new is None:
        line = before.test_line if before else 0
        return [Hit("INT-015", path, line, f"scripts.test {_shown(old, None)}", side="before")]
    change = command_change(old, new)
    if change is None:
        return []
    line = after.test_line if after else 0
    return [Hit(change[0], path, line, f"scripts.test {_shown(old, new)}: {change[1]}")]


# --- GitHub Actions workflows

_ALWAYS_FALSE = re.compile(r"^\s*(?:\$\{\{\s*)?(?:false|0|''|\"\")(?:\s*\}\})?\s*$")


@dataclass(frozen=True)
class TestStep:
    __test__ = False  # not a pytest test class

    path: str
    job: str
    position: int
    name: str
    run: str
    tolerant: bool  # continue-on-error on the step or its job
    disabled: bool  # an `if:` that is always false, on the step or its job
    line: int


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _never(value: Any) -> bool:
    return value is False or (isinstance(value, str) and bool(_ALWAYS_FALSE.match(value)))


def _line_of(text: str, needle: str) -> int:
    first = needle.strip().splitlines()[0] if needle.strip() else ""
    offset = text.find(first) if first else -1
    return text.count("\n", 0, offset) + 1 if offset >= 0 else 0


@dataclass
class Workflow:
    steps: list[TestStep]  # the steps that run tests
    # Every step's run command ('' for a step without one) by job, in order: a test step that
    # no longer runs tests is found by its position here.
    runs: dict[str, list[str]]


def read_workflow(path: str, text: str) -> Workflow | str:
    """The steps of a workflow file, or why it could not be read."""
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return f"malformed YAML ({quote(str(exc).splitlines()[0], 80)}): not analysed"
    except RecursionError:
        return "YAML nested too deeply: not analysed"
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    found = Workflow([], {})
    if not isinstance(jobs, dict):
        return found
    for job_id, job in jobs.items():
        if not isinstance(job, dict) or not isinstance(job.get("steps"), list):
            continue
        found.runs[str(job_id)] = [
            str(s.get("run", "")) if isinstance(s, dict) else "" for s in job["steps"]
        ]
        job_tolerant = _truthy(job.get("continue-on-error"))
        job_disabled = _never(job.get("if"))
        for position, step in enumerate(job["steps"]):
            if not isinstance(step, dict) or not isinstance(step.get("run"), str):
                continue
            run = step["run"]
            if not TEST_COMMAND.search(run):
                continue
            found.steps.append(TestStep(
                path=path,
                job=str(job_id),
                position=position,
                name=str(step.get("name") or ""),
                run="\n".join(line.strip() for line in run.strip().splitlines()),
                tolerant=job_tolerant or _truthy(step.get("continue-on-error")),
                disabled=job_disabled or _never(step.get("if")),
                line=_line_of(text, run),
            ))
    return found


def workflow_hits(before: dict[str, Workflow], after: dict[str, Workflow]) -> list[Hit]:
    """Each test step of the workflows before, looked for after: by its command in the same
    job, then by its name or position there, then by its command anywhere."""
    hits: list[Hit] = []
    after_steps = {path: w.steps for path, w in after.items()}
    everywhere = Counter(s.run for w in after.values() for s in w.steps)
    for path, workflow in sorted(before.items()):
        for old in workflow.steps:
            where = f"job {quote(old.job, 40)}, step {quote(old.name or str(old.position), 60)}"
            same_job = [s for s in after_steps.get(path, []) if s.job == old.job]
            kept = [s for s in same_job if s.run == old.run]
            if kept:
                new = kept[0]
                if new.tolerant and not old.tolerant:
                    hits.append(Hit("INT-016", path, new.line,
                                    f"{where}: given continue-on-error: true"))
                if new.disabled and not old.disabled:
                    hits.append(Hit("INT-016", path, new.line,
                                    f"{where}: given an if: that is always false"))
                continue
            renamed = [s for s in same_job if old.name and s.name == old.name] or [
                s for s in same_job if s.position == old.position
            ]
            if renamed:
                new = renamed[0]
                change = command_change(old.run, new.run)
                if change is not None:
                    hits.append(Hit(change[0], path, new.line,
                                    f"{where}: {_shown(old.run, new.run)}: {change[1]}"))
                elif new.tolerant and not old.tolerant:
                    hits.append(Hit("INT-016", path, new.line,
                                    f"{where}: given continue-on-error: true"))
                continue
            if everywhere[old.run] > 0:  # moved to another job or workflow, unchanged
                everywhere[old.run] -= 1
                continue
            runs = after[path].runs.get(old.job, []) if path in after else []
            now = runs[old.position] if old.position < len(runs) else None
            if now is not None and now.strip():
                why = f"{where}: {_shown(old.run, now)}: no longer runs the tests"
            else:
                why = f"{where}: {_shown(old.run, None)}"
            hits.append(Hit("INT-015", path, old.line, why, side="before"))
    return hits

