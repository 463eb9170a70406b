"""The inspector chain: the protocol, the built-in inspectors (domain, secrets, body-size,
entropy, content-type), custom ones, the one registry and the one chain runner.

Every inspector satisfies `agentcage.inspect.protocol.Inspector` (name, phase, inspect) and
returns a Decision; nothing here imports mitmproxy or the gateway.
"""

from agentcage.inspect.body_size import BodySizeCounter, BodySizeInspector, BodyTooLarge
from agentcage.inspect.chain import first_block, run_chain, run_one
from agentcage.inspect.content_type import ContentTypeInspector, ContentTypeSettings
from agentcage.inspect.custom import load_custom, load_custom_entries
from agentcage.inspect.domain import DomainInspector
from agentcage.inspect.entropy import EntropyInspector, EntropySettings
from agentcage.inspect.protocol import Decision, InspectionContext, Inspector, RequestView
from agentcage.inspect.registry import ORDER, REGISTRY, ChainParts, build_chain
from agentcage.inspect.secrets import SecretsInspector

__all__ = [
    "ORDER",
    "REGISTRY",
    "BodySizeCounter",
    "BodySizeInspector",
    "BodyTooLarge",
    "ChainParts",
    "ContentTypeInspector",
    "ContentTypeSettings",
    "Decision",
    "DomainInspector",
    "EntropyInspector",
    "EntropySettings",
    "InspectionContext",
    "Inspector",
    "RequestView",
    "SecretsInspector",
    "build_chain",
    "first_block",
    "load_custom",
    "load_custom_entries",
    "run_chain",
    "run_one",
]
