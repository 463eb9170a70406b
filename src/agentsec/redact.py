"""``--redact``: strip what identifies the machine and its user, keep every score and finding.

Redaction runs on the probe output before scoring, so findings and evidence are computed from
the redacted facts and stay consistent with them. Counts and structure are kept: a redacted
report still says that three secret-looking variables were visible, not which.
"""

from __future__ import annotations

import copy
from typing import Any

from agentsec.scoring.detectors import RUNTIME_MANAGED_MOUNTS
from agentsec.untrusted import ProbeOutput, SectionResult

# Mount points that carry no information about the user (runtimes bind them on purpose), kept so
# that a redacted report scores as the unredacted one.
_KEEP_MOUNTPOINTS = frozenset({"/", *RUNTIME_MANAGED_MOUNTS})
_CONTEXT_KEPT = ("uid", "gid")


def _numbered(items: list[Any], key: str, label: str, keep: frozenset[str] = frozenset()) -> None:
    for index, item in enumerate(items, start=1):
        if isinstance(item, dict) and item.get(key) not in keep:
            item[key] = f"[{label} {index}]"


def _redact_section(name: str, data: dict[str, Any]) -> None:
    if name == "secrets_env" and isinstance(data.get("names"), list):
        _numbered(data["names"], "name", "variable")
    elif name == "network" and isinstance(data.get("interfaces"), list):
        data["interfaces"] = [f"[interface {i}]" for i in range(1, len(data["interfaces"]) + 1)]
        if data.get("default_gateway") is not None:
            data["default_gateway"] = "[gateway]"
        docker = data.get("docker_tcp")
        if isinstance(docker, dict):
            docker["host"] = "[gateway]"
    elif name == "filesystem" and isinstance(data.get("host_mounts"), list):
        _numbered(data["host_mounts"], "mountpoint", "mount", _KEEP_MOUNTPOINTS)
        for item in data["host_mounts"]:
            if isinstance(item, dict):
                item.pop("root", None)
        if isinstance(data.get("host_root_mounted"), list):
            count = len(data["host_root_mounted"])
            data["host_root_mounted"] = [f"[host root mount {i}]" for i in range(1, count + 1)]
    elif name == "persistence" and isinstance(data.get("targets"), list):
        for item in data["targets"]:
            if isinstance(item, dict):
                item.pop("mount", None)  # where a file lies: paths (own_volume stays)
    elif name == "project_credentials" and data.get("root") is not None:
        data["root"] = "[project]"  # the working directory, as the context's cwd (dropped)
    elif name == "proc_environ":
        for key in ("pid1_extra_secret_names", "others_extra_secret_names"):
            if isinstance(data.get(key), list):
                data[key] = [f"[variable {i}]" for i in range(1, len(data[key]) + 1)]
    elif name == "identity":
        for key in ("lsm", "apparmor"):
            if data.get(key) is not None:
                data[key] = "[redacted]"


def redact(probe: ProbeOutput) -> ProbeOutput:
    raw = copy.deepcopy(probe.raw)
    context = probe.context
    raw["context"] = {key: context.get(key) for key in _CONTEXT_KEPT if key in context}
    sections: dict[str, SectionResult] = {}
    for name, result in probe.sections.items():
        data = copy.deepcopy(result.data)
        _redact_section(name, data)
        # An error message can quote a path or a name; its exception type says enough.
        error = result.error.split(":", 1)[0] + ": [redacted]" if result.error else None
        sections[name] = SectionResult(result.ok, data, error, result.timed_out)
        raw_section = raw["sections"].get(name)
        if isinstance(raw_section, dict):
            if result.ok:
                raw_section["data"] = data
            else:
                raw_section["error"] = error
    return ProbeOutput(
        version=probe.version, raw=raw, sections=sections, ignored_lines=probe.ignored_lines
    )
