"""The machine-wide podman test cache under concurrent test runs: one builder at a time, trees
that appear whole or not at all, a dead builder's scratch swept, and two real runs sharing the
podman world at once. Builders run as separate processes, as two test runs would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.podman_world import LOCK_NAME, SCRATCH_PREFIX

REPO = Path(__file__).resolve().parents[2]
FILES = 20

BUILDER = f"""
import os, sys, time
from pathlib import Path
from tests.integration.podman_world import cache_lock, cached_tree

cache, log, locked = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "locked"
pause = float(sys.argv[4])

def build(target):
    with log.open("a") as f:
        f.write(f"start {{os.getpid()}}\\n")
    target.mkdir()
    for i in range({FILES}):
        (target / f"f{{i}}").write_text("x" * 1000)
        time.sleep(pause)

if locked:
    with cache_lock(cache, exclusive=True):
        tree = cached_tree(cache, "tree", build)
    with cache_lock(cache, exclusive=False):
        print(len(list(tree.iterdir())))
else:  # the control: the same builder without the lock
    print(len(list(cached_tree(cache, "tree", build).iterdir())))
"""

# Watches the cache without any lock: the tree must never be seen part-built.
WATCHER = """
import sys, time
from pathlib import Path
tree, deadline, seen = Path(sys.argv[1]) / "tree", time.monotonic() + float(sys.argv[2]), set()
while time.monotonic() < deadline:
    try:
        seen.add(len(list(tree.iterdir())))
    except FileNotFoundError:
        seen.add(-1)
    time.sleep(0.005)
print(sorted(seen))
"""


def _start(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", script, *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out.strip()


def _builders(cache: Path, log: Path, mode: str, pause: str = "0.02") -> list[str]:
    procs = [_start(BUILDER, str(cache), str(log), mode, pause) for _ in range(2)]
    return [_finish(p) for p in procs]


def test_two_concurrent_builders_build_once_and_both_see_the_whole_tree(tmp_path):
    cache, log = tmp_path / "cache", tmp_path / "log"
    watcher = _start(WATCHER, str(cache), "3")
    assert _builders(cache, log, "locked") == [str(FILES), str(FILES)]
    assert log.read_text().count("start") == 1  # one built, the other waited and used it
    assert sorted(p.name for p in cache.iterdir()) == sorted([LOCK_NAME, "tree"])  # no scratch
    seen = _finish(watcher)
    assert seen in (f"[-1, {FILES}]", f"[{FILES}]", "[-1]"), seen  # never part of the tree


def test_control_without_the_lock_both_build_and_trip_on_each_other(tmp_path):
    # Shows the harness sees what the lock prevents: without it both build, and one sweeps the
    # other's scratch as a dead builder's (that builder fails) or loses the rename.
    cache, log = tmp_path / "cache", tmp_path / "log"
    cache.mkdir()
    procs = [_start(BUILDER, str(cache), str(log), "unlocked", "0.05") for _ in range(2)]
    for proc in procs:
        proc.communicate(timeout=60)
    assert log.read_text().count("start") == 2


def test_a_builder_killed_half_way_leaves_nothing_the_next_one_trips_on(tmp_path):
    cache, log = tmp_path / "cache", tmp_path / "log"
    slow = _start(BUILDER, str(cache), str(log), "locked", "1")
    deadline = time.monotonic() + 30
    while not (log.exists() and "start" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(slow.pid, signal.SIGKILL)
    slow.communicate(timeout=30)
    assert any(p.name.startswith(SCRATCH_PREFIX) for p in cache.iterdir())  # half-built, hidden
    assert not (cache / "tree").exists()
    assert _finish(_start(BUILDER, str(cache), str(log), "locked", "0")) == str(FILES)
    assert sorted(p.name for p in cache.iterdir()) == sorted([LOCK_NAME, "tree"])


REAL_RUN = """
import subprocess, time
from tests.integration.podman_world import podman_world
with podman_world() as world:
    time.sleep(1)  # both runs hold the world at the same time
    assert world.podman("image", "exists", world.image).returncode == 0
    proc = world.podman("run", "--rm", "--network", "none", world.image, "python3", "-c",
                        "print('ok')")
    print(proc.stdout.strip() or proc.stderr[-300:])
"""


def test_two_test_runs_share_the_real_podman_world_at_once():
    runs = [_start(REAL_RUN) for _ in range(2)]
    outs = []
    for proc in runs:
        out, err = proc.communicate(timeout=900)  # the first build on a machine: debootstrap
        assert proc.returncode == 0, err
        outs.append(out.strip())
    assert outs == ["ok", "ok"]
