"""`tether mirror` and `tether policy-sets`: Semaphore's service mirror and policy controller.

Flags keep upstream's names and environment variables (Go style, one dash; two work too): a
flag wins over its variable, which wins over the configuration file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "warning": logging.WARNING,
              "error": logging.ERROR}


def register(app: typer.Typer) -> None:
    from tether.cli.manifests import mirror_manifest

    # `tether mirror -config ...` runs it, as upstream's binary; `tether mirror manifest` prints
    # its Deployment
    group = typer.Typer(invoke_without_command=True, no_args_is_help=False)
    group.callback(invoke_without_command=True)(mirror)
    group.command("manifest")(mirror_manifest)
    app.add_typer(group, name="mirror")
    app.command(name="policy-sets")(policy_sets)


def _logging(level: str) -> None:
    chosen = LOG_LEVELS.get(level.lower())
    if chosen is None:
        raise typer.BadParameter(f"{level!r} is not one of {', '.join(LOG_LEVELS)}", param_hint="-log-level")
    logging.basicConfig(level=chosen, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _exit(code: int) -> None:
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def mirror(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Option("--config", "-config", envvar="SSM_CONFIG",
                                                help="(required) Path to the JSON config file")] = None,
    kube_config: Annotated[str, typer.Option(
        "--kube-config", "-kube-config", envvar="SSM_KUBE_CONFIG",
        help="Kubeconfig of the local cluster [default: localCluster.kubeConfigPath, else in-cluster]")] = "",
    log_level: Annotated[str, typer.Option("--log-level", "-log-level", envvar="SSM_LOG_LEVEL",
                                           help="debug, info, warn or error")] = "info",
    mirror_ns: Annotated[str, typer.Option("--mirror-ns", "-mirror-ns", envvar="SSM_MIRROR_NS",
                                           help="Namespace for the mirrors (overrides mirrorNamespace)")] = "",
    mirror_selector: Annotated[str, typer.Option(
        "--mirror-svc-label-selector", "-mirror-svc-label-selector", envvar="SSM_MIRROR_SVC_LABEL_SELECTOR",
        help="Remote Services to mirror (overrides mirrorSvcLabelSelector)")] = "",
    global_selector: Annotated[str, typer.Option(
        "--global-svc-label-selector", "-global-svc-label-selector", envvar="SSM_GLOBAL_SVC_LABEL_SELECTOR",
        help="Services merged into global services (overrides globalSvcLabelSelector)")] = "",
    routing_label: Annotated[str, typer.Option(
        "--global-svc-routing-strategy-label", "-global-svc-routing-strategy-label",
        envvar="SSM_GLOBAL_SVC_TOPOLOGY_LABEL",
        help="Label opting a global service into local-first routing (overrides "
             "globalSvcRoutingStrategyLabel)")] = "",
    listen: Annotated[str, typer.Option("--listen-address", "-listen-address", envvar="SSM_LISTEN_ADDRESS",
                                        help="HOST:PORT serving /healthz, /livez and /metrics")] = ":8080",
) -> None:
    """Mirror labelled Services of remote clusters into this one (semaphore-service-mirror)."""
    if ctx.invoked_subcommand:
        return
    from tether.app import mirror as mirror_app
    from tether.connect.mirror.config import ConfigError, Overrides, load_config
    from tether.connect.remote import RemoteError
    from tether.kube import KubeError
    from tether.kube.config import KubeconfigError

    _logging(log_level)
    if config is None:
        typer.echo("error: -config is required (or SSM_CONFIG): the path to the JSON config file", err=True)
        raise typer.Exit(2)
    try:
        raw = config.read_bytes()
    except OSError as exc:
        typer.echo(f"error: cannot read config file {config}: {exc.strerror}", err=True)
        raise typer.Exit(1) from None
    try:
        parsed = load_config(raw, Overrides(mirror_svc_label_selector=mirror_selector,
                                            global_svc_label_selector=global_selector,
                                            global_svc_routing_strategy_label=routing_label,
                                            mirror_namespace=mirror_ns))
        options = mirror_app.MirrorOptions(kubeconfig=kube_config, listen=listen)
        mirror_app.split_listen(listen)
    except ConfigError as exc:
        typer.echo(f"error: config {config}: {exc}", err=True)
        raise typer.Exit(1) from None
    except ValueError as exc:
        typer.echo(f"error: -listen-address: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        code = asyncio.run(mirror_app.serve(parsed, options, announce=lambda line: typer.echo(line, err=True)))
    except (KubeconfigError, RemoteError, KubeError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        code = 1
    _exit(code)


def policy_sets(
    local_kube_config: Annotated[str, typer.Option(
        "--local-kube-config", "-local-kube-config", envvar="SP_LOCAL_KUBE_CONFIG",
        help="Kubeconfig of the local cluster, where the sets are written [default: in-cluster]")] = "",
    target_kube_config: Annotated[str, typer.Option(
        "--target-kube-config", "-target-kube-config", envvar="SP_TARGET_KUBE_CONFIG",
        help="Kubeconfig of the remote (target) cluster whose pods are watched")] = "",
    remote_api_url: Annotated[str, typer.Option("--remote-api-url", "-remote-api-url", envvar="SP_REMOTE_API_URL",
                                                help="Remote API server URL (without a kubeconfig)")] = "",
    remote_ca_url: Annotated[str, typer.Option("--remote-ca-url", "-remote-ca-url", envvar="SP_REMOTE_CA_URL",
                                               help="URL serving the remote API server's CA")] = "",
    remote_sa_token_path: Annotated[str, typer.Option(
        "--remote-sa-token-path", "-remote-sa-token-path", envvar="SP_REMOTE_SERVICE_ACCOUNT_TOKEN_PATH",
        help="File holding the remote ServiceAccount token")] = "",
    target_cluster_name: Annotated[str, typer.Option(
        "--target-cluster-name", "-target-cluster-name", envvar="SP_TARGET_CLUSTER_NAME",
        help="(required) The remote cluster's name: the first part of every set name")] = "",
    pod_resync_period: Annotated[str, typer.Option("--pod-resync-period", "-pod-resync-period",
                                                   help="Go duration between full resyncs (0: none)")] = "0",
    log_level: Annotated[str, typer.Option("--log-level", "-log-level", envvar="SP_LOG_LEVEL",
                                           help="debug, info, warn or error")] = "info",
    listen: Annotated[str, typer.Option("--listen-address", "-listen-address", envvar="SP_LISTEN_ADDRESS",
                                        help="HOST:PORT serving /healthz and /metrics")] = ":8080",
    network_policies: Annotated[bool, typer.Option(
        "--network-policies", "-network-policies", envvar="SP_NETWORK_POLICIES",
        help="Also fill ipBlocks of Kubernetes NetworkPolicies that ask for a set (clusters without "
             "Calico; see docs/connect.md)")] = False,
) -> None:
    """Keep Calico GlobalNetworkSets of a remote cluster's labelled pods (semaphore-policy)."""
    import tether.app.policysets as policy_app
    from tether.connect.durations import DurationError, parse_duration
    from tether.connect.policysets.config import PolicySetsConfig, PolicySetsConfigError
    from tether.connect.remote import RemoteError
    from tether.kube import KubeError
    from tether.kube.config import KubeconfigError

    _logging(log_level)
    token = os.environ.get("SP_REMOTE_SERVICE_ACCOUNT_TOKEN", "")
    try:
        resync_s = parse_duration(pod_resync_period)
        parsed = PolicySetsConfig.build(
            local_kubeconfig=local_kube_config, target_kubeconfig=target_kube_config, remote_api_url=remote_api_url,
            remote_ca_url=remote_ca_url, remote_sa_token_path=remote_sa_token_path, remote_sa_token=token,
            target_cluster_name=target_cluster_name, resync_s=resync_s, listen=listen,
            network_policies=network_policies)
    except DurationError as exc:
        typer.echo(f"error: -pod-resync-period: {exc}", err=True)
        raise typer.Exit(2) from None
    except PolicySetsConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        code = asyncio.run(policy_app.serve(parsed, announce=lambda line: typer.echo(line, err=True)))
    except (KubeconfigError, RemoteError, KubeError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        code = 1
    _exit(code)
