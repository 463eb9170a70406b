"""The watcher in the fake internet: each exfiltration through allowed hosts that passes the
per-request inspectors (a token in ten pieces, random data dripped 200 bytes a request, names
spelled under an allowed wildcard, a beacon every 2 s, a fan-out over a wildcard grant) is
found within one window, its grant revoked, its connections cut, and the operator restores it;
repeated findings quarantine the cage to the model's host, which ends by itself or by the
operator. Controls: ordinary traffic of the same cages, a large upload to the model's host.
The real agents' sessions and package installs are the other controls: their tests assert
that they make no finding (test_real_agents.py, test_workloads_world.py)."""

from __future__ import annotations

import json
import os
import random
import shutil
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agentcage.conftest import World, needs_root, start_cage

CLI = [sys.executable, "-m", "agentcage.cli"]
API = "https://agentcage.local"
TRAFFIC = Path(__file__).with_name("agent_traffic.py")
FAN = tuple(f"h{i}.fan.example.test" for i in range(20))  # under a wildcard grant
NAMES = ("allowed.example.test", "key.example.test", "drop.example.test",
         "beacon.example.test", "api.anthropic.com", *FAN)
TOKEN = "ghp_" + "".join(random.Random(7).choices(string.ascii_letters + string.digits, k=36))


@pytest.fixture(scope="module")
def world():
    needs_root()
    from fakenet import FakeInternet

    # the catch-all answers the names looked up under the wildcard zone (none is dialled)
    with FakeInternet(extra_names={n: None for n in NAMES}, catch_all=True) as internet:
        yield World(internet, internet.add_client().netns)


def settings(**watcher: object) -> str:
    return ("policy_api:\n  grantable: [key.example.test, drop.example.test, "
            "beacon.example.test, \"*.fan.example.test\"]\n"
            "watcher: " + json.dumps(watcher) + "\n")


@pytest.fixture
def cage(world, request):
    marker = request.node.get_closest_marker("watcher")
    extra = settings(**(marker.args[0] if marker else {}))
    if marker and marker.kwargs.get("capture"):
        extra += "capture: {enable_har: true}\n"
    yield from start_cage(world, "watched", ["allowed.example.test", "api.anthropic.com",
                                             "'*.zone.example.test'"], extra=extra)


def traffic(cage, *args: object, timeout: float = 120) -> list[int]:
    """agent_traffic.py in the cage: the statuses its requests got."""
    shutil.copy(TRAFFIC, cage.project / "agent_traffic.py")
    r = cage.sh(f"python3 /workspace/agent_traffic.py {' '.join(map(str, args))}",
                timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def grant(cage, domain: str) -> str:
    """The agent asks the policy API for `domain` and is granted it (the rules decider)."""
    body = json.dumps({"domain": domain, "reason": "fetch the data of the project"})
    r = cage.sh(f"curl -sS -m 15 -X POST --data-binary '{body}' {API}/v1/allowlist/requests")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "granted", r.stdout + r.stderr
    return str(doc["grant_id"])


def operator(cage, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTCAGE_HOME": str(cage.service.store.root)}
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def granted(cage) -> list[str]:
    r = operator(cage, "cage", "grants", cage.name, "list", "--json")
    return [g["id"] for g in json.loads(r.stdout)["grants"]]


def wait_for(predicate, seconds: float = 10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if (value := predicate()):
            return value
        time.sleep(0.1)
    return predicate()


def reach(cage, host: str) -> str:
    r = cage.sh(f"curl -sS -m 10 --noproxy '*' -o /dev/null -w '%{{http_code}}' "
                f"https://{host}/x")
    return r.stdout.strip()


def assert_restorable(cage, grant_id: str, host: str) -> None:
    """The operator puts the revoked grant back, and its host is reachable again."""
    assert reach(cage, host) == "403"
    r = operator(cage, "watcher", "restore", cage.name, grant_id)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"grant {grant_id} restored" in r.stdout
    assert grant_id in granted(cage)
    assert reach(cage, host) == "200"


# ---- the attacks --------------------------------------------------------------------------------

@pytest.mark.netns
def test_a_token_sent_in_ten_pieces_is_found_and_its_grant_revoked(cage, world):
    grant_id = grant(cage, "key.example.test")
    statuses = traffic(cage, "split", "key.example.test", TOKEN, 10)
    # each piece passed the inspectors; the tenth put the token together and did not leave
    assert statuses[:9] == [200] * 9 and statuses[9] == 403, statuses
    sent = [r["path"] for r in world.http_requests() if r["host"] == "key.example.test"]
    assert len(sent) == 9 and not any(TOKEN in p for p in sent)
    [finding] = cage.findings()
    assert finding["budget"] == "reassembly" and finding["host"] == "key.example.test"
    assert finding["evidence"]["pattern"] == "github-token"
    assert finding["evidence"]["pieces"] == 10
    assert finding["action"] == f"revoked grant {grant_id}"
    # never the token, anywhere the cage's records are
    state = cage.service.store.cage(cage.name).root
    for name in ("watcher.json", "audit.jsonl", "grants.json"):
        assert TOKEN not in (state / name).read_text(), name
    assert grant_id not in granted(cage)
    assert_restorable(cage, grant_id, "key.example.test")


@pytest.mark.netns
def test_a_token_in_pieces_to_a_host_cage_yaml_allows_is_recorded_once_the_pieces_left(cage):
    """A request no finding could refuse (to a host cage.yaml allows, the cage far from a
    quarantine) is told to the budgets after it has left: every piece goes, and the finding
    is recorded by the watcher's next tick, on the flow that completed the token."""
    assert traffic(cage, "split", "allowed.example.test", TOKEN, 10) == [200] * 10
    [finding] = wait_for(cage.findings, 5)
    assert (finding["budget"], finding["host"], finding["action"]) == (
        "reassembly", "allowed.example.test", "recorded")
    assert finding["evidence"]["pieces"] == 10
    flows = [r["flow"] for r in cage.audit() if r.get("direction") == "outbound"
             and r.get("host") == "allowed.example.test" and r.get("reason") == (
                 "forwarded upstream")]
    assert len(flows) == 10 and finding["flow"] == flows[-1]


@pytest.mark.netns
def test_random_data_dripped_200_bytes_a_request_is_found_and_its_connection_cut(cage, world):
    grant_id = grant(cage, "drop.example.test")
    *statuses, opened = traffic(cage, "drip", "drop.example.test", 64 * 1024, 200)
    # every request passed the entropy inspector (200 random bytes are too few for it); the
    # budget stopped the drip long before 64 KiB had left
    assert statuses[-1] in (403, 0) and statuses[:-1] == [200] * (len(statuses) - 1)
    # found at the budget of 48 KiB of information (the headers' share included)
    assert 40 * 1024 / 200 <= len(statuses) < 64 * 1024 / 200 * 0.9, len(statuses)
    # the keep-alive connection it used was cut, not only new requests refused
    assert opened == 2
    [finding] = cage.findings()
    assert finding["budget"] == "information" and finding["host"] == "drop.example.test"
    assert finding["action"] == f"revoked grant {grant_id}"
    assert_restorable(cage, grant_id, "drop.example.test")


@pytest.mark.netns
def test_names_spelled_under_an_allowed_wildcard_zone_are_found(cage):
    r = cage.sh("for i in $(seq 1 200); do getent hosts n$i.zone.example.test >/dev/null; "
                "done; echo done")
    assert "done" in r.stdout
    found = wait_for(lambda: [f for f in cage.findings() if f["budget"] == "zone_names"])
    assert [f["host"] for f in found] == ["example.test"]
    assert found[0]["evidence"]["names"] > 64
    # cage.yaml allows the zone: recorded, nothing of cage.yaml's allowlist narrowed
    assert found[0]["action"] == "recorded"
    assert reach(cage, "allowed.example.test") == "200"


@pytest.mark.netns
def test_a_beacon_every_two_seconds_is_found_and_its_grant_revoked(cage):
    grant_id = grant(cage, "beacon.example.test")
    statuses = traffic(cage, "beacon", "beacon.example.test", 9, 2)
    assert statuses[:7] == [200] * 7 and statuses[7] == 403, statuses
    [finding] = cage.findings()
    assert finding["budget"] == "beacon"
    assert abs(finding["evidence"]["interval_seconds"] - 2) < 0.3
    assert_restorable(cage, grant_id, "beacon.example.test")


@pytest.mark.netns
def test_a_fan_out_over_a_wildcard_grant_is_found_and_the_grant_revoked(cage):
    grant_id = grant(cage, "*.fan.example.test")
    statuses = traffic(cage, "fan", "fan.example.test", 20)
    assert statuses[:16] == [200] * 16 and statuses[16] == 403, statuses
    found = [f for f in cage.findings() if f["budget"] == "new_hosts"]
    assert len(found) == 1 and found[0]["action"] == f"revoked grant {grant_id}"
    assert grant_id not in granted(cage)


# ---- escalation, recovery, the operator -------------------------------------------------------

@pytest.mark.netns
@pytest.mark.watcher({"escalate_after": 2, "quarantine_seconds": 10})
def test_repeated_findings_quarantine_the_cage_to_the_models_host_until_released(cage):
    grant(cage, "key.example.test")
    traffic(cage, "split", "key.example.test", TOKEN, 10)
    assert reach(cage, "allowed.example.test") == "200"  # one finding: no quarantine yet
    grant(cage, "beacon.example.test")
    traffic(cage, "beacon", "beacon.example.test", 8, 1.5)
    # two findings: everything but the model's host refused, and said why
    r = cage.sh("curl -sS -m 10 --noproxy '*' https://allowed.example.test/x")
    page = json.loads(r.stdout)
    assert page["by"] == "watcher" and "quarantined" in page["reason"]
    assert reach(cage, "api.anthropic.com") == "200"
    status = json.loads(operator(cage, "watcher", "status", cage.name, "--json").stdout)
    assert status["quarantined"] is True and status["strikes"] == 1
    assert status["by_budget"] == {"beacon": 1, "reassembly": 1}
    # timed recovery: after its 10 s the cage reaches its allowlist again by itself
    assert wait_for(lambda: reach(cage, "allowed.example.test") == "200", 20)

    def states() -> list[str]:
        return [r["state"] for r in cage.audit()
                if r.get("direction") == "watcher" and "state" in r]

    assert wait_for(lambda: states() == ["quarantined", "recovered"], 5), states()


@pytest.mark.netns
@pytest.mark.watcher({"escalate_after": 1, "quarantine_seconds": 3600})
def test_the_operator_releases_a_quarantine(cage):
    grant(cage, "key.example.test")
    traffic(cage, "split", "key.example.test", TOKEN, 10)
    assert reach(cage, "allowed.example.test") == "403"
    shown = operator(cage, "watcher", "status", cage.name)
    assert "QUARANTINED" in shown.stdout, shown.stdout + shown.stderr
    r = operator(cage, "watcher", "release", cage.name)
    assert r.returncode == 0, r.stderr
    assert reach(cage, "allowed.example.test") == "200"
    assert "watching" in operator(cage, "watcher", "status", cage.name).stdout


@pytest.mark.netns
@pytest.mark.watcher({"action": "record"})
def test_with_action_record_a_finding_narrows_nothing(cage):
    grant_id = grant(cage, "beacon.example.test")
    statuses = traffic(cage, "beacon", "beacon.example.test", 9, 2)
    assert statuses == [200] * 9
    [finding] = cage.findings()
    assert finding["budget"] == "beacon" and finding["action"] == "recorded"
    assert grant_id in granted(cage)


# ---- controls ---------------------------------------------------------------------------------

@pytest.mark.netns
def test_a_large_ordinary_upload_to_the_models_host_and_everyday_traffic_make_no_finding(cage):
    assert traffic(cage, "upload", "api.anthropic.com", 8 * 1024 * 1024) == [200]
    r = cage.sh("for i in $(seq 1 30); do curl -sS -m 10 -o /dev/null "
                "https://allowed.example.test/page/$i; sleep 0.$((i % 7)); done; "
                "getent hosts www.zone.example.test; echo done")
    assert "done" in r.stdout
    assert cage.findings() == []
    assert "no findings" in operator(cage, "watcher", "findings", cage.name).stdout


@pytest.mark.netns
def test_findings_and_status_are_readable_as_json_and_at_80_columns(cage):
    grant(cage, "key.example.test")
    traffic(cage, "split", "key.example.test", TOKEN, 10)
    doc = json.loads(operator(cage, "watcher", "findings", cage.name, "--json").stdout)
    assert doc["kind"] == "watcher_findings" and len(doc["findings"]) == 1
    shown = operator(cage, "watcher", "findings", cage.name).stdout
    assert "reassembly" in shown and "key.example.test" in shown
    assert all(len(line) <= 80 for line in shown.splitlines()), shown


@pytest.mark.netns
@pytest.mark.watcher({}, capture=True)
def test_a_cage_that_alarmed_fails_verify_its_report_and_its_capture_say_why(cage, tmp_path):
    from agentsec.reportfile import load_report

    clean = operator(cage, "verify", cage.name, "--out", str(tmp_path / "a"), "--json")
    assert clean.returncode == 0, clean.stdout[-2000:] + clean.stderr
    assert json.loads(clean.stdout)["watcher"]["findings"] == 0
    # the saved report says the watcher had nothing (read back through the schema)
    saved = load_report(tmp_path / "a" / "cage-watched.json")["target"]["watcher"]
    assert (saved["enabled"], saved["finding_count"], saved["findings"]) == (True, 0, [])
    assert "had no finding" in (tmp_path / "a" / "cage-watched.md").read_text()
    grant_id = grant(cage, "key.example.test")
    traffic(cage, "split", "key.example.test", TOKEN, 10)
    alarmed = operator(cage, "verify", cage.name, "--out", str(tmp_path / "b"), "--json")
    assert alarmed.returncode == 2, alarmed.stdout[-2000:] + alarmed.stderr
    doc = json.loads(alarmed.stdout)
    assert doc["passed"] is False and doc["watcher"]["by_budget"] == {"reassembly": 1}
    assert "a cage that alarmed is not a clean cage" in alarmed.stderr
    # and so does the report it saved: the JSON, the Markdown, the HTML page made from it
    saved = load_report(tmp_path / "b" / "cage-watched.json")["target"]["watcher"]
    assert (saved["finding_count"], saved["by_budget"]) == (1, {"reassembly": 1})
    [finding] = saved["findings"]
    assert (finding["budget"], finding["host"]) == ("reassembly", "key.example.test")
    assert finding["action"] == f"revoked grant {grant_id}"
    markdown = (tmp_path / "b" / "cage-watched.md").read_text()
    assert "had 1 finding(s) when it was measured (reassembly 1): the cage alarmed" in markdown
    page = tmp_path / "b.html"
    shown = subprocess.run([sys.executable, "-m", "agentsec.cli", "report",
                            str(tmp_path / "b" / "cage-watched.json"), "--out", str(page)],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "the cage alarmed" in page.read_text() and "key.example.test" in page.read_text()
    assert TOKEN not in (tmp_path / "b" / "cage-watched.json").read_text() + markdown
    allowed = operator(cage, "verify", cage.name, "--out", str(tmp_path / "c"),
                       "--allow-watcher-findings")
    assert allowed.returncode == 0, allowed.stdout[-2000:] + allowed.stderr
    assert "watcher: 1 finding(s) (reassembly 1)" in allowed.stdout
    # the HAR export names the finding on the request that crossed the budget
    har = operator(cage, "har", cage.name, "-o", str(tmp_path / "cage.har"))
    assert har.returncode == 0, har.stderr
    log = json.loads((tmp_path / "cage.har").read_text())["log"]
    assert "1 watcher finding(s)" in log["comment"]
    [entry] = [e for e in log["entries"] if "watcher finding" in e.get("comment", "")]
    assert "reassembly" in entry["comment"] and entry["response"]["status"] == 403
    assert TOKEN not in json.dumps(log)
