"""Seed files: the agent's own state, answered before it asks (cage.yaml `container.seed_files`).

A coding agent's first run asks questions a cage can answer: the theme, whether to trust
/workspace, whether to use the API key it found (the cage's placeholder). Unanswered, they
come back at every start of a fresh home, and one of them (Claude Code's "use this key?",
default No) leads to a login screen. A seed answers them in the agent's own files, in a named
volume, before every command:

- `merge`: a JSON object merged into the file as *defaults*: a key the file lacks is added,
  objects are merged key by key, a list gains the items it lacks; a value the file has is
  never changed, so the agent's (and the person's) own later choices stay.
- `text`: written only when the file does not exist; from then on it is the agent's.

Values may name a secret's placeholder: `${placeholder:ENV}`, or `${placeholder:ENV:last20}`
for its last 20 characters (how Claude Code remembers an accepted key). A string naming a
secret that has no placeholder (not stored) is left out with what holds it (its list item or
its key), so a seed never writes a placeholder that stands for nothing.

`${random}` is 64 random hex characters (256 bits), new at each place it stands and each time
the seed is rendered: a credential the cage makes for itself, such as the token a service in
the cage asks of whoever connects to it. Under `merge` it is kept once written (the file's
value wins), and a `text` seed is written once, so it is made once per volume.

Pure functions only: the volume's files are read and written by backends/volumes.py.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping

TYPE_CHECKING = False  # (typing.TYPE_CHECKING, without importing typing: `exec` reads this)
if TYPE_CHECKING:
    from typing import Any

_TEMPLATE = re.compile(r"\$\{placeholder:([A-Za-z_][A-Za-z0-9_]*)(:last20)?\}")
_RANDOM = "${random}"
TAIL = 20
RANDOM_BYTES = 32


class _Missing(Exception):
    """A template names a secret without a placeholder: what holds it is left out."""


def placeholder_names(value: Any) -> set[str]:
    """The env names whose placeholders `value` (text or a JSON value) names."""
    if isinstance(value, str):
        return {m.group(1) for m in _TEMPLATE.finditer(value)}
    if isinstance(value, Mapping):
        return set().union(*(placeholder_names(k) | placeholder_names(v)
                             for k, v in value.items()))
    if isinstance(value, list):
        return set().union(*(placeholder_names(v) for v in value))
    return set()


def _render_text(text: str, placeholders: Mapping[str, str]) -> str:
    def fill(m: re.Match[str]) -> str:
        placeholder = placeholders.get(m.group(1))
        if placeholder is None:
            raise _Missing
        return placeholder[-TAIL:] if m.group(2) else placeholder

    filled = _TEMPLATE.sub(fill, text)
    while _RANDOM in filled:
        filled = filled.replace(_RANDOM, secrets.token_hex(RANDOM_BYTES), 1)
    return filled


def render_text(text: str, placeholders: Mapping[str, str]) -> str | None:
    """A `text` seed with its placeholders filled in; None when one is not stored."""
    try:
        return _render_text(text, placeholders)
    except _Missing:
        return None


def render(value: Any, placeholders: Mapping[str, str]) -> Any:
    """A `merge` seed's JSON value with its placeholders filled in, leaving out each list item
    and key whose value (or key) names a secret that is not stored."""
    if isinstance(value, str):
        return _render_text(value, placeholders)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            try:
                out[_render_text(k, placeholders)] = render(v, placeholders)
            except _Missing:
                continue
        return out
    if isinstance(value, list):
        items = []
        for v in value:
            try:
                items.append(render(v, placeholders))
            except _Missing:
                continue
        return items
    return value


def merge_defaults(current: Any, seed: Any) -> Any:
    """`current` with `seed`'s missing parts added (see the module's docstring); `current`
    itself is not changed."""
    if isinstance(current, dict) and isinstance(seed, dict):
        merged = dict(current)
        for key, value in seed.items():
            merged[key] = merge_defaults(current[key], value) if key in current else value
        return merged
    if isinstance(current, list) and isinstance(seed, list):
        return current + [item for item in seed if item not in current]
    return current
