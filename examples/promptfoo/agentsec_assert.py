"""promptfoo's Python assertion hook, handing over to agentsec's (see agentsec.promptfoo).

promptfoo loads this file by path with the interpreter in PROMPTFOO_PYTHON, which must be one
where agentsec is installed (e.g. .venv/bin/python).
"""

from agentsec.promptfoo.assertion import get_assert

__all__ = ["get_assert"]
