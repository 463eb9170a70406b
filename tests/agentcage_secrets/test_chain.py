from __future__ import annotations

import importlib
import os

import pytest

import agentcage.inspect.protocol as protocol
from agentcage.errors import ConfigError
from agentcage.inspect import ORDER, REGISTRY, build_chain, first_block, run_chain, run_one
from agentcage.inspect.custom import load_custom
from agentcage.inspect.protocol import Decision
from agentcage.secrets import StagedSecret, mint, rule_from_config
from tests.agentcage_secrets.helpers import request
from tests.agentcage_secrets.samples import provider_samples


class Fixed:
    def __init__(self, name: str, action: str, calls: list[str]):
        self.name, self.phase, self.action, self.calls = name, "body", action, calls

    def inspect(self, request, ctx):
        self.calls.append(self.name)
        return Decision(self.action, self.name, self.name)


class Raising:
    name, phase = "raising", "body"

    def inspect(self, request, ctx):
        raise KeyError("broken")


class Liar:
    name, phase = "liar", "body"

    def inspect(self, request, ctx):
        return "allow"


def test_first_block_wins_and_later_inspectors_do_not_run(ctx):
    calls: list[str] = []
    chain = [
        Fixed("a", "allow", calls),
        Fixed("b", "flag", calls),
        Fixed("c", "block", calls),
        Fixed("d", "allow", calls),
    ]
    decisions = run_chain(chain, request(), ctx)
    assert [d.action for d in decisions] == ["allow", "flag", "block"]
    assert calls == ["a", "b", "c"]
    assert first_block(decisions).inspector == "c"


@pytest.mark.parametrize("broken", [Raising(), Liar()])
def test_an_inspector_that_raises_or_lies_blocks(ctx, broken):
    calls: list[str] = []
    decisions = run_chain(
        [Fixed("a", "allow", calls), broken, Fixed("z", "allow", calls)], request(), ctx
    )
    last = decisions[-1]
    assert last.action == "block" and last.inspector == broken.name and last.severity == "error"
    assert broken.name in last.reason
    assert calls == ["a"]


def test_custom_inspector_that_raises_blocks_through_the_chain(ctx):
    exploding = load_custom("tests.agentcage_secrets.custom_sample:Exploding", {})
    decision = run_one(exploding, request(), ctx)
    assert decision.action == "block" and "exploding" in decision.reason
    assert "RuntimeError: boom" in decision.reason


def test_one_registry_in_the_documented_order_fitting_the_gateway_protocol():
    # the protocol module holds the protocol only: one registry, one chain runner elsewhere;
    # the gateway no longer has an inspector module of its own
    assert not hasattr(protocol, "REGISTRY")
    assert not hasattr(protocol, "run_chain")
    with pytest.raises(ImportError):
        importlib.import_module("agentcage.gateway.inspectors")
    assert ORDER == ("domain", "secrets", "body-size", "entropy", "content-type")
    assert tuple(REGISTRY) == ORDER
    for name, factory in REGISTRY.items():
        inspector = factory()
        assert inspector.name == name
        assert inspector.phase in ("headers", "body")
        assert callable(inspector.inspect)


def test_build_chain_from_config_runs_in_the_documented_order(ctx):
    staged = [StagedSecret("K", mint("K"), b"real-value-" + os.urandom(8).hex().encode())]
    rules = [rule_from_config({"env": "K", "inject_to": ["api.example.test"]})]
    chain = build_chain(
        staged=staged,
        rules=rules,
        entropy={
            "enable": True,
            "body_threshold": 7.0,
            "body_min_bytes": 256,
            "value_threshold": 5.5,
            "value_min_bytes": 64,
        },
        content_type={"enable": True, "base64_min_chars": 256},
        max_request_body=1024,
        custom=[
            {
                "name": "tests.agentcage_secrets.custom_sample:PathPrefix",
                "config": {"prefix": "/admin"},
            }
        ],
    )
    assert [i.name for i in chain] == [*ORDER, "path-prefix"]
    body_chain = [i for i in chain if i.name != "domain"]
    gh = provider_samples()["github-token"][0]
    decisions = run_chain(body_chain, request(body=gh.encode()), ctx)
    assert decisions[-1].inspector == "secrets" and decisions[-1].action == "block"
    decisions = run_chain(body_chain, request(path="/admin/x", body=b"hello"), ctx)
    assert decisions[-1].inspector == "path-prefix" and decisions[-1].action == "block"
    decisions = run_chain(body_chain, request(path="/ok", body=b"hello"), ctx)
    assert all(d.action == "allow" for d in decisions) and len(decisions) == len(body_chain)


def test_build_chain_refuses_unknown_settings():
    with pytest.raises(ConfigError, match="entropy: unknown settings"):
        build_chain(entropy={"treshold": 3})


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("tests.agentcage_secrets.no_such_module:X", "cannot import"),
        ("tests.agentcage_secrets.custom_sample:Missing", "has no Missing"),
        ("tests.agentcage_secrets.custom_sample:NOT_CALLABLE", "not callable"),
        ("tests.agentcage_secrets.custom_sample:refuses", "refused its settings"),
        ("tests.agentcage_secrets.custom_sample:NoPhase", "phase must be"),
        ("tests.agentcage_secrets.custom_sample:PathPrefix", "refused its settings"),  # no prefix
        ("nodots", "package.module:Factory"),
    ],
)
def test_custom_loader_fails_closed_with_a_config_error(path, message):
    with pytest.raises(ConfigError, match=message):
        load_custom(path, {})


def test_custom_loader_dotted_forms(ctx):
    for path in (
        "tests.agentcage_secrets.custom_sample:PathPrefix",
        "tests.agentcage_secrets.custom_sample.PathPrefix",
    ):
        inspector = load_custom(path, {"prefix": "/x"})
        assert inspector.inspect(request(path="/x/1"), ctx).action == "block"
