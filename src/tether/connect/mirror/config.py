"""semaphore-service-mirror's JSON configuration, read unchanged, and its flag overrides.

The file has three sections (`global`, `localCluster`, `remoteClusters`); flags (or their
`SSM_*` environment variables) override the four global selectors/namespace when set, as
upstream does. Validation follows upstream's rules (every selector and the mirror namespace
must end up set, `localCluster.name` is required, each remote needs a `name`, a `servicePrefix`
and either `kubeConfigPath` or all of `remoteAPIURL`, `remoteCAURL`, `remoteSATokenPath`), and
adds what upstream only finds out at run time: wrong JSON types, selectors that do not parse,
and prefixes that cannot start a Service name. Every error names the key.

Keys tether adds (upstream ignores unknown keys, so a file using them still works there):
`stalePolicy` (`keep` | `not-ready` | `withdraw`) and `staleAfter` (a duration) on a remote or,
as defaults for every remote, in `global`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from tether.connect.durations import DurationError, parse_duration
from tether.connect.names import is_label
from tether.objects.selectors import SelectorError, parse_label_selector

StalePolicy = Literal["keep", "not-ready", "withdraw"]
STALE_POLICIES: tuple[str, ...] = ("keep", "not-ready", "withdraw")
DEFAULT_STALE_AFTER_S = 30.0
DEFAULT_ZONES = ("local",)


class ConfigError(ValueError):
    """A configuration problem at `key` (a dotted path into the file, or a flag name)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


@dataclass(frozen=True)
class StaleSettings:
    """What mirrors of an unreachable remote do once it has been unreachable for `after_s`:
    stay as they were (`keep`, Semaphore's behaviour), turn not ready, or lose their endpoints."""

    policy: StalePolicy = "keep"
    after_s: float = DEFAULT_STALE_AFTER_S


@dataclass(frozen=True)
class GlobalSettings:
    mirror_svc_label_selector: str
    global_svc_label_selector: str
    global_svc_routing_strategy_label: str
    mirror_namespace: str
    service_sync: bool = False
    endpoint_slice_sync: bool = False


@dataclass(frozen=True)
class LocalClusterSettings:
    name: str
    zones: tuple[str, ...] = DEFAULT_ZONES
    kubeconfig_path: str = ""


@dataclass(frozen=True)
class RemoteClusterSettings:
    name: str
    service_prefix: str
    kubeconfig_path: str = ""
    remote_api_url: str = ""
    remote_ca_url: str = ""
    remote_sa_token_path: str = ""
    resync_s: float = 0.0
    stale: StaleSettings = field(default_factory=StaleSettings)


@dataclass(frozen=True)
class MirrorConfig:
    global_settings: GlobalSettings
    local: LocalClusterSettings
    remotes: tuple[RemoteClusterSettings, ...]
    unknown_keys: tuple[str, ...] = ()  # ignored, as upstream ignores them; worth a warning


@dataclass(frozen=True)
class Overrides:
    """Flag (or environment) values; empty means "not given"."""

    mirror_svc_label_selector: str = ""
    global_svc_label_selector: str = ""
    global_svc_routing_strategy_label: str = ""
    mirror_namespace: str = ""


_GLOBAL_KEYS = frozenset({"globalSvcLabelSelector", "globalSvcRoutingStrategyLabel", "mirrorSvcLabelSelector",
                          "mirrorNamespace", "serviceSync", "endpointSliceSync", "stalePolicy", "staleAfter"})
_LOCAL_KEYS = frozenset({"name", "zones", "kubeConfigPath"})
_REMOTE_KEYS = frozenset({"name", "kubeConfigPath", "remoteAPIURL", "remoteCAURL", "remoteSATokenPath",
                          "resyncPeriod", "servicePrefix", "stalePolicy", "staleAfter"})
_TOP_KEYS = frozenset({"global", "localCluster", "remoteClusters"})

# which flag overrides which key, for messages
FLAG_OF = {
    "mirrorSvcLabelSelector": "-mirror-svc-label-selector",
    "globalSvcLabelSelector": "-global-svc-label-selector",
    "globalSvcRoutingStrategyLabel": "-global-svc-routing-strategy-label",
    "mirrorNamespace": "-mirror-ns",
}


def load_config(raw: bytes | str, overrides: Overrides | None = None) -> MirrorConfig:
    """Parse and validate; `ConfigError` names the first bad key."""
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ConfigError("config", f"not valid JSON: {exc}") from None
    return parse_config(doc, overrides or Overrides())


def parse_config(doc: Any, overrides: Overrides) -> MirrorConfig:
    if not isinstance(doc, dict):
        raise ConfigError("config", "must be a JSON object with global, localCluster and remoteClusters")
    unknown = [k for k in doc if k not in _TOP_KEYS]
    section = _object(doc, "global")
    unknown += [f"global.{k}" for k in section if k not in _GLOBAL_KEYS]
    settings = GlobalSettings(
        mirror_svc_label_selector=_overridden(section, "mirrorSvcLabelSelector", overrides.mirror_svc_label_selector),
        global_svc_label_selector=_overridden(section, "globalSvcLabelSelector", overrides.global_svc_label_selector),
        global_svc_routing_strategy_label=_overridden(section, "globalSvcRoutingStrategyLabel",
                                                      overrides.global_svc_routing_strategy_label),
        mirror_namespace=_overridden(section, "mirrorNamespace", overrides.mirror_namespace),
        service_sync=_bool(section, "serviceSync", "global"),
        endpoint_slice_sync=_bool(section, "endpointSliceSync", "global"),
    )
    for key in ("mirrorSvcLabelSelector", "globalSvcLabelSelector", "globalSvcRoutingStrategyLabel"):
        value = getattr(settings, _attr(key))
        try:
            parse_label_selector(value)
        except SelectorError as exc:
            raise ConfigError(f"global.{key}", f"not a label selector ({exc}): {value!r}") from None
    if not is_label(settings.mirror_namespace):
        raise ConfigError("global.mirrorNamespace", f"{settings.mirror_namespace!r} is not a namespace name "
                          "(lower case letters, digits and '-', at most 63)")
    default_stale = _stale(section, "global", StaleSettings())

    local_doc = _object(doc, "localCluster")
    unknown += [f"localCluster.{k}" for k in local_doc if k not in _LOCAL_KEYS]
    local_name = _string(local_doc, "name", "localCluster")
    if not local_name:
        raise ConfigError("localCluster.name", "required: a name for the local cluster")
    zones = local_doc.get("zones")
    if zones is None:
        zone_list: tuple[str, ...] = DEFAULT_ZONES
    elif isinstance(zones, list) and all(isinstance(z, str) and z for z in zones):
        zone_list = tuple(zones) or DEFAULT_ZONES
    else:
        raise ConfigError("localCluster.zones", "must be a list of zone names (strings)")
    local = LocalClusterSettings(local_name, zone_list, _string(local_doc, "kubeConfigPath", "localCluster"))

    remotes_doc = doc.get("remoteClusters")
    if remotes_doc is None or remotes_doc == []:
        raise ConfigError("remoteClusters", "no remote cluster configured: list at least one")
    if not isinstance(remotes_doc, list):
        raise ConfigError("remoteClusters", "must be a list of remote cluster objects")
    remotes: list[RemoteClusterSettings] = []
    for i, entry in enumerate(remotes_doc):
        where = f"remoteClusters[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(where, "must be an object")
        unknown += [f"{where}.{k}" for k in entry if k not in _REMOTE_KEYS]
        remotes.append(_remote(entry, where, default_stale))
    _unique(remotes, "name")
    _unique(remotes, "servicePrefix")
    return MirrorConfig(settings, local, tuple(remotes), tuple(unknown))


def _remote(entry: Mapping[str, Any], where: str, default_stale: StaleSettings) -> RemoteClusterSettings:
    name = _string(entry, "name", where)
    if not name:
        raise ConfigError(f"{where}.name", "required: a name for the remote cluster")
    prefix = _string(entry, "servicePrefix", where)
    if not prefix:
        raise ConfigError(f"{where}.servicePrefix", "required: how to prefix Services mirrored from this remote")
    if not is_label(prefix):
        raise ConfigError(f"{where}.servicePrefix", f"{prefix!r} cannot start a Service name: use lower case "
                          "letters, digits and '-', starting with a letter")
    kubeconfig = _string(entry, "kubeConfigPath", where)
    api, ca, token = (_string(entry, k, where) for k in ("remoteAPIURL", "remoteCAURL", "remoteSATokenPath"))
    if not kubeconfig and not (api and ca and token):
        missing = [k for k, v in (("remoteAPIURL", api), ("remoteCAURL", ca), ("remoteSATokenPath", token)) if not v]
        raise ConfigError(f"{where}.{missing[0]}", "insufficient configuration to reach the remote: set "
                          "kubeConfigPath, or remoteAPIURL and remoteCAURL and remoteSATokenPath")
    for key, value in (("remoteAPIURL", api), ("remoteCAURL", ca)):
        if value and not value.startswith(("https://", "http://")):
            raise ConfigError(f"{where}.{key}", f"{value!r} is not an http(s) URL")
    return RemoteClusterSettings(
        name=name, service_prefix=prefix, kubeconfig_path=kubeconfig, remote_api_url=api, remote_ca_url=ca,
        remote_sa_token_path=token, resync_s=_duration(entry, "resyncPeriod", where, 0.0),
        stale=_stale(entry, where, default_stale))


def _stale(section: Mapping[str, Any], where: str, default: StaleSettings) -> StaleSettings:
    policy = section.get("stalePolicy", default.policy)
    if policy not in STALE_POLICIES:
        raise ConfigError(f"{where}.stalePolicy", f"{policy!r} is not one of {', '.join(STALE_POLICIES)}")
    after = _duration(section, "staleAfter", where, default.after_s)
    if after < 0:
        raise ConfigError(f"{where}.staleAfter", "must not be negative")
    return StaleSettings(cast(StalePolicy, policy), after)


def _attr(key: str) -> str:
    return {"mirrorSvcLabelSelector": "mirror_svc_label_selector",
            "globalSvcLabelSelector": "global_svc_label_selector",
            "globalSvcRoutingStrategyLabel": "global_svc_routing_strategy_label"}[key]


def _overridden(section: Mapping[str, Any], key: str, flag_value: str) -> str:
    value = flag_value or _string(section, key, "global")
    if not value:
        raise ConfigError(f"global.{key}", f"required: set it in the file or with {FLAG_OF[key]}")
    return value


def _object(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(key, "must be an object")
    return value


def _string(section: Mapping[str, Any], key: str, where: str) -> str:
    value = section.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key}", f"must be a string, got {json.dumps(value)}")
    return value


def _bool(section: Mapping[str, Any], key: str, where: str) -> bool:
    value = section.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key}", f"must be true or false, got {json.dumps(value)}")
    return value


def _duration(section: Mapping[str, Any], key: str, where: str, default: float) -> float:
    """A Go duration string, or a number of nanoseconds (what upstream's JSON decoding takes)."""
    value = section.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        raise ConfigError(f"{where}.{key}", f"must be a duration such as \"10s\", got {json.dumps(value)}")
    if isinstance(value, int | float):
        return float(value) / 1e9
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except DurationError as exc:
            raise ConfigError(f"{where}.{key}", str(exc)) from None
    raise ConfigError(f"{where}.{key}", f"must be a duration such as \"10s\", got {json.dumps(value)}")


def _unique(remotes: Sequence[RemoteClusterSettings], key: str) -> None:
    seen: dict[str, int] = {}
    for i, remote in enumerate(remotes):
        value = remote.name if key == "name" else remote.service_prefix
        if value in seen:
            raise ConfigError(f"remoteClusters[{i}].{key}",
                              f"{value!r} is also remoteClusters[{seen[value]}].{key}: each remote needs its own")
        seen[value] = i
