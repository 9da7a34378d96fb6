"""The Karmada failover/spread/suspension examples are policies tether applies as written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tether.federation import crds
from tether.federation.policycheck import policy_problems

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "karmada"
FILES = sorted(p for p in EXAMPLES.glob("*.yaml")
               if p.name.startswith(("failover-", "spread-", "suspension-")))
SERVED = {(c["spec"]["group"], c["spec"]["names"]["kind"]) for c in crds.hub_crds()}


def test_examples_exist() -> None:
    assert len(FILES) >= 6


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_example_is_served_and_valid(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        group = doc["apiVersion"].rpartition("/")[0]
        if group.endswith("karmada.io"):
            assert (group, doc["kind"]) in SERVED, doc["kind"]
        if doc["kind"] in ("PropagationPolicy", "ClusterPropagationPolicy"):
            assert policy_problems(doc["spec"]) == []
