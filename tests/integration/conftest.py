"""Shared real-world fixtures: one fake internet per test module, and a helper to measure."""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from agentsec import service
from agentsec.launchers import Launch, preset_launch
from agentsec.report import Target
from agentsec.runner import run_probe
from fakenet import FakeInternet

SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def internet() -> Iterator[FakeInternet]:
    with FakeInternet() as net:
        yield net


@pytest.fixture(scope="module")
def client(internet: FakeInternet):
    return internet.add_client()


@pytest.fixture
def canary() -> str:
    return "canary-" + secrets.token_hex(16)


def open_launch(exec_prefix: list[str]) -> Launch:
    return Launch(
        prefix=tuple(exec_prefix),
        python=SYSTEM_PYTHON,
        target=Target(kind="netns", how="root, no sandbox, fake internet"),
    )


def preset_in(exec_prefix: list[str], preset: str) -> Launch:
    launch = preset_launch(preset, f"preset {preset}", python=SYSTEM_PYTHON)
    return dataclasses.replace(launch, prefix=(*exec_prefix, *launch.prefix))


def measure(launch: Launch, env: Mapping[str, str], label: str = "t") -> dict[str, Any]:
    run = run_probe(launch.prefix, python=launch.python, env={**os.environ, **env})
    return service.score(run.output, label=label, target=launch.target, rc=run.rc, redact=False)


def finding_ids(report: dict[str, Any]) -> set[str]:
    return {f["id"] for f in report["summary"]["findings"]}


def axis_state(report: dict[str, Any], axis: str) -> str:
    return report["summary"]["axes"][axis]["state"]
