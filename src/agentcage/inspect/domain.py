"""The `domain` inspector: only what the cage's domain policy allows (allowlist, blocklist,
grants with expiry). The same `Policy.decide` answers the resolver and the upstream gate."""

from __future__ import annotations

from agentcage.inspect.protocol import Decision, InspectionContext, Phase, RequestView


class DomainInspector:
    name = "domain"
    phase: Phase = "headers"

    def inspect(self, request: RequestView, ctx: InspectionContext) -> Decision:
        verdict = ctx.policy.decide(request.host, ctx.now)
        if verdict.allowed:
            return Decision("allow", verdict.reason, self.name)
        return Decision("block", verdict.reason, self.name, severity="warning")
