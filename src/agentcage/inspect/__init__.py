"""The gateway's inspectors: secrets, body-size, entropy, content-type, custom; the chain runner.

Every inspector satisfies `agentcage.gateway.inspectors.Inspector` (name, phase, inspect) and
returns a Decision; nothing here imports mitmproxy.
"""

from agentcage.inspect.body_size import BodySizeCounter, BodySizeInspector, BodyTooLarge
from agentcage.inspect.chain import first_block, run_chain, run_one
from agentcage.inspect.content_type import ContentTypeInspector, ContentTypeSettings
from agentcage.inspect.custom import load_custom, load_custom_entries
from agentcage.inspect.entropy import EntropyInspector, EntropySettings
from agentcage.inspect.registry import ORDER, REGISTRY, build_chain
from agentcage.inspect.secrets import SecretsInspector

__all__ = [
    "ORDER",
    "REGISTRY",
    "BodySizeCounter",
    "BodySizeInspector",
    "BodyTooLarge",
    "ContentTypeInspector",
    "ContentTypeSettings",
    "EntropyInspector",
    "EntropySettings",
    "SecretsInspector",
    "build_chain",
    "first_block",
    "load_custom",
    "load_custom_entries",
    "run_chain",
    "run_one",
]
