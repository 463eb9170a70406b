"""The top-level blocks of a Python file, told apart by their text, before any parsing.

A change to a test file leaves most of it as it was. Parsing is most of what ``integrity diff``
costs, so the two sides of a modified file are cut into top-level blocks (a statement with its
decorators and the comments after it) and a block whose text is the same on both sides is
parsed once, for both: ``plan`` returns three texts to parse, the blocks both sides share and
each side's own, every block at its own line (the others blanked), so line numbers need no
fixing but for the shared blocks' lines on the side after, which ``Plan.after_line`` gives.

A block starts at a line that begins in column 0 with code (not a space, a comment, a closing
bracket, or ``else``/``elif``/``except``/``finally``); a decorator line takes the next block
with it. Text cannot tell a line inside a multi-line string or bracket from a statement, so
the cut is checked after parsing (``fits``): every block must begin with a statement. A cut
inside a string or a bracket leaves one block open past its end, which fails that check or the
parse, and then each side is parsed whole (``python_tests.analyse_pair``): a wrong cut costs
time, never a finding.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections import Counter
from dataclasses import dataclass

_START = re.compile(r"^(?![\s#)\]}]|(?:else|elif|except|finally)\b)", re.MULTILINE)
_CODE = re.compile(r"^[ \t\f]*[^\s#]", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    first: int  # line number (from 1) of the block's first line
    end: int  # line number of the line after it (the next block's first)
    key: str  # its text, trailing blank lines aside


@dataclass(frozen=True)
class Plan:
    """Three texts to parse: the blocks both sides have, each side's own blocks, every block
    at the line it is at on that side (shared ones at their lines before)."""

    before_lines: list[str]
    after_lines: list[str]
    same_text: str
    same_blocks: tuple[Block, ...]
    before_text: str
    before_blocks: tuple[Block, ...]
    after_text: str
    after_blocks: tuple[Block, ...]
    moves: tuple[tuple[int, int, int], ...]  # (first line before, end before, first line after)

    def after_line(self, line: int) -> int:
        """Where a line of a shared block (numbered as before) is in the file after."""
        index = bisect.bisect_right(self.moves, (line, float("inf"))) - 1
        if index < 0:
            return line
        first, end, there = self.moves[index]
        return there + (line - first) if first <= line < end else line


def blocks(text: str, lines: list[str]) -> list[Block] | None:
    """The top-level blocks of a text, or None when code stands before the first one (an
    indented first line: a whole parse says what is wrong with it)."""
    starts: list[int] = []
    offset_line, offset = 1, 0
    glued = False
    for found in _START.finditer(text):
        position = found.start()
        if position == len(text):
            break
        offset_line += text.count("\n", offset, position)
        offset = position
        if not glued:
            starts.append(offset_line)
        glued = text.startswith("@", position)  # a decorator takes the next block with it
    if not starts or _CODE.search("\n".join(lines[: starts[0] - 1])):
        return None
    found_blocks: list[Block] = []
    for first, end in zip(starts, [*starts[1:], len(lines) + 1]):
        last = end - 1
        while last > first and not lines[last - 1].strip():
            last -= 1
        found_blocks.append(Block(first, end, "\n".join(lines[first - 1: last])))
    return found_blocks


def _text(lines: list[str], kept: list[Block]) -> str:
    out = [""] * len(lines)
    for block in kept:
        out[block.first - 1: block.end - 1] = lines[block.first - 1: block.end - 1]
    return "\n".join(out)


def plan(before: str, after: str) -> Plan | None:
    """How to parse a file changed from ``before`` to ``after``, or None when its blocks
    cannot be cut (then each side is parsed whole)."""
    before_lines, after_lines = before.split("\n"), after.split("\n")
    old, new = blocks(before, before_lines), blocks(after, after_lines)
    if old is None or new is None:
        return None
    waiting: dict[str, list[Block]] = {}
    for block in old:
        waiting.setdefault(block.key, []).append(block)
    shared_count = Counter(b.key for b in old) & Counter(b.key for b in new)
    same: list[Block] = []
    moves: list[tuple[int, int, int]] = []
    after_own: list[Block] = []
    for block in new:
        if shared_count[block.key] > 0:
            shared_count[block.key] -= 1
            twin = waiting[block.key].pop(0)
            same.append(twin)
            moves.append((twin.first, twin.end, block.first))
        else:
            after_own.append(block)
    kept = {id(b) for b in same}
    before_own = [b for b in old if id(b) not in kept]
    same.sort(key=lambda b: b.first)
    return Plan(
        before_lines=before_lines,
        after_lines=after_lines,
        same_text=_text(before_lines, same),
        same_blocks=tuple(same),
        before_text=_text(before_lines, before_own),
        before_blocks=tuple(before_own),
        after_text=_text(after_lines, after_own),
        after_blocks=tuple(after_own),
        moves=tuple(sorted(moves)),
    )


def fits(body: list[ast.stmt], expected: tuple[Block, ...]) -> bool:
    """Whether the parsed statements are exactly the blocks: each block begins with a statement
    (its first decorator, for a decorated one). A statement that ran on past its own block, a
    string or bracket the cut went through, would cover the next block's first line, so that
    block would begin with none."""
    firsts = {b.first for b in expected}
    begun = set()
    for node in body:
        decorators = getattr(node, "decorator_list", None)
        start = decorators[0].lineno if decorators else node.lineno
        if start in firsts:
            begun.add(start)
    return len(begun) == len(firsts)
