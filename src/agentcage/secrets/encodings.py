"""The encoded forms in which a secret value can appear in text, and their placeholder twins.

Literal forms are exact byte strings (raw, URL-encoded, JSON-escaped, hex). Base64 is different:
a value inside a longer base64 text is encoded differently depending on its offset modulo 3,
so for each of the three offsets we keep the run of characters that depends on the value alone
(the "core"); any base64 text containing the value contains one of the cores.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from urllib.parse import quote, quote_plus

# Shorter values would make cores of a few characters that occur by chance in any base64 text.
MIN_ENCODED_LEN = 8
STD = "std"
URLSAFE = "urlsafe"


@dataclass(frozen=True)
class Literal:
    encoding: str
    value_form: bytes
    placeholder_form: bytes


@dataclass(frozen=True)
class Core:
    alphabet: str  # STD or URLSAFE
    shift: int  # byte offset of the value modulo 3
    text: bytes  # base64 characters that depend only on the value
    lead: int  # characters of the 4-char group before the core (0, 2 or 3)


def _lower_escapes(text: str) -> str:
    parts = text.split("%")
    return parts[0] + "".join("%" + p[:2].lower() + p[2:] for p in parts[1:])


def _json_forms(text: str) -> set[str]:
    forms = {json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1]}
    return forms | {f.replace("/", "\\/") for f in forms}


def literal_forms(value: bytes, placeholder: bytes) -> list[Literal]:
    """Every literal encoding of `value`, each with the same encoding of `placeholder`."""
    ph_text = placeholder.decode()
    forms = [Literal("raw", value, placeholder)]
    try:
        text = value.decode()
    except UnicodeDecodeError:
        text = None
    url_forms = {
        quote(value, safe=""): quote(ph_text, safe=""),
        quote(value, safe="/"): quote(ph_text, safe="/"),
        quote_plus(value): quote_plus(ph_text),
    }
    for v, p in list(url_forms.items()):
        url_forms[_lower_escapes(v)] = _lower_escapes(p)
    forms += [Literal("url", v.encode(), p.encode()) for v, p in url_forms.items()]
    if text is not None:
        forms += [
            Literal("json", form.encode(), json.dumps(ph_text)[1:-1].encode())
            for form in _json_forms(text)
        ]
    if len(value) >= MIN_ENCODED_LEN // 2:
        forms += [
            Literal("hex", value.hex().encode(), placeholder.hex().encode()),
            Literal("hex", value.hex().upper().encode(), placeholder.hex().upper().encode()),
        ]
    unique: dict[bytes, Literal] = {}
    for f in forms:
        if f.value_form:
            unique.setdefault(f.value_form, f)
    return list(unique.values())


def base64_cores(value: bytes) -> list[Core]:
    """The base64 cores of `value` for offsets 0, 1, 2 in both alphabets."""
    if len(value) < MIN_ENCODED_LEN:
        return []
    cores: list[Core] = []
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + value)
        first = -(-8 * shift // 6)  # ceil: first character with no bits of the prefix
        last = 8 * (shift + len(value)) // 6  # characters before this hold only value bits
        core = encoded[first:last]
        lead = first % 4
        cores.append(Core(STD, shift, core, lead))
        urlsafe = core.translate(bytes.maketrans(b"+/", b"-_"))
        cores.append(Core(URLSAFE, shift, urlsafe, lead))
    return cores
