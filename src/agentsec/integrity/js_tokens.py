"""A small JavaScript/TypeScript tokenizer: enough to find test blocks and count expectations.

No JavaScript parser is in the standard library, and none is added: this splits source into
names, numbers, strings, template literals, regular-expression literals and punctuation, and
drops comments, so that the test finder never mistakes ``"it("`` inside a string, a comment or a
regex for a call. Brackets are matched afterwards (``match_brackets``).

What it handles: '…' and "…" strings with escapes; template literals, with ``${…}`` expressions
nested to any depth (the whole literal is one token; the tokens of its expressions are dropped,
so an ``expect`` written inside ``${…}`` is not counted); ``//`` and ``/* */`` comments; a
leading ``#!`` line; regex literals with classes (``/[/]/g``), told from division by the token
before them (after a name, a number, ``)`` or ``]`` a slash divides; elsewhere, and after
keywords such as ``return`` or ``typeof``, it starts a regex).

What it does not handle: JSX text (an apostrophe in ``<p>don't</p>`` opens a string that runs to
the end of the line), HTML-like comments (``<!--``), a regex right after the ``)`` of an
``if (…)`` / ``while (…)`` head (read as division), and TypeScript generics and operators beyond
single-character punctuation (``===`` is three ``=`` tokens). Numbers are read loosely. None of
this is needed to find ``it(``, ``test(``, ``describe(`` and ``expect(`` reliably in test files.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Literal

TokenKind = Literal["name", "num", "str", "template", "regex", "punct"]
MAX_TEMPLATE_NESTING = 64

_MAIN = re.compile(
    r"""
    (?P<ws>\s+)
    |(?P<comment>//[^\n]*|/\*[\s\S]*?(?:\*/|\Z))
    |(?P<str>'(?:[^'\\\n]|\\[\s\S])*'?|"(?:[^"\\\n]|\\[\s\S])*"?)
    |(?P<name>[A-Za-z_$\u0080-\uffff#][\w$\u0080-\uffff]*)
    |(?P<num>\d[\w.]*|\.\d\w*)
    |(?P<punct>=>|\?\.|\.\.\.|\S)
    """,
    re.VERBOSE,
)
_REGEX = re.compile(r"/(?![*/])(?:[^\\/\[\n]|\\.|\[(?:[^\]\\\n]|\\.)*\])+/[A-Za-z]*")
# A template chunk: up to the closing backtick, or up to a ${ that opens an expression.
_TEMPLATE_CHUNK = re.compile(r"(?:[^`\\$]|\\[\s\S]|\$(?!\{))*(?:`|\$\{|\Z)")
# After these names an expression starts, so a slash starts a regex literal.
_EXPRESSION_KEYWORDS = frozenset({
    "return", "typeof", "instanceof", "in", "of", "new", "delete", "void", "throw", "case",
    "do", "else", "yield", "await",
})


class TokenizeError(ValueError):
    """Source the tokenizer cannot follow (template literals nested past the limit)."""


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    text: str
    start: int  # offset in the source

    def is_punct(self, text: str) -> bool:
        return self.kind == "punct" and self.text == text

    def is_name(self, text: str) -> bool:
        return self.kind == "name" and self.text == text


def _regex_allowed(previous: Token | None) -> bool:
    if previous is None:
        return True
    if previous.kind == "punct":
        return previous.text not in (")", "]")
    if previous.kind == "name":
        return previous.text in _EXPRESSION_KEYWORDS
    return False  # after a number, string, template or regex: division


class _Scanner:
    def __init__(self, source: str) -> None:
        self.src = source
        self.tokens: list[Token] = []

    def run(self) -> list[Token]:
        pos = 0
        if self.src.startswith("#!"):
            end = self.src.find("\n")
            pos = len(self.src) if end < 0 else end
        self._scan(pos, self.tokens, in_expression=False, depth=0)
        return self.tokens

    def _template(self, start: int, depth: int) -> int:
        """The end of the template literal opened by the backtick at ``start``."""
        if depth > MAX_TEMPLATE_NESTING:
            raise TokenizeError("template literals nested too deeply")
        pos = start + 1
        while True:
            chunk = _TEMPLATE_CHUNK.match(self.src, pos)
            assert chunk is not None  # the pattern matches the empty string
            pos = chunk.end()
            if not chunk.group().endswith("${"):
                return pos  # a closing backtick, or the end of the source
            pos = self._scan(pos, [], in_expression=True, depth=depth + 1)

    def _scan(self, pos: int, out: list[Token], in_expression: bool, depth: int) -> int:
        """Tokens from ``pos`` into ``out``; inside a ${…} expression, up to its closing brace
        (returned past it)."""
        src, size = self.src, len(self.src)
        braces = 0
        previous: Token | None = None
        while pos < size:
            char = src[pos]
            if char == "`":
                end = self._template(pos, depth)
                previous = Token("template", src[pos:end], pos)
                out.append(previous)
                pos = end
                continue
            if char == "/" and _regex_allowed(previous) and src[pos + 1: pos + 2] not in "/*":
                literal = _REGEX.match(src, pos)
                if literal is not None:
                    previous = Token("regex", literal.group(), pos)
                    out.append(previous)
                    pos = literal.end()
                    continue
            found = _MAIN.match(src, pos)
            assert found is not None  # \S or \s always matches
            kind = found.lastgroup
            text = found.group()
            if kind == "punct" and in_expression:
                if text == "{":
                    braces += 1
                elif text == "}":
                    if braces == 0:
                        return found.end()
                    braces -= 1
            if kind not in ("ws", "comment"):
                previous = Token(kind, text, pos)  # type: ignore[arg-type]
                out.append(previous)
            pos = found.end()
        return pos


def tokenize(source: str) -> list[Token]:
    """The significant tokens of ``source`` (comments and whitespace dropped)."""
    return _Scanner(source).run()


def match_brackets(tokens: list[Token]) -> list[int]:
    """For each ( [ { token the index of its closing token, for each closer its opener; -1
    for everything else and for brackets left unmatched."""
    pairs = {")": "(", "]": "[", "}": "{"}
    match = [-1] * len(tokens)
    stack: list[int] = []
    for index, token in enumerate(tokens):
        if token.kind != "punct":
            continue
        if token.text in "([{":
            stack.append(index)
        elif token.text in pairs:
            # An unbalanced closer (JSX, or a misread regex) closes the nearest matching opener.
            while stack and tokens[stack[-1]].text != pairs[token.text]:
                stack.pop()
            if stack:
                opener = stack.pop()
                match[opener], match[index] = index, opener
    return match


class LineIndex:
    """Line numbers (from 1) of source offsets."""

    def __init__(self, source: str) -> None:
        self._starts = [m.end() for m in re.finditer("\n", source)]

    def line(self, offset: int) -> int:
        return bisect.bisect_right(self._starts, offset) + 1
