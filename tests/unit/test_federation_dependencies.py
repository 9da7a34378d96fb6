"""propagateDeps' pure parts: the requires annotation and a dependency's own Works."""

from __future__ import annotations

from tether.federation import works as W
from tether.federation.dependencies import (
    DEPENDENCY_DIALECT,
    REQUIRES_ANNOTATION,
    decode_requires,
    dependency_plan,
    dependency_source_hash,
    dependency_works,
    encode_requires,
)
from tether.federation.model import PropagationPlan, ResourceRef

CONFIG = ResourceRef("v1", "ConfigMap", "shop", "shop-config")
ACCOUNT = ResourceRef("v1", "ServiceAccount", "shop", "runner")


def test_requires_round_trip() -> None:
    text = encode_requires([ACCOUNT, CONFIG, CONFIG])
    assert text == "ConfigMap/shop-config,ServiceAccount/runner"
    assert decode_requires(text, "shop") == {CONFIG, ACCOUNT}
    assert decode_requires("", "shop") == frozenset()
    # kinds that are never dependencies, and junk, are ignored
    assert decode_requires("Deployment/x,,ConfigMap/,Secret/s", "shop") == {
        ResourceRef("v1", "Secret", "shop", "s")}


def test_dependency_plan_and_works() -> None:
    obj = {"apiVersion": "v1", "kind": "ServiceAccount",
           "metadata": {"name": "runner", "namespace": "shop", "uid": "u1",
                        "resourceVersion": "7"},
           "secrets": [{"name": "runner-token"}]}
    plan = dependency_plan(obj, ACCOUNT, ["member2", "member1", "member2"], overwrite=True,
                           preserve=False)
    assert [w.cluster for w in plan.works] == ["member1", "member2"]
    assert plan.conflict_resolution == "Overwrite" and not plan.preserve_on_deletion
    manifest = plan.works[0].manifest
    assert "secrets" not in manifest and "uid" not in manifest["metadata"]
    assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tether"
    works = dependency_works(plan)
    assert [w.name for w in works] == ["dependency-serviceaccount-shop-runner"] * 2
    body = works[0].body
    labels = body["metadata"]["labels"]
    assert labels[W.DIALECT_LABEL] == DEPENDENCY_DIALECT
    # never found among the Works of a template that is the same object
    assert labels[W.SOURCE_HASH_LABEL] == dependency_source_hash(ACCOUNT)
    assert labels[W.SOURCE_HASH_LABEL] != W.short_hash(W.source_key(ACCOUNT), 16)
    assert W.work_source(body) == (DEPENDENCY_DIALECT, ACCOUNT)
    member = body["spec"]["workload"]["manifests"][0]
    assert member["metadata"]["annotations"][W.WORK_NAME_ANNOTATION] == (
        "tether-es-member1/dependency-serviceaccount-shop-runner")
    assert body["metadata"]["annotations"][W.ENSURE_NAMESPACE_ANNOTATION] == "shop"
    assert REQUIRES_ANNOTATION not in body["metadata"]["annotations"]


def test_template_plan_without_dependencies_builds_no_dependency_works() -> None:
    assert dependency_works(PropagationPlan(CONFIG, "karmada")) == []
