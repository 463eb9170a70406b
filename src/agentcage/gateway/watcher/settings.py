"""cage.yaml's `watcher` section, as the gateway takes it (declared here, once: the cage.yaml
model takes its defaults from these types)."""

from __future__ import annotations

from dataclasses import dataclass, field

KIB, MIB = 1024, 1024 * 1024


@dataclass(frozen=True)
class BudgetSettings:
    """What may pass in one sliding window before it is a finding. Sized from the traffic of
    the real agents and package installs of the tests (test_watcher_world.py), with room."""

    window_seconds: float = 600.0
    # bytes sent (request line, headers, body) per host; the model's hosts their own
    host_bytes: int = 16 * MIB
    model_host_bytes: int = 512 * MIB
    # information sent, to every host but the model's: the size of what was sent once each
    # host's stream of requests is compressed, so that what repeats (headers, the shape of an
    # API call) counts once and random material counts in full, however small each request
    information_bytes: int = 48 * KIB
    # distinct names looked up or dialled under one zone; labels that carry data
    zone_names: int = 64
    label_length: int = 40  # a label longer than this
    label_entropy: float = 3.5  # bits per character of a label of 20+ characters with digits
    new_hosts: int = 16  # names first reached through runtime grants
    beacon_requests: int = 8  # requests to one host at one steady interval
    beacon_jitter: float = 0.1  # largest spread of the intervals, relative to their mean
    beacon_min_interval: float = 1.0  # seconds: faster is a burst, not a beacon
    reassembly: bool = True  # a credential put together from pieces sent in several requests


@dataclass(frozen=True)
class WatcherSettings:
    enable: bool = True
    # What a finding does: `record` it, or `revoke` the runtime grant involved (a finding about
    # a host cage.yaml allows is recorded either way: the watcher narrows only what was granted)
    action: str = "revoke"
    # Findings within one window that quarantine the cage (0: never; a request's several count
    # once): everything but the model hosts is refused for `quarantine_seconds`, doubled at
    # each repeat up to the maximum; a window with no finding steps back down, so that no
    # host polled forever locks a cage out
    escalate_after: int = 3
    quarantine_seconds: float = 300.0
    quarantine_max_seconds: float = 3600.0
    model_hosts: tuple[str, ...] = ()  # besides data/model_hosts.json
    budgets: BudgetSettings = field(default_factory=BudgetSettings)
    # The LLM re-reader, from cage.yaml's agents.watcher ("" provider: none; reread.py)
    llm_provider: str = ""
    llm_model: str = ""
    llm_key: str = ""  # the name of the cage's secret that holds its key
    llm_timeout_seconds: float = 30.0
    llm_interval_seconds: float = 300.0
    llm_window_seconds: float = 600.0
    llm_auto_revoke: bool = True
