"""Runtime grants without a network: the ceiling, the deciders, expiry, revocation (with the
connections it cuts), the policy in force, grants.json, and the operator's channel."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from agentcage.domains import DomainMatcher, DomainRule, parse_pattern
from agentcage.gateway.control.ceiling import RequestError, Scope
from agentcage.gateway.control.channel import ChannelError, OperatorChannel, send
from agentcage.gateway.control.grants import AlreadyAllowed, Grants, LivePolicy
from agentcage.gateway.control.settings import PolicyApiSettings
from agentcage.policy import Policy
from agentcage.reserved import never_granted


class Clock:
    def __init__(self) -> None:
        self.now = time.time()  # the policy judges grants by the real time

    def __call__(self) -> float:
        return self.now


def make(path: Path | None = None, **settings) -> tuple[Grants, list, Clock, list]:
    records, cut, clock = [], [], Clock()
    defaults = {"grantable": ("pypi.org", "*.pythonhosted.org"), "max_ttl_seconds": 600}
    grants = Grants(PolicyApiSettings(**{**defaults, **settings}), path, records.append,
                    cut=lambda conns: cut.extend(conns) or len(list(conns)), clock=clock)
    return grants, records, clock, cut


def ask(grants: Grants, domain: str, allowed=lambda host: False, **more):
    return grants.ask({"domain": domain, "reason": "the task needs it", **more}, (80, 443),
                      allowed)


def test_the_rules_grant_what_the_ceiling_names_and_nothing_else():
    grants, records, _, _ = make()
    assert ask(grants, "pypi.org").status == "granted"
    assert ask(grants, "files.pythonhosted.org").status == "granted"
    assert ask(grants, "*.pythonhosted.org").status == "granted"  # within the wildcard
    for outside in ("evil.example", "pythonhosted.org", "*.pypi.org",
                    "pythonhosted.org.evil.example"):
        req = ask(grants, outside)
        assert (req.status, req.decided_by) == ("denied", "ceiling"), outside
    decided = [r for r in records if r.direction == "policy" and r.by == "rules"]
    assert len(decided) == 3 and all(r.decision == "allowed" for r in decided)


@pytest.mark.parametrize(("name", "wildcard", "why"), [
    ("pastebin.com", False, "paste site"), ("eu.pastebin.com", False, "paste site"),
    ("githubusercontent.com", True, "paste site"),  # * would cover gist.githubusercontent.com
    ("metadata.google.internal", False, "internal"), ("corp", True, "private network"),
    ("agentcage.local", False, "policy API"), ("local", True, "policy API"),
    ("printer.local", False, "special-use"),
    ("webhook.site", False, "request catcher"),
])
def test_what_is_never_granted(name, wildcard, why):
    assert why in (never_granted(name, wildcard) or "")


def test_names_that_merely_resemble_never_granted_ones_may_be():
    for name in ("githubusercontent.com", "raw.githubusercontent.com", "pypi.org",
                 "localmirror.example.com", "internal-docs.example.com"):
        assert never_granted(name) is None, name


def test_ttl_is_capped_and_max_grants_holds():
    grants, _, clock, _ = make(max_grants=2)
    first = ask(grants, "pypi.org", ttl_seconds=10_000)
    assert first.expires_at == pytest.approx(clock.now + 600)  # max_ttl_seconds
    assert ask(grants, "a.pythonhosted.org").status == "granted"
    third = ask(grants, "b.pythonhosted.org")
    assert (third.status, third.decided_by) == ("denied", "ceiling")
    assert "max_grants" in third.decision


@pytest.mark.parametrize(("body", "why"), [
    ({"domain": "pypi.org"}, "reason"),
    ({"domain": "pypi.org", "reason": "x" * 1001}, "at most 1000"),
    ({"domain": "pypi.org", "reason": "x", "ttl_seconds": -1}, "ttl_seconds"),
    ({"domain": "pypi.org", "reason": "x", "ttl_seconds": True}, "ttl_seconds"),
    ({"domain": "pypi.org", "reason": "x", "methods": ["G E T"]}, "methods"),
    ({"domain": "pypi.org", "reason": "x", "paths": ["simple"]}, "paths"),
    ({"domain": "pypi.org", "reason": "x", "paths": ["/a?b"]}, "paths"),
    ({"domain": "pypi.org", "reason": "x", "ports": [8443]}, "ports"),
    ({"domain": "https://pypi.org/", "reason": "x"}, "scheme"),
    ({"domain": 5, "reason": "x"}, "domain"),
    ({"domain": "pypi.org", "reason": "x", "grant": True}, "unknown"),
    (["pypi.org"], "JSON object"),
])
def test_a_malformed_request_is_refused_with_the_reason(body, why):
    grants, _, _, _ = make()
    with pytest.raises(RequestError, match=why):
        grants.ask(body, (80, 443), lambda host: False)
    assert grants.active() == []


def test_an_allowed_name_is_not_granted_again():
    grants, _, _, _ = make()
    with pytest.raises(AlreadyAllowed):
        ask(grants, "pypi.org", allowed=lambda host: host == "pypi.org")


def test_a_scope_narrows_a_grant():
    scope = Scope.requested(["get"], ["/simple/*"], [443], (80, 443))
    assert scope.allows("GET", "/simple/requests/?x=1", 443)
    assert not scope.allows("POST", "/simple/requests/", 443)
    assert not scope.allows("GET", "/upload", 443)
    assert not scope.allows("GET", "/simple/x", 80)
    assert Scope().allows("DELETE", "/anything", 80)  # the control: no scope, no narrowing


def test_the_human_decider_holds_a_request_until_the_operator_answers_or_time_is_up():
    grants, _, clock, _ = make(deciders=("human",), human_timeout_seconds=30)
    req = ask(grants, "pypi.org")
    assert req.status == "pending" and grants.active() == []
    approved = grants.approve(req.id)
    assert approved.status == "granted" and approved.decided_by == "human"
    with pytest.raises(RequestError, match="granted already"):
        grants.deny(req.id)
    later = ask(grants, "a.pythonhosted.org")
    clock.now += 31
    grants.tick()
    assert later.status == "denied" and "no answer from the operator" in later.decision
    outside = ask(grants, "evil.example")  # outside the ceiling: no human is asked
    assert (outside.status, outside.decided_by) == ("denied", "ceiling")


def test_the_operator_approves_within_the_ceiling_only():
    grants, _, _, _ = make(deciders=("human",), max_grants=1)
    first, second = ask(grants, "pypi.org"), ask(grants, "a.pythonhosted.org")
    grants.approve(first.id)
    with pytest.raises(RequestError, match="max_grants"):
        grants.approve(second.id)


def test_a_waiting_agent_is_told_the_answer():
    async def scenario():
        grants, _, _, _ = make(deciders=("human",))
        req = ask(grants, "pypi.org")
        waiting = asyncio.create_task(grants.wait(req.id, 5))
        await asyncio.sleep(0.05)
        grants.approve(req.id)
        return await asyncio.wait_for(waiting, 2)

    assert asyncio.run(scenario()).status == "granted"


def test_expiry_and_revocation_end_a_grant_and_cut_what_used_it():
    grants, records, clock, cut = make()
    a, b = ask(grants, "pypi.org", ttl_seconds=60), ask(grants, "a.pythonhosted.org")

    class Conn:
        def __init__(self, name):
            self.id = name

    first, second, third = Conn("c1"), Conn("c2"), Conn("c3")
    grant_a = grants.grant_of(grants.rules()[0])
    grant_b = grants.grant_of(grants.rules()[1])
    assert grant_a is not None and grant_b is not None
    grants.track(grant_a, first)
    grants.track(grant_b, second)
    grants.track(grant_b, third)
    grants.forget_connection(third)  # it closed by itself
    clock.now += 61
    grants.tick()
    assert cut == [first] and [g.id for g in grants.active()] == [b.grant_id]
    assert grants.revoke(b.grant_id) and cut == [first, second]
    assert grants.active() == [] and a.grant_id != b.grant_id
    ends = [r.reason for r in records if r.reason.startswith("grant ")]
    assert ends == ["grant expired; 1 connection(s) cut", "grant revoked; 1 connection(s) cut"]


def test_the_policy_in_force_is_domains_json_with_the_grants_added():
    grants, _, _, _ = make()
    base = Policy("allowlist", allow=DomainMatcher([DomainRule(parse_pattern("api.example"))]))
    live = LivePolicy(lambda: base, grants)
    assert not live.current().decide("pypi.org").allowed
    ask(grants, "pypi.org")
    verdict = live.current().decide("pypi.org")
    assert verdict.allowed and verdict.rule is not None
    assert verdict.rule.source.startswith("grant:")
    assert live.current().decide("api.example").allowed  # the base stays
    assert live.current() is live.current()  # made once per change
    broken = Policy.deny_all("policy file invalid")
    assert not LivePolicy(lambda: broken, grants).current().decide("pypi.org").allowed
    nothing = Policy(None)  # no mode denies everything, but what was granted
    assert LivePolicy(lambda: nothing, grants).current().decide("pypi.org").allowed
    assert not LivePolicy(lambda: nothing, grants).current().decide("api.example").allowed


def test_grants_in_force_outlive_the_gateway_and_requests_do_not(tmp_path):
    path = tmp_path / "grants.json"
    grants, _, _, _ = make(path, deciders=("rules",))
    kept = ask(grants, "pypi.org")
    doc = json.loads(path.read_text())
    assert [g["domain"] for g in doc["grants"]] == ["pypi.org"]
    again, _, _, _ = make(path)
    assert [g.id for g in again.active()] == [kept.grant_id]
    assert again.requests() == []
    # one the ceiling no longer allows is not kept
    narrowed, _, _, _ = make(path, grantable=("*.pythonhosted.org",))
    assert narrowed.active() == []


def test_the_operators_channel_answers_and_refuses(tmp_path):
    grants, _, _, _ = make(deciders=("human",))
    req = ask(grants, "pypi.org")
    channel = OperatorChannel(tmp_path, grants)
    import threading

    stop = threading.Event()

    def gateway():
        while not stop.is_set():
            channel.poll()
            stop.wait(0.02)

    thread = threading.Thread(target=gateway)
    thread.start()
    try:
        assert send(tmp_path, "approve", req.id)["request"]["status"] == "granted"
        with pytest.raises(ChannelError, match="no grant"):
            send(tmp_path, "revoke", "nothing.example")
        assert send(tmp_path, "revoke", "pypi.org")["revoked"][0]["domain"] == "pypi.org"
    finally:
        stop.set()
        thread.join()
    with pytest.raises(ChannelError, match="did not answer"):
        send(tmp_path, "sync", timeout=0.2)
    assert not list(tmp_path.iterdir())  # nothing left behind


def test_a_grant_the_audit_log_cannot_record_is_not_made():
    def full_disk(record):
        raise OSError(28, "No space left on device")

    grants = Grants(PolicyApiSettings(grantable=("pypi.org",)), None, full_disk)
    req = ask(grants, "pypi.org")
    assert (req.status, req.decided_by) == ("denied", "audit")
    assert grants.active() == [] and grants.rules() == ()
