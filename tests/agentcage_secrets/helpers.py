"""Helpers shared by the tests of the secrets and inspect packages."""

from __future__ import annotations

import os
import shutil
import subprocess

from agentcage.inspect.protocol import RequestView


def systemd_creds_works() -> bool:
    tool = shutil.which("systemd-creds")
    if tool is None or os.geteuid() != 0:
        return False
    done = subprocess.run(
        [tool, "encrypt", "--with-key=host", "--name=probe", "-", "-"],
        input=b"x",
        capture_output=True,
    )
    return done.returncode == 0


def request(
    host: str = "sink.example.test",
    path: str = "/",
    headers: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
    body: bytes | None = None,
    method: str = "POST",
) -> RequestView:
    return RequestView(method, "https", host, 443, path, tuple(headers), body)
