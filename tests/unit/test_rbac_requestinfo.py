"""Request attributes from method, path and query, as kube-apiserver's request-info resolver."""

from __future__ import annotations

import pytest

from tether.local.rbac.requestinfo import RequestInfo, resolve


def _r(verb: str, resource: str, *, ns: str = "", group: str = "", version: str = "v1", name: str = "",
       sub: str = "", path: str) -> RequestInfo:
    return RequestInfo(True, path, verb, "apis" if group else "api", group, version, ns, resource, sub, name)


@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("GET", "/api/v1/namespaces/t1/pods", {}, _r("list", "pods", ns="t1", path="/api/v1/namespaces/t1/pods")),
    ("GET", "/api/v1/namespaces/t1/pods", {"watch": ["true"]},
     _r("watch", "pods", ns="t1", path="/api/v1/namespaces/t1/pods")),
    ("GET", "/api/v1/namespaces/t1/pods", {"watch": ["1"]},
     _r("watch", "pods", ns="t1", path="/api/v1/namespaces/t1/pods")),
    ("GET", "/api/v1/namespaces/t1/pods", {"watch": ["false"]},
     _r("list", "pods", ns="t1", path="/api/v1/namespaces/t1/pods")),
    ("HEAD", "/api/v1/namespaces/t1/pods/p", {}, _r("get", "pods", ns="t1", name="p",
                                                    path="/api/v1/namespaces/t1/pods/p")),
    ("GET", "/api/v1/pods", {}, _r("list", "pods", path="/api/v1/pods")),
    # a list pinned to one name by a field selector is about that object
    ("GET", "/api/v1/namespaces/t1/pods", {"fieldSelector": ["metadata.name=p"], "watch": ["true"]},
     _r("watch", "pods", ns="t1", name="p", path="/api/v1/namespaces/t1/pods")),
    ("GET", "/api/v1/namespaces/t1/pods", {"fieldSelector": ["metadata.name!=p"]},
     _r("list", "pods", ns="t1", path="/api/v1/namespaces/t1/pods")),
    ("POST", "/api/v1/namespaces/t1/pods", {}, _r("create", "pods", ns="t1", path="/api/v1/namespaces/t1/pods")),
    ("PUT", "/apis/apps/v1/namespaces/t1/deployments/web/scale", {},
     _r("update", "deployments", ns="t1", group="apps", name="web", sub="scale",
        path="/apis/apps/v1/namespaces/t1/deployments/web/scale")),
    ("PATCH", "/apis/apps/v1/namespaces/t1/deployments/web", {},
     _r("patch", "deployments", ns="t1", group="apps", name="web", path="/apis/apps/v1/namespaces/t1/deployments/web")),
    ("DELETE", "/api/v1/namespaces/t1/pods/p", {}, _r("delete", "pods", ns="t1", name="p",
                                                      path="/api/v1/namespaces/t1/pods/p")),
    ("DELETE", "/api/v1/namespaces/t1/pods", {}, _r("deletecollection", "pods", ns="t1",
                                                    path="/api/v1/namespaces/t1/pods")),
    ("GET", "/api/v1/namespaces/t1/pods/p/log", {}, _r("get", "pods", ns="t1", name="p", sub="log",
                                                       path="/api/v1/namespaces/t1/pods/p/log")),
    ("POST", "/api/v1/namespaces/t1/pods/p/exec", {}, _r("create", "pods", ns="t1", name="p", sub="exec",
                                                         path="/api/v1/namespaces/t1/pods/p/exec")),
    ("GET", "/api/v1/namespaces/t1/services/s/proxy/a/b", {},
     _r("get", "services", ns="t1", name="s", sub="proxy", path="/api/v1/namespaces/t1/services/s/proxy/a/b")),
    ("POST", "/api/v1/namespaces/t1/serviceaccounts/sa/token", {},
     _r("create", "serviceaccounts", ns="t1", name="sa", sub="token",
        path="/api/v1/namespaces/t1/serviceaccounts/sa/token")),
    # a namespace is in itself
    ("GET", "/api/v1/namespaces/t1", {}, _r("get", "namespaces", ns="t1", name="t1", path="/api/v1/namespaces/t1")),
    ("PUT", "/api/v1/namespaces/t1/finalize", {},
     _r("update", "namespaces", ns="t1", name="t1", sub="finalize", path="/api/v1/namespaces/t1/finalize")),
    ("GET", "/api/v1/namespaces", {}, _r("list", "namespaces", path="/api/v1/namespaces")),
    ("GET", "/apis/cluster.tether.io/v1alpha1/clusters/c1/proxy/api/v1/pods", {},
     _r("get", "clusters", group="cluster.tether.io", version="v1alpha1", name="c1", sub="proxy",
        path="/apis/cluster.tether.io/v1alpha1/clusters/c1/proxy/api/v1/pods")),
    # legacy verb prefixes
    ("GET", "/api/v1/watch/namespaces/t1/pods", {}, _r("watch", "pods", ns="t1", path="/api/v1/watch/namespaces/t1/pods")),
    ("GET", "/api/v1/proxy/namespaces/t1/pods/p/x", {},
     _r("proxy", "pods", ns="t1", name="p", path="/api/v1/proxy/namespaces/t1/pods/p/x")),
    # discovery and the rest are paths
    ("GET", "/api", {}, RequestInfo(False, "/api", "get")),
    ("GET", "/api/v1", {}, RequestInfo(False, "/api/v1", "get")),
    ("GET", "/apis/apps/v1", {}, RequestInfo(False, "/apis/apps/v1", "get")),
    ("GET", "/version", {}, RequestInfo(False, "/version", "get")),
    ("GET", "/openapi/v3/apis/apps/v1", {}, RequestInfo(False, "/openapi/v3/apis/apps/v1", "get")),
    ("POST", "/healthz", {}, RequestInfo(False, "/healthz", "post")),
    ("GET", "/", {}, RequestInfo(False, "/", "get")),
])
def test_resolve(method: str, path: str, query: dict[str, list[str]], expected: RequestInfo) -> None:
    assert resolve(method, path, query) == expected
