"""`agentcage demo`, the README's first command's cage half, run for real as a user runs it: its
own fake internet, a cage, an allowed and a blocked request, a secret, agentsec's probe."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.netns


def test_demo_shows_each_guarantee_and_leaves_nothing(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    r = subprocess.run([sys.executable, "-m", "agentcage.cli", "demo", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "GET https://api.example.test/ -> 200" in out
    assert "GET https://evil.example.test/ -> failed" in out and "403" in out
    assert "$DEMO_API_KEY = agentcage:secret:DEMO_API_KEY:" in out  # no emoji for ":secret:"
    assert "the server received the real key: yes" in out
    assert "its echo reached the cage with the placeholder only" in out
    report = json.loads((tmp_path / "demo-cage.json").read_text())
    assert report["label"] == "demo-cage" and 0 <= report["summary"]["score"] <= 100
    assert report["summary"]["axes"]["network"]["state"] in ("sealed", "refused")
    # everything the demo built (its fake internet, the cage) is gone with it
    after = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    assert {n for n in after - before if n.startswith(("agc-", "fn-"))} == set()
