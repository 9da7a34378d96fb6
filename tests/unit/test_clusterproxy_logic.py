"""The cluster proxy's pure parts: routing, callers, authorisation, headers, Status bodies."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tether.federation import clusterproxy as cp


@pytest.mark.parametrize(("target", "expected"), [
    ("/apis/cluster.tether.io/v1alpha1/clusters/m1/proxy/api/v1/pods?watch=1&labelSelector=a%3Db",
     cp.Route("m1", "/api/v1/pods?watch=1&labelSelector=a%3Db", "cluster.tether.io")),
    ("/apis/cluster.karmada.io/v1alpha1/clusters/m1/proxy/api",
     cp.Route("m1", "/api", "cluster.karmada.io")),
    ("/apis/cluster.tether.io/v1alpha1/clusters/m1/proxy",
     cp.Route("m1", "/", "cluster.tether.io")),
    ("/apis/cluster.tether.io/v1alpha1/clusters/m1/proxy/",
     cp.Route("m1", "/", "cluster.tether.io")),
    ("/apis/cluster.tether.io/v1alpha1/clusters/m1/proxy?timeout=32s",
     cp.Route("m1", "/?timeout=32s", "cluster.tether.io")),
    ("/api/v1/namespaces/default/pods/web:8080/proxy/x%2Fy", None),
    ("/apis/cluster.tether.io/v1alpha1/clusters/m1/status", None),
    ("/apis/cluster.tether.io/v1beta1/clusters/m1/proxy/api", None),
    ("/apis/other.io/v1alpha1/clusters/m1/proxy/api", None),
])
def test_route(target: str, expected: cp.Route | None) -> None:
    assert cp.route(target) == expected


def test_route_keeps_percent_encoding() -> None:
    found = cp.route("/apis/cluster.tether.io/v1alpha1/clusters/m1/proxy/api/v1/namespaces/d/"
                     "pods/web:8080/proxy/a%2Fb?q=%20")
    assert found is not None and found.target == "/api/v1/namespaces/d/pods/web:8080/proxy/a%2Fb?q=%20"


def test_cluster_names() -> None:
    assert cp.valid_cluster_name("member-1")
    assert not cp.valid_cluster_name("Member")
    assert not cp.valid_cluster_name("..")
    assert not cp.valid_cluster_name("")


def test_caller_from_peercert() -> None:
    cert = {"subject": ((("organizationName", "devs"),), (("organizationName", "ops"),),
                        (("commonName", "alice"),))}
    assert cp.caller_from_peercert(cert) == cp.Caller("alice", ("devs", "ops", cp.AUTHENTICATED),
                                                      "certificate")
    assert cp.caller_from_peercert({}) is None
    assert cp.caller_from_peercert(None) is None
    assert cp.caller_from_peercert({"subject": ((("organizationName", "x"),),)}) is None


def test_bearer_token() -> None:
    assert cp.bearer_token({"authorization": "Bearer abc "}) == "abc"
    assert cp.bearer_token({"authorization": "bearer abc"}) == "abc"
    assert cp.bearer_token({"authorization": "Basic abc"}) is None
    assert cp.bearer_token({"authorization": "Bearer "}) is None
    assert cp.bearer_token({}) is None


@pytest.mark.parametrize(("method", "verb"), [
    ("GET", "get"), ("HEAD", "get"), ("head", "get"), ("POST", "create"), ("PUT", "update"),
    ("PATCH", "patch"), ("DELETE", "delete"), ("OPTIONS", None), ("CONNECT", None),
    ("TRACE", None), ("", None),
])
def test_proxy_verb_is_kube_apiservers_for_a_named_resource(method: str, verb: str | None) -> None:
    assert cp.proxy_verb(method) == verb


@pytest.mark.parametrize(("groups", "expected"), [
    (("devs", cp.AUTHENTICATED), ("devs",)),
    ((cp.ADMIN_GROUP, cp.AUTHENTICATED), (cp.HUB_ADMINS_GROUP,)),
    ((cp.ADMIN_GROUP, cp.HUB_ADMINS_GROUP, "ops"), (cp.HUB_ADMINS_GROUP, "ops")),
    ((cp.HUB_ADMINS_GROUP, "ops"), ("ops",)),  # only the hub's admins are member admins
    (("system:serviceaccounts", "system:serviceaccounts:default", cp.AUTHENTICATED),
     ("system:serviceaccounts", "system:serviceaccounts:default")),
    ((cp.UNAUTHENTICATED,), ()),
    ((), ()),
])
def test_member_identity_never_sends_system_masters(groups: tuple[str, ...],
                                                    expected: tuple[str, ...]) -> None:
    user, sent = cp.member_identity(cp.Caller("alice", groups))
    assert user == "alice" and sent == expected
    assert cp.ADMIN_GROUP not in sent


def test_access_review_is_clusters_proxy_by_name() -> None:
    caller = cp.Caller("alice", ("devs", cp.AUTHENTICATED), "token", "u-1",
                       (("scopes", ("a", "b")),))
    review = cp.access_review(caller, "c1", "create")
    assert review["kind"] == "SubjectAccessReview"
    assert review["apiVersion"] == "authorization.k8s.io/v1"
    assert review["spec"] == {
        "user": "alice", "groups": ["devs", cp.AUTHENTICATED], "uid": "u-1",
        "extra": {"scopes": ["a", "b"]},
        "resourceAttributes": {"group": "cluster.tether.io", "version": "v1alpha1",
                               "resource": "clusters", "subresource": "proxy", "name": "c1",
                               "verb": "create"}}
    plain = cp.access_review(cp.Caller("bob"), "c2", "get")["spec"]
    assert "uid" not in plain and "extra" not in plain


@pytest.mark.parametrize(("status", "allowed", "reason"), [
    ({"allowed": True, "reason": "RBAC: allowed by ClusterRoleBinding x"}, True,
     "RBAC: allowed by ClusterRoleBinding x"),
    ({"allowed": False}, False, ""),
    ({"allowed": True, "denied": True}, False, ""),
    ({"allowed": False, "evaluationError": "boom"}, False, "boom"),
    ({}, False, ""),
])
def test_decision_from_review(status: dict[str, Any], allowed: bool, reason: str) -> None:
    assert cp.decision_from_review({"status": status}) == cp.Decision(allowed, reason)
    assert cp.decision_from_review({}) == cp.Decision(False, "")


def test_forbidden_message_is_kube_apiservers() -> None:
    caller = cp.Caller("system:serviceaccount:default:default")
    assert cp.forbidden_message(caller, "c1", "get") == (
        'clusters.cluster.tether.io "c1" is forbidden: User "system:serviceaccount:default:default"'
        ' cannot get resource "clusters/proxy" in API group "cluster.tether.io" at the cluster scope')
    assert cp.forbidden_message(caller, "c1", "get", "no rule").endswith("cluster scope: no rule")


def test_decision_cache_expires_and_is_bounded() -> None:
    now = [100.0]
    cache = cp.DecisionCache(ttl_s=5.0, max_entries=3, clock=lambda: now[0])
    alice, bob = cp.Caller("alice", ("devs",)), cp.Caller("alice", ("ops",))
    key = cache.key(alice, "c1", "get")
    assert cache.get(key) is None
    cache.put(key, cp.Decision(True))
    assert cache.get(key) == cp.Decision(True)
    # another group, cluster or verb is another question
    assert cache.get(cache.key(bob, "c1", "get")) is None
    assert cache.get(cache.key(alice, "c2", "get")) is None
    assert cache.get(cache.key(alice, "c1", "delete")) is None
    now[0] += 5.0
    assert cache.get(key) is None  # expired
    for n in range(10):
        cache.put(cache.key(alice, f"c{n}", "get"), cp.Decision(False))
        assert len(cache) <= 3
    assert cache.get(cache.key(alice, "c9", "get")) == cp.Decision(False)
    assert cache.get(cache.key(alice, "c0", "get")) is None  # the oldest went first


def test_upstream_headers_drop_credentials_and_hop_by_hop() -> None:
    caller = cp.Caller("alice", ("devs", cp.AUTHENTICATED))
    headers = {"authorization": "Bearer secret", "host": "hub", "connection": "keep-alive, x-drop",
               "x-drop": "1", "keep-alive": "5", "transfer-encoding": "chunked",
               "content-length": "3", "impersonate-user": "root", "impersonate-group": "system:masters",
               "accept": "application/json", "user-agent": "kubectl"}
    out = cp.upstream_headers(headers, caller)
    names = [n.lower() for n, _ in out]
    for dropped in ("authorization", "host", "connection", "x-drop", "keep-alive",
                    "transfer-encoding", "content-length"):
        assert dropped not in names
    assert ("accept", "application/json") in out and ("user-agent", "kubectl") in out
    assert ("Accept-Encoding", "identity") in out
    assert [v for n, v in out if n == "Impersonate-User"] == ["alice"]
    assert [v for n, v in out if n == "Impersonate-Group"] == ["devs"]
    assert ("impersonate-user", "root") not in out  # the caller's own impersonation is dropped
    assert all(v != "system:masters" for _, v in out)


def test_upstream_headers_upgrade() -> None:
    headers = {"connection": "Upgrade", "upgrade": "SPDY/3.1",
               "x-stream-protocol-version": "v4.channel.k8s.io", "accept-encoding": "gzip"}
    assert cp.is_upgrade(headers)
    out = cp.upstream_headers(headers, None, upgrade=True)
    assert ("Connection", "Upgrade") in out and ("Upgrade", "SPDY/3.1") in out
    assert ("x-stream-protocol-version", "v4.channel.k8s.io") in out
    assert ("accept-encoding", "gzip") in out and ("Accept-Encoding", "identity") not in out
    assert not any(n.startswith("Impersonate") for n, _ in out)
    assert not cp.is_upgrade({"connection": "keep-alive", "upgrade": "h2c"})
    assert not cp.is_upgrade({"connection": "upgrade"})


def test_downstream_headers() -> None:
    content_type, out = cp.downstream_headers([
        ("Content-Type", "application/json"), ("Content-Length", "10"), ("Audit-Id", "a"),
        ("Transfer-Encoding", "chunked"), ("Cache-Control", "no-cache"), ("Content-Encoding", "gzip"),
        ("Warning", "1"), ("Warning", "2")])
    assert content_type == "application/json"
    assert out == [("Audit-Id", "a"), ("Content-Encoding", "gzip"), ("Warning", "1"), ("Warning", "2")]
    assert cp.switch_headers([("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1"),
                              ("Content-Length", "0")]) == [("Connection", "Upgrade"),
                                                            ("Upgrade", "SPDY/3.1")]


def test_status_body() -> None:
    status = json.loads(cp.failure(404, "NotFound", 'clusters.cluster.tether.io "x" not found',
                                   name="x").body)
    assert status == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": 'clusters.cluster.tether.io "x" not found', "reason": "NotFound",
                      "code": 404, "details": {"name": "x", "group": "cluster.tether.io",
                                               "kind": "clusters"}}


def test_default_connect_for() -> None:
    assert cp.default_connect_for("a", {"spec": {"syncMode": "Push"}}) is cp.DIRECT
    assert cp.default_connect_for("a", {"spec": {"syncMode": "Pull"}}) is None
    assert cp.default_connect_for("a", {"spec": {"syncMode": "Pull",
                                                 "proxyURL": "http://p:8088"}}) is cp.DIRECT


class FakeMember:
    """An `UpgradedStream` stand-in: scripted reads, recorded writes."""

    def __init__(self, reads: list[bytes], hold: asyncio.Event | None = None) -> None:
        self.reads = reads
        self.hold = hold
        self.written = bytearray()
        self.closed = False

    async def read(self, max_bytes: int = 0, *, idle_timeout_s: float | None = None) -> bytes:
        if self.reads:
            return self.reads.pop(0)
        if self.hold is not None:
            await self.hold.wait()
        return b""

    async def write(self, data: bytes, *, timeout_s: float | None = None) -> None:
        self.written += data

    async def aclose(self) -> None:
        self.closed = True


async def _pair() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, asyncio.StreamReader,
                           asyncio.StreamWriter, asyncio.Server]:
    accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
        asyncio.get_running_loop().create_future())

    async def on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result((reader, writer))

    server = await asyncio.start_server(on, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client_r, client_w = await asyncio.open_connection("127.0.0.1", port)
    server_r, server_w = await accepted
    return client_r, client_w, server_r, server_w, server


async def test_relay_both_ways_and_half_close() -> None:
    client_r, client_w, server_r, server_w, server = await _pair()
    ended = asyncio.Event()
    member = FakeMember([b"hello ", b"caller"], hold=ended)
    async with asyncio.timeout(10):
        relaying = asyncio.create_task(cp.relay(server_r, server_w, member, idle_timeout_s=5,
                                                linger_s=0.5))
        client_w.write(b"to member")
        await client_w.drain()
        assert await client_r.readexactly(12) == b"hello caller"
        ended.set()  # the member ends: the caller (plain TCP) sees EOF
        assert await client_r.read() == b""
        await relaying
    assert bytes(member.written) == b"to member" and member.closed
    client_w.close()
    server_w.close()
    server.close()


async def test_relay_caller_eof_closes_member_after_linger() -> None:
    _, client_w, server_r, server_w, server = await _pair()
    member = FakeMember([], hold=asyncio.Event())  # never ends by itself
    async with asyncio.timeout(10):
        relaying = asyncio.create_task(cp.relay(server_r, server_w, member, idle_timeout_s=5,
                                                linger_s=0.2))
        client_w.write_eof()
        await relaying
    assert member.closed
    client_w.close()
    server_w.close()
    server.close()
