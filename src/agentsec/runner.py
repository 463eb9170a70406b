"""Run the probe as a child process, inside whatever a command prefix sets up.

The probe's source is fed on stdin (``python3 -``), so nothing has to be mounted into the
sandbox for it: any sandbox that can start python3 can be measured.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentsec.errors import CaptureError, ProbeRunError
from agentsec.untrusted import ProbeOutput, clean_text, parse_probe_output

PROBE_PATH = Path(__file__).resolve().parent / "probe" / "blast_probe.py"
DEFAULT_PROBE_TIMEOUT_S = 2.0
# Start-up of the sandbox and the interpreter, on top of the probe's own deadline.
START_MARGIN_S = 20.0


@dataclass(frozen=True)
class ProbeRun:
    output: ProbeOutput
    rc: int
    argv: tuple[str, ...]


def probe_source() -> str:
    return PROBE_PATH.read_text(encoding="utf-8")


def _probe_timeout(env: Mapping[str, str]) -> float:
    try:
        return max(0.1, float(env.get("AGENTSEC_PROBE_TIMEOUT", DEFAULT_PROBE_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_PROBE_TIMEOUT_S


def _tail(text: str, lines: int = 3) -> str:
    kept = [clean_text(line, 200) for line in text.strip().splitlines()[-lines:]]
    return " | ".join(kept)


def run_probe(
    prefix: Sequence[str] = (),
    python: str | None = sys.executable,
    env: Mapping[str, str] | None = None,
    after: Callable[[int, Mapping[str, str]], None] | None = None,
) -> ProbeRun:
    """Run the probe under ``prefix`` (e.g. a bwrap argv) with ``python``; parse its one line.

    With ``python`` None the prefix is a whole command that runs the probe itself (a command
    template naming the probe file); the source still goes to its stdin, for ``python3 -``.
    """
    child_env = dict(os.environ if env is None else env)
    argv = (*prefix, python, "-") if python else tuple(prefix)
    deadline = _probe_timeout(child_env) + 1.0 + START_MARGIN_S
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env,
            text=True,
            # A session of its own, so a timeout kills the whole sandbox, not only its launcher.
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise ProbeRunError(f"cannot start the probe: {argv[0]!r} not found") from exc
    except PermissionError as exc:
        raise ProbeRunError(f"cannot start the probe: {argv[0]!r} is not executable") from exc
    try:
        stdout, stderr = proc.communicate(probe_source(), timeout=deadline)
    except subprocess.TimeoutExpired as exc:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ProbeRunError(f"the probe did not finish within {deadline:.0f} s") from exc
    finally:
        if after is not None and proc.returncode is not None:  # ended and reaped
            after(proc.pid, child_env)
    interpreter_missing = proc.returncode == 127 or ("python" in stderr and "not found" in stderr)
    if interpreter_missing and not stdout.strip():
        raise ProbeRunError(
            f"{python!r} could not be started inside the sandbox (exit {proc.returncode}): "
            "install python3 in it or pass the interpreter's path"
        )
    if "ModuleNotFoundError" in stderr and not stdout.strip():
        raise ProbeRunError(
            f"{python or 'the interpreter'} in the sandbox lacks part of the standard library "
            f"({_tail(stderr, 1)}): install the full python3 package, not python3-minimal"
        )
    if not stdout.strip() and proc.returncode != 0:
        # Nothing came out: the launcher itself failed (no such cage, no engine, a refused
        # flag), and what it said is the error, not "no JSON object".
        said = f": {_tail(stderr)}" if stderr.strip() else ""
        raise ProbeRunError(
            f"{clean_text(argv[0], 80)} exited {proc.returncode} before the probe printed "
            f"anything{said}"
        )
    try:
        output = parse_probe_output(stdout, source="the probe's output")
    except CaptureError as exc:
        detail = f"; stderr: {_tail(stderr)}" if stderr.strip() else ""
        raise ProbeRunError(f"{exc} (exit {proc.returncode}){detail}") from exc
    return ProbeRun(output=output, rc=proc.returncode, argv=argv)
