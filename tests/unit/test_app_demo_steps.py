"""The demo steps' shared pure parts: the objects they apply, reading EndpointSlices and an echo
answer, and the bounded wait every step uses."""

from __future__ import annotations

import json

import pytest

from tether.app import demo_steps as steps
from tether.objects import Obj


def test_echo_app_service_selects_the_deployments_pods() -> None:
    deployment, service = steps.echo_app("hello", "ns", 2, 80, service_labels={"mirror": "true"})
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == pod_labels == {"app": "hello"}
    assert service["spec"]["selector"] == pod_labels
    assert service["metadata"]["labels"] == {"mirror": "true"}
    assert deployment["spec"]["replicas"] == 2
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"][0]["containerPort"] == container["readinessProbe"]["tcpSocket"]["port"]
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http"}]


def test_propagation_policy_selects_its_deployment() -> None:
    policy = steps.propagation_policy("web", "ns", {"clusterAffinity": {"clusterNames": ["a"]}})
    assert policy["spec"]["resourceSelectors"] == [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                    "name": "web"}]
    assert policy["metadata"] == {"name": "web", "namespace": "ns"}


def _slice(service: str, *endpoints: tuple[str, bool | None]) -> Obj:
    return {"metadata": {"labels": {steps.SERVICE_NAME_LABEL: service}},
            "endpoints": [{"addresses": [a], **({} if r is None else {"conditions": {"ready": r}})}
                          for a, r in endpoints]}


def test_ready_addresses_skips_unready_and_other_services() -> None:
    slices = [_slice("hello", ("10.0.0.2", True), ("10.0.0.3", False), ("10.0.0.1", None)),
              _slice("other", ("10.0.0.9", True)), {"metadata": {}}]
    assert steps.ready_addresses(slices, "hello") == ("10.0.0.1", "10.0.0.2")


@pytest.mark.parametrize(("raw", "who"), [
    (b"HTTP/1.1 200 OK\r\n\r\n" + json.dumps({"pod": "p", "podIP": "1.2.3.4", "node": "n"}).encode(),
     "p (1.2.3.4) on n"),
    (b"HTTP/1.0 200 OK\r\nX: y\r\n\r\n" + json.dumps({"pod": "p"}).encode(), "p (?) on ?"),
    (b"HTTP/1.1 503 Service Unavailable\r\n\r\n" + json.dumps({"pod": "p"}).encode(), ""),
    (b"HTTP/1.1 200 OK\r\n\r\nnot json", ""),
    (b"HTTP/1.1 200 OK\r\n\r\n[]", ""),
    (b"", ""),
])
def test_describe_echo(raw: bytes, who: str) -> None:
    assert steps.describe_echo(raw) == who


async def test_poll_returns_the_first_done_result() -> None:
    seen = iter(range(10))

    async def fetch() -> int:
        return next(seen)

    assert await steps.poll(fetch, lambda n: n == 3, timeout_s=60.0, interval_s=0) == 3


async def test_poll_returns_the_last_result_when_time_is_up() -> None:
    calls = []

    async def fetch() -> int:
        calls.append(1)
        return len(calls)

    assert await steps.poll(fetch, lambda n: False, timeout_s=0.0) == 1
