"""kube.portforward's pure parts: when kubectl falls back from the WebSocket form to plain SPDY."""

from __future__ import annotations

import pytest

from tether.kube.errors import error_from_status
from tether.kube.portforward import _falls_back, portforward_path


@pytest.mark.parametrize(("code", "message", "falls_back"), [
    (400, "Upgrade request required", True),  # a server without the WebSocket form
    (403, "unable to upgrade: unable to negotiate protocol", True),
    (405, "method not allowed", True),
    (426, "upgrade required", True),
    (502, "bad gateway", True),  # a proxy in between that does not pass the WebSocket upgrade
    (401, "Unauthorized", False),
    (403, 'pods "p" is forbidden: User "u" cannot create resource "pods/portforward"', False),
    (404, 'pods "p" not found', False),
])
def test_fallback_to_plain_spdy(code: int, message: str, falls_back: bool) -> None:
    assert _falls_back(error_from_status({"code": code, "message": message})) is falls_back


def test_path_is_quoted() -> None:
    assert portforward_path("ns", "a/b") == "/api/v1/namespaces/ns/pods/a%2Fb/portforward"
