"""What `tether local exec` runs (pure): the namespace, the kubeconfig as seen from inside."""

from __future__ import annotations

from typing import Any

import pytest

from tether.local.localexec import ExecError, plan

KUBECONFIG: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Config", "current-context": "hub",
    "clusters": [{"name": c, "cluster": {"server": f"https://127.0.0.1:{p}",
                                         "certificate-authority-data": "Q0E="}}
                 for c, p in (("hub", 6001), ("member", 6002), ("plain", 6003))],
    "users": [{"name": c, "user": {"client-certificate-data": "x"}} for c in ("hub", "member", "plain")],
    "contexts": [{"name": c, "context": {"cluster": c, "user": c}} for c in ("hub", "member", "plain")],
}
NETWORKS = {"hub": {"index": 0, "mode": "netns"}, "member": {"index": 1, "mode": "netns"},
            "plain": {"index": 3, "mode": "rootless"}}
RUNNING = ["hub", "member", "plain"]


def servers(config: Any) -> dict[str, str]:
    return {c["name"]: c["cluster"]["server"] for c in config["clusters"]}


def test_netns_runs_in_the_first_node_namespace_with_inside_addresses() -> None:
    chosen = plan("member", ["kubectl", "get", "pods"], running=RUNNING, networks=NETWORKS,
                  kubeconfig=KUBECONFIG)
    assert chosen.argv == ("ip", "netns", "exec", "tether-1-n0", "kubectl", "get", "pods")
    assert chosen.kubeconfig["current-context"] == "member"
    # every netns cluster by its `kubernetes` Service address; the rootless one as it is
    assert servers(chosen.kubeconfig) == {"hub": "https://10.96.0.1:443",
                                          "member": "https://10.97.0.1:443",
                                          "plain": "https://127.0.0.1:6003"}
    assert chosen.env == {"TETHER_LOCAL_CLUSTER": "member"}
    assert servers(KUBECONFIG)["member"] == "https://127.0.0.1:6002"  # the input is not changed


def test_rootless_runs_as_it_is() -> None:
    chosen = plan("plain", ["sh"], running=RUNNING, networks=NETWORKS, kubeconfig=KUBECONFIG)
    assert chosen.argv == ("sh",) and chosen.namespace == ""
    assert chosen.kubeconfig["current-context"] == "plain"


@pytest.mark.parametrize(("cluster", "argv", "running", "message"), [
    ("member", [], RUNNING, "no command"),
    ("gone", ["sh"], RUNNING, "no running local cluster 'gone'"),
    ("member", ["sh"], [], "running: none"),
])
def test_refused(cluster: str, argv: list[str], running: list[str], message: str) -> None:
    with pytest.raises(ExecError, match=message):
        plan(cluster, argv, running=running, networks=NETWORKS, kubeconfig=KUBECONFIG)
