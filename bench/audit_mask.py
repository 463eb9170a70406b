"""Cost of keeping credentials out of the audit log, against writing the same records unmasked.

Each round writes the two records of an HTTP request (the `outbound` decision and its
`response`) for N requests to a file on /dev/shm, three ways, interleaved so that load on the
machine weighs on all alike:
  plain     AuditLog without a mask (the baseline);
  masked    AuditLog with the gateway's CredentialMask, records holding no credential (the
            common case: the mask only has to find nothing);
  leaking   the same, with a GitHub token in every outbound record's path and URL (a cage
            trying to send one with each request).
Printed: microseconds per request and each way's time as a multiple of the plain one.

    .venv/bin/python bench/audit_mask.py [--requests N] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agentcage.gateway.audit import AuditLog, AuditRecord
from agentcage.gateway.auditmask import CredentialMask
from agentcage.inspect.patterns import load_patterns

TOKEN = "ghp_" + os.urandom(18).hex()


def records(n: int, leaking: bool) -> list[AuditRecord]:
    out = []
    for i in range(n):
        path = f"/v1/messages?request={i}" + (f"&t={TOKEN}" if leaking else "")
        out.append(AuditRecord(
            "outbound", "allowed", "allowed by policy", host="api.anthropic.com",
            method="POST", port=443, path=path, url=f"https://api.anthropic.com{path}",
            by="policy", inspectors=tuple({"name": n, "action": "allow", "reason": "",
                                           "severity": ""}
                                          for n in ("domain", "secrets", "entropy")),
            secrets_injected=("ANTHROPIC_API_KEY",), extra={"flow": f"f{i}"}))
        out.append(AuditRecord("response", "allowed", "served", host="api.anthropic.com",
                               port=443, path=path, status=200,
                               extra={"flow": f"f{i}", "outcome": "served"}))
    return out


def write_all(directory: Path, batch: list[AuditRecord], mask: CredentialMask | None) -> float:
    path = directory / "audit.jsonl"
    log = AuditLog(path, mask=mask)
    started = time.perf_counter()
    for record in batch:
        log.write(record)
    elapsed = time.perf_counter() - started
    log.close()
    path.unlink()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    mask = CredentialMask(load_patterns())
    ways = {"plain": (records(args.requests, False), None),
            "masked": (records(args.requests, False), mask),
            "leaking": (records(args.requests, True), mask)}
    times: dict[str, list[float]] = {name: [] for name in ways}
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        for batch, how in ways.values():  # one round not counted: caches, first writes
            write_all(Path(tmp), batch, how)
        for _ in range(args.rounds):
            for name, (batch, how) in ways.items():
                times[name].append(write_all(Path(tmp), batch, how))
    plain = statistics.median(times["plain"])
    print(f"{args.requests} requests (2 records each), median of {args.rounds} rounds")
    print(f"{'way':10} {'us/request':>11} {'x plain':>8}")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:10} {median / args.requests * 1e6:11.1f} {median / plain:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
