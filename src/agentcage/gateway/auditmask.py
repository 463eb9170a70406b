"""Credentials kept out of the audit log.

What the cage tried to send to a refused host lands in its audit record: a path, a query, a
DNS name. The record must say what was tried without the log itself holding a credential for
whoever reads, backs up or ships it. Every match of the provider credential patterns
(data/secret_patterns.json) in a record's text is replaced by the pattern's id and a
fingerprint, the first 12 hex digits of the credential's SHA-256: a reader who holds a
credential can tell whether it was this one; the log cannot give it back.
"""

from __future__ import annotations

import hashlib

from agentcage.inspect.patterns import PatternSet

FINGERPRINT_HEX = 12
# Texts seen to hold no credential, remembered so that the hosts, reasons and inspector names
# every record repeats are scanned once (forgotten all at once when full: a bound, no more).
CLEAN_MEMO = 4096


def fingerprint(pattern_id: str, credential: bytes) -> bytes:
    """What stands in the log for `credential`: `[github-token sha256:0123456789ab]`."""
    digest = hashlib.sha256(credential).hexdigest()[:FINGERPRINT_HEX]
    return f"[{pattern_id} sha256:{digest}]".encode()


class CredentialMask:
    """`mask(text)`: `text` with every credential the patterns find replaced (see above)."""

    def __init__(self, patterns: PatternSet):
        self.patterns = patterns
        self._clean: dict[str, None] = {}  # an ordered set; the audit log's lock guards it

    def __call__(self, text: str) -> str:
        if text in self._clean:
            return text
        # surrogatepass: a path may hold anything mitmproxy decoded; it comes back unchanged
        data = text.encode("utf-8", "surrogatepass")
        if len(data) < self.patterns.shortest:  # too short to hold any credential
            return text
        found: dict[bytes, str] = {}
        for pattern, match in self.patterns.scan(data):
            found.setdefault(match, pattern.id)
        if not found:
            if len(self._clean) >= CLEAN_MEMO:
                self._clean.clear()
            self._clean[text] = None
            return text
        for match in sorted(found, key=len, reverse=True):  # a longer match first, whole
            data = data.replace(match, fingerprint(found[match], match))
        return data.decode("utf-8", "surrogatepass")
