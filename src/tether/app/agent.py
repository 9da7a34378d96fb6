"""`tether agent run|stop|manifest` and `tether register`'s process side.

An agent's files live in `<data-dir>/agents/<cluster>/` (default data dir
`~/.local/share/tether`): `agent.json` (hub address, tunnel address, member kubeconfig/context;
no secrets), `token` (the agent's hub ServiceAccount token, mode 0600), `hub-ca.crt`,
`tunnel-ca.crt`, `agent.log`, `agent.pid`. `tether register` writes them and starts
`python -m tether agent run --cluster-name NAME` in the background; `tether agent stop` sends
SIGTERM to the recorded pid (SIGKILL after `stop_s`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from tether import version
from tether.app.pullagent import AgentSettings, PullAgent
from tether.app.signals import run_until_signal
from tether.kube import ClusterCredentials, KubeClient
from tether.net import daemon

log = logging.getLogger(__name__)

SHUTDOWN_S = 5.0
STOP_S = 10.0
IN_CLUSTER_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
IMAGE = version.IMAGE  # a release tag, never latest


@dataclass(frozen=True)
class AgentFiles:
    cluster: str
    hub: str
    member_kubeconfig: str = ""
    member_context: str = ""
    member_in_cluster: bool = False
    tunnel_address: str = ""
    tunnel_server_name: str = ""
    period_s: float = 10.0


def default_data_dir() -> Path:
    return daemon.state_home()


def agent_dir(data_dir: Path, cluster: str) -> Path:
    return data_dir / "agents" / cluster


def write_files(directory: Path, files: AgentFiles, *, token: str, hub_ca: bytes,
                tunnel_ca: bytes) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    token_path = directory / "token"
    token_path.touch(0o600)
    token_path.chmod(0o600)
    token_path.write_text(token)
    (directory / "hub-ca.crt").write_bytes(hub_ca)
    if tunnel_ca:
        (directory / "tunnel-ca.crt").write_bytes(tunnel_ca)
    (directory / "agent.json").write_text(json.dumps(asdict(files), indent=2) + "\n")


def read_files(directory: Path) -> AgentFiles:
    raw = json.loads((directory / "agent.json").read_text())
    return AgentFiles(**raw)


# the process ----------------------------------------------------------------------------------


def _member_client(files: AgentFiles) -> KubeClient:
    if files.member_in_cluster:
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        return KubeClient(ClusterCredentials.from_token(
            server=f"https://{host}:{port}", token=(IN_CLUSTER_DIR / "token").read_text(),
            ca_bundle=(IN_CLUSTER_DIR / "ca.crt").read_bytes(), name="member"))
    return KubeClient.from_kubeconfig(Path(files.member_kubeconfig) if files.member_kubeconfig
                                      else None, files.member_context or None)


async def run_agent(directory: Path, files: AgentFiles, *,
                    announce: Callable[[str], None] = print) -> int:
    """Run until SIGTERM/SIGINT; shutdown bounded by SHUTDOWN_S."""
    token_path = directory / "token"
    hub_credentials = ClusterCredentials.from_token(
        server=files.hub, token=token_path.read_text(),
        ca_bundle=(directory / "hub-ca.crt").read_bytes(), name="hub")
    tunnel_ca = directory / "tunnel-ca.crt"
    settings = AgentSettings(
        cluster=files.cluster, period_s=files.period_s, tunnel_address=files.tunnel_address,
        tunnel_ca=str(tunnel_ca) if tunnel_ca.exists() else "",
        tunnel_server_name=files.tunnel_server_name, token_path=str(token_path),
        tunnel_insecure=bool(files.tunnel_address) and not tunnel_ca.exists())
    async with KubeClient(hub_credentials) as hub, _member_client(files) as member:
        agent = PullAgent(hub, member, settings)
        announce(f"agent for cluster {files.cluster} running: hub {files.hub}, member "
                 f"{member.credentials.server}, tunnel {files.tunnel_address or 'none'}")
        await run_until_signal(agent.run(), shutdown_s=SHUTDOWN_S)
    return 0


# background process management -----------------------------------------------------------------


def start_background(directory: Path, cluster: str, data_dir: Path, *,
                     verbose: bool = True, ready_wait_s: float = 1.0) -> int:
    """Start `python -m tether agent run` detached; logs to agent.log, pid to agent.pid."""
    stop_background(directory)
    log_path = directory / "agent.log"
    args = [sys.executable, "-m", "tether", "agent", "run", "--cluster-name", cluster,
            "--data-dir", str(data_dir)]
    if verbose:
        args.append("--verbose")
    process = daemon.spawn(args, log_path)
    (directory / "agent.pid").write_text(f"{process.pid}\n")
    deadline = time.monotonic() + ready_wait_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the agent exited at once (code {process.returncode}); "
                               f"see {log_path}")
        time.sleep(0.1)
    return process.pid


def _is_our_agent(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc: trust the pid file
    return b"agent" in cmdline and b"run" in cmdline


def stop_background(directory: Path, *, stop_s: float = STOP_S) -> int | None:
    """SIGTERM the recorded agent (SIGKILL after `stop_s`); the pid stopped, or None."""
    pid_file = directory / "agent.pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    running = daemon.alive(pid) and _is_our_agent(pid) and daemon.stop(pid, stop_s=stop_s)
    pid_file.unlink(missing_ok=True)
    return pid if running else None


# manifests for real clusters ------------------------------------------------------------------


def manifest(files: AgentFiles, *, token: str, hub_ca: bytes, tunnel_ca: bytes,
             image: str = IMAGE, namespace: str = "tether-system") -> str:
    """Namespace, ServiceAccount (+ ClusterRole/Binding: what the agent's Work executor and
    status reports need, no impersonation, no RBAC escalation), Secret and Deployment for the
    agent: `deploy/agent` with this registration's values."""
    from tether.app.deploy import AgentValues, render_agent, to_yaml

    config = asdict(files)
    config.update(member_in_cluster=True, member_kubeconfig="", member_context="")
    secret_data = {"token": token, "hub-ca.crt": hub_ca.decode(),
                   "agent.json": json.dumps(config)}
    if tunnel_ca:
        secret_data["tunnel-ca.crt"] = tunnel_ca.decode()
    return to_yaml(render_agent(AgentValues(cluster=files.cluster, files=secret_data, image=image,
                                            namespace=namespace)))
