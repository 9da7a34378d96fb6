"""`pods/proxy` and `services/proxy`: HTTP forwarded to a backend on the pod's address."""

from __future__ import annotations

import json

import httpx
from test_streaming_common import Env, env, http_backend, next_pod_ip, serving

from tether.local.operations import WriteOptions

__all__ = ["env"]


async def test_kubectl_get_raw_through_pod_proxy(env: Env) -> None:
    ip = next_pod_ip()
    async with serving(ip, http_backend) as port:
        env.create_pod("p", pod_ip=ip, ports=[port])
        code, out, err = await env.kubectl("get", "--raw",
                                           f"/api/v1/namespaces/default/pods/p:{port}/proxy/hello")
        assert (code, out) == (0, "hello from the pod\n"), err
        # No port in the name: the pod's first declared container port.
        code, out, err = await env.kubectl("get", "--raw", "/api/v1/namespaces/default/pods/p/proxy/hello")
        assert (code, out) == (0, "hello from the pod\n"), err


async def test_pod_proxy_forwards_method_body_query_and_path(env: Env) -> None:
    ip = next_pod_ip()
    async with serving(ip, http_backend) as port:
        env.create_pod("p", pod_ip=ip, ports=[port])
        async with httpx.AsyncClient(base_url=env.cluster.url, verify=env.trust()) as client:
            answer = await client.post(
                f"/api/v1/namespaces/default/pods/http:p:p{port}/proxy/a%2Fb/c/?x=1&y=two",
                content=b"payload", headers={"X-Custom": "kept", "Authorization": "Bearer secret",
                                             "Content-Type": "text/plain"})
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-backend"] == "yes"
            seen = answer.json()
            assert seen["method"] == "POST" and seen["body"] == "payload"
            assert seen["target"] == "/a%2Fb/c/?x=1&y=two"
            assert seen["headers"]["x-custom"] == "kept" and "authorization" not in seen["headers"]
            assert seen["headers"]["host"] == f"{ip}:{port}"
    async with httpx.AsyncClient(base_url=env.cluster.url, verify=env.trust()) as client:
        gone = await client.get(f"/api/v1/namespaces/default/pods/p:{port}/proxy/")
        assert gone.status_code == 503 and "connection refused" in gone.json()["message"]


async def test_service_proxy_picks_a_ready_endpoint(env: Env) -> None:
    ip = next_pod_ip()
    async with serving(ip, http_backend) as port:
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                   "spec": {"ports": [{"name": "web", "port": 80, "targetPort": port}]}}
        env.cluster.ops.create(env.rt("services"), "default", service, WriteOptions(manager="test"))
        slices = env.cluster.registry.lookup("discovery.k8s.io", "v1", "endpointslices")
        assert slices is not None
        piece = {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "s-manual", "labels": {"kubernetes.io/service-name": "s"}},
            "addressType": "IPv4",
            "ports": [{"name": "web", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["127.0.0.250"], "conditions": {"ready": False}},
                          {"addresses": [ip], "conditions": {"ready": True}}],
        }
        env.cluster.ops.create(slices, "default", piece, WriteOptions(manager="test"))
        for name in ("s", "s:web", "s:80", "http:s:web"):
            code, out, err = await env.kubectl(
                "get", "--raw", f"/api/v1/namespaces/default/services/{name}/proxy/hello")
            assert (code, out) == (0, "hello from the pod\n"), (name, err)
        async with httpx.AsyncClient(base_url=env.cluster.url, verify=env.trust()) as client:
            missing = await client.get("/api/v1/namespaces/default/services/s:81/proxy/")
            assert missing.status_code == 503
            assert json.loads(missing.text)["message"] == 'no service port 81 found for service "s"'
