"""The `content-type` inspector: base64 blobs hidden in text bodies (JSON, forms, plain text).

A text body (by Content-Type, or by looking like text when none is given) holding a base64 run
of `base64_min_chars` or more is flagged (or blocked, per `action`): file contents travelling
inside what claims to be text. Runs are required to mix upper case, lower case and digits, so a
long word or identifier is not taken for base64.
"""

from __future__ import annotations

from agentcage.inspect.protocol import Decision, InspectionContext, Phase, RequestView
from agentcage.inspect.settings import ContentTypeSettings

TEXT_TYPES = (
    "text/",
    "application/json",
    "application/x-www-form-urlencoded",
    "application/xml",
    "application/javascript",
    "application/graphql",
    "+json",
    "+xml",
)
_PRINTABLE = bytes(range(0x20, 0x7F)) + b"\t\r\n"
_UPPER = bytes(range(ord("A"), ord("Z") + 1))
_LOWER = bytes(range(ord("a"), ord("z") + 1))
_DIGITS = b"0123456789"


def _content_type(request: RequestView) -> str:
    for key, value in request.headers:
        if key.lower() == "content-type":
            return value.lower()
    return ""


def _looks_like_text(body: bytes) -> bool:
    head = body[:4096]
    return len(head.translate(None, _PRINTABLE)) <= len(head) // 20


def _mixed(span: bytes) -> bool:
    span = span[:1024]  # base64 mixes its alphabet early; a whole-span delete is slow
    return all(len(span.translate(None, chars)) < len(span) for chars in (_UPPER, _LOWER, _DIGITS))


class ContentTypeInspector:
    name = "content-type"
    phase: Phase = "body"

    def __init__(self, settings: ContentTypeSettings | None = None):
        self.settings = settings or ContentTypeSettings()

    def inspect(self, request: RequestView, ctx: InspectionContext) -> Decision:
        s = self.settings
        body = request.body or b""
        if not s.enable or len(body) < s.base64_min_chars:
            return Decision("allow", "nothing to check", self.name)
        declared = _content_type(request)
        is_text = any(t in declared for t in TEXT_TYPES) if declared else _looks_like_text(body)
        if not is_text:
            return Decision("allow", f"not a text body ({declared or 'binary'})", self.name)
        index = request.body_index
        if not index.might_hold(s.base64_min_chars):  # most text: no long run, no index built
            return Decision("allow", "no base64 blobs", self.name)
        for cls in index.base64_classes():
            for a, b in index.runs(cls, s.base64_min_chars):
                span = body[a:b]
                if _mixed(span):
                    severity = "warning" if s.action == "flag" else "high"
                    reason = (
                        f"base64 blob of {b - a} characters in a text body "
                        f"({declared or 'undeclared'})"
                    )
                    return Decision(s.action, reason, self.name, severity)
        return Decision("allow", "no base64 blobs", self.name)
