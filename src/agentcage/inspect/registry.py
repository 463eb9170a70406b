"""The ONE registry of built-in inspectors, in the order they run, and `build_chain`.

Each entry makes one inspector from the cage's `ChainParts` (its settings, its staged secrets
and rules, the pattern set and the body index the inspectors of a request share); every entry
also works with the default parts. `build_chain` walks the registry in order, then appends the
custom inspectors of `inspectors:`: domain, secrets, body-size, entropy, content-type, custom.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from agentcage.inspect.body_size import BodySizeInspector, BodySizeSettings
from agentcage.inspect.content_type import ContentTypeInspector, ContentTypeSettings
from agentcage.inspect.custom import load_custom_entries
from agentcage.inspect.domain import DomainInspector
from agentcage.inspect.entropy import EntropyInspector, EntropySettings
from agentcage.inspect.patterns import PatternSet, load_patterns
from agentcage.inspect.protocol import Inspector
from agentcage.inspect.secrets import SecretsInspector
from agentcage.secrets.rules import InjectionRule
from agentcage.secrets.staging import StagedSecret
from agentcage.typed import from_mapping


@dataclass(frozen=True)
class ChainParts:
    """Everything the built-in inspectors of one cage are made from."""

    staged: tuple[StagedSecret, ...] = ()
    rules: tuple[InjectionRule, ...] = ()
    entropy: EntropySettings = field(default_factory=EntropySettings)
    content_type: ContentTypeSettings = field(default_factory=ContentTypeSettings)
    body_size: BodySizeSettings = field(default_factory=BodySizeSettings)
    patterns: PatternSet | None = None  # None: the shipped patterns


def _domain(p: ChainParts | None = None) -> Inspector:
    return DomainInspector()


def _secrets(p: ChainParts | None = None) -> Inspector:
    p = p or ChainParts()
    patterns = p.patterns if p.patterns is not None else load_patterns()
    return SecretsInspector(patterns, p.staged, p.rules)


def _body_size(p: ChainParts | None = None) -> Inspector:
    return BodySizeInspector((p or ChainParts()).body_size)


def _entropy(p: ChainParts | None = None) -> Inspector:
    p = p or ChainParts()
    return EntropyInspector(p.entropy)


def _content_type(p: ChainParts | None = None) -> Inspector:
    p = p or ChainParts()
    return ContentTypeInspector(p.content_type)


REGISTRY: Mapping[str, Callable[..., Inspector]] = MappingProxyType(
    {
        "domain": _domain,
        "secrets": _secrets,
        "body-size": _body_size,
        "entropy": _entropy,
        "content-type": _content_type,
    }
)
ORDER = tuple(REGISTRY)


def build_chain(
    *,
    staged: Sequence[StagedSecret] = (),
    rules: Sequence[InjectionRule] = (),
    entropy: EntropySettings | Mapping[str, Any] | None = None,
    content_type: ContentTypeSettings | Mapping[str, Any] | None = None,
    max_request_body: int | None = None,
    custom: Sequence[Any] = (),
    extra_patterns: Sequence[Mapping[str, Any]] = (),
    include_domain: bool = True,
) -> tuple[Inspector, ...]:
    """The full chain for one cage; bad settings or custom inspectors raise ConfigError."""
    parts = ChainParts(
        staged=tuple(staged),
        rules=tuple(rules),
        entropy=from_mapping(EntropySettings, entropy, "entropy"),
        content_type=from_mapping(ContentTypeSettings, content_type, "content_type"),
        body_size=(BodySizeSettings() if max_request_body is None
                   else BodySizeSettings(max_request_body)),
        patterns=load_patterns(extra_patterns),
    )
    chain = [make(parts) for name, make in REGISTRY.items()
             if include_domain or name != "domain"]
    chain += load_custom_entries(tuple(custom))
    return tuple(chain)
