"""`/discard...?early=<seconds>`: a server that refuses an upload before it has the body. On
the first bytes of the body it answers 413 and then reads nothing more, holding the connection
open for `seconds` (at most 120) before it closes it; `early=0` closes at once. (For tests of a
gateway that paces what it sends by what the upstream takes.)"""

from __future__ import annotations

import asyncio
import json
from urllib.parse import parse_qs, urlsplit

MAX_SECONDS = 120.0
ANSWER = json.dumps({"error": "upload refused before its body"}).encode()


def hold_seconds(target: str) -> float | None:
    """How long to hold the connection after answering; None: not such a request."""
    values = parse_qs(urlsplit(target).query).get("early")
    if not values:
        return None
    try:
        return max(0.0, min(float(values[-1]), MAX_SECONDS))
    except ValueError:
        return None


async def serve(writer: asyncio.StreamWriter, seconds: float) -> None:
    writer.write(b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(ANSWER), ANSWER))
    await writer.drain()
    await asyncio.sleep(seconds)
