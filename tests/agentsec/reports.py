"""Reports for the output tests, scored by the real scorer from hand-written probe outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentsec import service
from agentsec.report import Target
from agentsec.untrusted import parse_probe_output
from tests.agentsec import outputs

AGENTSEC = str(Path(sys.executable).parent / "agentsec")
AGENTCAGE = str(Path(sys.executable).parent / "agentcage")
LONG_LABEL = "claude-code-2.1.266-sandbox-on-socat-missing-measured-on-a-host-with-a-long-name"


def report(output: dict[str, Any], label: str, how: str = "by hand") -> dict[str, Any]:
    probe = parse_probe_output(outputs.line(output))
    target = Target(kind="captured", how=how)
    return service.score(probe, label=label, target=target, rc=0, redact=False)


def leaky() -> dict[str, Any]:
    """Root outside a user namespace, a secret-looking variable, credentials readable."""
    out = outputs.with_data("identity", euid=0, in_user_namespace=False, no_new_privs=False)
    out["sections"]["secrets_env"]["data"]["names"] = [{"name": "ACME_TOKEN", "length": 9}]
    return out


def sample_set() -> list[dict[str, Any]]:
    """Four runs: sealed, leaky with a long label, one axis not measured, one secret visible."""
    return [
        report(outputs.sealed(), "bwrap-hardened"),
        report(leaky(), LONG_LABEL),
        report(outputs.failed("network"), "docker-default_python_3.12-slim"),
        report(outputs.with_data("secrets_env", names=[{"name": "X_TOKEN", "length": 3}]), "env"),
    ]


def save_all(directory: Path, reports: list[dict[str, Any]]) -> list[Path]:
    return [service.save(r, directory).json_path for r in reports]


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))
    return path


def agentsec(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
             timeout: float = 120, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENTSEC, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def complete(binary: str, words: str, env: dict[str, str] | None = None) -> list[str]:
    """What click's bash completion of `binary` offers for `words` (a shell's COMP_WORDS)."""
    var = f"_{Path(binary).name.upper()}_COMPLETE"
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    proc = subprocess.run(
        [binary],
        env={**os.environ, **(env or {}), var: "bash_complete", "COMP_WORDS": words,
             "COMP_CWORD": str(cword)},
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return [line.split(",", 1)[1] for line in proc.stdout.splitlines() if "," in line]
