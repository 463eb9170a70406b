"""The gateway's copy of its state on disk (gateway/statecopy.py, grants.json's writer): off the
event loop and coalesced while a loop runs, at once where none does, flushed on demand, never
an older rendering over a newer one, a failed write said and retried; and grants.json in the
form it writes read back by the CLI and by the next gateway, a thousand grants and all."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from agentcage.gateway import statecopy
from agentcage.gateway.control.grants import Grants
from agentcage.gateway.control.settings import PolicyApiSettings
from agentcage.gateway.statecopy import StateCopy
from agentcage.grants import listing
from agentcage.state import StateStore


class Counting:
    """A state whose rendering says how many times it changed, and counts its renderings."""

    def __init__(self) -> None:
        self.value, self.renders, self.failures = 0, 0, []

    def render(self) -> str:
        self.renders += 1
        return f"{self.value}\n"


def test_without_a_loop_each_change_is_written_before_it_returns(tmp_path):
    state, path = Counting(), tmp_path / "state"
    copy = StateCopy(path, state.render, state.failures.append)
    for _ in range(3):
        state.value += 1
        copy.changed()
        assert path.read_text() == f"{state.value}\n"


def test_on_a_loop_changes_wait_off_the_loop_and_a_burst_is_written_once(tmp_path):
    state, path = Counting(), tmp_path / "state"

    async def burst() -> None:
        copy = StateCopy(path, state.render, state.failures.append)
        for _ in range(100):
            state.value += 1
            copy.changed()
        assert not path.exists()  # the changes returned before any write
        for _ in range(100):
            await asyncio.sleep(statecopy.DELAY)
            if path.exists():
                break
        await asyncio.sleep(statecopy.DELAY * 2)

    asyncio.run(burst())
    assert path.read_text() == "100\n" and state.renders == 1
    assert state.failures == []


def test_flush_writes_what_is_stale_and_nothing_else(tmp_path):
    state, path = Counting(), tmp_path / "state"

    async def operator() -> None:
        copy = StateCopy(path, state.render, state.failures.append)
        state.value = 7
        copy.changed()
        copy.flush()  # the operator's channel answers after this
        assert path.read_text() == "7\n"
        renders = state.renders
        copy.flush()
        await asyncio.sleep(statecopy.DELAY * 3)  # the pending round finds nothing stale
        assert state.renders == renders

    asyncio.run(operator())


def test_an_earlier_rendering_never_replaces_a_later_one_even_when_its_write_is_held(
        tmp_path, monkeypatch):
    from agentcage import state as state_module

    state, path = Counting(), tmp_path / "state"
    copy = StateCopy(path, state.render, state.failures.append)
    writes = []
    started, release = threading.Event(), threading.Event()
    real_write = state_module.atomic_write

    def held_first(target, text, *args):  # the real write, the first one held a while
        writes.append(text)
        if len(writes) == 1:
            started.set()
            release.wait(10)
        real_write(target, text, *args)

    monkeypatch.setattr(state_module, "atomic_write", held_first)
    first = threading.Thread(target=copy._write_or_say, args=(1, "old\n"))
    first.start()
    assert started.wait(10)
    later = threading.Thread(target=copy._write_or_say, args=(2, "new\n"))
    later.start()  # waits for the first write's lock
    release.set()
    first.join(10)
    later.join(10)
    copy._write_or_say(1, "old\n")  # a round rendered earlier, finishing last
    assert path.read_text() == "new\n" and writes == ["old\n", "new\n"]


def test_a_failed_write_is_said_and_the_next_change_writes_again(tmp_path):
    state, path = Counting(), tmp_path / "missing" / "state"
    copy = StateCopy(path, state.render, state.failures.append)
    state.value = 1
    copy.changed()
    assert len(state.failures) == 1 and isinstance(state.failures[0], OSError)
    path.parent.mkdir()
    state.value = 2
    copy.changed()
    assert path.read_text() == "2\n" and len(state.failures) == 1


def test_a_thousand_grants_are_read_back_by_the_cli_and_the_next_gateway(tmp_path):
    store = StateStore(tmp_path / "home")
    cage = store.cage("c")
    cage.root.mkdir(parents=True)
    settings = PolicyApiSettings(grantable=("*.example.test",), max_grants=2000,
                                 max_ttl_seconds=600)

    async def gateway() -> Grants:
        grants = Grants(settings, cage.grants, lambda record: None)
        for i in range(1000):
            asked = grants.ask({"domain": f"n{i}.example.test", "reason": "the task"},
                               (80, 443), lambda host: False)
            assert asked.status == "granted"
        grants.flush()  # as the gateway does at its end
        return grants

    grants = asyncio.run(gateway())
    shown = listing(cage)  # `agentcage cage grants NAME list` reads this
    document = grants.document()
    assert shown["grants"] == document["grants"] and len(shown["grants"]) == 1000
    assert shown["requests"] == document["requests"]
    assert json.loads(cage.grants.read_text())["version"] == 1
    again = Grants(settings, Path(cage.grants), lambda record: None)  # the next gateway
    assert [g.id for g in again.active()] == [g.id for g in grants.active()]


def test_written_waits_off_the_loop_until_the_file_holds_every_change_so_far(tmp_path):
    state, path = Counting(), tmp_path / "state"
    served: list[int] = []

    async def change_then_wait() -> str:
        copy = StateCopy(path, state.render, state.failures.append)
        state.value = 7
        copy.changed()
        assert not path.exists()

        async def other_flow() -> None:  # the loop serves others while the answer waits
            served.append(state.value)

        other = asyncio.get_running_loop().create_task(other_flow())
        await copy.written()
        await other
        return path.read_text()

    assert asyncio.run(change_then_wait()) == "7\n"
    assert served == [7] and state.failures == []


def test_a_revoked_grant_is_on_disk_when_revoke_returns(tmp_path):
    """A revocation is never left for later: a gateway killed right after it must not bring
    the grant back at its next start."""
    store = StateStore(tmp_path / "home")
    cage = store.cage("c")
    cage.root.mkdir(parents=True)
    settings = PolicyApiSettings(grantable=("*.example.test",), max_grants=8,
                                 max_ttl_seconds=600)

    async def grant_then_revoke() -> list[str]:
        grants = Grants(settings, cage.grants, lambda record: None)
        asked = grants.ask({"domain": "a.example.test", "reason": "the task"}, (80, 443),
                           lambda host: False)
        await grants.persisted()
        on_disk = [g["id"] for g in json.loads(cage.grants.read_text())["grants"]]
        assert on_disk == [asked.grant_id]
        grants.revoke(asked.grant_id)
        # no await: the write must already have happened
        return [g["id"] for g in json.loads(cage.grants.read_text())["grants"]]

    assert asyncio.run(grant_then_revoke()) == []
