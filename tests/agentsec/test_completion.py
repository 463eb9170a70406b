"""Shell completion (click's) of agentsec: preset names, commands, formats, and the script for
each shell. Cage and scaffold names (agentcage's): tests/agentcage/test_completion.py."""

from __future__ import annotations

import os
import subprocess

from tests.agentsec.reports import AGENTSEC
from tests.agentsec.reports import complete as _complete


def test_agentsec_completes_preset_names():
    assert _complete(AGENTSEC, "agentsec blast-radius preset bwrap-h") == ["bwrap-hardened"]
    got = _complete(AGENTSEC, "agentsec matrix --presets bwrap-hardened,docker-d")
    assert got == ["bwrap-hardened,docker-default"]


def test_agentsec_completes_commands_and_formats():
    assert "history" in _complete(AGENTSEC, "agentsec hi")
    assert _complete(AGENTSEC, "agentsec report x --format sa") == ["sarif"]


def test_completion_script_is_printed_for_each_shell():
    for shell in ("bash", "zsh", "fish"):
        env = {**os.environ, "_AGENTSEC_COMPLETE": f"{shell}_source"}
        proc = subprocess.run([AGENTSEC], env=env, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0 and "_AGENTSEC_COMPLETE" in proc.stdout, shell
