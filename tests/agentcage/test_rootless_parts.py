"""The pure parts of rootless cages: subordinate id ranges, the namespace test, the limits'
refusal and the resolvers a rootless gateway asks."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from agentcage import rootless
from agentcage.backends.cgroups import Layout, Limits
from agentcage.rootless.holder import subordinate_range


def test_a_subordinate_range_is_found_by_name_or_uid(tmp_path: Path) -> None:
    name = pwd.getpwuid(os.getuid()).pw_name
    subuid = tmp_path / "subuid"
    subuid.write_text(f"other:100000:65536\n{name}:200000:65536\n")
    assert subordinate_range(subuid, os.getuid()) == (200000, 65536)
    subuid.write_text(f"# a comment\n{os.getuid()}:300000:1000\n")
    assert subordinate_range(subuid, os.getuid()) == (300000, 1000)
    subuid.write_text(f"{name}:x:65536\n{name}:400000:0\n")
    assert subordinate_range(subuid, os.getuid()) is None  # malformed, or empty
    assert subordinate_range(tmp_path / "missing", os.getuid()) is None


def test_this_process_is_not_in_a_rootless_namespace() -> None:
    rootless.forget_mode()
    assert rootless.active() is False  # the tests run in the initial user namespace
    assert rootless.host_uid() == os.getuid()
    assert rootless.groups_settable() is True  # supplementary groups can be dropped


def test_limits_without_a_writable_delegated_cgroup_are_refused_naming_the_fix(
        tmp_path: Path) -> None:
    layout = Layout(v1={"memory": tmp_path / "memory", "pids": tmp_path / "pids",
                        "cpu": tmp_path / "cpu"})
    refusal = layout.rootless_refusal(Limits(2**30, 1024, 1.5))
    assert refusal is not None
    assert refusal.startswith("container.limits: a rootless cage cannot enforce memory, pids, "
                              "cpu here")
    assert f"mkdir {tmp_path}/cpu/agentcage-{os.getuid()}" in refusal
    assert "limits: none" in refusal and "\n" not in refusal
    assert layout.rootless_refusal(Limits()) is None  # no limit: nothing to refuse
    for controller in ("memory", "pids", "cpu"):
        (tmp_path / controller / f"agentcage-{os.getuid()}").mkdir(parents=True)
    assert layout.rootless_refusal(Limits(2**30, 1024, 1.5)) is None  # delegated


def test_limits_none_turns_every_limit_off_and_a_misspelling_is_an_error() -> None:
    import pytest

    from agentcage.config.load import load_config_text
    from agentcage.config.spec import CageSpec
    from agentcage.errors import ConfigError

    spec = CageSpec.of(load_config_text("name: x\ncontainer: {limits: none}\n").model_dump())
    assert (spec.memory, spec.pids, spec.cpus) == (None, None, None)
    with pytest.raises(ConfigError, match="limits"):
        load_config_text("name: x\ncontainer: {limits: nothing}\n")


def test_the_keeper_hands_out_listeners_on_the_loopback_and_nothing_else(tmp_path: Path) -> None:
    """The keeper's host ports (rootless/hostports.py), served in this process's namespace as
    the keeper serves them in the host's: a listener on 127.0.0.1 is handed over, listening;
    any other address, a port out of range, a malformed request and a port in use are each
    refused with the host's reason."""
    import errno
    import socket
    import threading

    import pytest

    from agentcage.rootless import hostports

    listener = hostports.server(tmp_path)
    threading.Thread(target=hostports.serve, args=(listener,), daemon=True).start()
    path = str(tmp_path / rootless.HOST_PORTS)
    with socket.socket() as probe:  # a port free a moment ago (the keeper takes no port 0)
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    try:
        with hostports.host_listener(path, "127.0.0.1", free) as got:
            address, port = got.getsockname()
            assert (address, port) == ("127.0.0.1", free)
            assert got.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                conn, _ = got.accept()  # the host's connection, on the gateway's socket
                conn.close()
            with pytest.raises(OSError) as in_use:
                hostports.host_listener(path, "127.0.0.1", port)
            assert in_use.value.errno == errno.EADDRINUSE
            assert in_use.value.strerror == "Address already in use"
        for address in ("0.0.0.0", "10.0.2.100", "::"):
            with pytest.raises(OSError) as refused:
                hostports.host_listener(path, address, 18789)
            assert refused.value.errno == errno.EACCES
            assert "is not a loopback address" in str(refused.value.strerror)
        with pytest.raises(OSError) as out_of_range:
            hostports.host_listener(path, "127.0.0.1", 0)
        assert out_of_range.value.errno == errno.EINVAL
        assert isinstance(hostports.listen_on_host(b"127.0.0.1\n"), bytes)  # malformed
        assert isinstance(hostports.listen_on_host(b"\xff 1"), bytes)
        # a holder started before host ports: said, with the way out
        with pytest.raises(OSError, match="prune"):
            hostports.host_listener(str(tmp_path / "none.sock"), "127.0.0.1", free)
    finally:
        listener.close()
