"""Benchmark: what N pull members at rest cost the hub (nothing changing anywhere).

    python bench/pull_at_rest.py                  # 50 pull members, update docs/benchmarks.md
    python bench/pull_at_rest.py --members 10 --window 30 --no-write

A host cluster and N member clusters are started as local clusters (`tether local up`, the
members PER_DAEMON to a daemon), `tether hub install`, and `python -m tether hub run` with a tunnel
server for agents (`--tunnel-agent-port 0 --tunnel-frontend-port 0`) as its own process. Each
member registers in pull mode as a user would: `tether token create --print-register-command`
on the hub side, then that `tether register` command with the member's kubeconfig, which starts
the member's agent as its own background process (default period 10 s). Once every Cluster is
Ready, `--templates` ConfigMaps (default 100) are propagated to every member by one Karmada
PropagationPolicy (the agents apply them) and the bench waits until every Work reports Applied,
so that the hub has objects to re-reconcile if it did; then it waits `--settle` seconds (first heartbeats, API discovery) and then measures
over `--window` seconds: the hub's CPU (utime + stime from /proc) as a fraction of one core,
the host API server's CPU, and the writes to the host's store by resource (from its SQLite log):
at rest those should be the Leases only. Everything is on 127.0.0.1; every wait is bounded;
everything started is stopped in `finally` (agents with `tether agent stop`, the hub by PID,
each data dir with `tether local down`).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from propagation import (
    DOC,
    NAMESPACE,
    PER_DAEMON,
    Daemon,
    configmap,
    cpu_s,
    free_cluster_slots,
    gauge,
    machine,
    ok,
    policy,
    start_daemon,
    store_writes,
    tether,
)
from tether.kube import KubeClient

SECTION = "## Pull members at rest"
REGISTER_PARALLEL = 4
SETTLE_S = 30.0
WINDOW_S = 60.0
GOAL_CORE = 0.02
TEMPLATES = 100
PROPAGATE_TIMEOUT_S = 900.0


@dataclass
class Result:
    members: int
    window_s: float
    hub_core: float  # hub CPU seconds / window seconds
    host_core: float
    agents_core: float
    writes: dict[str, int]
    setup_s: dict[str, float] = field(default_factory=dict)
    hub_rss_kb: int = 0
    label: str = ""  # which code was measured, e.g. "before" / "after" a change
    templates: int = 0  # ConfigMaps propagated to every member before the window
    measured: str = ""  # when, and the machine's 1-minute load average then


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text: str = answer.read().decode()
    return text


def measure(members: int, settle_s: float, window_s: float, templates: int) -> Result:
    with tempfile.TemporaryDirectory(prefix="tether-bench-pull-") as tmp:
        root = Path(tmp)
        daemons: list[Daemon] = []
        hub: subprocess.Popen[bytes] | None = None
        agents = root / "agents"
        names = [f"p{i:02d}" for i in range(1, members + 1)]
        setup: dict[str, float] = {}
        try:
            t0 = time.monotonic()
            host = start_daemon(root / "host", ["host"])
            daemons.append(host)
            for start in range(0, members, PER_DAEMON):
                group = names[start:start + PER_DAEMON]
                daemons.append(start_daemon(root / f"members-{start // PER_DAEMON}", group))
            setup["local up"] = time.monotonic() - t0
            kubeconfig = str(host.kubeconfig)
            ok(tether("hub", "install", "--kubeconfig", kubeconfig, "--context", "host"),
               "tether hub install")
            log_path = root / "hub.log"
            with log_path.open("wb") as out:
                hub = subprocess.Popen(
                    [sys.executable, "-m", "tether", "hub", "run", "--kubeconfig", kubeconfig,
                     "--context", "host", "--port", "0", "--tunnel-agent-port", "0",
                     "--tunnel-frontend-port", "0", "--tunnel-bind-address", "127.0.0.1",
                     "--data-dir", str(root / "hub")], stdout=out, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 60
            while "/metrics on http://127.0.0.1:" not in log_path.read_text():
                if hub.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the hub did not start:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.1)
            line = next(x for x in log_path.read_text().splitlines() if "/metrics on" in x)
            port = int(line.rsplit(":", 1)[1].strip())
            t0 = time.monotonic()

            def register(name: str) -> None:
                member = next(d for d in daemons if name in d.names)
                out = ok(tether("token", "create", "--ttl", "1h", "--print-register-command",
                                "--kubeconfig", kubeconfig, "--host-context", "host",
                                "--cluster-name", name), f"tether token create {name}")
                words = out.strip().splitlines()[-1].split()
                ok(tether(*words[1:], "--kubeconfig", str(member.kubeconfig), "--context", name,
                          "--data-dir", str(agents), timeout=180), f"tether register {name}")

            with concurrent.futures.ThreadPoolExecutor(REGISTER_PARALLEL) as pool:
                list(pool.map(register, names))
            setup["token + register"] = time.monotonic() - t0
            t0 = time.monotonic()
            deadline = time.monotonic() + 180
            while gauge(metrics(port), "tether_clusters_ready") < members:
                if hub.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"not every member became Ready:\n{metrics(port)[-800:]}")
                time.sleep(0.5)
            setup["all Ready"] = time.monotonic() - t0
            if templates:
                t0 = time.monotonic()
                asyncio.run(propagate(host, names, templates))
                setup[f"{templates} templates applied everywhere"] = time.monotonic() - t0
            print("setup: " + ", ".join(f"{k} {v:.0f} s" for k, v in setup.items()), flush=True)
            time.sleep(settle_s)
            agent_pids = [int((agents / "agents" / n / "agent.pid").read_text()) for n in names]
            db = host.data_dir / "clusters" / "host" / "state.db"
            rv0, _ = store_writes(db)
            before = (cpu_s(hub.pid), cpu_s(host.pid), sum(cpu_s(p) for p in agent_pids))
            started = time.monotonic()
            time.sleep(window_s)
            elapsed = time.monotonic() - started
            after = (cpu_s(hub.pid), cpu_s(host.pid), sum(cpu_s(p) for p in agent_pids))
            _, writes = store_writes(db, rv0)
            rss = 0
            with contextlib.suppress(OSError):
                for text in Path(f"/proc/{hub.pid}/status").read_text().splitlines():
                    if text.startswith("VmRSS:"):
                        rss = int(text.split()[1])
            return Result(members, elapsed, (after[0] - before[0]) / elapsed,
                          (after[1] - before[1]) / elapsed, (after[2] - before[2]) / elapsed,
                          writes, setup, rss)
        finally:
            for name in names:
                tether("agent", "stop", "--cluster-name", name, "--data-dir", str(agents))
            if hub is not None and hub.poll() is None:
                hub.send_signal(signal.SIGTERM)
                try:
                    hub.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    hub.kill()
                    hub.wait(timeout=10)
            for daemon in daemons:
                tether("local", "down", "--data-dir", str(daemon.data_dir))


async def propagate(host: Daemon, names: list[str], templates: int) -> None:
    """`templates` ConfigMaps on the hub, propagated to every member by one PropagationPolicy;
    returns once every Work reports Applied (bounded by PROPAGATE_TIMEOUT_S)."""
    async with KubeClient.from_kubeconfig(host.kubeconfig, "host") as client:
        await client.create({"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": NAMESPACE}})
        await client.create(policy(names), namespace=NAMESPACE)
        for i in range(templates):
            await client.create(configmap(f"rest-{i:04d}", "rest"), namespace=NAMESPACE)
        want = templates * len(names)
        deadline = time.monotonic() + PROPAGATE_TIMEOUT_S
        while True:
            works = await client.list_objects("work.tether.io/v1alpha1", "Work")
            done = sum(1 for w in works if any(
                c.get("type") == "Applied" and c.get("status") == "True"
                for c in (w.get("status") or {}).get("conditions") or []))
            if done >= want:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {done} of {want} Works applied")
            await asyncio.sleep(2)


def report(result: Result) -> str:
    per_min = {k: v * 60 / result.window_s for k, v in sorted(result.writes.items(),
                                                              key=lambda kv: -kv[1])}
    writes = ", ".join(f"{k} {v:.0f}/min" for k, v in per_min.items()) or "none"
    met = "met" if result.hub_core <= GOAL_CORE else "NOT met"
    label = f"{result.label}: " if result.label else ""
    if result.measured:
        label += f"({result.measured}) "
    placed = (f" ({result.templates} ConfigMaps propagated to each, "
              f"{result.templates * result.members:,} Works)" if result.templates else "")
    return (f"{label}{result.members} pull members at rest{placed}, over {result.window_s:.0f} s: hub "
            f"{100 * result.hub_core:.2f} % of a core (goal <= {100 * GOAL_CORE:.0f} %: {met}), "
            f"RSS {result.hub_rss_kb / 1024:.0f} MB; host API server {100 * result.host_core:.2f} %; "
            f"the {result.members} agents together {100 * result.agents_core:.2f} %; "
            f"host writes: {writes}")


def write_doc(results: list[Result], notes: str) -> None:
    info = machine()
    lines = "\n".join(f"- {report(r)}" for r in results)
    section = f"""{SECTION}

Measured by `bench/pull_at_rest.py` (written {info['date']}): {info['nproc']} CPUs ({info['cpu']}),
{info['implementation']} {info['python']}; when each ran and the 1-minute load average then are in
its line. A host cluster, the members ({PER_DAEMON} per `tether local up` daemon), `tether hub install`,
`python -m tether hub run` with the tunnel server for agents, and per member `tether token create
--print-register-command` + that `tether register` (each agent its own process, 10 s period).
After every Cluster is Ready and a settle time, CPU (utime + stime from /proc) over the window
as a fraction of one core, and every write to the host's store in it.

{lines}

{notes}

    python bench/pull_at_rest.py                      # 50 members; rewrites this section
    python bench/pull_at_rest.py --members 10 --window 30 --no-write
    python bench/pull_at_rest.py --label after --json after.json --no-write
    python bench/pull_at_rest.py --from-json before.json after.json   # write saved results
"""
    old = DOC.read_text()
    start = old.find(SECTION + "\n")
    if start < 0:
        anchor = old.find("\n## ", old.find("## Propagation\n") + 1)
        text = (old[:anchor + 1] + section + "\n" + old[anchor + 1:] if anchor >= 0
                else old.rstrip("\n") + "\n\n" + section)
    else:
        end = old.find("\n## ", start + 1)
        text = old[:start] + section + (old[end:] if end >= 0 else "")
    DOC.write_text(text)
    print(f"wrote {DOC}")


NOTES = """\
"before" is the code before issue 12's change (the parent of the change, run with this bench),
"after" this repository. Before, every agent wrote its Cluster's status every 10 s (5 writes a
second for 50 members), and every Cluster event re-enqueued every template and Federated object
in the urgent lane: 100 templates reconciled ~5 times a second, each over its 50 Works. After:
its agent renews the Lease `tether-system/<cluster>` every period (the only write, ~300 a minute
for 50 members) and writes the Cluster's status only when something in it changed. On the hub,
the renewals arrive through one watch (the health controller's Lease informer) and each health
pass only compares times; the sync controllers and the executor see no Cluster event at all
(and on one, reconcile only what a changed placement view could move). The hub tunnel's agent
credentials and proxy grants follow Clusters and Secrets through informers instead of listing
them every 2 s. What is left on the hub is the Lease watch, the health passes (one per member
per period, no request) and the tunnel's keepalives: a fraction of a percent of a core, whatever
the number of templates. The agents' own cost (probing the member, the Lease write) stays with
the members.

The machine was shared with other work (load average 6-12) while this ran: CPU seconds of each
process are what is measured, not wall time."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--templates", type=int, default=TEMPLATES,
                        help="ConfigMaps propagated to every member before the window (0: none)")
    parser.add_argument("--settle", type=float, default=SETTLE_S)
    parser.add_argument("--window", type=float, default=WINDOW_S)
    parser.add_argument("--json", type=Path, help="also save the result as JSON here")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--label", default="", help="name this result (e.g. before/after)")
    parser.add_argument("--from-json", type=Path, nargs="+",
                        help="no run: write these saved results (in this order) to the doc")
    args = parser.parse_args()
    if args.from_json:
        saved = [Result(**json.loads(p.read_text())) for p in args.from_json]
        for result in saved:
            print(report(result))
        if not args.no_write:
            write_doc(saved, NOTES)
        return
    free = free_cluster_slots()
    if free < args.members + 1:
        sys.exit(f"{args.members + 1} local clusters needed, {free} address ranges free")
    result = measure(args.members, args.settle, args.window, args.templates)
    result.templates = args.templates
    info = machine()
    result.measured = f"{info['date']}, load average {info['load']}"
    result.label = args.label
    print(report(result), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(result.__dict__))
    if not args.no_write:
        write_doc([result], NOTES)


if __name__ == "__main__":
    main()
