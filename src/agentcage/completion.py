"""Shell completion sources for `agentcage` (click's completion: see docs/completion.md).

Each is cheap and silent: a completion that raises would print a traceback into the user's
shell, so any failure completes nothing.
"""

from __future__ import annotations

from typing import Any

from click.shell_completion import CompletionItem


def complete_cages(ctx: Any, param: Any, incomplete: str) -> list[CompletionItem]:
    try:
        from agentcage.state import StateStore

        names = StateStore().names()
    except Exception:
        return []
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]


def complete_scaffolds(ctx: Any, param: Any, incomplete: str) -> list[CompletionItem]:
    try:
        from agentcage.config.scaffolds import all_scaffold_names

        names = all_scaffold_names()
    except Exception:
        return []
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]
