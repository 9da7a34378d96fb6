"""Fixtures for the end-to-end kubectl suite: one namespace per test on the shared clusters."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from e2e_util import manifest, unique


@pytest.fixture
def ns(clusters: Any) -> Iterator[str]:
    """A fresh namespace on cluster1 (created from a JSON manifest: no protobuf involved)."""
    name = unique("e2e")
    clusters.kubectl("create", "-f", "-", input=manifest({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
    yield name
    clusters.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)
