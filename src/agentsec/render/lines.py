"""Record-per-line terminal layout, shared by both CLIs.

A table with one column per field cannot fit 80 columns once names get long: rich shrinks the
columns until cells read "reac… (cri…" and names are cut, and a pipe gets the same 80 columns. So
listings here are one record per line: short fixed-width fields first, the name last and whole.
A name longer than the line runs on (the terminal wraps it) instead of being cropped, so it can
still be copied. Detail that does not fit goes on indented lines below, wrapped at spaces only.

Rendering is a pure function of the records and the width the console offers; everything is
Text (never markup), so a name like "[red]" prints as itself.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

INDENT = 4


@dataclass(frozen=True)
class Cell:
    """A short fixed-width field; its text is padded to ``width`` and never cut."""

    text: str
    width: int
    style: str = ""
    right: bool = False

    def render(self) -> Text:
        pad = max(self.width - Text(self.text).cell_len, 0)
        body = " " * pad + self.text if self.right else self.text + " " * pad
        return Text(body, style=self.style)


def record(cells: Iterable[Cell], name: str, name_style: str = "") -> Text:
    """One line: the cells, one space apart, then the name, whole."""
    line = Text()
    for cell in cells:
        line.append_text(cell.render())
        line.append(" ")
    line.append(name, style=name_style)
    return line


def wrapped(text: str, width: int, indent: int = INDENT, style: str = "") -> list[Text]:
    """``text`` on indented lines no wider than ``width``, broken at spaces only: a path or an
    ID longer than the line stays whole on a line of its own."""
    room = max(width - indent, 20)
    pieces = textwrap.wrap(
        text, room, break_long_words=False, break_on_hyphens=False
    ) or [""]
    return [Text(" " * indent + piece, style=style) for piece in pieces]


class Lines:
    """A renderable built from a function of the console width. Its lines are never wrapped or
    cropped by rich: the builder has already laid them out for that width."""

    def __init__(self, build: Callable[[int], list[Text]]) -> None:
        self._build = build

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self._build(options.max_width):
            line.no_wrap = True
            line.overflow = "ignore"
            yield line
