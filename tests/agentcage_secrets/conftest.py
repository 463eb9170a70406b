"""Fixtures for the secrets and inspector tests: real files, real tmpfs, a real clock."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentcage.inspect.protocol import InspectionContext
from agentcage.policy import Policy

SHM = Path("/dev/shm")


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """A private directory on tmpfs (/dev/shm), removed afterwards."""
    if not SHM.is_dir():
        pytest.skip("/dev/shm is not available")
    path = Path(tempfile.mkdtemp(prefix="agentcage-test-", dir=SHM))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def ctx() -> InspectionContext:
    return InspectionContext(Policy.deny_all("not used by these inspectors"), time.time())
