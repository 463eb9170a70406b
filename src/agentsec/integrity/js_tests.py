"""JavaScript and TypeScript test files (jest, vitest, mocha, node:test) and source functions,
read through ``js_tokens`` (never run, never parsed into a syntax tree).

Found, per test file:
- test blocks: ``it``/``test``/``specify`` calls, their modifiers (``.skip``, ``.only``,
  ``.todo``, ``.each(…)``, ``.skipIf(…)``, ``.failing`` …), ``x``/``f``-prefixed forms, node:test
  options (``{ skip: true }``, ``{ todo }``, ``{ only }``), names qualified by the enclosing
  ``describe``/``context``/``suite`` blocks, whose skip or focus they inherit;
- per test, each ``expect(…)…matcher(…)``, ``expect.assertions(n)``, ``assert(…)`` and
  ``assert.method(…)`` (also ``t.assert.method``), graded by strength, and ``t.skip()`` /
  ``this.skip()`` calls in its body;
- module mocks of local paths (``jest.mock``, ``vi.mock``, ``mock.module`` …), spies on objects
  imported from local paths (``jest.spyOn``, ``vi.spyOn``, ``mock.method``, ``sinon.stub``), and
  exits (``process.exit()`` or ``process.exit(0)``, ``process.exitCode = 0``).

In source files: ``function name(…) {…}`` declarations, ``const name = (…) => …`` /
``function`` expressions, and the methods and function-valued properties of classes and object
literals (``add(a, b) {…}``, ``get total() {…}``, ``add: (a, b) => …``, a class field
``add = (a, b) => …``), named ``Class.method`` / ``object.method``; and whether each body is a
stub (empty, ``return`` of a literal, a lone ``throw new …``).

Tests built in loops or helpers (``for (const c of cases) it(c.name, …)``) are found once, with
the name as written; tests registered through another name (``const t = test; t(…)``) are not.
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass

from agentsec.integrity.js_tokens import (
    LineIndex,
    Token,
    TokenizeError,
    match_brackets,
    tokenize,
)
from agentsec.integrity.model import (
    STRONG,
    TRIVIAL,
    WEAK,
    Assertion,
    FileAnalysis,
    FunctionBody,
    Marker,
    TestCase,
    quote,
)

LEAVES = frozenset({"it", "test", "specify", "xit", "xtest", "xspecify", "fit", "ftest"})
GROUPS = frozenset({"describe", "context", "suite", "xdescribe", "xcontext", "xsuite",
                    "fdescribe", "fcontext"})
_SKIP_MODIFIERS = frozenset({"skip", "todo", "skipIf", "failing", "fails", "fixme"})
_CALLED_MODIFIERS = frozenset({"each", "skipIf", "runIf", "for"})  # take (…) before the call
_LITERAL_NAMES = frozenset({"true", "false", "null", "undefined", "NaN", "Infinity"})
_WEAK_MATCHERS = frozenset({"toBeTruthy", "toBeFalsy", "toBeDefined", "toHaveBeenCalled",
                            "toBeCalled", "toHaveReturned", "toBeOk", "toBeTypeOf"})
_EQUAL_MATCHERS = frozenset({"toBe", "toEqual", "toStrictEqual", "toBeCloseTo", "toHaveLength"})
_WEAK_ASSERTS = frozenset({"ok", "isOk", "isTrue", "isNotNull", "exists", "isDefined",
                           "isNotUndefined", "ifError", "doesNotThrow", "doesNotReject",
                           "isNotEmpty", "notEqual", "notStrictEqual", "isFalse", "notOk"})
_EQUAL_ASSERTS = frozenset({"strictEqual", "equal", "deepStrictEqual", "deepEqual",
                            "equals", "eq"})
_MOCKERS = frozenset({("jest", "mock"), ("jest", "doMock"), ("jest", "unstable_mockModule"),
                      ("jest", "setMock"), ("vi", "mock"), ("vi", "doMock"),
                      ("mock", "module")})
_SPIES = frozenset({("jest", "spyOn"), ("vi", "spyOn"), ("mock", "method"), ("sinon", "stub"),
                    ("sinon", "replace"), ("sinon", "spy"), ("td", "replace")})
_LOCAL_PREFIXES = (".", "/", "@/", "~/", "src/")


def _join(tokens: list[Token]) -> str:
    """Tokens back into compact code: a space only between two words."""
    out: list[str] = []
    previous: Token | None = None
    for token in tokens:
        if previous is not None and previous.kind != "punct" and token.kind != "punct":
            out.append(" ")
        out.append(token.text)
        if token.is_punct(","):
            out.append(" ")
        previous = token
    return "".join(out).replace(", )", ")").replace(", ]", "]").rstrip()


def _is_literal(tokens: list[Token]) -> bool:
    """One literal value: a number (optionally signed), a string, a template without ${…},
    true/false/null/undefined, a regex."""
    if tokens and tokens[0].kind == "punct" and tokens[0].text in "-+":
        tokens = tokens[1:]
    if len(tokens) != 1:
        return False
    token = tokens[0]
    if token.kind == "template":
        return "${" not in token.text
    return token.kind in ("num", "str", "regex") or (
        token.kind == "name" and token.text in _LITERAL_NAMES
    )


def _all_literal(tokens: list[Token]) -> bool:
    """Nothing in these tokens reads a variable or calls a function."""
    return all(
        t.kind in ("num", "str", "regex", "punct")
        or (t.kind == "template" and "${" not in t.text)
        or (t.kind == "name" and t.text in _LITERAL_NAMES)
        for t in tokens
    )


def _unquote(token: Token) -> str:
    if token.kind in ("str", "template") and len(token.text) >= 2:
        return token.text[1:-1]
    return token.text


@dataclass
class _Block:
    start: int  # index of the ( of the call
    end: int  # index of its )
    name: str
    skips: tuple[Marker, ...]
    focused: tuple[Marker, ...]


class _File:
    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.tokens = tokenize(source)
        self.match = match_brackets(self.tokens)
        self.lines = LineIndex(source)

    def line(self, index: int) -> int:
        return self.lines.line(self.tokens[index].start)

    def tok(self, index: int) -> Token | None:
        return self.tokens[index] if 0 <= index < len(self.tokens) else None

    def punct(self, index: int, text: str) -> bool:
        token = self.tok(index)
        return token is not None and token.is_punct(text)

    def close(self, index: int) -> int:
        """The index of the bracket closing the one at ``index`` (-1: none)."""
        return self.match[index] if self.punct(index, "(") or self.punct(index, "{") or (
            self.punct(index, "[")) else -1

    def args(self, open_index: int) -> list[list[Token]]:
        """The arguments of the call whose ( is at ``open_index``, split at top-level commas."""
        end = self.close(open_index)
        parts: list[list[Token]] = [[]]
        index = open_index + 1
        while 0 <= index < end:
            token = self.tokens[index]
            if token.is_punct(","):
                parts.append([])
                index += 1
                continue
            inner = self.close(index) if token.kind == "punct" and token.text in "([{" else -1
            stop = inner if inner > index else index
            parts[-1].extend(self.tokens[index: stop + 1])
            index = stop + 1
        return [p for p in parts if p]

    def member_call(self, index: int) -> tuple[str, str, int] | None:
        """(object, method, index of the '(') for ``object.method(`` at ``index``."""
        first, dot, second = self.tok(index), self.tok(index + 1), self.tok(index + 2)
        if (first is None or first.kind != "name" or dot is None or not dot.is_punct(".")
                or second is None or second.kind != "name" or not self.punct(index + 3, "(")):
            return None
        return first.text, second.text, index + 3


def _marker(f: _File, index: int, key: str, text: str, module: str = "") -> Marker:
    return Marker(f.line(index), key, quote(text), module)


def _options(f: _File, args: list[list[Token]]) -> tuple[list[str], list[str]]:
    """node:test options objects among the arguments: which of skip/todo and only are set."""
    skip: list[str] = []
    only: list[str] = []
    for arg in args[1:]:
        if not arg or not arg[0].is_punct("{"):
            continue
        for position, token in enumerate(arg[:-2]):
            value = arg[position + 2]
            if (token.kind == "name" and arg[position + 1].is_punct(":")
                    and not value.is_name("false")):
                if token.text in ("skip", "todo"):
                    skip.append(f"{token.text}: {value.text}")
                elif token.text == "only":
                    only.append(f"only: {value.text}")
    return skip, only


def _test_call(f: _File, index: int) -> tuple[int, list[str], str] | None:
    """For a test or group call at ``index``: (index of its '(', modifiers, callee text)."""
    token = f.tokens[index]
    before = f.tok(index - 1)
    if before is not None and (before.is_punct(".") or before.is_name("function")):
        return None
    modifiers: list[str] = []
    cursor = index + 1
    while f.punct(cursor, ".") and (following := f.tok(cursor + 1)) is not None and (
        following.kind == "name"
    ):
        modifiers.append(following.text)
        cursor += 2
        if modifiers[-1] in _CALLED_MODIFIERS:
            if f.punct(cursor, "("):
                cursor = f.close(cursor) + 1 if f.close(cursor) > 0 else -1
            elif (nxt := f.tok(cursor)) is not None and nxt.kind == "template":
                cursor += 1
            if cursor < 0:
                return None
    if not f.punct(cursor, "(") or f.close(cursor) < 0:
        return None
    callee = ".".join([token.text, *modifiers])
    return cursor, modifiers, callee


def _expect(f: _File, index: int) -> Assertion | None:
    member = f.member_call(index)
    if member is not None and member[1] in ("assertions", "hasAssertions"):
        return Assertion(f.line(index), quote(f"expect.{member[1]}(...)"), WEAK)
    open_index = index + 1
    if member is not None and member[1] in ("soft", "poll"):
        open_index = member[2]
    if not f.punct(open_index, "("):
        return None
    close = f.close(open_index)
    if close < 0:
        return None
    subject = f.tokens[open_index + 1: close]
    modifiers: list[str] = []
    matcher, matcher_args = "", []
    cursor = close + 1
    while f.punct(cursor, ".") and (name := f.tok(cursor + 1)) is not None and (
        name.kind == "name"
    ):
        cursor += 2
        if f.punct(cursor, "("):
            matcher = name.text
            end = f.close(cursor)
            matcher_args = f.tokens[cursor + 1: end] if end > 0 else []
            break
        modifiers.append(name.text)
    subject_text, args_text = _join(subject), _join(matcher_args)
    chain = "".join(f".{m}" for m in modifiers)
    text = f"expect({subject_text}){chain}.{matcher}({args_text})" if matcher else (
        f"expect({subject_text})"
    )
    if (_all_literal(subject) and _all_literal(matcher_args)) or (
        matcher_args and subject_text == args_text
    ):
        strength = TRIVIAL
    elif not matcher or "not" in modifiers or matcher in _WEAK_MATCHERS or (
        matcher in ("toThrow", "toThrowError", "rejects") and not matcher_args
    ):
        strength = WEAK
    else:
        strength = STRONG
    subject_key = expected = None
    if matcher in _EQUAL_MATCHERS and "not" not in modifiers and _is_literal(matcher_args) and (
        not _is_literal(subject)
    ):
        subject_key, expected = quote(f"{subject_text}.{matcher}", 120), quote(args_text, 120)
    return Assertion(f.line(index), quote(text), strength, subject_key, expected)


def _assert(f: _File, index: int) -> Assertion | None:
    if f.punct(index + 1, "("):
        args = f.args(index + 1)
        flat = [t for a in args for t in a]
        text = f"assert({_join(flat)})"
        if _all_literal(flat):
            strength = TRIVIAL
        elif any(t.kind == "punct" and t.text in "=<>" for t in (args[0] if args else [])):
            strength = STRONG
        else:
            strength = WEAK
        return Assertion(f.line(index), quote(text), strength)
    member = f.member_call(index)
    if member is None:
        return None
    method, open_index = member[1], member[2]
    args = f.args(open_index)
    text = f"assert.{method}({', '.join(_join(a) for a in args)})"
    flat = [t for a in args[:2] for t in a]
    if (flat and _all_literal(flat)) or (len(args) >= 2 and _join(args[0]) == _join(args[1])):
        strength = TRIVIAL
    elif method in _WEAK_ASSERTS or (method in ("throws", "rejects") and len(args) < 2):
        strength = WEAK
    else:
        strength = STRONG
    subject = expected = None
    if method in _EQUAL_ASSERTS and len(args) >= 2 and _is_literal(args[1]) and (
        not _is_literal(args[0])
    ):
        subject = quote(f"{_join(args[0])}.{method}", 120)
        expected = quote(_join(args[1]), 120)
    return Assertion(f.line(index), quote(text), strength, subject, expected)


def _local_names(f: _File) -> dict[str, str]:
    """Names bound by imports or requires of local paths (./x, ../x, /x, @/x, ~/x, src/x),
    each with the path it comes from."""
    names: dict[str, str] = {}
    tokens = f.tokens
    for index, token in enumerate(tokens):
        if token.is_name("import"):
            bound: list[str] = []
            cursor = index + 1
            while cursor < len(tokens) and not tokens[cursor].is_name("from") and (
                cursor - index < 200
            ):
                here = tokens[cursor]
                after = f.tok(cursor + 1)
                if here.kind == "name" and here.text not in ("type", "as") and not (
                    after is not None and after.is_name("as")
                ):
                    bound.append(here.text)
                if here.kind == "str" or here.is_punct(";"):
                    break
                cursor += 1
            source = f.tok(cursor + 1)
            if source is not None and source.kind == "str" and _unquote(source).startswith(
                _LOCAL_PREFIXES
            ):
                names.update(dict.fromkeys(bound, _unquote(source)))
        elif token.is_name("require") and f.punct(index + 1, "("):
            source = f.tok(index + 2)
            if source is None or source.kind != "str" or not _unquote(source).startswith(
                _LOCAL_PREFIXES
            ):
                continue
            spec = _unquote(source)
            cursor = index - 1
            if f.punct(cursor, "="):
                cursor -= 1
                if f.punct(cursor, "}"):
                    opener = f.match[cursor]
                    names.update(
                        (t.text, spec) for t in tokens[opener + 1: cursor] if t.kind == "name"
                    )
                elif (target := f.tok(cursor)) is not None and target.kind == "name":
                    names[target.text] = spec
    return names


def _patches_and_exits(f: _File) -> tuple[list[Marker], list[Marker]]:
    local = _local_names(f)
    patches: list[Marker] = []
    exits: list[Marker] = []
    for index, token in enumerate(f.tokens):
        if token.kind != "name":
            continue
        member = f.member_call(index)
        if member is not None:
            owner, method, open_index = member
            args = f.args(open_index)
            first = args[0] if args else []
            if (owner, method) in _MOCKERS and first and first[0].kind == "str" and (
                _unquote(first[0]).startswith(_LOCAL_PREFIXES)
            ):
                text = f"{owner}.{method}({first[0].text})"
                patches.append(_marker(f, index, "mock:" + text, text, _unquote(first[0])))
            elif (owner, method) in _SPIES and len(first) == 1 and first[0].text in local:
                shown = ", ".join(_join(a) for a in args[:2])
                text = f"{owner}.{method}({shown})"
                patches.append(_marker(f, index, "spy:" + text, text, local[first[0].text]))
            elif (owner, method) == ("process", "exit"):
                code = first
                if not code or not _is_literal(code) or code[-1].text in ("0", "false"):
                    text = f"process.exit({_join(code)})"
                    exits.append(_marker(f, index, "exit:" + text, text))
        elif (token.is_name("process") and f.punct(index + 1, ".")
              and (name := f.tok(index + 2)) is not None and name.is_name("exitCode")
              and f.punct(index + 3, "=") and not f.punct(index + 4, "=")):
            value = f.tok(index + 4)
            if value is not None and (value.text == "0" or value.kind == "name"):
                text = f"process.exitCode = {value.text}"
                exits.append(_marker(f, index, "exit:" + text, text))
    return patches, exits


def _body_skips(f: _File, start: int, end: int) -> list[Marker]:
    """``t.skip()``, ``this.skip()``, ``context.skip()`` and ``.todo()`` inside a test body."""
    found: list[Marker] = []
    for index in range(start, end):
        member = f.member_call(index)
        if member is not None and member[1] in ("skip", "todo") and member[0] not in (
            LEAVES | GROUPS
        ):
            text = f"{member[0]}.{member[1]}()"
            found.append(_marker(f, index, "skip:" + text, text))
    return found


def _tests(f: _File) -> list[TestCase]:
    tokens = f.tokens
    expectations: list[tuple[int, Assertion]] = []
    for index, token in enumerate(tokens):
        if token.kind != "name":
            continue
        found = None
        if token.text == "expect":
            found = _expect(f, index)
        elif token.text == "assert":
            found = _assert(f, index)
        if found is not None:
            expectations.append((index, found))
    positions = [i for i, _ in expectations]
    tests: list[TestCase] = []
    groups: list[_Block] = []
    for index, token in enumerate(tokens):
        if token.kind != "name" or (token.text not in LEAVES and token.text not in GROUPS):
            continue
        call = _test_call(f, index)
        if call is None:
            continue
        open_index, modifiers, callee = call
        close = f.close(open_index)
        while groups and groups[-1].end < index:
            groups.pop()
        args = f.args(open_index)
        name = _join(args[0]) if args else "?"
        if args and len(args[0]) == 1:
            name = _unquote(args[0][0])
        option_skips, option_only = _options(f, args)
        own_skips = [f"{callee}(...)"] if (
            token.text.startswith("x") or _SKIP_MODIFIERS & set(modifiers)
        ) else []
        own_skips += [f"{callee}(..., {{ {o} }})" for o in option_skips]
        own_focus = [f"{callee}(...)"] if (
            token.text.startswith("f") or "only" in modifiers
        ) else []
        own_focus += [f"{callee}(..., {{ {o} }})" for o in option_only]
        skips = tuple(m for g in groups for m in g.skips) + tuple(
            _marker(f, index, "skip:" + s, s) for s in own_skips
        )
        focused = tuple(m for g in groups for m in g.focused) + tuple(
            _marker(f, index, "only:" + s, s) for s in own_focus
        )
        qualified = " > ".join([*(g.name for g in groups), name])
        if token.text in GROUPS:
            groups.append(_Block(open_index, close, name, skips, focused))
            continue
        low = bisect.bisect_left(positions, open_index)
        high = bisect.bisect_right(positions, close)
        # The test's function: the last argument that is not a literal or an options object
        # (jest takes a timeout after it).
        functions = [a for a in args[1:] if a[0].kind == "name" or a[0].is_punct("(")]
        body = functions[-1] if functions else [t for a in args[1:] for t in a]
        body_key = hashlib.blake2b(
            " ".join(t.text for t in body).encode(), digest_size=12
        ).hexdigest()
        tests.append(TestCase(
            path=f.path,
            name=qualified,
            line=f.line(index),
            assertions=tuple(a for _, a in expectations[low:high]),
            skips=skips + tuple(_body_skips(f, open_index, close)),
            focused=focused,
            body_key=body_key,
        ))
    return tests


def analyse_test(path: str, source: str) -> FileAnalysis:
    try:
        f = _File(path, source)
    except (TokenizeError, RecursionError) as exc:
        return FileAnalysis(path, problem=f"{exc}: not analysed")
    patches, exits = _patches_and_exits(f)
    return FileAnalysis(path, tests=tuple(_tests(f)), patches=tuple(patches), exits=tuple(exits))


def _stub(f: _File, open_brace: int) -> str | None:
    """What a function's ``{…}`` body is when it is a stub: empty, ``return`` with nothing or a
    literal, or one ``throw new Name(…)``."""
    end = f.close(open_brace)
    if end < 0:
        return None
    body = [t for t in f.tokens[open_brace + 1: end] if not t.is_punct(";")]
    if not body:
        return "{}"
    if body[0].is_name("return") and (len(body) == 1 or _is_literal(body[1:])):
        return _join(body)
    cursor = open_brace + 1
    if not f.tokens[cursor].is_name("throw") or not f.tokens[cursor + 1].is_name("new"):
        return None
    cursor += 2
    while (token := f.tok(cursor)) is not None and (token.kind == "name" or token.is_punct(".")):
        cursor += 1
    closing = f.close(cursor) if f.punct(cursor, "(") else -1
    if closing < 0 or any(not t.is_punct(";") for t in f.tokens[closing + 1: end]):
        return None
    return quote(_join(f.tokens[open_brace + 1: closing + 1]), 80)


def _after_params(f: _File, params_end: int) -> int:
    """The index after a parameter list's ')', past a TypeScript return type: where a body or
    an arrow is. A return type written as an object type (``): { a: T } {``) is read as the
    body, which then is no stub: a miss, never a false stub."""
    cursor = params_end + 1
    if not f.punct(cursor, ":"):
        return cursor
    cursor += 1
    while (token := f.tok(cursor)) is not None:
        if token.kind == "punct" and token.text in ("{", "=>", ";", ",", "}", ")", "]"):
            return cursor  # a body, an arrow, or the end of a signature that has none
        if token.kind == "punct" and token.text in "([":
            closing = f.close(cursor)
            if closing < 0:
                return cursor
            cursor = closing
        cursor += 1
    return cursor


def _function_value(f: _File, cursor: int) -> int | None:
    """For a function written as a value at ``cursor`` (``function (…) {…}``, ``(…) => …``,
    ``x => …``, either ``async``), the index of its body's '{' or of its arrow's expression."""
    if f.tok(cursor) is not None and f.tokens[cursor].is_name("async"):
        cursor += 1
    token = f.tok(cursor)
    if token is None:
        return None
    if token.is_name("function"):
        cursor += 1
        if f.punct(cursor, "*"):
            cursor += 1
        if f.tok(cursor) is not None and f.tokens[cursor].kind == "name":
            cursor += 1  # a named function expression
        params_end = f.close(cursor) if f.punct(cursor, "(") else -1
        return _after_params(f, params_end) if params_end > 0 else None
    if token.is_punct("("):
        params_end = f.close(cursor)
    elif token.kind == "name":
        params_end = cursor
    else:
        return None
    if params_end < 0:
        return None
    arrow = _after_params(f, params_end) if token.is_punct("(") else params_end + 1
    return arrow + 1 if f.punct(arrow, "=>") else None


def _function_at(f: _File, index: int) -> tuple[str, int] | None:
    """(name, index of the body's '{' or of an arrow's expression) for a function at index."""
    token = f.tokens[index]
    if token.is_name("function"):
        cursor = index + 1
        if f.punct(cursor, "*"):
            cursor += 1
        name = f.tok(cursor)
        if name is None or name.kind != "name" or not f.punct(cursor + 1, "("):
            return None
        params_end = f.close(cursor + 1)
        return (name.text, _after_params(f, params_end)) if params_end > 0 else None
    if token.text in ("const", "let", "var"):
        name = f.tok(index + 1)
        if name is None or name.kind != "name" or not f.punct(index + 2, "="):
            return None
        body = _function_value(f, index + 3)
        return (name.text, body) if body is not None else None
    return None


# Before an object literal's '{' (as against a block's): what starts an expression.
_EXPRESSION_BEFORE = frozenset({"=", "(", ",", ":", "[", "?", "return", "||", "&&", "default"})
_MEMBER_AFTER = frozenset({"{", "}", ";", ",", "*", "static", "async", "get", "set", "public",
                           "private", "protected", "readonly", "override"})


def _owners(f: _File) -> dict[int, str]:
    """The '{' of each class body and object literal, with the name it goes by: the class's,
    or the name the object is assigned to or keyed by ('?' when it has none)."""
    owners: dict[int, str] = {}
    for index, token in enumerate(f.tokens):
        if not token.is_punct("{"):
            continue
        before = f.tok(index - 1)
        if before is None:
            continue
        cursor = index - 1
        # class Name {  /  class Name extends Base {  /  class Name<T> extends Base<T> {
        while cursor > 0 and not f.tokens[cursor].is_name("class") and index - cursor < 40 and (
            not f.tokens[cursor].is_punct(";") and not f.tokens[cursor].is_punct("{")
            and not f.tokens[cursor].is_punct("}") and not f.tokens[cursor].is_punct("=>")
        ):
            cursor -= 1
        if f.tokens[cursor].is_name("class"):
            named = f.tok(cursor + 1)
            owners[index] = named.text if named is not None and named.kind == "name" and (
                named.text != "extends") else "?"
            continue
        if (before.kind == "punct" or before.kind == "name") and (
            before.text in _EXPRESSION_BEFORE
        ):
            holder = f.tok(index - 2)
            if before.text in ("=", ":") and holder is not None and holder.kind in ("name", "str"):
                owners[index] = _unquote(holder)
            else:
                owners[index] = "default" if before.text == "default" else "?"
    return owners


def _members(f: _File) -> list[tuple[str, int, int]]:
    """(qualified name, index of its name, index of its body or arrow expression) for each
    method and function-valued property of a class body or object literal."""
    owners = _owners(f)
    found: list[tuple[str, int, int]] = []
    stack: list[int] = []  # the open '{' around each token
    for index, token in enumerate(f.tokens):
        if token.is_punct("{"):
            stack.append(index)
            continue
        if token.is_punct("}"):
            if stack:
                stack.pop()
            continue
        if token.kind not in ("name", "str") or not stack or stack[-1] not in owners:
            continue
        before = f.tok(index - 1)
        if before is None or before.text not in _MEMBER_AFTER or (
            before.kind == "str" or before.kind == "template"
        ):
            continue
        name = _unquote(token)
        body: int | None = None
        if f.punct(index + 1, "(") and (params_end := f.close(index + 1)) > 0:
            start = _after_params(f, params_end)
            body = start if f.punct(start, "{") else None  # a method; else an overload
        elif f.punct(index + 1, ":") or (f.punct(index + 1, "=") and not f.punct(index + 2, "=")):
            body = _function_value(f, index + 2)
        if body is not None:
            found.append((f"{owners[stack[-1]]}.{name}", index, body))
    return found


def _body_stub(f: _File, body: int) -> str | None:
    if f.punct(body, "{"):
        return _stub(f, body)
    # an arrow's expression body: a stub when it is a lone literal
    following = f.tok(body + 1)
    expression = [f.tokens[body]] if f.tok(body) is not None and (
        following is None or following.is_punct(";")
        or (following.kind == "punct" and following.text in ",)}")
    ) else []
    return _join(expression) if expression and _is_literal(expression) else None


def analyse_source(path: str, source: str) -> FileAnalysis:
    try:
        f = _File(path, source)
    except (TokenizeError, RecursionError) as exc:
        return FileAnalysis(path, problem=f"{exc}: not analysed")
    functions: list[FunctionBody] = []
    for index, token in enumerate(f.tokens):
        if token.kind != "name" or token.text not in ("function", "const", "let", "var"):
            continue
        found = _function_at(f, index)
        if found is not None:
            name, body = found
            functions.append(FunctionBody(name, f.line(index), _body_stub(f, body)))
    for name, index, body in _members(f):
        functions.append(FunctionBody(name, f.line(index), _body_stub(f, body)))
    return FileAnalysis(path, functions=tuple(functions))
