"""The top-level blocks of a Python file, told apart by their text, before any parsing.

A change to a test file leaves most of it as it was. Parsing is most of what ``integrity diff``
costs, so the two sides of a modified file are cut into top-level blocks (a statement with its
decorators and the comments after it) and a block whose text is the same on both sides is
parsed once, for both: ``plan`` says to parse the text before whole, and of the text after
only its own blocks, each at its line (the others blanked), so line numbers need no fixing but
for the shared blocks' lines on the side after, which ``Plan.after_line`` gives.

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

# A line in column 0 that starts no block: blank, indented, a comment, a closing bracket, or
# the rest of a compound statement.
_NOT_A_START = frozenset(" \t\r\f\v#)]}")
_GLUED = re.compile(r"(?:else|elif|except|finally)\b")
_CODE = re.compile(r"^[ \t\f]*[^\s#]", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    first: int  # line number (from 1) of the block's first line
    end: int  # line number of the line after it (the next block's first)
    key: str  # its text, trailing blank lines aside


@dataclass(frozen=True)
class Plan:
    """What to parse: the text before whole (its blocks: every one), and of the text after
    only its own blocks, each at its line (the blocks it shares with the text before blanked).
    The shared blocks are read from the parse of the text before, for both sides."""

    before_lines: list[str]
    after_lines: list[str]
    before_blocks: tuple[Block, ...]
    shared: frozenset[int]  # the first lines, before, of the blocks both sides have
    after_text: str
    after_blocks: tuple[Block, ...]
    moves: tuple[tuple[int, int, int], ...]  # (first line before, end before, first line after)
    firsts: tuple[int, ...] = ()  # of the blocks before

    def is_shared(self, line: int) -> bool:
        """Whether the block that holds a statement of the text before beginning at ``line``
        is shared (a block may hold more than one: ``x = 1; y = 2``, or a line in column 0
        that reads like ``else`` and is not)."""
        index = bisect.bisect_right(self.firsts, line) - 1
        return index >= 0 and self.firsts[index] in self.shared

    def after_line(self, line: int) -> int:
        """Where a line of a shared block (numbered as before) is in the file after."""
        index = bisect.bisect_right(self.moves, (line, float("inf"))) - 1
        if index < 0:
            return line
        first, end, there = self.moves[index]
        return there + (line - first) if first <= line < end else line


def blocks(lines: list[str]) -> list[Block] | None:
    """The top-level blocks of a text's lines, or None when code stands before the first one
    (an indented first line: a whole parse says what is wrong with it)."""
    starts: list[int] = []
    glued = False
    for number, line in enumerate(lines, 1):
        if not line or line[0] in _NOT_A_START or (line[0] in "ef" and _GLUED.match(line)):
            continue
        if not glued:
            starts.append(number)
        glued = line[0] == "@"  # a decorator takes the next block with it
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
    old, new = blocks(before_lines), blocks(after_lines)
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
    return Plan(
        before_lines=before_lines,
        after_lines=after_lines,
        before_blocks=tuple(old),
        shared=frozenset(b.first for b in same),
        after_text=_text(after_lines, after_own),
        after_blocks=tuple(after_own),
        moves=tuple(sorted(moves)),
        firsts=tuple(b.first for b in old),
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
