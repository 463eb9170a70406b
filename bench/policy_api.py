"""The policy API's costs, in the fake internet, each against its baseline in one run.

1. From asking to using: inside a cage, over one warm keep-alive connection to the gateway's
   proxy, `POST http://agentcage.local/v1/allowlist/requests` for a host, granted by the rules,
   then the first byte of `GET http://HOST/` from that host: against one keep-alive request
   to an allowed host over the same connection. Target < 10x.
2. A request with 1,000 grants in force against none: keep-alive requests to an allowed host
   in two cages alike but for their grants, measured in turn, round after round, so that a
   change of the machine's load weighs on both sides alike. Target < 1.1x.
3. A decision with 1,000 grants in force against a few (under 100): the time from `POST
   /v1/allowlist/requests` to its answer (granted by the rules: the grant made, grants.json
   written, the policy the resolver and the proxy share rebuilt), in the same two cages, in
   turn. Target < 1.5x.

Medians over the samples, each measured by a script inside the cage.

Usage (root): .venv/bin/python -P bench/policy_api.py [--rounds N] [--grants N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from fakenet import FakeInternet

# Runs inside a cage: one keep-alive connection to the regular proxy, absolute-form requests.
# `ask ROUNDS`: ask for a host, then its first byte, against keep-alive requests, per round;
# `grant N`: make N grants; `keepalive N`: the median of N keep-alive requests; `decide N
# PREFIX`: the median time of N requests for new names PREFIX0.example.test, ... to be answered.
INSIDE = r"""
import http.client, json, os, statistics, sys, time
mode, count = sys.argv[1], int(sys.argv[2])
proxy = os.environ["HTTP_PROXY"].split("://", 1)[1].rstrip("/")
host, _, port = proxy.rpartition(":")
conn = http.client.HTTPConnection(host, int(port), timeout=30)

def get(url):
    start = time.perf_counter()
    conn.request("GET", url)
    r = conn.getresponse()
    r.read(1)
    first = time.perf_counter() - start
    r.read()
    return r.status, first

def ask(domain):
    body = json.dumps({"domain": domain, "reason": "bench", "ttl_seconds": 3600})
    start = time.perf_counter()
    conn.request("POST", "http://agentcage.local/v1/allowlist/requests", body,
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    doc = json.loads(r.read())
    return doc["status"], time.perf_counter() - start

def keepalive(n):
    return [get("http://allowed.example.test/k")[1] for _ in range(n)]

for _ in range(10):
    get("http://allowed.example.test/warm")
out = {}
if mode == "ask":
    base, ask_use = [], []
    for i in range(count):
        base += keepalive(5)
        status, asked = ask(f"fresh{i}.example.test")
        assert status == "granted", status
        code, first = get(f"http://fresh{i}.example.test/first")
        assert code == 200, code
        ask_use.append(asked + first)
    out = {"keepalive": statistics.median(base), "ask_use": statistics.median(ask_use)}
elif mode == "grant":
    for i in range(count):
        status, _ = ask(f"n{i}.example.test")
        assert status == "granted", (i, status)
elif mode == "decide":
    took = []
    for i in range(count):
        status, asked = ask(f"{sys.argv[3]}{i}.example.test")
        assert status == "granted", (i, status)
        took.append(asked)
    out = {"decide": statistics.median(took)}
else:
    out = {"keepalive": statistics.median(keepalive(count))}
print(json.dumps({k: v * 1000 for k, v in out.items()}))
"""


def cage_yaml(net, name: str, uplink: str, grants: int) -> str:
    return f"""
name: {name}
domains: {{mode: allowlist, allow: [allowed.example.test]}}
dns_servers: [{net.dns_address}]
gateway: {{uplink: "netns:{uplink}", trusted_networks: [10.200.0.0/16],
          upstream_ca_files: ["{net.ca_cert_path}"]}}
rate_limit: {{requests_per_second: 10000, burst: 10000}}
policy_api:
  grantable: ["*.example.test"]
  max_grants: {grants + 100}
  requests_per_second: 10000
  burst: {grants + 100}
# the watcher stays on, but the bench's many fresh hosts reached through grants are no alarm
watcher: {{budgets: {{new_hosts: {grants + 100}}}}}
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--grants", type=int, default=1000)
    args = parser.parse_args()
    from agentcage.backends.namespace import NamespaceBackend
    from agentcage.cages import CageService
    from agentcage.config.load import load_config_text
    from agentcage.state import StateStore

    work = Path(tempfile.mkdtemp(prefix="agentcage-bench-api-"))
    os.chmod(work, 0o755)
    project = work / "project"
    project.mkdir()
    os.chown(project, 65534, 65534)
    (project / "inside.py").write_text(INSIDE)
    names = {f"fresh{i}.example.test": None for i in range(args.rounds)}
    samples: dict[str, list[float]] = {"none": [], "many": [], "decide-none": [],
                                       "decide-many": []}
    try:
        with FakeInternet(extra_names=names, catch_all=False) as net:
            uplink = net.add_client().netns
            store = StateStore(work / "home")
            service = CageService(store, NamespaceBackend(store))
            cages = {"none": "bench-none", "many": "bench-many"}
            for name in cages.values():
                service.create(load_config_text(cage_yaml(net, name, uplink, args.grants)),
                               project)
            try:
                def inside(cage: str, *argv: str) -> dict[str, float]:
                    r = service.exec_capture(cage, ["python3", "/workspace/inside.py", *argv],
                                             timeout=1800)
                    if r.returncode != 0:
                        raise SystemExit(f"the measurement failed in {cage}: "
                                         f"{r.stderr.strip()[-800:]}")
                    return json.loads(r.stdout.strip().splitlines()[-1])

                ms = inside(cages["none"], "ask", str(args.rounds))
                inside(cages["many"], "grant", str(args.grants))
                for i in range(args.rounds):  # the two cages in turn: the same load on both
                    for key, cage in cages.items():
                        samples[key].append(inside(cage, "keepalive", "30")["keepalive"])
                        samples[f"decide-{key}"].append(
                            inside(cage, "decide", "3", f"d{i}x")["decide"])
            finally:
                for name in cages.values():
                    service.destroy(name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ms["before"] = statistics.median(samples["none"])
    ms["after"] = statistics.median(samples["many"])
    ms["decide_few"] = statistics.median(samples["decide-none"])
    ms["decide_many"] = statistics.median(samples["decide-many"])
    print(f"medians, ms ({args.rounds} rounds; {args.grants} grants)")
    for label, key in (("keep-alive request to an allowed host (baseline)", "keepalive"),
                       ("ask (granted by rules), then first byte from it", "ask_use"),
                       ("keep-alive request, no grant in force", "before"),
                       (f"keep-alive request, {args.grants} grants in force", "after"),
                       ("a request decided, under 100 grants in force", "decide_few"),
                       (f"a request decided, {args.grants} grants in force", "decide_many")):
        print(f"{label:56} {ms[key]:8.2f}")
    ask_ratio, grant_ratio = ms["ask_use"] / ms["keepalive"], ms["after"] / ms["before"]
    decide_ratio = ms["decide_many"] / ms["decide_few"]
    print(f"ask to first byte: {ask_ratio:.1f}x a keep-alive request; target < 10x: "
          f"{'met' if ask_ratio < 10 else 'NOT met'}")
    print(f"{args.grants} grants: {grant_ratio:.2f}x a request with none; target < 1.1x: "
          f"{'met' if grant_ratio < 1.1 else 'NOT met'}")
    print(f"{args.grants} grants: a decision takes {decide_ratio:.2f}x one among a few; "
          f"target < 1.5x: {'met' if decide_ratio < 1.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
