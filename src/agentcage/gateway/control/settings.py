"""cage.yaml's `policy_api` section, as the gateway takes it (declared here, once: the cage.yaml
model takes its defaults from this type)."""

from __future__ import annotations

from dataclasses import dataclass

DECIDERS = ("rules", "llm", "human")


@dataclass(frozen=True)
class PolicyApiSettings:
    enable: bool = True  # serve agentcage.local (off: the name is refused like any other)
    # What may be granted without the operator: domain patterns, as in domains.allow. Empty:
    # every request is denied (or waits for the operator, with the `human` decider).
    grantable: tuple[str, ...] = ()
    max_ttl_seconds: int = 3600  # a grant's longest life; a request's ttl is capped by it
    max_grants: int = 32  # grants in force at once
    deciders: tuple[str, ...] = ("rules",)  # in order; see grants.py
    human_timeout_seconds: float = 300.0  # a pending request is denied after this
    requests_per_second: float = 1.0  # requests to the API that change something (POST)
    burst: int = 5
    # The `llm` decider, from cage.yaml's agents.decider ("" provider: none).
    llm_provider: str = ""
    llm_model: str = ""
    llm_key: str = ""  # the name of the cage's secret that holds its key
    llm_timeout_seconds: float = 30.0
