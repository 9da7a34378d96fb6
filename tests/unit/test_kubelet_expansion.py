"""`$(VAR)` expansion as the kubelet does it: env values (dependent variables), command, args."""

from __future__ import annotations

from typing import Any

import pytest

from tether.local.kubelet import environment

ENV = {"POD_IP": "10.1.0.7", "PORT": "8080", "EMPTY": "", "my.dotted-name": "odd", "D": "$(PORT)"}


@pytest.mark.parametrize(("value", "expected"), [
    ("--bind-address=$(POD_IP)", "--bind-address=10.1.0.7"),
    ("$(POD_IP):$(PORT)", "10.1.0.7:8080"),
    ("$(EMPTY)x", "x"),  # a defined empty value is still a value
    ("$(MISSING)", "$(MISSING)"),  # unknown: left as written
    ("a$(MISSING)b$(PORT)", "a$(MISSING)b8080"),
    ("$$(PORT)", "$(PORT)"),  # escaped: a literal reference
    ("$$$(PORT)", "$8080"),  # an escaped `$`, then a reference
    ("$$$$", "$$"),
    ("$$", "$"),
    ("$", "$"),  # a `$` at the end stays
    ("cost: 5$", "cost: 5$"),
    ("$PORT", "$PORT"),  # shell syntax is not Kubernetes syntax
    ("${PORT}", "${PORT}"),
    ("$(PORT", "$(PORT"),  # never closed
    ("$(A $(PORT)", "$(A $(PORT)"),  # the name runs to the first `)`: `A $(PORT` is unknown
    ("$(POD_IP$(PORT)", "$(POD_IP$(PORT)"),
    ("$()", "$()"),
    ("$(my.dotted-name)", "odd"),  # upstream reads any name between the parentheses
    ("$(D)", "$(PORT)"),  # one pass: a value is not expanded again
    ("no references", "no references"),
    ("", ""),
])
def test_expand(value: str, expected: str) -> None:
    assert environment.expand(value, ENV) == expected


def _pod() -> dict[str, Any]:
    return {"metadata": {"name": "hub-0", "namespace": "tether-system", "uid": "u-1"},
            "spec": {"nodeName": "node-a", "enableServiceLinks": False},
            "status": {"podIP": "10.1.0.7", "hostIP": "10.0.0.2"}}


def _env(container: dict[str, Any], configmaps: dict[str, Any] | None = None) -> dict[str, str]:
    found = configmaps or {}
    return environment.container_env(_pod(), container, services=[],
                                     configmaps=lambda ns, n: found.get(n), secrets=lambda ns, n: None)


@pytest.mark.parametrize(("env", "expected"), [
    # a downward-API variable, then one built from it
    ([{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
      {"name": "LISTEN", "value": "$(POD_IP):8080"}], {"LISTEN": "10.1.0.7:8080"}),
    # only earlier variables: a later one is not seen yet
    ([{"name": "FIRST", "value": "$(SECOND)"}, {"name": "SECOND", "value": "2"}],
     {"FIRST": "$(SECOND)", "SECOND": "2"}),
    # a variable redefined: the reference sees the value at that point
    ([{"name": "X", "value": "1"}, {"name": "Y", "value": "$(X)"}, {"name": "X", "value": "3"}],
     {"X": "3", "Y": "1"}),
    ([{"name": "A", "value": "$$(A)"}], {"A": "$(A)"}),
    # envFrom comes first, so env may refer to it
    ([{"name": "MODE_FLAG", "value": "--mode=$(CFG_mode)"}], {"MODE_FLAG": "--mode=fast"}),
])
def test_env_values_refer_to_earlier_variables(env: list[dict[str, Any]], expected: dict[str, str]) -> None:
    container = {"envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}], "env": env}
    got = _env(container, {"cfg": {"data": {"mode": "fast"}}})
    assert {k: got[k] for k in expected} == expected


@pytest.mark.parametrize(("container", "command", "args"), [
    ({"command": ["tether"], "args": ["hub", "run", "--bind-address", "$(POD_IP)", "--port", "$(PORT)"],
      "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
              {"name": "PORT", "value": "8080"}]},
     ["tether"], ["hub", "run", "--bind-address", "10.1.0.7", "--port", "8080"]),
    # not declared by the container: left as written, as upstream does (no kubelet extras)
    ({"args": ["--ip=$(POD_IP)", "$(HOME)"]}, None, ["--ip=$(POD_IP)", "$(HOME)"]),
    ({"command": ["sh", "-c", "echo $$(NAME) $(NAME)"], "env": [{"name": "NAME", "value": "n"}]},
     ["sh", "-c", "echo $(NAME) n"], None),
])
def test_expand_command_uses_the_containers_own_env(container: dict[str, Any], command: list[str] | None,
                                                     args: list[str] | None) -> None:
    expanded = environment.expand_command(container, _env(container))
    assert expanded.get("command") == command
    assert expanded.get("args") == args


def test_expand_command_leaves_the_pod_spec_alone() -> None:
    container = {"name": "c", "args": ["$(A)"], "env": [{"name": "A", "value": "a"}]}
    expanded = environment.expand_command(container, _env(container))
    assert expanded["args"] == ["a"] and container["args"] == ["$(A)"]
