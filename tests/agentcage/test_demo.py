"""`agentcage demo`, the README's first command's cage half, run for real as a user runs it: its
own fake internet, a cage, an allowed and a blocked request, a secret, agentsec's probe."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from agentcage.demo_agents import AGENTS

pytestmark = pytest.mark.netns


def test_demo_shows_each_guarantee_and_leaves_nothing(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
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
    # the real agents, each in its scaffold's cage: they ran, and nothing got out
    for agent in sorted(AGENTS):
        line = next(x for x in out.splitlines() if x.startswith(f"{agent}: exit"))
        assert "edit made: yes" in line and "with the real key: yes" in line, line
        assert line.endswith("; contained"), line
    assert "LEAK" not in out
    assert "refused: outbound exfil.example.test" in out
    # the query that carried the planted token, named by the token's fingerprint, not by it
    assert "refused: dns [github-token sha256:" in out and "ghp_" not in out
    # everything the demo built (its fake internet, its cages) is gone with it
    import re

    prefix = out.split("the fake internet's namespaces: ", 1)[1].split("*", 1)[0]
    built = set(re.findall(r"namespaces (agc-[0-9a-f]+-gw) \(gateway\) and (agc-[0-9a-f]+-cg)",
                           out))
    assert len(built) == 1 + len(AGENTS)  # the demo's own cage and one per real agent
    after = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    assert [n for n in after if n.startswith(prefix)] == []
    assert not after & {n for pair in built for n in pair}
