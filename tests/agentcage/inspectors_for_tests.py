"""A custom inspector loaded by the gateway from cage.yaml (`inspectors:`), for the world tests:
it raises on one path, so the chain must turn that into a block (fail closed)."""

from __future__ import annotations

from agentcage.inspect.protocol import Decision


class Exploding:
    name = "exploding"
    phase = "body"

    def __init__(self, settings: dict):
        self.trigger = str(settings["trigger"])

    def inspect(self, request, ctx) -> Decision:
        if self.trigger in request.path:
            raise RuntimeError("this inspector is broken on purpose")
        return Decision("allow", "not triggered", self.name)


def factory(settings: dict) -> Exploding:
    return Exploding(settings)
