"""When the hub may stop watching a kind, and the record of finalized kinds."""

from __future__ import annotations

import pytest

from tether.federation.finalizing import decode, encode, releasable


def test_record_round_trip() -> None:
    kinds = {("apps/v1", "Deployment"), ("v1", "ConfigMap"), ("types.kubefed.io/v1beta1",
                                                               "FederatedConfigMap")}
    text = encode(kinds)
    assert text == ('["apps/v1/Deployment", "types.kubefed.io/v1beta1/FederatedConfigMap", '
                    '"v1/ConfigMap"]')
    assert decode(text) == kinds


@pytest.mark.parametrize("text", ["", "not json", "{}", '["nokind", 3]'])
def test_a_bad_record_reads_as_empty(text: str) -> None:
    assert decode(text) == set()


@pytest.mark.parametrize(
    ("wanted", "synced", "type_gone", "finalized", "works", "expected"),
    [
        (True, True, False, 0, 0, False),   # a policy (or enabled type) still selects it
        (False, True, False, 0, 0, True),   # listed, nothing holds the finalizer
        (False, True, False, 1, 0, False),  # a template still holds it
        (False, True, False, 0, 2, False),  # Works left: their template must delete them
        (False, False, False, 0, 0, False),  # not listed yet: unknown
        (False, False, True, 0, 0, True),   # the type is gone (its objects with it)
        (False, False, True, 0, 1, False),  # ... but Works of it remain
    ],
)
def test_releasable(wanted: bool, synced: bool, type_gone: bool, finalized: int, works: int,
                    expected: bool) -> None:
    assert releasable(wanted=wanted, synced=synced, type_gone=type_gone, finalized=finalized,
                      works=works) is expected
