"""Merge metadata for built-in kinds: which lists merge by key, which are sets, which are atomic.

This is the part of the OpenAPI `x-kubernetes-patch-*` / `x-kubernetes-list-*` extensions that
strategic merge patch and server-side apply need. Only the paths that matter in practice are
listed (docs/api-server-notes.md, strategic merge patch); anything else is a plain map or an atomic list, which is also what
the real server does for unlisted lists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

ListType = Literal["atomic", "map", "set"]

_NO_FIELDS: Mapping[str, MergeSchema] = MappingProxyType({})
_NO_DEFAULTS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, eq=False)
class MergeSchema:
    """How the value at one path merges; `fields` holds the schemas of named children.

    For a list, the node describes the list and `fields` describe the fields of its items.
    """

    fields: Mapping[str, MergeSchema] = field(default_factory=lambda: _NO_FIELDS)
    # "atomic": replaced whole; "map": items identified by `keys`; "set": merged scalars.
    list_type: ListType = "atomic"
    # List-map keys as server-side apply uses them; keys[0] is SMP's patchMergeKey.
    keys: tuple[str, ...] = ()
    # Values the server defaults for absent key fields (ports: protocol=TCP), so an applied
    # item without them still finds its live counterpart.
    key_defaults: Mapping[str, Any] = field(default_factory=lambda: _NO_DEFAULTS)
    # The map (or each item of this list) carries `$retainKeys` in patches from kubectl.
    retain_keys: bool = False
    # Server-side apply owns this map as one value (metav1.LabelSelector is structType=atomic).
    atomic_map: bool = False

    def child(self, name: str) -> MergeSchema:
        return self.fields.get(name, UNTYPED)

    def has_child(self, name: str) -> bool:
        return name in self.fields

    @property
    def merge_key(self) -> str | None:
        return self.keys[0] if self.list_type == "map" and self.keys else None


# No knowledge at all: maps merge, lists are atomic. Also the schema of custom resources.
UNTYPED = MergeSchema()


def _struct(**fields: MergeSchema) -> MergeSchema:
    return MergeSchema(fields=MappingProxyType(fields))


def _keyed(
    *keys: str,
    defaults: Mapping[str, Any] = _NO_DEFAULTS,
    retain_keys: bool = False,
    **fields: MergeSchema,
) -> MergeSchema:
    return MergeSchema(
        fields=MappingProxyType(fields),
        list_type="map",
        keys=keys,
        key_defaults=MappingProxyType(dict(defaults)),
        retain_keys=retain_keys,
    )


_SET = MergeSchema(list_type="set")
_SELECTOR = MergeSchema(atomic_map=True)
_CONDITIONS = _keyed("type")
_METADATA = _struct(ownerReferences=_keyed("uid"), finalizers=_SET)
_STATUS = _struct(conditions=_CONDITIONS)

_CONTAINER = _keyed(
    "name",
    env=_keyed("name"),
    ports=_keyed("containerPort", "protocol", defaults={"protocol": "TCP"}),
    volumeMounts=_keyed("mountPath"),
    volumeDevices=_keyed("devicePath"),
)
_POD_SPEC = _struct(
    containers=_CONTAINER,
    initContainers=_CONTAINER,
    ephemeralContainers=_CONTAINER,
    volumes=_keyed("name", retain_keys=True),  # VolumeSource is inlined with retainKeys
    imagePullSecrets=_keyed("name"),
    hostAliases=_keyed("ip"),
    topologySpreadConstraints=_keyed("topologyKey", "whenUnsatisfiable"),
    resourceClaims=_keyed("name"),
    schedulingGates=_keyed("name"),
)
_POD_TEMPLATE = _struct(metadata=_METADATA, spec=_POD_SPEC)


def _kind(*, spec: MergeSchema | None = None, status: MergeSchema = _STATUS) -> MergeSchema:
    fields = {"metadata": _METADATA, "status": status}
    if spec is not None:
        fields["spec"] = spec
    return _struct(**fields)


def _workload(**extra: MergeSchema) -> MergeSchema:
    return _kind(spec=_struct(template=_POD_TEMPLATE, selector=_SELECTOR, **extra))


_GENERIC = _kind()

_KINDS: Mapping[tuple[str, str], MergeSchema] = MappingProxyType(
    {
        ("", "Pod"): _kind(
            spec=_POD_SPEC,
            status=_struct(conditions=_CONDITIONS, podIPs=_keyed("ip"), hostIPs=_keyed("ip")),
        ),
        ("", "PodTemplate"): _struct(metadata=_METADATA, template=_POD_TEMPLATE),
        ("", "ReplicationController"): _kind(spec=_struct(template=_POD_TEMPLATE)),
        ("", "Node"): _kind(
            spec=_struct(podCIDRs=_SET),
            status=_struct(conditions=_CONDITIONS, addresses=_keyed("type")),
        ),
        ("", "Service"): _kind(
            spec=_struct(ports=_keyed("port", "protocol", defaults={"protocol": "TCP"})),
        ),
        # subsets is atomic, so these keys only matter to a client that patches a subset.
        ("", "Endpoints"): _struct(
            metadata=_METADATA,
            subsets=MergeSchema(
                fields=MappingProxyType(
                    {"addresses": _keyed("ip"), "notReadyAddresses": _keyed("ip")}
                )
            ),
        ),
        ("", "ServiceAccount"): _struct(metadata=_METADATA, secrets=_keyed("name")),
        ("apps", "Deployment"): _workload(strategy=MergeSchema(retain_keys=True)),
        ("apps", "ReplicaSet"): _workload(),
        ("apps", "StatefulSet"): _workload(),
        ("apps", "DaemonSet"): _workload(),
        ("batch", "Job"): _workload(),
        ("batch", "CronJob"): _kind(
            spec=_struct(
                jobTemplate=_struct(
                    metadata=_METADATA,
                    spec=_struct(template=_POD_TEMPLATE, selector=_SELECTOR),
                )
            )
        ),
    }
)

# Groups served by the built-in API server. Their kinds accept strategic merge patch even when
# the table above has nothing special for them; any other group is a custom resource.
_BUILTIN_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "autoscaling",
        "policy",
        "discovery.k8s.io",
        "networking.k8s.io",
        "coordination.k8s.io",
        "rbac.authorization.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "admissionregistration.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "certificates.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "node.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
        "resource.k8s.io",
    }
)


def merge_schema_for(group: str, kind: str) -> MergeSchema | None:
    """The merge schema of a built-in kind, or None for custom resources (SMP gives 415)."""
    schema = _KINDS.get((group, kind))
    if schema is not None:
        return schema
    return _GENERIC if group in _BUILTIN_GROUPS else None


# custom resources ------------------------------------------------------------------------------

_FROM_OPENAPI: dict[int, tuple[Mapping[str, Any], MergeSchema]] = {}
_FROM_OPENAPI_MAX = 512


def merge_schema_from_openapi(schema: Mapping[str, Any]) -> MergeSchema:
    """How a custom resource merges under server-side apply, from its CRD's structural schema
    (openAPIV3Schema): lists are atomic unless `x-kubernetes-list-type` says `map` (items keyed
    by `x-kubernetes-list-map-keys`) or `set`, and `x-kubernetes-map-type: atomic` makes a map
    one value, as the real server reads them. Maps under `additionalProperties` merge untyped.
    Cached per schema object (a CRD version's schema is replaced, never changed, on update)."""
    cached = _FROM_OPENAPI.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    result = _from_openapi(schema)
    if len(_FROM_OPENAPI) >= _FROM_OPENAPI_MAX:
        _FROM_OPENAPI.clear()
    _FROM_OPENAPI[id(schema)] = (schema, result)
    return result


def _from_openapi(node: Mapping[str, Any]) -> MergeSchema:
    if node.get("type") == "array":
        items = node.get("items")
        items = items if isinstance(items, Mapping) else {}
        list_type = node.get("x-kubernetes-list-type")
        keys = tuple(str(k) for k in node.get("x-kubernetes-list-map-keys") or ())
        if list_type == "map" and keys:
            return MergeSchema(fields=_openapi_properties(items), list_type="map", keys=keys)
        if list_type == "set":
            return _SET
        return MergeSchema()  # atomic
    if node.get("x-kubernetes-map-type") == "atomic":
        return MergeSchema(atomic_map=True)
    return MergeSchema(fields=_openapi_properties(node))


def _openapi_properties(node: Mapping[str, Any]) -> Mapping[str, MergeSchema]:
    properties = node.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return _NO_FIELDS
    return MappingProxyType({str(k): _from_openapi(v) for k, v in properties.items() if isinstance(v, Mapping)})
