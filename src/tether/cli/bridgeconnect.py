"""`tether connect`, `tether quit`, `tether bridge status`: the cluster's Services on this machine."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from tether.app import bridgeconnect as session_app
from tether.bridge import hostsfile, sessionstate
from tether.bridge.channel import BridgeError
from tether.cli.bridge import Context, Kubeconfig, Namespace, bridge_app  # `tether bridge ...`
from tether.cli.options import DataDir, state_root
from tether.kube import KubeError
from tether.kube.config import KubeconfigError
from tether.net import daemon

Opt = typer.Option
DETACH_WAIT_S = 120.0
STOP_WAIT_S = 20.0
INTERCEPTS_WAIT_S = 5.0


def register(app: typer.Typer) -> None:
    app.command(name="connect")(connect)
    app.command(name="quit")(quit_command)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def connect(
    context: Annotated[list[str] | None, Opt("--context", help="A cluster by kubeconfig context (repeatable; "
                                             "default: the current context); with -C, the hub")] = None,
    cluster: Annotated[list[str] | None, Opt("--cluster", "-C", help="A member cluster through the hub's "
                                             "cluster proxy, as `tether kubeconfig NAME` (repeatable)")] = None,
    hub_context: Annotated[str | None, Opt("--hub-context", hidden=True)] = None,
    kubeconfig: Annotated[Path | None, Opt("--kubeconfig", help="Kubeconfig file")] = None,
    namespace: Annotated[list[str] | None, Opt("--namespace", "-n", help="Map this namespace's Services "
                                               "(repeatable; default: the context's namespace)")] = None,
    hosts_file: Annotated[Path | None, Opt("--hosts-file", help="Write the names into this hosts file "
                                           "(default: /etc/hosts as root, none otherwise)")] = None,
    no_hosts: Annotated[bool, Opt("--no-hosts", help="Do not write a hosts file")] = False,
    dns: Annotated[bool | None, Opt("--dns/--no-dns", help="Serve the names by DNS on a loopback address "
                                    "(default: when no hosts file is written)")] = None,
    dns_address: Annotated[str, Opt("--dns-address", help="Address of that DNS server")] = "127.1.0.53",
    dns_port: Annotated[int, Opt("--dns-port", help="Its port (53 taken or not allowed: a free one)")] = 53,
    env_only: Annotated[bool, Opt("--env-only", help="Only addresses for `tether env`: no names at all")] = False,
    direct: Annotated[bool, Opt("--direct", help="Dial cluster addresses from this machine instead of "
                                "through the bridge agent (they must be reachable here; no cluster objects)")] = False,
    use_routes: Annotated[bool, Opt("--routes", help="Root on Linux: the cluster's pod and Service "
                                    "addresses reachable here (nftables redirect to a transparent proxy)")] = False,
    detach: Annotated[bool, Opt("--detach", "-d", help="Run in the background; `tether quit` ends it")] = False,
    data_dir: DataDir = None,
) -> None:
    """Make every Service of the namespaces reachable on a local address with its own port.

    Each Service gets a 127.1.x.y address (from 127.1.1.1, as Bridge to Kubernetes does) and the
    names svc, svc.ns, svc.ns.svc and svc.ns.svc.cluster.local (svc.ns.CLUSTER with several
    clusters), kept current while Services come and go. Runs until Ctrl-C, SIGTERM or `tether quit`.
    """
    root = state_root(data_dir)
    contexts = list(context or ())
    if cluster and not hub_context:
        if len(contexts) > 1:
            raise _fail("with -C, --context names the hub: give it once")
        hub_context = contexts.pop() if contexts else None
    hosts = None if (no_hosts or env_only) else (hosts_file or (hostsfile.DEFAULT_HOSTS if _is_root() else None))
    serve_dns = (not env_only) and (dns if dns is not None else hosts is None)
    if detach:
        _detach(root)
        return
    request = session_app.ConnectRequest(
        contexts=tuple(contexts), members=tuple(cluster or ()), hub_context=hub_context,
        kubeconfig=kubeconfig, namespaces=tuple(namespace or ()), hosts_file=hosts, dns=serve_dns,
        dns_address=dns_address, dns_port=dns_port, env_only=env_only, direct=direct, routes=use_routes,
        state_root=root)

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(signum, task.cancel)
        await session_app.serve(request, announce=lambda line: typer.echo(line))

    try:
        asyncio.run(main())
    except (KubeError, KubeconfigError, session_app.ConnectError, BridgeError, hostsfile.HostsFileError,
            OSError) as exc:
        raise _fail(str(exc)) from None
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    typer.echo("disconnected: mappings, names and state removed")


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _detach(root: Path) -> None:
    argv = [a for a in sys.argv[1:] if a not in ("--detach", "-d")]
    log = root / "bridge" / f"connect-{int(time.time())}.log"
    process = daemon.spawn([sys.executable, "-m", "tether", *argv], log)
    path = sessionstate.path_for(root, process.pid)
    deadline = time.monotonic() + DETACH_WAIT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise _fail("connect ended at once:\n  " + "\n  ".join(tail))
        record = next((r for r in sessionstate.read_all(root) if r.pid == process.pid), None)
        if record is not None and record.doc.get("ready"):
            for line in log.read_text(errors="replace").splitlines():
                typer.echo(line)
            typer.echo(f"running in the background (pid {process.pid}, log {log}); `tether quit` ends it")
            return
        time.sleep(0.2)
    daemon.stop(process.pid, stop_s=STOP_WAIT_S)
    raise _fail(f"connect did not become ready within {DETACH_WAIT_S:.0f}s (log: {log}; state: {path})")


def quit_command(
    hosts_file: Annotated[Path | None, Opt("--hosts-file", help="Also remove blocks of sessions that are gone "
                                           "from this hosts file")] = None,
    data_dir: DataDir = None,
) -> None:
    """End every `tether connect` session and remove what they set up (also after a crash)."""
    root = state_root(data_dir)
    records = sessionstate.read_all(root)
    for record in records:
        if daemon.alive(record.pid):
            typer.echo(f"stopping session {record.pid}")
            daemon.stop(record.pid, stop_s=STOP_WAIT_S)
        done = session_app.clean_up(record)
        typer.echo(f"session {record.pid}: " + ("; ".join(done) if done else "nothing left behind"))
    extra = hosts_file or (hostsfile.DEFAULT_HOSTS if _is_root() else None)
    if extra is not None and extra.exists():
        before = extra.read_bytes()
        with contextlib.suppress(hostsfile.HostsFileError):
            hostsfile.update(extra, -1, "", daemon.alive)
            if extra.read_bytes() != before:
                typer.echo(f"removed blocks of sessions that are gone from {extra}")
    if not records:
        typer.echo("no connect session")


@bridge_app.command(name="status")
def status(
    data_dir: DataDir = None,
    output: Annotated[str, Opt("--output", "-o", help="text or json")] = "text",
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """What `tether connect` sessions map (Services, addresses, names, cluster, bytes) and the
    intercepts in the namespace (route, who, since when, requests routed)."""
    import json

    records = sessionstate.read_all(state_root(data_dir))
    if output == "json":
        typer.echo(json.dumps([{**r.doc, "alive": daemon.alive(r.pid)} for r in records], indent=1))
        return
    _print_sessions(records)
    typer.echo(_intercepts_text(namespace, context, kubeconfig), nl=False)


def _intercepts_text(namespace: str | None, context: str | None, kubeconfig: Path | None) -> str:
    """The intercepts section; a cluster that does not answer in time is one line, not a failure
    (the connect sessions above are local facts)."""
    from tether.bridge import api, intercepts
    from tether.cli.intercept import format_intercepts

    async def run() -> tuple[str, list[intercepts.SessionView]]:
        client, default_namespace = api.client_for(context, kubeconfig)
        ns = namespace or default_namespace
        async with client, asyncio.timeout(INTERCEPTS_WAIT_S):
            return ns, [intercepts.view(s) for s in await intercepts.sessions(client, ns)]

    try:
        ns, views = asyncio.run(run())
    except (KubeError, KubeconfigError, TimeoutError, OSError) as exc:
        return f"intercepts: not read ({exc or 'no answer in time'})\n"
    return f"intercepts in namespace {ns}:\n" + format_intercepts(views)


def _print_sessions(records: list[sessionstate.Recorded]) -> None:
    if not records:
        typer.echo("no connect session")
        return
    for record in records:
        state = "running" if daemon.alive(record.pid) else "gone (run `tether quit` to clean up)"
        typer.echo(f"session {record.pid}: {state}")
        for c in record.doc.get("clusters") or []:
            agent = c.get("agent") or "none (direct)"
            if c.get("agent"):
                agent += " (connected)" if c.get("connected") else " (not connected)"
                agent += f", {c.get('connects')} connection(s) made"
            typer.echo(f"  cluster {c['name']}: namespaces {', '.join(c.get('namespaces') or [])}; "
                       f"channel {c.get('channel')}; agent {agent}")
        if record.doc.get("hostsFile"):
            typer.echo(f"  names in {record.doc['hostsFile']}")
        if record.doc.get("dns"):
            typer.echo(f"  DNS on {record.doc['dns']}")
        routed = record.doc.get("routes")
        if routed:
            ranges = "; ".join(f"{c}: {', '.join(r)}" for c, r in (routed.get("ranges") or {}).items())
            typer.echo(f"  routes ({record.nft_table}): {ranges or 'none yet'}; {routed.get('bytesOut', 0)} bytes out, "
                       f"{routed.get('bytesIn', 0)} in, {routed.get('connections', 0)} connections")
        typer.echo(f"  {'SERVICE':<32} {'CLUSTER':<12} {'ADDRESS':<22} {'OUT':>10} {'IN':>10} CONNS")
        for m in record.mappings:
            ports = ",".join(str(p["localPort"]) for p in m.get("ports") or [])
            typer.echo(f"  {m['display']:<32} {m['cluster']:<12} {m['address'] + ':' + ports:<22} "
                       f"{m.get('bytesOut', 0):>10} {m.get('bytesIn', 0):>10} {m.get('connections', 0)}")

