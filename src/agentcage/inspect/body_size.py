"""The `body-size` inspector and its streaming counter.

`BodySizeCounter` is fed the chunks of a request body as they arrive and refuses as soon as the
total passes the limit, holding nothing but the count: a 1 GiB upload costs no memory. The
gateway attaches one per request to mitmproxy's streaming hook (`flow.request.stream`); the
inspector itself checks the declared Content-Length (headers phase, before any body is read)
and, when a buffered body is present, its length.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentcage.inspect.protocol import Decision, InspectionContext, Phase, RequestView

DEFAULT_LIMIT = 10 * 1024 * 1024


class BodyTooLarge(Exception):
    """Raised by the counter once the body passes the limit; the gateway turns it into a block."""

    def __init__(self, limit: int, seen: int):
        super().__init__(f"request body passed {limit} bytes (at least {seen} sent)")
        self.limit, self.seen = limit, seen


class BodySizeCounter:
    """Count body bytes as they stream; raise BodyTooLarge past `limit`. Chunks pass through."""

    def __init__(self, limit: int = DEFAULT_LIMIT):
        self.limit = limit
        self.seen = 0

    def feed(self, chunk: bytes) -> bytes:
        self.seen += len(chunk)
        if self.seen > self.limit:
            raise BodyTooLarge(self.limit, self.seen)
        return chunk

    __call__ = feed  # mitmproxy calls `stream(chunk)` for each chunk

    def decision(self) -> Decision:
        if self.seen > self.limit:
            return Decision("block", f"request body over {self.limit} bytes", "body-size", "high")
        return Decision("allow", f"{self.seen} bytes", "body-size")


@dataclass(frozen=True)
class BodySizeSettings:
    limit: int = DEFAULT_LIMIT


class BodySizeInspector:
    name = "body-size"
    phase: Phase = "headers"

    def __init__(self, settings: BodySizeSettings | None = None):
        self.settings = settings or BodySizeSettings()

    def counter(self) -> BodySizeCounter:
        return BodySizeCounter(self.settings.limit)

    def inspect(self, request: RequestView, ctx: InspectionContext) -> Decision:
        limit = self.settings.limit
        for key, value in request.headers:
            if key.lower() == "content-length":
                try:
                    declared = int(value.strip())
                except ValueError:
                    return Decision("block", "invalid Content-Length", self.name, "high")
                if declared > limit:
                    return Decision(
                        "block",
                        f"declared body of {declared} bytes over {limit}",
                        self.name,
                        "high",
                    )
        if request.body is not None and len(request.body) > limit:
            return Decision(
                "block", f"body of {len(request.body)} bytes over {limit}", self.name, "high"
            )
        return Decision("allow", f"within {limit} bytes", self.name)
