"""entry.py against what it replaces: `nsenter --net` then `setpriv --reuid --regid
--clear-groups --no-new-privs`, run for real (as root) in a network namespace of the test's.
The process each leaves behind must be the same: ids, groups, capabilities, no_new_privs,
seccomp, and the network namespace."""

from __future__ import annotations

import functools
import os
import subprocess

import pytest

from agentcage.backends import entry

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, setuid)")

FIELDS = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
          "NoNewPrivs", "Seccomp")
# what the workload's process reports: its status, and its network namespace's identity
REPORT = ["/bin/sh", "-c", "cat /proc/self/status; readlink /proc/self/ns/net"]


@pytest.fixture
def netns():
    name = f"agc-t{os.urandom(3).hex()}-cg"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


def state(output: str) -> dict[str, str]:
    lines = output.splitlines()
    found = {k: v.strip() for k, _, v in (line.partition(":") for line in lines[:-1])
             if k in FIELDS}
    found["net"] = lines[-1]
    return found


def by_setpriv(netns: str, uid: int) -> dict[str, str]:
    out = subprocess.run(["nsenter", f"--net=/run/netns/{netns}", "--", "setpriv",
                          f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                          "--no-new-privs", "--", *REPORT],
                         capture_output=True, text=True, check=True).stdout
    return state(out)


def by_entry(netns: str, uid: int) -> dict[str, str]:
    out = subprocess.run(REPORT, capture_output=True, text=True, check=True,
                         preexec_fn=functools.partial(entry.enter, netns, uid, uid, True)
                         ).stdout
    return state(out)


def test_the_process_is_left_as_setpriv_left_it(netns):
    expected = by_setpriv(netns, 65534)
    assert expected["Uid"].split() == ["65534"] * 4 and expected["NoNewPrivs"] == "1"
    assert by_entry(netns, 65534) == expected


def test_control_without_the_drop_the_process_is_root_in_the_callers_namespace(netns):
    # the comparison above can fail: the unchanged process differs in every way it checks
    out = subprocess.run(REPORT, capture_output=True, text=True, check=True).stdout
    plain = state(out)
    dropped = by_entry(netns, 65534)
    assert plain["Uid"].split()[0] == "0" and plain["NoNewPrivs"] == "0"
    assert plain["net"] != dropped["net"] and plain["CapEff"] != dropped["CapEff"]


def test_a_missing_namespace_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(subprocess.SubprocessError):
        subprocess.run(["touch", str(marker)], preexec_fn=functools.partial(
            entry.enter, "agc-nonexistent-cg", 65534, 65534, True))
    assert not marker.exists()
