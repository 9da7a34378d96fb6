"""`tether mcs run` and `tether mcs install`: the MCS API without a hub.

`run` takes the clusterset's members as kubeconfig contexts and runs the same `McsController` the
hub runs for its registered Clusters; `install` puts the MCS CRDs (ServiceExport, ServiceImport,
ClusterProperty) into one cluster, as the controller does for each member it manages.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tether.app.signals import run_until_signal
from tether.connect.mcs.controller import FIELD_MANAGER, McsController, Member
from tether.connect.mcs.crds import member_crds
from tether.kube import AlreadyExists, KubeClient, load_kubeconfig

log = logging.getLogger(__name__)
SHUTDOWN_S = 5.0


@dataclass(frozen=True)
class McsOptions:
    contexts: tuple[str, ...]
    kubeconfig: Path | None = None
    clusterset: str = "clusterset"


async def serve(options: McsOptions, *, announce: Callable[[str], None] = print) -> int:
    members = [Member(context, load_kubeconfig(options.kubeconfig, context)) for context in options.contexts]
    controller = McsController(lambda: members, clusterset=options.clusterset)
    announce(f"MCS controller for clusterset {options.clusterset}: {', '.join(options.contexts)}")
    await run_until_signal(controller.run(), shutdown_s=SHUTDOWN_S)
    return 0


async def install(kubeconfig: Path | None, context: str | None, *, announce: Callable[[str], None] = print) -> int:
    async with KubeClient.from_kubeconfig(kubeconfig, context) as client:
        for crd in member_crds():
            name = crd["metadata"]["name"]
            try:
                await client.create(crd, field_manager=FIELD_MANAGER)
                announce(f"customresourcedefinition {name} created")
            except AlreadyExists:
                await client.apply(crd, field_manager=FIELD_MANAGER)
                announce(f"customresourcedefinition {name} configured")
    return 0


def run_install(kubeconfig: Path | None, context: str | None, announce: Callable[[str], None]) -> int:
    return asyncio.run(install(kubeconfig, context, announce=announce))
