"""The upstream watchdog's rules, over its own inputs (a clock and a progress reading); the
real thing, with hanging upstreams in the fake internet: test_gateway_faults_world.py."""

from __future__ import annotations

from agentcage.gateway.timeouts import UpstreamWatchdog


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Flow:  # any object: the watchdog only keeps it as a key
    pass


def watchdog(readings: dict):
    cut: list[tuple[object, str]] = []
    clock = Clock()
    dog = UpstreamWatchdog(first_byte=10, idle=5, on_timeout=lambda f, why: cut.append((f, why)),
                           clock=clock, probe=lambda f: readings[f])
    return dog, clock, cut


def test_first_byte_then_idle_limits():
    f = Flow()
    readings = {f: (100, False)}
    dog, clock, cut = watchdog(readings)
    dog.forwarded(f)
    for t in (1, 5, 9.9):
        clock.now = t
        dog.check()
    assert cut == []
    clock.now = 10.5
    dog.check()
    assert cut and "first byte timeout" in cut[0][1] and len(dog) == 0
    g = Flow()
    readings[g] = (0, False)
    dog.forwarded(g)
    dog.responded(g)
    clock.now = 16
    dog.check()
    assert "idle timeout" in cut[-1][1]


def test_progress_or_waiting_on_someone_else_restarts_the_clock():
    f = Flow()
    readings = {f: (0, False)}
    dog, clock, cut = watchdog(readings)
    dog.forwarded(f)
    dog.responded(f)
    for t in range(1, 30):
        clock.now = t
        # the upstream keeps sending, or the client is slow to take what arrived
        readings[f] = (t * 1000, False) if t % 2 else (readings[f][0], True)
        dog.check()
    assert cut == []
    dog.done(f)
    clock.now = 100
    dog.check()
    assert cut == []  # a finished flow is no longer watched
