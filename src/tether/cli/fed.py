"""`tether enable|disable|federate` (kubefedctl) and `tether get|describe` across members (karmadactl)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console

from tether.cli.options import HubContext, HubContextAlias, HubKubeconfig, HubKubeconfigAlias, pick
from tether.kube import KubeClient, KubeError
from tether.kube.config import KubeconfigError

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)
T = TypeVar("T")

Namespace = Annotated[str | None, typer.Option("--namespace", "-n",
                                               help="Namespace [default: the context's, else default]")]
Clusters = Annotated[str, typer.Option("--clusters", "-C", help="Members to query, comma-separated "
                                       "[default: every joined cluster]")]


def _fail(message: object) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(1)


def _run(kubeconfig: Path | None, context: str | None, context_alias: str | None,
         kubeconfig_alias: Path | None, body: Callable[[KubeClient], Awaitable[T]]) -> T:
    """Run `body` with a client for the hub; known errors become a red message and exit 1."""
    from tether.federation.federating import FederateError
    from tether.federation.multiget import MultiGetError
    from tether.federation.typeconfig import FederationTypeError

    context = pick(context, context_alias, "--context")
    kubeconfig = pick(kubeconfig, kubeconfig_alias, "--kubeconfig")

    async def main() -> T:
        async with KubeClient.from_kubeconfig(kubeconfig, context) as host:
            return await body(host)

    try:
        return asyncio.run(main())
    except (FederationTypeError, FederateError, MultiGetError, KubeconfigError, TimeoutError) as exc:
        raise _fail(exc) from None
    except KubeError as exc:
        hint = " (is the host cluster running? check --context)" if exc.code == 0 else ""
        raise _fail(f"{exc}{hint}") from None


def _check_output(output: str, allowed: tuple[str, ...]) -> None:
    if output and output not in allowed:
        raise typer.BadParameter(f"{output!r} is not one of: {', '.join(allowed)}", param_hint="--output")


def enable(
    type_name: Annotated[str, typer.Argument(metavar="TYPE", help="deployments.apps, deployment, Deployment, "
                                             "deploy, or a CRD type")],
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
    federated_group: Annotated[str, typer.Option("--federated-group",
                                                 help="API group of the Federated<Kind> type")] = "types.kubefed.io",
    output: Annotated[str, typer.Option("--output", "-o", help="'yaml': print the FederatedTypeConfig "
                                        "and CRD instead of creating them")] = "",
) -> None:
    """Enable propagation of a type: its Federated<Kind> CRD and a FederatedTypeConfig (kubefedctl enable)."""
    from tether.federation import typeconfig

    _check_output(output, ("yaml",))

    async def body(host: KubeClient) -> str:
        target = await typeconfig.resolve_type(host, type_name)
        objects = typeconfig.type_objects(target, federated_group=federated_group)
        if output == "yaml":
            return typeconfig.to_yaml([objects.type_config, objects.crd])
        await typeconfig.enable(host, objects, report=typer.echo)
        return ""

    text = _run(kubeconfig, context, context_alias, kubeconfig_alias, body)
    if text:
        sys.stdout.write(text)


def disable(
    type_name: Annotated[str, typer.Argument(metavar="TYPE", help="The FederatedTypeConfig's name "
                                             "(deployments.apps) or any name of the type")],
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
    delete_crd: Annotated[bool, typer.Option("--delete-crd", help="Also delete the Federated<Kind> CRD "
                                             "and the FederatedTypeConfig")] = False,
) -> None:
    """Disable propagation of a type (kubefedctl disable)."""
    from tether.federation import typeconfig

    async def body(host: KubeClient) -> None:
        await typeconfig.disable(host, type_name, delete_crd=delete_crd, report=typer.echo)

    _run(kubeconfig, context, context_alias, kubeconfig_alias, body)


def _split_ref(ref: str, name: str | None) -> tuple[str, str]:
    if name is not None:
        return ref, name
    kind, sep, obj_name = ref.partition("/")
    if not sep or not kind or not obj_name:
        raise typer.BadParameter(f"{ref!r}: give KIND/NAME (e.g. deployment/web) or KIND NAME",
                                 param_hint="KIND/NAME")
    return kind, obj_name


def federate(
    ref: Annotated[str | None, typer.Argument(metavar="KIND/NAME", help="e.g. deployment/web, ns/demo "
                                              "(or KIND NAME)")] = None,
    name_arg: Annotated[str | None, typer.Argument(metavar="[NAME]", show_default=False)] = None,
    namespace: Namespace = None,
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
    contents: Annotated[bool, typer.Option("--contents", "-c", help="Namespaces only: also federate the "
                                           "objects of enabled types in it")] = False,
    enable_type: Annotated[bool, typer.Option("--enable-type", "-e", help="Enable the type first if it "
                                              "is not")] = False,
    output: Annotated[str, typer.Option("--output", "-o", help="'yaml': print instead of creating")] = "",
    filename: Annotated[str | None, typer.Option("--filename", "-f", help="Convert the manifests in this "
                                                 "file ('-' for stdin) and print them; no server is used")] = None,
) -> None:
    """Create the Federated<Kind> of a host object, placed in every cluster (kubefedctl federate)."""
    from tether.federation import federating, typeconfig

    _check_output(output, ("yaml",))
    if filename is not None:
        if ref is not None:
            raise typer.BadParameter("--filename takes no KIND/NAME", param_hint="--filename")
        text = sys.stdin.read() if filename == "-" else _read(Path(filename))
        try:
            objs = federating.federate_manifests(federating.load_manifests(text, filename), filename)
        except federating.FederateError as exc:
            raise _fail(exc) from None
        sys.stdout.write(typeconfig.to_yaml(objs))
        return
    if ref is None:
        raise typer.BadParameter("give KIND/NAME, or --filename", param_hint="KIND/NAME")
    if enable_type and output:
        raise typer.BadParameter("--enable-type cannot be used with --output yaml", param_hint="--enable-type")
    kind, name = _split_ref(ref, name_arg)

    async def body(host: KubeClient) -> str:
        target = await typeconfig.resolve_type(host, kind)
        if contents and target.kind != "Namespace":
            raise federating.FederateError("--contents can only be used with namespaces")
        ns = namespace or host.credentials.namespace or "default"
        ftc = await federating.type_config(host, target)
        if output != "yaml":
            if ftc is None and enable_type:
                await typeconfig.enable(host, typeconfig.type_objects(target), report=typer.echo)
                ftc = await federating.type_config(host, target)
            federating.require_enabled(target, ftc)
        items = [await federating.federated_from_host(host, target, name, ns, ftc)]
        skipped: tuple[tuple[typeconfig.ApiType, int], ...] = ()
        if contents:
            enabled = await typeconfig.enabled_type_configs(host)
            found = await federating.namespace_contents(
                host, name, enabled=enabled, include_types=lambda t: enable_type or output == "yaml")
            if enable_type and output != "yaml":
                for missing in (t for t in found.types if t.qualified_name not in enabled):
                    await typeconfig.enable(host, typeconfig.type_objects(missing), report=typer.echo)
                enabled = await typeconfig.enabled_type_configs(host)
            items += found.federated(enabled)
            skipped = found.not_enabled
        for target_type, count in skipped:
            err_console.print(f"[yellow]skipped[/yellow] {count} {target_type.qualified_name}: type not "
                              f"enabled (`tether enable {target_type.qualified_name}`, or --enable-type)",
                              highlight=False)
        if output == "yaml":
            return typeconfig.to_yaml([f.obj for f in items])
        for item in items:
            outcome = await federating.create(host, item)
            typer.echo(f"{item.ref} {outcome} (from {item.source_ref})")
        for unplaced in await federating.unfederated_namespaces(host, items):
            err_console.print(
                f"[yellow]warning:[/yellow] namespace {unplaced!r} is not federated, so this "
                f"propagates to no cluster until it is: `tether federate namespace/{unplaced}` "
                f"(add --contents to federate what it holds too)", highlight=False)
        return ""

    text = _run(kubeconfig, context, context_alias, kubeconfig_alias, body)
    if text:
        sys.stdout.write(text)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise _fail(f"cannot read {path}: {exc.strerror}") from None


def get(
    type_name: Annotated[str, typer.Argument(metavar="KIND", help="deployments, deploy, svc, a CRD type...")],
    name: Annotated[str | None, typer.Argument(metavar="[NAME]", show_default=False)] = None,
    namespace: Namespace = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A")] = False,
    clusters: Clusters = "",
    selector: Annotated[str, typer.Option("--selector", "-l", help="Label selector")] = "",
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
    output: Annotated[str, typer.Option("--output", "-o", help="wide | yaml | json")] = "",
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds to wait for each member")] = 5.0,
) -> None:
    """List objects in member clusters, with a CLUSTER column (karmadactl get -C)."""
    from tether.federation import multiget

    _check_output(output, ("wide", "yaml", "json"))
    if type_name.count("/") == 1 and name is None:
        type_name, name = type_name.split("/")

    async def body(host: KubeClient) -> list[multiget.ClusterResult]:
        ns = namespace or host.credentials.namespace or "default"
        members = await multiget.member_clients(host, _cluster_list(clusters), timeout_s=timeout_s)
        try:
            return await multiget.get_across(members, type_name, name or "", namespace=ns,
                                             all_namespaces=all_namespaces, label_selector=selector,
                                             timeout_s=timeout_s)
        finally:
            await members.aclose()

    results = _run(kubeconfig, context, context_alias, kubeconfig_alias, body)
    if not results:
        err_console.print("No clusters joined (`tether join NAME --cluster-context C`).")
        raise typer.Exit(1)
    found = any(r.objects for r in results)
    if found or output in ("yaml", "json"):
        typer.echo(multiget.render(results, output, all_namespaces=all_namespaces))
    else:
        where = "" if all_namespaces else f" in {namespace or 'the namespace'}"
        err_console.print(f"No resources found{where} in {len(results)} cluster(s).", highlight=False)
    problems = multiget.footer(results)
    if problems:
        err_console.print("\n[yellow]No result from:[/yellow]")
        for line in problems:
            err_console.print(f"  {line}", highlight=False)
    if name and not found:
        raise typer.Exit(1)


def describe(
    ref: Annotated[str, typer.Argument(metavar="KIND/NAME", help="e.g. deployment/web (or KIND NAME)")],
    name_arg: Annotated[str | None, typer.Argument(metavar="[NAME]", show_default=False)] = None,
    namespace: Namespace = None,
    clusters: Clusters = "",
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds to wait for each member")] = 5.0,
) -> None:
    """Show an object in each member: key fields, status, conditions and recent Events."""
    from tether.federation import multiget

    kind, name = _split_ref(ref, name_arg)

    async def body(host: KubeClient) -> list[multiget.Described]:
        ns = namespace or host.credentials.namespace or "default"
        members = await multiget.member_clients(host, _cluster_list(clusters), timeout_s=timeout_s)
        try:
            return await multiget.describe_across(members, kind, name, namespace=ns, timeout_s=timeout_s)
        finally:
            await members.aclose()

    results = _run(kubeconfig, context, context_alias, kubeconfig_alias, body)
    if not results:
        raise _fail("no clusters joined (`tether join NAME --cluster-context C`)")
    typer.echo("\n\n".join(multiget.describe_text(d) for d in results))
    if not any(d.obj is not None for d in results):
        raise typer.Exit(1)


def _cluster_list(value: str) -> list[str]:
    return [c.strip() for c in value.split(",") if c.strip()]


def register(app: typer.Typer) -> None:
    app.command()(enable)
    app.command()(disable)
    app.command()(federate)
    app.command()(get)
    app.command()(describe)


__all__ = ["register"]
