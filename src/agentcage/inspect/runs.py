"""Long runs of one byte class (alphanumerics, hex, base64, base32, base85) found at C speed.

A regex like `[0-9a-f]{256,}` is slow on base64 text: it starts a match at every hex character.
Instead the data is mapped to 0/1 once (`bytes.translate`) and a needle of `min_len` ones is
searched with `bytes.find`, which skips ahead by the needle's length on a mismatch. Python only
loops once per run found, so `limit` caps that and reports "too many" as None.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from itertools import accumulate

from agentcage.inspect.b64 import decode_loose

_DIGITS = b"0123456789"
_LOWER = b"abcdefghijklmnopqrstuvwxyz"
_UPPER = _LOWER.upper()
# Every class below is a subset of this one, so every long run of any class lies inside a long
# run of this one: ByteIndex finds these once, then looks for the narrower classes inside them.
# '%' and '\\' belong too, so a key written as %XX or \\u00XX escapes is still one long run.
_WIDE = _DIGITS + _LOWER + _UPPER + b"+/-_%\\"
WIDE_MIN = 20
WIDE_BYTES = frozenset(_WIDE)  # the bytes of token runs (`ByteIndex.wide`)
WIDE_LIMIT = 4096  # or one run per 512 bytes of data, whichever is more
MARK_SLICE = 1024 * 1024  # larger data is mapped to 0/1 a slice at a time


def _table(chars: bytes) -> bytes:
    return bytes(1 if b in chars else 0 for b in range(256))


_WIDE_TABLE = _table(_WIDE)


@dataclass(frozen=True, eq=False)  # identity hashing: classes are dict keys on hot paths
class CharClass:
    name: str
    value: bytes
    table: bytes = field(init=False, repr=False)
    in_wide: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "table", _table(self.value))
        object.__setattr__(self, "in_wide", set(self.value) <= set(_WIDE))


class ByteClass:
    """The classes in use (a namespace; `ALL` lists them)."""

    ALNUM = CharClass("alnum", _DIGITS + _LOWER + _UPPER)
    HEX = CharClass("hex", _DIGITS + b"abcdefABCDEF")
    B64STD = CharClass("base64", _DIGITS + _LOWER + _UPPER + b"+/")
    B64URL = CharClass("base64url", _DIGITS + _LOWER + _UPPER + b"-_")
    B32 = CharClass("base32", _UPPER + b"234567")
    B32_LOWER = CharClass("base32-lower", _LOWER + b"234567")  # as some write it
    B85 = CharClass("base85", _DIGITS + _UPPER + _LOWER + b"!#$%&()*+-;<=>?@^_`{|}~")
    A85 = CharClass("ascii85", bytes(range(ord("!"), ord("u") + 1)))
    PRINTABLE = CharClass("printable", bytes(range(ord("!"), ord("~") + 1)))  # both base85s
    ALL = (ALNUM, HEX, B64STD, B64URL, B32, B32_LOWER, B85, A85, PRINTABLE)


def marks(data: bytes, cls: CharClass) -> bytes:
    """`data` with every byte of `cls` as 0x01 and every other byte as 0x00."""
    return data.translate(cls.table)


def runs(
    data: bytes, cls: CharClass, min_len: int, limit: int | None = None
) -> list[tuple[int, int]] | None:
    """(start, end) of each maximal run of `cls` at least `min_len` long; None past `limit`."""
    return runs_in_marks(marks(data, cls), min_len, limit)


def runs_in_marks(
    marked: bytes, min_len: int, limit: int | None = None
) -> list[tuple[int, int]] | None:
    """Like `runs`, over data already mapped by `marks` (or any 0/1 map)."""
    needle = b"\x01" * min_len
    found: list[tuple[int, int]] = []
    pos = 0
    while (start := marked.find(needle, pos)) >= 0:
        end = marked.find(b"\x00", start + min_len)
        if end < 0:
            end = len(marked)
        found.append((start, end))
        if limit is not None and len(found) > limit:
            return None
        pos = end
    return found


def _runs_between(marked: bytes, min_len: int, limit: int, start: int = 0,
                  end: int | None = None) -> list[tuple[int, int]] | None:
    """(start, end) of each run of 0x01 at least `min_len` long in `marked[start:end]` (which
    must end in 0x00 or at the end of `marked`); None past `limit` runs. Two C searches per
    run: the Python loop runs once per run, not per byte."""
    end = len(marked) if end is None else end
    found: list[tuple[int, int]] = []
    append, find = found.append, marked.find
    needle = b"\x01" * min_len
    pos = start
    while (at := find(needle, pos, end)) >= 0:
        pos = find(b"\x00", at + min_len, end)
        if pos < 0:
            pos = end
        append((at, pos))
        if len(found) > limit:
            return None
    return found


def _wide_runs(marked: bytes, limit: int) -> list[tuple[int, int]] | None:
    return _runs_between(marked, WIDE_MIN, limit)


def runs_sliced(data: bytes, table: bytes, min_len: int,
                limit: int) -> list[tuple[int, int]] | None:
    """Runs of the class `table` maps to 1, at least `min_len` long, over the whole of `data`
    mapped to 0/1 a slice of MARK_SLICE bytes at a time: a 100 MiB upload costs one slice of
    memory here, not another 100 MiB. A run that reaches the end of a slice stays open into the
    next one. None past `limit` runs."""
    found: list[tuple[int, int]] = []
    open_start: int | None = None  # where a run reaching the end of the last slice began
    view = memoryview(data)
    for base in range(0, len(data), MARK_SLICE):
        marked = bytes(view[base:base + MARK_SLICE]).translate(table)
        pos = 0
        if open_start is not None:
            first_zero = marked.find(b"\x00")
            if first_zero < 0:
                continue  # the open run goes on through all of this slice
            if base + first_zero - open_start >= min_len:
                found.append((open_start, base + first_zero))
            open_start, pos = None, first_zero
        last_zero = marked.rfind(b"\x00")
        inner_end = last_zero + 1 if last_zero >= pos else pos
        if inner_end < len(marked):
            open_start = base + inner_end  # the run at the end of the slice: decided later
        for a, b in _runs_between(marked, min_len, limit, pos, inner_end) or ():
            found.append((base + a, base + b))
        if len(found) > limit:
            return None
    if open_start is not None and len(data) - open_start >= min_len:
        found.append((open_start, len(data)))
    return None if len(found) > limit else found


def _wide_runs_sliced(data: bytes, limit: int) -> list[tuple[int, int]] | None:
    return runs_sliced(data, _WIDE_TABLE, WIDE_MIN, limit)


class ByteIndex:
    """Runs of every class in one piece of data, computed once and shared by the inspectors.

    Long runs of the widest class are found over the whole data; the narrower classes are
    searched only inside those (joined), which for text is a small fraction of the bytes.
    """

    def __init__(self, data: bytes):
        self.data = data
        self._memo: dict[tuple[CharClass, int], list[tuple[int, int]]] = {}
        self._marks: dict[CharClass, bytes] = {}  # of the joined wide runs, one per class
        self._decoded: dict[tuple[int, int, int, bool], bytes] = {}
        self._built = False  # the wide runs are found on first use: many indexes go unused
        self._fragmented = False
        self._wide: list[tuple[int, int]] = []
        self._joined = b""
        self._starts: list[int] = []
        self._b64_classes: tuple[CharClass, ...] | None = None
        self._tokens: dict[int, bytes] = {}
        self._longest = 0  # of the wide runs: no run of any class is longer
        self._marked: bytes | None = None  # `data` mapped to 0/1 by `might_hold`, until built

    def _build(self) -> None:
        data = self.data
        limit = max(WIDE_LIMIT, len(data) // 512)
        if self._marked is not None or len(data) <= MARK_SLICE:
            marked = self._marked if self._marked is not None else data.translate(_WIDE_TABLE)
            self._marked = None  # as large as the data: not kept once the runs are known
            wide = _wide_runs(marked, limit)
        else:
            wide = _wide_runs_sliced(data, limit)
        if wide is None:
            wide, self._fragmented = [(0, len(data))], True
        self._wide = wide
        if wide:
            self._joined = b"\x00".join([data[a:b] for a, b in wide])
            lengths = [b - a for a, b in wide]
            self._longest = max(lengths)
            # Offset in `_joined` of each wide run, to map positions back to `data`.
            self._starts = list(accumulate([n + 1 for n in lengths[:-1]], initial=0))
        self._built = True

    @property
    def fragmented(self) -> bool:
        """True when there were too many runs and `wide` is the whole data instead."""
        if not self._built:
            self._build()
        return self._fragmented

    @property
    def wide(self) -> list[tuple[int, int]]:
        """Runs of base64/token characters at least WIDE_MIN long: where keys can be."""
        if not self._built:
            self._build()
        return self._wide

    def might_hold(self, min_len: int) -> bool:
        """False when no run of any class here is `min_len` long: then searching for one
        needs no index. Before the index is built this costs one translate and one find,
        far less than building it (small requests mostly hold no long run at all)."""
        if len(self.data) > MARK_SLICE and min_len >= WIDE_MIN and not self._built:
            self._build()  # large data: the sliced build, not a whole 0/1 copy of it
        if self._built and min_len >= WIDE_MIN:
            return self._longest >= min_len
        marked = self._marked if self._marked is not None else self.data.translate(_WIDE_TABLE)
        found = marked.find(b"\x01" * min_len) >= 0
        if found and not self._built:
            self._marked = marked  # the index is likely wanted next: translate only once
        return found

    def tokens(self, min_len: int = WIDE_MIN) -> bytes:
        """The wide runs at least `min_len` (>= WIDE_MIN) long, joined by a 0x00 (not a token
        byte, like whatever ended each run): a regex that only matches and looks at token
        bytes finds in it exactly what it finds in the data, from far fewer bytes."""
        if not self._built:
            self._build()
        if min_len <= WIDE_MIN:
            return self._joined
        if min_len not in self._tokens:
            data = self.data
            kept = [(a, b) for a, b in self._wide if b - a >= min_len]
            # All of them (one long run of base64, say): the same bytes, not another copy.
            same = len(kept) == len(self._wide)
            self._tokens[min_len] = (
                self._joined if same else b"\x00".join([data[a:b] for a, b in kept])
            )
        return self._tokens[min_len]

    def runs(self, cls: CharClass, min_len: int) -> list[tuple[int, int]]:
        """(start, end) in `data` of every maximal run of `cls` at least `min_len` long."""
        key = (cls, min_len)
        if not self._built:
            self._build()
        if key not in self._memo:
            if cls.in_wide and min_len >= WIDE_MIN and min_len > self._longest:
                self._memo[key] = []  # inside wide runs, all shorter: no translate, no search
            elif (shorter := min((m for c, m in self._memo if c is cls and m < min_len),
                                 default=None)) is not None:
                # the runs of a shorter length, filtered: no second pass over the data
                self._memo[key] = [(a, b) for a, b in self._memo[(cls, shorter)]
                                   if b - a >= min_len]
            elif min_len < WIDE_MIN or not cls.in_wide:
                if len(self.data) > MARK_SLICE:
                    # a limit no data can pass (runs of min_len and a byte between): every
                    # run is found, none dropped for being too many
                    self._memo[key] = runs_sliced(self.data, cls.table, min_len,
                                                  len(self.data) // max(min_len, 1) + 1) or []
                else:
                    self._memo[key] = runs(self.data, cls, min_len) or []
            else:
                if cls not in self._marks:
                    self._marks[cls] = marks(self._joined, cls)
                found = runs_in_marks(self._marks[cls], min_len) or []
                self._memo[key] = [self._to_data(a, b) for a, b in found]
        return self._memo[key]

    def base64_decoded(self, start: int, end: int, offset: int, urlsafe: bool) -> bytes:
        """data[start + offset:end] base64-decoded (memoised: several inspectors ask)."""
        key = (start, end, offset, urlsafe)
        if key not in self._decoded:
            self._decoded[key] = decode_loose(self.data[start + offset : end], urlsafe)
        return self._decoded[key]

    def base64_classes(self) -> tuple[CharClass, ...]:
        """The base64 alphabets worth searching: URL-safe only if '-' or '_' occurs at all
        (otherwise its runs are alphanumeric pieces of the standard runs, and many)."""
        if self._b64_classes is None:
            if not self._built:
                self._build()
            urlsafe = b"-" in self._joined or b"_" in self._joined
            self._b64_classes = (
                (ByteClass.B64STD, ByteClass.B64URL) if urlsafe else (ByteClass.B64STD,)
            )
        return self._b64_classes

    def spans(self, cls: CharClass, min_len: int) -> list[bytes]:
        return [self.data[a:b] for a, b in self.runs(cls, min_len)]

    def _to_data(self, a: int, b: int) -> tuple[int, int]:
        i = bisect.bisect_right(self._starts, a) - 1
        base = self._wide[i][0] - self._starts[i]
        return a + base, b + base
