"""The WireGuard mesh's data path and convergence, on two `--netns` local clusters (root).

Pod-to-pod iperf3 (TCP, one stream, 10 s) from a pod address of cluster a's node to one of
cluster b's node, in one run (medians of --rounds interleaved runs), over:

- mesh:  `tether mesh local` (wireguard-go or kernel WireGuard, through the node underlay:
         node eth0 -> a's router -> ul link -> b's router -> node eth0);
- bare:  a wireguard-go tunnel the bench sets up itself between the same two node namespaces
         over the same underlay path (its own keys, port 51850, addresses 10.252.0.1/2);
- veth:  a plain routed veth pair straight between the two node namespaces (10.251.0.1/2).

Each unshaped and with a 1 Gbit/s tbf on the sending side's underlay egress (the ul link in a's
router for mesh and bare, the veth in a's node for veth). CPU per GB is the whole machine's busy
CPU time (/proc/stat) over the run divided by the bytes moved: an upper bound when the machine
is shared. Then the mesh's convergence: from `kubectl create node` in b to a's node having the new
node's podCIDR as a peer's AllowedIPs (median of 5).

    sudo .venv/bin/python bench/mesh.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

WAIT_S = 90.0


def run(*argv: str, check: bool = True, input: str | None = None) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=300, input=input)
    if check and result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: {result.stdout}{result.stderr}")
    return result.stdout


def wait(check: object, what: str) -> object:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = check()  # type: ignore[operator]
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def keypair() -> tuple[str, str]:
    key = X25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(private).decode(), base64.b64encode(public).decode()


def busy_jiffies() -> int:
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # minus idle and iowait


def iperf(client_ns: str, server_ns: str, server_ip: str, bind_ip: str, seconds: int) -> tuple[float, float]:
    """(Gbit/s received, busy CPU seconds per GB)."""
    server = subprocess.Popen(["ip", "netns", "exec", server_ns, "iperf3", "-s", "-1", "-B", server_ip],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        before = busy_jiffies()
        out = run("ip", "netns", "exec", client_ns, "iperf3", "-c", server_ip, "-B", bind_ip, "-t", str(seconds),
                  "-J")
        cpu_s = (busy_jiffies() - before) / os.sysconf("SC_CLK_TCK")
    finally:
        server.wait(timeout=30)
    end = json.loads(out)["end"]["sum_received"]
    gbytes = end["bytes"] / 1e9
    return end["bits_per_second"] / 1e9, cpu_s / gbytes if gbytes else float("nan")


def shape(namespace: str, device: str, on: bool) -> None:
    if on:
        run("ip", "netns", "exec", namespace, "tc", "qdisc", "replace", "dev", device, "root", "tbf", "rate", "1gbit",
            "burst", "256k", "latency", "20ms")
    else:
        run("ip", "netns", "exec", namespace, "tc", "qdisc", "del", "dev", device, "root", check=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="runs per path (the median is reported)")
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("iperf3") is None or shutil.which("wg") is None:
        raise SystemExit("needs root, iperf3 and wireguard-tools (and wireguard-go or the kernel module)")
    tether = [sys.executable, "-m", "tether"]
    data = Path(tempfile.mkdtemp(prefix="bench-mesh-"))
    run(*tether, "local", "up", "--netns", "--data-dir", str(data), "--name", "a", "--name", "b", "--nodes", "1")
    mesh = None
    try:
        index = {n: json.loads((data / "clusters" / n / "network.json").read_text())["index"] for n in ("a", "b")}
        na, nb = f"tether-{index['a']}-n0", f"tether-{index['b']}-n0"
        ra = f"tether-{index['a']}"
        pod_a, pod_b = f"10.{16 + index['a']}.1.1", f"10.{16 + index['b']}.1.1"  # the nodes' pod-range addresses
        node_a, node_b = f"10.{128 + index['a']}.0.2", f"10.{128 + index['b']}.0.2"
        ul = f"ul-{index['b']}"
        mesh = subprocess.Popen([*tether, "mesh", "local", "--data-dir", str(data), "--clusters", "a,b"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait(lambda: "latest handshake" in run("ip", "netns", "exec", na, "wg", "show", check=False) and
             "latest handshake" in run("wg", "show", check=False), "the mesh's handshake")
        # the bench's own bare tunnel over the same underlay, and a plain veth
        (pa, ka), (pb, kb) = keypair(), keypair()
        for ns, dev, private, peer, addr, endpoint in (
                (na, "wgbench-a", pa, kb, "10.252.0.1/24", f"{node_b}:51850"),
                (nb, "wgbench-b", pb, ka, "10.252.0.2/24", f"{node_a}:51850")):
            if Path("/sys/module/wireguard").exists():
                run("ip", "-n", ns, "link", "add", dev, "type", "wireguard")
            else:
                run("ip", "netns", "exec", ns, "wireguard-go", dev)
            run("wg", "set", dev, "private-key", "/dev/stdin", "listen-port", "51850", "peer", peer, "endpoint",
                endpoint, "allowed-ips", addr.split("/")[0].rsplit(".", 1)[0] + ".0/24", input=private + "\n")
            run("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            run("ip", "-n", ns, "link", "set", dev, "mtu", "1420", "up")
        run("ip", "-n", na, "link", "add", "vbench-a", "type", "veth", "peer", "name", "vbench-b", "netns", nb)
        run("ip", "-n", na, "addr", "add", "10.251.0.1/24", "dev", "vbench-a")
        run("ip", "-n", nb, "addr", "add", "10.251.0.2/24", "dev", "vbench-b")
        run("ip", "-n", na, "link", "set", "vbench-a", "up")
        run("ip", "-n", nb, "link", "set", "vbench-b", "up")
        paths = {"mesh": (pod_b, pod_a, ra, ul), "bare wireguard-go": ("10.252.0.2", "10.252.0.1", ra, ul),
                 "veth": ("10.251.0.2", "10.251.0.1", na, "vbench-a")}
        rows = []
        for shaped in (False, True):
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
            for _ in range(args.rounds):  # interleaved, so a busy moment does not hit one path only
                for name, (server_ip, bind_ip, shape_ns, shape_dev) in paths.items():
                    shape(shape_ns, shape_dev, shaped)
                    try:
                        runs[name].append(iperf(na, nb, server_ip, bind_ip, args.seconds))
                    finally:
                        shape(shape_ns, shape_dev, False)
            for name, results in runs.items():
                rows.append((shaped, name, statistics.median(g for g, _ in results),
                             statistics.median(c for _, c in results)))
        print("| underlay | path | Gbit/s | busy CPU s/GB |\n|---|---|---|---|")
        for shaped, name, gbps, cpu in rows:
            print(f"| {'1 Gbit/s tbf' if shaped else 'unshaped'} | {name} | {gbps:.2f} | {cpu:.2f} |")
        for shaped in (False, True):
            mesh_g = next(g for s, n, g, _ in rows if s == shaped and n == "mesh")
            bare_g = next(g for s, n, g, _ in rows if s == shaped and n == "bare wireguard-go")
            print(f"mesh / bare ({'shaped' if shaped else 'unshaped'}): {mesh_g / bare_g:.2f}")
        # convergence: a node joins b; a's node peers it
        env = dict(os.environ, KUBECONFIG=str(data / "kubeconfig"))
        times = []
        for i in range(5):
            name = f"b-join-{i}"
            start = time.monotonic()
            subprocess.run(["kubectl", "--context", "b", "create", "-f", "-"], env=env, check=True,
                           capture_output=True, text=True,
                           input=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))

            def peered(node: str = name) -> bool:
                cidr = subprocess.run(["kubectl", "--context", "b", "get", "node", node, "-o",
                                       "jsonpath={.spec.podCIDR}"], env=env, capture_output=True, text=True).stdout
                return bool(cidr) and cidr in run("ip", "netns", "exec", na, "wg", "show", "all", "allowed-ips")

            wait(peered, f"{name} peered")
            times.append(time.monotonic() - start)
            subprocess.run(["kubectl", "--context", "b", "delete", "node", name], env=env, check=True,
                           capture_output=True)
        print(f"convergence (node joins b -> peered by a): median {statistics.median(times):.2f} s, "
              f"max {max(times):.2f} s")
    finally:
        if mesh is not None:
            mesh.terminate()
            mesh.wait(timeout=30)
        subprocess.run([*tether, "mesh", "local", "--data-dir", str(data), "--clusters", "a,b", "--cleanup"],
                       capture_output=True)
        for ns, dev in ((locals().get("na"), "wgbench-a"), (locals().get("nb"), "wgbench-b"),
                        (locals().get("na"), "vbench-a")):
            if ns:
                subprocess.run(["ip", "-n", str(ns), "link", "del", dev], capture_output=True)
        run(*tether, "local", "down", "--data-dir", str(data), check=False)


if __name__ == "__main__":
    main()
