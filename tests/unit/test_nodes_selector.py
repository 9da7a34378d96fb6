"""Calico selector grammar (IPPool nodeSelector): parsing and evaluation, table-driven."""

from __future__ import annotations

import pytest

from tether.objects.calico_selector import SelectorError, matches, parse

RACK0 = {"rack": "0", "kubernetes.io/hostname": "n0", "zone": "a"}
RACK1 = {"rack": "1", "kubernetes.io/hostname": "n2"}
BARE: dict[str, str] = {}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("all()", BARE, True),
        ("", BARE, True),
        ("   ", RACK0, True),
        ("global()", RACK0, True),
        ("!all()", RACK0, False),
        ('rack == "0"', RACK0, True),
        ("rack == '0'", RACK0, True),
        ('rack == "0"', RACK1, False),
        ('rack == "0"', BARE, False),
        ('rack != "0"', RACK1, True),
        ('rack != "0"', BARE, True),  # Calico: a missing label is "not equal"
        ('rack != "0"', RACK0, False),
        ("has(rack)", RACK1, True),
        ("has(rack)", BARE, False),
        ("!has(rack)", BARE, True),
        ('rack in {"0", "1"}', RACK1, True),
        ('rack in {"2"}', RACK1, False),
        ('rack in {"0"}', BARE, False),
        ("rack in {}", RACK0, False),
        ('rack not in {"0"}', RACK1, True),
        ('rack not in {"0"}', BARE, True),
        ('rack not in {"0","1"}', RACK0, False),
        ('rack == "0" && zone == "a"', RACK0, True),
        ('rack == "0" && zone == "b"', RACK0, False),
        ('rack == "9" || zone == "a"', RACK0, True),
        ('rack == "9" || has(nothing) && all()', RACK0, False),
        # && binds tighter than ||
        ('rack == "0" || rack == "1" && has(zone)', RACK1, False),
        ('rack == "1" || rack == "0" && has(zone)', RACK1, True),
        ('(rack == "0" || rack == "1") && has(zone)', RACK1, False),
        ('!(rack == "0")', RACK1, True),
        ('!!(rack == "0")', RACK0, True),
        ('kubernetes.io/hostname == "n0"', RACK0, True),
        ('kubernetes.io/hostname starts with "n"', RACK0, True),
        ('kubernetes.io/hostname ends with "2"', RACK1, True),
        ('kubernetes.io/hostname contains "x"', RACK1, False),
        ('rack=="0"&&zone=="a"', RACK0, True),
    ],
)
def test_selector_matches(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert matches(selector, labels) is expected


@pytest.mark.parametrize(
    "selector",
    ['rack == 0', 'rack ==', '== "0"', '(rack == "0"', 'rack == "0")', "has(rack", 'rack in {"0"',
     'rack in "0"', 'rack == "0" &&', "rack", 'rack = "0"', 'rack == "0" rack == "1"', 'a not "x"',
     "all(", 'rack == "0', "@"],
)
def test_invalid_selectors_are_rejected(selector: str) -> None:
    with pytest.raises(SelectorError):
        parse(selector)


def test_error_names_the_position() -> None:
    with pytest.raises(SelectorError, match=r"at 8"):
        parse('rack == 0')
