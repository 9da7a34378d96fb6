"""The kubelet side of a local cluster, as a kubeadm cluster behaves, through the real kubectl.

- `kube-system` lists the built-in components as pods (coredns, kube-proxy, and the control
  plane's mirror pods), Running and Ready, and `kubectl logs` serves each component's own log.
- As root, a process pod sees its volumes at their `mountPath` (its own mount namespace):
  a `python` pod runs `/opt/port-server.py` from a ConfigMap; ConfigMap updates reach the files.
- Every pod gets its ServiceAccount token, `ca.crt` and `namespace` (the projected
  `kube-api-access-*` volume); the token is bound to the pod; `automountServiceAccountToken:
  false` is honoured.
- A pod of the tether image runs this install of tether and lists pods through its in-cluster
  config, also in rootless mode where the files are found through `TETHER_MOUNT_*`.
- `$(VAR)` in command, args and env values expands to the container's earlier variables.
- Jobs: `parallelism` pods at once, Indexed completion, backoffLimit, activeDeadlineSeconds,
  ttlSecondsAfterFinished, with the conditions Kubernetes 1.37 sets.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_util import Streamed, kubectl_binary, manifest, poll, root_conftest, unique

pytestmark = pytest.mark.e2e

TIMEOUT_S = 60.0
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SA_ENV = "TETHER_MOUNT_VAR_RUN_SECRETS_KUBERNETES_IO_SERVICEACCOUNT"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="volumes at their mountPath need mount namespaces: run as "
                                                    "root (CI runs as root); rootless mode uses TETHER_MOUNT_*")

PORT_SERVER = """\
import http.server, os
GREETING = open("/tmp/tether-e2e-app/greeting.txt").read().strip()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (GREETING + " from " + os.environ["POD_NAME"] + "\\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
print("port-server listening on", os.environ["POD_IP"], flush=True)
http.server.HTTPServer((os.environ["POD_IP"], 8080), Handler).serve_forever()
"""


def pods(clusters: Any, ns: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["get", "pods", "-n", ns, *(["-l", selector] if selector else [])]
    items: list[dict[str, Any]] = clusters.kubectl_json(*args)["items"]
    return items


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return pod.get("status", {}).get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def wait_ready(clusters: Any, ns: str, name: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        pod: dict[str, Any] = clusters.kubectl_json("get", "pod", name, "-n", ns)
        return pod if ready(pod) else None

    found: dict[str, Any] = poll(check, timeout=TIMEOUT_S, interval=0.3, what=f"pod {ns}/{name} Ready")
    return found


def exec_in(clusters: Any, ns: str, pod: str, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result: subprocess.CompletedProcess[str] = clusters.kubectl("exec", "-n", ns, pod, "--", "sh", "-c", script,
                                                                check=check)
    return result


# system pods ---------------------------------------------------------------------------------------


def test_kube_system_lists_the_components(clusters: Any) -> None:
    wanted = {"k8s-app=kube-dns", "k8s-app=kube-proxy", "component=kube-apiserver",
              "component=kube-controller-manager", "component=kube-scheduler"}

    def every_component_ready() -> dict[str, list[dict[str, Any]]] | None:
        found = {w: [p for p in pods(clusters, "kube-system", w) if ready(p)] for w in wanted}
        return found if all(found.values()) else None

    found = poll(every_component_ready, timeout=TIMEOUT_S, interval=0.5, what="every component's pod Ready")
    dns = found["k8s-app=kube-dns"][0]
    assert dns["metadata"]["name"].startswith("coredns-")
    rs_ref = dns["metadata"]["ownerReferences"][0]
    assert rs_ref["kind"] == "ReplicaSet" and rs_ref["name"].startswith("coredns-")
    rs = clusters.kubectl_json("get", "rs", rs_ref["name"], "-n", "kube-system")
    assert rs["metadata"]["ownerReferences"][0]["name"] == "coredns"
    nodes = {n["metadata"]["name"] for n in clusters.kubectl_json("get", "nodes")["items"]}
    proxies = found["k8s-app=kube-proxy"]
    assert {p["spec"]["nodeName"] for p in proxies} == nodes
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet" for p in proxies)
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        mirror = found[f"component={component}"][0]
        meta = mirror["metadata"]
        assert meta["name"] == f"{component}-{mirror['spec']['nodeName']}"
        assert meta["labels"]["tier"] == "control-plane"
        assert "kubernetes.io/config.mirror" in meta["annotations"]
        assert meta["ownerReferences"][0]["kind"] == "Node"
    table = clusters.kubectl("get", "pods", "-n", "kube-system").stdout
    for name in ("coredns-", "kube-proxy-", "kube-apiserver-", "kube-controller-manager-", "kube-scheduler-"):
        assert name in table, table


def test_dns_pod_streams_the_dns_servers_log(clusters: Any) -> None:
    dns = poll(lambda: [p for p in pods(clusters, "kube-system", "k8s-app=kube-dns") if ready(p)],
               timeout=TIMEOUT_S, what="the coredns pod")[0]["metadata"]["name"]
    where = json.loads((clusters.data_dir / "clusters" / clusters.names[0] / "dns.json").read_text())
    log = clusters.kubectl("logs", "-n", "kube-system", dns).stdout
    assert f"cluster.local.:{where['port']}" in log, log
    assert f"on {where['ip']}:{where['port']} (UDP and TCP)" in log, log
    with Streamed(clusters, "logs", "-f", "-n", "kube-system", dns) as followed:
        followed.wait_for_line(lambda line: "plugin/kubernetes" in line, timeout=20)
        assert followed.running()  # following: the log stays open
    api = pods(clusters, "kube-system", "component=kube-apiserver")[0]["metadata"]["name"]
    assert "Serving securely on" in clusters.kubectl("logs", "-n", "kube-system", api).stdout


def test_a_deleted_mirror_pod_comes_back(clusters: Any) -> None:
    before = poll(lambda: pods(clusters, "kube-system", "component=kube-scheduler"), timeout=TIMEOUT_S,
                  what="the scheduler's mirror pod")[0]
    clusters.kubectl("delete", "pod", "-n", "kube-system", before["metadata"]["name"], "--wait=false")

    def recreated() -> list[dict[str, Any]]:
        return [p for p in pods(clusters, "kube-system", "component=kube-scheduler")
                if p["metadata"]["uid"] != before["metadata"]["uid"] and ready(p)]

    after = poll(recreated, timeout=TIMEOUT_S, interval=0.5, what="the mirror pod back")[0]
    assert after["metadata"]["name"] == before["metadata"]["name"]


# volumes at their mount path -----------------------------------------------------------------------


def port_server(ns: str, name: str = "ps", *, image: str = "python:3.12") -> list[dict[str, Any]]:
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "code", "namespace": ns},
              "data": {"port-server.py": PORT_SERVER, "greeting.txt": "hello", "version": "1"}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
           "spec": {"containers": [{
               "name": "main", "image": image, "command": ["python", "/opt/port-server.py"],
               "ports": [{"containerPort": 8080}],
               "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
               "volumeMounts": [{"name": "code", "mountPath": "/opt"},
                                # missing mount points are made on the host: keep them in /tmp
                                {"name": "code", "mountPath": "/tmp/tether-e2e-app/greeting.txt",
                                 "subPath": "greeting.txt"},
                                {"name": "scratch", "mountPath": "/tmp/tether-e2e-app/scratch"}]}],
               "volumes": [{"name": "code", "configMap": {"name": "code"}}, {"name": "scratch", "emptyDir": {}}]}}
    return [config, pod]


@needs_root
def test_python_pod_runs_a_script_from_a_configmap_at_its_mount_path(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(*port_server(ns)))
    wait_ready(clusters, ns, "ps")  # the readiness probe reached the script's server
    answer = clusters.kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/pods/ps:8080/proxy/").stdout
    assert answer == "hello from ps\n"  # the subPath file
    assert not Path("/opt/port-server.py").exists()  # only the pod's mount namespace has it
    # configMap volumes are read-only; emptyDir is writable
    denied = exec_in(clusters, ns, "ps", "echo x > /opt/new", check=False)
    assert denied.returncode != 0 and "Read-only file system" in denied.stderr, denied.stderr
    scratch = "/tmp/tether-e2e-app/scratch"
    assert exec_in(clusters, ns, "ps", f"echo x > {scratch}/f && cat {scratch}/f").stdout == "x\n"
    assert not Path(scratch, "f").exists()
    # an update reaches the directory mount; the subPath file stays as it was, as in Kubernetes
    clusters.kubectl("patch", "configmap", "code", "-n", ns, "--type=merge",
                     "-p", '{"data":{"version":"2","greeting.txt":"bye"}}')
    poll(lambda: exec_in(clusters, ns, "ps", "cat /opt/version").stdout == "2", timeout=TIMEOUT_S,
         interval=0.5, what="the new ConfigMap content in /opt")
    assert exec_in(clusters, ns, "ps", "cat /tmp/tether-e2e-app/greeting.txt").stdout.strip() == "hello"


# ServiceAccount token ------------------------------------------------------------------------------


def shell_pod(ns: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}],
                     "terminationGracePeriodSeconds": 0, **spec}}


def test_pods_get_a_token_bound_to_them(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(shell_pod(ns, "sa")))
    pod = wait_ready(clusters, ns, "sa")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-"))
    assert len(volume["name"]) == len("kube-api-access-") + 5
    sources = volume["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": volume["name"], "readOnly": True, "mountPath": SA_DIR} in mounts
    directory = f"${SA_ENV}" if not IS_ROOT else SA_DIR
    assert exec_in(clusters, ns, "sa", f'cat "{directory}/namespace"').stdout == ns
    ca = exec_in(clusters, ns, "sa", f'cat "{directory}/ca.crt"').stdout
    assert ca == (clusters.data_dir / "clusters" / clusters.names[0] / "pki" / "ca.crt").read_text()
    token = exec_in(clusters, ns, "sa", f'cat "{directory}/token"').stdout
    who = as_token(clusters, token, "auth", "whoami", "-o", "json")
    assert json.loads(who.stdout)["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:default"
    clusters.kubectl("delete", "pod", "sa", "-n", ns, "--wait=true", timeout=TIMEOUT_S)
    gone = as_token(clusters, token, "auth", "whoami")
    assert gone.returncode != 0 and "Unauthorized" in gone.stderr, gone.stderr


def as_token(clusters: Any, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    """kubectl with only this bearer token (the context's client certificate would win)."""
    name = clusters.names[0]
    ca = clusters.data_dir / "clusters" / name / "pki" / "ca.crt"
    return subprocess.run([kubectl_binary(), "--kubeconfig=/dev/null", f"--server={clusters.servers[name]}",
                           f"--certificate-authority={ca}", f"--token={token}", *args],
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def test_automount_false_is_honoured(clusters: Any, ns: str) -> None:
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "quiet", "namespace": ns},
          "automountServiceAccountToken": False}
    clusters.kubectl("create", "-f", "-", input=manifest(
        sa, shell_pod(ns, "off", automountServiceAccountToken=False),
        shell_pod(ns, "by-sa", serviceAccountName="quiet"),
        shell_pod(ns, "pod-wins", serviceAccountName="quiet", automountServiceAccountToken=True)))
    volumes = {name: [v["name"] for v in clusters.kubectl_json("get", "pod", name, "-n", ns)["spec"].get("volumes") or []]
               for name in ("off", "by-sa", "pod-wins")}
    assert volumes["off"] == [] and volumes["by-sa"] == []
    assert [v for v in volumes["pod-wins"] if v.startswith("kube-api-access-")], volumes


# dependent environment variables -----------------------------------------------------------------


def test_command_args_and_env_expand_references_to_the_containers_env(clusters: Any, ns: str) -> None:
    """`$(VAR)` as the kubelet expands it: a downward-API variable in args and in a later env
    value, `$$(X)` a literal, an unknown reference left as written (single-quoted: the shell
    would run `$(...)` as a command)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "refs", "namespace": ns},
           "spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "busybox", "command": ["sh", "-c"],
               "args": ["""echo "args=$(MY_IP) env=$LISTEN" 'literal=$$(MY_IP) unknown=$(NOT_DECLARED)'"""],
               "env": [{"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                       {"name": "LISTEN", "value": "$(MY_IP):$(PORT)"},
                       {"name": "PORT", "value": "8080"}]}]}}
    clusters.kubectl("create", "-f", "-", input=manifest(pod))
    poll(lambda: clusters.kubectl_json("get", "pod", "refs", "-n", ns)["status"].get("phase") == "Succeeded",
         timeout=TIMEOUT_S, interval=0.3, what="the pod to finish")
    ip = clusters.kubectl_json("get", "pod", "refs", "-n", ns)["status"]["podIP"]
    out = clusters.kubectl("logs", "refs", "-n", ns).stdout
    # PORT comes after LISTEN: not yet defined there, so left as written
    assert out.strip() == f"args={ip} env={ip}:$(PORT) literal=$(MY_IP) unknown=$(NOT_DECLARED)", out


# pods of the tether image ----------------------------------------------------------------------------


def whoami_pod(ns: str, empty_dir_at: str = "") -> list[dict[str, Any]]:
    """The tether pod, and what its ServiceAccount needs to list pods (RBAC is enforced);
    `empty_dir_at`: an emptyDir mounted there too."""
    volumes: dict[str, Any] = {}
    if empty_dir_at:
        volumes = {"volumes": [{"name": "scratch", "emptyDir": {}}]}
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": rbac, "kind": "Role", "metadata": {"name": "pod-reader", "namespace": ns},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
        {"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "pod-reader", "namespace": ns},
         "roleRef": {"apiGroup": rbac, "kind": "Role", "name": "pod-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}]},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "who", "namespace": ns},
         "spec": {"restartPolicy": "Never", **volumes, "containers": [{
             "name": "tether", "image": "ghcr.io/tether-dev/tether:0.1.0",
             "args": ["whoami", "--in-cluster", "--pods"],
             **({"volumeMounts": [{"name": "scratch", "mountPath": empty_dir_at}]} if empty_dir_at else {})}]}},
    ]


def run_whoami(clusters: Any, ns: str, empty_dir_at: str = "") -> str:
    clusters.kubectl("create", "-f", "-", input=manifest(*whoami_pod(ns, empty_dir_at)))

    def finished() -> str | None:
        phase = clusters.kubectl_json("get", "pod", "who", "-n", ns)["status"].get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = poll(finished, timeout=TIMEOUT_S, interval=0.5, what="the tether pod to finish")
    out: str = clusters.kubectl("logs", "who", "-n", ns).stdout
    assert phase == "Succeeded", out
    return out


def test_tether_image_pod_uses_its_in_cluster_config(clusters: Any, ns: str) -> None:
    out = run_whoami(clusters, ns)
    assert f"user: system:serviceaccount:{ns}:default" in out and "pod: who" in out, out
    assert f"namespace: {ns}" in out


@needs_root
def test_tether_image_pod_runs_when_a_volume_covers_the_install(clusters: Any, ns: str) -> None:
    """The deploy manifests mount an emptyDir at /tmp (read-only root filesystem); a checkout
    under /tmp (a CI clone) must still run as the tether image: the install is bound back."""
    import tether

    install_parent = str(Path(tether.__file__).resolve().parents[2].parent)  # holds src/ and .venv/
    out = run_whoami(clusters, ns, empty_dir_at=install_parent)
    assert f"user: system:serviceaccount:{ns}:default" in out and "pod: who" in out, out


@pytest.fixture(scope="module")
def rootless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A cluster whose kubelet mounts nothing (as without root), even when the tests run as root."""
    conftest = root_conftest()
    data_dir = tmp_path_factory.mktemp("rootless")
    saved = os.environ.get("TETHER_LOCAL_POD_MOUNTS")
    os.environ["TETHER_LOCAL_POD_MOUNTS"] = "env"  # inherited by the daemon `tether local up` starts
    try:
        started = conftest.start_clusters(data_dir, ["solo"], tmp_path_factory.mktemp("kubecache-rootless"))
    finally:
        if saved is None:
            os.environ.pop("TETHER_LOCAL_POD_MOUNTS", None)
        else:
            os.environ["TETHER_LOCAL_POD_MOUNTS"] = saved
    try:
        yield started
    finally:
        conftest.tether("local", "down", "--data-dir", str(data_dir))


def test_tether_image_pod_finds_its_token_in_rootless_mode(rootless: Any) -> None:
    ns = unique("rootless")
    rootless.kubectl("create", "namespace", ns)
    out = run_whoami(rootless, ns)
    assert f"user: system:serviceaccount:{ns}:default" in out and "pod: who" in out, out
    events = rootless.kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name=who",
                              "-o", "json")
    said = [e["message"] for e in json.loads(events.stdout)["items"] if e["reason"] == "VolumesNotMounted"]
    assert said and SA_ENV in said[0], said
    assert "VolumesNotMounted" in rootless.kubectl("describe", "pod", "who", "-n", ns).stdout


# Jobs ----------------------------------------------------------------------------------------------


def job(ns: str, name: str, script: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {**spec, "template": {"spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script]}]}}}}


def job_status(clusters: Any, ns: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = clusters.kubectl_json("get", "job", name, "-n", ns).get("status") or {}
    return status


def true_conditions(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c.get("reason", "") for c in status.get("conditions") or [] if c["status"] == "True"}


def test_job_runs_parallelism_pods_at_once(clusters: Any, ns: str) -> None:
    # parallelism without completions: a work queue, two workers at once
    clusters.kubectl("create", "-f", "-", input=manifest(job(ns, "pair", "sleep 3600", parallelism=2)))
    spec = clusters.kubectl_json("get", "job", "pair", "-n", ns)["spec"]
    assert "completions" not in spec and spec["parallelism"] == 2

    def both_running() -> list[dict[str, Any]]:
        running = [p for p in pods(clusters, ns, "job-name=pair") if p["status"].get("phase") == "Running"]
        return running if len(running) == 2 else []

    poll(both_running, timeout=TIMEOUT_S, interval=0.3, what="two pods of the job running at once")
    poll(lambda: job_status(clusters, ns, "pair").get("active") == 2, timeout=TIMEOUT_S, what="status.active 2")
    clusters.kubectl("delete", "job", "pair", "-n", ns, "--wait=false")


def test_indexed_job(clusters: Any, ns: str) -> None:
    body = job(ns, "idx", 'echo "index=$JOB_COMPLETION_INDEX host=$HOSTNAME"', completions=3, parallelism=3,
               completionMode="Indexed")
    clusters.kubectl("create", "-f", "-", input=manifest(body))
    clusters.kubectl("wait", "--for=condition=complete", "job/idx", "-n", ns, "--timeout=60s", timeout=90)
    status = job_status(clusters, ns, "idx")
    assert status["completedIndexes"] == "0-2" and status["succeeded"] == 3
    assert set(true_conditions(status)) == {"SuccessCriteriaMet", "Complete"}
    seen = set()
    for pod in pods(clusters, ns, "job-name=idx"):
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == index
        assert pod["metadata"]["name"].startswith(f"idx-{index}-") and pod["spec"]["hostname"] == f"idx-{index}"
        log = clusters.kubectl("logs", pod["metadata"]["name"], "-n", ns).stdout
        assert log == f"index={index} host=idx-{index}\n"
        seen.add(index)
    assert seen == {"0", "1", "2"}


def test_job_backoff_limit(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(job(ns, "flaky", "exit 1", backoffLimit=1)))
    clusters.kubectl("wait", "--for=condition=failed", "job/flaky", "-n", ns, "--timeout=60s", timeout=90)
    status = job_status(clusters, ns, "flaky")
    assert status["failed"] == 2 and "active" not in status
    assert true_conditions(status) == {"FailureTarget": "BackoffLimitExceeded", "Failed": "BackoffLimitExceeded"}
    assert len(pods(clusters, ns, "job-name=flaky")) == 2
    events = clusters.kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name=flaky").stdout
    assert "BackoffLimitExceeded" in events


def test_job_deadline_and_ttl(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(
        job(ns, "slow", "sleep 3600", activeDeadlineSeconds=2),
        job(ns, "brief", "true", ttlSecondsAfterFinished=1)))
    clusters.kubectl("wait", "--for=condition=failed", "job/slow", "-n", ns, "--timeout=60s", timeout=90)
    status = job_status(clusters, ns, "slow")
    assert true_conditions(status)["Failed"] == "DeadlineExceeded" and "active" not in status
    poll(lambda: not [p for p in pods(clusters, ns, "job-name=slow") if p["status"].get("phase") == "Running"],
         timeout=TIMEOUT_S, what="the slow job's pod gone")
    # the finished Job goes after its TTL, and its pods with it
    poll(lambda: clusters.kubectl("get", "job", "brief", "-n", ns, check=False).returncode != 0,
         timeout=TIMEOUT_S, interval=0.5, what="the job deleted after ttlSecondsAfterFinished")
    poll(lambda: not pods(clusters, ns, "job-name=brief"), timeout=TIMEOUT_S, what="its pods deleted")
