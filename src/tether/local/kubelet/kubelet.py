"""The kubelet component: runs the pods bound to this cluster's nodes and reports their status."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.engine import Engine
from tether.local import events, tokens
from tether.local.errors import ApiError
from tether.local.kubelet import environment, images, probes, volumes
from tether.local.kubelet.runtime import CTTY_SHIM, Attachment, LogWriter, run_process
from tether.local.kubelet.status import ContainerState, PodRuntimeState, pod_status
from tether.local.kubelet.system_pods import SystemComponent, component_of
from tether.local.netns import HostFabric, NetnsError
from tether.local.operations import WriteOptions
from tether.local.resources import ResourceType
from tether.local.store import Event, follow
from tether.objects import Obj, times

if TYPE_CHECKING:
    from tether.local.cluster import LocalCluster

log = logging.getLogger(__name__)

PodKey = tuple[str, str]
PODS = "/pods"
MANAGER = "kubelet"
RETRY_S = 2.0
BACKOFF_BASE_S = 1.0  # the real kubelet starts at 10 s; local clusters favour fast feedback
BACKOFF_MAX_S = 60.0
VIRTUAL_JOB_RUN_S = 1.0
VOLUME_SYNC_S = 2.0  # how soon ConfigMap, Secret and token changes reach a running pod's files
VOLUME_RETRY_S = 0.25  # a pod created with its namespace may briefly miss kube-root-ca.crt
VOLUME_RETRY_MAX_S = 5.0
MOUNTS_ENV = "TETHER_LOCAL_POD_MOUNTS"  # "env": rootless behaviour even as root
SYSTEM_HEALTH_S = 1.0  # how often a built-in component's pod looks at the component's health


class PodWorker:
    """Runs one pod: address, volumes, init containers, containers, probes, status."""

    def __init__(self, kubelet: Kubelet, pod: Obj) -> None:
        self.kubelet = kubelet
        self.key: PodKey = (pod["metadata"].get("namespace", ""), pod["metadata"]["name"])
        self.uid: str = pod["metadata"]["uid"]
        self.state = PodRuntimeState()
        self.dirty = asyncio.Event()
        self.grace_s = float((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
        self.deleting = False
        self.task: asyncio.Task[None] | None = None
        self.volumes = volumes.PodVolumes(self.directory / "volumes", configmaps=kubelet.lookup("configmaps"),
                                          secrets=kubelet.lookup("secrets"), token=self._token)
        self.volumes_ready = asyncio.Event()
        self._tokens: dict[tuple[str, int], tuple[str, float]] = {}  # (audience, ttl) -> (token, renew at)
        self._told_rootless = False
        self.pids: dict[str, int] = {}  # container -> its running process (for exec in its mounts)
        self.writes_volumes = True

    @property
    def directory(self) -> Path:
        return self.kubelet.pods_dir / self.uid

    def pod(self) -> Obj | None:
        pod = self.kubelet.store.get(PODS, *self.key)
        return pod if pod is not None and pod["metadata"].get("uid") == self.uid else None

    def update(self, change: Callable[[PodRuntimeState], PodRuntimeState]) -> None:
        self.state = change(self.state)
        self.dirty.set()

    def patch(self, **changes: Any) -> None:
        self.state = replace(self.state, **changes)
        self.dirty.set()

    def set_container(self, name: str, change: Callable[[ContainerState], ContainerState], *, init: bool) -> None:
        def apply(state: PodRuntimeState) -> PodRuntimeState:
            group = state.init if init else state.containers
            updated = tuple(change(c) if c.name == name else c for c in group)
            return replace(state, init=updated) if init else replace(state, containers=updated)

        self.update(apply)

    # lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._report())
                group.create_task(self._live())
                group.create_task(self._refresh_volumes())
        finally:
            self._finish()

    def _finish(self) -> None:
        self.kubelet.fabric.detach_pod(self.uid)
        self.kubelet.release_address(self)
        if self.deleting:
            self.kubelet.remove_pod(self)
        with contextlib.suppress(OSError):
            shutil.rmtree(self.directory / "volumes", ignore_errors=True)

    async def _live(self) -> None:
        pod = self.pod()
        if pod is None:
            return
        spec = pod.get("spec") or {}
        self.update(lambda s: replace(
            s,
            start_time=times.now_rfc3339(),
            init=tuple(ContainerState(c["name"], c.get("image", ""), init=True, reason="PodInitializing")
                       for c in spec.get("initContainers") or []),
            containers=tuple(ContainerState(c["name"], c.get("image", "")) for c in spec.get("containers") or []),
        ))
        await self._address(pod)
        if self.kubelet.system_component(pod) is None:
            await self._volumes(pod)
        for container in spec.get("initContainers") or []:
            await self._run_init(container)
        async with asyncio.TaskGroup() as group:
            for container in spec.get("containers") or []:
                group.create_task(self._run_container(container))

    async def _address(self, pod: Obj) -> None:
        while True:
            node = self.kubelet.store.get("/nodes", "", pod["spec"]["nodeName"])
            try:
                pod_ip = self.kubelet.allocate_address(pod, node)
                # netns mode: the pod's own network namespace exists before anything runs
                await self.kubelet.fabric.attach_pod(self.uid, self.kubelet.node_ip(node), pod_ip,
                                                    pod["metadata"].get("namespace") or "default")
            except (AddressUnavailable, NetnsError) as exc:
                message = str(exc)
                if self.state.failure_message != message:
                    events.record(self.kubelet.ops, pod, event_type="Warning", reason="FailedCreatePodSandBox",
                                  message=message, component=MANAGER)
                self.patch(failure_reason="", failure_message=message)
                await asyncio.sleep(RETRY_S * 2.5)
                continue
            host_ip = self.kubelet.node_ip(node)
            self.patch(pod_ip=pod_ip, host_ip=host_ip, failure_reason="", failure_message="")
            return

    def _runs_processes(self, pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            try:
                if not images.resolve(container, self.kubelet.image_map).virtual:
                    return True
            except images.ImageError:
                return True
        return False

    async def _volumes(self, pod: Obj) -> None:
        # Virtual containers read no files: their volumes' sources are checked, nothing written.
        self.writes_volumes = self._runs_processes(pod)
        delay, failures, told = VOLUME_RETRY_S, 0, ""
        while True:
            try:
                self.volumes.sync(pod, write=self.writes_volumes)
                self.volumes_ready.set()
                return
            except environment.ConfigError as exc:
                # The first miss is usually the namespace's CA ConfigMap or default ServiceAccount
                # arriving a moment after the pod: say so only when it lasts.
                failures += 1
                message = f"MountVolume.SetUp failed {exc}"
                if failures > 1 and message != told:
                    events.record(self.kubelet.ops, pod, event_type="Warning", reason="FailedMount",
                                  message=message, component=MANAGER)
                    told = message
                await asyncio.sleep(delay)
                delay = min(delay * 2, VOLUME_RETRY_MAX_S)
                pod = self.pod() or pod

    async def _refresh_volumes(self) -> None:
        """ConfigMap, Secret and token changes reach the files of a running pod, as the kubelet's
        periodic volume sync does (subPath mounts excepted, as in Kubernetes)."""
        await self.volumes_ready.wait()
        if not self.writes_volumes:
            return
        while True:
            await asyncio.sleep(VOLUME_SYNC_S)
            pod = self.pod()
            if pod is None:
                return
            try:
                self.volumes.sync(pod)
            except (environment.ConfigError, OSError) as exc:  # keep the last good files
                log.debug("volumes of pod %s/%s not refreshed: %s", *self.key, exc)

    def _token(self, pod: Mapping[str, Any], source: Mapping[str, Any]) -> str:
        """A projected ServiceAccount token for this pod, reused until it is due for renewal."""
        key = (str(source.get("audience") or ""), int(source.get("expirationSeconds") or 0))
        cached = self._tokens.get(key)
        now = time.time()
        if cached is not None and now < cached[1]:
            return cached[0]
        signer = self.kubelet.signer
        if signer is None:
            raise environment.ConfigError("this kubelet cannot issue ServiceAccount tokens")
        meta, spec = pod["metadata"], pod.get("spec") or {}
        sa_name = str(spec.get("serviceAccountName") or "default")
        sa = self.kubelet.store.get("/serviceaccounts", meta.get("namespace", ""), sa_name)
        if sa is None:
            raise environment.ConfigError(f'failed to fetch token: serviceaccounts "{sa_name}" not found')
        node = self.kubelet.store.get("/nodes", "", str(spec.get("nodeName", "")))
        token, renew_at = tokens.pod_token(signer, dict(pod), sa, node, source, now)
        self._tokens[key] = (token, renew_at)
        return token

    def binds(self, pod: Obj, container: Obj, env: dict[str, str]) -> list[volumes.Bind]:
        """Where this container's volumes are, and where it expects them; raises MountError."""
        return volumes.binds(pod, container, self.volumes.directory, env)

    async def _report(self) -> None:
        """Write status whenever the runtime state changed (coalescing bursts)."""
        while True:
            await self.dirty.wait()
            self.dirty.clear()
            pod = self.pod()
            if pod is None:
                return
            status = pod_status(pod, self.state, times.now_rfc3339())
            if status != pod.get("status"):
                self.kubelet.write_status(pod, status)

    # containers --------------------------------------------------------------------------

    def _declared_env(self, pod: Obj, container: Obj) -> dict[str, str]:
        """The container's own environment (what `$(VAR)` in its command and args may name).

        The downward API sees the addresses this worker gave the pod even before its status,
        written asynchronously, carries them (a real kubelet has the sandbox's IP at this point).
        """
        status = dict(pod.get("status") or {})
        if self.state.pod_ip:
            status.update(podIP=self.state.pod_ip, podIPs=[{"ip": self.state.pod_ip}])
        if self.state.host_ip:
            status["hostIP"] = self.state.host_ip
        return environment.container_env(
            {**pod, "status": status}, container, services=self.kubelet.store.list_objects("/services"),
            configmaps=self.kubelet.lookup("configmaps"), secrets=self.kubelet.lookup("secrets"),
        )

    def _env(self, pod: Obj, container: Obj, declared: dict[str, str] | None = None) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.directory / "home")}
        env.update(self._declared_env(pod, container) if declared is None else declared)
        meta = pod["metadata"]
        env.setdefault("POD_NAME", meta["name"])
        env.setdefault("POD_NAMESPACE", meta.get("namespace", ""))
        env.setdefault("POD_IP", self.state.pod_ip)
        env.setdefault("NODE_NAME", pod["spec"].get("nodeName", ""))
        env.update(self.kubelet.dns_env())
        # Where each volume really is: what a rootless container must use, kept as root too so a
        # program written for local clusters works in both modes.
        with contextlib.suppress(volumes.MountError):
            env.update(volumes.mount_env(self.binds(pod, container, env), mounted=self.kubelet.mounts))
        return env

    async def _run_init(self, container: Obj) -> None:
        name = container["name"]
        while True:
            code = await self._run_once(container, init=True)
            if code == 0:
                return
            pod = self.pod()
            policy = (pod or {}).get("spec", {}).get("restartPolicy", "Always")
            if policy == "Never":
                await asyncio.Event().wait()  # the pod has failed; it stays as it is
            self.set_container(name, lambda c: c.restarted().waiting("CrashLoopBackOff"), init=True)
            await asyncio.sleep(BACKOFF_BASE_S)

    async def _run_container(self, container: Obj) -> None:
        name = container["name"]
        failures = 0
        while True:
            code = await self._run_once(container, init=False)
            pod = self.pod()
            if pod is None:
                return
            policy = pod["spec"].get("restartPolicy", "Always")
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                await asyncio.Event().wait()  # terminated for good; status says so
            failures = failures + 1 if code != 0 else 0
            delay = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** max(failures - 1, 0))
            message = f"back-off {delay:.0f}s restarting failed container={name} pod={self.key[1]}"
            self.set_container(name, functools.partial(ContainerState.waiting, reason="CrashLoopBackOff", message=message), init=False)
            await asyncio.sleep(delay)
            self.set_container(name, lambda c: c.restarted(), init=False)

    async def _run_once(self, container: Obj, *, init: bool) -> int:
        """Run the container once; returns its exit code."""
        pod = self.pod()
        if pod is None:
            await asyncio.Event().wait()
        assert pod is not None
        name = container["name"]
        component = self.kubelet.system_component(pod)
        if component is not None:
            return await self._run_system(container, component, init=init)
        try:
            declared = self._declared_env(pod, container)
            program = images.resolve(environment.expand_command(container, declared), self.kubelet.image_map)
            env = self._env(pod, container, declared)
            bound = [] if program.virtual else self.binds(pod, container, env)
        except (environment.ConfigError, images.ImageError, volumes.MountError) as exc:
            message = str(exc)
            self.set_container(name, lambda c: c.waiting("CreateContainerConfigError", message), init=init)
            await asyncio.sleep(RETRY_S)
            return await self._run_once(container, init=init)
        restart = next((c.restart_count for c in (self.state.init if init else self.state.containers)
                        if c.name == name), 0)
        logfile = LogWriter(self.directory / "logs" / name / f"{restart}.log")
        try:
            if program.virtual:
                return await self._run_virtual(pod, container, init=init)
            started = asyncio.Event()
            code = 137  # what a container killed by its failed liveness probe reports
            try:
                async with asyncio.TaskGroup() as group:
                    watcher = group.create_task(self._when_started(started, pod, container, env, init=init))
                    attachment = self._attachment(container)
                    argv = [*self.kubelet.fabric.command_prefix(pod), *self._mount_prefix(pod, container, bound),
                            *tty_argv(program.argv, env, attachment)]
                    code = await run_process(argv, env=env, cwd=self.directory / "root", log=logfile,
                                             started=started, grace_s=lambda: self.grace_s,
                                             attachment=attachment,
                                             on_pid=functools.partial(self._set_pid, name))
                    watcher.cancel()
            except* LivenessFailed:
                logfile.write("stderr", b"container killed: liveness probe failed")
            finally:
                self.kubelet.attachments.pop((self.uid, name), None)
                self.pids.pop(name, None)
            at = times.now_rfc3339()
            self.set_container(name, lambda c: c.terminated(code, at), init=init)
            return code
        finally:
            logfile.close()

    async def _run_system(self, container: Obj, component: SystemComponent, *, init: bool) -> int:
        """A built-in component's container: no process; Running, Ready while the component is
        healthy, and the component's own log as the container's."""
        name = container["name"]
        restart = next((c.restart_count for c in (self.state.init if init else self.state.containers)
                        if c.name == name), 0)
        link = self.directory / "logs" / name / f"{restart}.log"
        component.log.touch()
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            with contextlib.suppress(FileNotFoundError):
                link.unlink()
            link.symlink_to(component.log.path)
        at = times.now_rfc3339()
        self.set_container(name, lambda c: c.running(at), init=init)
        if init:
            return 0
        ready: bool | None = None
        while True:
            healthy = component.healthy()
            if healthy != ready:
                ready = healthy
                self.set_container(name, functools.partial(_set_ready, ready=healthy), init=False)
            await asyncio.sleep(SYSTEM_HEALTH_S)

    def _mount_prefix(self, pod: Obj, container: Obj, bound: list[volumes.Bind]) -> list[str]:
        """As root: the shim that puts the volumes at their mount paths. Rootless: nothing, and
        an Event that says where the volumes are instead."""
        if not bound:
            return []
        if self.kubelet.mounts:
            volumes.prepare_sources(bound)
            return volumes.shim_argv(bound, str(container.get("workingDir") or ""))
        if not self._told_rootless:
            self._told_rootless = True
            where = ", ".join(f"{b.target}: ${name}" for b in bound
                              for name in volumes.mount_env([b]))
            events.record(self.kubelet.ops, pod, event_type="Normal", reason="VolumesNotMounted",
                          message=("rootless mode cannot mount volumes at their mountPath; the container "
                                   f"finds them through environment variables ({where})"),
                          component=MANAGER)
        return []

    def _set_pid(self, container: str, pid: int | None) -> None:
        if pid is None:
            self.pids.pop(container, None)
        else:
            self.pids[container] = pid

    def _attachment(self, container: Obj) -> Attachment | None:
        """Containers started with `stdin: true` can be attached to with input (`run -it`)."""
        if not container.get("stdin"):
            return None
        attachment = Attachment(tty=bool(container.get("tty")), stdin_once=bool(container.get("stdinOnce")))
        self.kubelet.attachments[(self.uid, container["name"])] = attachment
        return attachment

    async def _when_started(self, started: asyncio.Event, pod: Obj, container: Obj, env: dict[str, str], *,
                            init: bool) -> None:
        await started.wait()
        at = times.now_rfc3339()
        name = container["name"]
        self.set_container(name, lambda c: c.running(at), init=init)
        if init:
            return
        await self._probe(pod, container, env, real=True)

    async def _run_virtual(self, pod: Obj, container: Obj, *, init: bool) -> int:
        at = times.now_rfc3339()
        name = container["name"]
        self.set_container(name, lambda c: c.running(at), init=init)
        owners = pod["metadata"].get("ownerReferences") or []
        finishes = init or any(o.get("kind") == "Job" for o in owners) or pod["spec"].get("restartPolicy") == "Never"
        if finishes:  # kwok's pod-complete stage: virtual run-to-completion pods succeed
            await asyncio.sleep(VIRTUAL_JOB_RUN_S)
            return 0
        await self._probe(pod, container, {}, real=False)
        await asyncio.Event().wait()
        return 0

    async def _probe(self, pod: Obj, container: Obj, env: dict[str, str], *, real: bool) -> None:
        name = container["name"]
        readiness = container.get("readinessProbe")
        liveness = container.get("livenessProbe")

        def ready(ok: bool) -> None:
            self.set_container(name, lambda c: replace(c, ready=ok) if c.state == "running" else c, init=False)

        if not real or not readiness:
            ready(True)
        if not real or not (readiness or liveness):
            return
        cwd = self.directory / "root"
        fabric = self.kubelet.fabric

        async def dial(host: str, port: int, timeout_s: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            return await fabric.open_connection(host, port, timeout_s=timeout_s)

        prefix = self.kubelet.command_prefix(pod, container, env, cwd)
        async with asyncio.TaskGroup() as group:
            if readiness:
                check = probes.checker(readiness, container, pod_ip=self.state.pod_ip, env=env, cwd=cwd,
                                       dial=dial, prefix=prefix)
                group.create_task(probes.run_probe(check, probes.ProbeTiming.of(readiness), ready))
            if liveness:
                check = probes.checker(liveness, container, pod_ip=self.state.pod_ip, env=env, cwd=cwd,
                                       dial=dial, prefix=prefix)

                def alive(ok: bool) -> None:
                    if not ok:
                        events.record(self.kubelet.ops, pod, event_type="Warning", reason="Unhealthy",
                                      message=f"Liveness probe failed for container {name}", component=MANAGER)
                        raise LivenessFailed(name)

                group.create_task(probes.run_probe(check, probes.ProbeTiming.of(liveness), alive))


def tty_argv(argv: tuple[str, ...], env: dict[str, str], attachment: Attachment | None) -> list[str]:
    """With a tty, run the command through a shim that makes the pty its controlling terminal."""
    if attachment is None or not attachment.tty:
        return list(argv)
    executable = argv[0] if "/" in argv[0] else (shutil.which(argv[0], path=env.get("PATH")) or argv[0])
    return [sys.executable, "-I", "-S", "-c", CTTY_SHIM, executable, *argv]


def _set_ready(container: ContainerState, *, ready: bool) -> ContainerState:
    return replace(container, ready=ready) if container.state == "running" else container


class LivenessFailed(Exception):
    pass


class AddressUnavailable(Exception):
    pass


class Kubelet:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.ops = cluster.ops
        self.store = cluster.store
        self.pods_dir = cluster.config.data_dir / "pods"
        map_file = os.environ.get("TETHER_IMAGE_MAP")
        self.image_map = images.ImageMap.load(Path(map_file) if map_file else cluster.config.data_dir / "images.yaml")
        self.workers: dict[PodKey, PodWorker] = {}
        # (pod uid, container) -> the running process's stdin/tty, for `attach -i`
        self.attachments: dict[tuple[str, str], Attachment] = {}
        self.engine: Engine[PodKey] = Engine("kubelet", self._reconcile, workers=4)
        self._group: asyncio.TaskGroup | None = None
        self.allocate_address: Callable[[Obj, Obj | None], str] = self._node_range_address
        self.release_address: Callable[[PodWorker], None] = lambda worker: None
        self.dns_env: Callable[[], dict[str, str]] = dict
        # Where pods' addresses live and their processes run: the host (rootless) or the node's
        # network namespace (netns). exec and port-forward use `fabric.command_prefix(pod)` and
        # `fabric.open_connection(host, port, timeout_s=...)` to reach the pod's network.
        self.fabric: HostFabric = getattr(cluster, "fabric", None) or HostFabric(cluster.network)
        self.signer: tokens.Signer | None = None  # set by build(): projected ServiceAccount tokens
        # The cluster's own components, shown as pods in kube-system (system_pods.build sets it).
        self.system: Mapping[str, SystemComponent] = {}
        # Whether process pods get their own mount namespace with volumes at their mount paths
        # (root); decided once when the kubelet starts.
        self.mounts = False

    def _rt(self, plural: str) -> ResourceType:
        rt = self.ops.registry.lookup("", "v1", plural)
        assert rt is not None
        return rt

    def system_component(self, pod: Obj) -> SystemComponent | None:
        """The built-in component this pod stands for (then no process runs for it)."""
        name = component_of(pod)
        return self.system.get(name) if name is not None else None

    def lookup(self, plural: str) -> environment.Lookup:
        def find(namespace: str, name: str) -> Obj | None:
            return self.store.get(f"/{plural}", namespace, name)

        return find

    def node_ip(self, node: Obj | None) -> str:
        for address in ((node or {}).get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                return str(address.get("address", ""))
        return "127.0.0.1"

    def _node_range_address(self, pod: Obj, node: Obj | None) -> str:
        raise AddressUnavailable(f"no address allocator for node {pod['spec'].get('nodeName')}")

    # what streaming subresources (exec, attach, port-forward) need --------------------------

    def command_prefix(self, pod: Obj, container: Obj, env: dict[str, str], cwd: Path | None = None) -> list[str]:
        """What runs a command in the container's world: its network (netns mode) and, as root,
        its mounts (those of its running process; else made the same way). Raises NetnsError or
        volumes.MountError."""
        prefix = list(self.fabric.command_prefix(pod))
        if not self.mounts:
            return prefix
        worker = self.workers.get(_key(pod))
        if worker is None or worker.uid != pod["metadata"].get("uid"):
            worker = PodWorker(self, pod)
        working_dir = str(container.get("workingDir") or cwd or worker.directory / "root")
        pid = worker.pids.get(container["name"])
        if pid is not None:
            return prefix + volumes.enter_argv(pid, working_dir)
        bound = worker.binds(pod, container, env)
        if bound:
            volumes.prepare_sources(bound)
            prefix += volumes.shim_argv(bound, working_dir)
        return prefix

    def exec_environment(self, pod: Obj, container: Obj) -> tuple[dict[str, str], Path]:
        """The environment and working directory a command exec'd in this container gets.

        Raises environment.ConfigError when the container's env cannot be built.
        """
        worker = self.workers.get(_key(pod))
        if worker is None or worker.uid != pod["metadata"].get("uid"):
            worker = PodWorker(self, pod)  # not running here: same env rules, no state
        env = worker._env(pod, container)
        if not env.get("POD_IP"):  # a pod this kubelet does not run: its recorded address
            env["POD_IP"] = str((pod.get("status") or {}).get("podIP", ""))
        cwd = worker.directory / "root"
        cwd.mkdir(parents=True, exist_ok=True)
        return env, cwd

    def container_pids(self) -> dict[PodKey, dict[str, int]]:
        """The main process of each running container of each pod this kubelet runs."""
        return {key: dict(worker.pids) for key, worker in self.workers.items() if worker.pids}

    # supervision -------------------------------------------------------------------------

    async def run(self) -> None:
        if os.environ.get(MOUNTS_ENV, "") != "env":
            self.mounts = await volumes.mount_namespaces_work()
        log.info("kubelet: volumes at their mount paths: %s", "yes (mount namespaces)" if self.mounts
                 else "no (rootless: TETHER_MOUNT_* variables)")

        def resync() -> None:
            for pod in self.store.list_objects(PODS):
                self.engine.enqueue(_key(pod))
            for key in list(self.workers):  # pods deleted while we were not listening
                self.engine.enqueue(key)

        def on_event(event: Event) -> None:
            self.engine.enqueue((event.namespace, event.name))

        async with asyncio.TaskGroup() as group:
            self._group = group
            group.create_task(self.engine.run())
            group.create_task(follow(self.store, PODS, None, on_event=on_event, resync=resync))

    async def _reconcile(self, key: PodKey) -> None:
        pod = self.store.get(PODS, *key)
        worker = self.workers.get(key)
        if worker is not None and (pod is None or pod["metadata"].get("uid") != worker.uid):
            worker.deleting = False
            self._stop(worker)
            worker = None
        if pod is None or not (pod.get("spec") or {}).get("nodeName"):
            return
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            if worker is None:
                self._delete_now(pod)
                return
            worker.deleting = True
            worker.grace_s = float(meta.get("deletionGracePeriodSeconds") or 0)
            self._stop(worker)
            return
        phase = (pod.get("status") or {}).get("phase")
        if worker is None and phase not in ("Succeeded", "Failed") and self._group is not None:
            worker = PodWorker(self, pod)
            self.workers[key] = worker
            worker.task = self._group.create_task(self._supervise(worker))

    async def _supervise(self, worker: PodWorker) -> None:
        try:
            await worker.run()
        except Exception:
            log.exception("pod %s/%s failed in the kubelet", *worker.key)
        finally:
            if self.workers.get(worker.key) is worker:
                del self.workers[worker.key]
                self.engine.enqueue(worker.key, delay_s=RETRY_S)

    def _stop(self, worker: PodWorker) -> None:
        if worker.task is not None and not worker.task.done():
            worker.task.cancel()

    # API writes --------------------------------------------------------------------------

    def write_status(self, pod: Obj, status: Obj) -> None:
        updated = copy.deepcopy(pod)
        updated["status"] = status
        meta = pod["metadata"]
        try:
            self.ops.update(self._rt("pods"), meta.get("namespace", ""), meta["name"], updated,
                            WriteOptions(manager=MANAGER), subresource="status")
        except ApiError as exc:
            if not exc.not_found:
                log.warning("status of pod %s/%s not written: %s", meta.get("namespace"), meta["name"], exc)

    def _delete_now(self, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            self.ops.delete(self._rt("pods"), meta.get("namespace", ""), meta["name"],
                            {"gracePeriodSeconds": 0, "preconditions": {"uid": meta.get("uid")}},
                            WriteOptions(manager=MANAGER))
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise

    def remove_pod(self, worker: PodWorker) -> None:
        pod = worker.pod()
        if pod is not None:
            self._delete_now(pod)


def _key(pod: Obj) -> PodKey:
    return (pod["metadata"].get("namespace", ""), pod["metadata"]["name"])
