"""Custom inspectors used by the loader tests (imported by dotted path, as from cage.yaml)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentcage.inspect.protocol import Decision, InspectionContext, RequestView


class PathPrefix:
    """Blocks requests whose path starts with a configured prefix."""

    name = "path-prefix"
    phase = "headers"

    def __init__(self, settings: Mapping[str, Any]):
        self.prefix = str(settings["prefix"])

    def inspect(self, request: RequestView, ctx: InspectionContext) -> Decision:
        if request.path.startswith(self.prefix):
            return Decision("block", f"path under {self.prefix}", self.name, "warning")
        return Decision("allow", "ok", self.name)


class Exploding:
    name = "exploding"
    phase = "body"

    def __init__(self, settings: Mapping[str, Any]):
        self.settings = settings

    def inspect(self, request: RequestView, ctx: InspectionContext) -> Decision:
        raise RuntimeError("boom")


class NoPhase:
    name = "no-phase"

    def __init__(self, settings: Mapping[str, Any]):
        pass

    def inspect(self, request: RequestView, ctx: InspectionContext) -> Decision:
        return Decision("allow", "", self.name)


def refuses(settings: Mapping[str, Any]) -> Any:
    raise ValueError("missing setting 'url'")


NOT_CALLABLE = 42
