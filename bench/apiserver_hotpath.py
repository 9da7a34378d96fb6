"""The embedded API server's CPU per iteration of the federation hot path, replayed without a hub.

    python bench/apiserver_hotpath.py                     # 2,000 iterations, print CPU/iteration
    python bench/apiserver_hotpath.py -n 500              # fewer iterations
    python bench/apiserver_hotpath.py --split             # also CPU per request type (4 passes)
    python bench/apiserver_hotpath.py --spy out.raw       # the server under py-spy (raw, 100 Hz)
    python bench/apiserver_hotpath.py --profile DIR       # the server under cProfile (DIR/server.prof)

One local cluster (`tether local up`, through bench/benchcluster.py) in a temporary data dir,
reached only on 127.0.0.1 with `tether.kube.KubeClient`; the hub CRDs are installed with
`tether.federation.install.install` (what `tether hub install` runs). Then, per iteration i, the
requests one (template, member) pair costs the host and the member API server in
bench/propagation.py, all against this one server, one after the other:

1. server-side apply (field manager tether-propagation) of a Work shaped like the hub's
   (`federation/works.py:desired_works`: labels, annotations, the execution finalizer, one
   ConfigMap manifest) in `tether-es-m01`;
2. its status, written the way the executor writes it (`execution.py:_write_status`: a merge
   patch of `{"status": {conditions, manifestStatuses}}` to /status, field manager
   tether-execution), or with `--status-apply` as a server-side apply to /status;
3. GET of the member's ConfigMap, which is missing (404);
4. server-side apply (field manager tether) that creates it, labelled
   app.kubernetes.io/managed-by=tether.

Two watches stay open meanwhile, as the hub's and the member's informers do: one on all Works,
one on ConfigMaps with labelSelector app.kubernetes.io/managed-by=tether; the driver checks that
every write arrived on them. Reported: the server process's utime+stime (/proc/<pid>/stat, not
its children) per iteration, and wall time. Bounded: at most --iterations (default 2,000) and
PHASE_TIMEOUT_S per pass; the cluster is stopped with `tether local down` at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchcluster import Cluster, start_cluster, stop_cluster
from propagation import PySpy
from tether.federation.install import install
from tether.kube import KubeClient, NotFound

Obj = dict[str, Any]

ITERATIONS = 2_000
PHASE_TIMEOUT_S = 600.0
WORK_API = "work.tether.io/v1alpha1"
EXEC_NS = "tether-es-m01"
TARGET_NS = "hotpath"
MANAGED = {"app.kubernetes.io/managed-by": "tether"}
SELECTOR = "app.kubernetes.io/managed-by=tether"


def configmap(i: int, run: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"cm-{run}-{i}", "namespace": TARGET_NS,
                         "labels": {**MANAGED, "bench.tether.io/run": run},
                         "annotations": {"work.tether.io/name": f"{EXEC_NS}/{work_name(i, run)}"}},
            "data": {"key": f"cm-{run}-{i}", "payload": "x" * 64}}


def work_name(i: int, run: str) -> str:
    return f"configmap-{TARGET_NS}-cm-{run}-{i}"


def work(i: int, run: str) -> Obj:
    name = f"cm-{run}-{i}"
    return {
        "apiVersion": WORK_API, "kind": "Work",
        "metadata": {
            "name": work_name(i, run), "namespace": EXEC_NS,
            "labels": {"work.tether.io/managed-by": "tether-hub", "work.tether.io/dialect": "karmada",
                       "work.tether.io/source-hash": "0123456789", "work.tether.io/source-kind": "ConfigMap",
                       "work.tether.io/source-namespace": TARGET_NS, "work.tether.io/source-name": name,
                       "work.tether.io/cluster": "m01"},
            "annotations": {"work.tether.io/source": f"v1/ConfigMap/{TARGET_NS}/{name}",
                            "work.tether.io/source-changed-at": f"{time.time():.3f}"},
            "finalizers": ["tether.io/execution"],
        },
        "spec": {"workload": {"manifests": [configmap(i, run)]}, "conflictResolution": "Abort",
                 "preserveResourcesOnDeletion": False},
    }


def work_status(i: int, run: str, generation: int) -> Obj:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "conditions": [{"type": "Applied", "status": "True", "reason": "AppliedSuccessful",
                        "message": "Manifest has been successfully applied",
                        "observedGeneration": generation, "lastTransitionTime": now}],
        "manifestStatuses": [{"identifier": {"ordinal": 0, "group": "", "version": "v1", "kind": "ConfigMap",
                                             "name": f"cm-{run}-{i}", "namespace": TARGET_NS},
                              "applied": True, "appliedAt": now, "latencySeconds": 0.012}],
    }


class Watcher:
    """One open watch; counts the distinct objects it saw."""

    def __init__(self, client: KubeClient, api_version: str, kind: str, selector: str) -> None:
        self.seen: set[str] = set()
        self.events = 0
        self.task = asyncio.create_task(self._run(client, api_version, kind, selector))

    async def _run(self, client: KubeClient, api_version: str, kind: str, selector: str) -> None:
        async with contextlib.aclosing(client.watch(api_version, kind, label_selector=selector,
                                                    timeout_s=PHASE_TIMEOUT_S * 4)) as events:
            async for event in events:
                if event.type in ("ADDED", "MODIFIED"):
                    self.events += 1
                    self.seen.add(event.object["metadata"]["name"])

    async def wait_for(self, names: set[str], timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not names <= self.seen:
            if self.task.done() or time.monotonic() > deadline:
                raise SystemExit(f"watch missed {len(names - self.seen)} objects")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def iteration(client: KubeClient, i: int, run: str, steps: str, status_apply: bool) -> None:
    if "w" in steps:
        created = await client.apply(work(i, run), field_manager="tether-propagation", force=True)
    if "s" in steps:
        gen = int(created["metadata"].get("generation", 1)) if "w" in steps else 1
        status = work_status(i, run, gen)
        if status_apply:
            await client.apply_status({"apiVersion": WORK_API, "kind": "Work",
                                       "metadata": {"name": work_name(i, run), "namespace": EXEC_NS},
                                       "status": status}, field_manager="tether-execution")
        else:
            await client.patch(WORK_API, "Work", work_name(i, run), {"status": status}, namespace=EXEC_NS,
                               subresource="status", field_manager="tether-execution")
    if "g" in steps:
        try:
            await client.get("v1", "ConfigMap", f"cm-{run}-{i}", TARGET_NS)
            raise SystemExit("the ConfigMap should not exist yet")
        except NotFound:
            pass
    if "c" in steps:
        await client.apply(configmap(i, run), field_manager="tether", force=True)


async def timed(cluster: Cluster, label: str, count: int, op: Callable[[int], Awaitable[None]]) -> float:
    cpu0, t0 = cluster.cpu_s(), time.perf_counter()
    async with asyncio.timeout(PHASE_TIMEOUT_S):
        for i in range(count):
            await op(i)
    cpu, wall = cluster.cpu_s() - cpu0, time.perf_counter() - t0
    print(f"{label:<28} {count:>6} it  server CPU {1000 * cpu / count:7.3f} ms/it  "
          f"wall {1000 * wall / count:7.3f} ms/it", flush=True)
    return cpu / count


async def drive(cluster: Cluster, kubeconfig: Path, context: str, iterations: int, split: bool,
                status_apply: bool) -> None:
    client = KubeClient.from_kubeconfig(kubeconfig, context)
    try:
        await install(client)
        await client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": EXEC_NS}})
        await client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TARGET_NS}})
        works = Watcher(client, WORK_API, "Work", "")
        configmaps = Watcher(client, "v1", "ConfigMap", SELECTOR)
        await asyncio.sleep(0.5)
        warm = "warm"
        await timed(cluster, "warm-up (mix)", min(100, iterations),
                    lambda i: iteration(client, i, warm, "wsgc", status_apply))
        await timed(cluster, "mix: work+status+404+cm", iterations,
                    lambda i: iteration(client, i, "mix", "wsgc", status_apply))
        await works.wait_for({work_name(i, "mix") for i in range(iterations)})
        await configmaps.wait_for({f"cm-mix-{i}" for i in range(iterations)})
        if split:
            for steps, label in (("w", "work apply (create)"), ("s", "work status"),
                                 ("g", "configmap GET 404"), ("c", "configmap apply (create)")):
                run = f"s{steps}"
                if steps == "s":  # status of the Works the first pass created
                    await timed(cluster, label, iterations,
                                lambda i: iteration(client, i, "sw", "s", status_apply))
                else:
                    await timed(cluster, label, iterations,
                                lambda i, r=run, s=steps: iteration(client, i, r, s, status_apply))
        await works.stop()
        await configmaps.stop()
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--iterations", type=int, default=ITERATIONS)
    parser.add_argument("--split", action="store_true", help="also measure each request type alone")
    parser.add_argument("--status-apply", action="store_true",
                        help="write the Work status with server-side apply instead of a merge patch")
    parser.add_argument("--spy", type=Path, help="record the server with py-spy into this raw file")
    parser.add_argument("--profile", type=Path, help="run the server under cProfile, stats in this dir")
    args = parser.parse_args()
    iterations = max(1, min(args.iterations, 20_000))
    with tempfile.TemporaryDirectory(prefix="tether-hotpath-") as tmp:
        cluster = start_cluster(Path(tmp), args.profile)
        spy = None
        try:
            state = json.loads((Path(tmp) / "daemon.json").read_text())
            kubeconfig = Path(state["kubeconfig"])
            if args.spy is not None:
                spy = PySpy(cluster.pid, args.spy)  # 100 Hz, raw collapsed stacks
                time.sleep(1.0)
            print(f"server pid {cluster.pid}, {os.cpu_count()} CPUs, {iterations} iterations")
            asyncio.run(drive(cluster, kubeconfig, "bench", iterations, args.split, args.status_apply))
        finally:
            if spy is not None:
                spy.stop()
            stop_cluster(cluster)


if __name__ == "__main__":
    main()
