"""Names as a channel: many distinct names under one zone in a window (data spelled into
labels, under an allowed wildcard), and labels that look like data (long, or random). Told of
every name the cage looks up (the resolver's thread) and dials (the proxy's loop)."""

from __future__ import annotations

import math
from collections import Counter

from agentcage.domains import is_public_suffix
from agentcage.gateway.watcher.events import Crossing
from agentcage.gateway.watcher.settings import BudgetSettings
from agentcage.gateway.watcher.windows import Once, Recent, SlidingSet

MAX_ZONES = 1024  # zones followed at once
RANDOM_LABEL_MIN = 20  # shorter labels are too short to tell random from a name
LABEL_DIGITS_MIN = 4  # a random label of letters and digits has digits; a word does not


def zone_of(name: str) -> str:
    """The zone a name is registered under: its registrable domain (one label below a public
    suffix), so every name an allowed `*.zone` matches falls into one."""
    labels = name.split(".")
    for i in range(len(labels) - 1, 0, -1):
        parent = ".".join(labels[i:])
        if not is_public_suffix(parent):
            return parent
    return name


def label_entropy(label: str) -> float:
    counts = Counter(label)
    n = len(label)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def odd_label(name: str, settings: BudgetSettings) -> tuple[int, float] | None:
    """(length, entropy) of the label of `name` that looks like data, or None."""
    for label in name.split(".")[:-1]:
        if len(label) > settings.label_length:
            return len(label), round(label_entropy(label), 2)
        if (len(label) >= RANDOM_LABEL_MIN
                and sum(ch.isdigit() for ch in label) >= LABEL_DIGITS_MIN
                and (bits := label_entropy(label)) >= settings.label_entropy):
            return len(label), round(bits, 2)
    return None


class ZoneNames:
    name = "zone_names"

    def __init__(self, settings: BudgetSettings, once: Once):
        self.settings, self.once = settings, once
        self._zones: Recent[SlidingSet] = Recent(
            lambda: SlidingSet(settings.window_seconds), MAX_ZONES)
        # told every request's host: each name's zone and odd label worked out once
        self._names: dict[str, tuple[str, tuple[int, float] | None]] = {}

    def named(self, name: str, at: float, grant: str | None = None) -> tuple[Crossing, ...]:
        known = self._names.get(name)
        if known is None:
            if len(self._names) > 8192:
                self._names.clear()
            known = self._names[name] = (zone_of(name), odd_label(name, self.settings))
        zone, odd = known
        count = self._zones.get(zone).add(at, name)
        found: tuple[Crossing, ...] = ()
        if count > self.settings.zone_names and self.once.first(at, self.name, zone):
            found = (Crossing(self.name, zone,
                              f"{count} distinct names under {zone} in "
                              f"{self.settings.window_seconds:g} s "
                              f"(budget {self.settings.zone_names})",
                              {"names": count, "budget": self.settings.zone_names,
                               "window_seconds": self.settings.window_seconds}, grant),)
        if odd is not None and self.once.first(at, "label", zone):
            # the label itself is what may carry data: only its shape is told
            found += (Crossing("label", zone,
                               f"a name under {zone} has a label of {odd[0]} characters at "
                               f"{odd[1]} bits per character",
                               {"label_length": odd[0], "label_entropy": odd[1]}, grant),)
        return found
