"""The hub sets the WireGuard mesh up between its registered members by itself (`tether hub run --mesh`).

Clusters `aws` and `gcp` (`tether local up --netns --nodes 1`); the hub is installed in `aws`,
`aws` is registered as a Cluster and `tether hub run --mesh` starts (no `tether mesh local`).
When `gcp` is registered too, the hub:

- meshes them (a member registered while the hub runs joins): each node is annotated for the other cluster and peered with its node, and a pod
  of `aws` reaches a pod of `gcp` by pod IP;
- writes `MeshReady=True` on both Clusters;
- when `gcp` is unregistered (its Cluster deleted), removes what the mesh made: no interface
  toward `gcp` is left on `aws`'s node, no annotation on either node.

Root, iproute2, nft, wireguard-go (or the kernel module) and wireguard-tools needed; run under
`flock /tmp/tether-netns.lock`. Traffic stays in the namespaces the test creates.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import e2e_util
import pytest

pytestmark = [*e2e_util.needs_netns("nft", "wg"), e2e_util.needs_wireguard()]

WAIT_S = 120.0
DOMAIN = "wireguard.semaphore.uw.io"
run = e2e_util.run
tether = e2e_util.tether_cli


class Fleet(e2e_util.KubectlFleet):
    def __init__(self, data_dir: Path, cache: Path) -> None:
        super().__init__(data_dir, cache)
        self.index: dict[str, int] = {}
        self.hub: e2e_util.Collected | None = None

    def register(self, name: str) -> None:
        self.kubectl("aws", "apply", "-f", "-", input=json.dumps({
            "apiVersion": "cluster.tether.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name},
            "spec": {"syncMode": "Pull"}}))

    def node_ns(self, cluster: str) -> str:
        return f"tether-{self.index[cluster]}-n0"

    def mesh_links(self, cluster: str) -> list[str]:
        links = json.loads(run("ip", "-n", self.node_ns(cluster), "-j", "link", "show").stdout)
        return [str(x["ifname"]) for x in links if str(x["ifname"]).startswith(("wg.", "wireguard."))]

    def peers(self, cluster: str) -> int:
        return sum(len(run("wg", "show", link, "peers").stdout.split()) for link in self.mesh_links(cluster))

    def annotations(self, cluster: str) -> dict[str, str]:
        meta = self.json(cluster, "get", "node", f"{cluster}-node-0")["metadata"]
        return {k: v for k, v in (meta.get("annotations") or {}).items() if DOMAIN in k}

    def web(self, cluster: str) -> tuple[str, str]:
        """A ready web pod's IP and network namespace."""
        from tether.local.netns import pod_namespace

        def ready() -> tuple[str, str] | None:
            for pod in self.json(cluster, "get", "pods", "-l", "app=web")["items"]:
                if any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in (pod.get("status") or {}).get("conditions") or []):
                    return str(pod["status"]["podIP"]), pod_namespace(self.index[cluster], str(pod["metadata"]["uid"]))
            return None

        found: tuple[str, str] = e2e_util.poll(ready, timeout=WAIT_S, interval=0.5, what=f"a web pod in {cluster}")
        return found


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    data_dir = tmp_path_factory.mktemp("netns-hub-mesh")
    f = Fleet(data_dir, tmp_path_factory.mktemp("kubecache-hub-mesh"))
    with e2e_util.netns_clusters(data_dir, ("aws", "gcp"), meshed=True) as index:
        f.index.update(index)
        try:
            for name in ("aws", "gcp"):
                f.kubectl(name, "create", "deployment", "web", "--image=nginx", "--port=80")
            installed = tether("hub", "install", "--kubeconfig", str(data_dir / "kubeconfig"), "--context", "aws")
            assert installed.returncode == 0, installed.stdout + installed.stderr
            f.register("aws")  # gcp is registered by the test, with the hub running
            f.hub = e2e_util.Collected(
                [sys.executable, "-m", "tether", "hub", "run", "--mesh", "--data-dir", str(data_dir), "--kubeconfig",
                 str(data_dir / "kubeconfig"), "--context", "aws", "--port", "0", "--verbose"],
                env=dict(os.environ, PYTHONUNBUFFERED="1"), merge_stderr=True)
            f.hub.wait_for_line(lambda line: "http://127.0.0.1:" in line, timeout=60)
            yield f
        finally:
            if f.hub is not None:
                f.hub.stop()
                print("\n".join(f.hub.snapshot()[-40:]))


def mesh_ready(fleet: Fleet, name: str) -> dict[str, Any] | None:
    conditions = (fleet.json("aws", "get", "clusters.cluster.tether.io", name).get("status") or {}).get("conditions")
    found = [c for c in conditions or [] if c.get("type") == "MeshReady"]
    return found[0] if found and found[0]["status"] == "True" else None


def test_the_hub_meshes_its_members_and_unmeshes_one_that_leaves(fleet: Fleet) -> None:
    assert fleet.mesh_links("aws") == [] and fleet.annotations("aws") == {}  # one member: nothing to mesh
    fleet.register("gcp")
    for cluster, other in (("aws", "gcp"), ("gcp", "aws")):
        e2e_util.poll(lambda c=cluster, o=other: set(fleet.annotations(c)) == {f"{o}.{DOMAIN}/pubKey",
                                                                             f"{o}.{DOMAIN}/endpoint"},
                      timeout=WAIT_S, interval=0.5, what=f"{cluster}'s node annotated for {other}")
        e2e_util.poll(lambda c=cluster: fleet.peers(c) == 1, timeout=WAIT_S, interval=0.5,
                      what=f"{cluster}'s node peered")
    (source, source_ns), (target, _) = fleet.web("aws"), fleet.web("gcp")
    answer = e2e_util.poll(
        lambda: (r := run("ip", "netns", "exec", source_ns, sys.executable, "-c", e2e_util.POD_HTTP_GET, source, target,
                          "80", check=False).stdout.strip()).startswith("HTTP/") and r,
        timeout=WAIT_S, interval=1.0, what="aws's pod reaching gcp's pod through the hub's mesh")
    assert answer.startswith("HTTP/1.")
    for name in ("aws", "gcp"):
        condition = e2e_util.poll(lambda n=name: mesh_ready(fleet, n), timeout=WAIT_S, interval=1.0,
                                  what=f"MeshReady=True on the hub's Cluster {name}")
        assert condition["reason"] == "MeshUp"

    fleet.kubectl("aws", "delete", "clusters.cluster.tether.io", "gcp", "--wait=false")
    e2e_util.poll(lambda: fleet.mesh_links("aws") == [], timeout=WAIT_S, interval=0.5,
                  what="aws's interface toward gcp removed")
    for cluster in ("aws", "gcp"):
        e2e_util.poll(lambda c=cluster: fleet.annotations(c) == {}, timeout=WAIT_S, interval=0.5,
                      what=f"{cluster}'s mesh annotations removed")
    assert fleet.hub is not None and fleet.hub.running()
