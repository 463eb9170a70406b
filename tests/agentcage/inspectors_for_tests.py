"""A custom inspector loaded by the gateway from cage.yaml (`inspectors:`), for the world tests:
it raises on one path (or, with `body_trigger`, on a body that holds it: a mail relay's message),
so the chain must turn that into a block (fail closed)."""

from __future__ import annotations

from agentcage.inspect.protocol import Decision


class Exploding:
    name = "exploding"
    phase = "body"

    def __init__(self, settings: dict):
        self.trigger = str(settings["trigger"])
        self.body_trigger = str(settings.get("body_trigger", "")).encode()

    def inspect(self, request, ctx) -> Decision:
        if self.trigger in request.path or (
                self.body_trigger and self.body_trigger in (request.body or b"")):
            raise RuntimeError("this inspector is broken on purpose")
        return Decision("allow", "not triggered", self.name)


def factory(settings: dict) -> Exploding:
    return Exploding(settings)
