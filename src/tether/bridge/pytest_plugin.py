"""A pytest fixture for tests that talk to a cluster's Services as `tether connect` maps them.

    pytest_plugins = ["tether.bridge.pytest_plugin"]

    def test_orders(tether_connect):
        session = tether_connect(context="dev", namespaces=["shop"])
        requests.get(session.url("orders") + "/healthz")

`tether_connect(**kwargs)` takes `tether.bridge.connect`'s arguments; every session it opened ends
when the test does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tether.bridge.connection import Connection, connect


@pytest.fixture
def tether_connect() -> Iterator[Callable[..., Connection]]:
    with contextlib.ExitStack() as stack:

        def open_session(**kwargs: Any) -> Connection:
            return stack.enter_context(connect(**kwargs))

        yield open_session
