"""Federation and reach with only in-cluster tether components (issue 17): no tether process on
the host besides `tether local`.

`tether local up --netns --name hub --name member --isolate-api member`: the member's API only
its own network reaches, as behind NAT. On the hub cluster, `deploy/hub` as the tree renders it
(two leader-elected replicas in pods of their own, tether's image run by the kubelet as this
install), its tunnel advertised at the hub Service's address, which `tether local join member
hub` routes to the member's pods. The member's admin registers from inside the member's network
(`tether local exec member -- tether register ... --no-start`) and applies `tether agent
manifest`: the agent is a pod there, dialling the hub Service until it holds a stream to each
replica. Then:

- federation: a FederatedDeployment with an override reaches the member (the leader's controllers
  write the Work, the agent applies it);
- reach: from the host, `kubectl logs` and `exec` on member pods through the hub pods'
  cluster proxy and the agent's tunnel (the member's API stays unreachable from the host);
- the leader's pod is deleted: another replica takes the Lease (client-go's takeover: released on
  SIGTERM here; generous deadline), the Deployment is back at two Ready pods, and a change
  propagates, updating the member's Deployment in place (same uid, one Work, one Deployment);
- `deploy/dns` as written runs in the member too (read-only root, probes passing).

Run it under `flock /tmp/tether-netns.lock` (fixed device names), as root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_util import kubectl_binary, poll, unique

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="netns mode creates network namespaces: needs root (CI runs as root)"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="netns mode needs `ip` (install iproute2)"),
]
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NS = "tether-system"
TUNNEL_PORT = 8091
PROXY_PORT = 6443
WAIT_S = 240


def hub_objects(advertise: str) -> list[dict[str, Any]]:
    """`kubectl kustomize deploy/hub` (what `kubectl apply -k` applies), with the tunnel advertised
    at `advertise` (`tether hub manifest --tunnel-advertise-address` does the same) and INFO logs."""
    built = subprocess.run([kubectl_binary(), "kustomize", str(ROOT / "deploy" / "hub")],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    objects = [o for o in yaml.safe_load_all(built) if o]
    for obj in objects:
        if obj["kind"] == "Deployment":
            args = obj["spec"]["template"]["spec"]["containers"][0]["args"]
            args[args.index("--tunnel-advertise-address") + 1] = advertise
            args.append("--verbose")
    return objects


def federated_deployment(namespace: str, label: str) -> str:
    """The quick-start FederatedDeployment (smaller: one replica, two where the override says)."""
    return json.dumps({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedDeployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "template": {"metadata": {"labels": {"app": "web", "rev": label}},
                         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                                  "template": {"metadata": {"labels": {"app": "web"}},
                                               "spec": {"containers": [{"name": "nginx",
                                                                        "image": "nginx:1.17"}]}}}},
            "placement": {"clusters": [{"name": "member"}]},
            "overrides": [{"clusterName": "member", "clusterOverrides": [
                {"path": "/spec/replicas", "value": 2},
                {"path": "/spec/template/spec/containers/0/image", "value": "nginx:1.14.0-alpine"},
                {"path": "/metadata/annotations", "op": "add", "value": {"foo": "bar"}}]}]}})


def test_federation_and_reach_with_an_in_cluster_hub_and_agent(tmp_path: Path) -> None:
    data = tmp_path / "clusters"
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
           "TETHER_HOME": str(tmp_path / "home"), "KUBECONFIG": str(data / "kubeconfig"),
           "KUBECACHEDIR": str(tmp_path / "kubecache")}

    def sh(*argv: str, input: str | None = None, check: bool = True,
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(list(argv), capture_output=True, text=True, env=env, input=input,
                                timeout=timeout)
        if check:
            assert result.returncode == 0, f"{argv}\n{result.stdout}\n{result.stderr}"
        return result

    def hub(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return sh("kubectl", "--context", "hub", *args, check=check, input=input, timeout=90)

    def hub_json(*args: str) -> Any:
        return json.loads(hub(*args, "-o", "json").stdout)

    inside = ["tether", "local", "exec", "--data-dir", str(data), "member", "--"]

    def in_member(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return sh(*inside, "kubectl", "--context", "member", *args, check=check, input=input)

    def ready_hub_pods() -> dict[str, str]:
        pods = hub_json("-n", NS, "get", "pods", "-l", "app.kubernetes.io/name=tether-hub")["items"]
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods
                if not p["metadata"].get("deletionTimestamp")
                and any(c["type"] == "Ready" and c["status"] == "True"
                        for c in (p.get("status") or {}).get("conditions") or [])}

    def holder() -> str:
        got = hub("-n", NS, "get", "lease", "tether-hub", "-o", "jsonpath={.spec.holderIdentity}",
                  check=False)
        return got.stdout.strip() if got.returncode == 0 else ""

    def leader_pod() -> str | None:
        """The Ready pod whose replica holds the Lease (identities are `<pod>_<uuid>`)."""
        pod = holder().rpartition("_")[0]
        return pod if pod in ready_hub_pods() else None

    def readyz(pod: str) -> str:
        return hub("get", "--raw", f"/api/v1/namespaces/{NS}/pods/{pod}:8080/proxy/readyz").stdout

    def diagnose() -> str:
        pods = hub("-n", NS, "get", "pods", "-o", "wide", check=False).stdout
        logs = hub("-n", NS, "logs", "-l", "app.kubernetes.io/name=tether-hub", "--tail", "30",
                   "--prefix", check=False)
        agent = in_member("-n", NS, "logs", "deploy/tether-agent-member", "--tail", "30", check=False)
        return f"{pods}\n{logs.stdout}{logs.stderr}\n{agent.stdout}{agent.stderr}"

    def wait(check: Callable[[], Any], what: str) -> Any:
        try:
            return poll(check, timeout=WAIT_S, interval=1.0, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{diagnose()}") from None

    sh("tether", "local", "up", "--netns", "--data-dir", str(data), "--name", "hub", "--name",
       "member", "--isolate-api", "member")
    try:
        # the member's pods reach the hub's Services (its API, the hub pods' tunnel port)
        sh("tether", "local", "join", "--data-dir", str(data), "member", "hub")
        sh("tether", "hub", "install", "--context", "hub")

        # the hub: deploy/hub, its tunnel at the hub Service's address (certificates for it)
        objects = hub_objects("placeholder")
        service = next(o for o in objects if o["kind"] == "Service")
        hub("apply", "-f", "-", input=json.dumps(service))
        address = hub("-n", NS, "get", "svc", "tether-hub", "-o",
                      "jsonpath={.spec.clusterIP}").stdout.strip()
        assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", address), address
        certs = tmp_path / "tunnel-certs"
        sh("tether", "certs", "--out", str(certs), "--server-ip", address)
        agent_pki = certs / "agent"
        hub("-n", NS, "create", "secret", "generic", "tether-hub-tunnel-certs",
            f"--from-file=ca.crt={agent_pki / 'issued' / 'ca.crt'}",
            f"--from-file=proxy-frontend.crt={agent_pki / 'issued' / 'proxy-frontend.crt'}",
            f"--from-file=proxy-frontend.key={agent_pki / 'private' / 'proxy-frontend.key'}")
        for obj in hub_objects(f"{address}:{TUNNEL_PORT}"):
            hub("apply", "-f", "-", input=json.dumps(obj))
        wait(lambda: len(ready_hub_pods()) == 2, "two Ready hub pods")
        leader = wait(leader_pod, "a leader pod")
        identity = holder()
        for pod in ready_hub_pods():  # each replica's /readyz says who leads
            body = readyz(pod)
            if pod == leader:
                assert f"leader: {identity} (this replica)" in body, body
            else:
                assert f"leader: {identity} (this replica {pod}_" in body and "follows" in body, body

        # the member's admin, inside the member's network: register, then the agent as a pod
        printed = sh("tether", "local", "exec", "--data-dir", str(data), "hub", "--", "tether",
                     "token", "create", "--print-register-command", "--context", "hub",
                     "--cluster-name", "member").stdout.strip().splitlines()[-1]
        assert re.match(r"tether register https://10\.\d+\.0\.1:443 ", printed), printed
        sh(*inside, *printed.split(), "--no-start")
        agent_manifest = sh("tether", "agent", "manifest", "--cluster-name", "member").stdout
        in_member("apply", "-f", "-", input=agent_manifest)
        in_member("-n", NS, "rollout", "status", "deploy/tether-agent-member", f"--timeout={WAIT_S}s")
        hub("wait", "tcl/member", "--for=condition=Ready", f"--timeout={WAIT_S}s")
        # no agent process on the host: the one that reports is the pod
        assert "not running" in sh("tether", "agent", "stop", "--cluster-name", "member").stdout

        # federation: a federated object and its override, propagated by the leader pod's controllers
        namespace = unique("fed")
        hub("create", "namespace", namespace)
        hub("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedNamespace",
             "metadata": {"name": namespace, "namespace": namespace},
             "spec": {"placement": {"clusters": [{"name": "member"}]}}}))
        hub("apply", "-f", "-", input=federated_deployment(namespace, "one"))

        def member_deployment(label: str) -> dict[str, Any] | None:
            got = in_member("-n", namespace, "get", "deployment", "web", "-o", "json", check=False)
            if got.returncode != 0:
                return None
            obj: dict[str, Any] = json.loads(got.stdout)
            return obj if obj["metadata"].get("labels", {}).get("rev") == label else None

        first = wait(lambda: member_deployment("one"), "the FederatedDeployment in the member")
        assert first["spec"]["replicas"] == 2  # the override
        assert first["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.14.0-alpine"
        assert first["metadata"]["annotations"]["foo"] == "bar"

        # reach: from the host, the member only through a hub pod's cluster proxy and the tunnel
        kubeconfig = sh("tether", "kubeconfig", "member", "--context", "hub", "--server",
                        f"https://{address}:{PROXY_PORT}", "--out",
                        str(tmp_path / "member.yaml")).stdout.strip()
        # the proxy's serving certificate names localhost and 127.0.0.1 (port-forward), not the
        # ClusterIP the host reaches directly
        via_hub = ["kubectl", "--kubeconfig", kubeconfig, "--tls-server-name", "localhost"]
        wait(lambda: "agent for cluster member running" in sh(
            *via_hub, "-n", NS, "logs", "deploy/tether-agent-member", check=False).stdout,
            "the agent pod's logs through the hub")
        sh(*via_hub, "-n", namespace, "run", "hello", "--image=busybox", "--restart=Never", "--",
           "sh", "-c", "echo hello from the member; sleep 3600")
        sh(*via_hub, "-n", namespace, "wait", "--for=condition=Ready", "pod/hello",
           f"--timeout={WAIT_S}s", timeout=WAIT_S + 30)
        assert "hello from the member" in sh(*via_hub, "-n", namespace, "logs", "hello").stdout
        answer = sh(*via_hub, "-n", namespace, "exec", "hello", "--", "sh", "-c", "echo exec $((6 * 7))")
        assert answer.stdout.strip() == "exec 42", answer.stdout + answer.stderr
        # the member's API stays unreachable from the host namespace
        assert sh("kubectl", "--context", "member", "get", "ns", "--request-timeout=5s",
                  check=False).returncode != 0

        # the leader's pod goes: another replica takes over, propagation goes on, nothing doubled
        hub("-n", NS, "delete", "pod", leader, "--wait=false")
        successor = wait(lambda: (p := leader_pod()) is not None and p != leader and p,
                         "another replica leading")
        assert f"leader: {holder()} (this replica)" in readyz(successor)
        hub("apply", "-f", "-", input=federated_deployment(namespace, "two"))
        second = wait(lambda: member_deployment("two"), "the change propagated by the new leader")
        assert second["metadata"]["uid"] == first["metadata"]["uid"]  # updated in place
        assert second["spec"]["replicas"] == 2
        deployments = json.loads(in_member("-n", namespace, "get", "deployments", "-o", "json").stdout)
        assert [d["metadata"]["name"] for d in deployments["items"]] == ["web"]
        works = [w["metadata"]["name"] for w in hub_json("-n", "tether-es-member", "get", "works")["items"]
                 if namespace in json.dumps(w["spec"]) and '"kind": "Deployment"' in json.dumps(w["spec"])]
        assert len(works) == 1, works
        wait(lambda: len(ready_hub_pods()) == 2, "the Deployment back at two Ready pods")

        # deploy/ as written runs in the member too: tether dns, hardened as on a real cluster
        in_member("apply", "-k", str(ROOT / "deploy" / "dns"))
        in_member("-n", NS, "rollout", "status", "deploy/tether-dns", f"--timeout={WAIT_S}s")
        answer = in_member("-n", NS, "exec", "deploy/tether-dns", "--", "python3", "-c",
                           "import urllib.request as u; print(u.urlopen('http://127.0.0.1:9153/ready').status)")
        assert answer.stdout.strip() == "200", answer.stdout + answer.stderr
    finally:
        sh("tether", "local", "down", "--data-dir", str(data), check=False)
