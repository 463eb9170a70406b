"""`/hang?seconds=<n>`: a server that accepts a request and never answers it (for tests of a
gateway's first-byte timeout). It reads the request, says nothing for `n` seconds (default
and most 120), then closes the connection without a byte."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs, urlsplit

PATH = "/hang"
MAX_SECONDS = 120.0


def wants(target: str) -> bool:
    return urlsplit(target).path == PATH


async def serve(target: str) -> None:
    options = parse_qs(urlsplit(target).query)
    try:
        seconds = float(options.get("seconds", [MAX_SECONDS])[-1])
    except ValueError:
        seconds = MAX_SECONDS
    await asyncio.sleep(max(0.0, min(seconds, MAX_SECONDS)))
