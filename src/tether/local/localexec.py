"""`tether local exec CLUSTER -- CMD`: a command inside a local cluster's network.

Rootless clusters share the host's network: the command runs as it is, with `KUBECONFIG` set to
the local clusters' kubeconfig and its current context the cluster's. Netns clusters
(`tether local up --netns`): the command runs in the cluster's first node namespace (where
host-network pods run, like `docker exec` into a kind node) through `ip netns exec`, and its
kubeconfig names every netns cluster's API by its `kubernetes` Service address (`https://<first
Service address>:443`, in the API server's certificate): the address a pod uses, reachable
from inside whether or not the API is isolated (`--isolate-api`), and, for another cluster,
once the underlay joins them. Rootless clusters' entries (host loopback) stay as they are.

`plan` is pure: it takes the state files' contents and returns what to run.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.local.netns import node_namespace
from tether.local.network import NETNS, ClusterNetwork

ENV_CLUSTER = "TETHER_LOCAL_CLUSTER"


class ExecError(Exception):
    pass


@dataclass(frozen=True)
class ExecPlan:
    argv: tuple[str, ...]
    kubeconfig: Mapping[str, Any]  # written to a file; KUBECONFIG points at it
    env: Mapping[str, str] = field(default_factory=dict)
    namespace: str = ""  # netns mode: the network namespace the command runs in


def plan(cluster: str, argv: Sequence[str], *, running: Sequence[str],
         networks: Mapping[str, Mapping[str, Any]], kubeconfig: Mapping[str, Any]) -> ExecPlan:
    """What `tether local exec cluster -- argv` runs. `running`: the clusters the daemon serves;
    `networks`: each cluster's network.json; `kubeconfig`: the local clusters' kubeconfig."""
    if not argv:
        raise ExecError("no command: `tether local exec CLUSTER -- COMMAND [ARGS...]`")
    if cluster not in running:
        names = ", ".join(running) or "none"
        raise ExecError(f"no running local cluster {cluster!r} (running: {names}); start it with "
                        f"`tether local up --name {cluster}`")
    config = copy.deepcopy(dict(kubeconfig))
    contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
    if cluster not in contexts:
        raise ExecError(f"the local kubeconfig has no context {cluster!r}: run `tether local up` again")
    config["current-context"] = cluster
    for name, context in contexts.items():
        network = networks.get(name) or {}
        if network.get("mode") != NETNS:
            continue
        inside = ClusterNetwork.netns(int(network["index"]))
        for entry in config.get("clusters") or []:
            if entry["name"] == context["cluster"]:
                entry["cluster"]["server"] = f"https://{inside.api_service_ip}:443"
    own = networks.get(cluster) or {}
    env = {ENV_CLUSTER: cluster}
    if own.get("mode") != NETNS:
        return ExecPlan(tuple(argv), config, env)
    namespace = node_namespace(int(own["index"]), 0)
    return ExecPlan(("ip", "netns", "exec", namespace, *argv), config, env, namespace)


def environment(base: Mapping[str, str], chosen: ExecPlan, kubeconfig_path: str) -> dict[str, str]:
    return {**base, **chosen.env, "KUBECONFIG": kubeconfig_path}
