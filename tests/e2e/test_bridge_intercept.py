"""`tether intercept` on a local cluster with the todo sample app's names: `stats-api` (two nginx
pods, port 80) in `todo-app`, the developer's program on 127.0.0.1:3001 (here: an HTTP server in
the test).

- `--route-as naison-e4be`: a request with `kubernetes-route-as: naison-e4be` (from a pod, and
  to the Service's ClusterIP) reaches the local program, one without it the original pods; the
  baggage form too; a second developer gets their own requests; 1,000 requests without the
  header all succeed; raw TCP reaches the original pods; `tether bridge intercepts` lists both;
  the same name from another session is refused; `leave` restores the Service exactly.
- `--all`: every request reaches the local program.
- Requests with the header sent in a loop right across `tether leave` (and across Ctrl-C of the
  client): none fails; they reach the local program, then the original pods.
- SIGKILL of the client: within restore-after + 10 s the Service routes to its pods and nothing of
  the session is left; a client that comes back before expiry resumes.
- `tether bridge reset`: a namespace left intercepted (client killed, Lease not yet expired) is
  restored at once and left with no tether objects.
- `--ingress`: an Ingress host copy `naison-e4be.<host>` appears; requests for that Host (as an
  ingress controller forwards them to the Service) reach the local program without the header.
- h2c with prior knowledge: a connection whose first request has the header reaches the local
  program (which, speaking HTTP/1.1 only, refuses it with its own error page), one without it an
  original pod.
- `-- CMD` (TARGET `deploy/stats-api`: its Service is found by selector): the command runs with
  the pod's environment; the intercept ends with it.
- A selector changed by someone else while intercepted is reported (Event, `bridge intercepts`)
  and left as it is by `leave`.
- Bad input (route name, TARGET without a Service: a Service without a selector or a Deployment
  no Service selects, a port the Service lacks) changes nothing.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from e2e_util import manifest, poll

pytestmark = pytest.mark.e2e

NS = "todo-app"
SVC = "stats-api"
TIMEOUT_S = 120.0


class Local(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    label = "local"
    error_message_format = "the local program: %(code)d\n"

    def do_GET(self) -> None:
        body = f"{self.label} {self.headers.get('kubernetes-route-as', '')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def local_program(port: int, label: str) -> Iterator[None]:
    handler = type(f"Local_{label}", (Local,), {"label": label})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_args(clusters: Any) -> list[str]:
    return ["--kubeconfig", str(clusters.kubeconfig), "--context", clusters.names[0]]


def tether(clusters: Any, *args: str, state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args, *base_args(clusters)], capture_output=True,
                          text=True, timeout=180, env={**os.environ, "TETHER_HOME": str(state)})


def start_intercept(clusters: Any, *args: str, state: Path, log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("ab")
    return subprocess.Popen([sys.executable, "-m", "tether", "intercept", SVC, "-n", NS, *args, *base_args(clusters)],
                            stdout=handle, stderr=subprocess.STDOUT,
                            env={**os.environ, "TETHER_HOME": str(state), "USER": "naison"})


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def app(clusters: Any) -> Iterator[dict[str, Any]]:
    clusters.kubectl("create", "namespace", NS, check=False)
    labels = {"app": SVC}
    clusters.kubectl("apply", "-n", NS, "-f", "-", input=manifest(
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": SVC},
         "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"containers": [{"name": "web", "image": "nginx",
                                                        "env": [{"name": "STATS_MODE", "value": "seed"}],
                                                        "ports": [{"containerPort": 80, "name": "http"}]}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SVC},
         "spec": {"selector": labels, "ports": [{"name": "http", "port": 80, "targetPort": 80}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "todos-db"},
         "spec": {"ports": [{"port": 27017}]}},  # no selector: nothing to intercept
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "todos-worker"},  # no Service
         "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "todos-worker"}},
                  "template": {"metadata": {"labels": {"app": "todos-worker"}},
                               "spec": {"containers": [{"name": "worker", "image": "nginx"}]}}}},
    ))
    poll(lambda: len(ready_addresses(clusters)) == 2, timeout=TIMEOUT_S, interval=0.5, what="two ready stats-api pods")
    svc = clusters.kubectl_json("get", "service", SVC, "-n", NS)
    yield svc
    clusters.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def ready_addresses(clusters: Any) -> list[str]:
    endpoints = clusters.kubectl_json("get", "endpoints", SVC, "-n", NS)
    return [a["ip"] for s in endpoints.get("subsets") or [] for a in s.get("addresses") or []]


def get(ip: str, headers: dict[str, str] | None = None, path: str = "/") -> str:
    connection = http.client.HTTPConnection(ip, 80, timeout=15)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return f"{response.status} {response.read().decode(errors='replace')}"
    except (OSError, http.client.HTTPException) as exc:  # while the Service moves: asked again
        return f"error {exc!r}"
    finally:
        connection.close()


def is_original(answer: str) -> bool:
    return answer.startswith("200 ") and "Welcome to nginx" in answer


def comparable(service: dict[str, Any]) -> dict[str, Any]:
    """The Service without what any write changes (managedFields, resourceVersion)."""
    copy = json.loads(json.dumps(service))
    for key in ("managedFields", "resourceVersion", "generation"):
        copy["metadata"].pop(key, None)
    return copy  # type: ignore[no-any-return]


def leftovers(clusters: Any) -> list[str]:
    found = []
    for kind in ("configmaps", "leases", "deployments", "services", "serviceaccounts", "roles", "rolebindings"):
        items = clusters.kubectl_json("get", kind, "-n", NS, "-l", "app.kubernetes.io/managed-by=tether")["items"]
        found += [f"{kind}/{i['metadata']['name']}" for i in items if not i["metadata"].get("deletionTimestamp")]
    return found


def wait_routed(ip: str, route: str, label: str) -> None:
    poll(lambda: get(ip, {"kubernetes-route-as": route}) == f"200 {label} {route}", timeout=TIMEOUT_S,
         interval=0.5, what=f"requests for {route} reaching {label}")


def test_route_as_header_two_developers_and_leave(clusters: Any, app: dict[str, Any], tmp_path: Path) -> None:
    ip = app["spec"]["clusterIP"]
    before = comparable(clusters.kubectl_json("get", "service", SVC, "-n", NS))
    port_a, port_b = 3001, free_port()
    with local_program(port_a, "local-a"), local_program(port_b, "local-b"):
        first = start_intercept(clusters, "--port", f"{port_a}:80", "--route-as", "naison-e4be",
                                state=tmp_path / "a", log=tmp_path / "a.log")
        second = start_intercept(clusters, "--port", str(port_b), "--route-as", "alice-0001",
                                 state=tmp_path / "b", log=tmp_path / "b.log")
        try:
            wait_routed(ip, "naison-e4be", "local-a")
            wait_routed(ip, "alice-0001", "local-b")
            assert is_original(get(ip)), "a request without the header reaches the original pods"
            assert is_original(get(ip, {"kubernetes-route-as": "nobody"}))
            assert get(ip, {"baggage": "k=v,kubernetes-route-as=naison-e4be"}) == "200 local-a "

            # From a pod, with the real curl, by the Service's name.
            clusters.kubectl("run", "client", "-n", NS, "--image", "curlimages/curl", "--restart", "Never",
                             "--command", "--", "sleep", "3600", check=False)
            poll(lambda: clusters.kubectl_json("get", "pod", "client", "-n", NS)["status"].get("phase") == "Running",
                 timeout=TIMEOUT_S, interval=0.5, what="the client pod")
            from_pod = clusters.kubectl("exec", "-n", NS, "client", "--", "curl", "-s", "-H",
                                        "kubernetes-route-as: naison-e4be", f"http://{ip}:80/").stdout
            assert from_pod == "local-a naison-e4be"
            assert "Welcome to nginx" in clusters.kubectl("exec", "-n", NS, "client", "--", "curl", "-s",
                                                          f"http://{ip}:80/").stdout

            # Availability: 1,000 requests without the header, on keep-alive connections.
            failures = 0
            connection = http.client.HTTPConnection(ip, 80, timeout=15)
            for _ in range(1000):
                try:
                    connection.request("GET", "/")
                    response = connection.getresponse()
                    failures += response.status != 200 or b"Welcome to nginx" not in response.read()
                except (OSError, http.client.HTTPException):
                    failures += 1
                    connection.close()
                    connection = http.client.HTTPConnection(ip, 80, timeout=15)
            connection.close()
            assert failures == 0

            # Raw TCP (not HTTP) reaches an original pod: its web server refuses the bytes (with a
            # page of its own, not the local program's).
            with socket.create_connection((ip, 80), timeout=15) as raw:
                raw.sendall(b"\x16\x03\x01hello\r\n\r\n")
                raw.shutdown(socket.SHUT_WR)
                answer = b""
                while chunk := raw.recv(65536):
                    answer += chunk
            assert b"400" in answer and b"Error response" in answer and b"local program" not in answer

            listed = tether(clusters, "bridge", "intercepts", "-n", NS, state=tmp_path / "a")
            assert listed.returncode == 0, listed.stderr
            assert "naison-e4be" in listed.stdout and "alice-0001" in listed.stdout and "naison" in listed.stdout
            status = tether(clusters, "bridge", "status", "-n", NS, state=tmp_path / "a")
            assert status.returncode == 0, status.stderr
            assert f"intercepts in namespace {NS}" in status.stdout
            assert "naison-e4be" in status.stdout and "alice-0001" in status.stdout

            taken = tether(clusters, "intercept", SVC, "-n", NS, "--port", "4000", "--route-as", "alice-0001",
                           state=tmp_path / "c")
            assert taken.returncode == 1 and "is taken by" in taken.stderr

            assert tether(clusters, "leave", "alice-0001", "-n", NS, state=tmp_path / "b").returncode == 0
            second.wait(timeout=60)
            # the router drops the route at its next look at the sessions: wait for it, not a time
            poll(lambda: is_original(get(ip, {"kubernetes-route-as": "alice-0001"})), timeout=TIMEOUT_S,
                 interval=0.5, what="alice's header reaching the original pods again")
            assert get(ip, {"kubernetes-route-as": "naison-e4be"}) == "200 local-a naison-e4be"
        finally:
            stop(second)
            stop(first)
            clusters.kubectl("delete", "pod", "client", "-n", NS, "--wait=false", check=False)
    after = comparable(clusters.kubectl_json("get", "service", SVC, "-n", NS))
    assert after == before, (tmp_path / "a.log").read_text()
    poll(lambda: not leftovers(clusters), timeout=TIMEOUT_S, interval=0.5, what="no tether objects left")
    assert is_original(get(ip, {"kubernetes-route-as": "naison-e4be"}))


def test_all_takes_every_request(clusters: Any, app: dict[str, Any], tmp_path: Path) -> None:
    ip = app["spec"]["clusterIP"]
    with local_program(3001, "local-all"):
        process = start_intercept(clusters, "--port", "3001", "--all", state=tmp_path, log=tmp_path / "all.log")
        try:
            poll(lambda: get(ip) == "200 local-all ", timeout=TIMEOUT_S, interval=0.5, what="every request local")
            assert get(ip, {"kubernetes-route-as": "someone"}) == "200 local-all someone"
        finally:
            stop(process)
    assert process.returncode == 0, (tmp_path / "all.log").read_text()
    poll(lambda: is_original(get(ip)), timeout=TIMEOUT_S, interval=0.5, what="the Service back on its pods")
    poll(lambda: not leftovers(clusters), timeout=TIMEOUT_S, interval=0.5, what="no tether objects left")


def test_sigkill_restores_and_a_returning_client_resumes(clusters: Any, app: dict[str, Any], tmp_path: Path) -> None:
    ip = app["spec"]["clusterIP"]
    before = comparable(clusters.kubectl_json("get", "service", SVC, "-n", NS))
    restore_after = 15  # room for the second client to start on a loaded machine
    args = ("--port", "3001", "--route-as", "naison-e4be", "--restore-after", str(restore_after))
    session = "tether-intercept-naison-e4be"
    with local_program(3001, "local-k"):
        process = start_intercept(clusters, *args, state=tmp_path, log=tmp_path / "k.log")
        wait_routed(ip, "naison-e4be", "local-k")
        uid = clusters.kubectl_json("get", "configmap", session, "-n", NS)["metadata"]["uid"]
        process.kill()
        process.wait()
        # Back before the Lease expires: the same session resumes (same name, its token kept
        # here): the same session object (one ended and made again would have another uid).
        again = start_intercept(clusters, *args, state=tmp_path, log=tmp_path / "k2.log")
        try:
            wait_routed(ip, "naison-e4be", "local-k")
            assert "resumed" in (tmp_path / "k2.log").read_text()
            assert clusters.kubectl_json("get", "configmap", session, "-n", NS)["metadata"]["uid"] == uid
        finally:
            again.kill()
            again.wait()
        poll(lambda: is_original(get(ip, {"kubernetes-route-as": "naison-e4be"})) and not leftovers(clusters),
             timeout=restore_after + 10 + 30, interval=0.5, what="the Service restored after the lease expired")
    after = comparable(clusters.kubectl_json("get", "service", SVC, "-n", NS))
    assert after == before


def test_bad_input_is_refused_before_anything_changes(clusters: Any, app: dict[str, Any], tmp_path: Path) -> None:
    before = comparable(clusters.kubectl_json("get", "service", SVC, "-n", NS))
    cases = [
        (("intercept", SVC, "-n", NS, "--port", "3001", "--route-as", "Naison E4BE"), "not usable as a header value"),
        (("intercept", SVC, "-n", NS, "--port", "3001:8080"), "does not expose port 8080"),
        (("intercept", "todos-db", "-n", NS, "--port", "3001"), "has no selector"),
        (("intercept", "nope", "-n", NS, "--port", "3001"), 'service "nope" not found'),
        (("intercept", "deploy/nope", "-n", NS, "--port", "3001"), 'deployment "nope" not found'),
        (("intercept", "deploy/todos-worker", "-n", NS, "--port", "3001"), "no Service in namespace"),
        (("intercept", SVC, "-n", NS, "--port", "x"), "--port"),
    ]
    for args, message in cases:
        result = tether(clusters, *args, state=tmp_path)
        assert result.returncode == 1 and message in result.stderr, (args, result.stderr)
    assert comparable(clusters.kubectl_json("get", "service", SVC, "-n", NS)) == before
    assert not leftovers(clusters)


def test_command_gets_the_pods_environment_and_ends_the_intercept(clusters: Any, app: dict[str, Any],
                                                                   tmp_path: Path) -> None:
    out = tmp_path / "env.txt"
    result = subprocess.run(
        [sys.executable, "-m", "tether", "intercept", f"deploy/{SVC}", "-n", NS, "--port", "3001", "--route-as",
         "cmd-0001",
         *base_args(clusters), "--", "sh", "-c", f'echo "$STATS_MODE" > {out}; exit 3'],
        capture_output=True, text=True, timeout=180, env={**os.environ, "TETHER_HOME": str(tmp_path)})
    assert result.returncode == 3, result.stderr  # the command's own exit code
    assert out.read_text().strip() == "seed"
    assert "intercept cmd-0001 ended" in result.stderr
    assert f"intercepting service {SVC} port 80" in result.stderr
    poll(lambda: not leftovers(clusters), timeout=TIMEOUT_S, interval=0.5, what="no tether objects left")


def test_a_selector_changed_meanwhile_is_reported_not_fought(clusters: Any, app: dict[str, Any],
                                                             tmp_path: Path) -> None:
    ip = app["spec"]["clusterIP"]
    with local_program(3001, "local-d"):
        process = start_intercept(clusters, "--port", "3001", "--route-as", "drift-0001", state=tmp_path,
                                  log=tmp_path / "d.log")
        try:
            wait_routed(ip, "drift-0001", "local-d")
            # A GitOps controller puts the selector back.
            clusters.kubectl("patch", "service", SVC, "-n", NS, "--type", "json", "-p",
                             json.dumps([{"op": "replace", "path": "/spec/selector", "value": {"app": SVC}}]))

            def reported() -> bool:
                events = clusters.kubectl_json("get", "events", "-n", NS)["items"]
                listed = tether(clusters, "bridge", "intercepts", "-n", NS, state=tmp_path).stdout
                return (any(e.get("reason") == "InterceptSelectorChanged" for e in events)
                        and "warning: drift-0001" in listed)

            poll(reported, timeout=TIMEOUT_S, interval=0.5, what="the changed selector reported")
            assert is_original(get(ip, {"kubernetes-route-as": "drift-0001"}))  # not fought back
        finally:
            stop(process)
    assert clusters.kubectl_json("get", "service", SVC, "-n", NS)["spec"]["selector"] == {"app": SVC}
    poll(lambda: not leftovers(clusters), timeout=TIMEOUT_S, interval=0.5, what="no tether objects left")


def test_ingress_subdomain_routes_without_the_header(clusters: Any, app: dict[str, Any], tmp_path: Path) -> None:
    ip = app["spec"]["clusterIP"]
    clusters.kubectl("apply", "-n", NS, "-f", "-", input=manifest(
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "todo"},
         "spec": {"ingressClassName": "nginx", "rules": [{"host": "todo.example.com", "http": {"paths": [
             {"path": "/", "pathType": "Prefix",
              "backend": {"service": {"name": SVC, "port": {"number": 80}}}}]}}]}}))
    try:
        with local_program(3001, "local-i"):
            process = start_intercept(clusters, "--port", "3001", "--route-as", "naison-e4be", "--ingress",
                                      state=tmp_path, log=tmp_path / "i.log")
            try:
                wait_routed(ip, "naison-e4be", "local-i")
                copies = clusters.kubectl_json("get", "ingress", "-n", NS, "-l", "tether.io/bridge-object=ingress")
                rules = [r for i in copies["items"] for r in i["spec"]["rules"]]
                assert [r["host"] for r in rules] == ["naison-e4be.todo.example.com"]
                assert copies["items"][0]["spec"]["ingressClassName"] == "nginx"
                poll(lambda: get(ip, {"Host": "naison-e4be.todo.example.com"}) == "200 local-i ",
                     timeout=TIMEOUT_S, interval=0.5, what="the subdomain host routed here")
                assert is_original(get(ip, {"Host": "todo.example.com"}))
            finally:
                stop(process)
        poll(lambda: not leftovers(clusters) and not clusters.kubectl_json(
            "get", "ingress", "-n", NS, "-l", "tether.io/bridge-object=ingress")["items"],
            timeout=TIMEOUT_S, interval=0.5, what="no tether objects left")
    finally:
        clusters.kubectl("delete", "ingress", "todo", "-n", NS, check=False)


def h2c_bytes(headers: list[tuple[str, str]]) -> bytes:
    import hpack

    block = hpack.Encoder().encode([(":method", "GET"), (":scheme", "http"), (":path", "/"),
                                    (":authority", SVC), *headers])
    settings = (0).to_bytes(3, "big") + bytes([0x4, 0]) + (0).to_bytes(4, "big")
    frame = len(block).to_bytes(3, "big") + bytes([0x1, 0x5]) + (1).to_bytes(4, "big") + block
    return b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings + frame


def h2c_answer(ip: str, headers: list[tuple[str, str]]) -> bytes:
    with socket.create_connection((ip, 80), timeout=15) as raw:
        raw.sendall(h2c_bytes(headers))
        raw.shutdown(socket.SHUT_WR)
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := raw.recv(65536):
                answer += chunk
    return answer


def test_h2c_goes_where_its_first_request_goes(clusters: Any, app: dict[str, Any], tmp_path: Path) -> None:
    ip = app["spec"]["clusterIP"]
    with local_program(3001, "local-h2"):
        process = start_intercept(clusters, "--port", "3001", "--route-as", "h2-0001", state=tmp_path,
                                  log=tmp_path / "h2.log")
        try:
            wait_routed(ip, "h2-0001", "local-h2")
            assert b"the local program: " in h2c_answer(ip, [("kubernetes-route-as", "h2-0001")])
            original = h2c_answer(ip, [])
            assert b"Error response" in original and b"local program" not in original
        finally:
            stop(process)


def test_bridge_reset_restores_a_namespace_at_once(clusters: Any, app: dict[str, Any], tmp_path: Path) -> None:
    ip = app["spec"]["clusterIP"]
    before = comparable(clusters.kubectl_json("get", "service", SVC, "-n", NS))
    with local_program(3001, "local-r"):
        process = start_intercept(clusters, "--port", "3001", "--route-as", "reset-0001", "--restore-after", "600",
                                  state=tmp_path, log=tmp_path / "r.log")
        wait_routed(ip, "reset-0001", "local-r")
        process.kill()
        process.wait()
    result = tether(clusters, "bridge", "reset", "-n", NS, state=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "removed session reset-0001 (stats-api)" in result.stdout
    assert comparable(clusters.kubectl_json("get", "service", SVC, "-n", NS)) == before
    assert is_original(get(ip, {"kubernetes-route-as": "reset-0001"}))
    poll(lambda: not leftovers(clusters), timeout=TIMEOUT_S, interval=0.5, what="no tether objects left")
    assert tether(clusters, "bridge", "reset", "-n", NS, state=tmp_path).stdout.startswith("nothing")


def test_a_command_stops_when_its_intercept_is_ended_elsewhere(clusters: Any, app: dict[str, Any],
                                                                tmp_path: Path) -> None:
    log, started = tmp_path / "cmd.log", tmp_path / "started"
    process = subprocess.Popen(
        [sys.executable, "-m", "tether", "intercept", f"deploy/{SVC}", "-n", NS, "--port", "3001", "--route-as",
         "cmd-0002", *base_args(clusters), "--", "sh", "-c", f"touch {started}; exec sleep 3600"],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env={**os.environ, "TETHER_HOME": str(tmp_path)})
    try:
        poll(started.exists, timeout=TIMEOUT_S, interval=0.5, what="the intercept running its command")
        left = tether(clusters, "leave", "cmd-0002", "-n", NS, state=tmp_path)
        assert left.returncode == 0, left.stderr
        poll(lambda: process.poll() is not None, timeout=TIMEOUT_S, interval=0.5,
             what="the intercept to stop its command: " + log.read_text())
        assert process.returncode == 1
        assert "was ended in the cluster" in log.read_text()
    finally:
        stop(process)
    poll(lambda: not leftovers(clusters), timeout=TIMEOUT_S, interval=0.5, what="no tether objects left")


def ask_across_the_end(clusters: Any, ip: str, route: str, how: str, tmp_path: Path) -> list[str]:
    """Answers to requests with the header, one new connection each, sent in a loop from before
    the intercept ends (`tether leave` or Ctrl-C) until 30 requests after its client exited."""
    process = start_intercept(clusters, "--port", "3001", "--route-as", route, state=tmp_path / "l",
                              log=tmp_path / "l.log")
    answers: list[str] = []
    stop_asking = threading.Event()

    def ask() -> None:
        for _ in range(100_000):  # bounded; ends when told
            if stop_asking.is_set():
                return
            answers.append(get(ip, {"kubernetes-route-as": route}))

    asking = threading.Thread(target=ask, daemon=True)
    try:
        wait_routed(ip, route, "local-l")
        asking.start()
        poll(lambda: len(answers) >= 5, timeout=TIMEOUT_S, interval=0.1, what="requests flowing")
        if how == "tether leave":
            left = tether(clusters, "leave", route, "-n", NS, state=tmp_path / "l")
            assert left.returncode == 0, left.stderr
        else:
            process.send_signal(signal.SIGINT)
        process.wait(timeout=120)
        after = len(answers)
        poll(lambda: len(answers) >= after + 30, timeout=TIMEOUT_S, interval=0.1,
             what="requests after the client ended")
    finally:
        stop_asking.set()
        if asking.is_alive():
            asking.join(timeout=60)
        stop(process)
    return answers


def test_requests_across_leave_never_fail(clusters: Any, app: dict[str, Any], tmp_path: Path) -> None:
    # Another developer keeps the router in place: what is shown is the router's part (the
    # route just left, or its client just gone, answered by the original pods at once), not the
    # Service moving back to its pods when the last intercept ends.
    ip = app["spec"]["clusterIP"]
    route = "leave-0001"
    with local_program(3001, "local-l"), local_program(free_port(), "anchor"):
        anchor = start_intercept(clusters, "--port", "3002", "--route-as", "anchor-0001", state=tmp_path / "anchor",
                                 log=tmp_path / "anchor.log")
        try:
            for how in ("tether leave", "ctrl-c"):
                answers = ask_across_the_end(clusters, ip, route, how, tmp_path)
                failed = [a for a in answers if a != f"200 local-l {route}" and not is_original(a)]
                assert not failed, (how, failed[:5], (tmp_path / "l.log").read_text()[-2000:])
                assert answers[0] == f"200 local-l {route}" and is_original(answers[-1]), how
        finally:
            stop(anchor)
    poll(lambda: not leftovers(clusters), timeout=TIMEOUT_S, interval=0.5, what="no tether objects left")
