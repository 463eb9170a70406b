"""Throughput and added latency of the inspector chain, against the chain disabled.

The chain (domain, secrets, body-size, entropy, content-type, built by
agentcage.inspect.build_chain with one staged secret and its rule) runs over request bodies
of 1 KiB, 1 MiB and 10 MiB. Two kinds of body:
  chat   a JSON LLM request whose content is source code (what a coding agent mostly sends);
  upload a JSON body carrying one large base64 field of random bytes (worst case; the entropy
         inspector blocks it, the chain still runs every earlier inspector over all of it).
The baseline is measured in the same run, interleaved: the same request built and handed to an
empty chain ("disabled"); a plain copy of the body is shown as a memory-speed reference.
Every run gets a fresh body object, so no inspector can reuse work from an earlier run.

    .venv/bin/python bench/inspect_chain.py [--quick] [--check]

(Named inspect_chain, not inspect: a script's directory comes first on sys.path, and a
bench/inspect.py would shadow the standard library's `inspect` for every script beside it.)

Targets: 10 MiB chat body through the chain in under 100 ms; added median latency for
a 1 KiB request under 0.5 ms. With --check the exit code is 2 when a target is missed.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentcage.domains import DomainMatcher, DomainRule, parse_pattern
from agentcage.inspect import build_chain, run_chain
from agentcage.inspect.protocol import InspectionContext, Inspector, RequestView
from agentcage.policy import Policy
from agentcage.secrets import StagedSecret, mint, rule_from_config

ROOT = Path(__file__).resolve().parents[1]
KiB, MiB = 1024, 1024 * 1024
HOST = "api.anthropic.com"
TARGET_10MIB_S = 0.100
TARGET_1KIB_ADDED_S = 0.0005


@dataclass(frozen=True)
class Case:
    kind: str
    size: int
    runs: int


def chat_body(size: int) -> bytes:
    sources = sorted((ROOT / "src" / "agentcage").rglob("*.py"))
    code = "\n".join(p.read_text() for p in sources)
    content = (code * (size // len(code) + 1))[:size]
    body = json.dumps(
        {"model": "m", "max_tokens": 1024, "messages": [{"role": "user", "content": content}]}
    ).encode()
    return body[:size]


def upload_body(size: int) -> bytes:
    blob = base64.b64encode(os.urandom(size * 3 // 4)).decode()
    return json.dumps({"name": "data.bin", "content": blob}).encode()[:size]


def make_request(body: bytes) -> RequestView:
    headers = (
        ("content-type", "application/json"),
        ("x-api-key", PLACEHOLDER),
        ("content-length", str(len(body))),
        ("user-agent", "bench/1"),
    )
    return RequestView("POST", "https", HOST, 443, "/v1/messages?beta=true", headers, body)


SECRET = StagedSecret(
    "ANTHROPIC_API_KEY", mint("ANTHROPIC_API_KEY"), b"sk-ant-api03-" + os.urandom(40).hex().encode()
)
PLACEHOLDER = str(SECRET.placeholder)


def timed(chain: Sequence[Inspector], body: bytes, ctx: InspectionContext) -> float:
    fresh = bytes(bytearray(body))  # a new object: no cache can recognise it
    started = time.perf_counter()
    decisions = run_chain(chain, make_request(fresh), ctx)
    elapsed = time.perf_counter() - started
    if not decisions and chain:
        raise RuntimeError("the chain returned nothing")
    return elapsed


def copy_time(body: bytes) -> float:
    started = time.perf_counter()
    bytes(bytearray(body))
    return time.perf_counter() - started


def median_of(fn: Callable[[], float], runs: int) -> list[float]:
    return [fn() for _ in range(runs)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--check", action="store_true", help="exit 2 when a target is missed")
    args = parser.parse_args(argv)
    scale = 0.2 if args.quick else 1.0

    policy = Policy(mode="allowlist", allow=DomainMatcher([DomainRule(parse_pattern(HOST))]))
    ctx = InspectionContext(policy, time.time())
    rule = rule_from_config({"env": "ANTHROPIC_API_KEY", "inject_to": [HOST]})
    chain = build_chain(staged=[SECRET], rules=[rule])
    cases = [
        Case(kind, size, max(3, int(runs * scale)))
        for kind, size, runs in [
            ("chat", KiB, 3000),
            ("chat", MiB, 40),
            ("chat", 10 * MiB, 9),
            ("upload", KiB, 3000),
            ("upload", MiB, 20),
            ("upload", 10 * MiB, 5),
        ]
    ]
    print(f"inspector chain: {', '.join(i.name for i in chain)}; python {sys.version.split()[0]}")
    print(
        f"{'body':<8}{'size':>8}{'runs':>6}{'chain ms':>11}{'MB/s':>9}{'disabled ms':>13}"
        f"{'added ms':>10}{'x disabled':>12}{'copy ms':>9}{'x copy':>9}  decision"
    )
    results: dict[tuple[str, int], tuple[float, float]] = {}
    for case in cases:
        body = chat_body(case.size) if case.kind == "chat" else upload_body(case.size)
        for _ in range(3):  # warm caches of the interpreter and the regex engine
            timed(chain, body, ctx)
        on, off, copies = [], [], []
        for _ in range(case.runs):  # interleaved, so load on the machine hits both alike
            on.append(timed(chain, body, ctx))
            off.append(timed((), body, ctx))
            copies.append(copy_time(body))
        chain_s, off_s, copy_s = (statistics.median(x) for x in (on, off, copies))
        added = chain_s - off_s
        verdict = run_chain(chain, make_request(body), ctx)[-1]
        results[(case.kind, case.size)] = (chain_s, added)
        size = f"{case.size // MiB} MiB" if case.size >= MiB else f"{case.size // KiB} KiB"
        print(
            f"{case.kind:<8}{size:>8}{case.runs:>6}{chain_s * 1e3:>11.3f}"
            f"{case.size / chain_s / 1e6:>9.1f}{off_s * 1e3:>13.4f}{added * 1e3:>10.3f}"
            f"{chain_s / off_s:>12.1f}{copy_s * 1e3:>9.3f}{chain_s / copy_s:>9.1f}  "
            f"{verdict.action} by {verdict.inspector}"
        )

    big, small = results[("chat", 10 * MiB)][0], results[("chat", KiB)][1]
    ok_big, ok_small = big < TARGET_10MIB_S, small < TARGET_1KIB_ADDED_S
    print(
        f"target 10 MiB chat body < {TARGET_10MIB_S * 1e3:.0f} ms: {big * 1e3:.1f} ms "
        f"({big / TARGET_10MIB_S:.2f} of target) {'ok' if ok_big else 'MISSED'}"
    )
    print(
        f"target 1 KiB added median < {TARGET_1KIB_ADDED_S * 1e3:.1f} ms: {small * 1e3:.3f} ms "
        f"({small / TARGET_1KIB_ADDED_S:.2f} of target) {'ok' if ok_small else 'MISSED'}"
    )
    if args.check and not (ok_big and ok_small):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
