"""Sliding windows: a sum and a set of the last `window` seconds, kept in slots, so that what
was sent just before a boundary still counts just after it (a fixed window would let twice
its budget through, split over the boundary). Accurate to one slot (a tenth of the window)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterator

SLOTS = 10


class SlidingSum:
    def __init__(self, window: float, slots: int = SLOTS):
        self._width, self._slots = window / slots, slots
        self._buckets: deque[list[float]] = deque()  # [slot number, amount]
        self.total = 0.0

    def add(self, now: float, amount: float) -> float:
        """Add `amount` at `now`; the sum over the window ending now."""
        slot = self._expire(now)
        if self._buckets and self._buckets[-1][0] == slot:
            self._buckets[-1][1] += amount
        else:
            self._buckets.append([slot, amount])
        self.total += amount
        return self.total

    def value(self, now: float) -> float:
        self._expire(now)
        return self.total

    def _expire(self, now: float) -> int:
        slot = int(now // self._width)
        while self._buckets and self._buckets[0][0] <= slot - self._slots:
            self.total -= self._buckets.popleft()[1]
        if not self._buckets:
            self.total = 0.0  # no float drift left over from what expired
        return slot


class SlidingSet:
    """Distinct keys seen within the window (each counted from when it was last seen), at
    most `cap` of them: past that the oldest are forgotten, and the count stays at the cap."""

    def __init__(self, window: float, cap: int = 4096):
        self.window, self.cap = window, cap
        self._seen: dict[str, float] = {}  # key -> last seen, in insertion order of last sight

    def add(self, now: float, key: str) -> int:
        """Note `key` at `now`; the number of distinct keys in the window ending now."""
        self._seen.pop(key, None)
        self._seen[key] = now
        self._expire(now)
        while len(self._seen) > self.cap:
            del self._seen[next(iter(self._seen))]
        return len(self._seen)

    def count(self, now: float) -> int:
        self._expire(now)
        return len(self._seen)

    def _expire(self, now: float) -> None:
        horizon = now - self.window
        while self._seen:
            first = next(iter(self._seen))
            if self._seen[first] > horizon:
                break
            del self._seen[first]


class Once:
    """Whether something is new within the window: a finding is made once per window for one
    budget and key, not once per request over it."""

    def __init__(self, window: float):
        self.window = window
        self._until: dict[tuple[str, str], float] = {}

    def first(self, now: float, budget: str, key: str) -> bool:
        until = self._until.get((budget, key))
        if until is not None and until > now:
            return False
        if len(self._until) > 4096:
            self._until = {k: v for k, v in self._until.items() if v > now}
        self._until[(budget, key)] = now + self.window
        return True


class Recent[T]:
    """A bounded map (a host, a zone, a field -> its state), made on first use; past `cap`
    keys the least recently used is forgotten, so no cage can grow the watcher's memory."""

    def __init__(self, make: Callable[[], T], cap: int):
        self._make, self._cap = make, cap
        self._items: OrderedDict[str, T] = OrderedDict()

    def get(self, key: str) -> T:
        item = self._items.get(key)
        if item is None:
            item = self._items[key] = self._make()
            if len(self._items) > self._cap:
                self._items.popitem(last=False)
        else:
            self._items.move_to_end(key)
        return item

    def items(self) -> Iterator[tuple[str, T]]:
        return iter(self._items.items())
