"""scripts/profiles.py, loaded as a module for the tests of the README's sandbox table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "profiles.py"


def load() -> ModuleType:
    if "profiles" in sys.modules:
        return sys.modules["profiles"]
    spec = importlib.util.spec_from_file_location("profiles", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["profiles"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
