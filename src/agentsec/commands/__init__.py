"""Commands that sit beside the measuring ones: each module adds one command to the group."""

from __future__ import annotations

import click


def register(group: click.Group) -> None:
    from agentsec.commands import chart, combine, history, integrity, ui

    for module in (chart, combine, history, integrity, ui):
        group.add_command(module.command)
