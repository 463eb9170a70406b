"""Throughput of a streamed response through the gateway's piecewise decoder and redactor.

A 64 MiB response body (JSON-ish text with the real value echoed every ~64 KiB, as a server
echoing a token would) is fed in the piece sizes a TLS connection delivers, through the same
`ResponseStream` the addon gives mitmproxy:
  redact     identity body, 3 staged secrets: StreamRedactor over every piece;
  gzip       the same body gzip-encoded: decoded piece by piece, then redacted;
  passthru   no secret staged: pieces pass unchanged (the baseline, measured in the same run,
             interleaved, so load on the machine hits both alike);
  buffered   the whole body redacted at once by the buffered Redactor (what a body within
             max_request_body gets), for comparison.
Printed: MB/s, and each path's time as a multiple of the pass-through.

    .venv/bin/python bench/stream_redact.py [--quick]
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import sys
import time
from collections.abc import Callable

from agentcage.gateway.streaming import ResponseStream, plan
from agentcage.secrets import Redactor, StagedSecret, mint

MiB = 1024 * 1024
SECRETS = [StagedSecret(env, mint(env), value) for env, value in (
    ("ANTHROPIC_API_KEY", b"sk-ant-api03-" + os.urandom(40).hex().encode()),
    ("GITHUB_TOKEN", b"ghp_" + os.urandom(18).hex().encode()),
    ("CANARY", b"cnry-" + os.urandom(20).hex().encode()),
)]


def body(size: int) -> bytes:
    line = b'{"type": "content_block_delta", "delta": {"text": "def handler(request): ..."}}\n'
    block = line * (64 * 1024 // len(line))
    echo = b'{"echo": "' + SECRETS[0].value + b'"}\n'
    return ((block + echo) * (size // (len(block) + len(echo)) + 1))[:size]


def run(stream: ResponseStream, data: bytes, piece: int) -> float:
    started = time.perf_counter()
    out = 0
    for i in range(0, len(data), piece):
        out += sum(len(p) for p in stream(data[i:i + piece]))
    out += sum(len(p) for p in stream(b""))
    elapsed = time.perf_counter() - started
    if stream.failure or not out:
        raise RuntimeError(stream.failure or "nothing came out")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 MiB and fewer runs")
    args = parser.parse_args(argv)
    size = (16 if args.quick else 64) * MiB
    runs = 3 if args.quick else 5
    redactor, empty = Redactor(SECRETS), Redactor(())
    plain = body(size)
    packed = gzip.compress(plain, compresslevel=1)

    def fail(reason: str) -> None:
        raise RuntimeError(reason)

    paths: dict[str, Callable[[int], float]] = {
        "passthru": lambda piece: run(plan(empty, [], fail, 0), plain, piece),
        "redact": lambda piece: run(plan(redactor, [], fail, 0), plain, piece),
        "gzip": lambda piece: run(plan(redactor, ["gzip"], fail, 0), packed, piece),
    }
    print(f"streamed response, {size // MiB} MiB, {len(SECRETS)} staged secrets; "
          f"python {sys.version.split()[0]}")
    print(f"{'piece':>8}{'path':>10}{'median ms':>12}{'MB/s':>9}{'x passthru':>12}")
    for piece in (16 * 1024, 64 * 1024):
        times: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(runs):  # interleaved
            for name, fn in paths.items():
                times[name].append(fn(piece))
        base = statistics.median(times["passthru"])
        for name, samples in times.items():
            med = statistics.median(samples)
            print(f"{piece // 1024:>6}Ki{name:>10}{med * 1000:>12.1f}{size / MiB / med:>9.0f}"
                  f"{med / base:>12.1f}")
    started = time.perf_counter()
    redactor.redact(plain)
    buffered = time.perf_counter() - started
    print(f"{'whole':>8}{'buffered':>10}{buffered * 1000:>12.1f}{size / MiB / buffered:>9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
