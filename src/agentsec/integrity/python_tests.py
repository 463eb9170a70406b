"""Python test files, conftests and source files, read with ``ast`` (never imported or run).

What is found, per file:
- tests: module-level ``test*`` functions and ``test*`` methods of ``Test*`` classes or
  ``*TestCase`` subclasses, each with its assertions (``assert``, ``self.assert*``, any
  ``*.assert*()`` or ``assert_*()`` call, ``pytest.raises``/``warns``), each graded by
  strength, its skips (markers and decorators, from its class too; ``pytest.skip()``,
  ``self.skipTest()`` and the like in its body), and how many cases ``parametrize`` gives it
  when the values are a literal list;
- module skips (``pytestmark`` skip/xfail, a module-level ``pytest.skip``: each test of the
  file carries them), patches of code
  (``monkeypatch.setattr``, ``mock.patch``, ``patch.object``, ``mocker.patch``, ``setattr``),
  early exits, and in a conftest the collection hooks and ``collect_ignore``;
- in source files: each function, and whether its body is a stub.

Not seen: assertions in helper functions a test calls (they count for the helper, which is not
a test), tests generated at run time (``pytest_generate_tests``, ``load_tests``), and markers
applied through ``pytest.param(..., marks=...)``.
"""

from __future__ import annotations

import ast
import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from agentsec.integrity import python_blocks
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

MAX_NESTING_NOTE = "nested too deeply to parse"
_SKIP_DECORATORS = ("mark.skip", "mark.skipif", "mark.xfail", "skip", "skipIf", "skipUnless",
                    "expectedFailure")
_SKIP_CALLS = ("pytest.skip", "pytest.xfail", "pytest.importorskip", "skipTest", "skip.Exception")
_SKIP_RAISES = ("SkipTest", "unittest.SkipTest", "pytest.skip.Exception")
_EXIT_CALLS = ("sys.exit", "exit", "quit", "os._exit", "_exit")
_HOOKS = frozenset({
    "pytest_collection_modifyitems", "pytest_ignore_collect", "pytest_collect_file",
    "pytest_pycollect_makeitem", "pytest_runtest_setup", "pytest_runtest_call",
    "pytest_runtest_makereport", "pytest_runtest_protocol", "pytest_collection",
})
_COLLECT_IGNORE = frozenset({"collect_ignore", "collect_ignore_glob"})
# unittest's methods that only check truthiness or existence.
_WEAK_METHODS = frozenset({"assertTrue", "assert_", "failUnless", "assertFalse", "failIf",
                           "assertIsNotNone", "assert_called", "assertNotEqual"})
_EQUAL_METHODS = frozenset({"assertEqual", "assertEquals", "assertDictEqual", "assertListEqual",
                            "assertTupleEqual", "assertSetEqual", "assertSequenceEqual",
                            "assertMultiLineEqual", "assertAlmostEqual", "assertIs"})
_RAISES = ("pytest.raises", "pytest.warns", "assertRaises", "assertRaisesRegex", "assertWarns")
_BROAD_EXCEPTIONS = frozenset({"Exception", "BaseException"})
_PATCH_OBJECT = ("patch.object", "patch.multiple")
_MOCK_RECEIVERS = frozenset({"", "mock", "mocker", "unittest.mock"})


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a name or an attribute chain; '' for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


@lru_cache(maxsize=4096)
def _ends(name: str, suffixes: tuple[str, ...]) -> bool:
    """Whether a dotted name is one of ``suffixes`` or ends with ``.`` and one. Pure, and asked
    of the same few names (``self.assertEqual``, ``pytest.raises``) over and over: cached."""
    return any(name == s or name.endswith("." + s) for s in suffixes)


class _Source:
    """Source text by node position: the code as written, whitespace collapsed. Reading the
    segment is ten times cheaper than ``ast.unparse``, and both sides of a change are read the
    same way, so they compare alike. Column offsets are UTF-8 byte offsets."""

    def __init__(self, text: str, lines: list[str] | None = None,
                 line_map: Callable[[int], int] | None = None) -> None:
        self.lines = text.split("\n") if lines is None else lines
        # Where a line of the parsed text is in this side's file: the identity, but for code
        # parsed once for both sides of a change (see ``analyse_pair``).
        self._map = line_map

    def line(self, lineno: int) -> int:
        return lineno if self._map is None else self._map(lineno)

    def segment(self, node: ast.AST) -> str:
        first, last = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        start, end = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        if first is None or last is None or start is None or end is None:
            return _unparse(node)
        if first == last and 0 < first <= len(self.lines):  # most expressions: one line
            line = self.lines[first - 1]
            if line.isascii():
                return " ".join(line[start:end].split())
        lines = self.lines[first - 1: last]
        if not lines:
            return _unparse(node)
        if not all(line.isascii() for line in lines):
            raw = [line.encode("utf-8", "surrogatepass") for line in lines]
            raw[-1] = raw[-1][:end]
            raw[0] = raw[0][start:]
            lines = [part.decode("utf-8", "replace") for part in raw]
        else:
            lines[-1] = lines[-1][:end]
            lines[0] = lines[0][start:]
        return " ".join(" ".join(lines).split())


def _unparse(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except (ValueError, RecursionError):
        return "<unprintable>"


_READS = (ast.Name, ast.Call, ast.Attribute, ast.Subscript, ast.Starred, ast.Lambda,
          ast.NamedExpr, ast.Await, ast.comprehension)
_FIELDS: dict[type, tuple[str, ...]] = {}


def _children(node: ast.AST) -> list[ast.AST]:
    """The child nodes of ``node``, as ``ast.iter_child_nodes`` gives them but for the
    load/store context markers, which no check reads: twice as fast, and the walks of a change
    are most of what is left once it is parsed."""
    kind = type(node)
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(f for f in kind._fields if f != "ctx")
    found: list[ast.AST] = []
    for name in names:
        value = getattr(node, name, None)
        if isinstance(value, list):
            found += [item for item in value if isinstance(item, ast.AST)]
        elif isinstance(value, ast.AST):
            found.append(value)
    return found


# Leaves no check looks at: the walk of a change does not visit them.
_LEAVES = (ast.Constant, ast.Name, ast.operator, ast.cmpop, ast.unaryop, ast.boolop)


def _inner_children(node: ast.AST) -> list[ast.AST]:
    return [child for child in _children(node) if not isinstance(child, _LEAVES)]


def _is_constant(node: ast.AST) -> bool:
    """True when the expression reads nothing: no name, call, attribute or subscript."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, _READS):
            return False
        stack += _children(item)
    return True


def _literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is not None  # `x == None` is an existence check, not an expected value
    if not _is_constant(node):
        return False
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _expected(src: _Source, a: ast.AST, b: ast.AST) -> tuple[str | None, str | None]:
    """(subject, expected) when exactly one side of an equality is a literal."""
    if _literal(b) and not _literal(a):
        return quote(src.segment(a), 120), quote(src.segment(b), 120)
    if _literal(a) and not _literal(b):
        return quote(src.segment(b), 120), quote(src.segment(a), 120)
    return None, None


def _expr_strength(src: _Source, node: ast.AST) -> int:
    if _is_constant(node):
        return TRIVIAL
    if isinstance(node, ast.BoolOp):
        parts = [_expr_strength(src, v) for v in node.values]
        return min(parts) if isinstance(node.op, ast.Or) else max(parts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return min(_expr_strength(src, node.operand), WEAK)
    if isinstance(node, ast.Compare):
        if len(node.ops) == 1 and src.segment(node.left) == src.segment(node.comparators[0]):
            return TRIVIAL
        right = node.comparators[-1]
        if (isinstance(node.ops[-1], (ast.IsNot, ast.NotEq)) and isinstance(right, ast.Constant)
                and right.value is None):
            return WEAK
        return STRONG
    if isinstance(node, ast.Call) and dotted(node.func) == "isinstance":
        return STRONG
    return WEAK


def _assert_statement(src: _Source, node: ast.Assert) -> Assertion:
    subject = expected = None
    test = node.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        subject, expected = _expected(src, test.left, test.comparators[0])
    return Assertion(node.lineno, quote("assert " + src.segment(test)),
                     _expr_strength(src, test), subject, expected)


def _raises_strength(call: ast.Call) -> int:
    if not call.args:
        return WEAK
    first = call.args[0]
    names = [dotted(e) for e in first.elts] if isinstance(first, ast.Tuple) else [dotted(first)]
    return WEAK if any(n in _BROAD_EXCEPTIONS for n in names) else STRONG


def _method_assertion(src: _Source, call: ast.Call, name: str) -> Assertion:
    method = name.rsplit(".", 1)[-1]
    text = quote(src.segment(call))
    args = call.args
    subject = expected = None
    if _ends(name, _RAISES):
        strength = _raises_strength(call)
    elif method in ("assertTrue", "assert_", "failUnless") and args:
        strength = _expr_strength(src, args[0])
    elif method in _WEAK_METHODS:
        strength = TRIVIAL if args and _is_constant(args[0]) else WEAK
    elif len(args) >= 2 and (src.segment(args[0]) == src.segment(args[1])
                             or (_is_constant(args[0]) and _is_constant(args[1]))):
        strength = TRIVIAL
    else:
        strength = STRONG
    if method in _EQUAL_METHODS and len(args) >= 2:
        subject, expected = _expected(src, args[0], args[1])
    return Assertion(call.lineno, text, strength, subject, expected)


def _call_assertion(src: _Source, call: ast.Call, name: str) -> Assertion | None:
    """An assertion made by a call (``name``: the callee, dotted)."""
    if not name:
        return None
    last = name.rsplit(".", 1)[-1]
    if _ends(name, _RAISES) or (isinstance(call.func, ast.Attribute) and last.startswith("assert")):
        return _method_assertion(src, call, name)
    if isinstance(call.func, ast.Name) and last.startswith("assert_"):
        return Assertion(call.lineno, quote(src.segment(call)), STRONG)
    return None


def _is_skip_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return _ends(dotted(target), _SKIP_DECORATORS)


def _skip_marker(node: ast.AST, text: str, src: _Source) -> Marker:
    return Marker(src.line(getattr(node, "lineno", 0)), "skip:" + text, quote(text))


def _body_skip(node: ast.AST, src: _Source, name: str | None = None) -> Marker | None:
    """A skip written in a test's body: pytest.skip(), self.skipTest(), raise SkipTest.
    ``name``: a call's callee, dotted, when the caller has it already."""
    if isinstance(node, ast.Call) and _ends(
        dotted(node.func) if name is None else name, _SKIP_CALLS
    ):
        return _skip_marker(node, _unparse(node), src)
    if isinstance(node, ast.Raise) and node.exc is not None:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if _ends(dotted(exc), _SKIP_RAISES):
            return _skip_marker(node, _unparse(node), src)
    return None


def _parametrize_cases(decorators: list[ast.expr]) -> int:
    cases = 1
    for dec in decorators:
        if (isinstance(dec, ast.Call) and dotted(dec.func).endswith("mark.parametrize")
                and len(dec.args) >= 2 and isinstance(dec.args[1], (ast.List, ast.Tuple))):
            cases *= max(len(dec.args[1].elts), 1)
    return cases


def _body_key(src: _Source, func: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """Equal for two functions whose bodies are the same code, whatever their names."""
    first, last = func.body[0].lineno, func.end_lineno or func.body[-1].lineno
    body = " ".join(" ".join(src.lines[first - 1: last]).split())
    return hashlib.blake2b(body.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


class _Test:
    """A test being read: what the walk finds in its body."""

    def __init__(self, func: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str,
                 inherited: tuple[Marker, ...], src: _Source) -> None:
        self.func, self.qualname, self.src = func, qualname, src
        self.assertions: list[Assertion] = []
        self.skips: list[Marker] = [*inherited]
        self.skips += [_skip_marker(d, "@" + _unparse(d), src) for d in func.decorator_list
                       if _is_skip_decorator(d)]

    def case(self, path: str, memo: dict[int, tuple[str, int]]) -> TestCase:
        """The test as the checks compare it. ``memo``: the body key and case count of each
        function already read (a shared block's, read once for both sides)."""
        src, func = self.src, self.func
        known = memo.get(id(func))
        if known is None:
            known = memo[id(func)] = (_body_key(src, func),
                                      _parametrize_cases(func.decorator_list))
        return TestCase(path=path, name=self.qualname, line=src.line(func.lineno),
                        assertions=tuple(sorted(self.assertions, key=lambda a: a.line)),
                        skips=tuple(self.skips), body_key=known[0], cases=known[1])


def _is_test_class(node: ast.ClassDef) -> bool:
    return node.name.startswith("Test") or any(
        dotted(base).endswith("TestCase") for base in node.bases
    )


def _class_skips(node: ast.ClassDef, src: _Source) -> list[Marker]:
    found = [_skip_marker(d, "@" + _unparse(d), src) for d in node.decorator_list
             if _is_skip_decorator(d)]
    for statement in node.body:
        if isinstance(statement, ast.Assign) and any(
            dotted(t) == "pytestmark" for t in statement.targets
        ):
            found += _mark_skips(statement.value, src)
    return found


def _mark_skips(value: ast.expr, src: _Source) -> list[Marker]:
    items = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
    return [_skip_marker(i, "pytestmark = " + _unparse(i), src) for i in items
            if _is_skip_decorator(i)]


def _test_functions(body: list[ast.stmt], prefix: str = ""):
    """(qualified name, function) of each test, as ``_tests_in`` finds them, and nothing more."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(
            "test"
        ):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef) and _is_test_class(node):
            yield from _test_functions(node.body, f"{prefix}{node.name}.")


def _tests_in(body: list[ast.stmt], src: _Source, prefix: str = "",
              inherited: tuple[Marker, ...] = ()) -> list[_Test]:
    found: list[_Test] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(
            "test"
        ):
            found.append(_Test(node, prefix + node.name, inherited, src))
        elif isinstance(node, ast.ClassDef) and _is_test_class(node):
            skips = (*inherited, *_class_skips(node, src))
            found += _tests_in(node.body, src, f"{prefix}{node.name}.", skips)
    return found


_NO_SKIP_HERE = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)


def _module_skips(body: list[ast.stmt], src: _Source) -> list[Marker]:
    found: list[Marker] = []
    for node in body:
        if isinstance(node, _NO_SKIP_HERE):
            continue
        if isinstance(node, ast.Assign) and any(dotted(t) == "pytestmark" for t in node.targets):
            found += _mark_skips(node.value, src)
        else:
            found += [m for n in ast.walk(node) if (m := _body_skip(n, src)) is not None]
    return found


def _import_roots(node: ast.Import | ast.ImportFrom, found: dict[str, str]) -> None:
    """Each name an import binds, with the top-level module it comes from ('.': relative)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            root = alias.name.split(".")[0]
            found[alias.asname or root] = root
    else:
        root = "." if node.level else (node.module or "").split(".")[0]
        for alias in node.names:
            found[alias.asname or alias.name] = root


def _patch_module(target: ast.expr, imports: dict[str, str]) -> str | None:
    """The module a patch target lives in: the first part of a dotted string, or where the
    object's root name was imported from; None when it is neither."""
    if isinstance(target, ast.Constant) and isinstance(target.value, str):
        return target.value.split(".")[0] if "." in target.value else None
    root = dotted(target).split(".")[0]
    return imports.get(root) if root else None


def _patch(call: ast.Call, name: str, imports: dict[str, str]) -> Marker | None:
    if not name or not call.args:
        return None
    receiver, _, last = name.rpartition(".")
    # monkeypatch.setattr / setattr(obj, name, value) / patch.object(obj, name) name the object
    # itself; patch("a.b.c") names it by a string.
    is_setattr = last in ("setattr", "delattr") and (
        bool(receiver) or len(call.args) >= 3 or last == "delattr"
    )
    is_object = _ends(name, _PATCH_OBJECT) and (
        receiver.removesuffix("patch").rstrip(".") in _MOCK_RECEIVERS
    )
    if is_setattr or is_object:
        module = _patch_module(call.args[0], imports)
    elif last == "patch" and receiver in _MOCK_RECEIVERS:
        first = call.args[0]
        module = _patch_module(first, imports) if isinstance(first, ast.Constant) else None
    else:
        return None
    if module is None:
        return None
    text = _unparse(call)
    key = "patch:" + name + "(" + ", ".join(_unparse(a) for a in call.args[:2]) + ")"
    return Marker(call.lineno, key, quote(text), module)


def _exit_code_passes(code: ast.expr | None) -> bool:
    """Whether an exit with this code reports success (or might): no code, 0, None, False,
    or anything not a constant."""
    if code is None:
        return True
    if isinstance(code, ast.Constant):
        return code.value in (0, None, False) and not isinstance(code.value, str)
    return True


def _exit(node: ast.AST, name: str = "") -> Marker | None:
    """An exit that reports success. ``name``: a call's callee, dotted."""
    code: ast.expr | None
    if isinstance(node, ast.Call):
        if name in _EXIT_CALLS:
            code = node.args[0] if node.args else None
        elif _ends(name, ("pytest.exit",)):
            given = [k.value for k in node.keywords if k.arg == "returncode"]
            if len(node.args) >= 2:
                given.append(node.args[1])
            if not given:
                return None  # pytest.exit() alone ends the session "interrupted": a failure
            code = given[0]
        else:
            return None
        if not _exit_code_passes(code):
            return None
    elif isinstance(node, ast.Raise) and node.exc is not None:
        exc = node.exc
        if dotted(exc.func if isinstance(exc, ast.Call) else exc) != "SystemExit":
            return None
        code = exc.args[0] if isinstance(exc, ast.Call) and exc.args else None
        if not _exit_code_passes(code):
            return None
    elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not any(isinstance(t, ast.Attribute) and t.attr == "exitstatus" for t in targets):
            return None
    else:
        return None
    text = _unparse(node)
    return Marker(getattr(node, "lineno", 0), "exit:" + text, quote(text))


def _hooks(body: list[ast.stmt], src: _Source) -> list[Marker]:
    found: list[Marker] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in _HOOKS:
            # A changed hook is a new hook: the key holds its body.
            dump = ast.dump(ast.Module(body=node.body, type_ignores=[]))
            key = f"hook:{node.name}:{hashlib.blake2b(dump.encode(), digest_size=12).hexdigest()}"
            found.append(Marker(src.line(node.lineno), key, quote(f"def {node.name}(...)")))
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(dotted(t) in _COLLECT_IGNORE for t in targets):
                text = _unparse(node)
                found.append(Marker(src.line(node.lineno), "hook:" + text, quote(text)))
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and dotted(node.value.func).split(".")[0] in _COLLECT_IGNORE):
            text = _unparse(node)
            found.append(Marker(src.line(node.lineno), "hook:" + text, quote(text)))
    return found


def _stub(body: list[ast.stmt]) -> str | None:
    """What a function's body is when it is a stub: pass, ..., return a constant, or raise
    NotImplementedError (a docstring before it changes nothing)."""
    statements = body
    if (statements and isinstance(statements[0], ast.Expr)
            and isinstance(statements[0].value, ast.Constant)
            and isinstance(statements[0].value.value, str)):
        statements = statements[1:]
    if not statements:
        return "a docstring alone"
    if len(statements) != 1:
        return None
    only = statements[0]
    if isinstance(only, ast.Pass):
        return "pass"
    if isinstance(only, ast.Expr) and isinstance(only.value, ast.Constant):
        return _unparse(only)
    if isinstance(only, ast.Return) and (only.value is None or _is_constant(only.value)):
        return _unparse(only)
    if isinstance(only, ast.Raise) and only.exc is not None:
        exc = only.exc.func if isinstance(only.exc, ast.Call) else only.exc
        if dotted(exc) == "NotImplementedError":
            return _unparse(only)
    return None


def _functions(body: list[ast.stmt], prefix: str = "") -> list[FunctionBody]:
    found: list[FunctionBody] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stub = _stub(node.body)
            found.append(FunctionBody(prefix + node.name, node.lineno,
                                      quote(stub, 80) if stub else None))
        elif isinstance(node, ast.ClassDef):
            found += _functions(node.body, f"{prefix}{node.name}.")
    return found


def parse(path: str, text: str) -> ast.Module | str:
    """The module, or why it could not be parsed (a note, never an exception)."""
    try:
        return ast.parse(text, filename=path)
    except SyntaxError as exc:
        return f"Python syntax error at line {exc.lineno or '?'}: not parsed"
    except (ValueError, MemoryError):
        return "not parseable as Python: not parsed"
    except RecursionError:
        return f"Python {MAX_NESTING_NOTE}: not parsed"


@dataclass(frozen=True)
class Part:
    """Top-level statements of one side of a file, as parsed, and how to read them: ``src``
    maps their lines to the side's own. A ``shallow`` part is code both sides share: it is read
    for its tests, imports, skips and hooks, not walked for assertions, patches or exits, which
    could only be found the same on both sides and cancel out."""

    body: list[ast.stmt]
    src: _Source
    shallow: bool = False
    # A shallow part whose tests are counted, not listed: this many (see ``_by_blocks``).
    counted: int | None = None


def _walk(part: Part, tests: list[_Test], imports: dict[str, str],
          calls: list[tuple[ast.Call, str]], exits: list[Marker]) -> None:
    """One pass over a part: each test's assertions and body skips, and every import, patch
    candidate and exit, wherever they are."""
    src = part.src
    owners = {id(t.func): t for t in tests}
    stack: list[tuple[ast.AST, _Test | None]] = [(statement, None) for statement in part.body]
    while stack:
        node, owner = stack.pop()
        test = owners.get(id(node))
        if test is not None:
            # The decorators and arguments belong to the module; only the body to the test.
            stack += [(child, owner) for child in (*test.func.decorator_list, test.func.args)]
            stack += [(child, test) for child in test.func.body]
            continue
        kind = type(node)
        name = ""
        if kind is ast.Call:
            name = dotted(node.func)  # type: ignore[attr-defined]
            calls.append((node, name))  # type: ignore[arg-type]
            if owner is not None:
                found = _call_assertion(src, node, name)  # type: ignore[arg-type]
                if found is not None:
                    owner.assertions.append(found)
        elif kind is ast.Assert:
            if owner is not None:
                owner.assertions.append(_assert_statement(src, node))  # type: ignore[arg-type]
        elif kind is ast.Import or kind is ast.ImportFrom:
            _import_roots(node, imports)  # type: ignore[arg-type]
        if owner is not None and (kind is ast.Call or kind is ast.Raise):
            skip = _body_skip(node, src, name if kind is ast.Call else None)
            if skip is not None:
                owner.skips.append(skip)
        if kind in _EXIT_NODES:
            found_exit = _exit(node, name)
            if found_exit is not None:
                exits.append(found_exit)
        stack += [(child, owner) for child in _inner_children(node)]


_EXIT_NODES = frozenset({ast.Call, ast.Raise, ast.Assign, ast.AugAssign, ast.AnnAssign})


def analyse_parts(path: str, parts: list[Part], conftest: bool = False,
                  memo: dict[int, tuple[str, int]] | None = None) -> FileAnalysis:
    """A test file or a conftest from its parts: tests, skips, patches, exits, hooks."""
    memo = {} if memo is None else memo
    try:
        # A module-level skip applies to every test of the file, as a class's does to its
        # methods: each test carries it, and the checks report each marker once.
        inherited = tuple(m for part in parts for m in _module_skips(part.body, part.src))
        tests = [[] if conftest or part.counted is not None
                 else _tests_in(part.body, part.src, inherited=inherited) for part in parts]
        imports: dict[str, str] = {}
        for part in parts:
            if part.shallow:
                for statement in part.body:
                    if isinstance(statement, (ast.Import, ast.ImportFrom)):
                        _import_roots(statement, imports)
        calls: list[tuple[ast.Call, str]] = []  # each with its callee, dotted
        exits: list[Marker] = []
        for part, found in zip(parts, tests):
            if not part.shallow:
                _walk(part, found, imports, calls, exits)
        patches = [p for p in (_patch(call, name, imports) for call, name in calls)
                   if p is not None]
        cases = sorted((t.case(path, memo) for found in tests for t in found),
                       key=lambda c: c.line)
        return FileAnalysis(
            path,
            tests=tuple(cases),
            patches=tuple(patches),
            exits=tuple(sorted(exits, key=lambda m: m.line)),
            hooks=tuple(m for part in parts for m in _hooks(part.body, part.src))
            if conftest else (),
            unlisted_cases=sum(part.counted or 0 for part in parts),
        )
    except RecursionError:
        return FileAnalysis(path, problem=f"Python {MAX_NESTING_NOTE}: not analysed")


def _statement_texts(tree: ast.Module, src: _Source) -> list[str]:
    texts = []
    for node in tree.body:
        decorators = getattr(node, "decorator_list", None) or [node]
        first, last = decorators[0].lineno, node.end_lineno or node.lineno
        texts.append(" ".join(" ".join(src.lines[first - 1: last]).split()))
    return texts


def _unchanged(a: list[str], b: list[str]) -> tuple[frozenset[int], frozenset[int]]:
    """The top-level statements each side has in common with the other, as the same code."""
    left: dict[str, list[int]] = {}
    for index, text in enumerate(a):
        left.setdefault(text, []).append(index)
    same_a: set[int] = set()
    same_b: set[int] = set()
    for index, text in enumerate(b):
        if left.get(text):
            same_a.add(left[text].pop(0))
            same_b.add(index)
    return frozenset(same_a), frozenset(same_b)


def _split(tree: ast.Module, src: _Source, shallow: frozenset[int]) -> list[Part]:
    same = [s for i, s in enumerate(tree.body) if i in shallow]
    other = [s for i, s in enumerate(tree.body) if i not in shallow]
    return [Part(same, src, shallow=True), Part(other, src)]


def analyse_pair_whole(path: str, before: str | None, after: str | None,
                 conftest: bool) -> tuple[FileAnalysis | None, FileAnalysis | None]:
    """Each side parsed whole; of a file on both sides, the top-level statements they share
    (by their code, whitespace aside) are read shallow."""
    trees = [None if text is None else parse(path, text) for text in (before, after)]
    sources = [None if text is None else _Source(text) for text in (before, after)]
    shallow: list[frozenset[int]] = [frozenset(), frozenset()]
    old, new = trees
    if isinstance(old, ast.Module) and isinstance(new, ast.Module):
        assert sources[0] is not None and sources[1] is not None
        shallow = list(_unchanged(_statement_texts(old, sources[0]),
                                  _statement_texts(new, sources[1])))
    results: list[FileAnalysis | None] = []
    for tree, src, same in zip(trees, sources, shallow):
        if tree is None or src is None:
            results.append(None)
        elif isinstance(tree, str):
            results.append(FileAnalysis(path, problem=tree))
        else:
            results.append(analyse_parts(path, _split(tree, src, same), conftest))
    return results[0], results[1]


def analyse_pair(path: str, before: str | None, after: str | None,
                 conftest: bool = False) -> tuple[FileAnalysis | None, FileAnalysis | None]:
    """One test file (or conftest) before and after a change; None for a side it is not on.

    Of a file on both sides, the top-level blocks whose text is the same on both are parsed
    once, for both (``python_blocks``); the rest of each side on its own. When the blocks cannot
    be told apart reliably, each side is parsed whole: the analysis is the same either way,
    only slower."""
    if before is not None and after is not None:
        shared = python_blocks.plan(before, after)
        if shared is not None:
            parsed = _parse_plan(path, shared)
            if parsed is not None:
                same_parts, own = parsed
                return _by_blocks(path, same_parts, own, conftest)
    return analyse_pair_whole(path, before, after, conftest)


def _by_blocks(path: str, same_parts: tuple[list[ast.stmt], _Source, _Source],
               own: tuple[Part, Part], conftest: bool) -> tuple[FileAnalysis, FileAnalysis]:
    """Both sides from the blocks they share (parsed once) and each side's own.

    The tests of the shared blocks are the same on both sides: each pairs with its twin and
    the comparison finds nothing, so they are counted, not listed, unless something could make
    them differ: a module-level skip that one side's own blocks have and the other's do not
    (every test inherits it), or a test of the same name in a side's own blocks (pairing by
    name would have a choice to make). Then they are listed on both sides, as a whole parse
    lists them."""
    same, src_before, src_after = same_parts
    memo: dict[int, tuple[str, int]] = {}  # the shared tests, read once for both sides
    counted: int | None = None
    try:
        keys = [Counter(m.key for m in _module_skips(part.body, part.src)) for part in own]
        if not conftest and keys[0] == keys[1]:
            shared_tests = list(_test_functions(same))
            names = {name for name, _ in shared_tests}
            if not any(name in names for part in own for name, _ in _test_functions(part.body)):
                counted = sum(_parametrize_cases(func.decorator_list) for _, func in shared_tests)
    except RecursionError:
        counted = None  # analyse_parts says so, for each side
    return (
        analyse_parts(path, [Part(same, src_before, True, counted), own[0]], conftest, memo),
        analyse_parts(path, [Part(same, src_after, True, counted), own[1]], conftest, memo),
    )


def _parse_plan(path: str, shared: python_blocks.Plan
                ) -> tuple[tuple[list[ast.stmt], _Source, _Source], tuple[Part, Part]] | None:
    """The plan's two texts parsed, each checked to hold exactly its blocks; None when one
    does not parse or does not fit (then the caller parses each side whole)."""
    trees = []
    for lines, text, blocks in ((shared.before_lines, None, shared.before_blocks),
                                (shared.after_lines, shared.after_text, shared.after_blocks)):
        if not blocks:
            trees.append(ast.Module(body=[], type_ignores=[]))
            continue
        tree = parse(path, "\n".join(lines) if text is None else text)
        if isinstance(tree, str) or not python_blocks.fits(tree.body, blocks):
            return None
        trees.append(tree)
    before, after = trees
    same = [s for s in before.body if shared.is_shared(_first_line(s))]
    own = [s for s in before.body if not shared.is_shared(_first_line(s))]
    src_before = _Source("", shared.before_lines)
    src_after = _Source("", shared.after_lines)
    # The shared blocks sit at their lines in the tree before; the tree after has them where
    # it has them.
    src_same_after = _Source("", shared.before_lines, shared.after_line)
    return (same, src_before, src_same_after), (Part(own, src_before),
                                               Part(after.body, src_after))


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", None)
    return decorators[0].lineno if decorators else node.lineno


def analyse_test(path: str, text: str, conftest: bool = False) -> FileAnalysis:
    """A test file or a conftest alone: tests, skips, patches, exits, hooks."""
    analysis, _ = analyse_pair(path, text, None, conftest)
    assert analysis is not None
    return analysis


def analyse_source(path: str, text: str) -> FileAnalysis:
    """A source file: its functions, each with its stub (or None)."""
    tree = parse(path, text)
    if isinstance(tree, str):
        return FileAnalysis(path, problem=tree)
    try:
        return FileAnalysis(path, functions=tuple(_functions(tree.body)))
    except RecursionError:
        return FileAnalysis(path, problem=f"Python {MAX_NESTING_NOTE}: not analysed")
