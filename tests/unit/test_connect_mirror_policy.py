"""MirrorPolicy: parsing, and which members mirror which."""

from __future__ import annotations

from typing import Any

import pytest

from tether.connect.mirror.policy import (
    Member,
    PolicyError,
    mirror_policy_crd,
    parse_policy,
    plan_members,
    policy_status,
)
from tether.kube import ClusterCredentials
from tether.local import schema


def member(name: str, ready: bool = True, **labels: str) -> Member:
    credentials = ClusterCredentials.from_token(server=f"https://{name}.example", token="t", ca_bundle=None)
    return Member(name, credentials, ready, labels, ("zone-a",))


def policy(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"mirrorNamespace": "sys-semaphore", **spec}}


def test_defaults_are_semaphores_documented_labels() -> None:
    spec = parse_policy(policy())
    assert spec.settings.mirror_svc_label_selector == "mirror.semaphore.uw.io/mirror-service=true"
    assert spec.settings.service_sync and spec.settings.endpoint_slice_sync
    assert spec.stale.policy == "keep" and spec.stale.after_s == 30.0


@pytest.mark.parametrize(("spec", "field"), [
    ({"mirrorNamespace": "Bad_NS"}, "spec.mirrorNamespace"),
    ({"stalePolicy": "drop"}, "spec.stalePolicy"),
    ({"staleAfter": "soon"}, "spec.staleAfter"),
    ({"mirrorSvcLabelSelector": "a in (b"}, "spec.mirrorSvcLabelSelector"),
])
def test_bad_policies(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(policy(**spec))
    assert str(caught.value).startswith(field)


def test_every_ready_member_mirrors_every_other() -> None:
    spec = parse_policy(policy())
    instances, taking_part = plan_members("p", spec, [member("gcp"), member("aws"), member("dc", ready=False)], ())
    assert taking_part == {"aws", "gcp"}
    assert [(i.local, i.remotes) for i in instances] == [("aws", ("gcp",)), ("gcp", ("aws",))]
    assert instances[0].zones == ("zone-a",)


def test_a_member_that_took_part_stays_while_not_ready() -> None:
    spec = parse_policy(policy())
    instances, taking_part = plan_members("p", spec, [member("aws"), member("gcp", ready=False)], {"aws", "gcp"})
    assert taking_part == {"aws", "gcp"} and len(instances) == 2
    # ... until its Cluster is gone
    instances, taking_part = plan_members("p", spec, [member("aws")], {"aws", "gcp"})
    assert taking_part == {"aws"} and instances == []


def test_cluster_selector() -> None:
    spec = parse_policy(policy(clusterSelector={"matchLabels": {"mesh": "on"}}))
    instances, _ = plan_members("p", spec, [member("a", mesh="on"), member("b", mesh="on"), member("c")], ())
    assert sorted(i.local for i in instances) == ["a", "b"]


def test_one_member_is_not_enough() -> None:
    spec = parse_policy(policy())
    instances, taking_part = plan_members("p", spec, [member("aws")], ())
    assert instances == [] and taking_part == {"aws"}
    assert policy_status(spec, "", instances, 1)["conditions"][0]["reason"] == "TooFewClusters"


def test_the_crd_schema_is_structural() -> None:
    crd = mirror_policy_crd()
    assert schema.check_structural(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]) == []
