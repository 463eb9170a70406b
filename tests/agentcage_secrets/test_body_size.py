from __future__ import annotations

import tracemalloc

import pytest

from agentcage.inspect import BodySizeCounter, BodySizeInspector, BodyTooLarge
from agentcage.inspect.body_size import BodySizeSettings
from tests.agentcage_secrets.helpers import request

MiB = 1024 * 1024


def test_a_1_gib_upload_is_refused_while_streaming_without_buffering():
    counter = BodySizeCounter(limit=10 * MiB)
    chunk = b"\0" * MiB  # one buffer reused: the "upload" is never in memory
    tracemalloc.start()
    try:
        with pytest.raises(BodyTooLarge) as info:
            for _ in range(1024):  # 1 GiB
                assert counter(chunk) is chunk  # chunks pass through untouched
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.seen == 11 * MiB  # refused at the first chunk past the limit
    assert peak < MiB // 4
    assert counter.decision().action == "block"


def test_exactly_the_limit_passes():
    counter = BodySizeCounter(limit=100)
    counter.feed(b"x" * 60)
    counter.feed(b"x" * 40)
    assert counter.decision().action == "allow"
    with pytest.raises(BodyTooLarge):
        counter.feed(b"x")


@pytest.mark.parametrize(
    ("headers", "body", "action"),
    [
        ([("Content-Length", str(10 * MiB))], None, "allow"),
        ([("Content-Length", str(10 * MiB + 1))], None, "block"),
        ([("content-length", "nope")], None, "block"),
        ([], b"x" * 2048, "block"),
        ([], b"x" * 1024, "allow"),
    ],
)
def test_declared_and_buffered_sizes(ctx, headers, body, action):
    limit = 10 * MiB if body is None else 1024
    inspector = BodySizeInspector(BodySizeSettings(limit))
    assert inspector.inspect(request(headers=headers, body=body), ctx).action == action
    assert inspector.counter().limit == limit
