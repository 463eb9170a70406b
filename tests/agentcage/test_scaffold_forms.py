"""`run SCAFFOLD` reads each built-in scaffold's stored validated form instead of the YAML and
the model: the forms, the overrides applied to them and the state file written from them are
held here to be exactly what the model makes, so that the two paths can never drift apart."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from agentcage.config.document import document_text
from agentcage.config.forms import FORMS
from agentcage.config.load import apply_overrides, dump_config, load_config_text
from agentcage.config.overrides import Overrides, vouched
from agentcage.config.scaffolds import (
    ALIASES,
    FORMS_FILE,
    check_scaffold,
    render_forms,
    scaffold_config,
    scaffold_names,
    scaffold_spec,
)
from agentcage.config.spec import CageSpec
from agentcage.errors import ConfigError

SCAFFOLDS = sorted({*scaffold_names(), *ALIASES})


def test_forms_py_is_what_the_model_makes_of_the_scaffolds_now():
    yaml_files = {p.stem for p in (Path(FORMS_FILE).parent.parent / "data" / "scaffolds")
                  .glob("*.yaml")}
    assert set(FORMS) == yaml_files == set(scaffold_names())
    assert FORMS_FILE.read_text() == render_forms(), (
        "forms.py is stale: run `python -m agentcage.config.scaffolds` and commit it")


def _form(scaffold: str) -> dict:
    return json.loads(json.dumps(FORMS[ALIASES.get(scaffold, scaffold)]))


@pytest.mark.parametrize("scaffold", SCAFFOLDS)
@pytest.mark.parametrize("name", ["my-cage", "run-0a1b2c", "x"])
def test_a_form_with_its_name_is_the_models_result_key_for_key(scaffold, name):
    made = vouched(_form(scaffold), Overrides(name=name))
    model = scaffold_config(scaffold, name)
    assert made == model.model_dump(mode="json")
    assert document_text(made) == dump_config(model)  # the same keys in the same order
    assert CageSpec.of(made) == model.spec()


# What `run` may be given, and the model accepts: applied to the form, exactly the model's
# result (and the form's path is the one taken: no model, no YAML).
ACCEPTED = [
    Overrides(name="run-abc123", lifecycle="ephemeral"),
    Overrides(name="bench", uplink="netns:fn-116f15-c1", dns=["10.200.255.53"],
              lifecycle="ephemeral"),
    Overrides(name="t", uplink="host", dns=["2001:db8::0001", "010.1.2.3"[1:]],
              trust=["10.200.0.1/16", "fd00::/8"], upstream_ca=["ca.pem", "/tmp/../x/ca.pem"],
              allow=["Allowed.Example.TEST", "*.example.test", "api.example.com."],
              lifecycle="ephemeral"),
    Overrides(name="a-b", allow=["allowed.example.test"], trust=["10.200.0.0/16"]),
    Overrides(name="c", upstream_ca=["/path/with space/é ca.pem"]),
]


@pytest.mark.parametrize("scaffold", SCAFFOLDS)
@pytest.mark.parametrize("overrides", ACCEPTED, ids=lambda o: o.name)
def test_overrides_on_a_form_are_what_the_model_makes_of_them(scaffold, overrides):
    made = vouched(_form(scaffold), overrides)
    assert made is not None, "the form's path should vouch for this"
    assert overrides.name is not None
    model = apply_overrides(scaffold_config(scaffold, overrides.name), **asdict(overrides))
    assert made == model.model_dump(mode="json")
    assert document_text(made) == dump_config(model)
    assert scaffold_spec(scaffold, overrides) == model.spec()


# What the form's path leaves to the model: its refusal, in its words, is what `run` says.
REFUSED = [
    Overrides(name="r", uplink="vpn"),
    Overrides(name="r", uplink="netns:bad/name"),
    Overrides(name="r", dns=["resolver"]),
    Overrides(name="r", trust=["nope"]),
    Overrides(name="r", allow=["*"]),
    Overrides(name="r", allow=["*.com"]),
    Overrides(name="r", allow=["1.2.3.4"]),
    Overrides(name="r", allow=["https://example.com/x"]),
    Overrides(name="r", lifecycle="forever"),
    Overrides(name="yes"),  # YAML reads the scaffold's `name: yes` as a boolean
    Overrides(name="null"),
    Overrides(name="123"),  # and `name: 123` as a number
]


@pytest.mark.parametrize("scaffold", SCAFFOLDS)
@pytest.mark.parametrize("overrides", REFUSED, ids=lambda o: f"{o.name}-{o.uplink}-{o.dns}-"
                         f"{o.trust}-{o.allow}-{o.lifecycle}")
def test_what_the_model_refuses_the_form_leaves_to_the_model(scaffold, overrides):
    assert vouched(_form(scaffold), overrides) is None
    assert overrides.name is not None
    with pytest.raises(ConfigError) as model:
        apply_overrides(scaffold_config(scaffold, overrides.name), **asdict(overrides))
    with pytest.raises(ConfigError) as run:
        scaffold_spec(scaffold, overrides)
    assert str(run.value) == str(model.value)


def test_names_that_are_not_strings_in_yaml_or_odd_ones_take_the_models_path():
    for name in ("yes", "no", "on", "off", "true", "false", "null", "9lives", "1e3", "0x1f"):
        assert vouched(_form("minimal"), Overrides(name=name)) is None, name
    for name in ("y", "n", "nulls", "yes-no", "run-1e3"):
        assert vouched(_form("minimal"), Overrides(name=name)) is not None, name


def test_lists_the_model_would_refuse_together_take_its_path():
    form = _form("minimal")
    form["domains"] = {"mode": "blocklist", "allow": [], "block": ["evil.example.test"],
                       "passthrough": []}
    assert vouched(json.loads(json.dumps(form)), Overrides(name="a", allow=["x.example"])) is None
    assert vouched(form, Overrides(name="a", dns=["10.0.0.1"])) is not None


def test_more_than_a_page_of_values_takes_the_models_path():
    many = [f"d{i}.example.test" for i in range(1001)]
    assert vouched(_form("minimal"), Overrides(name="a", allow=many)) is None
    assert vouched(_form("minimal"), Overrides(name="a", upstream_ca=["/" + "x" * 20000])) is None
    assert vouched(_form("minimal"), Overrides(name="a", upstream_ca=["/ca\x1b.pem"])) is None


def test_an_unknown_scaffold_is_refused_as_before():
    with pytest.raises(ConfigError, match="scaffold 'nope' does not exist; choose one of: "
                                          "arch, busybox, claude-code, codex, debian, minimal, "
                                          "openclaw, pi, ubuntu"):
        check_scaffold("nope")
    check_scaffold("claude")


# ---- the state file: written without PyYAML, read back by it exactly ---------------------------

ODD_STRINGS = ["", " lead", "trail ", '"q"', "back\\slash", "tab\tnl\nnul\x00", "\x7f\x85\xa0",
               "é", "\u2028\u2029", "\ufeff", "\ufffe\uffff", "\ud83d\ude00", "\U0001f600",
               "\udcff", "#x", "- y", "? z", ": w", "{a}", "[b]", "'", "&a *b !c %d @e `f",
               "yes", "null", "~", "1", "1.0", "0x1f", "2024-01-01", "=", "<<", "a: b", "a #b"]


def _same(a, b) -> bool:
    """Equal, and of the same types, key order and sign of zero (NaN equal to NaN)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_the_state_file_reads_back_as_exactly_what_was_written():
    doc = {
        "strings": ODD_STRINGS,
        "floats": [0.0, -0.0, 1e-05, 1e16, 1e17, 1.5, -2.5e-300, 1e308, float("inf"),
                   float("-inf"), float("nan"), 0.1],
        "ints": [0, -1, 10**40, -(10**40)],
        "others": [True, False, None],
        "nested": {"a": {"b": {"c": [1, {"d": []}, {}]}}, "e": []},
        **{s: i for i, s in enumerate(ODD_STRINGS)},  # as keys too
        "k" * 200: "a long key", "k" * 1100: "a longer one than YAML's simple keys",
    }
    text = document_text(doc)
    assert text.isascii() and all(c.isprintable() or c == "\n" for c in text)
    assert _same(yaml.safe_load(text), doc)


@pytest.mark.parametrize("text", [
    "name: a\ncontainer: {env: {A: \"\\U0001F600 \\x85\"}, files: {/home/agent/x: \"é\\n\"}}",
    "name: a\nrate_limit: {requests_per_second: 1e-05}\ninspectors: "
    "[{name: 'm:F', config: {x: [1, 2.5e-7, null, {'y': 'z'}]}}]",
    "name: a\ndomains: {mode: blocklist, block: ['*.example.test']}",
])
def test_a_cage_yaml_written_to_the_state_loads_back_as_the_same_model(text):
    config = load_config_text(text)
    assert load_config_text(dump_config(config)) == config


@pytest.mark.parametrize("scaffold", sorted(scaffold_names()))
@pytest.mark.parametrize("overrides", [
    Overrides(),
    Overrides(trust=["10.200.0.0/16"], upstream_ca=["/etc/ssl/certs/ca-certificates.crt"],
              host_user=1234),
], ids=["none", "create's options"])
def test_create_of_an_unedited_scaffold_makes_what_the_model_makes(scaffold, overrides):
    from dataclasses import replace

    from agentcage.config.scaffolds import scaffold_text, unedited_spec

    text = scaffold_text(scaffold, "made")
    fast = unedited_spec(text, overrides)
    assert fast is not None  # the form vouches for it
    model = apply_overrides(load_config_text(text), **asdict(replace(overrides,
                                                                     name="made"))).spec()
    assert fast == model


@pytest.mark.parametrize("edit", [
    lambda t: t + "# a comment of the user's\n",  # the same cage, but not the text: the model
    lambda t: t.replace("lifecycle: interactive", "lifecycle: service"),
    lambda t: t.replace("scaffold: minimal", "scaffold: nonesuch"),
    lambda t: t.replace("name: made", "name: Bad Name"),
    lambda t: "",
])
def test_anything_but_an_unedited_scaffold_goes_to_the_model(edit):
    from agentcage.config.scaffolds import scaffold_text, unedited_spec

    assert unedited_spec(edit(scaffold_text("minimal", "made")), None) is None
