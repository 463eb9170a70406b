"""The deterministic budgets over what leaves: each a small unit told of every request sent
(`sent`), answering with the budgets it crossed. They hold counts and compressor state, never
what was sent. Names looked up are `names.py`'s; a credential sent in pieces, `reassembly.py`'s.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable

from agentcage.gateway.watcher.events import Crossing, Sent, header_block, request_line
from agentcage.gateway.watcher.settings import BudgetSettings
from agentcage.gateway.watcher.windows import Once, Recent, SlidingSet, SlidingSum

MAX_HOSTS = 256  # hosts followed at once; the least recent is forgotten past that
MAX_OWED = 64  # requests and answers the information budget measures later, at most


def _mib(n: float) -> str:
    return f"{n / 1024 / 1024:.1f} MiB" if n >= 1024 * 1024 else f"{n / 1024:.1f} KiB"


class HostBytes:
    """Bytes sent per host per window; the model's hosts against their own, larger budget."""

    name = "host_bytes"

    def __init__(self, settings: BudgetSettings, once: Once):
        self.settings, self.once = settings, once
        self._sums: Recent[SlidingSum] = Recent(
            lambda: SlidingSum(settings.window_seconds), MAX_HOSTS)

    def sent(self, s: Sent) -> tuple[Crossing, ...]:
        total = self._sums.get(s.host).add(s.at, s.size())
        budget = self.settings.model_host_bytes if s.model_host else self.settings.host_bytes
        if total <= budget or not self.once.first(s.at, self.name, s.host):
            return ()
        return (Crossing(self.name, s.host,
                         f"{_mib(total)} sent to {s.host} in "
                         f"{self.settings.window_seconds:g} s (budget {_mib(budget)})",
                         {"sent_bytes": int(total), "budget_bytes": budget,
                          "window_seconds": self.settings.window_seconds,
                          "model_host": s.model_host}, s.grant),)


# Tokens: runs of the characters of hashes, ids and encodings. One the host sent (a package's
# integrity hash, an ETag, a session id, a cursor) and the cage sends back is an echo: data
# that came from the host is no information sent to it.
TOKEN = re.compile(rb"[A-Za-z0-9+/_-]{8,}")
TOKEN_SPLIT = re.compile(b"(" + TOKEN.pattern + b")")
ECHO_MARK = b"\x00"
MAX_ECHO_TOKENS = 4096  # per host
MAX_ECHO_SCAN = 1024 * 1024  # of a response
MAX_ECHO_STRIP = 64 * 1024  # of a request body; a larger one is measured as it is
KEPT_BODY = 4096  # a request body up to this size is kept, stripped, for the next request

# A token is kept as its hash(): 64 bits of SipHash under the process's random key (never the
# token itself), computed in C for a whole list of tokens at once. A request with no echo in
# it, most of them, costs one findall and one set test: no Python code runs per token.


class _Stream:
    """One host's requests through one compressor: what repeats costs next to nothing, what
    the host itself sent costs nothing."""

    __slots__ = ("answer", "block", "body", "compressor", "echoes", "grant", "headers",
                 "learnt", "sum")

    def __init__(self, window: float):
        # 32 KiB of history, as deflate has; level 6, for heads and small bodies alike
        self.compressor = zlib.compressobj(6, zlib.DEFLATED, 15, 8)
        self.sum = SlidingSum(window)
        self.grant: str | None = None
        self.echoes: dict[int, None] = {}  # hashes of tokens, oldest first
        self.learnt = 0  # how many answers taught new tokens (what `block` was stripped of)
        # the last request's headers, and their block stripped of echoes (at `learnt`):
        # most requests to a host send the same headers again
        self.headers: tuple[tuple[str, str], ...] | None = None
        self.block: tuple[bytes, int] = (b"", -1)
        # the last small body, stripped (at `learnt`): a poll sends the same one again
        self.body: tuple[bytes, bytes, int] = (b"", b"", -1)
        # the last answer, if small: the same again teaches nothing new
        self.answer: bytes | None = None

    def received(self, body: bytes) -> None:
        if body == self.answer:  # small, and all its tokens learnt since nothing came after
            return
        self.answer = body if len(body) <= KEPT_BODY else None
        echoes = self.echoes
        known = len(echoes)
        echoes.update(dict.fromkeys(map(hash, TOKEN.findall(body, 0, MAX_ECHO_SCAN))))
        if len(echoes) == known:
            return  # nothing new (a token seen again stays put)
        self.learnt += 1
        if len(echoes) > MAX_ECHO_TOKENS:  # the oldest forgotten
            self.echoes = dict(itertools.islice(echoes.items(),
                                                len(echoes) - MAX_ECHO_TOKENS, None))

    def head(self, s: Sent) -> bytes:
        """The request line and headers of `s`, echoes stripped (a token cannot span a line:
        each part is stripped alone, and the headers' part is kept for the next request)."""
        line = request_line(s)
        if s.headers != self.headers or self.block[1] != self.learnt:
            block = header_block(s.headers)
            self.headers, self.block = s.headers, (self._strip(block), self.learnt)
        return self._strip(line) + self.block[0]

    def information(self, s: Sent) -> int:
        """The compressed size of a request, what the host sent it first stripped out (of
        the head, and of a body of up to MAX_ECHO_STRIP bytes), in one call of the
        compressor (deflate's output does not depend on how its input is cut)."""
        head, body = self.head(s), s.body
        c = self.compressor
        if len(body) <= MAX_ECHO_STRIP:  # small: one call over a copy
            if body == self.body[0] and self.body[2] == self.learnt:
                body = self.body[1]
            elif len(body) <= KEPT_BODY:
                stripped = self._strip(body)
                self.body = (body, stripped, self.learnt)
                body = stripped
            else:
                body = self._strip(body)
            return len(c.compress(head + body)) + len(c.flush(zlib.Z_SYNC_FLUSH))
        # large: never copied (an upload of 100 MiB joined to its head would be held twice)
        return len(c.compress(head)) + len(c.compress(body)) + len(c.flush(zlib.Z_SYNC_FLUSH))

    def _strip(self, data: bytes) -> bytes:
        echoes = self.echoes
        if not echoes or echoes.keys().isdisjoint(map(hash, TOKEN.findall(data))):
            return data  # most requests: one search, no copy
        pieces = TOKEN_SPLIT.split(data)  # between the tokens, a token, between, ...
        pieces[1::2] = [ECHO_MARK if hash(t) in echoes else t for t in pieces[1::2]]
        return b"".join(pieces)


def _read(body: bytes | Callable[[], bytes]) -> bytes:
    """An answer's body, read now if it was told as a reader. One that cannot be read teaches
    nothing: no echo learnt only ever counts more as information sent, so the measuring goes
    on (a request's failure, instead, holds the requests after it)."""
    if isinstance(body, bytes):
        return body
    try:
        return body()
    except Exception:
        return b""


def _head_bound(s: Sent) -> int:
    """The most bytes the request line and headers of `s` can come to: their characters and
    the 5 of the request line's space and the blank line, 4 bytes each at most (UTF-8)."""
    return 4 * (s.size() - len(s.body) + 5)


def _deflate_bound(n: int) -> int:
    """The most `n` bytes can come to through the compressor, flush included: deflate emits
    each block stored when coding would make it larger (5 bytes a block); an eighth, for
    fixed codes of bytes over 143, plus the flush and the header, is a margin over that."""
    return n + (n >> 3) + 64


class Information:
    """Information sent per window to all hosts but the model's, summed: random material adds
    up, even when every request is small and passes every inspector on its own.

    A request that cannot cross the budget, even if nothing of it compressed (the window's
    total, what is owed and its own deflate bound within the budget), is owed: its
    compression may wait until `settle`, which the watcher calls once the request has left
    (watch.py: at its next tick, at the latest); so may the reading of an answer's tokens,
    after the answer has gone to the cage. Everything owed is settled, in the order it came,
    before the budget is told a request that may cross it, or read; so the amounts, the
    findings and the requests they stop are those of measuring each at once. Owed requests
    are measured together, with warm caches."""

    name = "information"

    def __init__(self, settings: BudgetSettings, once: Once):
        self.settings, self.once = settings, once
        self._total = SlidingSum(settings.window_seconds)
        self._streams: Recent[_Stream] = Recent(
            lambda: _Stream(settings.window_seconds), MAX_HOSTS)
        # sent (a request, and the most it can come to) and received (host, body or its
        # reader, size), not yet measured
        self._owed: deque[tuple[Sent, int] | tuple[str, bytes | Callable[[], bytes], int]] = (
            deque())
        self._owed_bound = 0  # the most the requests owed can come to
        self._owed_answers = 0  # bytes of the answers owed

    @property
    def owed(self) -> bool:
        return bool(self._owed)

    @property
    def total(self) -> SlidingSum:
        """The information sent in the window (everything owed settled first)."""
        self.settle()
        return self._total

    def sent(self, s: Sent) -> tuple[Crossing, ...]:
        if s.model_host:
            return ()
        bound = _deflate_bound(_head_bound(s) + len(s.body))
        if len(self._owed) < MAX_OWED and (self._total.value(s.at) + self._owed_bound + bound
                                             <= self.settings.information_bytes):
            self._owed.append((s, bound))
            self._owed_bound += bound
            return ()
        self.settle()
        return self._measure(s)

    def received(self, host: str, body: bytes | Callable[[], bytes],
                 size: int | None = None) -> None:
        """What `host` answered (its tokens, which the cage may send back as echoes): owed
        too, after the requests owed, which were sent before it. `body` may be a function
        that reads it (`size`: about how many bytes), called when it is settled."""
        if size is None:
            size = len(body) if isinstance(body, bytes) else 0
        if len(self._owed) >= MAX_OWED or self._owed_answers >= MAX_ECHO_SCAN:
            self.settle()
        self._owed.append((host, body, size))
        self._owed_answers += size

    def settle(self) -> None:
        """Measure what is owed, in order (none of it can cross the budget)."""
        owed = self._owed
        while owed:
            event = owed[0]
            if len(event) == 3:
                self._streams.get(event[0]).received(_read(event[1]))
            else:
                crossed = self._measure(event[0])
                assert not crossed, "an owed request crossed the information budget"
            # taken off once done: a failure leaves it owed, and the next tell fails too
            owed.popleft()
            if len(event) == 3:
                self._owed_answers -= event[2]
            else:
                self._owed_bound -= event[1]

    def _measure(self, s: Sent) -> tuple[Crossing, ...]:
        stream = self._streams.get(s.host)
        stream.grant = s.grant
        amount = stream.information(s)
        at = s.at
        stream.sum.add(at, amount)
        total = self._total.add(at, amount)
        budget = self.settings.information_bytes
        if total <= budget or not self.once.first(at, self.name, "*"):
            return ()
        # the finding is about the host that carried the most of it
        top, top_stream = max(self._streams.items(), key=lambda kv: kv[1].sum.value(at))
        return (Crossing(self.name, top,
                         f"{_mib(total)} of information sent in "
                         f"{self.settings.window_seconds:g} s (budget {_mib(budget)}), "
                         f"most of it to {top}",
                         {"information_bytes": int(total), "budget_bytes": budget,
                          "host_information_bytes": int(top_stream.sum.value(at)),
                          "window_seconds": self.settings.window_seconds},
                         top_stream.grant),)


class Beacon:
    """Requests to one host at one steady interval: a beacon calling home, which a poller also
    is (a finding about an allowed host is only recorded, and made once per window)."""

    name = "beacon"

    def __init__(self, settings: BudgetSettings, once: Once):
        self.settings, self.once = settings, once
        self._times: Recent[deque[float]] = Recent(
            lambda: deque(maxlen=settings.beacon_requests), MAX_HOSTS)

    def sent(self, s: Sent) -> tuple[Crossing, ...]:
        times = self._times.get(s.host)
        times.append(s.at)
        if len(times) < self.settings.beacon_requests:
            return ()
        # the mean interval, from the ends alone: most traffic is too fast for a beacon, and
        # is told so without the list of its intervals
        mean = (times[-1] - times[0]) / (len(times) - 1)
        if mean < self.settings.beacon_min_interval:
            return ()
        gaps = [b - a for a, b in itertools.pairwise(times)]
        spread = (max(gaps) - min(gaps)) / mean
        if spread > self.settings.beacon_jitter or not self.once.first(s.at, self.name, s.host):
            return ()
        return (Crossing(self.name, s.host,
                         f"{len(times)} requests to {s.host} every {mean:.1f} s "
                         f"(spread {spread:.0%})",
                         {"requests": len(times), "interval_seconds": round(mean, 3),
                          "spread": round(spread, 3)}, s.grant),)


class NewHosts:
    """Names first reached through runtime grants, per window: a wildcard grant used to fan
    out over many hosts."""

    name = "new_hosts"

    def __init__(self, settings: BudgetSettings, once: Once):
        self.settings, self.once = settings, once
        self._new = SlidingSet(settings.window_seconds)
        self._known: OrderedDict[str, None] = OrderedDict()

    def sent(self, s: Sent) -> tuple[Crossing, ...]:
        if s.grant is None or s.host in self._known:
            return ()
        self._known[s.host] = None
        if len(self._known) > 4096:
            self._known.popitem(last=False)
        count = self._new.add(s.at, s.host)
        if count <= self.settings.new_hosts or not self.once.first(s.at, self.name, s.grant):
            return ()
        return (Crossing(self.name, s.host,
                         f"{count} new hosts reached through runtime grants in "
                         f"{self.settings.window_seconds:g} s "
                         f"(budget {self.settings.new_hosts})",
                         {"new_hosts": count, "budget": self.settings.new_hosts,
                          "window_seconds": self.settings.window_seconds}, s.grant),)
