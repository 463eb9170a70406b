"""The policy API at agentcage.local, in the fake internet: an agent (a script in the cage) lists,
asks, is granted by the rules within the ceiling, uses the grant within its scope, sees it
expire; the operator approves, denies, revokes and promotes from the CLI; revocation and expiry
cut live connections; bad input, a flood and names never granted are refused; the API is the
cage's alone. Each refusal is paired with a control that must pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentcage.gateway.settings import SINKHOLE_ADDRESS
from tests.agentcage.conftest import World, needs_root, start_cage

CLI = [sys.executable, "-m", "agentcage.cli"]
WS_CLIENT = (Path(__file__).parent.parent / "ws_client.py").read_text()
API = "https://agentcage.local"
NAMES = ("granted.example.test", "scoped.example.test", "human.example.test",
         "other.example.test", "wild.example.test")


@pytest.fixture(scope="module")
def world():
    needs_root()
    from fakenet import FakeInternet

    with FakeInternet(extra_names={n: None for n in NAMES}, catch_all=False) as internet:
        yield World(internet, internet.add_client().netns)


def policy(grantable: list[str], **more: object) -> str:
    lines = [f"  grantable: [{', '.join(json.dumps(g) for g in grantable)}]"]
    lines += [f"  {k}: {json.dumps(v)}" for k, v in more.items()]
    return "policy_api:\n" + "\n".join(lines) + "\n"


@pytest.fixture
def cage(world, request):
    marker = request.node.get_closest_marker("policy")
    extra = marker.args[0] if marker else policy(["granted.example.test"])
    yield from start_cage(world, "api", ["allowed.example.test"], extra=extra)


def call(cage, method: str, path: str, body: object | None = None, *,
         raw: str | None = None, timeout: float = 15) -> tuple[int, dict]:
    """One request to the policy API from inside the cage: (status, JSON body)."""
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    send = "" if data is None else "--data-binary @/tmp/sent "
    script = (f"curl -sS -m {timeout:g} -o /tmp/body -w '%{{http_code}}' -X {method} {send}"
              f"'{API}{path}'; echo; cat /tmp/body")
    if data is not None:
        quoted = data.replace("'", "'\\''")
        script = f"printf '%s' '{quoted}' > /tmp/sent; {script}"
    r = cage.sh(script, timeout=timeout + 10)
    status, _, text = r.stdout.partition("\n")
    assert status.isdigit(), r.stdout + r.stderr
    return int(status), json.loads(text) if text.strip() else {}


def reach(cage, host: str, path: str = "/x", *flags: str) -> str:
    """The status a request to `host` gets from inside, dialled directly (the gateway's
    refusal is then an HTTP answer; through HTTPS_PROXY a refused CONNECT has none): 000 when
    there is no answer at all."""
    r = cage.sh(f"curl -sS -m 10 --noproxy '*' -o /dev/null -w '%{{http_code}}' "
                f"{' '.join(flags)} https://{host}{path}")
    return r.stdout.strip()


def cli_env(cage) -> dict[str, str]:
    return {**os.environ, "AGENTCAGE_HOME": str(cage.service.store.root)}


def operator(cage, *args: str) -> subprocess.CompletedProcess[str]:
    """`agentcage ARGS` on the host, where the operator is."""
    return subprocess.run([*CLI, *args], env=cli_env(cage), capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def policy_records(cage) -> list[dict]:
    return [r for r in cage.audit() if r.get("direction") == "policy"]


# ---- the API itself ----------------------------------------------------------------------------

@pytest.mark.netns
def test_the_api_answers_by_name_to_the_cage_and_nothing_of_it_leaves(cage, world):
    world.reset_records()
    for flags in ("", "--noproxy '*'"):  # through HTTPS_PROXY, and dialled directly
        r = cage.sh(f"curl -sS -m 10 {flags} {API}/v1/health; echo; "
                    f"curl -sS -m 10 {flags} http://agentcage.local/v1/health")
        docs = [json.loads(line) for line in r.stdout.splitlines()]
        assert [d["ok"] for d in docs] == [True, True], r.stdout + r.stderr
        assert docs[0] == {"api_version": 1, "ok": True, "cage": "api"}
    # by the gateway's address the API is nobody: an IP literal is refused as ever
    gw = cage.gateway_address
    assert reach(cage, gw, "/v1/health", "-k") in ("403", "000")
    # and not a packet or a lookup of it reached the internet
    assert not [q for q in world.dns_queries() if "agentcage" in q[0]]
    assert not [q for q in world.http_requests() if "agentcage" in q["host"]]
    assert any(r.get("path") == "/v1/health" for r in policy_records(cage))
    # the operator's channel and grants.json are in the state directory, out of the cage's
    # reach (it is never mounted there)
    state = cage.service.store.cage("api").root
    assert cage.sh(f"ls {state}/control {state}").returncode != 0


@pytest.mark.netns
def test_the_allowlist_says_what_is_reachable_what_may_be_asked_and_how(cage):
    status, doc = call(cage, "GET", "/v1/allowlist")
    assert status == 200
    assert doc["mode"] == "allowlist"
    assert doc["allowed"] == [{"domain": "allowed.example.test", "source": "cage.yaml",
                               "expires_at": None}]
    assert doc["requestable"]["grantable"] == ["granted.example.test"]
    assert doc["how_to_ask"]["url"] == f"{API}/v1/allowlist/requests"
    assert call(cage, "GET", "/v1/nothing")[0] == 404
    assert call(cage, "DELETE", "/v1/allowlist")[0] == 405


@pytest.mark.netns
def test_a_refusal_says_how_to_ask(cage):
    r = cage.sh("curl -sS -m 10 --noproxy '*' https://other.example.test/x")
    page = json.loads(r.stdout)
    assert page["blocked"] is True and page["by"] == "domain"
    assert f"POST {API}/v1/allowlist/requests" in page["how_to_ask"]
    assert '"domain": "other.example.test"' in page["how_to_ask"]


# ---- asking, the rules, the ceiling ------------------------------------------------------------

@pytest.mark.netns
def test_the_rules_grant_within_the_ceiling_for_a_while(cage):
    assert reach(cage, "granted.example.test") == "403"  # the control: not before
    status, doc = call(cage, "POST", "/v1/allowlist/requests",
                       {"domain": "granted.example.test", "reason": "fetch the docs",
                        "ttl_seconds": 2})
    assert status == 200 and doc["status"] == "granted" and doc["decided_by"] == "rules", doc
    assert doc["asked_because"] == "fetch the docs"
    assert doc["expires_at"] - doc["decided_at"] == pytest.approx(2, abs=0.01)
    assert reach(cage, "granted.example.test") == "200"
    listed = json.loads(operator(cage, "cage", "grants", "api", "list", "--json").stdout)
    assert [g["domain"] for g in listed["grants"]] == ["granted.example.test"]
    time.sleep(2.6)  # expired: gone within a tick
    assert reach(cage, "granted.example.test") == "403"
    kinds = [r["reason"] for r in policy_records(cage) if r["host"] == "granted.example.test"]
    assert any(k.startswith("granted:") for k in kinds)
    assert any(k.startswith("grant expired") for k in kinds), kinds


@pytest.mark.netns
@pytest.mark.policy(policy(["granted.example.test"], requests_per_second=50, burst=50))
def test_what_the_ceiling_does_not_name_is_denied_and_bad_requests_are_refused(cage):
    status, doc = call(cage, "POST", "/v1/allowlist/requests",
                       {"domain": "other.example.test", "reason": "just because"})
    assert (status, doc["status"], doc["decided_by"]) == (200, "denied", "ceiling")
    assert reach(cage, "other.example.test") == "403"
    status, doc = call(cage, "POST", "/v1/allowlist/requests",
                       {"domain": "allowed.example.test", "reason": "again"})
    assert status == 409, doc
    for bad, why in ((None, "not JSON"), ({"domain": "granted.example.test"}, "reason"),
                     ({"domain": "10.0.0.1", "reason": "x"}, "IP literals"),
                     ({"domain": "agentcage.local", "reason": "x"}, "policy API"),
                     ({"domain": "granted.example.test", "reason": "x", "evil": 1}, "unknown"),
                     ({"domain": "granted.example.test", "reason": "x", "ports": [22]},
                      "ports")):
        raw = "{not json" if bad is None else None
        status, doc = call(cage, "POST", "/v1/allowlist/requests", bad, raw=raw)
        assert status == 400 and why in doc["error"], (bad, doc)
    status, doc = call(cage, "POST", "/v1/allowlist/requests",
                       raw=json.dumps({"domain": "granted.example.test", "reason": "x" * 9000}))
    assert status == 413, doc


@pytest.mark.netns
@pytest.mark.policy(policy(["granted.example.test"], burst=3, requests_per_second=0.2))
def test_a_flood_of_requests_meets_429_and_the_rest_of_the_cage_goes_on(cage):
    statuses = [call(cage, "POST", "/v1/allowlist/requests",
                     {"domain": "other.example.test", "reason": f"try {i}"})[0]
                for i in range(5)]
    assert statuses[:3] == [200, 200, 200] and statuses[3:] == [429, 429], statuses
    assert reach(cage, "allowed.example.test") == "200"  # the control: the cage serves on
    assert call(cage, "GET", "/v1/health")[0] == 200


@pytest.mark.netns
def test_the_cage_reads_its_refusals_but_not_what_it_sent(cage):
    """`GET /v1/denials`: what the cage tried and was refused, so that it can ask for what it
    needs: the host, layer and reason of each, never the path or query it sent."""
    path, query = f"/private-{os.urandom(6).hex()}", f"token={os.urandom(6).hex()}"
    assert reach(cage, "other.example.test", f"{path}?{query}") == "403"
    looked_up = cage.sh("getent hosts nosuch.example.test")  # refused: the sinkhole's address
    assert looked_up.stdout.split()[:1] == [SINKHOLE_ADDRESS], looked_up
    assert reach(cage, "allowed.example.test", path) == "200"  # the control: not a refusal
    status, doc = call(cage, "GET", "/v1/denials")
    assert status == 200, doc
    denials = doc["denials"]
    assert all(set(d) == {"ts", "host", "port", "layer", "by", "reason"} for d in denials)
    seen = {(d["layer"], d["host"]) for d in denials}
    assert ("outbound", "other.example.test") in seen, denials
    assert ("dns", "nosuch.example.test") in seen, denials
    assert not any(d["host"] == "allowed.example.test" for d in denials), denials
    assert all(d["reason"] for d in denials)
    shown = json.dumps(doc)
    assert path not in shown and query not in shown
    # `last`: the newest N, none for 0, the default for what is not a number
    assert call(cage, "GET", "/v1/denials?last=1")[1]["denials"] == denials[-1:]
    assert call(cage, "GET", "/v1/denials?last=0")[1]["denials"] == []
    assert len(call(cage, "GET", "/v1/denials?last=many")[1]["denials"]) == len(denials)
    # asking for them is no refusal, and it is audited like every call to the API
    assert call(cage, "GET", "/v1/denials")[1]["denials"] == denials
    assert sum(r.get("path") == "/v1/denials" for r in policy_records(cage)) == 5


@pytest.mark.netns
@pytest.mark.policy(policy(["scoped.example.test"]))
def test_a_grant_holds_to_its_scope(cage):
    status, doc = call(cage, "POST", "/v1/allowlist/requests",
                       {"domain": "scoped.example.test", "reason": "read the index",
                        "methods": ["GET"], "paths": ["/simple/*"]})
    assert status == 200 and doc["status"] == "granted", doc
    assert reach(cage, "scoped.example.test", "/simple/pkg/") == "200"
    assert reach(cage, "scoped.example.test", "/simple/pkg/", "-X", "POST", "-d", "x") == "403"
    assert reach(cage, "scoped.example.test", "/upload") == "403"
    refused = [r for r in cage.audit() if r.get("by") == "grant"]
    assert refused and "outside the scope" in refused[-1]["reason"]


# ---- the operator --------------------------------------------------------------------------

@pytest.mark.netns
@pytest.mark.policy(policy(["human.example.test", "other.example.test"], deciders=["human"],
                           human_timeout_seconds=30))
def test_the_operator_approves_and_denies_what_waits_for_a_human(cage):
    status, asked = call(cage, "POST", "/v1/allowlist/requests",
                         {"domain": "human.example.test", "reason": "need the mirror"})
    assert status == 202 and asked["status"] == "pending", asked
    # the agent waits on its request; the operator answers from the host
    waiter = subprocess.Popen(
        [*cage_exec(cage), "curl", "-sS", "-m", "30",
         f"{API}/v1/allowlist/requests/{asked['id']}?wait=25"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(cage))
    time.sleep(0.5)
    pending = json.loads(operator(cage, "cage", "grants", "api", "list", "--pending",
                                  "--json").stdout)["requests"]
    assert [r["id"] for r in pending] == [asked["id"]]
    r = operator(cage, "grants", "api", "approve", asked["id"])
    assert r.returncode == 0 and "granted" in r.stdout, r.stderr
    out, _ = waiter.communicate(timeout=40)
    assert json.loads(out)["status"] == "granted"  # the long-poll ended with the answer
    assert reach(cage, "human.example.test") == "200"

    status, second = call(cage, "POST", "/v1/allowlist/requests",
                          {"domain": "other.example.test", "reason": "more", "ttl_seconds": 60})
    assert status == 202, second
    r = operator(cage, "grants", "api", "deny", second["id"])
    assert r.returncode == 0 and "denied" in r.stdout, r.stderr
    assert call(cage, "GET", f"/v1/allowlist/requests/{second['id']}")[1]["status"] == "denied"
    # the agent has no way to approve its own request
    for path in (f"/v1/allowlist/requests/{second['id']}/approve",
                 f"/v1/allowlist/requests/{second['id']}"):
        assert call(cage, "POST", path, {"status": "granted"})[0] in (404, 405)


def cage_exec(cage) -> list[str]:
    return [*CLI, "exec", cage.name, "--"]


@pytest.mark.netns
@pytest.mark.policy(policy(["human.example.test"], deciders=["human"],
                           human_timeout_seconds=1))
def test_a_request_no_one_answers_is_denied(cage):
    status, asked = call(cage, "POST", "/v1/allowlist/requests",
                         {"domain": "human.example.test", "reason": "anyone?"})
    assert status == 202
    status, doc = call(cage, "GET", f"/v1/allowlist/requests/{asked['id']}?wait=10")
    assert doc["status"] == "denied" and "no answer from the operator" in doc["reason"], doc


@pytest.mark.netns
def test_revoking_a_grant_cuts_its_live_connections_not_only_new_ones(cage):
    # a keep-alive connection dialled directly and one through a CONNECT tunnel
    status, doc = call(cage, "POST", "/v1/allowlist/requests",
                       {"domain": "granted.example.test", "reason": "long download"})
    assert (status, doc["status"]) == (200, "granted")
    # one keep-alive connection to the granted host, one to an allowed host (the control)
    script = """
import http.client, os, ssl, sys, time
ctx = ssl.create_default_context(cafile="/run/agentcage/ca-bundle.pem")
proxy = os.environ["HTTPS_PROXY"].split("://", 1)[1].rstrip("/").rpartition(":")

def connect(key):
    host = key.split("+")[0]
    if key.endswith("+tunnel"):  # a CONNECT tunnel through the gateway's proxy
        c = http.client.HTTPSConnection(proxy[0], int(proxy[2]), context=ctx, timeout=5)
        c.set_tunnel(host, 443)
        return c
    # dialled directly (http.client takes no proxy): the transparent path
    return http.client.HTTPSConnection(host, context=ctx, timeout=5)

keys = ("granted.example.test", "granted.example.test+tunnel", "allowed.example.test")
conns = {k: connect(k) for k in keys}
for i in range(40):
    for k, c in conns.items():
        try:
            c.request("GET", "/keep"); r = c.getresponse(); r.read()
            print(k, i, r.status, flush=True)
        except Exception as e:
            print(k, i, "cut", type(e).__name__, flush=True)
            conns[k] = c = connect(k)
    time.sleep(0.15)
"""
    (cage.project / "keep.py").write_text(script)
    os.chown(cage.project / "keep.py", 1000, 1000)
    running = subprocess.Popen([*cage_exec(cage), "python3", "/workspace/keep.py"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=cli_env(cage))
    time.sleep(2.0)
    r = operator(cage, "cage", "grants", "api", "revoke", "granted.example.test")
    assert r.returncode == 0 and "granted.example.test" in r.stdout, r.stderr
    out, err = running.communicate(timeout=60)
    lines = [line.split() for line in out.splitlines()]
    for way in ("granted.example.test", "granted.example.test+tunnel"):
        used = [w for w in lines if w[0] == way]
        assert used[0][2] == "200", out + err  # it was in use
        cut_at = next(i for i, w in enumerate(used) if w[2] == "cut")
        assert all(w[2] != "200" for w in used[cut_at:]), out  # cut, and refused after
    control = [w for w in lines if w[0] == "allowed.example.test"]
    assert all(w[2] == "200" for w in control), out  # the allowed host's connection stayed
    ends = [r for r in policy_records(cage) if r["reason"].startswith("grant revoked")]
    assert ends and ends[-1]["cut"] >= 2, ends


@pytest.mark.netns
def test_revoking_a_grant_cuts_its_websockets(cage):
    assert call(cage, "POST", "/v1/allowlist/requests",
                {"domain": "granted.example.test", "reason": "live feed"})[1]["status"] == \
        "granted"
    spec = {"host": "granted.example.test", "port": 443, "pace": 0.2, "timeout": 10,
            "messages": [{"type": "text", "text": f"tick {i}"} for i in range(30)]}
    running = subprocess.Popen([*cage_exec(cage), "python3", "-c", WS_CLIENT, json.dumps(spec)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=cli_env(cage))
    time.sleep(2.5)
    assert operator(cage, "grants", "api", "revoke", "granted.example.test").returncode == 0
    out, err = running.communicate(timeout=60)
    result = json.loads(out)
    echoed = [r for r in result["results"] if "echo" in r]
    assert result["status"] == 101 and 3 <= len(echoed) < 30, out + err  # live, then cut
    assert "closed" in result["results"][-1], result


@pytest.mark.netns
def test_a_grant_promoted_is_a_lasting_rule_and_its_connections_stay(cage):
    call(cage, "POST", "/v1/allowlist/requests",
         {"domain": "granted.example.test", "reason": "we need this for good", "ttl_seconds": 60})
    r = operator(cage, "cage", "grants", "api", "promote", "granted.example.test")
    assert r.returncode == 0, r.stderr
    rules = json.loads(operator(cage, "domain", "list", "api", "--json").stdout)["rules"]
    assert {"pattern": "granted.example.test", "source": "cli"}.items() <= next(
        x for x in rules if x["pattern"] == "granted.example.test").items()
    assert json.loads(operator(cage, "grants", "api", "list", "--json").stdout)["grants"] == []
    assert reach(cage, "granted.example.test") == "200"


@pytest.mark.netns
def test_grants_outlive_a_restart_and_the_operator_revokes_them_while_stopped(cage):
    call(cage, "POST", "/v1/allowlist/requests",
         {"domain": "granted.example.test", "reason": "x", "ttl_seconds": 600})
    assert operator(cage, "restart", "api").returncode == 0
    assert reach(cage, "granted.example.test") == "200"
    assert operator(cage, "stop", "api").returncode == 0
    r = operator(cage, "cage", "grants", "api", "revoke", "granted.example.test")
    assert r.returncode == 0, r.stderr
    assert operator(cage, "start", "api").returncode == 0
    assert reach(cage, "granted.example.test") == "403"


@pytest.mark.netns
@pytest.mark.policy("policy_api: {enable: false}\n")
def test_without_the_api_the_name_is_refused_as_any_other(cage, world):
    assert reach(cage, "agentcage.local", "/v1/health") == "403"
    assert reach(cage, "allowed.example.test") == "200"  # the control


def test_the_ceiling_refuses_what_is_never_granted_in_cage_yaml():
    from agentcage.config.load import load_config_text
    from agentcage.errors import ConfigError

    for never, why in (("pastebin.com", "paste site"), ("*.internal", "internal"),
                       ("metadata.google.internal", "internal"), ("agentcage.local", "policy API"),
                       ("*.webhook.site", "request catcher")):
        with pytest.raises(ConfigError, match=why):
            load_config_text(f"name: a\npolicy_api: {{grantable: [{json.dumps(never)}]}}\n")
    load_config_text("name: a\npolicy_api: {grantable: [pypi.org, '*.pythonhosted.org']}\n")


def test_the_models_defaults_are_the_gateways():
    from agentcage.config.model import PolicyApi
    from agentcage.gateway.control.settings import PolicyApiSettings

    model, settings = PolicyApi().model_dump(), PolicyApiSettings()
    assert {k: tuple(v) if isinstance(v, list) else v for k, v in model.items()} == {
        f: getattr(settings, f) for f in model}


@pytest.mark.netns
def test_each_cage_has_its_own_api_and_grants(cage, world):
    assert call(cage, "POST", "/v1/allowlist/requests",
                {"domain": "granted.example.test", "reason": "mine"})[1]["status"] == "granted"
    for other in start_cage(world, "other", ["allowed.example.test"],
                            extra=policy(["granted.example.test"])):
        status, doc = call(other, "GET", "/v1/allowlist")
        assert status == 200 and doc["requestable"]["grants_in_force"] == 0
        assert [a["source"] for a in doc["allowed"]] == ["cage.yaml"]
        assert reach(other, "granted.example.test") == "403"  # the first cage's grant is its own
        assert reach(cage, "granted.example.test") == "200"  # the control
