"""Where a Karmada template's summed member status goes: its `.status`, or an annotation.

Karmada's control plane is an API server without workload controllers, so nothing else writes a
template's `.status` there and Karmada puts the members' aggregated status in it (`kubectl get
deploy` on the hub shows the summed READY). A hub that is also a full cluster runs its own
Deployment controller, which owns `.status` (and runs the template's pods): there tether leaves
`.status` alone and the summed status travels in the `tether.io/propagation-status` annotation.

Per hub (`tether hub run --template-status`):
- `status`: always `.status`;
- `annotation`: never `.status`;
- `auto` (the default): by discovery. A host with no Node objects runs no workloads (Karmada's
  API server, `tether local up --role hub`): `.status`. A host with Nodes, or one whose Nodes the
  hub may not list: the annotation. The answer is asked again every `recheck_s`, and per template
  a controller already writing its status (another manager on the status subresource in
  managedFields) keeps it, so tether never fights a controller that started after the check.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tether.kube import KubeClient, KubeError
from tether.objects import Obj

from ._util import items, mapping, nested

STATUS = "status"
ANNOTATION = "annotation"
AUTO = "auto"
MODES = (AUTO, STATUS, ANNOTATION)
RECHECK_S = 30.0


def decide(mode: str, host_has_nodes: bool | None, foreign_status_owner: bool) -> str:
    """STATUS or ANNOTATION for one template. `host_has_nodes` None: the hub could not tell."""
    if mode == STATUS:
        return STATUS
    if mode == ANNOTATION or host_has_nodes is not False or foreign_status_owner:
        return ANNOTATION
    return STATUS


def foreign_status_owner(template: Obj, own_manager: str) -> bool:
    """Whether a manager other than `own_manager` has written this template's status."""
    for entry in items(nested(template, "metadata", "managedFields")):
        e = mapping(entry)
        if e.get("subresource") == "status" and e.get("manager") != own_manager:
            return True
    return False


@dataclass
class TemplateStatusTarget:
    """The hub's answer, with the Node check cached for `recheck_s`."""

    host: KubeClient
    mode: str = AUTO
    recheck_s: float = RECHECK_S
    clock: Callable[[], float] = time.monotonic
    _has_nodes: bool | None = field(default=None, init=False)
    _checked_at: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"template status mode {self.mode!r} is not one of {', '.join(MODES)}")

    async def host_has_nodes(self) -> bool | None:
        now = self.clock()
        if self._checked_at is None or now - self._checked_at >= self.recheck_s:
            self._checked_at = now
            try:
                page = await self.host.request("GET", "/api/v1/nodes", params={"limit": "1"})
            except KubeError:  # forbidden, or no such API: cannot tell
                self._has_nodes = None
            else:
                self._has_nodes = bool(items(page.get("items")))
        return self._has_nodes

    async def for_template(self, template: Obj, own_manager: str) -> str:
        if self.mode != AUTO:
            return decide(self.mode, None, False)
        return decide(self.mode, await self.host_has_nodes(),
                      foreign_status_owner(template, own_manager))
