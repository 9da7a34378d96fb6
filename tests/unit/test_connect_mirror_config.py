"""semaphore-service-mirror's configuration: upstream's documented example, overrides, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tether.connect.durations import DurationError, parse_duration
from tether.connect.mirror.config import ConfigError, Overrides, load_config, parse_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "connect"

UPSTREAM_README_EXAMPLE = {
    "global": {
        "globalSvcLabelSelector": "mirror.semaphore.uw.io/global-service=true",
        "globalSvcRoutingStrategyLabel": "mirror.semaphore.uw.io/global-service-routing-strategy=local-first",
        "mirrorSvcLabelSelector": "mirror.semaphore.uw.io/mirror-service=true",
        "mirrorNamespace": "semaphore",
        "serviceSync": True,
    },
    "localCluster": {"name": "local", "kubeConfigPath": "/path/to/local/kubeconfig"},
    "remoteClusters": [{
        "name": "clusterA",
        "remoteCAURL": "https://ca.example",
        "remoteAPIURL": "https://api.example",
        "remoteSATokenPath": "/path/to/token",
        "resyncPeriod": "10s",
        "servicePrefix": "cluster-a",
    }],
}


def _doc(**changes: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(UPSTREAM_README_EXAMPLE))
    for path, value in changes.items():
        target = doc
        parts = path.split("__")
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if value is _DELETE:
            del target[parts[-1]]
        else:
            target[parts[-1]] = value
    return doc


_DELETE = object()


def test_upstreams_documented_example_reads() -> None:
    config = parse_config(_doc(), Overrides())
    assert config.global_settings.mirror_namespace == "semaphore"
    assert config.global_settings.service_sync is True
    assert config.global_settings.endpoint_slice_sync is False
    assert config.local.name == "local" and config.local.zones == ("local",)
    (remote,) = config.remotes
    assert remote.service_prefix == "cluster-a"
    assert remote.resync_s == 10.0
    assert remote.stale.policy == "keep"


def test_the_repository_example_reads_unchanged() -> None:
    config = load_config((EXAMPLES / "semaphore-service-mirror.json").read_bytes())
    assert config.global_settings.mirror_namespace == "sys-semaphore"
    assert [r.service_prefix for r in config.remotes] == ["aws"]
    assert config.unknown_keys == ()


def test_flags_override_the_file() -> None:
    config = parse_config(_doc(), Overrides(mirror_namespace="sys-semaphore", mirror_svc_label_selector="a=b"))
    assert config.global_settings.mirror_namespace == "sys-semaphore"
    assert config.global_settings.mirror_svc_label_selector == "a=b"


def test_a_flag_fills_a_missing_key() -> None:
    config = parse_config(_doc(global__mirrorNamespace=_DELETE), Overrides(mirror_namespace="x"))
    assert config.global_settings.mirror_namespace == "x"


def test_resync_period_in_nanoseconds() -> None:
    config = parse_config(_doc(remoteClusters__0__resyncPeriod=2_000_000_000), Overrides())
    assert config.remotes[0].resync_s == 2.0


def test_stale_policy_defaults_from_global() -> None:
    config = parse_config(_doc(global__stalePolicy="withdraw", global__staleAfter="1m"), Overrides())
    assert config.remotes[0].stale.policy == "withdraw" and config.remotes[0].stale.after_s == 60.0
    config = parse_config(_doc(global__stalePolicy="withdraw", remoteClusters__0__stalePolicy="not-ready"),
                          Overrides())
    assert config.remotes[0].stale.policy == "not-ready"


def test_a_kubeconfig_remote_needs_nothing_else() -> None:
    doc = _doc(remoteClusters=[{"name": "b", "servicePrefix": "b", "kubeConfigPath": "b.kubeconfig"}])
    assert parse_config(doc, Overrides()).remotes[0].kubeconfig_path == "b.kubeconfig"


def test_unknown_keys_are_reported_not_fatal() -> None:
    doc = _doc(remoteClusters__0__remoteSATokenPiath="typo")
    assert parse_config(doc, Overrides()).unknown_keys == ("remoteClusters[0].remoteSATokenPiath",)


@pytest.mark.parametrize(("changes", "key"), [
    ({"global__mirrorNamespace": _DELETE}, "global.mirrorNamespace"),
    ({"global__mirrorSvcLabelSelector": _DELETE}, "global.mirrorSvcLabelSelector"),
    ({"global__globalSvcLabelSelector": ""}, "global.globalSvcLabelSelector"),
    ({"global__globalSvcRoutingStrategyLabel": _DELETE}, "global.globalSvcRoutingStrategyLabel"),
    ({"global__mirrorSvcLabelSelector": "a in (b"}, "global.mirrorSvcLabelSelector"),
    ({"global__serviceSync": "yes"}, "global.serviceSync"),
    ({"global__mirrorNamespace": "Sys_Semaphore"}, "global.mirrorNamespace"),
    ({"localCluster__name": _DELETE}, "localCluster.name"),
    ({"localCluster__zones": "a"}, "localCluster.zones"),
    ({"remoteClusters": []}, "remoteClusters"),
    ({"remoteClusters": {"name": "x"}}, "remoteClusters"),
    ({"remoteClusters__0__name": _DELETE}, "remoteClusters[0].name"),
    ({"remoteClusters__0__servicePrefix": _DELETE}, "remoteClusters[0].servicePrefix"),
    ({"remoteClusters__0__servicePrefix": "Cluster-A"}, "remoteClusters[0].servicePrefix"),
    ({"remoteClusters__0__remoteCAURL": _DELETE}, "remoteClusters[0].remoteCAURL"),
    ({"remoteClusters__0__remoteAPIURL": "api.example"}, "remoteClusters[0].remoteAPIURL"),
    ({"remoteClusters__0__resyncPeriod": "10 seconds"}, "remoteClusters[0].resyncPeriod"),
    ({"remoteClusters__0__resyncPeriod": True}, "remoteClusters[0].resyncPeriod"),
    ({"remoteClusters__0__stalePolicy": "drop"}, "remoteClusters[0].stalePolicy"),
    ({"remoteClusters__0__name": 7}, "remoteClusters[0].name"),
])
def test_errors_name_the_key(changes: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_doc(**changes), Overrides())
    assert caught.value.key == key
    assert str(caught.value).startswith(key + ": ")


def test_duplicate_prefixes_are_refused() -> None:
    remote = UPSTREAM_README_EXAMPLE["remoteClusters"][0]  # type: ignore[index]
    doc = _doc(remoteClusters=[remote, {**remote, "name": "other"}])
    with pytest.raises(ConfigError) as caught:
        parse_config(doc, Overrides())
    assert caught.value.key == "remoteClusters[1].servicePrefix"


def test_not_json() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(b"{")
    assert caught.value.key == "config"


@pytest.mark.parametrize(("text", "seconds"), [
    ("10s", 10.0), ("1m30s", 90.0), ("250ms", 0.25), ("1h", 3600.0), ("0", 0.0), ("1.5s", 1.5), ("-2s", -2.0),
])
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "s", "1x", "1 s"])
def test_bad_go_durations(text: str) -> None:
    with pytest.raises(DurationError):
        parse_duration(text)
