"""Faults injected into a running cage in the fake internet, as an unlucky operator would meet
them: the audit disk fills up, the gateway is killed. Egress must hold, and the audit must
tell the truth (every line whole, in order, written before the request it audits left).

All real: a real cage and gateway, a real tmpfs (mounted under a temporary directory for this
test and unmounted in a finalizer), real signals.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentcage.backends import host
from agentcage.backends.netplan import NetPlan
from tests.agentcage.conftest import start_cage
from tests.agentcage.test_gateway_world import canary, wait_for

pytestmark = pytest.mark.netns

ALLOW = ["api.example.test", "allowed.example.test"]
ENV = "FAULT_TOKEN"
SECRET = "cnry-" + os.urandom(16).hex()
EXTRA = f"""
secret_injection:
  - env: {ENV}
    inject_to: [api.example.test]
"""
PROXIED = "curl -sS -m 20"  # through $HTTPS_PROXY: no DNS lookup in the cage


@contextlib.contextmanager
def small_tmpfs(size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted on a fresh temporary directory, unmounted afterwards."""
    where = Path(tempfile.mkdtemp(prefix="agentcage-tmpfs-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                    str(where)], check=True)
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=False)
        with contextlib.suppress(OSError):
            where.rmdir()


def fill(directory: Path) -> Path:
    """Take every free block of the file system under `directory`; the file to delete."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    chunk = b"\0" * 65536
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]  # the last partial block too
    finally:
        os.close(fd)
    return filler


def audit_lines(cage) -> list[dict]:
    """Every line of the audit file, each of which must be a whole JSON record."""
    data = cage.cage.audit.read_bytes()
    assert data.endswith(b"\n"), "the audit file ends in a torn line"
    records = []
    for number, line in enumerate(data.split(b"\n")[:-1], 1):
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"audit line {number} is torn: {line[:120]!r}") from None
    return records


def status(cage, path: str) -> str:
    r = cage.sh(f'{PROXIED} -o /dev/null -w "%{{http_code}}" '
                f'-H "Authorization: Bearer ${ENV}" https://api.example.test{path}', timeout=40)
    return r.stdout.strip()


# ---- the audit disk fills up -------------------------------------------------------------------

def test_full_audit_disk_lets_nothing_out_unaudited(net):
    """AGENTCAGE_HOME on a 4 MiB tmpfs, filled to the last block while the cage runs. Every
    request that reached the internet (with the real secret injected) has its `outbound`
    record, written before it left; every one without it was refused (503) and reached nothing;
    no line is torn or out of order. With room again, traffic flows and a record says how many
    records were lost, and that what they audited was refused."""
    with small_tmpfs("4m") as disk:
        gen = start_cage(net, "diskfull", ALLOW, home=disk / "home", extra=EXTRA)
        cage = next(gen)
        try:
            assert cage.service.secret_set(cage.name, ENV, SECRET.encode())["applied"]
            assert status(cage, f"/{canary()}-control") == "200"  # the harness works
            filler = fill(disk)
            tried = [(c, status(cage, f"/{c}")) for c in (canary() for _ in range(8))]
            records = audit_lines(cage)
            stamps = [r["ts"] for r in records]
            assert stamps == sorted(stamps), "audit records out of order"
            refused = [c for c, code in tried if code != "200"]
            assert refused, f"the disk never filled up: {tried}"
            for c, code in tried:
                sent = [r for r in records if r.get("direction") == "outbound"
                        and r.get("path") == f"/{c}" and r["decision"] == "allowed"]
                arrived = [q for q in net.http_requests() if q["path"] == f"/{c}"]
                if arrived:  # it went out: its decision was on disk first, and the secret too
                    assert sent, f"{c} reached the internet without an audit record"
                    assert arrived[0]["headers"]["authorization"] == f"Bearer {SECRET}"
                if code != "200":
                    assert code == "503", (c, code)
                if not sent:  # refused before it left: nothing of it reached the internet
                    assert not arrived and code == "503", (c, code)
                # (one that left, audited, may still get a 503: its response withheld when
                # the record of it could not be written; other writers of the state
                # directory, the watcher's, free and take blocks, so the disk is not full
                # for ever once it filled)
            filler.unlink()
            assert status(cage, f"/{canary()}-after") == "200"
            records = audit_lines(cage)
            # one record per outage (more than one when the disk had room for a while in
            # between), each written before the record that followed it
            outages = [r for r in records if r.get("direction") == "audit"]
            assert outages and all(o["decision"] == "blocked" for o in outages)
            # each refusal lost a record: its request's, or its response's (withheld)
            assert sum(o["lost"] for o in outages) >= len(refused)
            assert all(records.index(o) < len(records) - 1 for o in outages)
        finally:
            gen.close()


# ---- the gateway dies --------------------------------------------------------------------------

def gateway_children(pid: int) -> list[int]:
    """The gateway process(es) its supervisor forked."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(p) for p in (task / "children").read_text().split()]
    return [p for p in found if host.pid_matches(p, "agentcage.gateway")]


def deaths(cage) -> list[dict]:
    return [r for r in cage.audit() if r.get("direction") == "gateway"]


def test_gateway_killed_is_recorded_by_its_supervisor(net):
    """`kill -9` of the gateway: egress is cut (fail closed), `ls` says broken, and the audit
    log says when and why (the supervisor saw the signal)."""
    gen = start_cage(net, "killed", ALLOW)
    cage = next(gen)
    try:
        assert cage.sh(f"{PROXIED} -o /dev/null -w '%{{http_code}}' "
                       "https://allowed.example.test/").stdout == "200"
        supervisor = int(cage.runtime["gateway_pid"])
        (gateway,) = gateway_children(supervisor)
        before = time.time()
        os.kill(gateway, signal.SIGKILL)
        assert wait_for(lambda: not host.alive(supervisor), 10)
        (row,) = [r for r in cage.service.ls() if r["name"] == cage.name]
        assert row["status"] == "broken"
        (death,) = deaths(cage)
        assert death["by"] == "supervisor"
        assert (death["pid"], death["process"]) == (supervisor, gateway)
        assert "killed by signal 9 (SIGKILL)" in death["reason"]
        assert before <= death["died_at"] <= time.time()
        cage.service.ls()  # noticed again: still one record
        assert len(deaths(cage)) == 1
    finally:
        gen.close()


def test_gateway_killed_with_its_supervisor_is_recorded_by_the_cli(net):
    """Both killed at once: nothing is left to say why, so the CLI's next status records it,
    with the time it noticed and the gateway's last sign of life."""
    gen = start_cage(net, "killedall", ALLOW)
    cage = next(gen)
    try:
        supervisor = int(cage.runtime["gateway_pid"])
        (gateway,) = gateway_children(supervisor)
        os.kill(supervisor, signal.SIGKILL)  # the gateway follows it (PR_SET_PDEATHSIG)
        assert wait_for(lambda: not host.alive(gateway), 10)
        assert deaths(cage) == []  # nobody noticed yet
        # fail closed: from the cage's network namespace, nothing gets through any more
        plan = NetPlan.from_dict(cage.runtime["plan"])
        r = subprocess.run(["nsenter", f"--net=/run/netns/{plan.cage_ns}", "curl", "-sS", "-m",
                            "5", "-o", "/dev/null", "-w", "%{http_code}", "-x",
                            f"http://{plan.gateway_address}:8080",
                            f"http://allowed.example.test/{canary()}"],
                           capture_output=True, text=True, check=False)
        assert r.returncode != 0 and r.stdout in ("000", ""), r
        before = time.time()
        (row,) = [r for r in cage.service.ls() if r["name"] == cage.name]
        assert row["status"] == "broken"
        (death,) = deaths(cage)
        assert death["by"] == "cli" and death["pid"] == supervisor
        assert before <= death["ts"] <= time.time()
        assert death["last_seen"] is not None and death["last_seen"] <= death["ts"]
    finally:
        gen.close()


# ---- upstreams that hang -----------------------------------------------------------------------

TIMEOUTS = {"first_byte_timeout_seconds": 2, "idle_timeout_seconds": 2}
TRANSPARENT = "curl -sS -m 60 --noproxy '*'"


@pytest.fixture(scope="module")
def slow(net):
    yield from start_cage(net, "timeouts", ALLOW, gateway=TIMEOUTS)


def timed(cage, url: str) -> tuple[int, str, float]:
    """(curl exit code, HTTP status, seconds) of one request from the cage."""
    r = cage.sh(f'{TRANSPARENT} -o /dev/null -w "%{{http_code}} %{{time_total}}" "{url}"',
                timeout=90)
    code, seconds = r.stdout.split()
    return r.returncode, code, float(seconds)


def outcome(cage, fragment: str) -> dict:
    (rec,) = [r for r in cage.audit() if r.get("direction") == "response"
              and fragment in (r.get("path") or "")]
    return rec


def test_upstream_that_never_answers_is_cut_at_the_first_byte_timeout(slow):
    """The upstream accepts the request and says nothing for 40 s: the cage gets a 502 long
    before that (a ratio of the server's own silence, not an absolute bound), audited as a
    timeout."""
    c = canary()
    code, status, seconds = timed(slow, f"https://api.example.test/hang?seconds=40&c={c}")
    assert status == "502" and seconds < 40 / 4, (code, status, seconds)
    rec = outcome(slow, c)
    assert (rec["decision"], rec["by"], rec["outcome"]) == ("blocked", "timeout", "timeout")
    assert "first byte timeout" in rec["reason"]


def test_upstream_that_falls_silent_is_cut_at_the_idle_timeout(slow):
    """The upstream sends a first piece, then nothing for 20 s: the transfer is cut (curl sees
    a broken body) well before the silence ends, audited as an idle timeout; a pause shorter
    than the timeout (the control) is served whole."""
    code, _status, seconds = timed(slow, "https://api.example.test/download/50000?"
                                         "chunked=1&pause=20000&idle=1")
    assert code != 0 and seconds < 20 / 2, (code, seconds)
    rec = outcome(slow, "idle=1")
    assert (rec["by"], rec["outcome"]) == ("timeout", "timeout")
    assert "idle timeout" in rec["reason"]
    code, status, _ = timed(slow, "https://api.example.test/download/50000?"
                                  "chunked=1&pause=500&control=1")
    assert (code, status) == (0, "200")
    assert outcome(slow, "control=1")["outcome"] == "served"


@pytest.mark.parametrize("flag", ["--http2", "--http1.1"])
def test_a_client_that_closes_after_its_answer_was_served_not_blocked(slow, flag):
    """Like Codex on its model calls: the client has what it wanted (the first event) and
    closes the stream while the server would still send. The audit says it was served and
    then closed by the client, not "blocked"."""
    c = canary()
    r = slow.sh(f"{TRANSPARENT} {flag} 'https://api.example.test/download/200000?"
                f"chunked=1&pause=1500&c={c}' | head -c 100 | wc -c")
    assert r.stdout.strip() == "100", r  # it was served
    rec = wait_for(lambda: [x for x in slow.audit() if x.get("direction") == "response"
                            and c in (x.get("path") or "")], 10)
    assert rec, "no response record"
    # mitmproxy may notice the close before the server's last piece (client-closed) or only
    # after it (served): either way the cage was served, and nothing was blocked
    assert rec[0]["decision"] == "allowed", rec[0]["reason"]
    assert rec[0]["outcome"] in ("client-closed", "served"), rec[0]["reason"]


# ---- the resolver under load -------------------------------------------------------------------

LOAD_CLIENT = (Path(__file__).parent / "load_client.py").read_text()


def test_resolver_answers_every_query_under_200_concurrent_connections(net):
    """1000 transparent HTTPS connections, 200 at a time (4 client processes of 50 threads),
    each resolving its name through the cage's resolver first: every one resolves and is
    served. And the resolver does not wait in the proxy's queue: under the same load, 99% of
    lookups take less than a quarter of the median connection (on the proxy's own event loop,
    a lookup waited as long as a connection, seconds, near the cage's 5 s resolver timeout).
    With the default rate limit: it is sized so that such a load never meets it."""
    gen = start_cage(net, "load", ALLOW)
    cage = next(gen)
    try:
        spec = json.dumps({"names": ALLOW, "total": 250, "concurrency": 50, "path": "/load",
                           "timeout": 120})
        (cage.project / "load.py").write_text(LOAD_CLIENT)
        # each client's report to a file of its own: four ~10 KB lines written to one pipe at
        # once would interleave (a pipe keeps writes whole only up to 4 KiB)
        r = cage.sh(" & ".join(f"python3 /workspace/load.py '{spec}' >/tmp/load-{i}.json"
                               for i in range(4)) + "; wait; cat /tmp/load-*.json",
                    timeout=600)
        runs = [json.loads(line) for line in r.stdout.splitlines()]
        assert len(runs) == 4, r
        tally = {k: sum(run[k] for run in runs) for k in ("ok", "dns", "other")}
        assert tally == {"ok": 1000, "dns": 0, "other": 0}, [run["errors"] for run in runs]
        lookups = sorted(t for run in runs for t in run["resolve_s"])
        connections = sorted(t for run in runs for t in run["request_s"])
        p99, median = lookups[int(len(lookups) * 0.99)], connections[len(connections) // 2]
        assert p99 < median / 4, f"lookups p99 {p99:.3f} s, connections median {median:.3f} s"
    finally:
        gen.close()
