"""What every tether workload shares: labels, the hardened container, probes, volumes.

The image runs as a numeric non-root user with a read-only root filesystem (see the
`Dockerfile`): a container writes only to `/tmp` and to its data directory (`TETHER_HOME`), both
`emptyDir` volumes here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from tether.objects import Obj

NAMESPACE = "tether-system"
DATA_DIR = "/var/lib/tether"
UID = 65532  # the Dockerfile's USER
PART_OF = {"app.kubernetes.io/part-of": "tether"}


def labels(name: str, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/component": component, **PART_OF}


def meta(name: str, component: str, namespace: str | None = None,
         extra_labels: Mapping[str, str] | None = None) -> Obj:
    out: Obj = {"name": name}
    if namespace:
        out["namespace"] = namespace
    out["labels"] = {**labels(name, component), **(extra_labels or {})}
    return out


def namespace(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": dict(PART_OF)}}


def service_account(name: str, component: str, ns: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(name, component, ns)}


def cluster_role(name: str, component: str, ns: str, rules: Sequence[Obj]) -> list[Obj]:
    """A ClusterRole bound to the ServiceAccount of the same name in `ns`."""
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": meta(name, component), "rules": list(rules)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": meta(name, component),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]},
    ]


def role(name: str, component: str, ns: str, rules: Sequence[Obj]) -> list[Obj]:
    """A Role in `ns` bound to the ServiceAccount of the same name there."""
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": meta(name, component, ns), "rules": list(rules)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": meta(name, component, ns),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]},
    ]


def http_probe(path: str, port: str | int, *, period_s: int = 10, failures: int = 3,
               initial_delay_s: int = 0) -> Obj:
    probe: Obj = {"httpGet": {"path": path, "port": port}, "periodSeconds": period_s,
                  "timeoutSeconds": 5, "failureThreshold": failures}
    if initial_delay_s:
        probe["initialDelaySeconds"] = initial_delay_s
    return probe


def exec_probe(argv: Sequence[str], *, period_s: int = 30, failures: int = 3) -> Obj:
    # a Python program starts in about a second: a generous timeout, a slow period
    return {"exec": {"command": list(argv)}, "periodSeconds": period_s, "timeoutSeconds": 20,
            "failureThreshold": failures}


def resources(cpu: str = "50m", memory: str = "128Mi", memory_limit: str = "512Mi") -> Obj:
    # no CPU limit: throttling a controller only makes it late; memory is bounded
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory_limit}}


def security_context(*, root: bool = False, add: Sequence[str] = ()) -> Obj:
    context: Obj = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"], **({"add": list(add)} if add else {})}}
    if root:
        context.update(runAsNonRoot=False, runAsUser=0)
    else:
        context.update(runAsNonRoot=True, runAsUser=UID, runAsGroup=UID)
    context["seccompProfile"] = {"type": "RuntimeDefault"}
    return context


def writable_volumes() -> tuple[list[Obj], list[Obj]]:
    """(volumes, mounts) for /tmp and the data directory: all a container may write."""
    volumes = [{"name": "tmp", "emptyDir": {}}, {"name": "data", "emptyDir": {}}]
    mounts = [{"name": "tmp", "mountPath": "/tmp"}, {"name": "data", "mountPath": DATA_DIR}]
    return volumes, mounts


def container(name: str, image: str, args: Sequence[str], *, ports: Sequence[Obj] = (),
              liveness: Obj, readiness: Obj, mounts: Sequence[Obj] = (), env: Sequence[Obj] = (),
              res: Obj | None = None, security: Obj | None = None) -> Obj:
    """A container of tether's image: `args` after the `tether` entrypoint."""
    _, data_mounts = writable_volumes()
    out: Obj = {"name": name, "image": image, "imagePullPolicy": "IfNotPresent", "args": list(args)}
    out["env"] = [{"name": "TETHER_HOME", "value": DATA_DIR}, *env]
    if ports:
        out["ports"] = list(ports)
    out.update(livenessProbe=liveness, readinessProbe=readiness, resources=res or resources(),
               securityContext=security or security_context(),
               volumeMounts=[*data_mounts, *mounts])
    return out


def pod_spec(sa: str, containers: Sequence[Obj], volumes: Sequence[Obj] = (), **extra: Any) -> Obj:
    data_volumes, _ = writable_volumes()
    spec: Obj = {"serviceAccountName": sa,
                 "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID,
                                     "fsGroup": UID, "seccompProfile": {"type": "RuntimeDefault"}},
                 **extra, "containers": list(containers), "volumes": [*data_volumes, *volumes]}
    return spec


def deployment(name: str, component: str, ns: str, spec: Obj, *, replicas: int = 1,
               pod_annotations: Mapping[str, str] | None = None,
               extra_labels: Mapping[str, str] | None = None) -> Obj:
    selector = {"app.kubernetes.io/name": name, **PART_OF}
    template_meta: Obj = {"labels": {**labels(name, component), **(extra_labels or {})}}
    if pod_annotations:
        template_meta["annotations"] = dict(pod_annotations)
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": meta(name, component, ns, extra_labels),
            "spec": {"replicas": replicas, "selector": {"matchLabels": selector},
                     "template": {"metadata": template_meta, "spec": spec}}}


class _Dumper(yaml.SafeDumper):
    pass


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # configs (JSON, a Corefile) stay readable: multi-line strings as literal blocks
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def to_yaml(objects: Sequence[Obj]) -> str:
    return yaml.dump_all(list(objects), Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         width=100)
