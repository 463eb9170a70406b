"""mitmproxy assembled for the gateway: a Master with only the addons a gateway needs.

`DumpMaster` loads about thirty addons (replay, scripts, the mitm.it onboarding web app, proxy
authentication, body and header rewriting, saving, ...). The gateway needs six: core, the proxy
server, TLS, next-layer selection, h2c refusal and the client-address block, plus an error check
that stops it if a listener cannot be bound. Fewer addons means less code in the request path,
no script loader that could unload a policy addon (a documented fail-open), no onboarding app,
and about half the start-up time, which is most of a cold `agentcage run`.

`mitmproxy.addons/__init__.py` imports every addon module; to import only ours, the package is
registered as a bare namespace first (its directory, without running the `__init__`). This is
pinned to mitmproxy 12 (the dependency says <13) and checked by `agentcage doctor`.
"""

from __future__ import annotations

import importlib.util
import sys
import types

ADDON_MODULES = ("core", "block", "disable_h2c", "proxyserver", "next_layer", "tlsconfig",
                 "errorcheck")


def _import_addon_modules() -> dict[str, types.ModuleType]:
    if "mitmproxy.addons" not in sys.modules:
        spec = importlib.util.find_spec("mitmproxy.addons")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("mitmproxy.addons not found")
        package = types.ModuleType("mitmproxy.addons")
        package.__path__ = list(spec.submodule_search_locations)
        package.__package__ = "mitmproxy.addons"
        sys.modules["mitmproxy.addons"] = package
    return {name: importlib.import_module(f"mitmproxy.addons.{name}") for name in ADDON_MODULES}


def preload() -> None:
    """Import what `build_master` needs (the slow part), without creating anything."""
    _import_addon_modules()
    import mitmproxy.master
    import mitmproxy.options  # noqa: F401

    from agentcage.gateway import mitmpatch, pacing  # noqa: F401


def build_master(extra_addons: list[object]):
    """A Master with mitmproxy's addons the gateway uses and `extra_addons` (more can be
    added later: `master.addons.add`), on the running loop; options are set by the caller."""
    from mitmproxy import master, options

    from agentcage.gateway import mitmpatch, pacing

    mitmpatch.apply_all()  # body limits: see the module
    mods = _import_addon_modules()
    m = master.Master(options.Options(), with_termlog=True)
    m.addons.add(
        mods["core"].Core(),
        mods["block"].Block(),
        mods["disable_h2c"].DisableH2C(),
        mods["proxyserver"].Proxyserver(),
        mods["next_layer"].NextLayer(),
        mods["tlsconfig"].TlsConfig(),
        mods["errorcheck"].ErrorCheck(),
        pacing.SendPacer(),
        *extra_addons,
    )
    return m
