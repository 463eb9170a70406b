"""The host's python3, lent to one command in a cage whose image has none: how `verify`
measures a cage on busybox or any image without Python (the probe needs 3.8+, stdlib only).

The host's /usr is bound read-only at LENT_AT for that command alone, and the interpreter is
started through the host's own dynamic loader there, with the host's library directories:
nothing of it depends on what the image has (a busybox image has no C library at all). The
command is otherwise the cage's as any other: same user, namespaces, seccomp filter, network.
What the host's /usr holds is what a cage on the host's own root sees at /usr anyway.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from agentcage.errors import BackendError

LENT_AT = "/run/agentcage/lent-usr"
HOST_PYTHON = "/usr/bin/python3"
PT_INTERP = 3
PYTHON_NAMES = ("python3", "python")


@dataclass(frozen=True)
class LentPython:
    argv: tuple[str, ...]  # what starts the interpreter inside the cage (then its arguments)
    env: tuple[tuple[str, str], ...]
    source: str = "/usr"  # the host directory bound read-only at LENT_AT


def elf_interpreter(path: str) -> str:
    """The dynamic loader an ELF executable names (its PT_INTERP); BackendError if none."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # a 64-bit ELF file
            raise BackendError(f"{path} is not a 64-bit ELF executable")
        endian = "<" if head[5] == 1 else ">"
        phoff, = struct.unpack_from(endian + "Q", head, 32)
        phentsize, phnum = struct.unpack_from(endian + "HH", head, 54)
        for index in range(phnum):
            f.seek(phoff + index * phentsize)
            p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack(
                endian + "IIQQQQ", f.read(40))
            if p_type == PT_INTERP:
                f.seek(p_offset)
                return f.read(p_filesz).rstrip(b"\0").decode()
    raise BackendError(f"{path} names no dynamic loader")


def lend(python: str = HOST_PYTHON) -> LentPython:
    """How to run the host's `python` from LENT_AT; BackendError when it is not wholly under
    /usr (a host without merged /usr)."""
    real = os.path.realpath(python)
    loader = os.path.realpath(elf_interpreter(real))
    for path in (real, loader):
        if not path.startswith("/usr/"):
            raise BackendError(f"the host's python3 ({path}) is not under /usr, so it cannot "
                               "be lent to a cage: install python3 in the cage's image")

    def inside(path: str) -> str:
        return LENT_AT + path.removeprefix("/usr")

    libraries = dict.fromkeys([os.path.dirname(loader), "/usr/lib"])
    return LentPython(
        argv=(inside(loader), "--library-path", ":".join(map(inside, libraries)), inside(real)),
        env=(("PYTHONHOME", LENT_AT), ("PYTHONNOUSERSITE", "1"),
             ("PYTHONDONTWRITEBYTECODE", "1")),
    )


def command_with(lent: LentPython, command: Sequence[str]) -> tuple[str, ...]:
    """`python3 ARGS...` as the lent interpreter runs it; BackendError for another command."""
    if not command or os.path.basename(command[0]) not in PYTHON_NAMES:
        raise BackendError("--lend-python runs python3 only: write `-- python3 ARGS...`")
    return (*lent.argv, *command[1:])


def has_python(layer: str) -> bool:
    """Whether an image's root has a python3 on the usual paths (a link counts)."""
    return any(os.path.lexists(os.path.join(layer, d, "python3"))
               for d in ("usr/local/bin", "usr/bin", "bin"))
