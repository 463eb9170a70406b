"""What the console may run: a shipped preset, or a container engine with an image and flags
the remediation map knows. Nothing else: no command template, no free-form flag, no bwrap
argument list (a bind mount is a flag too), no interpreter path.

Everything arrives as untrusted form or JSON fields and is checked here before a launcher is
built; a refusal names the field.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from agentsec import catalogue
from agentsec.errors import AgentsecError
from agentsec.launchers import Launch, container_launch, load_presets, preset_launch

ENGINES = ("docker", "podman")
# An image reference; never starting with '-' so it cannot be read as an engine option.
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")
FIELDS = {"preset", "image", "engine", "flags", "flag"}
TEMPLATE_FIELDS = {"template", "command", "cmd", "argv", "python", "engine_bin", "engine-bin"}


class RunRefused(AgentsecError):
    """A run request the console will not carry out (HTTP 400)."""


@dataclass(frozen=True)
class RunRequest:
    preset: str | None
    engine: str | None
    image: str | None
    flags: tuple[str, ...]

    @property
    def label(self) -> str:
        if self.preset:
            return f"{self.preset}_{self.image}" if self.image else self.preset
        return f"{self.engine}_{self.image}"


def _one(fields: dict[str, list[str]], name: str) -> str | None:
    values = [v for v in fields.get(name, []) if v != ""]
    if len(values) > 1:
        raise RunRefused(f"{name}: give one value")
    return values[0] if values else None


def known_flags() -> tuple[str, ...]:
    return catalogue.load().flag_order()


def parse_run_request(fields: dict[str, list[str]]) -> RunRequest:
    """Check a request's fields; raise RunRefused with the reason."""
    names = set(fields)
    if names & TEMPLATE_FIELDS:
        raise RunRefused(
            "command templates are refused by the console: run shipped presets, or an engine "
            "and an image with known flags"
        )
    unknown = sorted(names - FIELDS)
    if unknown:
        raise RunRefused(f"unknown fields: {', '.join(unknown)}")
    preset, engine, image = _one(fields, "preset"), _one(fields, "engine"), _one(fields, "image")
    flags = tuple(fields.get("flags", []) + fields.get("flag", []))
    if image is not None and not _IMAGE.match(image):
        raise RunRefused("image: not an image reference")
    if preset is not None:
        if engine is not None or flags:
            raise RunRefused("a preset carries its own engine and flags: give preset and image")
        presets = load_presets()
        if preset not in presets:
            raise RunRefused(f"preset: unknown preset {preset!r}")
        if presets[preset].takes_directory:  # a path on this host, run as root: not from a page
            raise RunRefused(f"preset: {preset} runs a root directory of this host; run it with "
                             f"agentsec blast-radius preset {preset} --image DIR")
        if presets[preset].needs_image and image is None:
            raise RunRefused(f"image: preset {preset} runs a container and needs an image")
        if not presets[preset].needs_image and image is not None:
            raise RunRefused(f"image: preset {preset} runs no container")
        return RunRequest(preset, None, image, ())
    if engine not in ENGINES:
        raise RunRefused(f"engine: one of {', '.join(ENGINES)} (or give a preset)")
    if image is None:
        raise RunRefused("image: an engine run needs an image")
    allowed = set(known_flags())
    bad = [flag for flag in flags if flag not in allowed]
    if bad:
        raise RunRefused(f"flags: not in the remediation map: {', '.join(bad)}")
    return RunRequest(None, engine, image, flags)


def launch_for(request: RunRequest) -> Launch:
    how = f"agentsec ui: {request.label}"
    if request.preset:
        return preset_launch(request.preset, how, request.image)
    argv = tuple(word for flag in request.flags for word in shlex.split(flag))
    assert request.engine is not None and request.image is not None
    return container_launch(request.engine, request.image, argv, how)
