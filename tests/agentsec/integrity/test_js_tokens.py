"""The tokenizer on what trips naive scanners: test-like text in strings, templates, comments
and regexes, and the regex/division ambiguity."""

from __future__ import annotations

import pytest

from agentsec.integrity.js_tests import analyse_source, analyse_test
from agentsec.integrity.js_tokens import LineIndex, TokenizeError, match_brackets, tokenize


def kinds(source: str) -> list[tuple[str, str]]:
    return [(t.kind, t.text) for t in tokenize(source)]


def test_strings_hide_what_they_hold():
    assert kinds("x = 'it(\\'a\\')' + \"test.skip(\";") == [
        ("name", "x"), ("punct", "="), ("str", "'it(\\'a\\')'"), ("punct", "+"),
        ("str", '"test.skip("'), ("punct", ";"),
    ]


def test_comments_are_dropped():
    assert kinds("a // it.only('x')\n/* describe.skip(\n */ b") == [("name", "a"), ("name", "b")]


def test_template_literal_with_nested_expressions_is_one_token():
    source = "t = `a ${ `inner ${ {x: '}'}.x } ` } it.skip(` ; done"
    tokens = kinds(source)
    assert tokens[2][0] == "template"
    assert tokens[2][1] == "`a ${ `inner ${ {x: '}'}.x } ` } it.skip(`"
    assert tokens[3:] == [("punct", ";"), ("name", "done")]


def test_regex_literal_with_a_slash_in_a_class():
    assert kinds("r = /[/]it\\.only\\(/g; n")[2] == ("regex", "/[/]it\\.only\\(/g")


@pytest.mark.parametrize(("source", "kind"), [
    ("a / b / c", "punct"),        # division after a name
    ("f(x) / 2 / 3", "punct"),     # after ')'
    ("return /ab+c/.test(s)", "regex"),
    ("x = /ab+c/", "regex"),
    ("[1, /x/]", "regex"),
])
def test_regex_or_division(source: str, kind: str):
    slash = next(t for t in tokenize(source) if t.text.startswith("/"))
    assert slash.kind == kind


def test_unterminated_string_stops_at_the_line_end():
    assert kinds("a = 'oops\nb")[-1] == ("name", "b")


def test_hashbang_is_skipped():
    assert kinds("#!/usr/bin/env node\nit") == [("name", "it")]


def test_brackets_match_and_unbalanced_closers_do_not_crash():
    tokens = tokenize("f(a[1], {b: 2})) ]")
    match = match_brackets(tokens)
    assert tokens[match[1]].text == ")" and match[match[1]] == 1
    assert match[-1] == -1


def test_line_index():
    lines = LineIndex("a\nb\n\nc")
    assert [lines.line(o) for o in (0, 2, 4, 5)] == [1, 2, 3, 4]


def test_template_nesting_past_the_limit_is_a_note_not_a_crash():
    source = "x = " + "`${" * 100 + "1" + "}`" * 100
    with pytest.raises(TokenizeError):
        tokenize(source)
    analysis = analyse_test("t.test.js", source)
    assert analysis.problem and "not analysed" in analysis.problem


def test_tests_and_expectations_found_through_the_noise():
    source = """
    // it('commented out', () => { expect(1).toBe(1) })
    const s = "test('in a string', () => {})";
    describe(`suite ${name}`, () => {
      it("one", async () => {
        await expect(load()).resolves.toEqual({ a: 1 });
        expect(x).not.toBeNull();
        expect(/it\\(/.test(s)).toBe(true);
      }, 5000);
      it.each([[1], [2]])("each %i", (n) => { assert.strictEqual(f(n), 1); });
    });
    """
    tests = analyse_test("x.test.js", source).tests
    assert [t.name for t in tests] == ["suite ${name} > one", "suite ${name} > each %i"]
    one, each = tests
    assert [a.strength for a in one.assertions] == [2, 1, 2]
    assert one.assertions[0].text == "expect(load()).resolves.toEqual({a:1})"
    assert len(each.assertions) == 1 and each.assertions[0].subject == "f(n).strictEqual"
    assert each.assertions[0].expected == "1"
    assert one.body_key != each.body_key  # the timeout after the function is not the body


def test_source_methods_of_classes_and_objects_are_named_and_graded():
    source = """
    export class Calculator extends Base {
      static VERSION = 1;
      add(a, b) { return 3; }
      async load(): Promise<number> { return this.cache.get(); }
      get total() { return this.x; }
      parse(text: string): number {
        throw new Error('todo');
      }
      mul = (a, b) => 6;
      overload(a: string): void;
    }
    export const math = {
      double: (x) => 8,
      half: function (x) { return x / 2; },
    };
    function run(x) {
      log(x)
      {
        return 0;
      }
    }
    let shape: { area(): number } = make();
    """
    functions = {f.name: f.stub for f in analyse_source("src/c.ts", source).functions}
    assert functions == {
        "Calculator.add": "return 3", "Calculator.load": None, "Calculator.total": None,
        "Calculator.parse": "throw new Error('todo')", "Calculator.mul": "6",
        "math.double": "8", "math.half": None, "run": None,
    }  # no overload, no field, no call before a block, no member of a type
