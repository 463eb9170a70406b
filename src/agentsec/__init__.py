"""agentsec: measure what a sandbox lets an AI agent reach, and score it."""

__version__ = "0.1.0"
