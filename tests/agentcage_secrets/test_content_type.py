from __future__ import annotations

import base64
import json
import os

import pytest

from agentcage.inspect import ContentTypeInspector, ContentTypeSettings
from tests.agentcage_secrets.helpers import request

BLOB = base64.b64encode(os.urandom(300)).decode()  # 400 characters


@pytest.mark.parametrize(
    ("ctype", "body", "action"),
    [
        ("application/json", json.dumps({"f": BLOB}), "flag"),
        ("text/plain; charset=utf-8", "see: " + BLOB, "flag"),
        (
            "application/x-www-form-urlencoded",
            "a=1&f=" + BLOB.replace("+", "-").replace("/", "_"),
            "flag",
        ),
        ("", "note " + BLOB, "flag"),  # undeclared but text
        ("application/json", json.dumps({"f": BLOB[:200]}), "allow"),  # under 256 characters
        ("application/json", json.dumps({"id": "x" * 400}), "allow"),  # not mixed like base64
        ("application/octet-stream", BLOB, "allow"),  # not a text body
        ("", os.urandom(2000).hex(), "allow"),  # hex only: no upper case
    ],
)
def test_base64_blobs_in_text_bodies(ctx, ctype, body, action):
    headers = [("Content-Type", ctype)] if ctype else []
    decision = ContentTypeInspector().inspect(request(headers=headers, body=body.encode()), ctx)
    assert decision.action == action, decision


def test_action_and_threshold_configurable(ctx):
    req = request(headers=[("Content-Type", "application/json")], body=BLOB.encode())
    assert ContentTypeInspector(ContentTypeSettings(action="block")).inspect(req, ctx).action == (
        "block"
    )
    assert (
        ContentTypeInspector(ContentTypeSettings(base64_min_chars=1000)).inspect(req, ctx).action
        == "allow"
    )
    assert ContentTypeInspector(ContentTypeSettings(enable=False)).inspect(req, ctx).action == (
        "allow"
    )
