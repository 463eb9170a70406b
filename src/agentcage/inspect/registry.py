"""The built-in inspectors, and how to build the whole chain from a cage's configuration.

`REGISTRY` is the ONE registry of built-in inspectors, in the order they run (every factory works
without arguments, with the reference defaults). `build_chain` builds the configured chain in
that order: domain, secrets, body-size, entropy, content-type, then custom inspectors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from types import MappingProxyType
from typing import Any

from agentcage.errors import ConfigError
from agentcage.gateway.inspectors import DomainInspector, Inspector
from agentcage.inspect.body_size import BodySizeInspector, BodySizeSettings
from agentcage.inspect.content_type import ContentTypeInspector, ContentTypeSettings
from agentcage.inspect.custom import load_custom_entries
from agentcage.inspect.entropy import EntropyInspector, EntropySettings
from agentcage.inspect.patterns import load_patterns
from agentcage.inspect.runs import IndexCache
from agentcage.inspect.secrets import SecretsInspector
from agentcage.secrets.rules import InjectionRule
from agentcage.secrets.staging import StagedSecret

REGISTRY: Mapping[str, Callable[[], Inspector]] = MappingProxyType(
    {
        "domain": DomainInspector,
        "secrets": SecretsInspector,
        "body-size": BodySizeInspector,
        "entropy": EntropyInspector,
        "content-type": ContentTypeInspector,
    }
)
ORDER = tuple(REGISTRY)


def _settings(cls: type, values: Mapping[str, Any] | Any, section: str) -> Any:
    if not isinstance(values, Mapping):
        values = values.model_dump() if hasattr(values, "model_dump") else dict(values or {})
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{section}: unknown settings {unknown}; known: {sorted(known)}")
    converted = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    return cls(**converted)


def build_chain(
    *,
    staged: Sequence[StagedSecret] = (),
    rules: Sequence[InjectionRule] = (),
    entropy: Mapping[str, Any] | Any = MappingProxyType({}),
    content_type: Mapping[str, Any] | Any = MappingProxyType({}),
    max_request_body: int | None = None,
    custom: Sequence[Any] = (),
    extra_patterns: Sequence[Mapping[str, Any]] = (),
    include_domain: bool = True,
) -> tuple[Inspector, ...]:
    """The full chain for one cage; bad settings or custom inspectors raise ConfigError."""
    body = BodySizeSettings() if max_request_body is None else BodySizeSettings(max_request_body)
    cache = IndexCache()  # one body index shared by the inspectors of a request
    chain: list[Inspector] = [DomainInspector()] if include_domain else []
    chain += [
        SecretsInspector(load_patterns(extra_patterns), staged, rules, cache=cache),
        BodySizeInspector(body),
        EntropyInspector(_settings(EntropySettings, entropy, "entropy"), cache),
        ContentTypeInspector(_settings(ContentTypeSettings, content_type, "content_type"), cache),
    ]
    chain += load_custom_entries(tuple(custom))
    return tuple(chain)
