"""A validated form as the state directory keeps it: the cage's cage.yaml, defaults included.

It is written here, not by PyYAML, whose import alone costs a later cage a good part of its
start (`run` writes this file and reads no YAML). The text is YAML in flow style, shaped like
JSON: every key and string double-quoted, each code point that is not printable ASCII as an
escape (as PyYAML writes them), floats as PyYAML writes them (`1.0e-05`, `.inf`), so that
PyYAML (load.py, which reads it back through the model) reads exactly the document that was
written, whatever it holds. A test holds it to that for every kind of value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

_PLAIN = re.compile(r'[ !#-\[\]-~]*')  # printable ASCII but " and \
_LONG_KEY = 128  # longer keys are written as explicit keys (`? "key": value`), as PyYAML does


def document_text(doc: Mapping[str, Any]) -> str:
    out: list[str] = []
    _value(doc, "", out)
    out.append("\n")
    return "".join(out)


def _value(value: Any, indent: str, out: list[str]) -> None:
    if isinstance(value, Mapping):
        if not value:
            out.append("{}")
            return
        inner = indent + "  "
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            if not isinstance(key, str):
                raise TypeError(f"a key of a validated form is a string, not {key!r}")
            out.append(("," if i else "") + "\n" + inner)
            out.append(("? " if len(key) > _LONG_KEY else "") + _string(key) + ": ")
            _value(item, inner, out)
        out.append("\n" + indent + "}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(", ")
            _value(item, indent, out)
        out.append("]")
    else:
        out.append(_scalar(value))


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value).lower()
        # YAML's float needs a dot: 1e-05 would read back as a string
        return text.replace("e", ".0e", 1) if "." not in text and "e" in text else text
    if isinstance(value, str):
        return _string(value)
    raise TypeError(f"a validated form holds JSON values, not {type(value).__name__}")


def _string(text: str) -> str:
    if _PLAIN.fullmatch(text):
        return f'"{text}"'
    parts = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            parts.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            parts.append(ch)
        elif code < 0x100:
            parts.append(f"\\x{code:02x}")
        elif code < 0x10000:  # a lone surrogate too: it reads back as one
            parts.append(f"\\u{code:04x}")
        else:
            parts.append(f"\\U{code:08x}")
    parts.append('"')
    return "".join(parts)
