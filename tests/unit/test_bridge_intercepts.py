"""Intercept sessions' pure parts: --port, the Service port taken, the router's objects (Pod
Security `restricted`, ports, owners), Lease expiry, B2K's tasks.json, the status table."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from tether.bridge import b2ktask, intercepts, routing
from tether.cli.intercept import format_intercepts


@pytest.mark.parametrize("text, expected", [("3001", (3001, None)), ("3001:80", (3001, 80))])
def test_parse_port(text: str, expected: tuple[int, int | None]) -> None:
    assert intercepts.parse_port(text) == expected


@pytest.mark.parametrize("text", ["x", "3001:y", "0", "70000", "3001:0"])
def test_bad_port(text: str) -> None:
    with pytest.raises(intercepts.InterceptError, match="--port"):
        intercepts.parse_port(text)


def svc(*ports: int) -> dict[str, object]:
    return {"metadata": {"name": "stats-api"}, "spec": {"ports": [{"port": p} for p in ports]}}


def test_service_port() -> None:
    assert intercepts.service_port(svc(80), None) == 80
    assert intercepts.service_port(svc(80, 443), 443) == 443
    with pytest.raises(intercepts.InterceptError, match="does not expose port 8080"):
        intercepts.service_port(svc(80), 8080)
    with pytest.raises(intercepts.InterceptError, match="say which"):
        intercepts.service_port(svc(80, 443), None)


PLAN = intercepts.Plan("todo-app", "stats-api", "naison-e4be", False, "naison", routing.token_digest("t"),
                       {"app": "stats-api"}, ({"name": "http", "port": 80, "targetPort": "web"},), {"web": 8080}, 30)


def test_router_objects_are_restricted_and_take_the_target_ports() -> None:
    objects = {o["kind"]: o for o in intercepts.router_objects(PLAN, {80: 8080})}
    assert set(objects) == {"ServiceAccount", "Role", "RoleBinding", "Service", "Deployment"}
    clone = objects["Service"]
    assert clone["metadata"]["name"] == "stats-api-cloned-routing-svc"
    assert clone["spec"]["selector"] == {"app": "stats-api"}
    assert json.loads(clone["metadata"]["annotations"]["tether.io/original-selector"]) == {"app": "stats-api"}
    pod = objects["Deployment"]["spec"]["template"]
    assert pod["metadata"]["labels"]["tether.io/router"] == "stats-api-tether-router"
    container = pod["spec"]["containers"][0]
    assert {"containerPort": 8080, "protocol": "TCP", "name": "web"} in container["ports"]
    assert container["args"][:2] == ["bridge", "router"] and "8080" in container["args"]
    context = container["securityContext"]
    assert context["runAsNonRoot"] and not context["allowPrivilegeEscalation"]
    assert context["capabilities"] == {"drop": ["ALL"]} and context["seccompProfile"]["type"] == "RuntimeDefault"
    assert "hostNetwork" not in pod["spec"] and "privileged" not in context
    for obj in objects.values():
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tether"


def test_session_object_records_what_restore_needs() -> None:
    session = intercepts.session_object(PLAN)
    assert session["metadata"]["name"] == "tether-intercept-naison-e4be"
    assert json.loads(session["data"]["originalSelector"]) == {"app": "stats-api"}
    assert session["data"]["tokenDigest"] == routing.token_digest("t") and session["data"]["tokenDigest"] != "t"
    lease = intercepts.lease_object(PLAN, {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}, "me")
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "u"
    assert lease["spec"]["leaseDurationSeconds"] == 30


def at(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.parametrize("lease, now, expired", [
    ({"spec": {"renewTime": at(1000), "leaseDurationSeconds": 30}}, 1029, False),
    ({"spec": {"renewTime": at(1000), "leaseDurationSeconds": 30}}, 1031, True),
    ({"spec": {"acquireTime": at(1000), "leaseDurationSeconds": 5}}, 1004, False),
    ({"spec": {}}, 1000, True),
    (None, 1000, True),
])
def test_lease_expired(lease: dict[str, object] | None, now: float, expired: bool) -> None:
    assert intercepts.lease_expired(lease, now) is expired


SESSION_AT_1000 = {"metadata": {"creationTimestamp": at(1000)}, "data": {"restoreAfterSeconds": "30"}}


@pytest.mark.parametrize("now, expired", [(1001, False), (1029, False), (1031, True)])
def test_a_session_still_being_made_has_no_lease_yet(now: float, expired: bool) -> None:
    # begin makes the session ConfigMap first, the Lease next: a router already serving the
    # Service for another developer must not end the new session in between
    assert intercepts.lease_expired(None, now, SESSION_AT_1000) is expired


TASKS = """{
  // VS Code writes comments and trailing commas
  "version": "2.0.0",
  "tasks": [
    {"label": "build", "type": "shell", "command": "make"},
    {
      "label": "bridge-to-kubernetes.resource",
      "type": "bridge-to-kubernetes.resource",
      "resource": "stats-api", "resourceType": "service", "ports": [3001],
      "targetCluster": "dev", "targetNamespace": "todo-app",
      "useKubernetesServiceEnvironmentVariables": false,
      "isolateAs": "naison-e4be", /* personal routing */
      "url": "http://x//y",
    },
  ],
}"""


def test_b2k_task() -> None:
    task = b2ktask.parse(TASKS, None)
    assert task == b2ktask.Task("svc/stats-api", "3001", "todo-app", "dev", "naison-e4be", False)
    assert b2ktask.parse(TASKS, "bridge-to-kubernetes.resource").target == "svc/stats-api"


@pytest.mark.parametrize("text, label, message", [
    (TASKS, "other", "labelled 'other'"),
    ('{"tasks": []}', None, "no task"),
    ("{", None, "not JSON"),
    (TASKS.replace('"service"', '"pod"'), None, "cannot be intercepted"),
    (TASKS.replace("[3001]", "[]"), None, "'ports'"),
])
def test_b2k_task_errors(text: str, label: str | None, message: str) -> None:
    with pytest.raises(b2ktask.TaskError, match=message):
        b2ktask.parse(text, label)


def test_status_table() -> None:
    views = [intercepts.SessionView("naison-e4be", "stats-api", "header", "naison", "2026-12-01T19:00:00Z", "12", ""),
             intercepts.SessionView("alice-1", "stats-api", "header", "alice", "2026-12-01T19:01:00Z", "0",
                                    "selector changed")]
    text = format_intercepts(views)
    assert text.splitlines()[0].split() == ["ROUTE", "SERVICE", "MODE", "USER", "SINCE", "REQUESTS"]
    assert "naison-e4be" in text and "warning: alice-1: selector changed" in text
    assert format_intercepts([]) == "no intercepts\n"


def test_router_role_cannot_touch_other_objects_in_the_namespace() -> None:
    role = {o["kind"]: o for o in intercepts.router_objects(PLAN, {80: 8080})}["Role"]
    named: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for resource in rule["resources"]:
            for verb in rule["verbs"]:
                if "resourceNames" in rule:
                    named.setdefault((resource, verb), set()).update(rule["resourceNames"])
                else:
                    assert resource not in {"services", "endpoints", "serviceaccounts", "deployments", "roles",
                                            "rolebindings"}, (resource, verb)
                    assert verb not in {"update", "create"} or resource == "events", (resource, verb)
    router = routing.router_name("stats-api")
    assert named[("services", "patch")] == {"stats-api"}
    assert named[("services", "delete")] == {routing.cloned_service_name("stats-api")}
    assert named[("deployments", "delete")] == named[("roles", "delete")] == {router}


def test_a_token_saved_by_the_older_layout_is_still_found_and_forgotten(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    old = tmp_path / "xdg" / "tether" / "intercepts" / "ctx.shop.alice.token"
    old.parent.mkdir(parents=True)
    old.write_text("t0ken\n")
    assert intercepts.local_token("ctx", "shop", "alice") == "t0ken"
    intercepts.save_token("ctx", "shop", "alice", "newer")
    assert intercepts.local_token("ctx", "shop", "alice") == "newer"
    intercepts.forget_token("ctx", "shop", "alice")
    assert intercepts.local_token("ctx", "shop", "alice") is None and not old.exists()
