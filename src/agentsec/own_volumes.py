"""A sandbox's own volumes: directories its launcher declares that the sandbox alone keeps (an
agentcage cage's named volumes), checked against what the probe saw before they count.

A file that runs later (a shell's start-up file, an agent's settings with their hooks)
persists *outside* the sandbox when it lies in a directory of the host's: the host's shell or
agent reads it. In a sandbox's own volume it is read by nothing but the sandbox's own later
runs. From inside, the two look the same: a bind mount is a bind mount. So the launcher, which
built the sandbox, declares its volumes (`Target.own_volumes`: the path in the sandbox and the
host directory), and a declaration counts only for a persistence target that the probe found
on a mount at exactly that path whose source is that directory (mountinfo's `root`, the
directory's path within its filesystem, ends the declared host path). Such a target is marked
`own_volume: true` before scoring (and before redaction, which drops the paths and keeps the
mark), and is reported as PERS-006, a note: persistent, for the sandbox itself only. Whatever
does not match (no declaration, another mount, another source) is scored as before.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import PurePosixPath

from agentsec.untrusted import ProbeOutput, SectionResult


def _same_directory(declared_source: str, observed_root: str) -> bool:
    """Whether mountinfo's root (relative to its filesystem) names the declared directory: the
    host path ends with it, component by component; a whole filesystem (root "/") never does."""
    root = PurePosixPath(observed_root)
    source = PurePosixPath(declared_source)
    if not root.is_absolute() or root == PurePosixPath("/") or not source.is_absolute():
        return False
    return source.parts[-len(root.parts) + 1:] == root.parts[1:]


def mark_own_volumes(probe: ProbeOutput,
                     declared: Sequence[tuple[str, str]]) -> ProbeOutput:
    """`probe` with each persistence target that lies in a declared own volume marked
    `own_volume: true` (a copy; `probe` is not changed)."""
    result = probe.sections.get("persistence")
    if not declared or result is None or not result.ok:
        return probe
    data = copy.deepcopy(result.data)
    targets = data.get("targets")
    if not isinstance(targets, list):
        return probe
    for target in targets:
        mount = target.get("mount") if isinstance(target, dict) else None
        if not isinstance(mount, dict):
            continue
        point, root = mount.get("mountpoint"), mount.get("root")
        if isinstance(point, str) and isinstance(root, str) and any(
                point == path and _same_directory(source, root) for path, source in declared):
            target["own_volume"] = True
    sections = dict(probe.sections)
    sections["persistence"] = SectionResult(result.ok, data, result.error, result.timed_out)
    raw = copy.deepcopy(probe.raw)
    raw_section = raw.get("sections", {}).get("persistence")
    if isinstance(raw_section, dict):
        raw_section["data"] = data
    return ProbeOutput(version=probe.version, raw=raw, sections=sections,
                       ignored_lines=probe.ignored_lines)
