"""The fleet writes a MirrorPolicy's status only when its own part changed: another writer's
conditions on the policy neither trigger a write nor count as a difference."""

from __future__ import annotations

import pytest

from tether.connect.mirror.fleet import _own_status
from tether.objects import Obj

READY: Obj = {"type": "Ready", "status": "True", "reason": "Mirroring", "message": "2 clusters mirror each other"}
WRITTEN: Obj = {"conditions": [READY], "clusters": [{"name": "a", "mirrors": ["b"]}]}
AUDITED: Obj = {"type": "Audited", "status": "True"}


@pytest.mark.parametrize(("current", "same"), [
    (WRITTEN, True),
    ({**WRITTEN, "conditions": [AUDITED, READY]}, True),  # another writer's condition
    ({**WRITTEN, "note": "x"}, True),  # another writer's field
    ({**WRITTEN, "conditions": [AUDITED]}, False),  # ours is missing
    ({**WRITTEN, "conditions": [{**READY, "status": "False"}]}, False),
    ({**WRITTEN, "clusters": []}, False),
    ({}, False),
])
def test_own_status(current: Obj, same: bool) -> None:
    assert (_own_status(current, WRITTEN) == WRITTEN) is same
