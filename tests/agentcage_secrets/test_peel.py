"""Peeling layers of encoding: every encoding and nesting the inspectors undo, the bounds
(depth, budget), and ordinary text that must not be taken for encoded random data. Through a
real gateway, in every channel: tests/agentcage/test_layered_world.py."""

from __future__ import annotations

import base64
import binascii
import json
import os
import time
from pathlib import Path

import pytest

from agentcage.inspect import build_chain, run_chain
from agentcage.inspect.peel import Budget, PeelLimits, peel
from agentcage.inspect.protocol import InspectionContext, RequestView
from agentcage.policy import Policy
from tests.agentcage_secrets.samples import provider_samples

ENCODE = {
    "hex": binascii.hexlify, "base64": base64.b64encode, "base64url": base64.urlsafe_b64encode,
    "base32": base64.b32encode, "base32lower": lambda d: base64.b32encode(d).lower(),
    "base85": base64.b85encode, "ascii85": base64.a85encode,
    "percent": lambda d: "".join(f"%{b:02X}" for b in d).encode(),
}  # fmt: skip
LAYERS = ["hex+base64", "hex+hex", "hex+base64url", "base85", "ascii85", "base32",
          "base32lower", "base85+base64", "hex+base85", "base64+percent", "hex+ascii85",
          "base64+base32"]
ROOT = Path(__file__).resolve().parents[2]


def wrap(data: bytes, layers: str) -> bytes:
    for layer in layers.split("+"):
        data = ENCODE[layer](data)
    return data


@pytest.mark.parametrize("layers", LAYERS)
@pytest.mark.parametrize("around", [b"%s", b'{"d": "%s"}', b"f(%s);"])
def test_every_layer_is_peeled_down_to_the_material(layers, around):
    material = os.urandom(1024)
    data = around.replace(b"%s", wrap(material, layers))
    found = [layer.path for layer in peel(data, PeelLimits(min_chars=120))
             if material[16:512] in layer.data]
    assert found, f"{layers} in {around!r}: not peeled"


def test_depth_and_budget_bound_the_work():
    material = os.urandom(4096)
    four = wrap(material, "hex+base64+hex+base64")  # one layer deeper than the default
    assert not [x for x in peel(four) if material[:256] in x.data]
    assert [x for x in peel(four, PeelLimits(depth=4)) if material[:256] in x.data]
    budget = Budget(10_000)
    layers = list(peel(wrap(os.urandom(50_000), "hex+base64"), budget=budget))
    assert sum(len(x.data) for x in layers) <= 10_000 and budget.left >= 0


def chain_verdict(body: bytes, headers=(("content-type", "application/json"),),
                  path: str = "/v1/x", host: str = "api.example.test") -> tuple[str, str]:
    chain = [i for i in build_chain() if i.name != "domain"]
    view = RequestView("POST", "https", host, 443, path, tuple(headers), body)
    decision = run_chain(chain, view, InspectionContext(Policy.deny_all("-"), time.time()))[-1]
    return decision.action, decision.inspector


@pytest.mark.parametrize("layers", LAYERS)
@pytest.mark.parametrize("glued", [False, True])
def test_random_key_material_in_layers_is_blocked_by_entropy(layers, glued):
    """`glued`: right after other text of the encoding's alphabet (a WebSocket message after
    the connection's tail): the groups are cut where they start, and random bytes decoded at
    the wrong offset are still random bytes."""
    encoded = wrap(os.urandom(1024), layers).decode("latin-1")
    body = json.dumps({"d": ("hello, control" if glued else "") + encoded}).encode()
    assert chain_verdict(body) == ("block", "entropy")


@pytest.mark.parametrize("layers", ["base85", "ascii85", "base32", "hex+hex", "hex+base64",
                                    "base64+base32", "base64+percent"])
def test_a_provider_key_in_layers_is_blocked_by_secrets(layers):
    key = provider_samples()["anthropic-api-key"][0].encode()
    body = json.dumps({"note": "see", "d": wrap(key, layers).decode("latin-1")}).encode()
    assert chain_verdict(body, host="evil.example.test") == ("block", "secrets"), layers


def corpus() -> list[tuple[str, bytes]]:
    """Ordinary bodies an agent sends: this project's source, docs, compact JSON of code,
    minified-looking text without spaces."""
    code = "\n".join(p.read_text() for p in sorted((ROOT / "src").rglob("*.py"))[:60])
    docs = (ROOT / "docs" / "cage.md").read_text()
    compact = json.dumps({"model": "m", "messages": [{"role": "user", "content": code}]},
                         separators=(",", ":"))
    minified = ";".join(f"var a{i}=function(b,c){{return b[c]+{i}*c.x.y}}" for i in range(4000))
    return [("code", code.encode()), ("docs", docs.encode()), ("compact", compact.encode()),
            ("minified", minified.encode())]


@pytest.mark.parametrize(("name", "body"), corpus())
def test_ordinary_text_is_not_taken_for_encoded_random_data(name, body):
    assert chain_verdict(body)[0] != "block", name
