"""The watcher's budgets, units on their own: each attack crosses its budget, and its control
(ordinary traffic of the same shape and size) crosses none. The gateway around them is
test_watcher_world.py's."""

from __future__ import annotations

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


def test_a_stream_keeps_what_repeats_stripped_and_measures_as_stripping_each_request_whole():
    """A host's stream keeps the last headers and small body it stripped of echoes, for the
    next request that sends them again, until an answer teaches new tokens (and the last
    answer, which teaches nothing when it comes again). Over requests that repeat and
    change their headers and bodies, with answers between them teaching tokens the later
    requests send back, every amount is that of stripping each request whole (its head as
    one, its body) through a compressor of its own, having learnt every answer."""
    from agentcage.gateway.watcher.budgets import _Stream

    rng = random.Random(11)
    tokens = [os.urandom(rng.randrange(8, 40)).hex().encode() for _ in range(12)]
    kept, whole = _Stream(600), _Stream(600)
    reference = zlib.compressobj(6, zlib.DEFLATED, 15, 8)
    headers = HEADERS
    body = b""
    stripped_some, taught = 0, 0  # the answers teach the tokens one by one, in order
    answer = b"{}"
    for i in range(400):
        soon = tokens[taught:taught + 2] or tokens  # what the next answers teach
        if rng.random() < 0.2:  # the headers change: a token in a cookie, or not
            headers = (*HEADERS, ("cookie", "s=" + rng.choice(soon).decode()))
        if rng.random() < 0.3:  # so does the body, small or not kept
            size = rng.choice([0, 50, 3000, 5000])
            body = b" ".join(rng.choice(soon) for _ in range(size // 40)) or b"{}"
        s = sent(target=f"/v1/items/{rng.choice(tokens).decode()}?page={i % 5}",
                 headers=headers, body=body)
        expected_head, expected_body = whole._strip(s.head()), whole._strip(body)
        stripped_some += expected_head != s.head() or expected_body != body
        expected = (len(reference.compress(expected_head + expected_body))
                    + len(reference.flush(zlib.Z_SYNC_FLUSH)))
        assert kept.information(s) == expected, i
        if rng.random() < 0.1:  # an answer (again, or a token the next requests send back)
            if rng.random() < 0.5:
                answer = b'{"next": "' + tokens[taught % len(tokens)] + b'"}'
                taught += 1
            kept.received(answer)
            whole.answer = None  # the reference learns every answer afresh
            whole.received(answer)
        if rng.random() < 0.02:  # a large answer, whose tokens crowd out all the others
            crowd = b" ".join(b"%016x" % rng.getrandbits(64) for _ in range(5000))
            kept.received(crowd)
            whole.received(crowd)
    assert stripped_some > 50  # the control: echoes were there to strip


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
    """In the gateway most requests are told to the budgets after they have left (at the
    watcher's next tick at the latest). When that fails it is audited, and the next request
    waits for it: it fails again, and the gateway refuses that request (fail closed)."""
    audit: list = []
    watcher = Watcher(WatcherSettings(), audit.append, load_patterns())
    watcher.lazy = True
    assert watcher.sent(sent(target="/a", body=b"one")) is None  # the control
    assert watcher.owed  # told once it has left
    watcher.tick()
    assert not watcher.owed
    stream, = [st for _, st in watcher.information._streams.items()]
    stream.compressor = _BrokenCompressor()
    assert watcher.sent(sent(target="/b", body=b"two")) is None  # it has left
    watcher.tick()
    watcher.tick()  # said once, not at every tick while it fails
    assert [r.reason for r in audit if r.decision == "flagged"] == [
        "cannot tell the budgets what was sent (error: injected fault); the next request "
        "waits for it"]
    with pytest.raises(zlib.error):
        watcher.sent(sent(target="/c", body=b"three"))
    with pytest.raises(zlib.error):  # and the one after it, while it fails
        watcher.sent(sent(target="/d", body=b"four"))


class _AtOnce(Watcher):
    """The reference: every request told to the budgets in its hook, none after it left."""

    def _may_wait(self, s: Sent) -> bool:
        return False


def _told(kind: type[Watcher], ticks: int) -> tuple[list, list, tuple, int]:
    """One cage's traffic told to a watcher of `kind` as the gateway tells it (lazily), its
    tick coming after every `ticks` requests (0: never). What each `sent` answered, the
    findings, the ladder and the information sent; and how many requests were still untold
    after theirs."""
    from agentcage.gateway.control.grants import Grants
    from agentcage.gateway.control.settings import PolicyApiSettings

    now = [1000.0]
    grants = Grants(PolicyApiSettings(grantable=("key.example.test",), max_ttl_seconds=600),
                    None, lambda r: None)
    grant = grants.ask({"domain": "key.example.test", "reason": "the task needs it"},
                       (443,), lambda host: False).grant_id
    assert grant is not None
    watcher = kind(WatcherSettings(), lambda r: None, load_patterns(), grants=grants,
                   clock=lambda: now[0])
    watcher.lazy = True
    pieces = [TOKEN[i:i + 4] for i in range(0, len(TOKEN), 4)]
    rng = random.Random(8)
    events = [  # each crossing one budget, in turn: a grant's, then two more
        *(sent("key.example.test", f"/c?d={p}", at=1000 + i / 10, grant=grant, flow=f"k{i}")
          for i, p in enumerate(pieces)),
        *(sent("drip.example.test", f"/c?d={p}", at=1100 + i / 10, flow=f"d{i}")
          for i, p in enumerate(pieces)),
        *(sent("ok.example.test", f"/v1/items?page={i}", body=rng.randbytes(rng.randrange(900)),
               at=1150 + i / 10, flow=f"o{i}") for i in range(40)),
        *(sent("poll.example.test", "/status", at=1200 + 2 * i, flow=f"p{i}")
          for i in range(9)),
        sent("api.anthropic.com", "/v1/messages", body=b"{}", at=1220, model_host=True),
    ]
    answers, untold = [], 0
    for i, s in enumerate(events):
        now[0] = s.at
        answers.append(watcher.sent(s))
        untold += bool(watcher._waiting)
        if i % 7 == 3:  # an answer, with a token the cage may send back
            watcher.answered(s.host, b'{"etag": "' + rng.randbytes(12).hex().encode() + b'"}',
                             40)
        if ticks and i % ticks == ticks - 1:
            watcher.tick()
    watcher.settle()
    answers = [why and why.replace(grant, "G") for why in answers]
    findings = [(f.budget, f.host, f.flow, f.action.replace(grant, "G"), f.at)
                for f in watcher.findings]
    ladder = (watcher.ladder.strikes, watcher.ladder.quarantined_until,
              int(watcher.information.total.value(now[0])))
    return answers, findings, ladder, untold


@pytest.mark.parametrize("ticks", [1, 5, 0], ids=["tick-each", "tick-every-5", "no-tick"])
def test_requests_told_after_they_left_find_and_refuse_what_telling_each_at_once_does(ticks):
    """Most requests are told to the budgets once they have left. Those of a cage that
    crosses three budgets in turn (the third quarantines it), through a runtime grant and
    not, with answers between them: every `sent` answers as it does when each is told in its
    hook (the same refusals), and the findings, the ladder and the amounts are the same."""
    later = _told(Watcher, ticks)
    at_once = _told(_AtOnce, ticks)
    assert later[:3] == at_once[:3]
    answers, findings, (strikes, until, information), untold = later
    assert untold > 0 and at_once[3] == 0  # the control: the watcher did wait
    assert [(b, h, f, a.split(" ")[0]) for b, h, f, a, _ in findings] == [
        ("reassembly", "key.example.test", "k9", "revoked"),
        ("reassembly", "drip.example.test", "d9", "recorded"),
        ("beacon", "poll.example.test", "p7", "recorded")]
    # refused: the piece that completed the key (its grant revoked), the beacon's request
    # that quarantined the cage and the one after it; the model's host is spared
    assert [i for i, why in enumerate(answers) if why] == [9, 67, 68]
    assert "revoked grant" in answers[9] and "quarantined" in answers[67]
    assert strikes == 1 and until == 1214 + 300 and information > 0


def test_a_grant_revoked_by_a_request_told_later_refuses_the_next_request_through_it():
    """A request told later can revoke a grant (the information budget's finding names the
    grant of the host that carried the most); the next request through that grant, judged
    by the policy before that was told, is refused when it is told to the watcher."""
    from agentcage.gateway.control.grants import Grants
    from agentcage.gateway.control.settings import PolicyApiSettings

    rng = random.Random(10)
    for kind in (Watcher, _AtOnce):
        grants = Grants(PolicyApiSettings(grantable=("g.example.test",)), None, lambda r: None)
        grant = grants.ask({"domain": "g.example.test", "reason": "the task needs it"},
                           (443,), lambda host: False).grant_id
        assert grant is not None
        watcher = kind(WatcherSettings(budgets=BudgetSettings(information_bytes=4096)),
                       lambda r: None, load_patterns(), grants=grants)
        watcher.lazy = True
        first = watcher.sent(sent("g.example.test", body=rng.randbytes(3000), at=1,
                                  grant=grant))
        watcher.tick()
        # before the next tick: the first crosses the budget, the second is the grant's
        crossing = watcher.sent(sent("a.example.test", body=rng.randbytes(2000), at=2))
        after = watcher.sent(sent("g.example.test", body=b"{}", at=2, grant=grant))
        assert first is None and crossing is None, kind
        assert after == f"the watcher revoked grant {grant}: it carried too much", kind
        assert [(f.budget, f.host, f.grant) for f in watcher.findings] == [
            ("information", "g.example.test", grant)]


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


def test_a_request_that_crosses_several_budgets_counts_once_towards_a_quarantine():
    """Repeated findings quarantine, not one request's several: the request that crosses
    two budgets at once makes two findings and one count; the next request's finding is
    the second count, which quarantines (escalate_after: 2)."""
    small = BudgetSettings(host_bytes=4096, information_bytes=4096)
    watcher = Watcher(WatcherSettings(escalate_after=2, budgets=small), lambda r: None,
                      load_patterns(), clock=lambda: 5.0)
    rng = random.Random(9)
    assert watcher.sent(sent("x.example.test", body=rng.randbytes(6000), at=1)) is None
    assert sorted(f.budget for f in watcher.findings) == ["host_bytes", "information"]
    assert not watcher.quarantined()
    why = watcher.sent(sent("y.example.test", body=rng.randbytes(6000), at=2))
    assert [f.budget for f in watcher.findings][2:] == ["host_bytes"]
    assert watcher.quarantined() and why is not None and "quarantined" in why
