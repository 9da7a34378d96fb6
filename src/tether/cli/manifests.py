"""`tether hub|mesh|mirror|dns manifest`: print the objects of `deploy/NAME` with your values.

The same renderer writes `deploy/` (kustomize), so a user without kustomize applies exactly the
objects the tree holds: `tether hub manifest | kubectl apply -f -`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tether.version import IMAGE

Opt = typer.Option
Image = Annotated[str, Opt("--image", help="Container image with tether (a release tag)")]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _read(path: Path | None, flag: str) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text()
    except OSError as exc:
        raise _fail(f"{flag} {path}: {exc.strerror or exc}") from None


def _check_image(image: str) -> None:
    tail = image.rsplit("/", 1)[-1]
    if ":" not in tail and "@" not in image:
        raise typer.BadParameter(f"{image!r} has no tag: name a release (e.g. {IMAGE})",
                                 param_hint="--image")
    if tail.endswith(":latest"):
        raise typer.BadParameter("`latest` is not a release: name one (e.g. "
                                 f"{IMAGE})", param_hint="--image")


def hub_manifest(
    image: Image = IMAGE,
    namespace: Annotated[str, Opt("--namespace", "-n", help="The hub's namespace")] = "tether-system",
    replicas: Annotated[int, Opt("--replicas", min=1, help="Hub replicas (one leads)")] = 2,
    tunnel_advertise: Annotated[str, Opt(
        "--tunnel-advertise-address", help="HOST[:PORT] pull agents dial: the hub Service as "
        "members reach it [default: its in-cluster name]")] = "",
    service_type: Annotated[str, Opt("--service-type", help="ClusterIP, NodePort or "
                                     "LoadBalancer")] = "ClusterIP",
) -> None:
    """Print deploy/hub: Deployment (leader-elected replicas), RBAC, Service, PDB.

    `tether hub install` (the CRDs and namespace) comes first."""
    from tether.app.deploy import HubValues, render_hub, to_yaml

    _check_image(image)
    if service_type not in ("ClusterIP", "NodePort", "LoadBalancer"):
        raise typer.BadParameter(f"{service_type!r}: use ClusterIP, NodePort or LoadBalancer",
                                 param_hint="--service-type")
    values = HubValues(image=image, namespace=namespace, replicas=replicas,
                       tunnel_advertise=tunnel_advertise or f"tether-hub.{namespace}.svc",
                       service_type=service_type)
    typer.echo(to_yaml(render_hub(values)), nl=False)


def mesh_manifest(
    image: Image = IMAGE,
    clusters_config: Annotated[Path | None, Opt(
        "--clusters-config", help="semaphore-wireguard's clusters JSON [default: an example]")] = None,
    namespace: Annotated[str, Opt("--namespace", "-n")] = "kube-system",
) -> None:
    """Print deploy/mesh: the per-node DaemonSet with your clusters config."""
    from tether.app.deploy import MeshValues, render_mesh, to_yaml

    _check_image(image)
    config = _read(clusters_config, "--clusters-config")
    values = MeshValues(image=image, namespace=namespace)
    if config is not None:
        values = MeshValues(image=image, namespace=namespace, clusters_json=config)
    try:
        typer.echo(to_yaml(render_mesh(values)), nl=False)
    except ValueError as exc:
        raise _fail(f"--clusters-config {clusters_config}: {exc}") from None


def mirror_manifest(
    image: Image = IMAGE,
    config: Annotated[Path | None, Opt("--config", help="semaphore-service-mirror's JSON config "
                                       "[default: an example]")] = None,
    namespace: Annotated[str, Opt("--namespace", "-n")] = "tether-system",
) -> None:
    """Print deploy/mirror: the service mirror with your config as a ConfigMap."""
    from tether.app.deploy import MirrorValues, render_mirror, to_yaml
    from tether.connect.mirror.config import ConfigError, Overrides, load_config

    _check_image(image)
    text = _read(config, "--config")
    values = MirrorValues(image=image, namespace=namespace)
    if text is not None:
        try:  # what `tether mirror` would refuse at start is refused now
            load_config(text.encode(), Overrides())
        except ConfigError as exc:
            raise _fail(f"--config {config}: {exc}") from None
        values = MirrorValues(image=image, namespace=namespace, config_json=text)
    typer.echo(to_yaml(render_mirror(values)), nl=False)


def dns_manifest(
    image: Image = IMAGE,
    prefix: Annotated[list[str] | None, Opt("--prefix", help="Semaphore servicePrefix to serve "
                                            "(repeatable)")] = None,
    upstream: Annotated[str, Opt("--upstream", help="Where other names go [default: the pod's "
                                 "resolv.conf]")] = "",
    namespace: Annotated[str, Opt("--namespace", "-n")] = "tether-system",
) -> None:
    """Print deploy/dns: Deployment, Service and the CoreDNS stanza to add."""
    from tether.app.deploy import DnsValues, render_dns, to_yaml

    _check_image(image)
    values = DnsValues(image=image, namespace=namespace, prefixes=tuple(prefix or ()),
                       upstream=upstream)
    typer.echo(to_yaml(render_dns(values)), nl=False)
