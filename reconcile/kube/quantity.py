"""Resource quantities as the API server parses them (k8s.io/apimachinery/pkg/api/resource).

`parse_quantity` gives the value as a Fraction, as `resource.ParseQuantity` keeps it:
`500m` is 1/2, `1Gi` is 2**30, `1e3` is 1000; a fraction of a nano rounded up away from
zero (`0.00000012345` is 124n); a binary-suffixed value capped at 2**63-1 in magnitude
(`9Ei` is 9223372036854775807; decimal ones are kept: `12E` is 12*10**18). The scheduler
compares integers: `milli_value` for cpu (millicores, `Quantity.MilliValue`) and `value`
for everything else (bytes, devices, pods; `Quantity.Value`): rounded away from zero and
saturated to int64 (quantity.go, amount.go AsScaledInt64, math.go positiveScaleInt64).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Final

_BINARY: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
# <signedNumber><suffix>, the grammar of resource.ParseQuantity.
_QUANTITY: Final = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)


MOST_POSITIVE: Final = (1 << 63) - 1  # math.go mostPositive, quantity.go maxAllowed
MOST_NEGATIVE: Final = -(1 << 63)
_NANO: Final = Fraction(1, 10**9)


class QuantityError(ValueError):
    """Not a quantity the API server accepts."""


def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity (`100m`, `2Gi`, `1.5`, `1e3`, or a plain number as YAML
    gives one). Raises QuantityError with the API server's wording for anything else."""
    if isinstance(text, bool):
        raise QuantityError(f"quantities must match the regular expression '{_QUANTITY.pattern}'")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        return _in_nanos(Fraction(str(text)), binary=False)
    match = _QUANTITY.fullmatch(text.strip()) if text == text.strip() else None
    if match is None:
        raise QuantityError(
            f"quantities must match the regular expression "
            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}"
        )
    number = Fraction(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        amount = number * (1 << (10 * _BINARY[suffix]))
    elif suffix in _DECIMAL:
        amount = number * Fraction(10) ** _DECIMAL[suffix]
    else:
        amount = number * Fraction(10) ** int(suffix[1:])
    return _in_nanos(amount, binary=suffix in _BINARY)


def _in_nanos(amount: Fraction, *, binary: bool) -> Fraction:
    """A non-zero magnitude rounded up to a whole nano; a binary one capped at 2**63-1."""
    magnitude = _away_from_zero(abs(amount) / _NANO) * _NANO
    if binary and magnitude > MOST_POSITIVE:
        magnitude = Fraction(MOST_POSITIVE)  # "The max is just a simple cap."
    return -magnitude if amount < 0 else magnitude


def _away_from_zero(amount: Fraction) -> int:
    return math.ceil(amount) if amount >= 0 else math.floor(amount)


def _saturated(amount: int) -> int:
    return max(MOST_NEGATIVE, min(MOST_POSITIVE, amount))


def value(text: str | int | float) -> int:
    """`Quantity.Value()`: the whole value, rounded away from zero, saturated to int64."""
    return _saturated(_away_from_zero(parse_quantity(text)))


def milli_value(text: str | int | float) -> int:
    """`Quantity.MilliValue()`: the value in thousandths, rounded away from zero,
    saturated to int64."""
    return _saturated(_away_from_zero(parse_quantity(text) * 1000))
