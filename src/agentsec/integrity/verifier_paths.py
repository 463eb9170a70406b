"""The verifier's files of a project: its tests, their configuration, its CI workflows, the
grader and the answer key. `agentsec integrity could` asks the probe, from inside a sandbox,
whether the workload could write the first (or read the answers), before any agent has run.

What counts as a verifier's file is data (data/verifier_paths.json); a project adds its own in
a small JSON file (``--config``): ``{"verifier": ["grader/"], "answers": ["answers/key.json"]}``,
paths relative to the project.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from agentsec.assertions import Expectation
from agentsec.errors import AgentsecError
from agentsec.untrusted import clean_text

MAX_CONFIG_BYTES = 64 * 1024
MAX_PATHS = 500  # a project's config past this is not a list of files someone wrote by hand


@dataclass(frozen=True)
class VerifierPath:
    relative: str  # in the project, POSIX
    expectation: Expectation  # not-writable (the verifier's files), or not-readable (answers)
    why: str  # how it was found: "tests directory", "conftest.py", "--config", ...


@lru_cache(maxsize=1)
def _known() -> dict[str, Any]:
    text = resources.files("agentsec.data").joinpath("verifier_paths.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def detect(project: Path) -> list[VerifierPath]:
    """The verifier's files found in `project`: a directory as a whole, files by name."""
    known = _known()
    found: list[VerifierPath] = []
    for name in known["top"]["directories"]:
        if (project / name).is_dir() and not (project / name).is_symlink():
            found.append(VerifierPath(name, "not-writable", "tests or CI directory"))
    for name in known["top"]["files"]:
        if (project / name).is_file() and not (project / name).is_symlink():
            found.append(VerifierPath(name, "not-writable", "test or CI configuration"))
    wanted, skip = set(known["anywhere"]["files"]), set(known["skip_directories"])
    top = len(project.parts)
    # os.walk without following links: a link in the project could point anywhere on the host
    for root, dirs, files in os.walk(project):
        depth = len(Path(root).parts) - top
        dirs[:] = sorted(d for d in dirs if d not in skip) if depth < known["max_depth"] else []
        for name in sorted(set(files) & wanted):
            relative = (Path(root) / name).relative_to(project).as_posix()
            found.append(VerifierPath(relative, "not-writable", name))
    return found


def from_config(path: Path) -> list[VerifierPath]:
    """The project's own verifier files and answer keys, from a small JSON file."""
    shown = clean_text(str(path), 200)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise AgentsecError(f"cannot read {shown}: {exc.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise AgentsecError(f"{shown} is larger than {MAX_CONFIG_BYTES // 1024} KiB")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise AgentsecError(f"{shown} is not a JSON object of verifier and answers paths") \
            from None
    if not isinstance(doc, dict) or set(doc) - {"verifier", "answers"}:
        raise AgentsecError(f"{shown}: only the keys verifier and answers are read")
    found: list[VerifierPath] = []
    pairs: tuple[tuple[str, Expectation], ...] = (("verifier", "not-writable"),
                                                 ("answers", "not-readable"))
    for key, expectation in pairs:
        paths = doc.get(key, [])
        if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
            raise AgentsecError(f"{shown}: {key} must be a list of paths")
        if len(paths) > MAX_PATHS:
            raise AgentsecError(f"{shown}: {key} lists more than {MAX_PATHS} paths")
        for raw in paths:
            relative = PurePosixPath(raw)
            if relative.is_absolute() or ".." in relative.parts:
                raise AgentsecError(f"{shown}: {clean_text(raw, 80)} is not a path inside "
                                    "the project")
            found.append(VerifierPath(relative.as_posix(), expectation, f"{key} (config)"))
    return found


def inside(paths: list[VerifierPath], at: str) -> list[tuple[Expectation, str]]:
    """(expectation, path in the sandbox) for each, the project seen at `at` there."""
    base = PurePosixPath(at)
    if not base.is_absolute():
        raise AgentsecError(f"--inside {clean_text(at, 80)}: give the absolute path at which "
                            "the sandbox sees the project")
    unique = dict.fromkeys((p.expectation, str(base / p.relative)) for p in paths)
    return list(unique)
