"""The client logs the server's Warning headers (an unknown field dropped under Warn)."""

from __future__ import annotations

import logging

import pytest

from tether.kube import client
from tether.net.http1 import Answer


def answer(*warnings: str) -> Answer:
    block = "\r\n".join(["Content-Type: application/json", *(f"Warning: {w}" for w in warnings)])
    return Answer(200, "OK", {"warning": ", ".join(warnings)} if warnings else {}, b"{}", True,
                  raw_fields=block.encode("latin-1"))


def test_each_warning_is_logged_unquoted(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tether.kube.client"):
        client._log_warnings("PATCH", "/apis/x", answer('299 - "unknown field \\"spec.foo\\""',
                                                        '299 - "a, b"', "199 agent odd"))
    assert [r.getMessage() for r in caplog.records] == [
        'PATCH /apis/x: server warning: unknown field "spec.foo"',
        "PATCH /apis/x: server warning: a, b",
        "PATCH /apis/x: server warning: odd",
    ]
