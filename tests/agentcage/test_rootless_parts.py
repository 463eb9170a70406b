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
    rootless.active.cache_clear()
    assert rootless.active() is False  # the tests run in the initial user namespace
    assert rootless.host_uid() == os.getuid()
    assert rootless.drop_groups() == ["--clear-groups"]


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
