"""The MCS API and `tether dns` end to end, rootless: clusters `east` and `west`, the real kubectl
and the real `dig`.

`tether mcs run` manages both clusters (it installs the CRDs and the ClusterProperties);
`tether dns` watches `west`. Exports in either cluster become one ServiceImport in both, with
each cluster's endpoints in its own EndpointSlice; the newer of two exports with clashing ports
gets `Conflict=True`; `dig` against `tether dns` gets the records the MCS DNS specification lists.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from e2e_util import Collected, poll, root_conftest

from semaphore_dns import SEMAPHORE_MIRROR, SEMAPHORE_STANZA, dig_answers

pytestmark = pytest.mark.e2e

NS = "shop"
IMAGE = "registry.example/shop/app:1"  # runs virtually: Running and Ready, an IP, no process


@dataclass
class World:
    clusters: Any
    dns: tuple[str, int]
    restart_controller: Any = None

    def kubectl(self, context: str, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.clusters.kubectl(*args, context=context, **kw)  # type: ignore[no-any-return]

    def get(self, context: str, *args: str) -> Any:
        found = self.kubectl(context, "get", *args, "-o", "json", check=False)
        return json.loads(found.stdout) if found.returncode == 0 else None

    def apply(self, context: str, *objs: dict[str, Any]) -> None:
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})
        self.kubectl(context, "apply", "-f", "-", input=body)

    def dig(self, *args: str) -> list[str]:
        out = subprocess.run(["dig", f"@{self.dns[0]}", "-p", str(self.dns[1]), "+short", "+tries=1", "+time=5",
                              *args], capture_output=True, text=True, timeout=30, check=True).stdout
        return sorted(line.strip() for line in out.splitlines() if line.strip())

    def pod_ips(self, context: str, app: str) -> set[str]:
        pods = (self.get(context, "pods", "-n", NS, "-l", f"app={app}") or {}).get("items") or []
        return {p["status"]["podIP"] for p in pods if p.get("status", {}).get("podIP")
                and any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in p["status"].get("conditions") or [])}


def service(name: str, ports: list[tuple[str, int]], *, headless: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"app": name},
                            "ports": [{"name": n, "port": p, "targetPort": 8080} for n, p in ports]}
    if headless:
        spec["clusterIP"] = "None"
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def deployment(name: str, replicas: int = 2) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "app", "image": IMAGE,
                                                           "ports": [{"containerPort": 8080}]}]}}}}


def statefulset(name: str, replicas: int = 2) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "db", "image": IMAGE}]}}}}


def export(name: str) -> dict[str, Any]:
    return {"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
            "metadata": {"name": name, "namespace": NS}}


def condition(obj: Any, kind: str) -> tuple[str, str] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c.get("status"), c.get("reason")
    return None


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    if shutil.which("dig") is None:
        pytest.skip("dig (dnsutils) is not installed")
    conftest = root_conftest()
    data_dir = tmp_path_factory.mktemp("mcs")
    clusters = conftest.start_clusters(data_dir, ["east", "west"], tmp_path_factory.mktemp("kubecache"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "tether", "mcs", "run", "--kubeconfig", str(clusters.kubeconfig),
               "--context", "east", "--context", "west", "--clusterset", "shopping", "-v"]
    controllers = [Collected(command, env=env, merge_stderr=True)]

    def restart() -> Collected:
        controllers[-1].stop()
        controllers.append(Collected(command, env=env, merge_stderr=True))
        return controllers[-1]

    dns = None
    try:
        # the controller installs the CRDs in both clusters
        poll(lambda: all(clusters.kubectl("get", "crd", "serviceimports.multicluster.x-k8s.io", context=c,
                                          check=False).returncode == 0 for c in ("east", "west")),
             timeout=120, interval=0.5, what="the MCS CRDs in both clusters")
        dns = Collected([sys.executable, "-m", "tether", "dns", "--kubeconfig", str(clusters.kubeconfig),
                         "--context", "west", "--listen", "127.0.0.1:0", "--no-forward", "--metrics-address",
                         "127.0.0.1:0"], env=env, merge_stderr=True)
        line = dns.wait_for_line(lambda text: "tether dns on " in text, timeout=60)
        host, port = line.split("tether dns on ", 1)[1].split(" ", 1)[0].rsplit(":", 1)
        for context in ("east", "west"):
            clusters.kubectl("create", "namespace", NS, context=context)
        yield World(clusters, (host, int(port)), restart)
    finally:
        if dns is not None:
            dns.stop()
        controllers[-1].stop()
        conftest.tether("local", "down", "--data-dir", str(data_dir))


def test_cluster_properties(world: World) -> None:
    for context in ("east", "west"):
        found = poll(lambda c=context: world.get(c, "clusterproperties.about.k8s.io", "cluster.clusterset.k8s.io"),
                     timeout=60, what="the cluster id")
        assert found["spec"]["value"] == context
        membership = world.get(context, "clusterproperties.about.k8s.io", "clusterset.k8s.io")
        assert membership["spec"]["value"] == "shopping"


def test_exports_in_two_clusters_make_one_import_with_both_slices(world: World) -> None:
    for context in ("east", "west"):
        world.apply(context, service("web", [("http", 80)]), deployment("web"))
    poll(lambda: all(len(world.pod_ips(c, "web")) == 2 for c in ("east", "west")), timeout=90, interval=0.3,
         what="ready pods in both clusters")
    for context in ("east", "west"):
        world.apply(context, export("web"))

    def imported() -> Any:
        found = world.get("west", "serviceimports.multicluster.x-k8s.io", "web", "-n", NS)
        clusters = sorted(c["cluster"] for c in ((found or {}).get("status") or {}).get("clusters") or [])
        return found if clusters == ["east", "west"] and found["spec"].get("ips") else None

    found = poll(imported, timeout=60, interval=0.3, what="ServiceImport web in west from both clusters")
    assert found["spec"]["type"] == "ClusterSetIP"
    assert found["spec"]["ports"] == [{"name": "http", "port": 80, "protocol": "TCP"}]
    derived = world.get("west", "services", "-n", NS, "-l", "connect.tether.io/service-import=web")["items"]
    assert [s["spec"]["clusterIP"] for s in derived] == found["spec"]["ips"]

    def slices() -> dict[str, set[str]] | None:
        items = (world.get("west", "endpointslices", "-n", NS, "-l",
                           "multicluster.kubernetes.io/service-name=web") or {}).get("items") or []
        got: dict[str, set[str]] = {}
        for s in items:
            cluster = s["metadata"]["labels"]["multicluster.kubernetes.io/source-cluster"]
            got.setdefault(cluster, set()).update(a for e in s.get("endpoints") or [] for a in e["addresses"])
        wanted = {c: world.pod_ips(c, "web") for c in ("east", "west")}
        return got if got == wanted else None

    by_cluster = poll(slices, timeout=60, interval=0.3, what="one imported slice per source cluster")
    assert set(by_cluster) == {"east", "west"}
    assert world.get("east", "serviceimports.multicluster.x-k8s.io", "web", "-n", NS) is not None
    for context in ("east", "west"):
        exported = world.get(context, "serviceexports.multicluster.x-k8s.io", "web", "-n", NS)
        assert condition(exported, "Valid") == ("True", "Valid")
        assert condition(exported, "Conflict") == ("False", "NoConflicts")
    # the MCS DNS specification's records, from tether dns watching west
    ip = found["spec"]["ips"][0]
    assert poll(lambda: world.dig("web.shop.svc.clusterset.local", "A") == [ip], timeout=30,
                what="the clusterset IP over DNS")
    assert world.dig("_http._tcp.web.shop.svc.clusterset.local", "SRV") == ["0 100 80 web.shop.svc.clusterset.local."]
    assert world.dig("dns-version.clusterset.local", "TXT") == ['"1.0.0"']
    assert world.dig("east.web.shop.svc.clusterset.local", "A") == []  # no per-cluster name


def test_newer_export_with_other_ports_gets_a_conflict(world: World) -> None:
    world.apply("east", service("api", [("http", 80)]))
    world.apply("east", export("api"))
    poll(lambda: world.get("west", "serviceimports.multicluster.x-k8s.io", "api", "-n", NS), timeout=60,
         what="ServiceImport api")
    world.apply("west", service("api", [("http", 8080)]))
    world.apply("west", export("api"))
    west = poll(lambda: (lambda e: e if condition(e, "Conflict") == ("True", "PortConflict") else None)(
        world.get("west", "serviceexports.multicluster.x-k8s.io", "api", "-n", NS)), timeout=60,
        what="Conflict on the newer export")
    assert "8080" in next(c["message"] for c in west["status"]["conditions"] if c["type"] == "Conflict")
    east = world.get("east", "serviceexports.multicluster.x-k8s.io", "api", "-n", NS)
    assert condition(east, "Conflict") == ("False", "NoConflicts")
    imported = world.get("west", "serviceimports.multicluster.x-k8s.io", "api", "-n", NS)
    assert imported["spec"]["ports"] == [{"name": "http", "port": 80, "protocol": "TCP"}]  # the oldest wins


def labelled_export(name: str, labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"exportedLabels": labels, "exportedAnnotations": annotations}}


def test_exported_labels_reach_the_import_and_the_newer_export_loses(world: World) -> None:
    world.apply("east", service("cart", [("http", 80)]))
    world.apply("east", labelled_export("cart", {"tier": "web"}, {"owner": "shop-team"}))

    def imported(context: str) -> Any:
        found = world.get(context, "serviceimports.multicluster.x-k8s.io", "cart", "-n", NS)
        return found if found and (found["metadata"].get("labels") or {}).get("tier") == "web" else None

    for context in ("east", "west"):
        got = poll(lambda c=context: imported(c), timeout=60, what=f"the labelled ServiceImport in {context}")
        assert got["metadata"]["annotations"]["owner"] == "shop-team"
    # a newer export, headless and with other labels: it loses on all three, and says so
    world.apply("west", service("cart", [("http", 80)], headless=True))
    world.apply("west", labelled_export("cart", {"tier": "api"}, {}))
    west = poll(lambda: (lambda e: e if (condition(e, "Conflict") or ("", ""))[0] == "True" else None)(
        world.get("west", "serviceexports.multicluster.x-k8s.io", "cart", "-n", NS)), timeout=60,
        what="Conflict on the newer export")
    assert condition(west, "Conflict") == ("True", "TypeConflict,LabelsConflict,AnnotationsConflict")
    assert condition(world.get("east", "serviceexports.multicluster.x-k8s.io", "cart", "-n", NS),
                     "Conflict") == ("False", "NoConflicts")
    got = world.get("west", "serviceimports.multicluster.x-k8s.io", "cart", "-n", NS)
    assert got["spec"]["type"] == "ClusterSetIP" and got["metadata"]["labels"]["tier"] == "web"  # the oldest's
    assert sorted(c["cluster"] for c in got["status"]["clusters"]) == ["east", "west"]  # both still serve
    # the oldest changes its labels: the imports follow
    world.apply("east", labelled_export("cart", {"tier": "edge"}, {"owner": "shop-team"}))
    poll(lambda: all((world.get(c, "serviceimports.multicluster.x-k8s.io", "cart", "-n", NS) or {}).get(
        "metadata", {}).get("labels", {}).get("tier") == "edge" for c in ("east", "west")), timeout=60,
        what="the imports relabelled")


def test_headless_export_and_its_dns_names(world: World) -> None:
    world.apply("east", service("db", [("pg", 5432)], headless=True), statefulset("db"))
    world.apply("east", export("db"))
    poll(lambda: len(world.pod_ips("east", "db")) == 2, timeout=90, interval=0.3, what="db pods")
    ips = sorted(world.pod_ips("east", "db"))
    found = poll(lambda: world.get("west", "serviceimports.multicluster.x-k8s.io", "db", "-n", NS), timeout=60,
                 what="ServiceImport db")
    assert found["spec"]["type"] == "Headless" and not found["spec"].get("ips")
    assert poll(lambda: world.dig("db.shop.svc.clusterset.local", "A") == ips, timeout=60,
                what="every ready endpoint over DNS")
    pods = {p["metadata"]["name"]: p["status"]["podIP"] for p in world.get("east", "pods", "-n", NS, "-l",
                                                                            "app=db")["items"]}
    assert world.dig("db-0.east.db.shop.svc.clusterset.local", "A") == [pods["db-0"]]
    assert world.dig("_pg._tcp.db.shop.svc.clusterset.local", "SRV") == sorted(
        f"0 50 8080 db-{i}.east.db.shop.svc.clusterset.local." for i in range(2))


def test_a_restart_changes_nothing(world: World) -> None:
    before = {c: world.get(c, "serviceimports.multicluster.x-k8s.io", "web", "-n", NS) for c in ("east", "west")}
    slices = sorted(s["metadata"]["uid"] for s in world.get("west", "endpointslices", "-n", NS, "-l",
                                                              "multicluster.kubernetes.io/service-name=web")["items"])
    process = world.restart_controller()
    process.wait_for_line(lambda text: "west joined the clusterset" in text, timeout=60)
    process.wait_for_line(lambda text: "east joined the clusterset" in text, timeout=60)
    # a new export after the restart goes through: the restarted controller has reconciled by then
    world.apply("east", service("after", [("http", 80)]), export("after"))
    poll(lambda: world.get("west", "serviceimports.multicluster.x-k8s.io", "after", "-n", NS), timeout=60,
         what="an import made after the restart")
    process.wait_for_line(lambda text: "listed every member" in text, timeout=60)
    for context, old in before.items():
        now = world.get(context, "serviceimports.multicluster.x-k8s.io", "web", "-n", NS)
        assert now["metadata"]["uid"] == old["metadata"]["uid"]
        assert now["metadata"]["resourceVersion"] == old["metadata"]["resourceVersion"]  # not even rewritten
    assert sorted(s["metadata"]["uid"] for s in world.get("west", "endpointslices", "-n", NS, "-l",
                                                          "multicluster.kubernetes.io/service-name=web")["items"]) == slices


def test_removing_the_exports_removes_the_import(world: World) -> None:
    world.apply("east", service("gone", [("http", 80)]), export("gone"))
    poll(lambda: world.get("west", "serviceimports.multicluster.x-k8s.io", "gone", "-n", NS), timeout=60,
         what="ServiceImport gone")
    world.kubectl("east", "delete", "serviceexports.multicluster.x-k8s.io", "gone", "-n", NS)
    poll(lambda: world.get("west", "serviceimports.multicluster.x-k8s.io", "gone", "-n", NS) is None, timeout=60,
         what="the import withdrawn")
    assert world.get("west", "endpointslices", "-n", NS, "-l",
                     "multicluster.kubernetes.io/service-name=gone")["items"] == []


def test_export_without_a_service_is_not_valid(world: World) -> None:
    world.apply("west", export("ghost"))
    exported = poll(lambda: (lambda e: e if condition(e, "Valid") else None)(
        world.get("west", "serviceexports.multicluster.x-k8s.io", "ghost", "-n", NS)), timeout=60,
        what="the Valid condition")
    assert condition(exported, "Valid") == ("False", "NoService")
    assert world.get("west", "serviceimports.multicluster.x-k8s.io", "ghost", "-n", NS) is None


# Semaphore's names, and the local cluster DNS's Corefile -------------------------------------


def cluster_dig(world: World, context: str, *args: str) -> str:
    address = json.loads((world.clusters.data_dir / "clusters" / context / "dns.json").read_text())
    return subprocess.run(["dig", f"@{address['ip']}", "-p", str(address["port"]), "+tries=1", "+time=5", *args],
                          capture_output=True, text=True, timeout=30, check=True).stdout


def set_corefile(world: World, context: str, text: str) -> None:
    configmap = world.get(context, "configmap", "coredns", "-n", "kube-system")
    configmap["data"]["Corefile"] = text
    for key in ("resourceVersion", "managedFields"):
        configmap["metadata"].pop(key, None)
    world.apply(context, configmap)


@pytest.fixture(scope="module")
def mirror_ip(world: World) -> str:
    """A mirror as semaphore-service-mirror writes it (labels, selector-less) in west."""
    world.kubectl("west", "create", "namespace", "sys-semaphore")
    world.apply("west", {"apiVersion": "v1", "kind": "Service",
                         "metadata": {"name": SEMAPHORE_MIRROR, "namespace": "sys-semaphore",
                                      "labels": {"mirrored-svc": "true", "mirror-svc-prefix-sync": "aws"}},
                         "spec": {"ports": [{"name": "forward", "port": 8888}, {"name": "http", "port": 8889}]}})
    return str(world.get("west", "service", SEMAPHORE_MIRROR, "-n", "sys-semaphore")["spec"]["clusterIP"])


def test_local_clusters_have_kube_dns_and_the_coredns_configmap(world: World) -> None:
    for context in ("east", "west"):
        service = poll(lambda c=context: world.get(c, "service", "kube-dns", "-n", "kube-system"), timeout=30,
                       what="kube-dns")
        address = json.loads((world.clusters.data_dir / "clusters" / context / "dns.json").read_text())
        assert service["spec"]["clusterIP"] == address["ip"]  # what pods' resolv.conf names
        assert [p["name"] for p in service["spec"]["ports"]] == ["dns", "dns-tcp", "metrics"]
        corefile = world.get(context, "configmap", "coredns", "-n", "kube-system")["data"]["Corefile"]
        assert "kubernetes cluster.local in-addr.arpa ip6.arpa" in corefile and "forward . /etc/resolv.conf" in corefile
    out = cluster_dig(world, "west", "kube-dns.kube-system.svc.cluster.local")
    assert dig_answers(out)[0].endswith(f"IN A {service['spec']['clusterIP']}")


def test_tether_dns_answers_semaphore_names(world: World, mirror_ip: str) -> None:
    assert poll(lambda: world.dig("fluentd.sys-log.svc.cluster.aws", "A") == [mirror_ip], timeout=30,
                what="the mirror's ClusterIP from tether dns")


def test_corefile_stanza_forwards_to_tether_dns(world: World, mirror_ip: str) -> None:
    host, port = world.dns
    stanza = (f"cluster.aws {{\n    forward . {host}:{port}\n}}\n"
              f"clusterset.local {{\n    forward . {host}:{port}\n    cache 5\n}}\n")
    set_corefile(world, "west", stanza + world.get("west", "configmap", "coredns", "-n",
                                                   "kube-system")["data"]["Corefile"])
    got = poll(lambda: dig_answers(cluster_dig(world, "west", "fluentd.sys-log.svc.cluster.aws")), timeout=30,
               what="the cluster DNS forwarding cluster.aws to tether dns")
    assert got == [f"fluentd.sys-log.svc.cluster.aws. 5 IN A {mirror_ip}"]
    out = cluster_dig(world, "west", "dns-version.clusterset.local", "TXT")
    assert dig_answers(out) == ['dns-version.clusterset.local. 28800 IN TXT "1.0.0"']
    web = dig_answers(cluster_dig(world, "west", "web.default.svc.cluster.local"))
    assert web == []  # cluster.local is still answered by the cluster itself (no such Service: NXDOMAIN)


def test_semaphore_rewrite_stanza_works_unchanged(world: World, mirror_ip: str) -> None:
    set_corefile(world, "west", SEMAPHORE_STANZA + "\n" + __import__(
        "tether.local.services.corefile", fromlist=["default_corefile"]).default_corefile())

    def asked() -> list[str]:
        return dig_answers(cluster_dig(world, "west", "fluentd.sys-log.svc.cluster.aws"))

    got = poll(lambda: (lambda lines: lines if lines and "cluster.aws" in lines[0] else None)(asked()), timeout=30,
               what="the rewrite stanza answering")
    assert got == [f"fluentd.sys-log.svc.cluster.aws. 5 IN A {mirror_ip}"]  # Semaphore's users see TTL 5 in `drill`


def test_unsupported_plugin_gives_an_event(world: World) -> None:
    current = world.get("west", "configmap", "coredns", "-n", "kube-system")["data"]["Corefile"]
    set_corefile(world, "west", current + "example.org {\n    hosts /etc/hosts\n}\n")

    def warned() -> list[str]:
        events = (world.get("west", "events", "-n", "kube-system", "--field-selector",
                            "involvedObject.name=coredns,involvedObject.kind=ConfigMap") or {}).get("items") or []
        return [e["message"] for e in events if e.get("reason") == "UnsupportedCorefile"]

    messages = poll(warned, timeout=30, what="a Warning Event naming the plugin")
    assert any("plugin hosts is not supported" in m for m in messages)
    set_corefile(world, "west", "this is { not a corefile\n")
    poll(lambda: [e for e in (world.get("west", "events", "-n", "kube-system") or {}).get("items") or []
                  if e.get("reason") == "InvalidCorefile"], timeout=30, what="an InvalidCorefile Event")
    # the previous configuration stays
    assert dig_answers(cluster_dig(world, "west", "kube-dns.kube-system.svc.cluster.local"))


def test_clusterset_ip_reaches_pods_of_the_other_cluster(world: World) -> None:
    """Rootless clusters share the loopback, so west's clusterset IP (its derived Service, served by
    west's service proxy) reaches east's pods."""
    echo = deployment("echo", replicas=1)
    echo["spec"]["template"]["spec"]["containers"][0]["image"] = "tether/echo"
    world.apply("east", service("echo", [("http", 80)]), echo)
    world.apply("east", export("echo"))
    poll(lambda: world.pod_ips("east", "echo"), timeout=90, interval=0.3, what="the echo pod")
    found = poll(lambda: (lambda imp: imp if (imp or {}).get("spec", {}).get("ips") else None)(
        world.get("west", "serviceimports.multicluster.x-k8s.io", "echo", "-n", NS)), timeout=60,
        what="ServiceImport echo in west")
    ip = found["spec"]["ips"][0]

    def answer() -> Any:
        try:
            with urllib.request.urlopen(f"http://{ip}:80/", timeout=5) as response:
                return json.loads(response.read())
        except OSError:
            return None

    body = poll(answer, timeout=60, interval=0.5, what="an answer through west's clusterset IP")
    assert body["podIP"] in world.pod_ips("east", "echo") and body["namespace"] == NS
