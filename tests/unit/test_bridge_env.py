"""The kubelet's environment rules, resolved client-side (tether.bridge.envresolve), table-driven."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tether.bridge import quantity
from tether.bridge.envresolve import (
    PodFacts,
    ResolveError,
    ServiceAddress,
    expand,
    is_env_name,
    references,
    resolve,
)
from tether.bridge.render import REDACTED, render


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def pod(container: dict[str, Any], *, running: bool = True, links: bool | None = None,
        ns: str = "shop") -> PodFacts:
    spec: dict[str, Any] = {"containers": [{"name": "app", **container}], "serviceAccountName": "api-sa",
                            "nodeName": "node-1"}
    if links is not None:
        spec["enableServiceLinks"] = links
    meta = {"name": "api-7f9", "namespace": ns, "uid": "u-1", "labels": {"app": "api", "tier": "web"},
            "annotations": {"team": 'a "b"'}}
    status = {"podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}, {"ip": "fd00::7"}], "hostIP": "192.168.1.2",
              "phase": "Running"}
    return PodFacts({"metadata": meta, "spec": spec, "status": status if running else {}}, running)


def svc(name: str, ns: str, ip: str, *ports: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"clusterIP": ip, "ports": list(ports)}}


SERVICES = [
    svc("kubernetes", "default", "10.96.0.1", {"name": "https", "port": 443}),
    svc("todos-db", "shop", "10.96.0.20", {"port": 27017}),
    svc("stats-queue", "shop", "10.96.0.21", {"name": "amqp", "port": 5672},
        {"name": "dns", "port": 53, "protocol": "UDP"}),
    svc("headless", "shop", "None", {"port": 80}),
    svc("elsewhere", "other", "10.96.0.30", {"port": 80}),
]


@pytest.mark.parametrize(("value", "env", "want"), [
    ("plain", {}, "plain"),
    ("$(A)", {"A": "x"}, "x"),
    ("pre-$(A)-post", {"A": "x"}, "pre-x-post"),
    ("$(MISSING)", {}, "$(MISSING)"),
    ("$$(A)", {"A": "x"}, "$(A)"),
    ("$$$(A)", {"A": "x"}, "$x"),
    ("$$", {}, "$"),
    ("cost $5", {}, "cost $5"),
    ("trailing $", {}, "trailing $"),
    ("$(A", {"A": "x"}, "$(A"),
    ("$()", {}, "$()"),
    ("$(A)$(B)", {"A": "1", "B": "2"}, "12"),
    ("$(A B)", {"A B": "odd"}, "odd"),
    ("$(A)", {"A": "$(B)", "B": "no"}, "$(B)"),
])
def test_expansion_follows_kubernetes(value: str, env: dict[str, str], want: str) -> None:
    assert expand(value, env) == want


@pytest.mark.parametrize(("name", "valid"), [
    ("PATH", True), ("my.var", True), ("1ABC", True), ("with space", True), ("a=b", False), ("", False),
    ("tab\there", False), ("é", False),
])
def test_env_names_are_the_relaxed_rule(name: str, valid: bool) -> None:
    assert is_env_name(name) is valid


def test_service_links_as_the_kubelet_writes_them() -> None:
    env = resolve(pod({}), pod({}).pod["spec"]["containers"][0], configmaps={}, secrets={}, services=SERVICES)
    got = env.as_dict()
    assert got["TODOS_DB_SERVICE_HOST"] == "10.96.0.20"
    assert got["TODOS_DB_SERVICE_PORT"] == "27017"
    assert got["TODOS_DB_PORT"] == "tcp://10.96.0.20:27017"
    assert got["TODOS_DB_PORT_27017_TCP_ADDR"] == "10.96.0.20"
    assert got["TODOS_DB_PORT_27017_TCP_PROTO"] == "tcp"
    assert got["STATS_QUEUE_SERVICE_PORT_AMQP"] == "5672"
    assert got["STATS_QUEUE_PORT_53_UDP"] == "udp://10.96.0.21:53"
    assert got["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    assert not any(k.startswith("HEADLESS_") or k.startswith("ELSEWHERE_") for k in got)
    assert env.get("TODOS_DB_PORT").source.kind == "serviceLink"  # type: ignore[union-attr]


def test_enable_service_links_false_keeps_only_the_master_service() -> None:
    facts = pod({}, links=False)
    got = resolve(facts, facts.pod["spec"]["containers"][0], configmaps={}, secrets={}, services=SERVICES).as_dict()
    assert "KUBERNETES_SERVICE_HOST" in got
    assert "TODOS_DB_SERVICE_HOST" not in got


def test_connect_mapping_rewrites_links_and_expansions() -> None:
    container = {"env": [{"name": "DB", "value": "mongodb://$(TODOS_DB_SERVICE_HOST):$(TODOS_DB_SERVICE_PORT)"}]}
    facts = pod(container)
    address = ServiceAddress("shop", "todos-db", "127.1.1.3", {27017: 37017})
    got = resolve(facts, facts.pod["spec"]["containers"][0], configmaps={}, secrets={}, services=SERVICES,
                  addresses={("shop", "todos-db"): address}).as_dict()
    assert got["TODOS_DB_SERVICE_HOST"] == "127.1.1.3"
    assert got["TODOS_DB_PORT_27017_TCP_PORT"] == "37017"
    assert got["TODOS_DB_PORT"] == "tcp://127.1.1.3:37017"
    assert got["DB"] == "mongodb://127.1.1.3:37017"
    assert got["STATS_QUEUE_SERVICE_HOST"] == "10.96.0.21"  # not mapped: unchanged


CM = {"data": {"MODE": "prod", "bad key": "x", "a=b": "y", "LEVEL": "debug"}}
SECRET = {"data": {"PASSWORD": b64("hunter2"), "TOKEN": b64("t0k")}}


@pytest.mark.parametrize(("container", "want"), [
    # env overrides envFrom, whatever the order in the manifest
    ({"env": [{"name": "MODE", "value": "dev"}], "envFrom": [{"configMapRef": {"name": "cfg"}}]}, {"MODE": "dev"}),
    # a later envFrom overrides an earlier one
    ({"envFrom": [{"configMapRef": {"name": "cfg"}}, {"configMapRef": {"name": "cfg2"}}]}, {"MODE": "staging"}),
    # prefixes
    ({"envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "APP_"}]}, {"APP_MODE": "prod", "APP_bad key": "x"}),
    ({"envFrom": [{"secretRef": {"name": "creds"}, "prefix": "S_"}]}, {"S_PASSWORD": "hunter2"}),
    # declared env beats a Service link of the same name
    ({"env": [{"name": "TODOS_DB_SERVICE_HOST", "value": "db.local"}]}, {"TODOS_DB_SERVICE_HOST": "db.local"}),
    # expansion sees envFrom, earlier env and Service links; not later env
    ({"envFrom": [{"configMapRef": {"name": "cfg"}}],
      "env": [{"name": "URL", "value": "$(MODE)/$(LATER)/$(TODOS_DB_SERVICE_PORT)"}, {"name": "LATER", "value": "l"}]},
     {"URL": "prod/$(LATER)/27017", "LATER": "l"}),
    # an env var may reference an earlier one that it then shadows
    ({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "$(A)2"}]}, {"A": "12"}),
    ({"env": [{"name": "EMPTY", "value": ""}]}, {"EMPTY": ""}),
    ({"env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "LEVEL"}}}]}, {"K": "debug"}),
    ({"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "PASSWORD"}}}]}, {"P": "hunter2"}),
    ({"env": [{"name": "O", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "x", "optional": True}}}]}, {}),
    ({"env": [{"name": "O", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "x", "optional": True}}}]}, {}),
    ({"envFrom": [{"configMapRef": {"name": "absent", "optional": True}}]}, {}),
])
def test_precedence_and_sources(container: dict[str, Any], want: dict[str, str]) -> None:
    facts = pod(container)
    env = resolve(facts, facts.pod["spec"]["containers"][0], services=SERVICES,
                  configmaps={"cfg": CM, "cfg2": {"data": {"MODE": "staging"}}}, secrets={"creds": SECRET})
    got = env.as_dict()
    for name, value in want.items():
        assert got[name] == value
    if not want:
        assert "O" not in got
    declared = [v.name for v in env.variables if v.source.kind != "serviceLink"]
    assert set(declared) >= set(want)


def test_invalid_keys_are_skipped_with_the_kubelet_message() -> None:
    facts = pod({"envFrom": [{"configMapRef": {"name": "cfg"}}]})
    env = resolve(facts, facts.pod["spec"]["containers"][0], configmaps={"cfg": CM}, secrets={}, services=[])
    assert "a=b" not in env.as_dict() and env.as_dict()["bad key"] == "x"
    assert env.warnings == ("Keys [a=b] from the EnvFrom configMap shop/cfg were skipped since they are "
                            "considered invalid environment variable names.",)


@pytest.mark.parametrize(("container", "message"), [
    ({"envFrom": [{"configMapRef": {"name": "absent"}}]}, 'configmap "absent" not found'),
    ({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}]}, 'secret "absent" not found'),
    ({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "k"}}}]},
     "couldn't find key k in Secret shop/creds"),
    ({"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.dnsPolicy"}}}]}, "unsupported fieldPath"),
])
def test_missing_sources_fail_like_the_kubelet(container: dict[str, Any], message: str) -> None:
    facts = pod(container)
    with pytest.raises(ResolveError, match=message):
        resolve(facts, facts.pod["spec"]["containers"][0], configmaps={}, secrets={"creds": SECRET}, services=[])


def field(path: str) -> dict[str, Any]:
    return {"name": "V", "valueFrom": {"fieldRef": {"fieldPath": path}}}


@pytest.mark.parametrize(("path", "want"), [
    ("metadata.name", "api-7f9"), ("metadata.namespace", "shop"), ("metadata.uid", "u-1"),
    ("metadata.labels['tier']", "web"), ("metadata.annotations['team']", 'a "b"'),
    ("metadata.labels['absent']", ""), ("spec.nodeName", "node-1"), ("spec.serviceAccountName", "api-sa"),
    ("status.podIP", "10.0.0.7"), ("status.podIPs", "10.0.0.7,fd00::7"), ("status.hostIP", "192.168.1.2"),
])
def test_downward_api_fields(path: str, want: str) -> None:
    facts = pod({"env": [field(path)]})
    assert resolve(facts, facts.pod["spec"]["containers"][0], configmaps={}, secrets={}, services=[]).as_dict()["V"] == want


def test_template_leaves_pod_only_fields_unresolved() -> None:
    container = {"env": [{**field("status.podIP"), "name": "IP"}, {**field("metadata.namespace"), "name": "NS"},
                         {**field("metadata.name"), "name": "NAME"}, {**field("spec.nodeName"), "name": "NODE"},
                         {**field("metadata.labels['app']"), "name": "APP"}]}
    facts = pod(container, running=False)
    env = resolve(facts, facts.pod["spec"]["containers"][0], configmaps={}, secrets={}, services=[])
    assert env.as_dict() == {"NS": "shop", "APP": "api"}
    assert [u.name for u in env.unresolved] == ["IP", "NAME", "NODE"]
    assert "running pod" in env.unresolved[0].reason
    assert "dotenv" and "# IP: not resolved" in render(env)


def resource(res: str, divisor: str | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": res}
    if divisor:
        ref["divisor"] = divisor
    return {"name": "R", "valueFrom": {"resourceFieldRef": ref}}


@pytest.mark.parametrize(("ref", "resources", "want"), [
    (resource("limits.cpu"), {"limits": {"cpu": "250m"}}, "1"),
    (resource("limits.cpu", "1m"), {"limits": {"cpu": "250m"}}, "250"),
    (resource("requests.cpu", "100m"), {"requests": {"cpu": "1.5"}}, "15"),
    (resource("limits.memory"), {"limits": {"memory": "64Mi"}}, str(64 * 2**20)),
    (resource("limits.memory", "1Mi"), {"limits": {"memory": "64Mi"}}, "64"),
    (resource("limits.memory", "1Gi"), {"limits": {"memory": "100Mi"}}, "1"),
    (resource("requests.memory", "1k"), {"requests": {"memory": "1500"}}, "2"),
    (resource("requests.memory"), {}, "0"),
    (resource("limits.ephemeral-storage", "1G"), {"limits": {"ephemeral-storage": "2e9"}}, "2"),
])
def test_resource_field_refs_with_divisors(ref: dict[str, Any], resources: dict[str, Any], want: str) -> None:
    facts = pod({"env": [ref], "resources": resources})
    assert resolve(facts, facts.pod["spec"]["containers"][0], configmaps={}, secrets={}, services=[]).as_dict()["R"] == want


def test_unset_limit_is_the_node_allocatable_or_unresolved() -> None:
    facts = pod({"env": [resource("limits.cpu", "1m")]})
    env = resolve(facts, facts.pod["spec"]["containers"][0], configmaps={}, secrets={}, services=[])
    assert env.unresolved and "allocatable" in env.unresolved[0].reason
    with_node = PodFacts(facts.pod, True, {"cpu": "2"})
    assert resolve(with_node, facts.pod["spec"]["containers"][0], configmaps={}, secrets={},
                   services=[]).as_dict()["R"] == "2000"


@pytest.mark.parametrize(("text", "value"), [
    ("1", 1), ("500m", quantity.Fraction(1, 2)), ("1Ki", 1024), ("1e3", 1000), ("2.5G", 2_500_000_000), ("1E", 10**18),
])
def test_quantities(text: str, value: Any) -> None:
    assert quantity.parse(text) == value


def test_references_and_redaction() -> None:
    container = {"envFrom": [{"secretRef": {"name": "creds"}}, {"configMapRef": {"name": "cfg"}}],
                 "env": [{"name": "DSN", "value": "user:$(PASSWORD)@db"},
                         {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "more", "key": "k"}}}]}
    refs = references(container)
    assert refs.configmaps == {"cfg", "more"} and refs.secrets == {"creds"}
    facts = pod(container)
    env = resolve(facts, container, configmaps={"cfg": CM, "more": {"data": {"k": "v"}}}, secrets={"creds": SECRET},
                  services=[])
    assert env.as_dict()["DSN"] == "user:hunter2@db"
    printed = render(env, "dotenv")
    assert "hunter2" not in printed and "t0k" not in printed
    assert f"DSN='{REDACTED}'" in printed
    assert "hunter2" in render(env, "json", reveal=True)
    explained = render(env, "shell", explain=True)
    assert "# PASSWORD: envFrom.secret Secret creds key PASSWORD (secret)" in explained
    assert "# K: configMapKeyRef ConfigMap more key k" in explained


@pytest.mark.parametrize(("line", "want"), [
    ("-rw-r--r-- 1 0 0 15 Dec  1 17:21 ./test.txt", [("-", 0o644, "./test.txt")]),
    ("drwxr-s--- 2 1000 1000 4096 Jan 12  2025 ./a dir", [("d", 0o750, "./a dir")]),
    ("-rwsr-xr-T    1 0        0              0 Dec  1 17:21 ./x", [("-", 0o754, "./x")]),
    ("lrwxrwxrwx 1 0 0 4 Dec  1 17:21 ./link -> x", [("l", 0o777, "./link -> x")]),
    ("ls: ./gone: No such file or directory", []),
])
def test_shell_fallback_listing(line: str, want: list[tuple[str, int, str]]) -> None:
    from tether.bridge.volumecopy import parse_listing

    assert parse_listing(line) == want


@pytest.mark.parametrize(("value", "dotenv", "shell"), [
    ("plain", "V=plain", "export V=plain"),
    ("", "V=''", "export V=''"),
    ("a b $(X) $HOME", "V='a b $(X) $HOME'", "export V='a b $(X) $HOME'"),
    ("it's", 'V="it\'s"', "export V='it'\"'\"'s'"),
    ("two\nlines \"q\" \\", 'V="two\\nlines \\"q\\" \\\\"', "export V='two\nlines \"q\" \\'"),
])
def test_dotenv_and_shell_quoting(value: str, dotenv: str, shell: str) -> None:
    from tether.bridge.envresolve import Environment, Source, Variable

    env = Environment((Variable("V", value, Source("value")),))
    assert render(env, "dotenv") == dotenv + "\n"
    assert render(env, "shell") == shell + "\n"


def test_a_namespace_service_named_kubernetes_replaces_the_master_one() -> None:
    own = svc("kubernetes", "shop", "10.96.9.9", {"port": 8443})
    for services in ([*SERVICES, own], [own, *SERVICES]):
        facts = pod({})
        got = resolve(facts, facts.pod["spec"]["containers"][0], configmaps={}, secrets={}, services=services).as_dict()
        assert got["KUBERNETES_SERVICE_HOST"] == "10.96.9.9" and got["KUBERNETES_SERVICE_PORT"] == "8443"


@pytest.mark.parametrize(("text", "want"), [
    ("api-7f9", ("v1", "Pod", "api-7f9")), ("pod/x", ("v1", "Pod", "x")), ("deploy/api", ("apps/v1", "Deployment", "api")),
    ("deployment/api", ("apps/v1", "Deployment", "api")), ("sts/db", ("apps/v1", "StatefulSet", "db")),
    ("ds/agent", ("apps/v1", "DaemonSet", "agent")), ("job/migrate", ("batch/v1", "Job", "migrate")),
    ("rs/api-1", ("apps/v1", "ReplicaSet", "api-1")),
])
def test_targets(text: str, want: tuple[str, str, str]) -> None:
    from tether.bridge.target import parse_target

    target = parse_target(text)
    assert (target.api_version, target.kind, target.name) == want


@pytest.mark.parametrize(("text", "message"), [
    ("svc/api", "unknown target kind 'svc'"), ("deploy/", "needs one name"), ("deploy/a/b", "needs one name"),
])
def test_bad_targets(text: str, message: str) -> None:
    from tether.bridge.target import TargetError, parse_target

    with pytest.raises(TargetError, match=message):
        parse_target(text)


def test_choose_pod_prefers_ready_then_newest() -> None:
    from tether.bridge.target import choose_pod

    def p(name: str, phase: str, ready: bool, created: str, deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
        if deleting:
            meta["deletionTimestamp"] = created
        return {"metadata": meta, "status": {"phase": phase, "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}}

    pods = [p("old-ready", "Running", True, "2026-01-01T00:00:00Z"),
            p("new-unready", "Running", False, "2026-01-02T00:00:00Z"),
            p("newest-ready-deleting", "Running", True, "2026-01-03T00:00:00Z", deleting=True),
            p("pending", "Pending", False, "2026-01-04T00:00:00Z")]
    assert choose_pod(pods)["metadata"]["name"] == "old-ready"  # type: ignore[index]
    assert choose_pod(pods[1:])["metadata"]["name"] == "new-unready"  # type: ignore[index]
    assert choose_pod(pods[3:]) is None
