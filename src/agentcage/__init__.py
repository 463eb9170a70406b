"""agentcage: run an AI agent in a cage whose only way out is an inspecting egress gateway."""

__version__ = "0.1.0"
