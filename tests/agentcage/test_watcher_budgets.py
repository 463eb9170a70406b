"""The watcher's budgets, units on their own: each attack crosses its budget, and its control
(ordinary traffic of the same shape and size) crosses none. The gateway around them is
test_watcher_world.py's."""

from __future__ import annotations

import asyncio
import json
import os
import random
import string
import zlib
from urllib.parse import parse_qsl

import pytest

from agentcage.gateway.watcher.budgets import Beacon, HostBytes, Information, NewHosts
from agentcage.gateway.watcher.events import Sent
from agentcage.gateway.watcher.ladder import Ladder
from agentcage.gateway.watcher.names import ZoneNames, odd_label, zone_of
from agentcage.gateway.watcher.reassembly import Reassembly, fields_of
from agentcage.gateway.watcher.settings import BudgetSettings, WatcherSettings
from agentcage.gateway.watcher.watch import Watcher
from agentcage.gateway.watcher.windows import Once, SlidingSet, SlidingSum
from agentcage.inspect.patterns import load_patterns

B = BudgetSettings()
HEADERS = (("user-agent", "curl/8"), ("accept", "*/*"))


def sent(host: str = "api.example.test", target: str = "/", body: bytes = b"",
         at: float = 0.0, **kw) -> Sent:
    return Sent(host, 443, kw.pop("method", "POST"), target, kw.pop("headers", HEADERS), body,
                at, **kw)


def crossings(unit, events) -> list:
    return [c for e in events for c in unit.sent(e)]


# ---- windows -------------------------------------------------------------------------------

def test_a_sliding_sum_forgets_what_left_the_window_and_not_before():
    s = SlidingSum(100)
    s.add(0, 10)
    s.add(55, 5)
    assert s.value(99) == 15
    assert s.value(105) == 5  # the first slot has left
    assert s.value(200) == 0


def test_a_sliding_set_counts_distinct_keys_in_the_window():
    s = SlidingSet(10)
    for i in range(5):
        s.add(i, f"k{i % 3}")
    assert s.count(4) == 3
    assert s.count(13.5) == 1  # only k1, last seen at 4


def test_once_per_window_per_budget_and_key():
    once = Once(60)
    assert once.first(0, "b", "h") and not once.first(30, "b", "h")
    assert once.first(30, "b", "other") and once.first(61, "b", "h")


# ---- bytes and information -----------------------------------------------------------------

def test_bytes_per_host_cross_the_budget_and_the_model_host_has_its_own():
    unit = HostBytes(B, Once(B.window_seconds))
    chunk = b"x" * (1024 * 1024)
    found = crossings(unit, [sent(body=chunk, at=i) for i in range(17)])
    assert [c.budget for c in found] == ["host_bytes"]
    assert found[0].evidence["sent_bytes"] > B.host_bytes
    # the control: as much to the model's host is within its budget
    assert crossings(unit, [sent("api.anthropic.com", body=chunk, at=i, model_host=True)
                            for i in range(17)]) == []


def test_random_data_dripped_in_small_requests_adds_up_to_a_finding():
    unit = Information(B, Once(B.window_seconds))
    rng = random.Random(1)
    events = [sent(target="/upload", body=rng.randbytes(200), at=i * 0.5)
              for i in range(64 * 1024 // 200)]  # 64 KiB, 200 bytes a request
    found_at = [i for i, e in enumerate(events) for _ in unit.sent(e)]
    assert len(found_at) == 1, found_at
    # found once a little more than the budget had left, long before all 64 KiB had
    assert found_at[0] * 200 < B.information_bytes * 1.2
    assert unit.total.value(events[-1].at) > B.information_bytes


def test_the_same_api_call_over_and_over_adds_little_information():
    unit = Information(B, Once(B.window_seconds))
    body = json.dumps({"query": "status of the build", "page": 1, "fields": ["id", "state"]})
    events = [sent(target=f"/v1/builds?page={i % 7}", body=body.encode(), at=i)
              for i in range(2000)]
    assert crossings(unit, events) == []
    assert unit.total.value(1999) < B.information_bytes / 4


def test_a_package_install_of_many_distinct_urls_stays_within_the_information_budget():
    unit = Information(B, Once(B.window_seconds))
    rng = random.Random(2)
    names = ["".join(rng.choices(string.ascii_lowercase + "-", k=rng.randint(4, 14)))
             for _ in range(600)]
    headers = (("user-agent", "npm/10.8.2 node/v22 linux x64 workspaces/false"),
               ("npm-session", "3f2a9c1e0b7d4a66"), ("accept", "application/json"))
    events = [sent("registry.npmjs.org", f"/{n}/-/{n}-1.{i % 9}.0.tgz", method="GET",
                   headers=headers, at=i * 0.02) for i, n in enumerate(names)]
    assert crossings(unit, events) == []


def test_the_model_hosts_are_not_held_to_the_information_budget():
    unit = Information(B, Once(B.window_seconds))
    events = [sent("api.anthropic.com", body=os.urandom(4096), at=i, model_host=True)
              for i in range(100)]
    assert crossings(unit, events) == []


def test_requests_measured_later_cross_where_measured_at_once():
    """The information budget may measure a request after it has left (`settle`) when it
    cannot cross the budget: the amounts, the crossing and the request it stops are those of
    measuring every request at once, whatever answers come in between."""
    rng = random.Random(7)
    token = "".join(rng.choices(string.ascii_letters, k=24))
    events = []
    for i in range(1500):
        host = rng.choice(["a.example.test", "b.example.test", "c.example.test"])
        if rng.random() < 0.3:  # an answer, whose tokens the cage may send back
            events.append(("received", host, json.dumps({"etag": token, "n": i}).encode()))
            continue
        body = rng.choice([rng.randbytes(rng.randint(50, 400)), token.encode(),
                           json.dumps({"q": "status", "i": i % 5}).encode()])
        events.append(("sent", sent(host, f"/v1/x?i={i % 11}", body=body, at=i * 0.5,
                                    grant=rng.choice([None, "g1"]))))

    def run(settle_each: bool, readers: bool = False) -> tuple[list, int]:
        unit = Information(B, Once(B.window_seconds))
        found = []
        for i, event in enumerate(events):
            if event[0] == "received" and readers:  # read only when settled, as the gateway's
                unit.received(event[1], lambda body=event[2]: body, len(event[2]))
            elif event[0] == "received":
                unit.received(event[1], event[2])
            else:
                found += [(i, c) for c in unit.sent(event[1])]
            # at once, or when the gateway's loop comes round now and then
            if settle_each or rng.random() < 0.05:
                unit.settle()
        return found, int(unit.total.value(len(events) * 0.5))

    at_once, total = run(settle_each=True)
    assert at_once and total > B.information_bytes  # the drip crosses
    later = run(settle_each=False)
    assert later == (at_once, total)
    assert run(settle_each=False, readers=True) == (at_once, total)


def test_an_answer_that_cannot_be_read_teaches_no_echo():
    """The gateway tells an answer as a reader of its body, called once the answer has gone
    to the cage. One that fails teaches nothing (what is sent back then counts in full) and
    stops no request: learning echoes only ever lowers the count."""
    token = "".join(random.Random(3).choices(string.ascii_letters, k=192)).encode()
    amounts = {}
    for how in ("read", "fails"):
        unit = Information(B, Once(B.window_seconds))

        def reader(how=how) -> bytes:
            if how == "fails":
                raise RuntimeError("injected fault")
            return b'{"etag": "' + token + b'"}'

        unit.received("a.example.test", reader, 200)
        assert unit.sent(sent("a.example.test", "/x", body=token, at=1)) == ()
        amounts[how] = unit.total.value(1)
    assert amounts["fails"] > amounts["read"] + 100


class _BrokenCompressor:
    def compress(self, data: bytes) -> bytes:
        raise zlib.error("injected fault")


def test_a_measurement_that_fails_after_its_request_left_stops_the_next_request():
    """In the gateway a request that cannot cross the information budget is measured on the
    loop after its hook returned. When that fails it is audited, and the next request waits
    for it: it fails again, and the gateway refuses that request (fail closed)."""
    audit: list = []
    watcher = Watcher(WatcherSettings(), audit.append, load_patterns())

    async def go() -> None:
        assert watcher.sent(sent(target="/a", body=b"one")) is None  # the control
        assert watcher.information.owed  # measured once the hook has returned
        await asyncio.sleep(0)
        assert not watcher.information.owed
        stream, = [st for _, st in watcher.information._streams.items()]
        stream.compressor = _BrokenCompressor()
        assert watcher.sent(sent(target="/b", body=b"two")) is None  # it has left
        await asyncio.sleep(0)
        assert [r.reason for r in audit if r.decision == "flagged"] == [
            "cannot measure the information sent (error: injected fault); the next request "
            "waits for it"]
        with pytest.raises(zlib.error):
            watcher.sent(sent(target="/c", body=b"three"))

    asyncio.run(go())


# ---- beacons and new hosts -----------------------------------------------------------------

def test_a_steady_beacon_is_found_and_irregular_traffic_is_not():
    unit = Beacon(B, Once(B.window_seconds))
    found = crossings(unit, [sent("c2.example.test", at=2.0 * i) for i in range(10)])
    assert [c.budget for c in found] == ["beacon"]
    assert found[0].evidence["interval_seconds"] == 2.0
    rng = random.Random(3)
    t, events = 0.0, []
    for _ in range(200):
        t += rng.uniform(1, 30)
        events.append(sent("api.anthropic.com", at=t))
    assert crossings(unit, events) == []
    # a burst (a package install) is not a beacon, however regular
    assert crossings(unit, [sent("registry.npmjs.org", at=0.01 * i) for i in range(200)]) == []


def test_a_fan_out_over_granted_hosts_is_found_and_hosts_of_cage_yaml_are_not_counted():
    unit = NewHosts(B, Once(B.window_seconds))
    assert crossings(unit, [sent(f"h{i}.example.test", at=i) for i in range(50)]) == []
    found = crossings(unit, [sent(f"g{i}.wild.test", at=i, grant="g1") for i in range(20)])
    assert [c.budget for c in found] == ["new_hosts"] and found[0].grant == "g1"


# ---- names -----------------------------------------------------------------------------------

def test_names_fall_into_the_zone_a_wildcard_allows():
    assert zone_of("a.b.example.test") == "example.test"
    assert zone_of("x.y.example.co.uk") == "example.co.uk"


def test_many_names_under_one_zone_are_found_once_per_window():
    unit = ZoneNames(B, Once(B.window_seconds))
    found = [c for i in range(200) for c in unit.named(f"n{i}.wild.example.test", i * 0.1)]
    assert [c.budget for c in found] == ["zone_names"]
    assert found[0].host == "example.test" and found[0].evidence["names"] == B.zone_names + 1
    # the control: the same few names looked up again and again
    quiet = ZoneNames(B, Once(B.window_seconds))
    assert [c for i in range(500) for c in quiet.named(f"s{i % 5}.example.org", i)] == []


def test_labels_that_carry_data_are_found_and_ordinary_names_are_not():
    data = "".join(random.Random(4).choices("0123456789abcdef", k=32))
    assert odd_label(f"{data}.example.test", B) is not None
    assert odd_label("a" * 45 + ".example.test", B) is not None
    for name in ("registry.npmjs.org", "files.pythonhosted.org", "api.anthropic.com",
                 "production-database-replica.internal.example.com",
                 "d1a2b3c4d5e6f7.cloudfront.net", "objects.githubusercontent.com"):
        assert odd_label(name, B) is None, name
    found = list(ZoneNames(B, Once(600)).named(f"{data}.example.test", 0))
    assert [c.budget for c in found] == ["label"]
    assert data not in json.dumps(found[0].evidence) + found[0].summary  # its shape, not it


# ---- a credential in pieces -------------------------------------------------------------------

TOKEN = "ghp_" + "".join(random.Random(5).choices(string.ascii_letters + string.digits, k=36))


def test_a_token_split_over_ten_requests_is_put_together_and_found():
    unit = Reassembly(load_patterns(), Once(600))
    pieces = [TOKEN[i:i + 4] for i in range(0, len(TOKEN), 4)]
    assert len(pieces) == 10
    found = crossings(unit, [sent(target=f"/collect?seq={i}&d={p}", method="GET", at=i)
                             for i, p in enumerate(pieces)])
    assert [c.budget for c in found] == ["reassembly"]
    assert found[0].evidence["pattern"] == "github-token"
    assert found[0].evidence["pieces"] == 10
    assert TOKEN not in json.dumps(found[0].evidence) + found[0].summary


def test_pieces_in_a_json_body_field_and_in_path_segments_are_found_too():
    unit = Reassembly(load_patterns(), Once(600))
    pieces = [TOKEN[i:i + 8] for i in range(0, len(TOKEN), 8)]
    body_events = [sent(body=json.dumps({"event": "tick", "n": i, "v": p}).encode(), at=i)
                   for i, p in enumerate(pieces)]
    assert [c.evidence["field"] for c in crossings(unit, body_events)] == ["body"]
    unit = Reassembly(load_patterns(), Once(600))
    path_events = [sent("cdn.example.test", f"/img/{p}", method="GET", at=i)
                   for i, p in enumerate(pieces)]
    assert [c.evidence["field"] for c in crossings(unit, path_events)] == ["path"]


def test_a_whole_token_in_one_request_is_left_to_the_secrets_inspector():
    unit = Reassembly(load_patterns(), Once(600))
    assert crossings(unit, [sent(target=f"/t?d={TOKEN}", method="GET")]) == []


def test_ordinary_changing_fields_put_nothing_together():
    unit = Reassembly(load_patterns(), Once(600))
    rng = random.Random(6)
    events = [sent(target=f"/v1/items?page={i}&cursor={rng.getrandbits(64):x}",
                   body=json.dumps({"id": rng.getrandbits(32), "ts": 1700000000 + i,
                                    "name": rng.choice(["alpha", "beta"])}).encode(),
                   at=i) for i in range(1000)]
    assert crossings(unit, events) == []


@pytest.mark.parametrize("query", ["a=1&b=2", "a=&b", "&&a=1&", "a=1;b=2", "k==v=w", "a=1&a=2",
                                   "x=%41%2B&y=a+b", "q=caf%C3%A9", "", "=v", "é=ü"])
def test_the_fields_of_a_query_are_urllibs_pairs(query):
    """The query is split without urllib when it has nothing to decode: the same pairs."""
    fields = list(fields_of(sent(target=f"/p?{query}", headers=()), with_body=False))
    assert fields == [("path segment 1", "p")] + [
        ("query parameter " + k, v) for k, v in parse_qsl(query, keep_blank_values=True)]


# ---- the ladder --------------------------------------------------------------------------------

def test_findings_escalate_to_a_quarantine_that_ends_and_doubles_and_quiet_forgives():
    ladder = Ladder(WatcherSettings())
    assert ladder.finding(0) is None and ladder.finding(10) is None
    change = ladder.finding(20)
    assert change is not None and change.what == "quarantined" and change.until == 320
    assert ladder.quarantined(319) and not ladder.quarantined(320)
    assert ladder.tick(320).what == "recovered"
    for t in (330, 331, 332):
        change = ladder.finding(t) or change
    assert change.what == "quarantined" and change.until == 332 + 600  # doubled
    assert ladder.tick(932).what == "recovered"
    # a quiet window forgives a strike, then the next
    assert ladder.tick(932 + 600).what == "forgiven" and ladder.strikes == 1
    assert ladder.tick(932 + 1200).what == "forgiven" and ladder.strikes == 0
    assert ladder.tick(932 + 1800) is None


def test_one_finding_per_window_never_quarantines():
    ladder = Ladder(WatcherSettings())
    assert all(ladder.finding(600.0 * i + 1) is None for i in range(50))
