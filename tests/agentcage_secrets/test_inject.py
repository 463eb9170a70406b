from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest

from agentcage.secrets import (
    InjectionRule,
    Injector,
    StagedSecret,
    mint,
    rule_from_config,
    rules_from_config,
)

VALUE = b'sk-real/value+with=chars"and\\'
PH = mint("API_KEY")
OTHER = mint("OTHER_KEY")


def injector(**rule) -> Injector:
    entry = {"env": "API_KEY", "inject_to": ["api.example.test"], **rule}
    return Injector(
        [rule_from_config(entry)],
        [StagedSecret("API_KEY", PH, VALUE), StagedSecret("OTHER_KEY", OTHER, b"other")],
    )


@pytest.mark.parametrize(
    ("host", "header", "injected"),
    [
        ("api.example.test", "Authorization", True),
        ("API.Example.Test.", "authorization", True),
        ("eu.api.example.test", "Authorization", True),  # subdomains of a listed name
        ("api.example.test", "x-api-key", True),
        ("api.example.test", "X-Auth-Token", True),
        ("api.example.test", "Private-Token", True),
        ("api.example.test", "X-Custom-Cred", False),
        ("api.example.test", "User-Agent", False),
    ],
)
def test_header_injection_table(host, header, injected):
    done = injector().inject_headers(host, [(header, f"Bearer {PH}")])
    assert done.blocked is None
    expected = f"Bearer {VALUE.decode()}" if injected else f"Bearer {PH}"
    assert done.value == ((header, expected),)
    assert done.injected == (("API_KEY",) if injected else ())


def test_listed_extra_header_is_a_credential_header():
    done = injector(headers=["X-Custom-Cred"]).inject_headers(
        "api.example.test", [("X-Custom-Cred", str(PH))]
    )
    assert done.value == (("X-Custom-Cred", VALUE.decode()),)


@pytest.mark.parametrize(
    "host", ["evil.example.test", "example.test", "api.example.test.evil.test", "10.0.0.1"]
)
def test_placeholder_toward_wrong_host_blocks_and_injects_nothing(host):
    headers = [("Authorization", f"Bearer {PH}"), ("X-Other", "x")]
    done = injector().inject_headers(host, headers)
    assert done.blocked is not None and "wrong host" in done.blocked and "API_KEY" in done.blocked
    assert done.value == tuple(headers) and done.injected == ()
    assert VALUE.decode() not in done.blocked


def test_placeholder_without_rule_blocks_everywhere():
    done = injector().inject_headers("api.example.test", [("Authorization", str(OTHER))])
    assert done.blocked and "OTHER_KEY" in done.blocked


def test_wrong_host_found_in_any_header_even_encoded():
    done = injector().inject_headers("evil.test", [("X-Note", quote(str(PH), safe=""))])
    assert done.blocked


def test_basic_auth_is_decoded_swapped_and_reencoded():
    basic = base64.b64encode(f"user:{PH}".encode()).decode()
    done = injector().inject_headers("api.example.test", [("Authorization", f"Basic {basic}")])
    scheme, encoded = done.value[0][1].split(" ")
    assert scheme == "Basic" and base64.b64decode(encoded) == b"user:" + VALUE
    assert done.injected == ("API_KEY",)
    wrong = injector().inject_headers("evil.test", [("Authorization", f"Basic {basic}")])
    assert wrong.blocked


def test_inject_headers_false_injects_nothing():
    done = injector(inject_headers=False).inject_headers(
        "api.example.test", [("Authorization", str(PH))]
    )
    assert done.value == (("Authorization", str(PH)),) and done.blocked is None


def test_body_and_url_only_with_inject_body():
    body = f'{{"key": "{PH}"}}'.encode()
    off = injector().inject_text("api.example.test", body)
    assert off.value == body and off.injected == ()
    on = injector(inject_body=True)
    assert on.inject_text("api.example.test", body).value == b'{"key": "' + VALUE + b'"}'
    text = on.inject_text("api.example.test", f"k={PH}")  # str, e.g. a WebSocket text frame
    assert text.value == f"k={VALUE.decode()}"
    url = on.inject_url("api.example.test", f"/v1?key={PH}&x=1")
    assert url.value == f"/v1?key={quote(VALUE, safe='')}&x=1"
    encoded = on.inject_url("api.example.test", "/v1?key=" + quote(str(PH), safe=""))
    assert encoded.value == f"/v1?key={quote(VALUE, safe='')}"


def test_body_toward_wrong_host_blocks_even_without_inject_body():
    done = injector().inject_text("evil.test", f"leak {PH}".encode())
    assert done.blocked and done.value == f"leak {PH}".encode()


def test_unknown_or_mismatched_placeholders_are_left_alone():
    stranger = mint("API_KEY")  # right name, token never issued (e.g. rotated away)
    swapped_name = f"agentcage:secret:OTHER_KEY:{PH.token}"
    for text in [str(stranger), swapped_name]:
        done = injector().inject_headers("evil.test", [("Authorization", text)])
        assert done.blocked is None and done.value == (("Authorization", text),)


def test_public_suffix_name_does_not_cover_subdomains():
    rule = InjectionRule(
        "K", (rule_from_config({"env": "K", "inject_to": ["github.io"]}).inject_to[0],)
    )
    assert rule.allows_host("github.io") and not rule.allows_host("evil.github.io")


def test_wildcard_rule_covers_subdomains_only():
    rule = rule_from_config({"env": "K", "inject_to": ["*.example.test"]})
    assert rule.allows_host("a.example.test") and not rule.allows_host("example.test")


def test_duplicate_rules_refused():
    with pytest.raises(ValueError, match="twice"):
        rules_from_config([{"env": "K", "inject_to": ["a.test"]}] * 2)


def test_json_bodies_get_escaped_values():
    on = injector(inject_body=True)
    body = f'{{"key": "{PH}"}}'.encode()
    done = on.inject_text("api.example.test", body, json_string=True)
    assert json.loads(done.value)["key"] == VALUE.decode()  # VALUE holds '"' and '\\'


def test_values_with_line_breaks_never_go_into_headers():
    evil = StagedSecret("API_KEY", PH, b"abc\r\nX-Injected: 1")
    rule = rule_from_config({"env": "API_KEY", "inject_to": ["api.example.test"]})
    done = Injector([rule], [evil]).inject_headers("api.example.test", [("Authorization", str(PH))])
    assert done.blocked and "control characters" in done.blocked
    assert done.value == (("Authorization", str(PH)),)
