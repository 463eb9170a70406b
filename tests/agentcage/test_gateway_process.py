"""The gateway process enters its namespace before any socket exists, and refuses to serve if
any thread stayed outside."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest

pytestmark = pytest.mark.netns

SCRIPT = """
import sys, threading, time
from agentcage.gateway.main import enter_namespace
if sys.argv[2] == "thread":
    threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
enter_namespace(sys.argv[1])
import os
print(os.stat("/proc/self/ns/net").st_ino == os.stat(f"/run/netns/{sys.argv[1]}").st_ino)
"""


@pytest.fixture
def scratch_ns():
    if os.geteuid() != 0:
        pytest.skip("needs root")
    name = f"agc-{secrets.token_hex(3)}-t"
    subprocess.run(["ip", "netns", "add", name], check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name], check=False)


def test_enters_the_namespace(scratch_ns):
    r = subprocess.run([sys.executable, "-c", SCRIPT, scratch_ns, "single"],
                       capture_output=True, text=True, timeout=30)
    assert (r.returncode, r.stdout.strip()) == (0, "True"), r.stderr


def test_refuses_when_a_thread_stays_outside(scratch_ns):
    r = subprocess.run([sys.executable, "-c", SCRIPT, scratch_ns, "thread"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "outside namespace" in r.stderr
