"""The part of JSON Schema that ``data/report.schema.json`` uses, checked strictly.

The schema describes both kinds of report in one file: what every report has, then, by
``if``/``then``/``else`` on its ``test``, what a verifier-integrity report has, or else what a
blast-radius report has.

Saved reports are checked against the shipped schema before anything trusts them; this module
is that check, small enough to read whole and with no dependency. It knows only the keywords
below: a schema that uses another one is refused when it is loaded, so the schema file can never
ask for a check this module silently skips.

Stricter than JSON Schema in one way, on purpose: an "integer" is a JSON integer, never ``3.0``
nor ``true``. agentsec writes integers as integers; anything else in a report was made by hand.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

from agentsec.errors import CatalogueError
from agentsec.untrusted import clean_text

KEYWORDS = frozenset(
    {
        "$schema",
        "$id",
        "title",
        "description",
        "type",
        "const",
        "enum",
        "required",
        "properties",
        "additionalProperties",
        "items",
        "minimum",
        "maximum",
        "minLength",
        "pattern",
        "if",
        "then",
        "else",
    }
)
_TYPE_NAMES = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


class Violation(Exception):
    """Where a document breaks its schema (a dotted path, e.g. ``summary.findings[0].id``),
    and how."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path, self.problem = path, problem

    def __str__(self) -> str:
        return f"{self.path or '(top level)'}: {self.problem}"


def show(value: Any, limit: int = 60) -> str:
    """A value as JSON, short and cleaned: it came from a file anyone could have written."""
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return clean_text(text, limit)


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    raise CatalogueError(f"the report schema names an unknown type {name!r}")


def same_value(a: Any, b: Any) -> bool:
    # 1 == True and 0 == False in Python; in JSON they are different values.
    return type(a) is type(b) and a == b


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def check(value: Any, schema: dict[str, Any], path: str = "") -> None:
    """Raise ``Violation`` at the first place ``value`` breaks ``schema``."""
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        if not any(_is_type(value, name) for name in names):
            wanted = " or ".join(_TYPE_NAMES[name] for name in names)
            raise Violation(path, f"expected {wanted}, got {show(value)}")
    if "const" in schema and not same_value(value, schema["const"]):
        raise Violation(path, f"expected {show(schema['const'])}, got {show(value)}")
    if "enum" in schema and not any(same_value(value, option) for option in schema["enum"]):
        options = ", ".join(show(option) for option in schema["enum"])
        raise Violation(path, f"expected one of {options}; got {show(value)}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            raise Violation(path, "must not be empty" if not value else "too short")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            raise Violation(path, f"{show(value)} is not of the form {schema['pattern']}")
    if _is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            raise Violation(path, f"{show(value)} is below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise Violation(path, f"{show(value)} is above {schema['maximum']}")
    if isinstance(value, dict):
        _check_object(value, schema, path)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            check(item, schema["items"], f"{path}[{index}]")
    if "if" in schema:  # one schema per kind of report, chosen by a field (its "test")
        branch = "then" if _holds(value, schema["if"]) else "else"
        if branch in schema:
            check(value, schema[branch], path)


def _holds(value: Any, schema: dict[str, Any]) -> bool:
    try:
        check(value, schema)
    except Violation:
        return False
    return True


def _check_object(value: dict[str, Any], schema: dict[str, Any], path: str) -> None:
    for key in schema.get("required", ()):
        if key not in value:
            raise Violation(_child(path, key), "missing")
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in properties:
            check(item, properties[key], _child(path, key))
        elif extra is False:
            raise Violation(_child(path, clean_text(key, 40)), "not a field of this object")
        elif isinstance(extra, dict):
            check(item, extra, _child(path, clean_text(key, 40)))


def _keywords_known(schema: Any, where: str) -> None:
    if not isinstance(schema, dict):
        return
    unknown = set(schema) - KEYWORDS
    if unknown:
        raise CatalogueError(
            f"the report schema uses {', '.join(sorted(unknown))} at {where or 'the top'}, "
            "which agentsec.schema does not check"
        )
    for key, sub in schema.get("properties", {}).items():
        _keywords_known(sub, _child(where, key))
    for keyword in ("items", "additionalProperties", "if", "then", "else"):
        _keywords_known(schema.get(keyword), _child(where, keyword))


@cache
def report_schema() -> dict[str, Any]:
    """The shipped report schema (schema_version 1), refused if it asks for an unknown check."""
    text = resources.files("agentsec.data").joinpath("report.schema.json").read_text("utf-8")
    schema = json.loads(text)
    _keywords_known(schema, "")
    return schema
