"""The hub tunnel's proxy tokens and which Clusters they are for (pure parts of app/hub_tunnel)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tether.app.hub_tunnel import api_destination, load_or_create_key, proxy_token, uses_listener
from tether.federation.health import member_credentials, proxy_headers
from tether.tunnel.destinations import parse_destination


def test_key_is_created_private_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "tunnel" / "proxy-token.key"
    key = load_or_create_key(path)
    assert len(key) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_key(path) == key
    path.write_text("not hex")
    assert load_or_create_key(path) != key  # unreadable: a new one


def test_tokens_differ_per_cluster_and_key() -> None:
    a, b = b"a" * 32, b"b" * 32
    assert proxy_token(a, "c1") == proxy_token(a, "c1")
    assert len({proxy_token(a, "c1"), proxy_token(a, "c2"), proxy_token(b, "c1")}) == 3


@pytest.mark.parametrize(("endpoint", "expected"), [
    ("https://127.0.0.1:6443", "127.0.0.1:6443"),
    ("https://Member.Example", "member.example:443"),
    ("http://10.0.0.1", "10.0.0.1:80"),
    ("https://[::1]:8443/base", "[::1]:8443"),
    ("https://127.0.0.1:99999", None),
    ("ftp://x", None),
    ("", None),
])
def test_api_destination(endpoint: str, expected: str | None) -> None:
    found = api_destination(endpoint)
    assert found == (parse_destination(expected) if expected else None)


@pytest.mark.parametrize(("proxy_url", "uses"), [
    ("http://127.0.0.1:8088", True), ("http://127.0.0.1:8089", False),
    ("http://localhost:8088", False), ("https://127.0.0.1:8088", False), ("", False),
    ("http://127.0.0.1:notaport", False),
])
def test_uses_listener(proxy_url: str, uses: bool) -> None:
    assert uses_listener({"spec": {"proxyURL": proxy_url}}, 8088) is uses


def test_secret_proxy_headers_reach_the_member_credentials() -> None:
    import base64

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    secret = {"data": {"token": b64("t"), "proxyHeader.Proxy-Authorization": b64("Bearer x"),
                       "proxyHeader.": b64("ignored"), "proxyHeader.Bad": b64("a\r\nb"),
                       "other": b64("y")}}
    spec = {"apiEndpoint": "https://10.0.0.1:6443", "proxyURL": "http://127.0.0.1:8088",
            "proxyHeader": {"X-Team": "a,b"}}
    assert proxy_headers(spec, secret["data"]) == {"X-Team": "a,b", "Proxy-Authorization": "Bearer x"}
    creds = member_credentials({"metadata": {"name": "c1"}, "spec": spec}, secret)
    assert ("Proxy-Authorization", "Bearer x") in creds.proxy_headers
    assert proxy_headers({}, {}) is None


def test_agent_certs_from_a_certs_tree_or_a_mounted_secret(tmp_path: Path) -> None:
    from tether.app.hub_tunnel import agent_certs

    tree = agent_certs(tmp_path)  # `tether certs` layout, the default
    assert (tree.cert, tree.key, tree.ca) == (
        tmp_path / "agent/issued/proxy-frontend.crt", tmp_path / "agent/private/proxy-frontend.key",
        tmp_path / "agent/issued/ca.crt")
    secret = tmp_path / "secret"
    secret.mkdir()
    for name in ("ca.crt", "proxy-frontend.crt", "proxy-frontend.key"):
        (secret / name).write_text(name)
    flat = agent_certs(secret)
    assert (flat.cert.read_text(), flat.key.read_text(), flat.ca.read_text()) == (
        "proxy-frontend.crt", "proxy-frontend.key", "ca.crt")


KEY = b"k" * 32
READY = {"kubernetesVersion": "v1.37.0", "lastHeartbeatTime": "2026-12-02T00:00:00Z",
         "conditions": [{"type": "Ready", "status": "True"}]}  # the agent's report


def _cluster(proxy_url: str = "http://127.0.0.1:8088", status: dict[str, object] | None = None,
             endpoint: str = "https://10.0.0.1:6443") -> dict[str, object]:
    return {"metadata": {"name": "c1"}, "spec": {"apiEndpoint": endpoint, "proxyURL": proxy_url},
            "status": READY if status is None else status}


def _granted(*dests: str) -> dict[str, frozenset[object]]:
    from tether.tunnel.connect import token_key

    return {token_key(proxy_token(KEY, "c1")): frozenset(parse_destination(d) for d in dests)}


@pytest.mark.parametrize(("cluster", "grants", "expected"), [
    # granted, reported: the token from the hub key, whatever the Secret had (or had not yet)
    (_cluster(), _granted("10.0.0.1:6443"), "token"),
    # not through this listener (a push member, another proxy): as the Secret says
    (_cluster(proxy_url=""), {}, "unchanged"),
    (_cluster(proxy_url="http://127.0.0.1:9999"), {}, "unchanged"),
    # not granted yet (this replica has not seen the Cluster) or granted elsewhere: not dialled
    (_cluster(), {}, None),
    (_cluster(), _granted("10.0.0.2:6443"), None),
    # just registered: no agent report yet, so no tunnel to dial through
    (_cluster(status={}), _granted("10.0.0.1:6443"), None),
    (_cluster(status={"conditions": [{"type": "ServiceMirrorEndpointsFresh"}]}),
     _granted("10.0.0.1:6443"), None),
    # the hub's own Ready=Unknown for an agent that never came: still nothing to dial through
    (_cluster(status={"conditions": [{"type": "Ready", "status": "Unknown", "reason": "ClusterStatusUnknown"}]}),
     _granted("10.0.0.1:6443"), None),
    # an agent that reported and went quiet since: its member keeps its watchers
    (_cluster(status={"kubernetesVersion": "v1.37.0",
                      "conditions": [{"type": "Ready", "status": "Unknown", "reason": "ClusterStatusUnknown"}]}),
     _granted("10.0.0.1:6443"), "token"),
])
def test_client_credentials(cluster: dict[str, object], grants: dict[str, frozenset[object]],
                            expected: str | None) -> None:
    from tether.app.hub_tunnel import client_credentials
    from tether.kube import ClusterCredentials

    before = ClusterCredentials.from_token(server="https://10.0.0.1:6443", token="t", ca_bundle=None,
                                           proxy_url="http://127.0.0.1:8088",
                                           proxy_headers={"X-Team": "a", "proxy-authorization": "Bearer old"})
    got = client_credentials(cluster, before, frontend_port=8088, key=KEY, grants=grants)  # type: ignore[arg-type]
    if expected is None:
        assert got is None
    elif expected == "unchanged":
        assert got == before
    else:
        assert got is not None and got.token == before.token
        assert dict(got.proxy_headers) == {"X-Team": "a", "Proxy-Authorization": f"Bearer {proxy_token(KEY, 'c1')}"}
