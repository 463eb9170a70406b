"""Redaction of a body that arrives in pieces (a streamed response), in bounded memory.

A real value may arrive split across two pieces, so each piece cannot be redacted on its own.
`StreamRedactor` holds back the shortest tail that could still grow into a form of a value
(a literal encoding or a base64 core, see `Redactor.forms`) and redacts everything before it:

- the held tail is the longest suffix of what has arrived that is a proper prefix of some form,
  so text that cannot start a form (the blank line ending a server-sent event, say) is never
  delayed;
- the cut between what is released and what is held never falls inside a whole form: a form
  that spans it moves the cut back to where the form starts, and the next piece redacts it.

The carry is therefore never longer than about twice the longest form, whatever the size of
the body. Base64 is redacted piecewise: a value inside a long base64 run is replaced by its
placeholder (the real value never passes), but when the run goes on past the piece, the text
after the value keeps its original alignment and may no longer decode cleanly. Exact
re-encoding needs the whole run, which only a buffered body has.
"""

from __future__ import annotations

from agentcage.secrets.redact import Redactor


class StreamRedactor:
    """Feed pieces in order with `feed`, then call `finish` once; `names` are the env names of
    the secrets redacted so far. One instance per body."""

    def __init__(self, redactor: Redactor):
        self._redactor = redactor
        forms = redactor.forms
        self._longest = max((len(f) for f in forms), default=0)
        # Every proper prefix of every form: the tail check is then one set lookup per offset.
        self._prefixes = frozenset(f[:i] for f in forms for i in range(1, len(f)))
        self._forms = forms
        self._carry = b""
        self.names: set[str] = set()

    @property
    def held(self) -> int:
        """Bytes received but not yet released (bounded by the form lengths)."""
        return len(self._carry)

    def feed(self, piece: bytes) -> bytes:
        data = self._carry + piece if self._carry else bytes(piece)
        if not self._forms:
            return data
        cut = self._safe_cut(data)
        self._carry = data[cut:]
        return self._redact(data[:cut])

    def finish(self) -> bytes:
        data, self._carry = self._carry, b""
        return self._redact(data)

    def _redact(self, data: bytes) -> bytes:
        if not data:
            return data
        result = self._redactor.redact(data)
        self.names |= result.names
        return result.data

    def _safe_cut(self, data: bytes) -> int:
        size = len(data)
        cut = size
        for start in range(max(0, size - self._longest + 1), size):
            if data[start:] in self._prefixes:  # longest first: the earliest start wins
                # and the base64 group a core starts in (up to three characters before it),
                # so the core can be decoded and re-encoded with its group
                cut = max(0, start - 3)
                break
        return self._before_whole_forms(data, cut)

    def _before_whole_forms(self, data: bytes, cut: int) -> int:
        """Move `cut` back to the start of any whole form that spans it (repeat until none)."""
        span = self._longest
        while cut > 0:
            window = data[max(0, cut - span + 1): cut + span]
            if not any(f in window for f in self._forms):  # the common case: one fast check
                return cut
            for start in range(max(0, cut - span + 1), cut):
                end = self._redactor.form_end(data, start)
                if end is not None and end > cut:
                    cut = start
                    break
            else:
                return cut
        return cut
