"""The whole path of a secret without the proxy: store -> stage (tmpfs) -> gateway loads ->
chain passes -> injected toward its host only -> upstream echoes it -> redacted before the cage.
Every step uses the real pieces (encrypted store, tmpfs file, inspectors, injector, redactor)."""

from __future__ import annotations

import base64
import json
import os
from urllib.parse import quote

from agentcage.inspect import build_chain, first_block, run_chain
from agentcage.secrets import (
    Injector,
    PlaceholderBook,
    Redactor,
    collect,
    load_staged,
    rules_from_config,
    set_secret,
    stage,
)
from agentcage.secrets.filestore import EncryptedFileStore
from tests.agentcage_secrets.helpers import request

CANARY = b"sk-ant-api03-canary" + os.urandom(24).hex().encode()


def test_canary_reaches_its_upstream_only_and_never_comes_back(tmp_path, shm_dir, ctx):
    store, book = EncryptedFileStore(tmp_path / "secrets"), PlaceholderBook(tmp_path / "secrets")
    placeholder = str(set_secret(store, book, "ANTHROPIC_API_KEY", CANARY))
    rules = rules_from_config([{"env": "ANTHROPIC_API_KEY", "inject_to": ["api.anthropic.com"]}])
    staged_path = stage(collect(store, book), shm_dir / "cage" / "secrets.json")

    # Gateway side, from the staged file only.
    staged = load_staged(staged_path)
    chain = [i for i in build_chain(staged=staged, rules=rules) if i.name != "domain"]
    injector, redactor = Injector(rules, staged), Redactor(staged)

    cage_request = request(
        host="api.anthropic.com",
        path="/v1/messages",
        headers=[("x-api-key", placeholder), ("content-type", "application/json")],
        body=b'{"messages": [{"role": "user", "content": "hi"}]}',
    )
    assert first_block(run_chain(chain, cage_request, ctx)) is None
    wire = injector.inject_headers(cage_request.host, cage_request.headers)
    assert wire.blocked is None and wire.injected == ("ANTHROPIC_API_KEY",)
    assert ("x-api-key", CANARY.decode()) in wire.value

    # The same placeholder toward another host: blocked, nothing injected.
    elsewhere = injector.inject_headers("sink.example.test", cage_request.headers)
    assert elsewhere.blocked and CANARY.decode() not in json.dumps(elsewhere.value)

    # The upstream echoes the key every way it can; the cage sees placeholders only.
    echoed = json.dumps(
        {
            "raw": CANARY.decode(),
            "url": quote(CANARY, safe=""),
            "b64": base64.b64encode(b"key=" + CANARY).decode(),
            "hex": CANARY.hex(),
        }
    ).encode()
    inbound = redactor.redact(echoed)
    headers, names = redactor.redact_headers(
        [
            ("x-echo", CANARY.decode()),
            ("www-authenticate", "Basic " + base64.b64encode(b"u:" + CANARY).decode()),
        ]
    )
    assert inbound.names == {"ANTHROPIC_API_KEY"} and names == {"ANTHROPIC_API_KEY"}
    seen_by_cage = inbound.data + json.dumps(headers).encode()
    for form in (
        CANARY,
        quote(CANARY, safe="").encode(),
        CANARY.hex().encode(),
        base64.b64encode(b"key=" + CANARY),
    ):
        assert form not in seen_by_cage
    assert placeholder.encode() in seen_by_cage

    # And if the real value got into the cage anyway, it cannot leave toward another host.
    leak = request(host="sink.example.test", body=base64.b64encode(CANARY))
    blocked = first_block(run_chain(chain, leak, ctx))
    assert blocked is not None and blocked.severity == "critical"
