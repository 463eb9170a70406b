"""Debian's Chromium, headless, for the report and console tests.

Started with a fresh profile, without background networking, and with a resolver that maps the
test's own names to loopback and fails every other name, so the browser cannot send a packet
anywhere but here. Every browser process group is killed when its call ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--hide-scrollbars",
    "--force-color-profile=srgb",
    "--disable-popup-blocking",
)


def resolver_rules(names: Sequence[str] = (), addresses: Sequence[str] = ("127.0.0.1",)) -> str:
    """Test names to loopback; every other name unresolvable; only the given literals pass."""
    mapped = [f"MAP {name} 127.0.0.1" for name in names]
    excluded = [f"EXCLUDE {address}" for address in ("localhost", *addresses)]
    return "--host-resolver-rules=" + ", ".join([*mapped, "MAP * ~NOTFOUND", *excluded])


@contextlib.contextmanager
def profile() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="agentsec-chromium-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _env(data_dir: Path) -> dict[str, str]:
    # Chromium's own temporary directories (org.chromium.Chromium.*) go inside the profile:
    # it is killed, so it never removes them, and the profile is removed afterwards.
    return {**os.environ, "TMPDIR": str(data_dir)}


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def run(args: Sequence[str], names: Sequence[str] = (), prefix: Sequence[str] = (),
        timeout: float = 60, addresses: Sequence[str] = ("127.0.0.1",)
        ) -> subprocess.CompletedProcess[bytes]:
    """Run Chromium to completion (a screenshot, a DOM dump) with a fresh profile."""
    with profile() as data_dir:
        rules = resolver_rules(names, addresses)
        argv = [*prefix, CHROMIUM, *FLAGS, f"--user-data-dir={data_dir}", rules, *args]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env=_env(data_dir))
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            _kill(proc)
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@contextlib.contextmanager
def open_page(urls: Sequence[str], names: Sequence[str] = ()) -> Iterator[subprocess.Popen[bytes]]:
    """Keep one Chromium on ``urls`` (one tab each; their scripts run) until the block ends."""
    with profile() as data_dir:
        argv = [CHROMIUM, *FLAGS, f"--user-data-dir={data_dir}", resolver_rules(names), *urls]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env=_env(data_dir))
        try:
            yield proc
        finally:
            _kill(proc)


def screenshot(url: str, out: Path, names: Sequence[str] = (), prefix: Sequence[str] = (),
               size: tuple[int, int] = (1200, 900),
               addresses: Sequence[str] = ("127.0.0.1",)) -> bytes:
    args = [f"--window-size={size[0]},{size[1]}", f"--screenshot={out}", url]
    run(args, names, prefix, addresses=addresses)
    assert out.exists(), f"no screenshot of {url}"
    return out.read_bytes()


def dom(url: str, names: Sequence[str] = (), prefix: Sequence[str] = (),
        addresses: Sequence[str] = ("127.0.0.1",)) -> str:
    proc = run(["--dump-dom", url], names, prefix, addresses=addresses)
    return proc.stdout.decode("utf-8", "replace")
