"""Semaphore's names and the hashed form of names that do not fit."""

from __future__ import annotations

import pytest

from tether.connect import names


@pytest.mark.parametrize(("prefix", "namespace", "name", "expected"), [
    ("aws", "sys-log", "fluentd", "aws-sys-log-73736d-fluentd"),
    ("c1", "a", "b", "c1-a-73736d-b"),
])
def test_mirror_name_is_semaphores(prefix: str, namespace: str, name: str, expected: str) -> None:
    assert names.mirror_name(prefix, namespace, name) == expected


def test_global_name() -> None:
    assert names.global_name("sys-log", "fluentd") == "gl-sys-log-73736d-fluentd"


def test_long_names_are_hashed_stably_and_fit() -> None:
    long_ns = "a-very-long-namespace-name-for-the-logging-stack"
    first = names.mirror_name("aws", long_ns, "fluentd-aggregator")
    again = names.mirror_name("aws", long_ns, "fluentd-aggregator")
    other = names.mirror_name("aws", long_ns, "fluentd-aggregator2")
    assert first == again
    assert first != other
    assert len(first) <= 63 and len(other) <= 63
    assert names.is_label(first)
    assert first.startswith("aws-a-very-long-namespace")
    # exactly 63 fits unchanged, 64 does not
    assert names.fit("x" * 63) == "x" * 63
    assert len(names.fit("x" * 64)) <= 63 and names.fit("x" * 64) != "x" * 63


def test_hashed_head_never_ends_in_a_dash() -> None:
    name = "ab-" * 30
    fitted = names.fit(name)
    assert "--" not in fitted and names.is_label(fitted)


@pytest.mark.parametrize(("name", "prefix", "expected"), [
    ("aws-sys-log-73736d-fluentd", "aws", ("sys-log", "fluentd")),
    ("aws-sys-log-73736d-fluentd", "gcp", None),
    ("aws-plain", "aws", None),
    ("gl-ns-73736d-svc", "gl", ("ns", "svc")),
])
def test_split_mirror_name(name: str, prefix: str, expected: tuple[str, str] | None) -> None:
    assert names.split_mirror_name(name, prefix) == expected


@pytest.mark.parametrize(("service", "slice_name", "expected"), [
    ("fluentd", "fluentd-x8k2p", "aws-sys-log-73736d-fluentd-x8k2p"),
])
def test_mirror_slice_name_keeps_the_suffix(service: str, slice_name: str, expected: str) -> None:
    assert names.mirror_slice_name("aws-sys-log-73736d-fluentd", service, slice_name) == expected


def test_mirror_slice_name_of_an_unrelated_slice_is_a_hash() -> None:
    got = names.mirror_slice_name("m", "svc", "custom-slice")
    assert got.startswith("m-") and got != "m-custom-slice" and names.is_subdomain(got)


@pytest.mark.parametrize(("cluster", "namespace", "value", "expected"), [
    ("gcp", "sys-log", "forwarder", "gcp-sys-log-forwarder"),
])
def test_network_set_name_is_semaphore_policys(cluster: str, namespace: str, value: str, expected: str) -> None:
    assert names.network_set_name(cluster, namespace, value) == expected


def test_network_set_name_of_a_label_value_calico_refuses() -> None:
    got = names.network_set_name("gcp", "ns", "My_App")
    assert names.is_subdomain(got)
    assert got != names.network_set_name("gcp", "ns", "my-app")
