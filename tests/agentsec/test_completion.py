"""Shell completion (click's): preset, cage and scaffold names complete in both CLIs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from agentcage.config.scaffolds import scaffold_names
from tests.agentsec.reports import AGENTCAGE, AGENTSEC


def _complete(binary: str, words: str, env: dict[str, str] | None = None) -> list[str]:
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


def test_agentsec_completes_preset_names():
    assert _complete(AGENTSEC, "agentsec blast-radius preset bwrap-h") == ["bwrap-hardened"]
    got = _complete(AGENTSEC, "agentsec matrix --presets bwrap-hardened,docker-d")
    assert got == ["bwrap-hardened,docker-default"]


def test_agentsec_completes_commands_and_formats():
    assert "history" in _complete(AGENTSEC, "agentsec hi")
    assert _complete(AGENTSEC, "agentsec report x --format sa") == ["sarif"]


def _fake_home(tmp_path: Path, *names: str) -> dict[str, str]:
    for name in names:
        cage = tmp_path / "home" / "cages" / name
        cage.mkdir(parents=True)
        (cage / "cage.yaml").write_text(f"name: {name}\n")
    return {"AGENTCAGE_HOME": str(tmp_path / "home")}


def test_agentcage_completes_cage_and_scaffold_names(tmp_path: Path):
    env = _fake_home(tmp_path, "alpha", "beta")
    assert _complete(AGENTCAGE, "agentcage exec a", env) == ["alpha"]
    assert _complete(AGENTCAGE, "agentcage domain list ", env) == ["alpha", "beta"]
    first = scaffold_names()[0]
    assert first in _complete(AGENTCAGE, f"agentcage init x --scaffold {first[:2]}")
    assert first in _complete(AGENTCAGE, f"agentcage scaffold show {first[:2]}")
    assert first in _complete(AGENTCAGE, f"agentcage run {first[:2]}")


def test_agentsec_completes_cage_names_through_agentcage(tmp_path: Path):
    env = _fake_home(tmp_path, "gamma")
    assert _complete(AGENTSEC, "agentsec blast-radius cage g", env) == ["gamma"]


def test_completion_never_crashes_the_shell(tmp_path: Path):
    broken = tmp_path / "home"
    broken.write_text("not a directory")
    env = {"AGENTCAGE_HOME": str(broken)}
    assert _complete(AGENTCAGE, "agentcage exec ", env) == []
    assert _complete(AGENTSEC, "agentsec blast-radius cage ", env) == []


def test_completion_script_is_printed_for_each_shell():
    for shell in ("bash", "zsh", "fish"):
        env = {**os.environ, "_AGENTSEC_COMPLETE": f"{shell}_source"}
        proc = subprocess.run([AGENTSEC], env=env, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0 and "_AGENTSEC_COMPLETE" in proc.stdout, shell
