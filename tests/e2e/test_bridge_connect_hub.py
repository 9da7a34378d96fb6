"""`tether connect -C NAME`: a Pull member behind the hub, reached through the hub's cluster proxy.

`host` (the hub, running `tether hub run` with its tunnel server and cluster proxy) and `member1`
(registered in Pull mode with `tether token create` / `tether register`, so the hub reaches its
API only through the agent's tunnel) run in separate data dirs. `tether connect -C member1` reads
member1's Services through the hub (`tether kubeconfig member1`'s path) and maps them; `quit`
removes the session. A session started while the member's agent is away (its tunnel not up, as
right after `tether register`) waits for it instead of ending at the hub's first 503.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e_util import Collected, poll
from test_bridge_connect import AVAILABLE, answers, echo_app, hosts_names

pytestmark = pytest.mark.e2e

NAME = "member1"
TIMEOUT_S = 90.0


def tether(*args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@dataclass(frozen=True)
class Hub:
    kubeconfig: Path
    member_kubeconfig: Path
    agents_dir: Path


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    main_dir = tmp_path_factory.mktemp("bridge-hub")
    member_dir = tmp_path_factory.mktemp("bridge-member")
    agents_dir = tmp_path_factory.mktemp("bridge-agents")
    tether("local", "up", "--data-dir", str(main_dir), "--name", "host")
    process: subprocess.Popen[bytes] | None = None
    log = main_dir / "hub.log"
    try:
        tether("local", "up", "--data-dir", str(member_dir), "--name", NAME)
        kubeconfig = main_dir / "kubeconfig"
        tether("hub", "install", "--kubeconfig", str(kubeconfig), "--context", "host")
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "tether", "hub", "run", "--kubeconfig", str(kubeconfig), "--context", "host",
                 "--port", "0", "--health-port", "0", "--proxy-port", "0", "--tunnel-agent-port", "0",
                 "--tunnel-frontend-port", "0", "--tunnel-bind-address", "127.0.0.1",
                 "--data-dir", str(main_dir), "--health-period", "0.5", "-v"], stdout=out, stderr=subprocess.STDOUT)
        poll(lambda: "tunnel server: agents at" in log.read_text() and "cluster proxy on" in log.read_text(),
             timeout=TIMEOUT_S, what="the hub's tunnel and proxy")
        command = tether("token", "create", "--ttl", "1h", "--print-register-command", "--kubeconfig",
                         str(kubeconfig), "--host-context", "host", "--cluster-name", NAME).strip().splitlines()[-1]
        words = command.split()
        tether(*words[1:], "--kubeconfig", str(member_dir / "kubeconfig"), "--context", NAME,
               "--data-dir", str(agents_dir), "--period", "0.5")
        yield Hub(kubeconfig, member_dir / "kubeconfig", agents_dir)
    finally:
        subprocess.run([sys.executable, "-m", "tether", "agent", "stop", "--cluster-name", NAME, "--data-dir",
                        str(agents_dir)], capture_output=True, timeout=60)
        if process is not None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        for data_dir in (member_dir, main_dir):
            subprocess.run([sys.executable, "-m", "tether", "local", "down", "--data-dir", str(data_dir)],
                           capture_output=True, timeout=120)


def member_kubectl(hub: Hub, *args: str, stdin: str | None = None) -> None:
    from tether.cli.proxy import kubectl_path

    subprocess.run([kubectl_path(), "--kubeconfig", str(hub.member_kubeconfig), "--context", NAME, *args],
                   input=stdin, text=True, check=True, capture_output=True, timeout=120)


def test_pull_member_through_the_hub(hub: Hub, tmp_path: Path) -> None:
    hub_kubeconfig = hub.kubeconfig

    def kubectl(*args: str, stdin: str | None = None) -> None:
        member_kubectl(hub, *args, stdin=stdin)

    kubectl("create", "namespace", "shop")
    kubectl("apply", "-f", "-", stdin=echo_app("shop", {"todos-db": 27017, "frontend": 80}))
    kubectl("rollout", "status", "-n", "shop", "deploy/echo", "--timeout=90s")
    env = {**os.environ, "TETHER_HOME": str(tmp_path / "state")}
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    session = Collected([sys.executable, "-m", "tether", "connect", "-C", NAME, "--kubeconfig", str(hub_kubeconfig),
                         "--context", "host", "-n", "shop", "--hosts-file", str(hosts)],
                        env=env, merge_stderr=True)
    try:
        def mapped() -> dict[str, tuple[str, int]]:
            return {m.group(1): (m.group(2), int(m.group(3))) for line in session.snapshot()
                    if (m := AVAILABLE.search(line))}

        poll(lambda: len(mapped()) == 2, timeout=TIMEOUT_S,
             what="member1's Services announced\n" + "\n".join(session.snapshot()))
        assert mapped() == {"frontend": ("127.1.1.1", 80), "todos-db": ("127.1.1.2", 27017)}
        # the hosts file is written a moment after the names are announced
        poll(lambda: "todos-db" in (names := hosts_names(hosts)) and answers(names["todos-db"], 27017),
             timeout=TIMEOUT_S, what="todos-db answers")
        status = tether("bridge", "status", env=env)
        assert re.search(rf"cluster {NAME}: namespaces shop", status), status
        tether("quit", env=env)
        assert session.proc.wait(timeout=TIMEOUT_S) == 0
    finally:
        session.stop()
    assert hosts.read_text() == "127.0.0.1 localhost\n"


def test_a_session_waits_for_the_members_tunnel(hub: Hub, tmp_path: Path) -> None:
    member_kubectl(hub, "create", "namespace", "orders")
    member_kubectl(hub, "apply", "-f", "-", stdin=echo_app("orders", {"ledger": 5432}))
    agent = ["--cluster-name", NAME, "--data-dir", str(hub.agents_dir)]
    assert "stopped" in tether("agent", "stop", *agent)
    env = {**os.environ, "TETHER_HOME": str(tmp_path / "state")}
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    session = Collected([sys.executable, "-m", "tether", "connect", "-C", NAME, "--kubeconfig", str(hub.kubeconfig),
                         "--context", "host", "-n", "orders", "--hosts-file", str(hosts)], env=env, merge_stderr=True)
    started = False
    try:
        # the hub has no tunnel to member1 now: the session says so and waits (it ended here before)
        session.wait_for_line(lambda line: f"waiting for {NAME} through the hub" in line, timeout=TIMEOUT_S)
        tether("agent", "start", *agent)
        started = True
        session.wait_for_line(lambda line: bool(AVAILABLE.search(line)) and "ledger" in line, timeout=TIMEOUT_S)
        tether("quit", env=env)
        assert session.proc.wait(timeout=TIMEOUT_S) == 0
    finally:
        session.stop()
        if not started:
            tether("agent", "start", *agent)
