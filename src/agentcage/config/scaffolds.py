"""Built-in scaffolds: commented cage.yaml files shipped as package data, and each one's
validated form (forms.py, generated from them by the model), which `run` of a scaffold uses
instead of parsing and validating the YAML again.

`python -m agentcage.config.scaffolds` regenerates forms.py; a test fails while it differs
from what the model makes of the scaffolds, so the two never drift apart.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcage.errors import ConfigError
from agentcage.names import NAME_RE

if TYPE_CHECKING:
    from agentcage.config.model import CageConfig
    from agentcage.config.overrides import Overrides
    from agentcage.config.spec import CageSpec

ALIASES = {"claude": "claude-code"}
_PLACEHOLDER = "__NAME__"
FORMS_FILE = Path(__file__).with_name("forms.py")
# Package data, read from the package's directory: importlib.resources would cost every
# command that lists the scaffolds (the CLI does, for `init`'s help) more than the reading.
_DIR = Path(__file__).parent.parent / "data" / "scaffolds"


def _dir() -> Path:
    return _DIR


def scaffold_names() -> list[str]:
    files = [p.name for p in _dir().iterdir() if p.name.endswith(".yaml")]
    return sorted(f.removesuffix(".yaml") for f in files)


def user_dir() -> Path:
    """Where a user's own scaffolds live (`scaffold create`): beside their cages' state."""
    from agentcage.state import state_root

    return state_root() / "scaffolds"


def user_scaffold_names() -> list[str]:
    directory = user_dir()
    if not directory.is_dir():
        return []
    return sorted(p.name.removesuffix(".yaml") for p in directory.iterdir()
                  if p.name.endswith(".yaml") and NAME_RE.match(p.name.removesuffix(".yaml")))


def all_scaffold_names() -> list[str]:
    """The built-in scaffolds, then the user's own."""
    return [*scaffold_names(), *user_scaffold_names()]


def _unknown(scaffold: str) -> ConfigError:
    known = ", ".join(all_scaffold_names())
    return ConfigError(f"scaffold {scaffold!r} does not exist; choose one of: {known}")


def _template(scaffold: str) -> str:
    """A scaffold's text with its name placeholder: built in, else the user's own."""
    key = ALIASES.get(scaffold, scaffold)
    if key in scaffold_names():
        return (_dir() / f"{key}.yaml").read_text()
    if NAME_RE.match(key) and key in user_scaffold_names():
        try:
            return (user_dir() / f"{key}.yaml").read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"scaffold {key}: cannot read {user_dir() / key}.yaml "
                              f"({getattr(e, 'strerror', None) or e})") from None
    raise _unknown(scaffold)


def scaffold_text(scaffold: str, name: str) -> str:
    """The commented cage.yaml of `scaffold` for a cage called `name`."""
    template = _template(scaffold)
    if not NAME_RE.match(name):
        raise ConfigError(
            f"name {name!r}: use 1-63 of a-z, 0-9 and '-', starting with a letter or digit"
        )
    return template.replace(_PLACEHOLDER, name)


def create_user_scaffold(name: str, source: str, force: bool = False) -> Path:
    """The user's own scaffold `name`, a copy of `source` (built in or theirs) to edit."""
    if not NAME_RE.match(name):
        raise ConfigError(f"scaffold name {name!r}: use 1-63 of a-z, 0-9 and '-', starting "
                          "with a letter or digit")
    if name in scaffold_names() or name in ALIASES:
        raise ConfigError(f"{name} is a built-in scaffold; choose another name")
    template = _template(source)
    lines = template.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("scaffold:"):
            lines[i] = f"scaffold: {name}\n"
            break
    path = user_dir() / f"{name}.yaml"
    if path.exists() and not force:
        raise ConfigError(f"{path} exists; --force replaces it")
    from agentcage.state import atomic_write, ensure_private_dir

    ensure_private_dir(user_dir().parent)
    ensure_private_dir(user_dir())
    atomic_write(path, "".join(lines), mode=0o644)
    return path


def check_scaffold(scaffold: str) -> None:
    """Refuse an unknown scaffold as `scaffold_text` does (reading none when it has a form)."""
    from agentcage.config.forms import FORMS

    if ALIASES.get(scaffold, scaffold) not in FORMS:
        scaffold_text(scaffold, "x")


def scaffold_config(scaffold: str, name: str) -> CageConfig:
    from agentcage.config.load import load_config_text

    return load_config_text(scaffold_text(scaffold, name), source=f"scaffold {scaffold}")


def scaffold_spec(scaffold: str, overrides: Overrides) -> CageSpec:
    """What `run SCAFFOLD` runs: the scaffold for the cage `overrides.name`, with the
    command-line choices applied. From the scaffold's stored validated form when they can be
    vouched for (overrides.py), else (and for every refusal) by the model."""
    from agentcage.config.forms import FORMS
    from agentcage.config.overrides import vouched
    from agentcage.config.spec import CageSpec

    form = FORMS.get(ALIASES.get(scaffold, scaffold))
    doc = vouched(json.loads(json.dumps(form)), overrides) if form is not None else None
    if doc is not None:
        return CageSpec.of(doc)
    from dataclasses import asdict

    from agentcage.config.load import apply_overrides

    assert overrides.name is not None
    config = scaffold_config(scaffold, overrides.name)
    return apply_overrides(config, **asdict(overrides)).spec()


def unedited_spec(text: str, overrides: Overrides | None) -> CageSpec | None:
    """The spec of a cage.yaml that is a scaffold's text as `init` wrote it, unedited (the
    README's flow), with the command line's `overrides` applied: from the scaffold's stored
    form, as `run` makes its spec, so that `cage create` needs no model. None for any other
    text, or overrides the form cannot vouch for: the model decides (and refuses, in its
    words)."""
    from dataclasses import replace

    from agentcage.config.forms import FORMS
    from agentcage.config.overrides import Overrides, vouched
    from agentcage.config.spec import CageSpec

    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in ("name", "scaffold") and key not in found:
            found[key] = value.strip()
    name, scaffold = found.get("name"), found.get("scaffold")
    if not name or not scaffold or ALIASES.get(scaffold, scaffold) not in FORMS:
        return None
    try:
        if text != scaffold_text(scaffold, name):
            return None
    except ConfigError:
        return None
    form = FORMS[ALIASES.get(scaffold, scaffold)]
    doc = vouched(json.loads(json.dumps(form)), replace(overrides or Overrides(), name=name))
    return CageSpec.of(doc) if doc is not None else None


# ---- forms.py -----------------------------------------------------------------------------------

_FORM_NAME = "scaffold-form"  # the name a form is made with (any valid one; it is replaced)


def validated_form(scaffold: str) -> dict[str, Any]:
    """The validated form the model makes of `scaffold`, its name the placeholder."""
    form = scaffold_config(scaffold, _FORM_NAME).model_dump(mode="json")
    if _FORM_NAME in json.dumps({**form, "name": ""}):
        # the placeholder is substituted in the text: a form holds it in `name` alone
        raise ValueError(f"scaffold {scaffold} uses {_PLACEHOLDER} beyond `name:`")
    return {**form, "name": _PLACEHOLDER}


def render_forms() -> str:
    """The text of forms.py, as the model makes it of the scaffolds now."""
    import pprint

    parts = [
        '"""GENERATED by `python -m agentcage.config.scaffolds` from the scaffolds\' YAML '
        "(data/scaffolds/)\nand the model: each one's validated form (the model's JSON form of "
        "it; its name is filled\nin). Do not edit: change the scaffold and regenerate. A test "
        'fails while this differs\nfrom what the model makes of the scaffolds."""\n\n'
        "from typing import Any\n\nFORMS: dict[str, dict[str, Any]] = {}\n"
    ]
    for name in scaffold_names():
        prefix = f"FORMS[{name!r}] = "
        text = pprint.pformat(validated_form(name), width=99 - len(prefix), sort_dicts=False)
        parts.append("\n" + prefix + text.replace("\n", "\n" + " " * len(prefix)) + "\n")
    return "".join(parts)


if __name__ == "__main__":
    FORMS_FILE.write_text(render_forms())
    print(f"wrote {FORMS_FILE}")
