"""Resource quantities as the API server parses them (k8s.io/apimachinery/pkg/api/resource).

`parse_quantity` gives the exact value as a Fraction: `500m` is 1/2, `1Gi` is 2**30,
`1e3` is 1000. The scheduler compares integers: `milli_value` for cpu (millicores,
rounded up as `Quantity.MilliValue` does) and `value` for everything else (bytes,
devices, pods; rounded up as `Quantity.Value`).
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
        return Fraction(str(text))
    match = _QUANTITY.fullmatch(text.strip()) if text == text.strip() else None
    if match is None:
        raise QuantityError(
            f"quantities must match the regular expression "
            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}"
        )
    number = Fraction(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return number * (1 << (10 * _BINARY[suffix]))
    if suffix in _DECIMAL:
        return number * Fraction(10) ** _DECIMAL[suffix]
    return number * Fraction(10) ** int(suffix[1:])


def value(text: str | int | float) -> int:
    """`Quantity.Value()`: the value rounded up to a whole number."""
    return math.ceil(parse_quantity(text))


def milli_value(text: str | int | float) -> int:
    """`Quantity.MilliValue()`: the value in thousandths, rounded up."""
    return math.ceil(parse_quantity(text) * 1000)
