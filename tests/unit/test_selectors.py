from __future__ import annotations

from typing import Any

import pytest

from tether.objects import selectors
from tether.objects.selectors import SelectorError

LABELS = {"app": "web", "tier": "frontend", "replicas": "3", "example.com/team": "a"}


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("", LABELS, True),
        ("app=web", LABELS, True),
        ("app==web", LABELS, True),
        ("app=db", LABELS, False),
        ("app!=db", LABELS, True),
        ("app!=web", LABELS, False),
        ("missing!=x", LABELS, True),  # != matches objects without the key
        ("app in (web,db)", LABELS, True),
        ("app in (db)", LABELS, False),
        ("app notin (db,cache)", LABELS, True),
        ("app notin (web)", LABELS, False),
        ("missing notin (x)", LABELS, True),  # notin matches objects without the key
        ("missing in (x)", LABELS, False),
        ("app", LABELS, True),
        ("missing", LABELS, False),
        ("!missing", LABELS, True),
        ("!app", LABELS, False),
        ("replicas>2", LABELS, True),
        ("replicas>3", LABELS, False),
        ("replicas<4", LABELS, True),
        ("replicas<3", LABELS, False),
        ("app>1", LABELS, False),  # a non-integer label never compares
        ("missing>1", LABELS, False),
        ("app=web,tier=frontend", LABELS, True),
        ("app=web,tier=backend", LABELS, False),
        ("  app = web ,  tier in ( frontend , x )  ", LABELS, True),
        ("app in(web)", LABELS, True),
        ("example.com/team=a", LABELS, True),
        ("app=", {"app": ""}, True),
        ("app=", LABELS, False),
        ("app in ()", {"app": ""}, True),
        ("app in (,x)", {"app": ""}, True),
        ("app in (x,)", {"app": ""}, True),
        ("app in (a,,b)", {"app": ""}, True),
        ("in=x", {"in": "x"}, True),  # `in` is only a keyword where an operator is expected
        ("x in (in,notin)", {"x": "notin"}, True),
        ("app", {}, False),
    ],
)
def test_label_selector_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    assert selectors.parse_label_selector(text).matches(labels) is expected


def test_label_selector_matches_none_labels() -> None:
    assert selectors.parse_label_selector("!app").matches(None)
    assert not selectors.parse_label_selector("app").matches(None)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("tier=a,app=b", "app=b,tier=a"),
        ("b==1", "b==1"),
        ("a in (z,y,x,y)", "a in (x,y,z)"),
        ("a notin (b)", "a notin (b)"),
        ("!a,b", "!a,b"),
        ("a>5,b<6", "a>5,b<6"),
        ("a!=", "a!="),
    ],
)
def test_label_selector_string_is_canonical(text: str, canonical: str) -> None:
    assert str(selectors.parse_label_selector(text)) == canonical


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("a=b=c", "found '=', expected: ',' or 'end of string'"),
        ("a=b,", "found '', expected: identifier after ','"),
        (",a", "found ',', expected: !, identifier, or 'end of string'"),
        ("a in b", "unable to parse requirement: found 'b' expected: '('"),
        ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
        ("a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
        (
            "a foo b",
            "unable to parse requirement: found 'foo', expected: in, notin, =, ==, !=, gt, lt",
        ),
        ("!", "unable to parse requirement: found '', expected: identifier"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
        ("a=(", "unable to parse requirement: found '(', expected: identifier"),
        (
            "a>b",
            'unable to parse requirement: values[0]: Invalid value: "b": '
            "for 'Gt', 'Lt' operators, the value must be an integer",
        ),
    ],
)
def test_label_selector_parse_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as exc:
        selectors.parse_label_selector(text)
    assert str(exc.value) == message


def test_label_selector_invalid_key_message() -> None:
    with pytest.raises(SelectorError) as exc:
        selectors.parse_label_selector("-bad=x")
    assert str(exc.value) == (
        'unable to parse requirement: <nil>: Invalid value: "-bad": name part must consist of '
        "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
        "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    )


def test_label_selector_invalid_value_message() -> None:
    with pytest.raises(SelectorError) as exc:
        selectors.parse_label_selector("app=-x")
    assert str(exc.value).startswith(
        'unable to parse requirement: values[0][app]: Invalid value: "-x": a valid label must be '
        "an empty string or consist of alphanumeric characters"
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a=" + "v" * 64, "must be no more than 63 characters"),
        ("k" * 64, "name part must be no more than 63 characters"),
        ("Bad_Prefix/x", "prefix part a lowercase RFC 1123 subdomain must consist of"),
        ("/x", "prefix part must be non-empty"),
        ("a/b/c", "a qualified name must consist of"),
        ("a/", "name part must be non-empty"),
    ],
)
def test_label_selector_validates_syntax(text: str, fragment: str) -> None:
    with pytest.raises(SelectorError, match="unable to parse requirement") as exc:
        selectors.parse_label_selector(text)
    assert fragment in str(exc.value)


def test_label_selector_accepts_63_char_value_and_prefixed_key() -> None:
    sel = selectors.parse_label_selector("app.kubernetes.io/name=" + "v" * 63)
    assert sel.matches({"app.kubernetes.io/name": "v" * 63})


@pytest.mark.parametrize(
    ("spec", "labels", "expected"),
    [
        ({}, {"any": "thing"}, True),
        ({"matchLabels": {"app": "web"}}, {"app": "web", "x": "y"}, True),
        ({"matchLabels": {"app": "web"}}, {"app": "db"}, False),
        (
            {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]},
            {"app": "b"},
            True,
        ),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {"app": ""}, True),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {"app": ""}, False),
        (
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe"]}],
            },
            {"app": "web", "tier": "be"},
            False,
        ),
        ({"matchLabels": None, "matchExpressions": None}, {}, True),
    ],
)
def test_label_selector_from_dict(
    spec: dict[str, Any], labels: dict[str, str], expected: bool
) -> None:
    assert selectors.label_selector_from_dict(spec).matches(labels) is expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            '"Gt" is not a valid label selector operator',
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
            "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            "values: Invalid value: [x]: values set must be empty for exists and does not exist",
        ),
    ],
)
def test_label_selector_from_dict_errors(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(SelectorError) as exc:
        selectors.label_selector_from_dict(spec)
    assert str(exc.value) == message


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ({}, ""),
        (None, ""),
        ({"matchLabels": {"z": "1", "a": "2"}}, "a=2,z=1"),
        (
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [
                    {"key": "env", "operator": "NotIn", "values": ["prod", "dev"]},
                    {"key": "beta", "operator": "DoesNotExist"},
                ],
            },
            "app=web,!beta,env notin (dev,prod)",
        ),
    ],
)
def test_label_selector_to_string(spec: dict[str, Any] | None, text: str) -> None:
    assert selectors.label_selector_to_string(spec) == text
    if spec:
        parsed = selectors.parse_label_selector(text)
        assert selectors.label_selector_to_string(parsed) == text


def test_label_selector_exact_and_empty() -> None:
    sel = selectors.parse_label_selector("app=web,tier in (a,b)")
    assert sel.exact("app") == "web"
    assert sel.exact("tier") is None
    assert sel.exact("other") is None
    assert not sel.empty
    assert selectors.parse_label_selector("  ").empty


# ---------------------------------------------------------------------------------------------
# Field selectors

POD_FIELDS = selectors.selectable_fields("", "Pod", namespaced=True)

RUNNING = {
    "metadata": {"name": "p1", "namespace": "default"},
    "spec": {"nodeName": "n1", "restartPolicy": "Always", "hostNetwork": True},
    "status": {"phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}]},
}
PENDING = {
    "metadata": {"name": "p2", "namespace": "kube-system"},
    "spec": {},
    "status": {"phase": "Pending"},
}


@pytest.mark.parametrize(
    ("text", "obj", "expected"),
    [
        ("", RUNNING, True),
        ("metadata.name=p1", RUNNING, True),
        ("metadata.name==p1", RUNNING, True),
        ("metadata.name!=p1", RUNNING, False),
        ("metadata.namespace=default", RUNNING, True),
        ("spec.nodeName=n1,status.phase=Running", RUNNING, True),
        ("spec.nodeName=n1,status.phase=Pending", RUNNING, False),
        ("spec.nodeName=", PENDING, True),  # unscheduled pods
        ("spec.nodeName=", RUNNING, False),
        ("spec.nodeName!=", RUNNING, True),
        ("spec.hostNetwork=true", RUNNING, True),
        ("spec.hostNetwork=false", PENDING, True),  # Go zero value of an absent bool
        ("status.podIP=10.0.0.5", RUNNING, True),
        ("status.nominatedNodeName=", RUNNING, True),
        ("metadata.name=p1,", RUNNING, True),  # empty terms are ignored
    ],
)
def test_field_selector_on_pods(text: str, obj: dict[str, Any], expected: bool) -> None:
    assert selectors.parse_field_selector(text, POD_FIELDS).matches(obj) is expected


def test_field_selector_escapes() -> None:
    allowed = {"metadata.name"}
    sel = selectors.parse_field_selector(r"metadata.name=a\,b\=c\\d", allowed)
    assert sel.matches({"metadata": {"name": "a,b=c\\d"}})
    assert str(sel) == r"metadata.name=a\,b\=c\\d"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("spec.foo=x", "field label not supported: spec.foo"),
        ("metadata.labels=x", "field label not supported: metadata.labels"),
        ("metadata.name", "invalid selector: 'metadata.name'; can't understand 'metadata.name'"),
        ("metadata.name=a=b", "invalid field selector: unescaped character in value: ="),
        (r"metadata.name=a\x", r"invalid field selector: invalid escape sequence: \x"),
        ("metadata.name=a\\", "invalid field selector: invalid escape sequence: \\"),
    ],
)
def test_field_selector_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as exc:
        selectors.parse_field_selector(text, POD_FIELDS)
    assert str(exc.value) == message


def test_field_selector_exact() -> None:
    sel = selectors.parse_field_selector("metadata.name=p1,status.phase!=Failed", POD_FIELDS)
    assert sel.exact("metadata.name") == "p1"
    assert sel.exact("status.phase") is None
    assert selectors.parse_field_selector("", POD_FIELDS).empty


EVENT = {
    "metadata": {"name": "e1", "namespace": "default"},
    "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default", "uid": "u-1"},
    "reason": "Scheduled",
    "type": "Normal",
    "reportingComponent": "default-scheduler",
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("involvedObject.kind=Pod,involvedObject.name=p1", True),
        ("involvedObject.uid=u-1", True),
        ("involvedObject.fieldPath=", True),
        ("reason=Scheduled,type=Normal", True),
        ("source=default-scheduler", True),  # falls back to reportingComponent
        ("reportingComponent=default-scheduler", True),
        ("involvedObject.name=p2", False),
    ],
)
def test_field_selector_on_events(text: str, expected: bool) -> None:
    allowed = selectors.selectable_fields("", "Event", namespaced=True)
    assert selectors.parse_field_selector(text, allowed).matches(EVENT) is expected


@pytest.mark.parametrize(
    ("field", "obj", "value"),
    [
        ("spec.unschedulable", {"spec": {"unschedulable": True}}, "true"),
        ("spec.unschedulable", {"spec": {}}, "false"),
        ("status.replicas", {"status": {"replicas": 3}}, "3"),
        ("status.replicas", {}, "0"),
        ("status.successful", {"status": {"succeeded": 2}}, "2"),
        ("source", {"source": {"component": "kubelet"}, "reportingComponent": "x"}, "kubelet"),
        ("name", {"metadata": {"name": "ns1"}}, "ns1"),
        ("status.podIP", {"status": {"podIP": "10.1.1.1"}}, "10.1.1.1"),
        ("spec.size", {"spec": {"size": 2.0}}, "2"),
        ("spec.color", {"spec": {"color": "red"}}, "red"),
        ("spec.missing", {"spec": {}}, ""),
        ("spec.deep.x", {"spec": "not-a-map"}, ""),
    ],
)
def test_field_value(field: str, obj: dict[str, Any], value: str) -> None:
    assert selectors.field_value(obj, field) == value


@pytest.mark.parametrize(
    ("group", "kind", "namespaced", "extra", "expected"),
    [
        ("", "ConfigMap", True, (), {"metadata.name", "metadata.namespace"}),
        ("", "Node", False, (), {"metadata.name", "spec.unschedulable"}),
        ("", "Namespace", False, (), {"metadata.name", "status.phase", "name"}),
        ("", "Secret", True, (), {"metadata.name", "metadata.namespace", "type"}),
        (
            "",
            "Service",
            True,
            (),
            {"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"},
        ),
        (
            "apps",
            "ReplicaSet",
            True,
            (),
            {"metadata.name", "metadata.namespace", "status.replicas"},
        ),
        ("batch", "Job", True, (), {"metadata.name", "metadata.namespace", "status.successful"}),
        (
            "example.com",
            "Widget",
            True,
            (".spec.color", "spec.size"),
            {"metadata.name", "metadata.namespace", "spec.color", "spec.size"},
        ),
        ("apps", "Pod", True, (), {"metadata.name", "metadata.namespace"}),  # group matters
    ],
)
def test_selectable_fields(
    group: str, kind: str, namespaced: bool, extra: tuple[str, ...], expected: set[str]
) -> None:
    assert selectors.selectable_fields(group, kind, namespaced, extra) == expected


def test_selectable_fields_pods_and_events() -> None:
    assert {"spec.nodeName", "spec.schedulerName", "spec.serviceAccountName"} <= POD_FIELDS
    assert {"status.phase", "status.podIP", "status.nominatedNodeName"} <= POD_FIELDS
    events = selectors.selectable_fields("", "Event", namespaced=True)
    assert {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    } <= events


def test_custom_resource_selectable_field() -> None:
    allowed = selectors.selectable_fields("example.com", "Widget", True, [".spec.color"])
    sel = selectors.parse_field_selector("spec.color=red", allowed)
    assert sel.matches({"spec": {"color": "red"}})
    assert not sel.matches({"spec": {"color": "blue"}})
