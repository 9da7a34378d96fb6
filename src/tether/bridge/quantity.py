"""Kubernetes resource quantities as exact fractions, for the downward API's `resourceFieldRef`."""

from __future__ import annotations

import math
import re
from fractions import Fraction

_SUFFIXES: dict[str, Fraction] = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?")


class QuantityError(ValueError):
    pass


def parse(text: str) -> Fraction:
    """`500m` -> 1/2, `1Gi` -> 1073741824, `1e3` -> 1000."""
    match = _QUANTITY.fullmatch(text.strip())
    if not match:
        raise QuantityError(f"quantities must match the regular expression "
                            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}")
    number, suffix = Fraction(match.group(1)), match.group(2) or ""
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return number * Fraction(10) ** int(suffix[1:])
    return number * _SUFFIXES[suffix]


def scaled_ceiling(value: Fraction, divisor: Fraction) -> int:
    """How the kubelet renders a resource for the downward API: value/divisor rounded up."""
    return math.ceil(value / divisor)
