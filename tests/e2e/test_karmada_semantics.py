"""Karmada's semantics as its users meet them, with the manifests of `examples/karmada/`.

A hub (`host`) with members `member1` and `member2`, as in Karmada's samples; every test works
in a namespace of its own and deletes what it made. Deletions are done the way users do them,
with kubectl, which waits until the object is gone (a finalizer left behind would make it fail).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_util import unique
from fed_fleet import EXAMPLES, Fleet, fleet_of, report, until

pytestmark = pytest.mark.e2e

KARMADA = EXAMPLES / "karmada"
DEPLOY = str(KARMADA / "lifecycle-nginx-deployment.yaml")
POLICY = str(KARMADA / "lifecycle-nginx-propagationpolicy.yaml")
MEMBERS = ("member1", "member2")
DELETE_TIMEOUT = "--timeout=60s"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with fleet_of(tmp_path_factory.mktemp("karmada"), tmp_path_factory.mktemp("karmada-cache"),
                  MEMBERS) as started:
        yield started


def namespace(fleet: Fleet) -> str:
    name = unique("k")
    fleet.kubectl("host", "create", "namespace", name)
    return name


async def copies(fleet: Fleet, ns: str, name: str = "nginx",
                 members: tuple[str, ...] = MEMBERS) -> dict[str, Any]:
    """Per member, the Deployment's replicas (None when it is not there)."""
    out: dict[str, Any] = {}
    for member in members:
        obj = await fleet.get(member, "apps/v1", "Deployment", name, ns)
        out[member] = None if obj is None else obj["spec"]["replicas"]
    return out


async def propagate_nginx(fleet: Fleet, ns: str) -> None:
    # a member another test rejoined or restarted may not be Ready yet: a divided schedule made
    # before it is, is kept (as in Karmada), so wait rather than expect one replica each
    fleet.wait_members_ready()
    fleet.kubectl("host", "apply", "-n", ns, "-f", DEPLOY, "-f", POLICY)

    async def one_each() -> bool:
        return await copies(fleet, ns) == {"member1": 1, "member2": 1}

    await until(one_each, "one replica in each member")


async def gone_everywhere(fleet: Fleet, ns: str, members: tuple[str, ...] = MEMBERS) -> None:
    async def gone() -> bool:
        template = await fleet.get("host", "apps/v1", "Deployment", "nginx", ns)
        return template is None and set((await copies(fleet, ns, members=members)).values()) == {
            None}

    await until(gone, "the template and every member copy gone")


async def test_resource_binding_shows_the_scheduling_result(fleet: Fleet) -> None:
    ns = namespace(fleet)
    await propagate_nginx(fleet, ns)

    def bindings() -> list[dict[str, Any]]:
        out = fleet.kubectl("host", "get", "rb", "-n", ns, "-o", "json").stdout
        return list(json.loads(out)["items"])

    async def settled() -> dict[str, Any] | None:
        found = bindings()
        if len(found) != 1:
            return None
        status = found[0].get("status") or {}
        conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
        ready = [a for a in status.get("aggregatedStatus") or []
                 if a.get("applied") and a.get("health") == "Healthy"
                 and (a.get("status") or {}).get("readyReplicas") == 1]
        return found[0] if conds == {"Scheduled": "True", "FullyApplied": "True"} and len(
            ready) == 2 else None

    rb = await until(settled, "the binding scheduled, fully applied, both members healthy")
    assert rb["metadata"]["name"] == "nginx-deployment"
    assert rb["spec"]["resource"]["kind"] == "Deployment"
    assert rb["spec"]["resource"]["namespace"] == ns
    assert rb["spec"]["replicas"] == 2
    assert rb["spec"]["clusters"] == [{"name": "member1", "replicas": 1},
                                      {"name": "member2", "replicas": 1}]
    assert rb["spec"]["placement"]["clusterAffinity"]["clusterNames"] == ["member1", "member2"]
    table = fleet.kubectl("host", "get", "rb", "-n", ns).stdout.split()
    assert table[:4] == ["NAME", "SCHEDULED", "FULLYAPPLIED", "AGE"], table
    assert table[4:7] == ["nginx-deployment", "True", "True"], table
    fleet.kubectl("host", "delete", "-n", ns, "-f", DEPLOY, "-f", POLICY, DELETE_TIMEOUT)
    await gone_everywhere(fleet, ns)

    async def no_binding() -> bool:
        return not bindings()

    await until(no_binding, "the binding gone with its template")


async def test_template_then_policy(fleet: Fleet) -> None:
    ns = namespace(fleet)
    await propagate_nginx(fleet, ns)
    fleet.kubectl("host", "delete", "-n", ns, "-f", DEPLOY, DELETE_TIMEOUT)
    fleet.kubectl("host", "delete", "-n", ns, "-f", POLICY, DELETE_TIMEOUT)
    await gone_everywhere(fleet, ns)


async def test_policy_then_template_keeps_copies_until_the_template_goes(fleet: Fleet) -> None:
    """Karmada keeps a template's binding (and so its copies) when its policy goes, until the
    template itself is deleted; then the copies go with it."""
    ns = namespace(fleet)
    await propagate_nginx(fleet, ns)
    fleet.kubectl("host", "delete", "-n", ns, "-f", POLICY, DELETE_TIMEOUT)

    async def unclaimed() -> dict[str, Any] | None:
        cond = (report(await fleet.get("host", "apps/v1", "Deployment", "nginx", ns)).get(
            "conditions") or [{}])[0]
        return cond if cond.get("reason") == "PolicyNotFound" else None

    cond = await until(unclaimed, "the template reported as no longer selected")
    assert "member1, member2" in cond["message"], cond
    assert await copies(fleet, ns) == {"member1": 1, "member2": 1}
    fleet.kubectl("host", "delete", "-n", ns, "-f", DEPLOY, DELETE_TIMEOUT)
    await gone_everywhere(fleet, ns)


async def test_template_and_policy_in_one_delete(fleet: Fleet) -> None:
    ns = namespace(fleet)
    await propagate_nginx(fleet, ns)
    fleet.kubectl("host", "delete", "-n", ns, "-f", DEPLOY, "-f", POLICY, DELETE_TIMEOUT)
    await gone_everywhere(fleet, ns)


async def test_both_deleted_while_the_hub_is_down(fleet: Fleet) -> None:
    ns = namespace(fleet)
    await propagate_nginx(fleet, ns)
    with fleet.hub_stopped():
        fleet.kubectl("host", "delete", "-n", ns, "-f", POLICY)
        fleet.kubectl("host", "delete", "-n", ns, "-f", DEPLOY, "--wait=false")
    await gone_everywhere(fleet, ns)

    async def released() -> bool:
        found = fleet.kubectl("host", "get", "configmap", "-n", "tether-system",
                              "tether-finalized-kinds", "-o", "jsonpath={.data.karmada}")
        return found.stdout == "[]"

    # nothing is left to finalize: the hub no longer needs to watch Deployments
    await until(released, "apps/v1/Deployment released from the finalized kinds")


async def test_dependencies_follow_edits_and_stay_while_still_used(fleet: Fleet) -> None:
    ns = namespace(fleet)
    config, policy = str(KARMADA / "deps-configmap.yaml"), str(KARMADA / "deps-propagationpolicy.yaml")
    frontend = str(KARMADA / "deps-deployment-frontend.yaml")
    backend = str(KARMADA / "deps-deployment-backend.yaml")
    fleet.kubectl("host", "apply", "-n", ns, "-f", config, "-f", frontend, "-f", backend, "-f",
                  policy)

    async def config_in_members(currency: str | None) -> dict[str, Any] | None:
        found = {m: await fleet.get(m, "v1", "ConfigMap", "shop-config", ns) for m in MEMBERS}
        if currency is None:
            return found if all(o is None for o in found.values()) else None
        ok = all(o is not None and o["data"] == {"currency": currency} for o in found.values())
        return found if ok else None

    before = await until(lambda: config_in_members("EUR"), "shop-config in both members")
    # an edit on the hub reaches the members through events (this hub's resync is 15 min)
    fleet.kubectl("host", "-n", ns, "patch", "configmap", "shop-config", "--type=merge", "-p",
                  '{"data": {"currency": "CHF"}}')
    edited = await until(lambda: config_in_members("CHF"), "the edit of shop-config in members")
    assert {m: o["metadata"]["uid"] for m, o in edited.items()} == {
        m: o["metadata"]["uid"] for m, o in before.items()}
    # frontend goes: backend still mounts shop-config, which is never taken away meanwhile
    fleet.kubectl("host", "delete", "-n", ns, "-f", frontend, DELETE_TIMEOUT)
    assert set((await copies(fleet, ns, "frontend")).values()) == {None}
    still = await config_in_members("CHF")
    assert still is not None, "shop-config left the members while backend uses it"
    assert {m: o["metadata"]["uid"] for m, o in still.items()} == {
        m: o["metadata"]["uid"] for m, o in before.items()}
    # the last workload using it goes: so does shop-config
    fleet.kubectl("host", "delete", "-n", ns, "-f", backend, DELETE_TIMEOUT)
    await until(lambda: config_in_members(None), "shop-config gone with its last user")
    fleet.kubectl("host", "delete", "-n", ns, "-f", policy, "-f", config, DELETE_TIMEOUT)


async def test_preserved_copies_become_the_members_own(fleet: Fleet) -> None:
    ns = namespace(fleet)
    files = ("-f", str(KARMADA / "preserve-configmap.yaml"), "-f",
             str(KARMADA / "preserve-propagationpolicy.yaml"))
    fleet.kubectl("host", "apply", "-n", ns, *files)

    async def everywhere() -> bool:
        found = [await fleet.get(m, "v1", "ConfigMap", "settings", ns) for m in MEMBERS]
        return all(found)

    await until(everywhere, "settings in both members")
    fleet.kubectl("host", "delete", "-n", ns, *files, DELETE_TIMEOUT)
    for member in MEMBERS:
        kept = await fleet.get(member, "v1", "ConfigMap", "settings", ns)
        assert kept is not None and kept["data"] == {"mode": "production"}, member
        meta = kept["metadata"]
        assert "app.kubernetes.io/managed-by" not in (meta.get("labels") or {}), json.dumps(kept)
        assert not any(k.startswith(("tether.io/", "work.tether.io/"))
                       for k in meta.get("annotations") or {}), meta
    # an unjoin deletes what tether propagated, and no longer counts these among it
    fleet.unjoin("member2")
    try:
        assert await fleet.get("member2", "v1", "ConfigMap", "settings", ns) is not None
        assert await fleet.get("member2", "v1", "Namespace", ns) is not None
    finally:
        fleet.join("member2")


async def test_member_unjoined_first(fleet: Fleet) -> None:
    ns = namespace(fleet)
    await propagate_nginx(fleet, ns)
    fleet.unjoin("member2")
    try:
        assert (await copies(fleet, ns))["member2"] is None  # unjoin removed what it propagated
        fleet.kubectl("host", "delete", "-n", ns, "-f", DEPLOY, "-f", POLICY, DELETE_TIMEOUT)
        await gone_everywhere(fleet, ns, ("member1",))
    finally:
        fleet.join("member2")
    assert not fleet.tracebacks()
