from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tether.local import tables
from tether.objects import times

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


def ago(**kwargs: float) -> str:
    return (NOW - timedelta(**kwargs)).strftime("%Y-%m-%dT%H:%M:%SZ")


def meta(name: str = "x", **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": "default", "creationTimestamp": ago(minutes=5), **extra}


def row(group: str, kind: str, obj: dict[str, Any]) -> list[Any]:
    table = tables.make_table(group=group, kind=kind, objects=[obj], now=NOW)
    cells: list[Any] = table["rows"][0]["cells"]
    return cells


def headers(group: str, kind: str, **kwargs: Any) -> list[tuple[str, str, int]]:
    table = tables.make_table(group=group, kind=kind, objects=[], now=NOW, **kwargs)
    return [(c["name"], c["type"], c["priority"]) for c in table["columnDefinitions"]]


# ---------------------------------------------------------------------------------------------
# Durations


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-3, "<invalid>"),
        (-1.5, "0s"),
        (0, "0s"),
        (5, "5s"),
        (119, "119s"),
        (120, "2m"),
        (182, "3m2s"),
        (599, "9m59s"),
        (600, "10m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60, "3h1m"),
        (8 * 3600 - 60, "7h59m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (51 * 3600, "2d3h"),
        (8 * 86400, "8d"),
        (729 * 86400, "729d"),
        (730 * 86400, "2y"),
        (731 * 86400, "2y1d"),
        (8 * 365 * 86400, "8y"),
        (20 * 365 * 86400, "20y"),
    ],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert tables.human_duration(timedelta(seconds=seconds)) == text


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2025-06-01T12:00:00Z", NOW),
        ("2025-06-01T12:00:00.123456Z", NOW + timedelta(microseconds=123456)),
        ("2025-06-01T14:00:00+02:00", NOW),
        ("", None),
        ("yesterday", None),
        (None, None),
    ],
)
def test_parse_time(value: Any, expected: datetime | None) -> None:
    assert times.parse_time(value) == expected


# ---------------------------------------------------------------------------------------------
# Table envelope


def test_table_envelope_and_partial_metadata() -> None:
    pod = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta("p1", uid="u1", labels={"app": "a"}, managedFields=[{"manager": "m"}]),
        "spec": {"containers": [{"name": "c"}]},
    }
    table = tables.make_table(
        group="",
        kind="Pod",
        objects=[pod],
        resource_version="42",
        continue_token="tok",
        remaining=7,
        now=NOW,
    )
    assert table["kind"] == "Table"
    assert table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {
        "resourceVersion": "42",
        "continue": "tok",
        "remainingItemCount": 7,
    }
    obj = table["rows"][0]["object"]
    assert obj["kind"] == "PartialObjectMetadata"
    assert obj["apiVersion"] == "meta.k8s.io/v1"
    assert obj["metadata"]["labels"] == {"app": "a"}
    assert obj["metadata"]["uid"] == "u1"
    assert "managedFields" not in obj["metadata"]
    assert "managedFields" in pod["metadata"]  # the input is not modified


def test_include_object_variants() -> None:
    pod = {"kind": "Pod", "apiVersion": "v1", "metadata": meta("p1"), "spec": {}}
    full = tables.make_table(group="", kind="Pod", objects=[pod], include_object="Object", now=NOW)
    assert full["rows"][0]["object"] == pod
    none = tables.make_table(group="", kind="Pod", objects=[pod], include_object="None", now=NOW)
    assert "object" not in none["rows"][0]
    default = tables.make_table(group="", kind="Pod", objects=[pod], include_object="", now=NOW)
    assert default["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    with pytest.raises(ValueError, match="Unsupported value"):
        tables.make_table(group="", kind="Pod", objects=[pod], include_object="All")


def test_without_headers_and_empty_metadata() -> None:
    table = tables.make_table(group="", kind="Pod", objects=[], with_headers=False, now=NOW)
    assert table["columnDefinitions"] == []
    assert table["rows"] == []
    assert table["metadata"] == {}


def test_name_column_definition() -> None:
    table = tables.make_table(group="", kind="ConfigMap", objects=[], now=NOW)
    name = table["columnDefinitions"][0]
    assert name["name"] == "Name"
    assert name["format"] == "name"
    assert name["description"].startswith("Name must be unique within a namespace.")
    assert set(name) == {"name", "type", "format", "description", "priority"}


# ---------------------------------------------------------------------------------------------
# Pods


def test_pod_columns() -> None:
    assert headers("", "Pod") == [
        ("Name", "string", 0),
        ("Ready", "string", 0),
        ("Status", "string", 0),
        ("Restarts", "string", 0),
        ("Age", "string", 0),
        ("IP", "string", 1),
        ("Node", "string", 1),
        ("Nominated Node", "string", 1),
        ("Readiness Gates", "string", 1),
    ]


def running(name: str = "c", ready: bool = True, restarts: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "ready": ready,
        "restartCount": restarts,
        "state": {"running": {"startedAt": ago(minutes=4)}},
    }


def waiting(reason: str, name: str = "c", restarts: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "ready": False,
        "restartCount": restarts,
        "state": {"waiting": {"reason": reason}},
    }


def terminated(reason: str = "", code: int = 0, name: str = "c", signal: int = 0) -> dict[str, Any]:
    state: dict[str, Any] = {"exitCode": code}
    if reason:
        state["reason"] = reason
    if signal:
        state["signal"] = signal
    return {"name": name, "ready": False, "restartCount": 0, "state": {"terminated": state}}


def pod(
    phase: str,
    statuses: list[dict[str, Any]],
    *,
    containers: int = 1,
    init: list[dict[str, Any]] | None = None,
    init_statuses: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}"} for i in range(containers)]}
    status: dict[str, Any] = {"phase": phase, "containerStatuses": statuses}
    if init is not None:
        spec["initContainers"] = init
    if init_statuses is not None:
        status["initContainerStatuses"] = init_statuses
    if conditions is not None:
        status["conditions"] = conditions
    return {"metadata": meta("p", **metadata), "spec": spec, "status": status}


READY = {"type": "Ready", "status": "True"}
INITIALIZED = {"type": "Initialized", "status": "True"}


@pytest.mark.parametrize(
    ("obj", "ready", "status", "restarts"),
    [
        (pod("Running", [running()]), "1/1", "Running", "0"),
        (pod("Pending", []), "0/1", "Pending", "0"),
        (pod("Pending", [waiting("ContainerCreating")]), "0/1", "ContainerCreating", "0"),
        (pod("Running", [waiting("CrashLoopBackOff", restarts=4)]), "0/1", "CrashLoopBackOff", "4"),
        (pod("Succeeded", [terminated("Completed")]), "0/1", "Completed", "0"),
        (pod("Failed", [terminated("Error", 1)]), "0/1", "Error", "0"),
        (pod("Failed", [terminated(code=2)]), "0/1", "ExitCode:2", "0"),
        (pod("Failed", [terminated(code=137, signal=9)]), "0/1", "Signal:9", "0"),
        (
            pod("Running", [running("a"), running("b", ready=False)], containers=2),
            "1/2",
            "Running",
            "0",
        ),
        # The first container's state wins the STATUS text.
        (
            pod(
                "Running",
                [waiting("ImagePullBackOff", "a"), waiting("ErrImagePull", "b")],
                containers=2,
            ),
            "0/2",
            "ImagePullBackOff",
            "0",
        ),
        # A completed container next to a running one reads as Running (or NotReady).
        (
            pod(
                "Running",
                [terminated("Completed", name="a"), running("b")],
                containers=2,
                conditions=[READY],
            ),
            "1/2",
            "Running",
            "0",
        ),
        (
            pod("Running", [terminated("Completed", name="a"), running("b")], containers=2),
            "1/2",
            "NotReady",
            "0",
        ),
        (pod("Running", [running()], deletionTimestamp=ago(seconds=1)), "1/1", "Terminating", "0"),
        (
            pod("Succeeded", [terminated("Completed")], deletionTimestamp=ago(seconds=1)),
            "0/1",
            "Completed",
            "0",
        ),
        (
            {
                "metadata": meta("p", deletionTimestamp=ago(seconds=1)),
                "spec": {"containers": [{"name": "c"}]},
                "status": {"phase": "Running", "reason": "NodeLost"},
            },
            "0/1",
            "Unknown",
            "0",
        ),
        (pod("Failed", [], reason="Evicted"), "0/1", "Failed", "0"),
        (
            pod(
                "Pending",
                [],
                conditions=[
                    {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
                ],
            ),
            "0/1",
            "SchedulingGated",
            "0",
        ),
    ],
)
def test_pod_status(obj: dict[str, Any], ready: str, status: str, restarts: str) -> None:
    cells = row("", "Pod", obj)
    assert cells[1:4] == [ready, status, restarts]


def test_pod_status_reason_field() -> None:
    obj = pod("Failed", [])
    obj["status"]["reason"] = "Evicted"
    assert row("", "Pod", obj)[2] == "Evicted"


@pytest.mark.parametrize(
    ("init_statuses", "status"),
    [
        ([waiting("PodInitializing", "i")], "Init:0/1"),
        ([{"name": "i", "restartCount": 0, "state": {"running": {}}}], "Init:0/1"),
        ([waiting("CrashLoopBackOff", "i")], "Init:CrashLoopBackOff"),
        ([terminated("Error", 1, "i")], "Init:Error"),
        ([terminated(code=3, name="i")], "Init:ExitCode:3"),
        ([terminated(code=3, name="i", signal=15)], "Init:Signal:15"),
    ],
)
def test_pod_init_status(init_statuses: list[dict[str, Any]], status: str) -> None:
    obj = pod(
        "Pending", [waiting("PodInitializing")], init=[{"name": "i"}], init_statuses=init_statuses
    )
    assert row("", "Pod", obj)[2] == status


def test_pod_second_init_container() -> None:
    obj = pod(
        "Pending",
        [],
        init=[{"name": "i0"}, {"name": "i1"}],
        init_statuses=[terminated("Completed", 0, "i0"), {"name": "i1", "state": {"running": {}}}],
    )
    assert row("", "Pod", obj)[2] == "Init:1/2"


def test_pod_sidecar_counts_towards_ready_and_restarts() -> None:
    sidecar = {"name": "s", "restartPolicy": "Always"}
    side_status = {
        "name": "s",
        "ready": True,
        "started": True,
        "restartCount": 2,
        "state": {"running": {}},
        "lastState": {"terminated": {"finishedAt": ago(minutes=3)}},
    }
    obj = pod(
        "Running",
        [running()],
        init=[sidecar],
        init_statuses=[side_status],
        conditions=[INITIALIZED],
    )
    assert row("", "Pod", obj)[1:4] == ["2/2", "Running", "2 (3m ago)"]


def test_pod_restarts_show_time_since_last_restart() -> None:
    status = waiting("CrashLoopBackOff", restarts=5)
    status["lastState"] = {"terminated": {"finishedAt": ago(minutes=2), "exitCode": 1}}
    assert row("", "Pod", pod("Running", [status]))[3] == "5 (2m ago)"


def test_pod_wide_cells() -> None:
    obj = pod("Running", [running()], conditions=[READY, {"type": "custom/ok", "status": "True"}])
    obj["spec"]["nodeName"] = "node-1"
    obj["spec"]["readinessGates"] = [{"conditionType": "custom/ok"}, {"conditionType": "custom/no"}]
    obj["status"]["podIPs"] = [{"ip": "10.244.1.5"}]
    assert row("", "Pod", obj) == [
        "p",
        "1/1",
        "Running",
        "0",
        "5m",
        "10.244.1.5",
        "node-1",
        "<none>",
        "1/2",
    ]
    bare = pod("Pending", [])
    assert row("", "Pod", bare)[5:] == ["<none>", "<none>", "<none>", "<none>"]


def test_pod_row_conditions() -> None:
    table = tables.make_table(
        group="",
        kind="Pod",
        objects=[
            pod("Succeeded", [terminated("Completed")]),
            pod("Failed", []),
            pod("Running", [running()]),
        ],
        now=NOW,
    )
    rows = table["rows"]
    assert rows[0]["conditions"] == [
        {
            "type": "Completed",
            "status": "True",
            "reason": "Succeeded",
            "message": "The pod has completed successfully.",
        }
    ]
    assert rows[1]["conditions"][0]["reason"] == "Failed"
    assert "conditions" not in rows[2]


# ---------------------------------------------------------------------------------------------
# Workloads

TEMPLATE = {
    "spec": {
        "containers": [{"name": "web", "image": "nginx:1.27"}, {"name": "side", "image": "busybox"}]
    }
}


def test_deployment() -> None:
    assert headers("apps", "Deployment") == [
        ("Name", "string", 0),
        ("Ready", "string", 0),
        ("Up-to-date", "string", 0),
        ("Available", "string", 0),
        ("Age", "string", 0),
        ("Containers", "string", 1),
        ("Images", "string", 1),
        ("Selector", "string", 1),
    ]
    obj = {
        "metadata": meta("d1"),
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "d1"}}, "template": TEMPLATE},
        "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
    }
    assert row("apps", "Deployment", obj) == [
        "d1",
        "2/3",
        3,
        2,
        "5m",
        "web,side",
        "nginx:1.27,busybox",
        "app=d1",
    ]


def test_replicaset_statefulset_daemonset() -> None:
    rs = {
        "metadata": meta("rs1"),
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "a"}}, "template": TEMPLATE},
        "status": {"replicas": 2, "readyReplicas": 1},
    }
    assert headers("apps", "ReplicaSet")[1:4] == [
        ("Desired", "integer", 0),
        ("Current", "integer", 0),
        ("Ready", "integer", 0),
    ]
    assert row("apps", "ReplicaSet", rs) == [
        "rs1",
        2,
        2,
        1,
        "5m",
        "web,side",
        "nginx:1.27,busybox",
        "app=a",
    ]
    sts = {
        "metadata": meta("db"),
        "spec": {"replicas": 3, "template": TEMPLATE},
        "status": {"readyReplicas": 3},
    }
    assert row("apps", "StatefulSet", sts) == ["db", "3/3", "5m", "web,side", "nginx:1.27,busybox"]
    ds = {
        "metadata": meta("agent"),
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"spec": {**TEMPLATE["spec"], "nodeSelector": {"os": "linux"}}},
        },
        "status": {
            "desiredNumberScheduled": 3,
            "currentNumberScheduled": 3,
            "numberReady": 2,
            "updatedNumberScheduled": 3,
            "numberAvailable": 2,
        },
    }
    assert row("apps", "DaemonSet", ds) == [
        "agent",
        3,
        3,
        2,
        3,
        2,
        "os=linux",
        "5m",
        "web,side",
        "nginx:1.27,busybox",
        "app=agent",
    ]
    assert [h[0] for h in headers("apps", "DaemonSet")][6] == "Node Selector"


@pytest.mark.parametrize(
    ("spec", "status", "metadata", "expected"),
    [
        (
            {"completions": 1},
            {
                "succeeded": 1,
                "startTime": ago(minutes=5),
                "completionTime": ago(minutes=4, seconds=30),
                "conditions": [{"type": "Complete", "status": "True"}],
            },
            {},
            ["Complete", "1/1", "30s"],
        ),
        (
            {"completions": 3},
            {"succeeded": 1, "startTime": ago(minutes=2)},
            {},
            ["Running", "1/3", "2m"],
        ),
        ({"parallelism": 4}, {}, {}, ["Running", "0/1 of 4", ""]),
        ({}, {}, {}, ["Running", "0/1", ""]),
        ({}, {"conditions": [{"type": "Failed", "status": "True"}]}, {}, ["Failed", "0/1", ""]),
        (
            {},
            {"conditions": [{"type": "Suspended", "status": "True"}]},
            {},
            ["Suspended", "0/1", ""],
        ),
        ({}, {"conditions": [{"type": "Complete", "status": "False"}]}, {}, ["Running", "0/1", ""]),
        ({}, {}, {"deletionTimestamp": ago(seconds=1)}, ["Terminating", "0/1", ""]),
    ],
)
def test_job(
    spec: dict[str, Any], status: dict[str, Any], metadata: dict[str, Any], expected: list[Any]
) -> None:
    assert [h[0] for h in headers("batch", "Job")][:5] == [
        "Name",
        "Status",
        "Completions",
        "Duration",
        "Age",
    ]
    obj = {
        "metadata": meta("j", **metadata),
        "spec": {**spec, "template": TEMPLATE},
        "status": status,
    }
    assert row("batch", "Job", obj)[1:4] == expected


def test_cronjob() -> None:
    obj = {
        "metadata": meta("cj"),
        "spec": {
            "schedule": "*/5 * * * *",
            "suspend": False,
            "jobTemplate": {"spec": {"template": TEMPLATE}},
        },
        "status": {"active": [{"name": "j1"}], "lastScheduleTime": ago(seconds=40)},
    }
    assert row("batch", "CronJob", obj) == [
        "cj",
        "*/5 * * * *",
        "<none>",
        "False",
        1,
        "40s",
        "5m",
        "web,side",
        "nginx:1.27,busybox",
        "<none>",
    ]
    never = {"metadata": meta("cj2"), "spec": {"schedule": "@daily", "timeZone": "Etc/UTC"}}
    assert row("batch", "CronJob", never)[2:6] == ["Etc/UTC", "<unset>", 0, "<none>"]


# ---------------------------------------------------------------------------------------------
# Networking


@pytest.mark.parametrize(
    ("spec", "status", "expected"),
    [
        (
            {
                "type": "ClusterIP",
                "clusterIP": "10.96.0.10",
                "clusterIPs": ["10.96.0.10"],
                "ports": [{"port": 80, "protocol": "TCP"}],
                "selector": {"app": "web"},
            },
            {},
            ["ClusterIP", "10.96.0.10", "<none>", "80/TCP", "5m", "app=web"],
        ),
        (
            {
                "type": "NodePort",
                "clusterIP": "10.96.0.11",
                "ports": [{"port": 80, "nodePort": 30080}, {"port": 53, "protocol": "UDP"}],
            },
            {},
            ["NodePort", "10.96.0.11", "<none>", "80:30080/TCP,53/UDP", "5m", "<none>"],
        ),
        (
            {
                "type": "LoadBalancer",
                "clusterIP": "10.96.0.12",
                "ports": [{"port": 443, "nodePort": 31443}],
            },
            {},
            ["LoadBalancer", "10.96.0.12", "<pending>", "443:31443/TCP", "5m", "<none>"],
        ),
        (
            {
                "type": "LoadBalancer",
                "clusterIP": "10.96.0.12",
                "ports": [],
                "externalIPs": ["1.1.1.1"],
            },
            {"loadBalancer": {"ingress": [{"ip": "5.5.5.5"}, {"hostname": "lb.example.com"}]}},
            [
                "LoadBalancer",
                "10.96.0.12",
                "5.5.5.5,lb.example.com,1.1.1.1",
                "<none>",
                "5m",
                "<none>",
            ],
        ),
        (
            {"type": "ExternalName", "externalName": "db.example.com"},
            {},
            ["ExternalName", "<none>", "db.example.com", "<none>", "5m", "<none>"],
        ),
        (
            {"clusterIP": "None", "externalIPs": ["2.2.2.2"], "ports": [{"port": 5432}]},
            {},
            ["ClusterIP", "None", "2.2.2.2", "5432/TCP", "5m", "<none>"],
        ),
    ],
)
def test_service(spec: dict[str, Any], status: dict[str, Any], expected: list[Any]) -> None:
    obj = {"metadata": meta("svc"), "spec": spec, "status": status}
    assert row("", "Service", obj) == ["svc", *expected]


def test_service_columns() -> None:
    assert [h[0] for h in headers("", "Service")] == [
        "Name",
        "Type",
        "Cluster-IP",
        "External-IP",
        "Port(s)",
        "Age",
        "Selector",
    ]


@pytest.mark.parametrize(
    ("subsets", "text"),
    [
        ([], "<none>"),
        ([{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}], "10.0.0.1:80"),
        (
            [
                {
                    "addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}],
                    "ports": [{"port": 80}, {"port": 443}],
                }
            ],
            "10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 1 more...",
        ),
        ([{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 80}]}], "[fd00::1]:80"),
        ([{"addresses": [{"ip": "10.0.0.9"}]}], "10.0.0.9"),  # headless, no ports
        ([{"notReadyAddresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}], ""),
    ],
)
def test_endpoints(subsets: list[dict[str, Any]], text: str) -> None:
    obj = {"metadata": meta("svc"), "subsets": subsets}
    assert row("", "Endpoints", obj) == ["svc", text, "5m"]


def test_endpointslice() -> None:
    obj = {
        "metadata": meta("svc-abc12"),
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "named"}],
        "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}],
    }
    assert row("discovery.k8s.io", "EndpointSlice", obj) == [
        "svc-abc12",
        "IPv4",
        "80,named",
        "10.0.0.1,10.0.0.2",
        "5m",
    ]
    empty = {"metadata": meta("e"), "addressType": "IPv4"}
    assert row("discovery.k8s.io", "EndpointSlice", empty)[2:4] == ["<unset>", "<unset>"]
    many = {**obj, "endpoints": [{"addresses": [f"10.0.0.{i}"]} for i in range(5)]}
    assert (
        row("discovery.k8s.io", "EndpointSlice", many)[3]
        == "10.0.0.0,10.0.0.1,10.0.0.2 + 2 more..."
    )


def test_ingress_and_network_policy() -> None:
    ing = {
        "metadata": meta("web"),
        "spec": {
            "ingressClassName": "nginx",
            "rules": [{"host": "a.example.com"}, {"host": "b.example.com"}],
            "tls": [{"hosts": ["a.example.com"]}],
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "192.168.1.10"}]}},
    }
    assert row("networking.k8s.io", "Ingress", ing) == [
        "web",
        "nginx",
        "a.example.com,b.example.com",
        "192.168.1.10",
        "80, 443",
        "5m",
    ]
    bare = {"metadata": meta("catch-all"), "spec": {"defaultBackend": {}}}
    assert row("networking.k8s.io", "Ingress", bare) == ["catch-all", "<none>", "*", "", "80", "5m"]
    np = {"metadata": meta("deny"), "spec": {"podSelector": {"matchLabels": {"app": "db"}}}}
    assert row("networking.k8s.io", "NetworkPolicy", np) == ["deny", "app=db", "5m"]
    everything = {"metadata": meta("all"), "spec": {"podSelector": {}}}
    assert row("networking.k8s.io", "NetworkPolicy", everything)[1] == "<none>"


# ---------------------------------------------------------------------------------------------
# Cluster objects


@pytest.mark.parametrize(
    ("labels", "conditions", "unschedulable", "status", "roles"),
    [
        (
            {"node-role.kubernetes.io/control-plane": ""},
            [{"type": "Ready", "status": "True"}],
            False,
            "Ready",
            "control-plane",
        ),
        ({}, [{"type": "Ready", "status": "False"}], True, "NotReady,SchedulingDisabled", "<none>"),
        ({}, [{"type": "Ready", "status": "Unknown"}], False, "NotReady", "<none>"),
        (
            {"kubernetes.io/role": "worker", "node-role.kubernetes.io/infra": "x"},
            [],
            False,
            "Unknown",
            "infra,worker",
        ),
    ],
)
def test_node(
    labels: dict[str, str],
    conditions: list[dict[str, Any]],
    unschedulable: bool,
    status: str,
    roles: str,
) -> None:
    obj = {
        "metadata": {"name": "n1", "labels": labels, "creationTimestamp": ago(days=3, hours=2)},
        "spec": {"unschedulable": unschedulable},
        "status": {
            "conditions": conditions,
            "nodeInfo": {"kubeletVersion": "v1.32.4", "osImage": "Debian", "kernelVersion": "6.1"},
            "addresses": [
                {"type": "InternalIP", "address": "172.18.0.2"},
                {"type": "Hostname", "address": "n1"},
            ],
        },
    }
    assert row("", "Node", obj) == [
        "n1",
        status,
        roles,
        "3d2h",
        "v1.32.4",
        "172.18.0.2",
        "<none>",
        "Debian",
        "6.1",
        "<unknown>",
    ]


def test_namespace_configmap_secret_serviceaccount_lease() -> None:
    ns = {
        "metadata": {"name": "dev", "creationTimestamp": ago(hours=30)},
        "status": {"phase": "Active"},
    }
    assert row("", "Namespace", ns) == ["dev", "Active", "30h"]
    cm = {"metadata": meta("cm"), "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}}
    assert row("", "ConfigMap", cm) == ["cm", 3, "5m"]
    assert row("", "ConfigMap", {"metadata": meta("empty")}) == ["empty", 0, "5m"]
    secret = {"metadata": meta("s"), "type": "Opaque", "data": {"k": "dg=="}}
    assert row("", "Secret", secret) == ["s", "Opaque", 1, "5m"]
    assert headers("", "Secret") == [
        ("Name", "string", 0),
        ("Type", "string", 0),
        ("Data", "string", 0),
        ("Age", "string", 0),
    ]
    sa = {"metadata": meta("default"), "secrets": [{"name": "t"}]}
    assert row("", "ServiceAccount", sa) == ["default", 1, "5m"]
    lease = {"metadata": meta("lock"), "spec": {"holderIdentity": "ctrl-1"}}
    assert row("coordination.k8s.io", "Lease", lease) == ["lock", "ctrl-1", "5m"]


def test_event() -> None:
    assert headers("", "Event") == [
        ("Last Seen", "string", 0),
        ("Type", "string", 0),
        ("Reason", "string", 0),
        ("Object", "string", 0),
        ("Subobject", "string", 1),
        ("Source", "string", 1),
        ("Message", "string", 0),
        ("First Seen", "string", 1),
        ("Count", "string", 1),
        ("Name", "string", 1),
    ]
    event = {
        "metadata": meta("p1.17a"),
        "involvedObject": {"kind": "Pod", "name": "p1", "fieldPath": "spec.containers{c}"},
        "reason": "Pulled",
        "type": "Normal",
        "message": "  Container image pulled  \n",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": ago(minutes=10),
        "lastTimestamp": ago(seconds=30),
        "count": 3,
    }
    assert row("", "Event", event) == [
        "30s",
        "Normal",
        "Pulled",
        "pod/p1",
        "spec.containers{c}",
        "kubelet, node-1",
        "Container image pulled",
        "10m",
        3,
        "p1.17a",
    ]
    new_api = {
        "metadata": meta("e2"),
        "involvedObject": {"kind": "Node"},
        "reason": "Starting",
        "type": "Normal",
        "eventTime": ago(minutes=3),
        "reportingComponent": "kube-proxy",
    }
    assert row("", "Event", new_api) == [
        "3m",
        "Normal",
        "Starting",
        "node",
        "",
        "kube-proxy",
        "",
        "3m",
        1,
        "e2",
    ]
    series = {**new_api, "series": {"count": 7, "lastObservedTime": ago(seconds=5)}}
    cells = row("", "Event", series)
    assert (cells[0], cells[8]) == ("5s", 7)


def test_rbac() -> None:
    role = {"metadata": {"name": "reader", "creationTimestamp": "2025-01-02T03:04:05Z"}}
    assert row("rbac.authorization.k8s.io", "Role", role) == ["reader", "2025-01-02T03:04:05Z"]
    assert row("rbac.authorization.k8s.io", "ClusterRole", {"metadata": {"name": "x"}}) == [
        "x",
        "0001-01-01T00:00:00Z",
    ]
    assert headers("rbac.authorization.k8s.io", "ClusterRole") == [
        ("Name", "string", 0),
        ("Created At", "date", 0),
    ]
    binding = {
        "metadata": meta("rb"),
        "roleRef": {"kind": "ClusterRole", "name": "view", "apiGroup": "rbac.authorization.k8s.io"},
        "subjects": [
            {"kind": "User", "name": "alice"},
            {"kind": "User", "name": "bob"},
            {"kind": "Group", "name": "devs"},
            {"kind": "ServiceAccount", "name": "ci", "namespace": "tools"},
        ],
    }
    assert row("rbac.authorization.k8s.io", "RoleBinding", binding) == [
        "rb",
        "ClusterRole/view",
        "5m",
        "alice, bob",
        "devs",
        "tools:ci",
    ]
    assert row("rbac.authorization.k8s.io", "ClusterRoleBinding", binding)[1] == "ClusterRole/view"


def test_crd_created_at() -> None:
    crd = {
        "metadata": {
            "name": "widgets.example.com",
            "creationTimestamp": "2025-05-31T22:15:00+02:00",
        }
    }
    assert row("apiextensions.k8s.io", "CustomResourceDefinition", crd) == [
        "widgets.example.com",
        "2025-05-31T20:15:00Z",
    ]
    assert headers("apiextensions.k8s.io", "CustomResourceDefinition") == [
        ("Name", "string", 0),
        ("Created At", "date", 0),
    ]


def test_pvc_and_storage() -> None:
    bound = {
        "metadata": meta("data"),
        "spec": {
            "volumeName": "pv-1",
            "storageClassName": "standard",
            "resources": {"requests": {"storage": "1Gi"}},
        },
        "status": {
            "phase": "Bound",
            "capacity": {"storage": "2Gi"},
            "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
        },
    }
    assert row("", "PersistentVolumeClaim", bound) == [
        "data",
        "Bound",
        "pv-1",
        "2Gi",
        "RWO,RWX",
        "standard",
        "<unset>",
        "5m",
        "<unset>",
    ]
    pending = {
        "metadata": meta("new"),
        "spec": {"volumeMode": "Filesystem"},
        "status": {"phase": "Pending"},
    }
    assert row("", "PersistentVolumeClaim", pending) == [
        "new",
        "Pending",
        "",
        "",
        "",
        "",
        "<unset>",
        "5m",
        "Filesystem",
    ]
    sc = {
        "metadata": {
            "name": "standard",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            "creationTimestamp": ago(minutes=5),
        },
        "provisioner": "rancher.io/local-path",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    assert row("storage.k8s.io", "StorageClass", sc) == [
        "standard (default)",
        "rancher.io/local-path",
        "Delete",
        "WaitForFirstConsumer",
        "false",
        "5m",
    ]


def test_unknown_kind_gets_name_and_age() -> None:
    obj = {"metadata": meta("thing")}
    table = tables.make_table(group="example.com", kind="Gadget", objects=[obj], now=NOW)
    assert [(c["name"], c["type"]) for c in table["columnDefinitions"]] == [
        ("Name", "string"),
        ("Age", "date"),
    ]
    assert table["rows"][0]["cells"] == ["thing", "5m"]
    # As for a custom resource, a missing creationTimestamp is a null cell.
    assert row("", "PodTemplate", {"metadata": {"name": "t"}}) == ["t", None]


# ---------------------------------------------------------------------------------------------
# Custom resources

COLUMNS = [
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
    {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio"},
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    {"name": "Paused", "type": "boolean", "jsonPath": ".spec.paused", "priority": 1},
    {
        "name": "Started",
        "type": "date",
        "jsonPath": ".status.startTime",
        "description": "When it began.",
    },
    {"name": "Color", "type": "string", "jsonPath": ".spec.color", "format": "byte"},
]

WIDGET = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "metadata": meta("w1"),
    "spec": {"replicas": 2, "ratio": 1, "paused": True, "color": "red"},
    "status": {"conditions": [{"type": "Ready", "status": "True"}], "startTime": ago(minutes=3)},
}


def test_custom_resource_columns() -> None:
    table = tables.make_table(
        group="example.com", kind="Widget", objects=[WIDGET], printer_columns=COLUMNS, now=NOW
    )
    assert table["columnDefinitions"] == [
        {
            "name": "Name",
            "type": "string",
            "format": "name",
            "description": tables.NAME_DESCRIPTION,
            "priority": 0,
        },
        {
            "name": "Replicas",
            "type": "integer",
            "format": "",
            "description": "Custom resource definition column (in JSONPath format): .spec.replicas",
            "priority": 0,
        },
        {
            "name": "Ratio",
            "type": "number",
            "format": "",
            "description": "Custom resource definition column (in JSONPath format): .spec.ratio",
            "priority": 0,
        },
        {
            "name": "Ready",
            "type": "string",
            "format": "",
            "description": "Custom resource definition column (in JSONPath format): "
            '.status.conditions[?(@.type=="Ready")].status',
            "priority": 0,
        },
        {
            "name": "Paused",
            "type": "boolean",
            "format": "",
            "description": "Custom resource definition column (in JSONPath format): .spec.paused",
            "priority": 1,
        },
        {
            "name": "Started",
            "type": "date",
            "format": "",
            "description": "When it began.",
            "priority": 0,
        },
        {
            "name": "Color",
            "type": "string",
            "format": "byte",
            "description": "Custom resource definition column (in JSONPath format): .spec.color",
            "priority": 0,
        },
    ]
    # No Age column: the server adds one only when the CRD declares no columns.
    cells = table["rows"][0]["cells"]
    assert cells == ["w1", 2, 1.0, "True", True, "3m", "red"]
    assert isinstance(cells[2], float)
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


def test_custom_resource_missing_values_are_null() -> None:
    bare = {"metadata": meta("w2"), "spec": {}}
    table = tables.make_table(
        group="example.com", kind="Widget", objects=[bare], printer_columns=COLUMNS, now=NOW
    )
    assert table["rows"][0]["cells"] == ["w2", None, None, None, None, None, None]


@pytest.mark.parametrize(
    ("type_", "value", "cell"),
    [
        ("integer", 7, 7),
        ("integer", 7.9, 7),
        ("integer", "7", None),
        ("integer", True, None),
        ("number", 2, 2.0),
        ("number", 2.5, 2.5),
        ("number", "2.5", None),
        ("boolean", False, False),
        ("boolean", "true", None),
        ("string", "text", "text"),
        ("string", 3, "3"),
        ("string", 1.5, "1.5"),
        ("string", True, "true"),
        ("string", {"b": 1, "a": 2}, '{"a":2,"b":1}'),
        ("string", ["x", "y"], '["x","y"]'),
        ("date", ago(hours=50), "2d2h"),
        ("date", "not-a-date", "<invalid>"),
        ("date", "", "<unknown>"),
        ("date", 12, None),
        ("object", {"a": 1}, None),
    ],
)
def test_custom_resource_cell_types(type_: str, value: Any, cell: Any) -> None:
    columns = [{"name": "V", "type": type_, "jsonPath": ".spec.v"}]
    obj = {"metadata": meta("w"), "spec": {"v": value}}
    table = tables.make_table(group="g", kind="K", objects=[obj], printer_columns=columns, now=NOW)
    assert table["rows"][0]["cells"][1] == cell


def test_custom_resource_takes_first_match_and_survives_bad_path() -> None:
    columns = [
        {"name": "Ports", "type": "integer", "jsonPath": ".spec.ports[*].port"},
        {"name": "Bad", "type": "string", "jsonPath": ".spec[oops"},
    ]
    obj = {"metadata": meta("w"), "spec": {"ports": [{"port": 80}, {"port": 443}]}}
    table = tables.make_table(group="g", kind="K", objects=[obj], printer_columns=columns, now=NOW)
    assert table["rows"][0]["cells"] == ["w", 80, None]


def test_custom_resource_without_columns_gets_age() -> None:
    table = tables.make_table(
        group="example.com", kind="Widget", objects=[WIDGET], printer_columns=[], now=NOW
    )
    assert [(c["name"], c["type"]) for c in table["columnDefinitions"]] == [
        ("Name", "string"),
        ("Age", "date"),
    ]
    assert table["columnDefinitions"][1]["description"] == tables.AGE_DESCRIPTION
    assert table["rows"][0]["cells"] == ["w1", "5m"]


def test_custom_resource_declared_age_column() -> None:
    columns = [
        {"name": "Status", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    obj = {**WIDGET, "status": {"phase": "Ready"}}
    table = tables.make_table(
        group="example.com", kind="Widget", objects=[obj], printer_columns=columns, now=NOW
    )
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Status", "Age"]
    assert table["rows"][0]["cells"] == ["w1", "Ready", "5m"]


def test_custom_resource_include_object() -> None:
    table = tables.make_table(
        group="example.com",
        kind="Widget",
        objects=[WIDGET],
        printer_columns=[],
        include_object="Object",
        now=NOW,
    )
    assert table["rows"][0]["object"] == WIDGET
